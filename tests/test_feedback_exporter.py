"""The feedback pages are nbconvert's and nbgrader's: the exporter gives nbconvert's HTMLExporter's
page, without its second pass; a page, rendered by the one exporter of the grader's process, is byte
for byte the page nbgrader's feedback converter renders from a gradebook holding the grades (how the
grader rendered each page, with a new exporter, until then), for every chapter's solution and for a
notebook with a catalogued mistake, a blank exercise, an edited test and a copy of the reference."""

import base64
import copy
import functools
import shutil
from pathlib import Path

import nbformat
import pytest
from bs4 import BeautifulSoup
from nbconvert.exporters import HTMLExporter
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output
from traitlets.config import Config

from autograder import report
from autograder.bounds import Limits
from autograder.checks import visible_check
from autograder.checks.attention import SOFTMAX_MISTAKES, check_softmax
from autograder.core import cell_outputs
from autograder.core.chapters import load_chapters
from autograder.core.citations import read_references
from autograder.core.course import chapter_names, grade_id, is_solution
from autograder.core.nbgrader_adapter import (
    create_gradebook, nbgrader_api, quiet_nbgrader, register_chapters, store_grades)
from autograder.core.output_layout import JobFolder
from autograder.core.results import Certainty, Cause, NotebookResult, NotebookRun, Outcome, ReferenceCopy, Status
from autograder.job import Job, _feedback_page, grade_of, withhold_copies
from autograder.report import book_markdown, feedback, graded_notebook
from autograder.report.feedback_exporter import MISSING_ALT, FeedbackExporter, add_missing_alt
from autograder.report.sanitize import inert_notebook, sanitized_html
from autograder.run.sandbox import SandboxOptions

REPO = Path(__file__).resolve().parents[1]

PNG = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d49444154789c6360000002000154a24f5d"
    "0000000049454e44ae426082")).decode()


def notebook() -> nbformat.NotebookNode:
    """Markdown with an image that has alt text, code with an image output that has none, HTML output
    with a script (which the sanitizer removes), an error, and a stream."""
    cells = [
        new_markdown_cell("# A title\n\nSome *text* and ![a dot](data:image/png;base64," + PNG + ")."),
        new_code_cell("plot()", outputs=[new_output("display_data",
                                                    data={"image/png": PNG, "text/plain": "<Figure>"})]),
        new_code_cell("show()", outputs=[new_output("display_data", data={
            "text/html": "<b>bold</b><script>alert(1)</script><IMG SRC='x.png'>", "text/plain": "bold"})]),
        new_code_cell("1 / 0", outputs=[new_output("error", ename="ZeroDivisionError", evalue="division by zero",
                                                   traceback=["ZeroDivisionError: division by zero"])]),
        new_code_cell("print('hi')", outputs=[new_output("stream", name="stdout", text="hi\n")]),
    ]
    return new_notebook(cells=cells, metadata={"language_info": {"name": "python"}})


@pytest.mark.parametrize("sanitize", [True, False])
def test_the_page_is_nbconverts_page(sanitize):
    config = Config()
    config.HTMLExporter.sanitize_html = sanitize
    config.HTMLExporter.template_name = "classic"
    cells = notebook()  # one notebook for both: new cells get random ids
    theirs, _ = HTMLExporter(config=config).from_notebook_node(copy.deepcopy(cells))
    ours, _ = FeedbackExporter(config=config).from_notebook_node(copy.deepcopy(cells))
    # nbconvert's page went through BeautifulSoup once more; so does ours here, to compare them
    assert str(BeautifulSoup(ours, "html.parser")) == theirs
    assert ours.count(f'alt="{MISSING_ALT}"') == theirs.count(f'alt="{MISSING_ALT}"') >= 1
    assert ("<script>alert(1)</script>" in ours) == (not sanitize)


@pytest.mark.parametrize("tag, expected", [
    ('<img src="a.png">', f'<img alt="{MISSING_ALT}" src="a.png">'),
    ("<IMG SRC='a.png'/>", f"<img alt=\"{MISSING_ALT}\" SRC='a.png'/>"),
    ('<img alt="a plot" src="a.png">', '<img alt="a plot" src="a.png">'),
    ('<img src="a.png" alt="">', '<img src="a.png" alt="">'),
    ('<imgur src="a.png">', '<imgur src="a.png">'),
])
def test_images_without_alt_text_get_nbconverts(tag, expected):
    assert add_missing_alt(tag) == expected


