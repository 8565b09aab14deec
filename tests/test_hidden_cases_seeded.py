"""Every hidden case of every exercise depends on the grading run's seed (issue 24, item 2).

A student's notebook can import the checks' case generators and compute, with the reference, the answer
to every case it draws there, where no run seed is set: the visible cases. A hidden case equal to one of
those could be answered from a table computed ahead of time. So, for every case generator of every
exercise of the chapters:

- the cases drawn under two run seeds have no case in common;
- no case drawn under a run seed equals a case drawn without one (a precomputed table earns nothing);
- the same seed draws the same cases (a regrade meets the same inputs).

Cases are compared by value (:func:`normalized`): tensors by dtype, shape and bytes, modules by class,
weights, flags and mode, dataclasses by their fields but the description, and so on. Sizes and integer
arguments are drawn from ranges wide enough that two seeds rarely meet the same case (the narrowest:
alibi_slopes's power of two, one of 17); a collision found here after a generator changed means that its
ranges are too narrow, not that another seed should be tried. The exercises are
those of the solution notebooks; each is graded by ``check_<exercise>`` of a module of
``autograder.checks``, which draws its cases from the module's case generators: the functions named
``<exercise in snake case>_cases`` and, for the extra cases of a check, ``<exercise>_<what>_case(s)``.
An exercise without one fails here, and so does a check that draws from ``generator_for`` outside them.

The catalogued mistakes and the mutation tests' wrong implementations must still get their hints on the
hidden cases (of one run seed here; tests/test_visible_hints.py covers the visible ones), and a
"precomputed-table" causal_mask, which answers the cases it could draw in the student's process, fails
the hidden test that the grader runs with a run seed.
"""

import dataclasses
import functools
import importlib
import inspect
import pkgutil
import re
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import autograder.checks
import test_visible_hints
from autograder.checks.framework import CheckFailed, use_run_seed, visible_check
from autograder.core.chapters import load_chapters
from autograder.run.sandbox import Limits
from checks_helpers import run_in_grader

REPO = Path(__file__).resolve().parents[1]
RUN_SEEDS = (1, 2)  # two grading runs
RUN_SEED = 12  # the run of the end-to-end tests


# --------------------------------------------------------------------------------------------------
# The exercises and their case generators
# --------------------------------------------------------------------------------------------------


