"""Feedback for a student: the graded notebook without any hidden test, sanitized and bounded, in a locked page.

:func:`student_view` turns the graded notebook (:mod:`autograder.report.graded_notebook`) into what the
student may see: every test cell holds the released source (the hidden tests removed, as the
student received it) and, as its only output, the grader's outcome; a summary of the grades opens
the notebook. The hidden tests never ran in the student's process, so no output of the student's
code can hold them.

Everything in it that comes from the submission is treated as hostile: :func:`student_view` runs nbconvert's
HTML sanitizer on the outputs (HTML, Markdown and SVG cleaned, JavaScript and other active outputs dropped);
:func:`render` renders the page with nbgrader's feedback exporter with sanitizing on, each Markdown cell
rendered and sanitized as the notebook kept for the formgrader is (:mod:`autograder.report.sanitize`), escapes what
the grader writes itself (messages, names), and puts a Content-Security-Policy in the page that allows no
script, no remote resource and no form: whatever slipped through would not run.

The page is bounded (:mod:`autograder.bounds`), and so is the grader's work on it: it shows at most
``MAX_SHOWN_CELL_CHARS`` characters of one cell's source, ``MAX_SHOWN_CHARS`` of all and ``MAX_SHOWN_CELLS``
cells, cut before they are highlighted or rendered, each cut with a line that says how much
(:class:`autograder.report.sanitize.SourceBudget`), at most ``MAX_SHOWN_OUTPUT_CHARS`` characters and
``MAX_SHOWN_OUTPUTS`` outputs of the cells' outputs, and its Markdown's HTML is parsed within a
:class:`autograder.core.cell_outputs.TagBudget`. A page still larger than ``MAX_FEEDBACK_PAGE_BYTES`` is not written
(:class:`PageTooLarge`): the job writes the plain page of the grades instead.

Since no script runs, the Markdown cells' math is rendered to MathML and their citations to text on
the grader (:mod:`autograder.report.book_markdown`); the page loads no MathJax.
"""

import copy
import functools
import html
import itertools
import re

from jinja2 import pass_context
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from autograder.bounds import MAX_FEEDBACK_PAGE_BYTES, MAX_SHOWN_OUTPUT_CHARS, MAX_SHOWN_OUTPUTS
from autograder.core import Chapter, NotebookResult, OutputBudget, Reference, Status, TagBudget, clean, grade_id
from autograder.report.graded_notebook import MARKS, outcome_text
from autograder.report.sanitize import SourceBudget, markdown_html, output_sanitizer, sanitized_html

CONTENT_SECURITY_POLICY = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; font-src data:; "
                           "base-uri 'none'; form-action 'none'")
_POLICY_TAG = f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">'.encode()


class PageTooLarge(Exception):
    """A feedback page larger than ``MAX_FEEDBACK_PAGE_BYTES``: the job writes the plain page of the grades instead."""


def markdown_text(text: str) -> str:
    """``text`` as literal Markdown on one line: HTML escaped, Markdown's punctuation (and the ``$`` of
    math) backslashed."""
    escaped = html.escape(" ".join(str(text).split()), quote=False)
    return re.sub(r"([\\`*_{}\[\]()#+\-.!|~$])", r"\\\1", escaped)


def summary(result: NotebookResult) -> str:
    """The Markdown that opens the feedback: the score, why the notebook could not be graded, and
    each test's status, points and its message in one line (the hint of a known mistake included)."""
    lines = [f"## Grading: {result.score:g} / {result.max_score:g} points", ""]
    if result.problem:
        lines += [f"**This submission could not be graded:** {markdown_text(result.problem)}", ""]
    lines += [markdown_text(note) for note in result.notes]
    lines += ["", "| test | status | points | message |", "|---|---|---:|---|"]
    for test in result.tests:
        lines.append(f"| {markdown_text(test.grade_id)} | {MARKS.get(test.status, '')} {test.status} | "
                     f"{test.points:g} / {test.max_points:g} | {markdown_text(test.headline)} |")
    return "\n".join(lines)


def student_view(graded, chapter: Chapter, result: NotebookResult, printed: dict[str, str]):
    """The graded notebook as the student may see it (see the module's docstring): a new notebook, whose
    cells' sources are cut to what the page shows of them (the cells it has no room for replaced, a run of them
    at a time, by a line that says so), and whose outputs are cleaned again within what the page shows of outputs
    (:func:`autograder.core.cell_outputs.clean`), then sanitized. A raw cell becomes a Markdown cell: a page shows both
    as HTML, which the Markdown cells' filters render and sanitize. Test cells are always shown."""
    sanitizer = output_sanitizer()
    shown = SourceBudget()
    outputs = OutputBudget(MAX_SHOWN_OUTPUT_CHARS, MAX_SHOWN_OUTPUTS, "the page")
    tests = {test.grade_id: test for test in result.tests}

    def view(cell):
        """The cell as the page shows it; None when the page has no room left for it."""
        name, metadata = grade_id(cell), copy.deepcopy(cell.metadata)
        if name in tests and cell.cell_type == "code":
            outcome = _stream(outcome_text(tests[name], printed.get(name, "")), tests[name].status)
            return new_code_cell(chapter.test(name).released, metadata=metadata, outputs=[outcome])
        if cell.cell_type == "code":
            source = shown.code(cell.source)
            return None if source is None else new_code_cell(source, metadata=metadata, outputs=(
                sanitizer.sanitize_code_outputs(clean(cell.outputs, outputs))))
        source = shown.markdown(cell.source)
        return None if source is None else new_markdown_cell(source, metadata=metadata)

    cells = [new_markdown_cell(summary(result))]
    for left_out, run in itertools.groupby(((view(cell), cell.source) for cell in graded.cells),
                                           key=lambda pair: pair[0] is None):
        run = list(run)
        cells += [new_markdown_cell(SourceBudget.not_shown([source for _, source in run]))] if left_out else [
            shown_cell for shown_cell, _ in run]
    return new_notebook(cells=cells, metadata=copy.deepcopy(graded.metadata))


