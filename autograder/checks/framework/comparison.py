"""The comparison of a student's output with the reference's, and its diagnosis: what differs, where, by how
much, and which known mistake it matches."""

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NoReturn

import torch

from autograder.checks.framework.inputs import Case


class CheckFailed(AssertionError):
    """A student's function gave a wrong result; the message says what, where and why."""

    def _render_traceback_(self) -> list[str]:
        """What a notebook shows (IPython's hook): the message, not the frames of the checks."""
        return [f"{type(self).__name__}: {self}"]



@dataclass(frozen=True)
class Tolerance:
    """``|actual - expected| <= atol + rtol * |expected|``, as in ``torch.testing.assert_close``."""

    atol: float
    rtol: float

    def __str__(self) -> str:
        return f"atol={self.atol:g}, rtol={self.rtol:g}"


#: Tolerances per dtype for checks that compute the same formula as the reference in another order.
DEFAULT_TOLERANCES = {
    torch.float64: Tolerance(atol=1e-10, rtol=1e-7),
    torch.float32: Tolerance(atol=1e-5, rtol=1e-4),
    torch.float16: Tolerance(atol=2e-3, rtol=2e-3),
    torch.bfloat16: Tolerance(atol=2e-2, rtol=2e-2),
}


def _tolerance_for(tolerance: Tolerance | Mapping, dtype: torch.dtype) -> Tolerance:
    if isinstance(tolerance, Tolerance):
        return tolerance
    return tolerance.get(dtype, DEFAULT_TOLERANCES.get(dtype, Tolerance(0.0, 0.0)))


def _a(type_name: str) -> str:
    """'a float', 'an int'."""
    return f"{'an' if type_name[0] in 'aeiou' else 'a'} {type_name}"


def _format_number(value) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _describe_tensor_difference(
    actual: torch.Tensor, expected: torch.Tensor, tolerance: Tolerance | Mapping, name: str
) -> str | None:
    if actual.shape != expected.shape:
        return f"{name}: you returned shape {tuple(actual.shape)}, expected shape {tuple(expected.shape)}."
    if actual.dtype != expected.dtype:
        return f"{name}: you returned dtype {actual.dtype}, expected {expected.dtype}."
    if actual.device != expected.device:
        return f"{name}: you returned a tensor on {actual.device}, expected one on {expected.device}."
    if expected.dtype == torch.bool or not expected.is_floating_point():
        wrong = actual != expected
        if not wrong.any():
            return None
        index = tuple(torch.nonzero(wrong)[0].tolist())
        return (
            f"{name}: {int(wrong.sum())} of {expected.numel()} values differ; first at index {index}: "
            f"you returned {actual[index].item()}, expected {expected[index].item()}."
        )
    tol = _tolerance_for(tolerance, expected.dtype)
    actual64, expected64 = actual.double(), expected.double()
    # Infinities and NaN must be where the reference has them; finite values must be close.
    special = ~torch.isfinite(actual64) | ~torch.isfinite(expected64)
    special_wrong = special & ~((actual64 == expected64) | (actual64.isnan() & expected64.isnan()))
    error = (actual64 - expected64).abs().where(~special, 0.0)
    allowed_error = tol.atol + tol.rtol * expected64.abs().where(~special, 0.0)
    wrong = special_wrong | (error > allowed_error)
    if not wrong.any():
        return None
    count = f"{int(wrong.sum())} of {expected.numel()} values differ"
    if special_wrong.any():
        index = tuple(torch.nonzero(special_wrong)[0].tolist())
        return (
            f"{name}: {count}; at index {index} you returned {actual[index].item()}, expected "
            f"{expected[index].item()} ({int(actual64.isnan().sum())} NaN and "
            f"{int(actual64.isinf().sum())} infinite values in your output)."
        )
    flat = int((error - allowed_error).argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), expected.shape))
    return (
        f"{name}: {count}; the largest difference is {error[index].item():.3g} at index {index}: "
        f"you returned {actual[index].item():.6g}, expected {expected[index].item():.6g} "
        f"(tolerance {tol})."
    )


