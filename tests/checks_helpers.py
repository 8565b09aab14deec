"""The mutation tests every chapter's checks must pass, shared by the tests/test_<module>_checks.py files.

A test file describes its chapter in a subclass of :class:`MutationTests` (named ``Test...``, so that
pytest collects it) and gets, for every exercise, the tests CONTRIBUTING.md asks for: the check
accepts the solution of the solution notebook, other correct implementations and (with the
forbid-rule lifted) the reference; with the rule it rejects the reference; it rejects each typical
wrong implementation with the hint that explains it; a blank stub fails with NotImplementedError; and
a forbidden function reached in any way (captured beforehand, as a Tensor method, through ``torch.ops``,
with the exception swallowed) fails with "implement this yourself". The file keeps the tests that are its chapter's own.
"""

import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import nbformat
import pytest
from torch import nn

from autograder.checks.framework import CheckFailed


def solution_cells(notebook: Path) -> list[tuple[str, str]]:
    """(grade_id, source) of each solution cell of an nbgrader notebook, in order."""
    cells = nbformat.read(notebook, as_version=4).cells
    return [(cell.metadata.nbgrader.grade_id, cell.source) for cell in cells
            if cell.metadata.get("nbgrader", {}).get("solution")]


def run_solution_cells(notebook: Path, namespace: dict) -> dict:
    """Execute the solution cells of ``notebook`` together in ``namespace`` (the names they use without
    importing them: ``torch``, ``math``, ...) and return it, holding the solution's functions and classes."""
    for grade_id, source in solution_cells(notebook):
        exec(compile(source, f"{notebook.name}:{grade_id}", "exec"), namespace)
    return namespace


def run_in_grader(steps: list[tuple[str, str]], tests: dict[str, str], exercises, limits, *,
                  context: str = "import torch", graded: dict[str, str] | None = None, seed: int = 0) -> dict:
    """Run a notebook as the grader does (autograder.run.runner): ``steps`` are ("code", source) cells of the
    student's and ("test", name) where a test cell of ``tests`` (name -> source) stands; ``exercises``
    are the names the test cells take from the student's process; ``context`` is the instructor code
    they need; ``graded`` maps a test to the exercise it grades (for ``missing``). Returns each test's
    Outcome."""
    from autograder.core.chapters import Chapter, TestCell
    from autograder.core.steps import CodeStep, ContextStep, TestStep
    from autograder.run.runner import run_notebook
    from autograder.run.sandbox import Sandbox

    graded = graded or {}
    chapter = Chapter("checks", "checks", tuple(TestCell(name, 1.0, source, source, graded.get(name))
                                                for name, source in tests.items()),
                      frozenset(tests), tuple(exercises), (ContextStep(context),), "")
    numbered = [CodeStep(index, source) if kind == "code" else TestStep(source)
                for index, (kind, source) in enumerate(steps)]
    with Sandbox(limits) as sandbox:
        return run_notebook(numbered, chapter, sandbox, limits, seed).outcomes


def check_of(checks: ModuleType, exercise: str) -> Callable:
    """The check of an exercise: ``check_<exercise>`` of the module of checks."""
    return getattr(checks, f"check_{exercise}")


def _name(value) -> str:
    """A test id for a function or class: its name."""
    return getattr(value, "__name__", repr(value))


