"""What a submission wrote, made inert before anyone's browser shows it, with the grader's work on it bounded.

A submission's Markdown cells and the outputs of its code are the student's: they may hold scripts,
event handlers and ``javascript:`` links. :func:`sanitized_html` cleans HTML rendered from Markdown
(the feedback page's template filter); :func:`inert_notebook` makes the graded notebook that the
grader keeps for nbgrader's formgrader as safe, since the formgrader renders a notebook's Markdown
and HTML outputs as they are, inside the instructor's Jupyter session (where a script could open a
terminal).

The sanitizer (bleach, on html5lib) works for a time that grows with the square of how deep or how wide
the elements of its HTML nest (60,000 unclosed ``<div>`` took it minutes), so it is handed at most
``MAX_HTML_TAGS`` start tags of one cell and ``MAX_NOTEBOOK_HTML_TAGS`` of one page
(:class:`autograder.core.cell_outputs.TagBudget`, :func:`markdown_html`); and a page shows at most
``MAX_SHOWN_CELL_CHARS`` characters of one cell's source, ``MAX_SHOWN_CHARS`` of all and ``MAX_SHOWN_CELLS``
cells (:class:`SourceBudget`). A Markdown cell longer
than that, or whose HTML has more tags, is shown as written (:func:`as_written`): escaped, cut, under a line
that says why and how much was cut (the bounds are in :mod:`autograder.bounds`).
"""

import copy
import functools
import html

from autograder.bounds import MAX_SHOWN_CELL_CHARS, MAX_SHOWN_CELLS, MAX_SHOWN_CHARS
from autograder.core import Reference, TagBudget, start_tags
import autograder.report.book_markdown as book_markdown

SAFE_TAGS = {"a", "abbr", "b", "blockquote", "br", "code", "dd", "del", "div", "dl", "dt", "em", "h1", "h2", "h3", "h4",
             "h5", "h6", "hr", "i", "li", "ol", "p", "pre", "span", "strong", "sub", "sup", "table", "tbody", "td",
             "th", "thead", "tr", "ul"}
SAFE_ATTRIBUTES = {"a": ["href", "title", "class"], "*": ["id", "class"], "th": ["align"], "td": ["align"]}
def note_html(text: str) -> str:
    """A line of the grader's in a page, in brackets and italics: HTML, and Markdown too (an HTML block)."""
    return f"<p><em>[{html.escape(text)}]</em></p>\n"


def as_written(text: str, why: str) -> str:
    """HTML that shows ``text`` as written: its first ``MAX_SHOWN_CELL_CHARS`` characters, escaped, under a line
    that says why it is not rendered and how much of it is cut. It is Markdown too: HTML blocks, which a
    Markdown renderer passes on as they are, in linear time."""
    shown = text[:MAX_SHOWN_CELL_CHARS]
    cut = f" {len(text) - len(shown):,} more characters of it are not shown." if len(shown) < len(text) else ""
    return (note_html(f"This cell is shown as written, not rendered: {why}.{cut}")
            + f"\n<pre>\n{html.escape(shown, quote=False)}</pre>\n")


