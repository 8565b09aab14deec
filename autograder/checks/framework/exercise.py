"""The record of one exercise's check, :class:`Exercise`, and the loop that runs it over its cases."""

import dataclasses
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from autograder.checks.framework.comparison import (
    DEFAULT_TOLERANCES,
    CheckFailed,
    Mistake,
    Symptom,
    Tolerance,
    describe_difference,
    diagnose,
    failure_message,
    format_inputs,
)
from autograder.checks.framework.dependencies import with_dependencies
from autograder.checks.framework.forbidden import forbidden_calls
from autograder.checks.framework.inputs import Case, kind_of_cases, same_value


def parameter_names_of(function: Callable) -> list[str]:
    """The names of ``function``'s parameters, in order; [] when it has no inspectable signature."""
    try:
        return list(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return []


def run_student(
    student_fn: Callable,
    case: Case,
    *,
    check: str,
    forbidden: Iterable = (),
    parameter_names: Sequence[str] = (),
    mistakes: Sequence[Mistake | Symptom] = (),
    context: str = "",
):
    """Call ``student_fn`` on a copy of the case's arguments, under the forbidden-call guard.

    Returns the output. Raises :class:`CheckFailed` when the function raises (except
    ``NotImplementedError``, which passes through so a blank exercise reads as one), calls a
    forbidden function, or changes its inputs in place.
    """
    args, kwargs = case.fresh_arguments()
    context = context or case.description
    try:
        with forbidden_calls(forbidden), torch.no_grad():
            output = student_fn(*args, **kwargs)
    except (NotImplementedError, CheckFailed):
        raise
    except Exception as error:
        difference = f"your function raised {type(error).__name__}: {error}"
        hint = diagnose(error, case, mistakes)
        raise CheckFailed(
            failure_message(check, context, difference, hint, format_inputs(case, parameter_names))
        ) from error
    original_args, original_kwargs = case.args, case.kwargs
    names = list(parameter_names) + [f"argument {i}" for i in range(len(parameter_names), len(args))]
    for name, before, after in [*zip(names, original_args, args),
                                *((k, original_kwargs[k], kwargs[k]) for k in kwargs)]:
        if not same_value(before, after):
            raise CheckFailed(
                f"{check} changed its input `{name}` in place, on {context}; "
                "compute new tensors instead of modifying the arguments."
            )
    return output


def compare_output(exercise: "Exercise", student_fn: Callable, case: Case, context: str, forbidden: Sequence) -> None:
    """The comparison of most exercises, on one case: run ``student_fn`` and the reference on copies of the
    case's arguments and compare the outputs (:func:`describe_difference` with the exercise's tolerance);
    raise :class:`CheckFailed` with the hint of the catalogued mistake that explains a wrong output.

    With ``exercise.validate``, an output of the wrong form (type, keys) is reported as the validator says,
    without a hint, and outputs of the right form must be equal (lists, dicts, ints; see
    :func:`describe_mismatch`).
    """
    parameter_names = exercise.parameter_names_for_messages()
    actual = run_student(student_fn, case, check=exercise.name, forbidden=forbidden, parameter_names=parameter_names,
                         mistakes=exercise.mistakes, context=context)
    args, kwargs = case.fresh_arguments()
    with torch.no_grad():
        expected = exercise.reference(*args, **kwargs)
    hint = None
    if exercise.validate is not None:
        difference = exercise.validate(actual)
        if difference is None and actual != expected:
            difference = describe_mismatch(actual, expected)
            hint = diagnose(actual, case, exercise.mistakes)
    else:
        difference = describe_difference(actual, expected, exercise.tolerance, exercise.output_names)
        if difference is not None:
            hint = diagnose(actual, case, exercise.mistakes, exercise.tolerance)
    if difference is not None:
        raise CheckFailed(failure_message(exercise.name, context, difference, hint,
                                          format_inputs(case, parameter_names)))


def describe_mismatch(actual, expected) -> str:
    """How two unequal outputs of an exact comparison differ: for a dict, its first differing entry (a list,
    with the first position where it differs); otherwise both outputs."""
    if isinstance(expected, dict):
        for name, values in expected.items():
            if actual[name] != values:
                return (f"{name}: you returned\n      {actual[name]}\n    expected\n      {values}"
                        + _first_difference(actual[name], values))
    return f"output: you returned {actual!r}, expected {expected!r}."


def _first_difference(actual: list, expected: list) -> str:
    for index, (a, e) in enumerate(zip(actual, expected)):
        if a != e:
            return f"\n    (first difference at position {index}: {a!r} instead of {e!r})"
    return f"\n    (you returned {len(actual)} values, expected {len(expected)})"


@dataclass(frozen=True)
class Exercise:
    """The check of one exercise, declared: what the student's function (or class) is compared with, on
    which cases, which mistakes it recognises, what it may not call. ``check`` runs it.

    Each module of checks declares its exercises as records at its top level (``SOFTMAX =
    Exercise("softmax", ...)``; :func:`autograder.checks.exercises_by_chapter` finds them), names its
    chapter in ``CHAPTER``, and ends with ``__getattr__ = check_functions(globals())``: the
    ``check_<name>`` function that the notebooks' test cells call is derived from the record
    (:func:`check_function`), and nothing else names it.

    Fields:
        name: the exercise's name, as in the notebook (``softmax``, ``MultiHeadAttention``); messages
            start with it.
        reference: the ``bertlab`` function or class the student's must agree with.
        cases: draws the cases (from :func:`generator_for` of the name): :class:`Case` records for
            :func:`compare_output`, or whatever ``compare`` reads; each has a ``description``.
        mistakes: the catalogue, tried in order on a failure. For a function exercise, :class:`Mistake`
            records (wrong implementations with the reference's signature, which the tests also put in
            place of the solution) and :class:`Symptom` records. For a class exercise, what its
            ``compare`` reads: a function making the mistakes of a case from its reference module.
        forbidden: what the student's code may not call (:func:`forbidden_calls`); ``forbid=False`` lifts it.
        dependencies: the global names of earlier exercises the student's code uses, mapped to their
            references (:func:`with_dependencies`), so one mistake is not punished twice.
        tolerance: a :class:`Tolerance`, or a dict from dtype to Tolerance.
        output_names: the name of the output, or one name per element of a returned tuple.
        parameter_names: the names of the arguments, for the messages; by default the reference's.
        naming_hint: for a class exercise, how to name the submodules, shown when the parameters differ.
        validate: for an exact comparison (lists, dicts, ints): says what is wrong with the form of an
            output (type, keys), or None; the outputs are then compared with ``==``.
        compare: the comparison of one case, ``compare(exercise, student, case, context, forbidden)``:
            raises :class:`CheckFailed` on a difference, and returns how many comparisons the case held
            (None: one). By default :func:`compare_output`; the modules' is in :mod:`.modules`.
        then: tests after the cases, ``step(exercise, student, forbidden)``, each returning what it adds
            to the summary (", and no (N, M) matrix was built").
        agreement: what the summary says of the cases: ``"<name>: all 9 cases agree with the reference"`` (``all
            9 visible cases`` in a visible test, ``all 9 hidden cases`` in a hidden one).
        torch_threads: the number of torch's CPU threads while the check runs (restored afterwards), for a
            check whose measurement depends on it (the largest allocation of chapter 05); None: unchanged.
        summary: what the check compares, on which cases, with which tolerance, and what is forbidden:
            the docstring of ``check_<name>``.
    """

    name: str
    reference: Callable
    cases: Callable[[], Sequence]
    mistakes: Sequence[Mistake | Symptom] | Callable | Mapping = ()
    forbidden: Sequence = ()
    dependencies: Mapping[str, Callable] = field(default_factory=dict)
    tolerance: Tolerance | Mapping = field(default_factory=lambda: DEFAULT_TOLERANCES)
    output_names: str | Sequence[str] = "output"
    parameter_names: Sequence[str] | None = None
    naming_hint: str = ""
    validate: Callable[[object], str | None] | None = None
    compare: Callable[..., int | None] = compare_output
    then: Sequence[Callable[["Exercise", Callable, Sequence], str]] = ()
    agreement: str = "agree with the reference"
    torch_threads: int | None = None
    summary: str = ""

    def parameter_names_for_messages(self) -> list[str]:
        """The names of the arguments in messages: ``parameter_names``, or the reference's parameters."""
        return list(self.parameter_names) if self.parameter_names is not None else parameter_names_of(self.reference)

    def check(self, student, *, forbid: bool = True) -> str:
        """Compare ``student`` with the reference on every case (with the references of the dependencies
        in place of the student's earlier exercises), then run the ``then`` tests; return a summary, or
        raise :class:`CheckFailed` on the first difference. ``forbid=False`` lifts the forbidden-call rule."""
        if self.torch_threads is not None:
            threads = torch.get_num_threads()
            torch.set_num_threads(self.torch_threads)
            try:
                return dataclasses.replace(self, torch_threads=None).check(student, forbid=forbid)
            finally:
                torch.set_num_threads(threads)
        forbidden = list(self.forbidden) if forbid else []
        if self.dependencies:
            student = with_dependencies(student, **self.dependencies)
        cases = self.cases()
        compared = 0
        for number, case in enumerate(cases, start=1):
            context = f"test case {number} of {len(cases)} ({case.description})"
            compared += self.compare(self, student, case, context, forbidden) or 1
        summary = f"{self.name}: all {compared} {kind_of_cases()}cases {self.agreement}"
        for step in self.then:
            summary += step(self, student, forbidden)
        return summary


def check_against_reference(
    student_fn: Callable,
    reference_fn: Callable,
    cases: Sequence[Case],
    *,
    check: str,
    tolerance: Tolerance | Mapping = DEFAULT_TOLERANCES,
    mistakes: Sequence[Mistake | Symptom] = (),
    forbidden: Iterable = (),
    dependencies: Mapping[str, Callable] | None = None,
    output_names: str | Sequence[str] = "output",
) -> str:
    """Run ``student_fn`` and ``reference_fn`` on every case and compare; return a summary: the check of
    an :class:`Exercise` with these fields (the chapters' checks declare theirs), on the given cases.

    Raises:
        CheckFailed: on the first case where the student's output differs from the reference's.
    """
    cases = list(cases)
    exercise = Exercise(check, reference_fn, lambda: cases, mistakes=mistakes, forbidden=tuple(forbidden),
                        dependencies=dependencies or {}, tolerance=tolerance, output_names=output_names)
    return exercise.check(student_fn)


def check_function(exercise: Exercise) -> Callable[..., str]:
    """``check_<name>``, what a notebook's test cell calls: ``exercise.check(student, forbid=forbid)``,
    named after the exercise, its docstring the record's ``summary``."""
    def check(student, *, forbid: bool = True) -> str:
        return exercise.check(student, forbid=forbid)

    check.__name__ = check.__qualname__ = f"check_{exercise.name}"
    check.__doc__ = inspect.cleandoc(exercise.summary)
    return check


def check_functions(namespace: Mapping[str, object]) -> Callable[[str], Callable[..., str]]:
    """The ``__getattr__`` of a module of checks (PEP 562): ``check_<name>`` for each :class:`Exercise` record
    at the module's top level (``namespace``, its ``globals()``), derived by :func:`check_function`."""
    def module_getattr(attribute: str) -> Callable[..., str]:
        for value in namespace.values():
            if isinstance(value, Exercise) and attribute == f"check_{value.name}":
                return check_function(value)
        raise AttributeError(f"module {namespace['__name__']!r} has no attribute {attribute!r}")

    return module_getattr