# -- the page is nbgrader's feedback converter's ------------------------------------------------------

RAW_OUTPUTS = [  # what a student process reports, as the runner keeps it (cell_outputs.clean)
    [{"output_type": "stream", "name": "stdout", "text": "tensor([0.1, 0.2]) <b>not bold</b> & $x$\n"}],
    [{"output_type": "display_data", "data": {"image/png": PNG, "text/plain": "<Figure size 640x480 with 1 Axes>"}}],
    [{"output_type": "execute_result",
      "data": {"text/html": "<i>x</i><script>alert(1)</script><img src=x onerror=alert(2)>", "text/plain": "x"}}],
    [{"output_type": "stream", "name": "stderr", "text": "a warning\n"},
     {"output_type": "error", "ename": "ZeroDivisionError", "evalue": "division by zero",
      "traceback": ["\x1b[0;31mZeroDivisionError\x1b[0m: division by zero", "<script>alert(3)</script>"]}],
    [],
]
STUDENT_MARKDOWN = ("My notes, as {cite:t}`vaswani2017attention` write: $\\frac{QK^T}{\\sqrt{d_k}}$ "
                    "<script>alert(4)</script> [a link](javascript:alert(5)) ![img](files/figure.png)")


@pytest.fixture(scope="module")
def chapters():
    return load_chapters(REPO)


@pytest.fixture(scope="module")
def references():
    return read_references(REPO / "references.bib")


