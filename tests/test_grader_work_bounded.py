"""The grader's own work on a submission's text is bounded, and so is every feedback page (issues 42 and 43).

A class of attackers, beside an honest student (full marks) and a blank one (zero), is graded once. The attacks:

- markup: a Markdown cell of 60,000 unclosed ``<div>`` (html5lib's work grows with the square of their nesting:
  each pass of the sanitizer took minutes);
- copier: ``softmax`` defined in an 8 MB cell, around a list literal of 4 million items (the copy reader's IPython
  transformation and ``ast`` took the grader's worker to 4.3 GB);
- padded: a notebook padded to ``MAX_CELLS`` cells, Markdown cells of nested tags and code cells of long lists;
- wide: a 6 MB code cell of ``1,`` (its feedback page was 147 MB, each ``1,`` two highlighted spans);
- flooder: outputs that would make a page larger than its bound once escaped.

Each test checks the grades, what the student reads where a bound cut something, that no feedback page exceeds
``MAX_FEEDBACK_PAGE_BYTES``, and that the grader's work is bounded by construction: the grader's functions are
called again here on the attacker's submission, and what the copy reader, the sanitizer and the highlighter are
handed is recorded (no wall-clock assert: ``benchmarks/hostile_text.py`` measures the time and the memory).
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from grading_helpers import (
    ADD, DOUBLE, SOFTMAX, assert_honest_full_and_blank_zero, build_course, insert_after, notebooks, put,
    student_outputs, with_cells)
from nbformat.v4 import new_code_cell, new_markdown_cell, new_output

from autograder.bounds import (
    MAX_CELLS, MAX_COPY_READ_CELL_CHARS, MAX_COPY_READ_CHARS, MAX_FEEDBACK_PAGE_BYTES, MAX_HTML_TAGS,
    MAX_NOTEBOOK_HTML_TAGS, MAX_NOTEBOOK_OUTPUTS, MAX_RUN_CELL_CHARS, MAX_SHOWN_CELL_CHARS, MAX_SHOWN_CELLS,
    MAX_SHOWN_CHARS, Limits)
from autograder.collect.submissions import read_notebook
from autograder.core import cell_outputs
from autograder.core.cell_outputs import start_tags
from autograder.core.chapters import load_chapters
from autograder.grade import grade
from autograder.report import feedback, graded_notebook
from autograder.report.sanitize import inert_notebook, sanitized_html
from autograder.run import reference_copies

LIMITS = Limits(cell_timeout=20, notebook_timeout=240, memory_mb=3072, processes=32, scratch_mb=64, scratch_files=2000)
DIVS = "<div>" * 60_000
COPIER = SOFTMAX.replace('    """My own', "    table = [" + "1," * 4_000_000 + ']\n    """My own', 1)
WIDE = "x = [" + "1," * 3_000_000 + "]"
FLOOD = 'print("<" * 99_999)'  # each output whole (MAX_OUTPUT_CHARS), 25 of them more than a page shows
LINE = 200  # at most, of the line that says what a page does not show of a cell


def padding(count: int) -> list:
    """``count`` cells: nine Markdown cells of 1,000 nested ``<div>`` for each code cell of a list of 1,000 items."""
    return [new_code_cell("x = [" + "1," * 1_000 + "]") if number % 10 == 9 else new_markdown_cell("<div>" * 1_000)
            for number in range(count)]


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The attackers, the honest student and the blank one, graded once with two workers."""
    root = tmp_path_factory.mktemp("course")
    released = build_course(root)
    submissions, out = tmp_path_factory.mktemp("attackers"), tmp_path_factory.mktemp("out")
    first, softmax_chapter = released["01_tiny"], released["03_tiny"]
    solved = with_cells(first, add=ADD, double=DOUBLE)
    put(submissions, "honest/01_tiny/01_tiny.ipynb", solved)
    put(submissions, "honest/03_tiny/03_tiny.ipynb", with_cells(softmax_chapter, softmax=SOFTMAX))
    put(submissions, "blank/01_tiny/01_tiny.ipynb", first)
    put(submissions, "blank/03_tiny/03_tiny.ipynb", softmax_chapter)
    put(submissions, "markup/01_tiny/01_tiny.ipynb", insert_after(solved, "add", DIVS, new_markdown_cell))
    put(submissions, "copier/03_tiny/03_tiny.ipynb", with_cells(softmax_chapter, softmax=COPIER))
    padded = with_cells(first, add=ADD, double=DOUBLE)
    padded.cells += padding(MAX_CELLS - len(padded.cells))
    put(submissions, "padded/01_tiny/01_tiny.ipynb", padded)
    put(submissions, "wide/01_tiny/01_tiny.ipynb", insert_after(solved, "add", WIDE))
    flooded = solved
    for _ in range(25):
        flooded = insert_after(flooded, "add", FLOOD)
    put(submissions, "flooder/01_tiny/01_tiny.ipynb", flooded)
    grade(submissions, out, jobs=2, limits=LIMITS, course_root=root, seed=12)
    return root, submissions, out


