"""The course's layout and vocabulary, in one place.

- Where things are: the repository (:data:`ROOT`), the instructor notebooks (``solutions/``) and the
  student notebooks generated from them (``chapters/``); a chapter is a folder of both, e.g.
  ``01_attention`` (:func:`chapter_names`).
- The cells: nbgrader's metadata names a cell (:func:`grade_id`); a graded test cell
  (:func:`is_graded_test`) follows the solution cell of its exercise (:func:`is_solution`); the
  install cell carries the tag :data:`INSTALL_TAG`; the hidden tests of a test cell sit between
  nbgrader's markers (:data:`HIDDEN_TESTS_BEGIN`, :data:`HIDDEN_TESTS_END`, :func:`strip_hidden_tests`).

What a chapter tests, as the grader reads it from these, is :mod:`autograder.core.chapters`.
"""

import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = "solutions"
CHAPTERS = "chapters"
INSTALL_TAG = "install"
HIDDEN_TESTS_BEGIN = "BEGIN HIDDEN TESTS"  # nbgrader's markers, in a comment line: ### BEGIN HIDDEN TESTS
HIDDEN_TESTS_END = "END HIDDEN TESTS"


class GradingError(RuntimeError):
    """Grading cannot go on (not a problem of one submission); the message says why."""


# --------------------------------------------------------------------------------------------------
# Cells
# --------------------------------------------------------------------------------------------------


def grade_id(cell) -> str | None:
    """The nbgrader grade id of a cell, None when it has none (or its metadata is malformed)."""
    nbgrader = cell.get("metadata", {}).get("nbgrader")
    value = nbgrader.get("grade_id") if isinstance(nbgrader, dict) else None
    return value if isinstance(value, str) else None


def is_graded_test(cell) -> bool:
    """A test cell that nbgrader grades (autograder tests)."""
    info = cell.get("metadata", {}).get("nbgrader", {})
    return cell.get("cell_type") == "code" and bool(info.get("grade")) and not info.get("solution")


def is_solution(cell) -> bool:
    """A cell that the student fills in (an exercise)."""
    info = cell.get("metadata", {}).get("nbgrader", {})
    return cell.get("cell_type") == "code" and bool(info.get("solution"))


def hidden_test_lines(source: str) -> set[int]:
    """The line numbers (from 1) of a cell's hidden tests, markers included; an unterminated region
    runs to the end of the cell."""
    hidden, inside = set(), False
    for number, line in enumerate(source.splitlines(), start=1):
        inside = inside or HIDDEN_TESTS_BEGIN in line
        if inside:
            hidden.add(number)
        if HIDDEN_TESTS_END in line:
            inside = False
    return hidden


def strip_hidden_tests(source: str) -> str:
    """A cell's source without its hidden tests, as nbgrader releases it (ClearHiddenTests)."""
    from nbformat.v4 import new_code_cell
    from nbgrader.preprocessors import ClearHiddenTests

    cell = new_code_cell(source=source)
    try:
        ClearHiddenTests()._remove_hidden_test_region(cell)
    except RuntimeError:  # an unterminated region: drop everything from its start
        hidden = hidden_test_lines(source)
        return "\n".join(line for number, line in enumerate(source.splitlines(), start=1) if number not in hidden)
    return cell.source


def chapter_names(root: Path = ROOT) -> list[str]:
    """The chapters that have a solution notebook: folders of ``solutions/`` holding an .ipynb."""
    source = Path(root) / SOLUTIONS
    return sorted(p.name for p in source.iterdir() if p.is_dir() and any(p.glob("*.ipynb"))) if source.is_dir() else []


def python_source(source: str) -> str:
    """A cell's source as plain Python: IPython's magics (``%pip``, ``!ls``) become calls."""
    return _transformer().transform_cell(source)


@functools.cache
def _transformer():
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager()