def describe_difference(
    actual,
    expected,
    tolerance: Tolerance | Mapping = DEFAULT_TOLERANCES,
    name: str = "output",
) -> str | None:
    """Say how ``actual`` differs from ``expected``, or return None when they agree.

    Handles tensors (shape, dtype, then values within ``tolerance``: a :class:`Tolerance` or a
    dict from dtype to Tolerance), Python numbers, and tuples or lists of those (named
    ``name[0]``, ``name[1]``, ... unless ``name`` is a sequence of names, one per element).
    """
    names = None if isinstance(name, str) else list(name)
    label = name if isinstance(name, str) else "output"
    if isinstance(expected, (tuple, list)):
        if not isinstance(actual, (tuple, list)) or len(actual) != len(expected):
            what = _a(type(actual).__name__) + (
                f" of length {len(actual)}" if isinstance(actual, (tuple, list)) else "")
            wanted = ", ".join(names) if names else f"{len(expected)} values"
            return f"{label}: you returned {what}, expected a tuple ({wanted})."
        for i, (a, e) in enumerate(zip(actual, expected)):
            difference = describe_difference(a, e, tolerance, names[i] if names else f"{label}[{i}]")
            if difference:
                return difference
        return None
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            return f"{label}: you returned {_a(type(actual).__name__)}, expected a torch.Tensor."
        return _describe_tensor_difference(actual, expected, tolerance, label)
    if isinstance(expected, int):  # bool is an int too; a bool must come back as a bool
        if not isinstance(actual, int) or isinstance(actual, bool) != isinstance(expected, bool):
            return f"{label}: you returned {_a(type(actual).__name__)}, expected {_a(type(expected).__name__)}."
        return None if actual == expected else f"{label}: you returned {actual}, expected {expected}."
    if isinstance(expected, float):
        tol = _tolerance_for(tolerance, torch.float64)
        if not isinstance(actual, (int, float)) or isinstance(actual, bool):
            return f"{label}: you returned {_a(type(actual).__name__)}, expected a float."
        if abs(actual - expected) <= tol.atol + tol.rtol * abs(expected):
            return None
        return (f"{label}: you returned {_format_number(float(actual))}, expected {_format_number(expected)} "
                f"(tolerance {tol}).")
    return None if actual == expected else f"{label}: you returned {actual!r}, expected {expected!r}."


@dataclass(frozen=True)
class Mistake:
    """A known-wrong implementation (same signature as the reference) and the hint it deserves."""

    implementation: Callable
    hint: str

    def output(self, case: Case):
        """What the implementation returns on (fresh copies of the arguments of) ``case``, or the
        exception it raises."""
        args, kwargs = case.fresh_arguments()
        try:
            with torch.no_grad():
                return self.implementation(*args, **kwargs)
        except Exception as error:
            return error

    def explains(self, actual, case: Case, tolerance=DEFAULT_TOLERANCES) -> bool:
        """Whether the implementation gives ``actual`` on ``case``: the same output, or, when ``actual``
        is an exception, the same exception type with the same message."""
        return _same_result(actual, self.output(case), tolerance)


def _same_result(actual, output, tolerance) -> bool:
    """Whether ``output`` (or the exception raised instead) is ``actual``: within ``tolerance``, or, for
    an exception, of the same type and message."""
    if isinstance(output, Exception):
        return isinstance(actual, Exception) and type(actual) is type(output) and str(actual) == str(output)
    return not isinstance(actual, Exception) and describe_difference(actual, output, tolerance) is None


@dataclass(frozen=True)
class Symptom:
    """A sign of a known mistake read from the student's output alone, whatever code produced it
    (probabilities that sum to 1 along the wrong axis, ...), and the hint it deserves.

    ``shows(actual, case)`` says whether the output has the sign; it is asked only about a wrong output.
    """

    shows: Callable[[object, Case], bool]
    hint: str

    def explains(self, actual, case: Case, tolerance=DEFAULT_TOLERANCES) -> bool:
        """Whether ``actual`` (an output, not an exception) shows the sign."""
        if isinstance(actual, Exception):
            return False
        try:
            return bool(self.shows(actual, case))
        except Exception:  # an output of another kind than the sign reads (a student's tuple, a string)
            return False


def diagnose(actual, case: Case, mistakes: Iterable[Mistake | Symptom], tolerance=DEFAULT_TOLERANCES) -> str | None:
    """The hint of the mistake or symptom of the catalogue that explains ``actual`` on ``case``: the first
    mistake that gives ``actual`` to a hundredth of ``tolerance``, else the first mistake or symptom that
    explains it within ``tolerance``. (Two mistakes may give outputs within the tolerance of each other
    on a case by chance; the one the student made gives theirs much closer.)

    ``actual`` may be an exception the student's function raised: a mistake then matches when it
    raises the same exception type with the same message.
    """
    mistakes = list(mistakes)
    outputs = {index: mistake.output(case) for index, mistake in enumerate(mistakes) if isinstance(mistake, Mistake)}

    def matches(index: int, within) -> bool:
        if index in outputs:  # each mistake's implementation runs once
            return _same_result(actual, outputs[index], within)
        return mistakes[index].explains(actual, case, within)

    for within, candidates in ((_tightened(tolerance, 100), outputs), (tolerance, range(len(mistakes)))):
        index = next((index for index in candidates if matches(index, within)), None)
        if index is not None:
            return mistakes[index].hint
    return None


