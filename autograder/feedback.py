"""Feedback for a student: the graded notebook without any hidden test, sanitized, in a locked page.

:func:`student_view` turns the graded notebook (:mod:`autograder.graded_notebook`) into what the
student may see: every test cell holds the released source (the hidden tests removed, as the
student received it) and, as its only output, the grader's outcome; a summary of the grades opens
the notebook. The hidden tests never ran in the student's process, so no output of the student's
code can hold them.

Everything in it that comes from the submission is treated as hostile: :func:`render` runs nbconvert's
HTML sanitizer on the notebook (Markdown, HTML and SVG outputs cleaned, JavaScript and other active
outputs dropped) and nbgrader's feedback exporter with sanitizing on, escapes what the grader writes
itself (messages, names), and puts a Content-Security-Policy in the page that allows no script, no
remote resource and no form: whatever slipped through would not run.

Since no script runs, the Markdown cells' math is rendered to MathML and their citations to text on
the grader (:mod:`autograder.book_markdown`); the page loads no MathJax.
"""

import copy
import functools
import html
import re

from jinja2 import pass_context
from nbformat.v4 import new_markdown_cell

from autograder import book_markdown
from autograder.chapters import Chapter
from autograder.citations import Reference
from autograder.course import grade_id
from autograder.graded_notebook import MARKS, outcome_text
from autograder.results import NotebookResult, Status
from autograder.sanitize import sanitized_html

CONTENT_SECURITY_POLICY = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; font-src data:; "
                           "base-uri 'none'; form-action 'none'")
_POLICY_TAG = f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">'.encode()

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
    """The graded notebook as the student may see it (see the module's docstring)."""
    from nbconvert.preprocessors.sanitize import SanitizeHTML

    notebook = copy.deepcopy(graded)
    tests = {test.grade_id: test for test in result.tests}
    for cell in notebook.cells:
        name = grade_id(cell)
        if name in tests and cell.cell_type == "code":
            cell.source = chapter.test(name).released
            cell.outputs = [_stream(outcome_text(tests[name], printed.get(name, "")), tests[name].status)]
    notebook.cells.insert(0, new_markdown_cell(summary(result)))
    notebook, _ = SanitizeHTML(strip=True).preprocess(notebook, {})
    return notebook


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
    """This process's exporter of feedback pages (:func:`autograder.nbgrader_adapter.feedback_exporter`),
    made once: the class run forks each job's worker from a server that made it and compiled its
    template (:mod:`autograder.worker_preload`), so that no job does it again."""
    from autograder.nbgrader_adapter import feedback_exporter

    return feedback_exporter({"book_markdown": _book_markdown, "sanitized_html": sanitized_html})


@pass_context
def _book_markdown(context, source: str) -> str:
    """The template's filter ``book_markdown``: a Markdown cell's HTML, with the citations of the page's
    ``references`` (a resource of the page: the exporter serves every page)."""
    return book_markdown.render(source, context["resources"]["references"])


def render(view, result: NotebookResult, chapter: Chapter, references: dict[str, Reference]) -> bytes:
    """The feedback page of a student's view, rendered as nbgrader's feedback converter renders it and
    locked; ``references`` are the course's, for the citations of its Markdown cells."""
    from autograder.nbgrader_adapter import render_feedback

    page = render_feedback(exporter(), view, result, chapter.notebook, {"references": references})
    return lock(page.encode())


def plain_page(result: NotebookResult, why: str) -> bytes:
    """A feedback page made without nbconvert (when rendering failed or ran out of time): the grades."""
    rows = "".join(f"<tr><td>{html.escape(test.grade_id)}</td><td>{html.escape(test.status)}</td>"
                   f"<td>{test.points:g} / {test.max_points:g}</td><td><pre>{html.escape(test.message)}</pre></td></tr>"
                   for test in result.tests)
    page = (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{html.escape(result.chapter)}</title></head>"
            f"<body><h2>{html.escape(result.chapter)}: {result.score:g} / {result.max_score:g} points</h2>"
            f"<p>{html.escape(why)}</p><table>{rows}</table></body></html>")
    return lock(page.encode())