@dataclass
class Work:
    """What the grader's functions were handed while they redid one job's work on a submission's text."""

    parsed: list[str] = field(default_factory=list)  # sources the copy reader transformed and parsed
    sanitized: list[str] = field(default_factory=list)  # HTML of Markdown cells and outputs given to the sanitizer
    highlighted: list[str] = field(default_factory=list)  # sources given to the highlighter
    page: bytes | str = b""  # the feedback page, or why it is a plain one


def redo_grader_work(graded, monkeypatch, student: str, chapter: str) -> Work:
    """Redo here what a job does with ``student``'s submission of ``chapter`` besides running it (read it for
    copies, build the graded notebook, make it inert, render its feedback), recording what the copy reader, the
    sanitizer and the highlighter are handed."""
    import bleach
    import pygments
    from nbconvert.preprocessors import sanitize as nbconvert_sanitize

    root, submissions, out = graded
    work = Work()
    parse, clean, highlight = reference_copies.python_source, bleach.clean, pygments.highlight

    def parsed(source):
        work.parsed.append(source)
        return parse(source)

    def sanitized(text, *args, **kwargs):
        if sys._getframe(1).f_code.co_name in ("sanitized_html", "sanitize_html_tags"):  # not the highlighter's HTML
            work.sanitized.append(text)
        return clean(text, *args, **kwargs)

    def highlighted(source, *args, **kwargs):
        work.highlighted.append(source)
        return highlight(source, *args, **kwargs)

    monkeypatch.setattr(reference_copies, "python_source", parsed)
    monkeypatch.setattr(bleach, "clean", sanitized)
    monkeypatch.setattr(nbconvert_sanitize, "clean", sanitized)
    monkeypatch.setattr(pygments, "highlight", highlighted)
    sanitized_html.cache_clear()  # what this process sanitized before is not sanitized again
    chapters = load_chapters(root)
    notebook, problem = read_notebook((submissions / student / chapter / f"{chapter}.ipynb").read_bytes())
    assert problem is None
    reference_copies.find_copies([cell.source for cell in notebook.cells if cell.cell_type == "code"],
                                 chapters[chapter].exercises)
    instructor = read_notebook((root / "solutions" / chapter / f"{chapter}.ipynb").read_bytes())[0]
    result = notebooks(out)[student, chapter]
    built = graded_notebook.build(notebook, instructor, chapters[chapter], None, result)
    inert_notebook(built, {})
    view = feedback.student_view(built, chapters[chapter], result, {})
    try:
        work.page = feedback.render(view, result, chapters[chapter], {})
    except feedback.PageTooLarge as error:
        work.page = str(error)
    return work


def assert_pages_within_their_bound(out: Path) -> None:
    pages = sorted((out / "feedback").glob("*/*/*.html"))
    assert len(pages) == 9
    assert [page for page in pages if page.stat().st_size > MAX_FEEDBACK_PAGE_BYTES] == []