def mistakes_told_apart(case: Case, mistakes: Iterable[Mistake | Symptom]) -> bool:
    """Whether every two catalogued mistakes with different hints give outputs on ``case`` that
    :func:`describe_difference` tells apart (the mistakes that raise left out). A case drawn again until
    this holds gives each wrong output it meets the hint of the mistake that made it, where two mistakes
    could otherwise agree by chance (two accuracies of 1/4, say)."""
    outputs = [(mistake.hint, mistake.output(case)) for mistake in mistakes if isinstance(mistake, Mistake)]
    outputs = [(hint, output) for hint, output in outputs if not isinstance(output, Exception)]
    return all(first_hint == second_hint or describe_difference(first, second) is not None
               for (first_hint, first), (second_hint, second) in itertools.combinations(outputs, 2))


def _tightened(tolerance: Tolerance | Mapping, factor: float) -> Tolerance | dict:
    """``tolerance`` (one, or one per dtype over the defaults) divided by ``factor``."""
    if isinstance(tolerance, Tolerance):
        return Tolerance(tolerance.atol / factor, tolerance.rtol / factor)
    return {dtype: _tightened(_tolerance_for(tolerance, dtype), factor) for dtype in {*DEFAULT_TOLERANCES, *tolerance}}


def hint_of_first(mistakes: Iterable[Mistake | Symptom], matches: Callable[[Mistake | Symptom], bool]) -> str | None:
    """The hint of the first of ``mistakes`` that ``matches``: :func:`diagnose`'s search, for the checks that
    compare something else than an output (the parameters a function leaves trainable, the groups' rates)."""
    return next((mistake.hint for mistake in mistakes if matches(mistake)), None)


def sums_to_one_along(probabilities: torch.Tensor, dim: int) -> bool:
    """Whether every slice of ``probabilities`` along ``dim`` sums to 1, or to 0 (a fully masked slice)."""
    totals = probabilities.double().sum(dim=dim)
    return bool(((totals - 1).abs().le(1e-3) | totals.abs().le(1e-3)).all())


def normalized_along_another_axis(probabilities, dim: int) -> bool:
    """Whether ``probabilities`` sum to 1 along some axis other than ``dim``, and not along ``dim``: a
    softmax whose sum (or maximum and sum) was taken along the wrong axis."""
    if not isinstance(probabilities, torch.Tensor) or probabilities.dim() < 2:
        return False
    dim %= probabilities.dim()
    return not sums_to_one_along(probabilities, dim) and any(
        sums_to_one_along(probabilities, other) for other in range(probabilities.dim()) if other != dim)


def format_inputs(case: Case, parameter_names: Sequence[str]) -> str:
    """The case's arguments written out under "Inputs:", one ``name = value`` a line, so that the student
    can copy them into the notebook and rerun the case; "" when a tensor has more than 24 values.

    ``parameter_names`` names the positional arguments (see :func:`parameter_names_of`).
    """
    lines = []
    named = list(zip(parameter_names, case.args)) + list(case.kwargs.items())
    for name, value in named:
        if isinstance(value, torch.Tensor):
            if value.numel() > 24:
                return ""
            value = repr(value).replace("\n", " ").replace("       ", " ")
        lines.append(f"{name} = {value}")
    return "\n    ".join(["Inputs:", *lines]) if lines else ""


def assert_close(
    actual,
    expected,
    *,
    check: str,
    tolerance: Tolerance | Mapping = DEFAULT_TOLERANCES,
    name: str | Sequence[str] = "output",
    context: str = "",
    hint: str | None = None,
) -> None:
    """Raise :class:`CheckFailed` unless ``actual`` agrees with ``expected``.

    ``check`` names the exercise, ``context`` says which case it was (shapes, dtype, mask), and
    ``hint`` is added to the message when given.
    """
    difference = describe_difference(actual, expected, tolerance, name)
    if difference is None:
        return
    raise CheckFailed(failure_message(check, context, difference, hint))


def failure_message(check: str, context: str, difference: str, hint: str | None, inputs: str = "") -> str:
    """The message of a :class:`CheckFailed`, the same in every check: which exercise and which case
    (``context``), what differs, then the hint and the inputs (:func:`format_inputs`) when given.

    Example: ``softmax is not right yet, on test case 2 of 9 (...).`` followed by the indented lines.
    """
    lines = [f"{check} is not right yet" + (f", on {context}" if context else "") + ".", "  " + difference]
    if hint:
        lines.append("  Hint: " + hint)
    if inputs:
        lines.append("  " + inputs)
    return "\n".join(lines)


def fail(check: str, context: str, problem: str, hint: str | None = None) -> NoReturn:
    """Raise :class:`CheckFailed` with :func:`failure_message`: the checks that compare more than one
    output (a module's parameters, then its outputs, then its dropout) fail with it."""
    raise CheckFailed(failure_message(check, context, problem, hint))