class MutationTests:
    """The shared tests, parametrized from the class attributes a subclass sets:

    - ``checks``: the module of checks, e.g. ``autograder.checks.attention``.
    - ``references``: exercise -> the ``bertlab`` function or class its check compares with, in the
      order of the chapter. With the forbid-rule, the check of the reference must report a call to
      it (to a method of it, for a class).
    - ``mutants``: exercise -> [(typical wrong implementation, substring of its hint)], at least 3.
    - ``alternatives``: exercise -> correct implementations other than the solution.
    - ``cheats``: [(exercise, implementation reaching a forbidden function, name of that function)].
    - ``reference_calls``: exercise -> what the forbid-rule reports when the check runs on the
      reference, where that is not the reference itself (a reference written with the library function
      the exercise forbids), or None where the exercise forbids nothing, so that the reference passes
      with the rule too.
    - ``failure_context``: a regular expression for how a failure names the case (after ", on ").

    The test file provides the fixture ``solution_namespace``: the names its solution cells define
    (:func:`run_solution_cells`).
    """

    checks: ModuleType
    references: dict[str, Callable]
    mutants: dict[str, list[tuple[Callable, str]]]
    alternatives: dict[str, list[Callable]] = {}
    cheats: list[tuple[str, Callable, str]] = []
    reference_calls: dict[str, str | None] = {}
    failure_context = r"test case \d+ of \d+ \("

    def pytest_generate_tests(self, metafunc):
        """Parametrize the shared tests below; a subclass's own tests are left as they are."""
        parameters = {
            "test_check_accepts_the_solution": ("exercise", list(self.references), None),
            "test_blank_exercise_raises_not_implemented_error": ("exercise", list(self.references), None),
            "test_check_accepts_the_reference_only_when_the_forbid_rule_is_lifted": (
                "exercise", list(self.references), None),
            "test_check_accepts_other_correct_implementations": (
                "exercise, implementation",
                [(exercise, f) for exercise, fs in self.alternatives.items() for f in fs],
                [f"{exercise}-{_name(f)}" for exercise, fs in self.alternatives.items() for f in fs]),
            "test_check_rejects_mutant_with_its_hint": (
                "exercise, mutant, hint",
                [(exercise, mutant, hint) for exercise, mutants in self.mutants.items() for mutant, hint in mutants],
                [_name(mutant) for mutants in self.mutants.values() for mutant, _ in mutants]),
            "test_forbidden_calls_are_caught_however_they_were_captured": (
                "exercise, cheat, called", self.cheats, [_name(cheat) for _, cheat, _ in self.cheats]),
        }
        if metafunc.function.__name__ in parameters:
            names, values, ids = parameters[metafunc.function.__name__]
            metafunc.parametrize(names, values, ids=ids)

    def check(self, exercise: str) -> Callable:
        """The check of ``exercise`` in this chapter's module of checks."""
        return check_of(self.checks, exercise)

    def test_every_exercise_has_a_solution_and_at_least_three_mutants(self, solution_namespace):
        exercises = list(self.references)
        assert [name for name in exercises if name in solution_namespace] == exercises
        for exercise in exercises:
            assert len(self.mutants.get(exercise, [])) >= 3, exercise

    def test_check_accepts_the_solution(self, exercise, solution_namespace):
        assert self.check(exercise)(solution_namespace[exercise]).startswith(f"{exercise}: all")

    def test_blank_exercise_raises_not_implemented_error(self, exercise):
        """The released stub (a function, or a module whose __init__ raises) fails with NotImplementedError,
        which the grader reports as "not attempted", not as a wrong answer."""
        if isinstance(self.references[exercise], type):
            class Blank(nn.Module):
                def __init__(self, *args, **kwargs):
                    super().__init__()
                    raise NotImplementedError()
        else:
            def Blank(*args, **kwargs):  # noqa: N802 (stands for either kind of stub)
                raise NotImplementedError()
        with pytest.raises(NotImplementedError):
            self.check(exercise)(Blank)

    def test_check_accepts_the_reference_only_when_the_forbid_rule_is_lifted(self, exercise):
        reference = self.references[exercise]
        assert self.check(exercise)(reference, forbid=False).startswith(f"{exercise}: all")
        called = self.reference_calls.get(exercise, f"{reference.__module__}.{reference.__qualname__}")
        if called is None:  # the exercise forbids nothing
            assert self.check(exercise)(reference).startswith(f"{exercise}: all")
            return
        with pytest.raises(CheckFailed, match=rf"implement this yourself \(your code called {re.escape(called)}\b"):
            self.check(exercise)(reference)

    def test_check_accepts_other_correct_implementations(self, exercise, implementation):
        self.check(exercise)(implementation)

    def test_check_rejects_mutant_with_its_hint(self, exercise, mutant, hint):
        with pytest.raises(CheckFailed) as failure:
            self.check(exercise)(mutant)
        message = str(failure.value)
        assert hint in message, message
        # says which exercise and which case
        which = rf"{re.escape(exercise)} (is not right yet|changed its input `\w+` in place), on {self.failure_context}"
        assert re.match(which, message), message

    def test_forbidden_calls_are_caught_however_they_were_captured(self, exercise, cheat, called):
        with pytest.raises(CheckFailed, match=r"implement this yourself \(your code called [^)]*" + re.escape(called)):
            self.check(exercise)(cheat)
