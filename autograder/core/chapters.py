"""What a chapter tests, read from its solution notebook: its test cells (with and without their hidden
tests), the exercises (the names its solution cells define), the instructor code its tests need
(:mod:`autograder.core.instructor_context`) and a fingerprint of the notebook (:func:`load_chapters`).
"""

import ast
import hashlib
from dataclasses import dataclass
from pathlib import Path

from autograder.core.course import (
    SOLUTIONS, GradingError, chapter_names, grade_id, is_graded_test, is_solution, python_source, strip_hidden_tests)
from autograder.core.instructor_context import plan
from autograder.core.steps import PlanStep


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
    context: tuple[PlanStep, ...]  # the instructor code the tests need (see instructor_context.plan)
    fingerprint: str  # of the solution notebook

    def test(self, grade_id: str) -> TestCell | None:
        return next((test for test in self.tests if test.grade_id == grade_id), None)


def load_chapters(course_root: Path) -> dict[str, Chapter]:
    """The chapters of ``course_root/solutions``, one notebook each."""
    import nbformat

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