@pytest.fixture(scope="module")
def gradebook(tmp_path_factory):
    """A gradebook that knows every chapter, as the class run's did (nbgrader's generate_assignment)."""
    course = tmp_path_factory.mktemp("course")
    shutil.copytree(REPO / "solutions", course / "source", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    create_gradebook(course / "gradebook.db")
    register_chapters(course, f"sqlite:///{course / 'gradebook.db'}", chapter_names(REPO))
    return course / "gradebook.db"


def nbgrader_page(view, result: NotebookResult, notebook_name: str, references, gradebook: Path, folder: Path) -> bytes:
    """The page of ``view`` as the grader rendered it before: the grades stored in a copy of a gradebook
    that knows the chapter, the view written into an nbgrader course, and nbgrader's feedback converter,
    with a new exporter configured so, rendering it; then locked."""
    import nbgrader
    from nbgrader.api import Gradebook
    from nbgrader.converters import GenerateFeedback
    from nbgrader.utils import capture_log

    quiet_nbgrader()
    shutil.copyfile(gradebook, folder / "gradebook.db")
    with Gradebook(f"sqlite:///{folder / 'gradebook.db'}") as database:
        store_grades(database, result, notebook_name)
    path = folder / "autograded" / result.student / result.chapter / f"{notebook_name}.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(view, path)
    config = Config()
    config.GenerateFeedback.exporter_class = FeedbackExporter
    config.HTMLExporter.sanitize_html = True
    config.HTMLExporter.template_name = "sanitized_feedback"
    config.HTMLExporter.template_file = "sanitized_feedback.html.j2"
    config.HTMLExporter.extra_template_basedirs = [
        str(REPO / "autograder" / "templates"),
        str(Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates")]
    config.HTMLExporter.filters = {"book_markdown": functools.partial(book_markdown.render, references=references),
                                   "sanitized_html": sanitized_html}
    api = nbgrader_api(folder, f"sqlite:///{folder / 'gradebook.db'}", config)
    api.coursedir.assignment_id, api.coursedir.student_id = result.chapter, result.student
    converter = GenerateFeedback(coursedir=api.coursedir, parent=api)
    converter.force = True
    assert capture_log(converter)["success"]
    page = folder / "feedback" / result.student / result.chapter / f"{notebook_name}.html"
    return feedback.lock(page.read_bytes())


def solved(chapter_name: str):
    """The released notebook of a chapter with every exercise solved (the solution's code) and a
    Markdown cell of the student's."""
    solution = nbformat.read(REPO / "solutions" / chapter_name / f"{chapter_name}.ipynb", as_version=4)
    answers = {grade_id(cell): cell.source for cell in solution.cells if is_solution(cell)}
    notebook = nbformat.read(REPO / "chapters" / chapter_name / f"{chapter_name}.ipynb", as_version=4)
    for cell in notebook.cells:
        cell.source = answers.get(grade_id(cell), cell.source)
    notebook.cells.insert(3, new_markdown_cell(STUDENT_MARKDOWN))
    return notebook, solution


def graded_view(chapter, submission, instructor, outcomes: dict, problems: dict, copies: tuple):
    """The graded notebook, the student's view and the result of ``submission`` as a job makes them
    (autograder.job), the student's cells having shown RAW_OUTPUTS in turn and the tests given ``outcomes``."""
    budget = cell_outputs.OutputBudget()
    code = [index for index, cell in enumerate(submission.cells) if cell.cell_type == "code"]
    run = NotebookRun(outputs={index: cell_outputs.clean(RAW_OUTPUTS[number % len(RAW_OUTPUTS)], budget)
                               for number, index in enumerate(code)}, outcomes=outcomes)
    tests = tuple(grade_of(test, outcomes[test.grade_id], problems.get(test.grade_id), ()) for test in chapter.tests)
    tests, copies = withhold_copies(tests, copies, chapter)
    result = NotebookResult(student="alice", chapter=chapter.name, timestamp="2026-11-20T10:00:00+00:00", seed=1,
                            copies=copies, tests=tests)
    graded = graded_notebook.build(submission, instructor, chapter, run, result)
    printed = {name: outcome.output for name, outcome in outcomes.items()}
    return graded, feedback.student_view(graded, chapter, result, printed), result


def passed(chapter) -> dict:
    return {test.grade_id: Outcome(Status.PASSED, "", f"{test.exercise}: all 9 cases agree with the reference\n")
            for test in chapter.tests}


@pytest.mark.parametrize("chapter_name", chapter_names(REPO))
def test_the_page_of_a_solved_chapter_is_nbgrader_s(chapter_name, chapters, references, gradebook, tmp_path):
    chapter = chapters[chapter_name]
    _, view, result = graded_view(chapter, *solved(chapter_name), passed(chapter), {}, ())
    assert result.score == result.max_score > 0
    page = feedback.render(view, result, chapter, references)
    assert page == nbgrader_page(view, result, chapter.notebook, references, gradebook, tmp_path)
    assert b"Vaswani et al. (2017) write" in page and b"<math" in page
    assert b"<script" not in page and b"onerror" not in page and b'href="javascript' not in page


def test_the_page_of_a_catalogued_mistake_and_others_is_nbgrader_s(chapters, references, gradebook, tmp_path):
    chapter = chapters["01_attention"]
    mistake = SOFTMAX_MISTAKES[0]
    with pytest.raises(AssertionError) as failure:
        visible_check(check_softmax, mistake.implementation)
    outcomes = {**passed(chapter),
                "test_softmax": Outcome(Status.FAILED, f"line 5: print(visible_check(check_softmax, softmax))\n"
                                                       f"{failure.value}"),
                "test_causal_mask": Outcome(Status.ERROR, "not implemented yet (NotImplementedError)",
                                            cause=Cause.BLANK)}
    copies = (ReferenceCopy("scaled_dot_product_attention", "it uses bertlab.attention.scaled_dot_product_attention, "
                                                            "the reference", Certainty.CERTAIN),)
    _, view, result = graded_view(chapter, *solved("01_attention"), outcomes,
                               {"test_padding_mask": "the test cell test_padding_mask was edited"}, copies)
    assert {test.grade_id: test.status for test in result.tests if test.status != Status.PASSED} == {
        "test_softmax": Status.FAILED, "test_scaled_dot_product_attention": Status.FAILED,
        "test_causal_mask": Status.ERROR, "test_padding_mask": Status.TAMPERED}
    page = feedback.render(view, result, chapter, references)
    assert page == nbgrader_page(view, result, chapter.notebook, references, gradebook, tmp_path)
    assert mistake.hint.split(":")[0].encode() in page and b"Possible scaled_dot_product_attention (certain" in page


def test_one_exporter_serves_every_page_of_a_process_each_with_its_references(chapters, references):
    chapter = chapters["01_attention"]
    _, view, result = graded_view(chapter, *solved("01_attention"), passed(chapter), {}, ())
    feedback.render(view, result, chapter, references)
    template = feedback.exporter().template
    renamed = {**references, "vaswani2017attention": references["vaswani2017attention"].__class__("Someone", "1999")}
    page = feedback.render(view, result, chapter, renamed)
    assert feedback.exporter().template is template  # compiled once
    assert b"Someone (1999) write" in page and b"Vaswani et al. (2017) write" in feedback.render(view, result, chapter,
                                                                                               references)


def test_a_page_that_cannot_be_rendered_is_a_plain_one_that_says_why(chapters, references, monkeypatch, tmp_path):
    chapter = chapters["01_attention"]
    submission, instructor = solved("01_attention")
    outcomes = passed(chapter)
    tests = tuple(grade_of(test, outcomes[test.grade_id], None, ()) for test in chapter.tests)
    result = NotebookResult(student="alice", chapter=chapter.name, tests=tests)
    graded = graded_notebook.build(submission, instructor, chapter, NotebookRun(outcomes=outcomes), result)
    job = Job(student="alice", chapter=chapter, origin="alice.ipynb", timestamp="2026-11-20T10:00:00+00:00",
              fingerprint="", seed=1, submitted="", problem=None, notes=(), folder=JobFolder(tmp_path),
              chapter_source="", chapter_files="", limits=Limits(), sandbox=SandboxOptions(isolate=True),
              references=references)

    def broken(*args):
        raise KeyError("book_markdown")

    monkeypatch.setattr(report, "render", broken)  # the page the job renders through the report's interface
    page, problem = _feedback_page(job, graded, NotebookRun(outcomes=outcomes), result)
    assert problem == "the feedback page is a plain one: KeyError: 'book_markdown'"
    assert b"the feedback page is a plain one: KeyError" in page and b"01_attention: 9 / 9 points" in page


def test_a_job_sanitizes_a_markdown_cell_once_for_its_formgrader_notebook_and_its_page(chapters, references):
    chapter = chapters["06_bert"]
    graded, view, result = graded_view(chapter, *solved("06_bert"), passed(chapter), {}, ())
    sanitized_html.cache_clear()
    inert_notebook(graded, references)
    cells = sanitized_html.cache_info().misses
    feedback.render(view, result, chapter, references)
    assert sanitized_html.cache_info().hits >= 0.7 * cells  # those the view's sanitizer left as they were


def test_tables_and_math_that_cells_display_are_tables_and_math_on_the_page(chapters, references):
    """What a student's cells display as Markdown (chapter 10's tables, a name in math) or as an HTML table
    is a table and MathML on the page, as the book shows it; nothing of it is escaped into visible tags,
    and a script in either is removed."""
    chapter = chapters["10_tasks"]
    graded, _, result = graded_view(chapter, *solved("10_tasks"), passed(chapter), {}, ())
    markdown = ("| task | score |\n| --- | ---: |\n| pairs | $57.8$ |\n\n"
                "Labels of $\\mathtt{word\\_ids}[t]$.<script>alert(6)</script>")
    html_table = ("<table><thead><tr><th>model</th></tr></thead><tbody><tr><td>teacher</td></tr></tbody></table>"
                  "<img src=x onerror=alert(7)>")
    code = next(cell for cell in graded.cells if cell.cell_type == "code" and "nbgrader" not in cell.metadata)
    code.outputs = [new_output("display_data", data={"text/markdown": markdown, "text/plain": "<Markdown>"}),
                    new_output("display_data", data={"text/html": html_table, "text/plain": "<HTML>"})]
    page = feedback.render(feedback.student_view(graded, chapter, result, {}), result, chapter, references).decode()
    soup = BeautifulSoup(page, "html.parser")
    markdown_output, html_output = soup.select(".output_markdown")[0], soup.select(".output_html")[0]
    assert [cell.get_text() for cell in markdown_output.select("thead th")] == ["task", "score"]
    assert markdown_output.select_one("tbody td").get_text() == "pairs"
    assert markdown_output.select_one("tbody math") is not None  # $57.8$, typeset
    assert "_" in markdown_output.select("p math")[0].get_text() and "\\" not in markdown_output.get_text()
    assert [cell.get_text() for cell in html_output.select("table th, table td")] == ["model", "teacher"]
    assert "&lt;" not in str(markdown_output) + str(html_output), "a tag shown as text"
    assert "<script" not in page and "onerror" not in page  # the tags removed, their text left as text
