"""The feedback pages' Markdown (autograder/report/book_markdown.py, autograder/core/citations.py): math as MathML,
TeX that cannot be converted shown as written, citations as text, and nothing active through MathML.
Every formula of the solution notebooks converts."""

import glob
import re
from pathlib import Path

import nbformat
import pytest
from nbconvert.filters.markdown_mistune import MarkdownWithMath

from autograder.core.citations import Reference, cite, read_references
from autograder.core.course import GradingError
from autograder.report import book_markdown
from autograder.report.feedback import markdown_text
from autograder.report.sanitize import sanitized_html

REPO = Path(__file__).resolve().parents[1]
REFERENCES = {"vaswani2017attention": Reference("Vaswani et al.", "2017"),
              "ba2016layer": Reference("Ba and Hinton", "2016")}


def page(source: str) -> str:
    return sanitized_html(book_markdown.render(source, REFERENCES))


def test_math_becomes_mathml_and_citations_text():
    html = page("Divide by $\\sqrt{d_k}$ as {cite:t}`vaswani2017attention` do "
                "{cite:p}`vaswani2017attention,ba2016layer`."
                "\n\n$$\\begin{aligned} a &= b \\\\ c &= d \\end{aligned}$$")
    assert '<math display="inline"><mrow><msqrt>' in html and '<math display="block">' in html and "<mtable" in html
    assert "as Vaswani et al. (2017) do (Vaswani et al., 2017; Ba and Hinton, 2016)." in html
    assert "$" not in html and "{cite" not in html


def test_math_of_a_sanitized_cell_is_read_as_written():
    from nbconvert.preprocessors.sanitize import SanitizeHTML
    from nbformat.v4 import new_markdown_cell, new_notebook

    notebook = new_notebook(cells=[new_markdown_cell("Masked where $j > i$, kept where $j < i$:\n\n"
                                                     "$$\\begin{aligned} a &= b \\\\ c &= d \\end{aligned}$$")])
    notebook, _ = SanitizeHTML(strip=True).preprocess(notebook, {})  # as feedback.student_view does
    assert "&gt;" in notebook.cells[0].source and "&amp;" in notebook.cells[0].source
    html = page(notebook.cells[0].source)
    assert "<mo>&gt;</mo>" in html and "<mo>&lt;</mo>" in html and "<mtable" in html and "&amp;" not in html


def test_what_cannot_be_converted_is_shown_as_written_and_code_stays_code():
    html = page("$x^{$ and $\\nosuchcommand{y}$ and `$z$ {cite:t}`, {cite:p}`unknown`\n\n$$\\frac{1}{$$")
    assert "<code>$x^{$</code>" in html and "<code>$\\nosuchcommand{y}$</code>" in html
    assert "<pre><code>$$\\frac{1}{$$</code></pre>" in html
    assert "<code>$z$ {cite:t}</code>" in html and "([unknown])" in html


@pytest.mark.parametrize("source", [
    "$\\text{</math><img src=x onerror=alert(1)>}$",
    "$\\href{javascript:alert(1)}{x}$ $\\style{background:url(https://example.org/)}{y}$ $\\class{c}{z}$",
    '<math><annotation-xml encoding="text/html"><img src=x onerror=alert(1)></annotation-xml>'
    '<mi href="javascript:alert(1)" style="color:red">y</mi><maction actiontype="toggle"><mi>a</mi></maction></math>',
])
def test_nothing_active_passes_through_mathml(source):
    html = page(source)
    assert not re.search(r"<(img|annotation|maction)", html) \
        and not re.search(r"<[^>]*\s(on\w+|href|style)=", html), html
    assert "<math" in html


def test_the_summary_s_text_is_never_read_as_math_or_a_citation():
    assert book_markdown.render(markdown_text("$x$ and {cite:t}`vaswani2017attention`"), REFERENCES) == \
        "<p>$x$ and {cite:t}`vaswani2017attention`</p>\n"


def test_every_formula_of_the_solutions_converts():
    formulas = []

    class Collector(book_markdown.FeedbackRenderer):
        def _math(self, tex, display, delimiter):
            formulas.append(tex)
            return ""

    for path in sorted(glob.glob(str(REPO / "solutions" / "*" / "*.ipynb"))):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "markdown":
                MarkdownWithMath(renderer=Collector({})).render(cell.source)
    assert len(formulas) > 100
    assert [tex for tex in formulas if book_markdown.tex_to_mathml(tex, True) is None] == []


def test_citations_read_the_course_s_references():
    references = read_references(REPO / "references.bib")
    assert cite("t", "vaswani2017attention", references) == "Vaswani et al. (2017)"
    assert cite("p", "hendrycks2016gaussian, devlin2019bert", references) \
        == "(Hendrycks and Gimpel, 2016; Devlin et al., 2019)"
    assert read_references(REPO / "no-such.bib") == {}


def test_references_are_read_with_pybtex_s_text_backend_looked_up_once(monkeypatch):
    import pybtex.plugin

    lookups = []
    find_plugin = pybtex.plugin.find_plugin
    monkeypatch.setattr(pybtex.plugin, "find_plugin", lambda *args: lookups.append(args) or find_plugin(*args))
    references = read_references(REPO / "references.bib")
    assert lookups == [("pybtex.backends", "text")]  # once, not once per name (seconds for the course's)
    assert len(references) > 50 and references["bucilua2006model"].authors == "Buciluǎ et al."  # LaTeX's ǎ as text


def test_an_unreadable_bibliography_is_one_line(tmp_path):
    (tmp_path / "references.bib").write_text("@article{x, author = {A and B, year = 2020}\n@@@")
    with pytest.raises(GradingError, match=r"references.bib cannot be read as BibTeX: .*expected") as error:
        read_references(tmp_path / "references.bib")
    assert "\n" not in str(error.value)
