"""The course's layout and vocabulary, in one place.

- Where things are: the repository (:data:`ROOT`), the instructor notebooks (``solutions/``) and the
  student notebooks generated from them (``chapters/``); a chapter is a folder of both, e.g.
  ``01_attention`` (:func:`chapter_names`).
- The cells: nbgrader's metadata names a cell (:func:`grade_id`); a graded test cell
  (:func:`is_graded_test`) follows the solution cell of its exercise (:func:`is_solution`); the
  install cell carries the tag :data:`INSTALL_TAG`; the hidden tests of a test cell sit between
  nbgrader's markers (:data:`HIDDEN_TESTS_BEGIN`, :data:`HIDDEN_TESTS_END`, :func:`strip_hidden_tests`).
- What a chapter tests (:func:`load_chapters`): its test cells (with and without their hidden tests),
  the exercises (the names its solution cells define) and the instructor code its tests need
  (:mod:`autograder.test_context`).
"""

import ast
import hashlib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
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


def defined_names(source: str) -> list[str]:
    """The names a cell defines at its top level (functions, classes, assignments), in order; []
    when it does not parse."""
    try:
        tree = ast.parse(python_source(source))
    except SyntaxError:
        return []
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [name.id for target in targets for name in ast.walk(target) if isinstance(name, ast.Name)]
    return names


def python_source(source: str) -> str:
    """A cell's source as plain Python: IPython's magics (``%pip``, ``!ls``) become calls."""
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(source)


# --------------------------------------------------------------------------------------------------
# What a chapter tests
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TestCell:
    """A graded test cell of the instructor's notebook."""

    grade_id: str
    points: float
    source: str  # the instructor's version, hidden tests included
    released: str  # what students get: the hidden tests removed
    exercise: str | None  # the exercise it grades (``test_<name>`` after the cell of ``<name>``)


@dataclass(frozen=True)
class Chapter:
    """A chapter as the grader sees it, read from its solution notebook."""

    name: str  # the nbgrader assignment, e.g. 01_attention
    notebook: str  # the notebook's name without .ipynb
    tests: tuple[TestCell, ...]
    grade_ids: frozenset[str]  # of every nbgrader cell: recognizes the chapter's notebooks
    exercises: tuple[str, ...]  # the names the solution cells define (functions, classes)
    context: tuple[tuple[str, str], ...]  # the instructor code the tests need (see test_context.plan)
    fingerprint: str  # of the solution notebook

    def test(self, grade_id: str) -> TestCell | None:
        return next((test for test in self.tests if test.grade_id == grade_id), None)


def load_chapters(course_root: Path) -> dict[str, Chapter]:
    """The chapters of ``course_root/solutions``, one notebook each."""
    import nbformat

    from autograder.test_context import plan

    chapters = {}
    for name in chapter_names(course_root):
        notebooks = sorted((course_root / SOLUTIONS / name).glob("*.ipynb"))
        if len(notebooks) != 1:
            raise GradingError(f"{course_root / SOLUTIONS / name} has {len(notebooks)} notebooks; "
                               "the grader expects one notebook per chapter")
        data = notebooks[0].read_bytes()
        notebook = nbformat.reads(data.decode("utf-8"), as_version=4)
        grade_ids = {grade_id(cell) for cell in notebook.cells} - {None}
        exercises = [defined for cell in notebook.cells if is_solution(cell) for defined in defined_names(cell.source)]
        tests = []
        for cell in notebook.cells:
            if is_graded_test(cell):
                exercise = grade_id(cell).removeprefix("test_")
                tests.append(TestCell(grade_id(cell), float(cell.metadata.nbgrader["points"]), cell.source,
                                      strip_hidden_tests(cell.source), exercise if exercise in exercises else None))
        try:
            context = plan(notebook, exercises)
        except SyntaxError as error:
            raise GradingError(f"{notebooks[0]}: a cell does not parse ({error})") from None
        chapters[name] = Chapter(name, notebooks[0].stem, tuple(tests), frozenset(grade_ids), tuple(exercises),
                                 context, hashlib.sha256(data).hexdigest())
    return chapters
