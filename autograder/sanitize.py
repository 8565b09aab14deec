"""What a submission wrote, made inert before anyone's browser shows it.

A submission's Markdown cells and the outputs of its code are the student's: they may hold scripts,
event handlers and ``javascript:`` links. :func:`sanitized_html` cleans HTML rendered from Markdown
(the feedback page's template filter); :func:`inert_notebook` makes the graded notebook that the
grader keeps for nbgrader's formgrader as safe, since the formgrader renders a notebook's Markdown
and HTML outputs as they are, inside the instructor's Jupyter session (where a script could open a
terminal).
"""

import copy
import functools

from autograder import book_markdown
from autograder.citations import Reference

SAFE_TAGS = {"a", "abbr", "b", "blockquote", "br", "code", "dd", "del", "div", "dl", "dt", "em", "h1", "h2", "h3", "h4",
             "h5", "h6", "hr", "i", "li", "ol", "p", "pre", "span", "strong", "sub", "sup", "table", "tbody", "td",
             "th", "thead", "tr", "ul"}
SAFE_ATTRIBUTES = {"a": ["href", "title", "class"], "*": ["id", "class"], "th": ["align"], "td": ["align"]}


@functools.lru_cache(maxsize=256)
def sanitized_html(html_text: str) -> str:
    """HTML rendered from Markdown, with what a page needs for text kept (headings, paragraphs, lists,
    tables, code, links to http, https and mailto, MathML's presentation elements) and everything else
    removed: scripts, event handlers, styles, frames, forms, images, other link schemes.

    A job sanitizes most Markdown cells twice, for the notebook kept for the formgrader and for the
    feedback page: the last results are kept, by their whole text (bleach is most of the cost)."""
    import bleach

    return bleach.clean(html_text, tags=SAFE_TAGS | book_markdown.MATHML_TAGS,
                        attributes={**SAFE_ATTRIBUTES, **book_markdown.MATHML_ATTRIBUTES},
                        protocols=["http", "https", "mailto"], strip=True)


def inert_notebook(notebook, references: dict[str, Reference]):
    """A copy of ``notebook`` that runs no script wherever it is rendered: each Markdown or raw cell
    becomes its sanitized HTML (math as MathML, citations of ``references`` as text, no Markdown left
    for a renderer to read again), and the outputs
    of code cells go through nbconvert's sanitizer (HTML, Markdown and SVG cleaned, JavaScript and
    other active outputs dropped). Code cells' sources are kept: they are text, never rendered as HTML."""
    from nbconvert.preprocessors.sanitize import SanitizeHTML

    sanitizer = SanitizeHTML(strip=True)
    notebook = copy.deepcopy(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = sanitizer.sanitize_code_outputs(cell.outputs)
        else:  # brackets as entities: no renderer reads the HTML's text as a Markdown link again
            html = sanitized_html(book_markdown.render(cell.source, references))
            cell.source = html.replace("[", "&#91;").replace("]", "&#93;")
    return notebook