def _stream(text: str, status: Status):
    from nbformat.v4 import new_output

    return new_output("stream", name="stdout" if status == Status.PASSED else "stderr", text=text)


def lock(page: bytes) -> bytes:
    """The page with its Content-Security-Policy, first thing in its head."""
    match = re.search(rb"<head[^>]*>", page, re.IGNORECASE)
    at = match.end() if match else 0
    return page[:at] + _POLICY_TAG + page[at:]


@functools.cache
def exporter():
    """This process's exporter of feedback pages (:func:`autograder.report.feedback_exporter.feedback_exporter`),
    made once: the class run forks each job's worker from a server that made it and compiled its
    template (:mod:`autograder.worker_preload`), so that no job does it again."""
    from autograder.report.feedback_exporter import feedback_exporter

    return feedback_exporter({"book_markdown": _book_markdown, "sanitized_html": sanitized_html})


@pass_context
def _book_markdown(context, source: str) -> str:
    """The template's filter ``book_markdown``: a Markdown cell's HTML
    (:func:`~autograder.report.sanitize.markdown_html`), with the citations of the page's ``references`` and
    within the page's ``tags`` (resources of the page: the exporter serves every page)."""
    resources = context["resources"]
    return markdown_html(source, resources["references"], resources["tags"])


def render(view, result: NotebookResult, chapter: Chapter, references: dict[str, Reference]) -> bytes:
    """The feedback page of a student's view, rendered as nbgrader's feedback converter renders it and
    locked; ``references`` are the course's, for the citations of its Markdown cells. Raises
    :class:`PageTooLarge` for a page of more than ``MAX_FEEDBACK_PAGE_BYTES``."""
    resources = {"references": references, "tags": TagBudget("the page")}
    page = lock(render_feedback(exporter(), view, result, chapter.notebook, resources).encode())
    if len(page) > MAX_FEEDBACK_PAGE_BYTES:
        raise PageTooLarge(f"the page would be {len(page) / 1e6:.1f} MB, more than the limit of "
                           f"{MAX_FEEDBACK_PAGE_BYTES / 1e6:g} MB")
    return page


def render_feedback(exporter, notebook, result: NotebookResult, notebook_name: str, resources: dict) -> str:
    """nbgrader's feedback page of ``notebook`` (the graded notebook as the student may see it), rendered by
    ``exporter`` (:func:`~autograder.report.feedback_exporter.feedback_exporter`) as nbgrader's feedback
    converter renders it: with the resources the converter gives the exporter (and ``resources``, for the
    template's filters) and the grades its ``GetGrades`` preprocessor reads from a gradebook holding ``result``
    (:func:`~autograder.core.nbgrader_adapter.store_grades`), which :func:`graded_cells` puts into the notebook
    itself."""
    nbgrader_resources = {"student": result.student, "assignment": result.chapter, "notebook": notebook_name,
                          "score": result.score, "max_score": result.max_score, "late_penalty": 0}
    page, _ = exporter.from_notebook_node(graded_cells(notebook, result), {
        "unique_key": notebook_name, "output_files_dir": f"{notebook_name}_files", "nbgrader": nbgrader_resources,
        "metadata": {"name": notebook_name}, **resources})
    return page


def graded_cells(notebook, result: NotebookResult):
    """A copy of ``notebook`` whose nbgrader cells hold what nbgrader's ``GetGrades`` reads from a
    gradebook holding ``result``: a grade cell its score (its test's points; 0 without a test, as a
    grade nobody scored) and its maximum, a solution or task cell its automatic comment (the flag of
    a copy of the reference, else none). The notebook's score and maximum are the result's: the
    chapters' graded cells are their test cells (:class:`autograder.core.chapters.Chapter`)."""
    points = {test.grade_id: test.points for test in result.tests}
    flags = {flag.exercise: f"Possible {flag.describe()}" for flag in result.copies}
    notebook = copy.deepcopy(notebook)
    for cell in notebook.cells:
        nbgrader = cell.metadata.get("nbgrader")
        if nbgrader is None:
            continue
        if nbgrader.get("solution", False) or nbgrader.get("task", False):
            nbgrader["comment"] = flags.get(nbgrader["grade_id"])
        if nbgrader.get("grade", False) or nbgrader.get("task", False):
            nbgrader["score"] = points.get(nbgrader["grade_id"], 0.0)
            nbgrader["points"] = float(nbgrader["points"])
    return notebook


def plain_page(result: NotebookResult, why: str) -> bytes:
    """A feedback page made without nbconvert (when rendering failed or ran out of time): the grades."""
    rows = "".join(f"<tr><td>{html.escape(test.grade_id)}</td><td>{html.escape(test.status)}</td>"
                   f"<td>{test.points:g} / {test.max_points:g}</td><td><pre>{html.escape(test.message)}</pre></td></tr>"
                   for test in result.tests)
    page = (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{html.escape(result.chapter)}</title></head>"
            f"<body><h2>{html.escape(result.chapter)}: {result.score:g} / {result.max_score:g} points</h2>"
            f"<p>{html.escape(why)}</p><table>{rows}</table></body></html>")
    return lock(page.encode())