def assert_sanitizer_parses_bounded_html(work: Work) -> None:
    """The sanitizer was handed HTML of at most MAX_HTML_TAGS start tags at a time; for each of the two pages
    (the formgrader's copy, the feedback page) at most MAX_NOTEBOOK_HTML_TAGS, and the three tags of each cell
    shown as written."""
    tags = [start_tags(text) for text in work.sanitized]
    assert max(tags) <= MAX_HTML_TAGS and sum(tags) <= 2 * (MAX_NOTEBOOK_HTML_TAGS + 3 * MAX_SHOWN_CELLS)


def page_text(out: Path, student: str) -> str:
    return (out / "feedback" / student / "01_tiny" / "01_tiny.html").read_text()


def test_a_markdown_cell_of_unclosed_tags_is_shown_as_written_and_the_sanitizer_parses_few(graded, monkeypatch):
    _, _, out = graded
    assert notebooks(out)["markup", "01_tiny"].score == 3  # its answers are right: the bound costs it nothing
    page = page_text(out, "markup")
    assert ("This cell is shown as written, not rendered: it has 300,000 characters, more than the 20,000 a page "
            "renders of a cell. 280,000 more characters of it are not shown.") in page
    assert "&lt;div&gt;" * 100 in page and "<div><div><div>" not in page
    work = redo_grader_work(graded, monkeypatch, "markup", "01_tiny")
    assert_sanitizer_parses_bounded_html(work)
    assert max(map(len, work.sanitized)) <= 5 * MAX_SHOWN_CELL_CHARS + LINE  # the 20,000 characters shown, escaped
    assert_pages_within_their_bound(out)
    assert_honest_full_and_blank_zero(out)


def test_an_8_mb_code_cell_is_not_parsed_for_copies_and_is_flagged(graded, monkeypatch):
    _, _, out = graded
    [flag] = notebooks(out)["copier", "03_tiny"].copies
    assert (flag.exercise, flag.certainty, flag.withheld) == ("softmax", "suspected", False)
    assert "code cell(s) 2 of the notebook, which could define it, are too large to read" in flag.reason
    work = redo_grader_work(graded, monkeypatch, "copier", "03_tiny")
    assert max(map(len, work.parsed)) <= MAX_COPY_READ_CELL_CHARS and COPIER not in work.parsed
    assert max(map(len, work.highlighted)) <= MAX_SHOWN_CELL_CHARS + LINE
    assert isinstance(work.page, bytes) and len(work.page) <= MAX_FEEDBACK_PAGE_BYTES
    assert_pages_within_their_bound(out)
    assert_honest_full_and_blank_zero(out)
    assert f"more than the {MAX_RUN_CELL_CHARS:,} a cell may have" in student_outputs(out, "copier", "03_tiny")


def test_a_notebook_padded_to_the_cell_limit_is_shown_in_part_and_read_within_bounds(graded, monkeypatch):
    _, _, out = graded
    result = notebooks(out)["padded", "01_tiny"]
    assert result.problem is None and result.score == 3
    assert not [note for note in result.notes if "plain one" in note]
    page = page_text(out, "padded")
    assert "cell(s) of" in page and f"are not shown here: a page shows at most {MAX_SHOWN_CELLS:,} cells" in page
    assert "the grader renders" in page  # the nested tags past the page's budget of tags are shown as written
    work = redo_grader_work(graded, monkeypatch, "padded", "01_tiny")
    assert_sanitizer_parses_bounded_html(work)
    costs = [len(source) * (1 + reference_copies.ipython_lines(source)) for source in work.parsed]
    assert sum(costs) <= MAX_COPY_READ_CHARS
    assert sum(map(len, work.highlighted)) <= MAX_SHOWN_CHARS + 10_000  # and the released test cells
    assert_pages_within_their_bound(out)
    assert_honest_full_and_blank_zero(out)