class SourceBudget:
    """What is left of what one page shows of a submission's cells (a feedback page; the Markdown of the notebook
    kept for the formgrader): ``MAX_SHOWN_CHARS`` characters of their sources, ``MAX_SHOWN_CELL_CHARS`` of one,
    and ``MAX_SHOWN_CELLS`` cells (each costs the page its frame, however short)."""

    def __init__(self):
        self.chars = MAX_SHOWN_CHARS
        self.cells = MAX_SHOWN_CELLS

    def code(self, source: str) -> str | None:
        """A code cell's source as the page shows it: cut to what it may show of it, with a comment line that
        says how much was cut; None when the page has no room left for it."""
        shown = min(len(source), MAX_SHOWN_CELL_CHARS, self.chars)
        if not self.cells or (source and not shown):
            return None
        self.cells, self.chars = self.cells - 1, self.chars - shown
        if shown == len(source):
            return source
        limit = (f"a page shows at most {MAX_SHOWN_CELL_CHARS:,} of a cell" if shown == MAX_SHOWN_CELL_CHARS else
                 f"a page shows at most {MAX_SHOWN_CHARS:,} of the notebook's cells")
        return f"{source[:shown]}\n# [{len(source) - shown:,} more characters of this cell are not shown: {limit}]"

    def markdown(self, source: str) -> str | None:
        """A Markdown (or raw) cell's source as the page shows it: as it is, to be rendered, when it has at most
        ``MAX_SHOWN_CELL_CHARS`` characters, else as written and cut (:func:`as_written`); None when the page has
        no room left for it."""
        shown = min(len(source), MAX_SHOWN_CELL_CHARS)
        if not self.cells or shown > self.chars:
            return None
        self.cells, self.chars = self.cells - 1, self.chars - shown
        if shown == len(source):
            return source
        return as_written(source, f"it has {len(source):,} characters, more than the {MAX_SHOWN_CELL_CHARS:,} a page "
                                  "renders of a cell")

    @staticmethod
    def not_shown(sources: list[str]) -> str:
        """The line, in HTML (and Markdown), that stands for cells a page has no room for."""
        return note_html(f"{len(sources):,} cell(s) of {sum(map(len, sources)):,} characters are not shown here: a "
                         f"page shows at most {MAX_SHOWN_CELLS:,} cells and {MAX_SHOWN_CHARS:,} characters of the "
                         "notebook's own.")


def markdown_html(source: str, references: dict[str, Reference], tags: TagBudget) -> str:
    """A Markdown cell's HTML, not yet sanitized (:func:`autograder.report.book_markdown.render`, with the citations of
    ``references``); the cell as written (:func:`as_written`) when ``tags`` does not admit its HTML, unless that
    HTML has no more tags than the cell as written (a line of the grader's, a cell already shown as written)."""
    rendered = book_markdown.render(source, references)
    refusal = tags.admit(rendered)
    if refusal is None:
        return rendered
    written = as_written(source, refusal)
    return rendered if start_tags(rendered) <= start_tags(written) else written


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


def output_sanitizer():
    """nbconvert's sanitizer of code cells' outputs (HTML and Markdown cleaned with bleach, JavaScript and
    other active outputs dropped), keeping the tags and attributes of :func:`sanitized_html`: a table a
    cell displays stays a table."""
    from nbconvert.preprocessors.sanitize import SanitizeHTML

    return SanitizeHTML(strip=True, tags=sorted(SAFE_TAGS), attributes=SAFE_ATTRIBUTES)


def inert_notebook(notebook, references: dict[str, Reference]):
    """A copy of ``notebook`` that runs no script wherever it is rendered: each Markdown or raw cell
    becomes its sanitized HTML (math as MathML, citations of ``references`` as text, no Markdown left
    for a renderer to read again), within a page's bounds (:class:`SourceBudget`,
    :class:`~autograder.core.cell_outputs.TagBudget`), and the
    outputs of code cells go through nbconvert's sanitizer (HTML, Markdown and SVG cleaned, JavaScript and
    other active outputs dropped). Code cells' sources are kept: they are text, never rendered as HTML."""
    sanitizer = output_sanitizer()
    shown, tags = SourceBudget(), TagBudget("the notebook")
    notebook = copy.deepcopy(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = sanitizer.sanitize_code_outputs(cell.outputs)
        else:  # brackets as entities: no renderer reads the HTML's text as a Markdown link again
            source = shown.markdown(cell.source)
            html_text = (SourceBudget.not_shown([cell.source]) if source is None else
                         sanitized_html(markdown_html(source, references, tags)))
            cell.source = html_text.replace("[", "&#91;").replace("]", "&#93;")
    return notebook