def snake_case(name: str) -> str:
    """``MultiHeadAttention`` -> ``multi_head_attention``; ``softmax`` stays as it is."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


@functools.cache
def exercises() -> list[tuple[str, str]]:
    """(chapter, exercise) of every exercise of the solution notebooks."""
    return [(chapter.name, exercise) for chapter in load_chapters(REPO).values() for exercise in chapter.exercises]


@functools.cache
def checks_modules() -> list:
    """The modules of ``autograder.checks`` that grade exercises of the chapters (``check_<exercise>``)."""
    modules = [importlib.import_module(f"autograder.checks.{info.name}")
               for info in pkgutil.iter_modules(autograder.checks.__path__)]
    return [module for module in modules if any(callable(getattr(module, f"check_{exercise}", None))
                                                for _, exercise in exercises())]


def checks_module_of(exercise: str):
    """The module of checks that grades ``exercise``; None when no module has its check."""
    return next((module for module in checks_modules() if callable(getattr(module, f"check_{exercise}", None))), None)


def _is_case_generator(name: str, value, module) -> bool:
    return (inspect.isfunction(value) and value.__module__ == module.__name__ and not name.startswith("_")
            and (name.endswith("_cases") or name.endswith("_case")))


def _owner(generator_name: str, module) -> str | None:
    """The exercise graded by ``module`` whose case generator this is: the longest exercise name it starts with."""
    graded = [exercise for _, exercise in exercises() if callable(getattr(module, f"check_{exercise}", None))]
    owners = [exercise for exercise in graded
              if generator_name == f"{snake_case(exercise)}_cases"
              or generator_name.startswith(f"{snake_case(exercise)}_")]
    return max(owners, key=len, default=None)


def case_generators(exercise: str) -> list:
    """The case generators of ``exercise``: ``<snake name>_cases`` and ``<snake name>_<what>_case(s)``."""
    module = checks_module_of(exercise)
    if module is None:
        return []
    return [value for name, value in sorted(vars(module).items())
            if _is_case_generator(name, value, module) and _owner(name, module) == exercise]


def all_generators() -> list:
    return [pytest.param(generator, id=f"{generator.__module__.rsplit('.', 1)[1]}.{generator.__name__}")
            for _, exercise in exercises() for generator in case_generators(exercise)]


def draw(generator, seed: int | None) -> list:
    """The cases ``generator`` draws, under the run seed ``seed`` (None: in a student's process)."""
    if seed is None:
        cases = generator()
    else:
        with use_run_seed(seed):
            cases = generator()
    return list(cases) if isinstance(cases, (list, tuple)) else [cases]


# --------------------------------------------------------------------------------------------------
# Cases compared by value
# --------------------------------------------------------------------------------------------------


def normalized(value, _within: frozenset = frozenset()):
    """A hashable value equal for two inputs exactly when a function given them could not tell them apart
    (descriptions left out: they are what the student reads, not what the function gets)."""
    if isinstance(value, torch.Tensor):
        flat = value.detach().cpu().contiguous().reshape(-1)
        return "tensor", str(value.dtype), tuple(value.shape), bytes(flat.view(torch.uint8).tolist())
    if value is None or isinstance(value, (bool, int, str, bytes)):
        return type(value).__name__, value
    if isinstance(value, float):
        return "float", repr(value)  # NaN equals NaN, 0.0 differs from -0.0
    if isinstance(value, (torch.dtype, torch.device)):
        return type(value).__name__, str(value)
    if id(value) in _within:
        return "cycle", type(value).__qualname__
    within = _within | {id(value)}
    if isinstance(value, (list, tuple)):
        return type(value).__name__, tuple(normalized(item, within) for item in value)
    if isinstance(value, dict):
        return "dict", tuple(sorted((repr(normalized(key, within)), normalized(item, within))
                                    for key, item in value.items()))
    if isinstance(value, (set, frozenset)):
        return "set", tuple(sorted((normalized(item, within) for item in value), key=repr))
    if isinstance(value, nn.Module):
        return (type(value).__qualname__, normalized(value.state_dict(), within), value.training,
                tuple((name, parameter.requires_grad) for name, parameter in value.named_parameters()))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return type(value).__qualname__, tuple((field.name, normalized(getattr(value, field.name), within))
                                                for field in dataclasses.fields(value) if field.name != "description")
    if isinstance(value, functools.partial):
        return ("partial", normalized(value.func, within), normalized(value.args, within),
                normalized(value.keywords, within))
    if inspect.isroutine(value) or isinstance(value, type):
        return "function", getattr(value, "__module__", None), getattr(value, "__qualname__", repr(value))
    if callable(getattr(value, "state_dict", None)):  # optimizers, schedulers
        return type(value).__qualname__, normalized(value.state_dict(), within)
    if hasattr(value, "__dict__"):
        return type(value).__qualname__, normalized(vars(value), within)
    raise TypeError(f"a case holds a {type(value).__qualname__}, which this test cannot compare by value")


def test_normalized_compares_by_value():
    first = [torch.tensor([1.0, float("nan")]), {"b": nn.Linear(2, 2), "a": (3, "x")}]
    second = [first[0].clone(), {"a": (3, "x"), "b": nn.Linear(2, 2)}]
    second[1]["b"].load_state_dict(first[1]["b"].state_dict())
    assert normalized(first) == normalized(second)
    assert normalized(torch.tensor([1, 2])) != normalized(torch.tensor([1, 2], dtype=torch.int32))
    assert normalized(torch.zeros(2, 3)) != normalized(torch.zeros(3, 2))
    assert normalized(1) != normalized(1.0) != normalized(True)
    frozen = nn.Linear(2, 2)
    frozen.load_state_dict(first[1]["b"].state_dict())
    frozen.requires_grad_(False)
    assert normalized(frozen) != normalized(first[1]["b"])
    assert normalized(first[1]["b"].eval()) != normalized(second[1]["b"])


# --------------------------------------------------------------------------------------------------
# Every exercise draws its cases from case generators, and only there
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("chapter, exercise", exercises(), ids=[exercise for _, exercise in exercises()])
def test_every_exercise_has_a_case_generator(chapter, exercise):
    module = checks_module_of(exercise)
    assert module is not None, f"{chapter}: no module of autograder.checks has check_{exercise}"
    names = [generator.__name__ for generator in case_generators(exercise)]
    assert f"{snake_case(exercise)}_cases" in names, (
        f"{chapter}: {module.__name__} draws the cases of {exercise} in no function {snake_case(exercise)}_cases()")


@pytest.mark.parametrize("module", checks_modules(), ids=lambda module: module.__name__.rsplit(".", 1)[1])
def test_every_case_generator_belongs_to_an_exercise(module):
    orphans = [name for name, value in vars(module).items()
               if _is_case_generator(name, value, module) and _owner(name, module) is None]
    assert not orphans, \
        f"{module.__name__}: case generators of no exercise of the chapters (a misspelt name?): {orphans}"


@pytest.mark.parametrize("chapter, exercise", exercises(), ids=[exercise for _, exercise in exercises()])
def test_a_check_draws_only_within_its_case_generators(chapter, exercise, monkeypatch):
    """Run the check on the solution under a run seed, watching ``generator_for``: every generator it asks
    for is asked for by one of the exercise's case generators (so the tests above cover every draw)."""
    module = checks_module_of(exercise)
    generators = {generator.__code__ for generator in case_generators(exercise)}
    outside = []
    real_generator_for = module.generator_for

    def watched_generator_for(name):
        frame = sys._getframe(1)
        while frame is not None and frame.f_code not in generators:
            frame = frame.f_back
        if frame is None:
            outside.append((name, sys._getframe(1).f_code.co_qualname))
        return real_generator_for(name)

    monkeypatch.setattr(module, "generator_for", watched_generator_for)
    check = getattr(module, f"check_{exercise}")
    solution = test_visible_hints.student_namespace(chapter)[exercise]
    with use_run_seed(RUN_SEED):
        assert check(solution).startswith(f"{exercise}: all")
    assert not outside, f"check_{exercise} draws outside its case generators: {outside}"


# --------------------------------------------------------------------------------------------------
# The hidden cases depend on the run seed
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("generator", all_generators())
def test_two_run_seeds_share_no_case(generator):
    first, second = ([normalized(case) for case in draw(generator, seed)] for seed in RUN_SEEDS)
    common = [number for number, case in enumerate(second, start=1) if case in set(first)]
    assert not common, (f"{generator.__name__}: under the run seeds {RUN_SEEDS}, case(s) {common} of the second "
                        "are cases of the first: draw their sizes and arguments too, from wider ranges")


@pytest.mark.parametrize("generator", all_generators())
def test_no_hidden_case_is_one_a_student_can_draw(generator):
    """What a student's notebook draws (no run seed) earns nothing: no hidden case is among it."""
    drawable = {normalized(case) for case in draw(generator, None)}
    for seed in RUN_SEEDS:
        known = [number for number, case in enumerate(draw(generator, seed), start=1) if normalized(case) in drawable]
        assert not known, (f"{generator.__name__}: under the run seed {seed}, case(s) {known} can be drawn without "
                           "it, so answered from a table computed ahead of time")


@pytest.mark.parametrize("generator", all_generators())
def test_the_same_seed_draws_the_same_cases(generator):
    for seed in (None, RUN_SEEDS[0]):
        assert [normalized(case) for case in draw(generator, seed)] \
            == [normalized(case) for case in draw(generator, seed)]


# --------------------------------------------------------------------------------------------------
# The hints still name the mistakes on the hidden cases
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("chapter, exercise, wrong, hint", list(test_visible_hints.all_mistakes()))
def test_a_mistake_gets_its_hint_on_the_hidden_cases(chapter, exercise, wrong, hint):
    check = getattr(test_visible_hints.MUTATION_TESTS[chapter].checks, f"check_{exercise}")
    with use_run_seed(RUN_SEED), pytest.raises(CheckFailed) as failure:
        check(wrong)
    assert hint in str(failure.value), str(failure.value)


# Exercises whose cases once let two mistakes agree, or a mistake pass, under some run seeds (found by a
# sweep of every mistake under 60 seeds): swept here, as drawing a case again until the mistakes differ
# is what keeps their hints right.
SWEPT_EXERCISES = ("mlm_loss", "tagging_accuracy", "best_span")
SWEPT_SEEDS = range(1, 61)


@pytest.mark.parametrize("chapter, exercise, wrong, hint", [
    mistake for mistake in test_visible_hints.all_mistakes() if mistake.values[1] in SWEPT_EXERCISES])
def test_a_mistake_gets_its_hint_under_many_run_seeds(chapter, exercise, wrong, hint):
    check = getattr(test_visible_hints.MUTATION_TESTS[chapter].checks, f"check_{exercise}")
    for seed in SWEPT_SEEDS:
        with use_run_seed(seed), pytest.raises(CheckFailed) as failure:
            check(wrong)
        assert hint in str(failure.value), (seed, str(failure.value))


# --------------------------------------------------------------------------------------------------
# End to end: a table of the answers to the cases a student can draw fails the hidden test
# --------------------------------------------------------------------------------------------------

PRECOMPUTED_CAUSAL_MASK = """import torch
import bertlab.attention
from autograder.checks.attention import causal_mask_cases


def _question(n, m=None, device=None):
    return n, n if m is None else m, str(device)


# the answers to every case this process can draw, computed ahead of time with the reference
answers = {_question(*case.args, **case.kwargs): bertlab.attention.causal_mask(*case.args, **case.kwargs)
           for case in causal_mask_cases()}


def causal_mask(n, m=None, device=None):
    answer = answers.get(_question(n, m, device))
    return answer.clone() if answer is not None else torch.zeros(n, n if m is None else m, dtype=torch.bool)
"""
HONEST_CAUSAL_MASK = """import torch


def causal_mask(n, m=None, device=None):
    return torch.ones(n, n if m is None else m, dtype=torch.bool, device=device).tril()
"""
BLANK_CAUSAL_MASK = """def causal_mask(n, m=None, device=None):
    raise NotImplementedError()
"""
CAUSAL_MASK_TEST = "from autograder.checks.attention import check_causal_mask\nprint(check_causal_mask(causal_mask))"


def test_a_precomputed_table_passes_the_visible_cases_only():
    from autograder.checks.attention import check_causal_mask

    namespace = {}
    exec(PRECOMPUTED_CAUSAL_MASK, namespace)  # drawn here, without a run seed: the visible cases
    assert check_causal_mask(namespace["causal_mask"]).startswith("causal_mask: all 6 cases agree")
    assert visible_check(check_causal_mask, namespace["causal_mask"]).startswith(
        "causal_mask: all 6 visible cases agree")
    with use_run_seed(RUN_SEED), pytest.raises(CheckFailed, match=r"causal_mask is not right yet, on test case 1 of 6"):
        check_causal_mask(namespace["causal_mask"])


@pytest.mark.slow
def test_a_precomputed_table_fails_the_hidden_test_where_the_honest_mask_passes():
    """Through the grader, whose run seed lives in the grader's process only: the student's process
    draws the visible cases, the test cell the hidden ones."""
    steps = [("code", PRECOMPUTED_CAUSAL_MASK), ("test", "test_table"), ("code", HONEST_CAUSAL_MASK),
             ("test", "test_honest"), ("code", BLANK_CAUSAL_MASK), ("test", "test_blank")]
    tests = {"test_table": CAUSAL_MASK_TEST, "test_honest": CAUSAL_MASK_TEST, "test_blank": CAUSAL_MASK_TEST}
    outcomes = run_in_grader(steps, tests, ["causal_mask"], Limits(cell_timeout=120, notebook_timeout=300),
                             seed=RUN_SEED)
    assert outcomes["test_table"].status == "failed", outcomes["test_table"]
    assert "causal_mask is not right yet" in outcomes["test_table"].message
    assert outcomes["test_honest"].status == "passed", outcomes["test_honest"]
    assert "causal_mask: all 6 hidden cases agree" in outcomes["test_honest"].output
    assert outcomes["test_blank"].status == "error", outcomes["test_blank"]
    assert "NotImplementedError" in outcomes["test_blank"].message