def test_no_feedback_page_of_a_6_mb_code_cell_exceeds_5_mb(graded, monkeypatch):
    _, _, out = graded
    page = page_text(out, "wide")
    cut = len(WIDE) - MAX_SHOWN_CELL_CHARS
    assert f"# [{cut:,} more characters of this cell are not shown: a page shows at most 20,000 of a cell]" in page
    assert len(page.encode()) <= MAX_FEEDBACK_PAGE_BYTES
    work = redo_grader_work(graded, monkeypatch, "wide", "01_tiny")
    assert max(map(len, work.highlighted)) <= MAX_SHOWN_CELL_CHARS + LINE
    assert WIDE not in work.parsed
    assert_pages_within_their_bound(out)
    assert_honest_full_and_blank_zero(out)


def test_a_page_larger_than_its_bound_is_replaced_by_the_plain_page_of_the_grades(graded):
    _, _, out = graded
    result = notebooks(out)["flooder", "01_tiny"]
    assert result.score == 3
    [note] = [note for note in result.notes if "plain one" in note]
    assert "PageTooLarge: the page would be" in note and "more than the limit of 5 MB" in note
    page = page_text(out, "flooder")
    assert "3 / 3 points" in page and "&lt;" * 100 not in page
    assert_pages_within_their_bound(out)
    assert_honest_full_and_blank_zero(out)


def test_lines_of_ipython_syntax_count_against_the_copy_reader_s_bound(monkeypatch):
    """IPython's transformation reads a cell again for each line of its syntax: 499 shell commands in a cell of
    90,000 characters took it over two minutes. Such a cell is not transformed, and is flagged; many medium cells
    are read up to the notebook's bound, and the rest flagged."""
    parsed = []
    monkeypatch.setattr(reference_copies, "python_source",
                        lambda source, parse=reference_copies.python_source: parsed.append(source) or parse(source))
    shell = "!ls\n" * 499 + "x = 1\n" * 15_000
    copier = "import bertlab.attention\nsoftmax = bertlab.attention.softmax"
    [flag] = reference_copies.find_copies([shell, copier], ["softmax"])
    assert flag.certainty == "certain" and "code cell(s) 1 of the notebook" in flag.reason and parsed == [copier]
    medium = "y = [" + "1," * 5_000 + "]"
    parsed.clear()
    [flag] = reference_copies.find_copies([medium] * 100, ["softmax"])
    assert flag.certainty == "suspected" and "too large to read" in flag.reason
    assert len(parsed) == MAX_COPY_READ_CHARS // len(medium)


def test_html_outputs_are_kept_as_such_within_their_tags_and_a_notebook_within_its_outputs():
    nested = new_output("display_data", data={"text/html": "<b>" * 25_000, "text/plain": "<HTML object>"})
    flat = new_output("display_data", data={"text/html": "<b>bold</b>" * 1_000, "text/plain": "bold"})
    budget = cell_outputs.OutputBudget()
    [kept_nested, kept_flat] = cell_outputs.clean([nested, flat], budget)
    assert "text/html" not in kept_nested.data and kept_flat.data["text/html"] == flat.data["text/html"]
    assert kept_nested.data["text/plain"].startswith("[text/html output shown as text: its HTML has 25,000 tags")
    assert budget.tags.left == MAX_NOTEBOOK_HTML_TAGS - 1_000
    printed = [new_output("stream", name="stdout", text="1")] * (MAX_NOTEBOOK_OUTPUTS + 5)
    kept = [cell_outputs.clean(printed[start:start + 1_000], budget) for start in range(0, len(printed), 1_000)]
    assert sum(map(len, kept)) == MAX_NOTEBOOK_OUTPUTS - 2 + 1 and budget.exhausted
    notes = [output.text for outputs in kept for output in outputs if output.text != "1"]
    assert notes == [f"[the notebook keeps no more outputs: at most {MAX_NOTEBOOK_OUTPUTS:,}]\n"]
