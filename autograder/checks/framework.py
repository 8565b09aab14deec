"""Shared machinery of the checks that the chapters' hidden tests call.

A check compares a student's function with the reference implementation in ``bertlab`` on inputs
drawn at grading time, and either returns a short summary or raises :class:`CheckFailed` with a
message a student can act on: what differs, where, by how much, and, when the wrong output matches a
known mistake, a hint about that mistake. Four pieces:

- :class:`Case`, :func:`generator_for`, :func:`random_normal`, :func:`random_integer`,
  :func:`random_choice`: the inputs of a check, drawn from a generator seeded by the check's name and,
  when the grader runs the check, by the grading run's seed (:func:`use_run_seed`), which only the
  grader knows: a student's code cannot compute the cases ahead of time, and a regrade with the same
  seed meets the same inputs. Every hidden case depends on that seed: its values, and also its sizes
  and integer arguments, which are drawn too.
- :func:`describe_difference`, :func:`assert_close`, :class:`Mistake`, :class:`Symptom`: the
  comparison and its diagnosis; a check lists known-wrong implementations (forgot 1/sqrt(d_k), softmax
  over the wrong axis, ...) and the hint shown when the student's output equals one of theirs, and
  signs read from the output alone (probabilities that sum to 1 along another axis than ``dim``).
- :func:`forbidden_calls`, :func:`allowed`: while the student's code runs, calling the reference or
  a built-in that does the exercise's job fails with "implement this yourself". Torch functions are
  caught with a ``TorchFunctionMode`` and Python functions by their code object with a profile hook,
  so aliases captured before the check (``from torch.nn.functional import softmax as f``) are caught.
  This is a hint for honest mistakes, not a security measure: the rule runs in the student's own
  process, where the student's code can switch it off; the grader flags copies of the reference
  for the instructor instead (:mod:`autograder.reference_copies`).
- :func:`with_dependencies`: runs the student's function with the reference versions of the earlier
  exercises it builds on, so one mistake is not punished twice.
- :func:`visible_check`: a check on its fixed, visible cases (:func:`visible_cases`), for the visible
  test cells: the student sees the check's message and hint in the notebook.

An :class:`Exercise` puts them together: the record of one exercise's check (reference, cases, mistakes,
forbidden functions, dependencies, tolerance), whose ``check`` runs the loop over the cases and compares
each with :func:`compare_output`, or with the exercise's own ``compare`` of one case (the modules' is
:func:`autograder.checks.modules.compare_module`). The checks modules declare their exercises as records.
"""

import hashlib
import inspect
import itertools
import sys
import types
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import wraps
from typing import NoReturn

import torch
from torch.overrides import TorchFunctionMode


class CheckFailed(AssertionError):
    """A student's function gave a wrong result; the message says what, where and why."""

    def _render_traceback_(self) -> list[str]:
        """What a notebook shows (IPython's hook): the message, not the frames of the checks."""
        return [f"{type(self).__name__}: {self}"]


# --------------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One call of the function under test: a description for the student, and the arguments."""

    description: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)

    def fresh_arguments(self) -> tuple[tuple, dict]:
        """Copies of the arguments (tensors cloned), so no call can change another call's inputs."""
        return _clone(self.args), _clone(self.kwargs)


_run_seed: int | None = None  # the grading run's seed, set in the grader's process only
_visible: bool = False  # within visible_check: the fixed cases, whatever the run seed


@contextmanager
def use_run_seed(seed: int):
    """Within the block, :func:`generator_for` also depends on ``seed`` (the grader's run seed)."""
    global _run_seed
    previous, _run_seed = _run_seed, seed
    try:
        yield
    finally:
        _run_seed = previous


@contextmanager
def visible_cases():
    """Within the block, :func:`generator_for` ignores the grading run's seed: the checks draw their
    visible cases, the same in the student's notebook and in every grading run."""
    global _visible
    previous, _visible = _visible, True
    try:
        yield
    finally:
        _visible = previous


def _kind_of_cases() -> str:
    """What a summary calls the cases it checked: ``"visible "`` within :func:`visible_cases`, ``"hidden "``
    in a grading run (its seed set), else nothing (a check called by hand)."""
    return "visible " if _visible else "hidden " if _run_seed is not None else ""


def generator_for(name: str) -> torch.Generator:
    """A CPU generator seeded by ``name``, and by the grading run's seed within :func:`use_run_seed`
    (unless within :func:`visible_cases`): the same inputs for the same (name, run seed)."""
    if _run_seed is None or _visible:
        return torch.Generator().manual_seed(zlib.crc32(name.encode()))
    digest = hashlib.sha256(f"{_run_seed}:{name}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "big") >> 1)


def random_normal(
    generator: torch.Generator, *shape: int, scale: float = 1.0, shift: float = 0.0, dtype=torch.float32
) -> torch.Tensor:
    """A tensor of ``shape`` drawn from N(shift, scale^2) with ``generator``, then cast to ``dtype``.

    The values are drawn in float64, so a case in float32, float64 or bfloat16 holds the same numbers
    (up to the rounding of its dtype).
    """
    return (torch.randn(shape, generator=generator, dtype=torch.float64) * scale + shift).to(dtype)


def random_integer(generator: torch.Generator, low: int, high: int) -> int:
    """An integer drawn uniformly from ``low`` to ``high`` (both included) with ``generator``.

    The sizes and integer arguments of the cases (lengths, window sizes, numbers of heads, ...) are drawn
    with it, so that a hidden case changes with the grading run's seed however small its input: a table
    of answers computed ahead of time, on the cases a student can draw, misses it. Draw from ranges wide
    enough that two seeds rarely give the same case.
    """
    return int(torch.randint(low, high + 1, (1,), generator=generator))


def random_choice(generator: torch.Generator, options: Sequence):
    """One of ``options``, drawn uniformly with ``generator``."""
    return options[random_integer(generator, 0, len(options) - 1)]


def _clone(value):
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (tuple, list)):
        return type(value)(_clone(item) for item in value)
    if isinstance(value, dict):
        return {key: _clone(item) for key, item in value.items()}
    return value


def _same(a, b) -> bool:
    """Exact equality of two argument structures (NaN equals NaN)."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if not a.is_floating_point():
            return torch.equal(a, b)
        return bool(((a == b) | (a.isnan() & b.isnan())).all())
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[key], b[key]) for key in a)
    return a is b or a == b


# --------------------------------------------------------------------------------------------------
# Comparison and diagnosis
# --------------------------------------------------------------------------------------------------


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
            what = _a(type(actual).__name__) + (f" of length {len(actual)}" if isinstance(actual, (tuple, list)) else "")
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
        return f"{label}: you returned {_format_number(float(actual))}, expected {_format_number(expected)} (tolerance {tol})."
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


# --------------------------------------------------------------------------------------------------
# "Implement this yourself": forbidden calls
# --------------------------------------------------------------------------------------------------

_TORCH_MODULE_NAMES = {"torch._C._nn": "torch.nn.functional", "torch._C._special": "torch.special", "torch._C._linalg": "torch.linalg"}


def describe_callable(function) -> str:
    """The name a student would write for ``function``, e.g. ``torch.nn.functional.softmax``."""
    if isinstance(function, str):
        return function
    if isinstance(function, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return f"torch.ops.{function}"
    name = getattr(function, "__name__", repr(function))
    qualname = getattr(function, "__qualname__", name)
    module = getattr(function, "__module__", None) or getattr(getattr(function, "__objclass__", None), "__module__", None)
    if qualname.startswith("TensorBase.") or qualname.startswith("Tensor."):
        return f"torch.Tensor.{name}"
    if qualname.startswith("_VariableFunctionsClass."):
        return f"torch.{name}"
    if module in _TORCH_MODULE_NAMES:
        prefix = _TORCH_MODULE_NAMES[module]
        return f"{prefix}.{name.removeprefix(prefix.rsplit('.', 1)[-1] + '_')}"
    return f"{module}.{qualname}" if module else qualname


class _ForbiddenCallGuard(TorchFunctionMode):
    """Records calls to forbidden functions made while it is active (see :func:`forbidden_calls`)."""

    def __init__(self, forbidden: Iterable):
        super().__init__()
        self.names_by_object = {}  # torch functions, methods, ops and builtins -> display name
        self.names_by_code = {}  # code objects of Python functions -> display name
        self.qualified_names = set()  # "module.qualname" strings, for modules not imported
        self.method_names = set()  # the __name__ of each, to tell quickly which bound methods may be forbidden
        for function in forbidden:
            name = describe_callable(function)
            if isinstance(function, str):
                self.qualified_names.add(function)
                continue
            self.names_by_object[function] = name
            self.method_names.add(getattr(function, "__name__", None))
            code = getattr(inspect.unwrap(function), "__code__", None)
            if code is not None:
                self.names_by_code[code] = name
        self.violations: list[str] = []
        self.suspended = 0
        self._previous_profile = None

    def _forbidden_name(self, function) -> str | None:
        owner = getattr(function, "__self__", None)
        if (owner is not None and not isinstance(owner, (types.ModuleType, type))
                and getattr(function, "__name__", None) in self.method_names):
            # a bound built-in method (x.softmax, tokenizer.encode): forbidden as its class's method
            try:
                function = getattr(type(owner), function.__name__, function)
            except Exception:  # a class whose attribute lookup fails: the method as it is
                pass
        try:
            name = self.names_by_object.get(function)
        except TypeError:  # unhashable callable
            return None
        if name is None and isinstance(function, torch._ops.OpOverload):
            name = self.names_by_object.get(function.overloadpacket)
        return name

    def _record(self, name: str) -> None:
        if name not in self.violations:
            self.violations.append(name)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = None if self.suspended else self._forbidden_name(func)
        if name is not None:
            self._record(name)
            raise CheckFailed(implement_yourself_message([name]))
        return func(*args, **(kwargs or {}))

    def _profile(self, frame, event, arg):
        if not self.suspended:
            name = None
            if event == "call":
                code = frame.f_code
                name = self.names_by_code.get(code)
                if name is None and self.qualified_names:
                    qualified = f"{frame.f_globals.get('__name__')}.{code.co_qualname}"
                    name = qualified if qualified in self.qualified_names else None
            elif event == "c_call":
                name = self._forbidden_name(arg)
            if name is not None:
                self._record(name)

    def __enter__(self):
        super().__enter__()
        self._previous_profile = sys.getprofile()
        sys.setprofile(self._profile)
        _active_guards.append(self)
        return self

    def __exit__(self, *exc_info):
        _active_guards.remove(self)
        if sys.getprofile() != self._profile:  # the code under test replaced the hook
            self._record("sys.setprofile")
        # A C-level profiler (cProfile) cannot be handed back through sys.setprofile: it is dropped.
        sys.setprofile(self._previous_profile if callable(self._previous_profile) else None)
        return super().__exit__(*exc_info)


_active_guards: list[_ForbiddenCallGuard] = []


def implement_yourself_message(names: Sequence[str]) -> str:
    return f"implement this yourself (your code called {', '.join(names)})"


@contextmanager
def forbidden_calls(forbidden: Iterable):
    """Within the block, record every call to one of ``forbidden``; fail at the end if there was one.

    ``forbidden`` holds torch functions, Tensor methods, ``torch.ops`` operators, Python functions
    (caught by code object, so aliases and references captured earlier are caught too) and
    ``"module.qualname"`` strings for functions of modules that need not be imported (Hugging Face).
    A torch function raises :class:`CheckFailed` at once; a Python function is recorded and the
    check fails when the block ends, even if the code under test caught the exception.
    """
    forbidden = list(forbidden)
    if not forbidden:
        yield None
        return
    guard = _ForbiddenCallGuard(forbidden)
    try:
        with guard:
            yield guard
    finally:
        if guard.violations:
            raise CheckFailed(implement_yourself_message(guard.violations))


def allowed(function: Callable) -> Callable:
    """Wrap a reference dependency so that what it calls internally is never counted as forbidden."""

    @wraps(function)
    def call_allowed(*args, **kwargs):
        for guard in _active_guards:
            guard.suspended += 1
        try:
            return function(*args, **kwargs)
        finally:
            for guard in _active_guards:
                guard.suspended -= 1

    return call_allowed


def forbidden_in_force() -> list:
    """What the forbidden-call guards in force forbid (those of the blocks of :func:`forbidden_calls`
    under way, unless :func:`allowed` suspends them): functions and ``"module.qualname"`` strings, as
    :func:`forbidden_calls` takes them. The grader sends them with each call of a student's function,
    so that the student process applies the same rule."""
    return [item for guard in _active_guards if not guard.suspended
            for item in [*guard.names_by_object, *guard.qualified_names]]


# --------------------------------------------------------------------------------------------------
# Dependency isolation
# --------------------------------------------------------------------------------------------------


def _rebind(function: types.FunctionType, namespace: dict) -> types.FunctionType:
    """A copy of ``function`` that reads its global names from ``namespace``."""
    rebound = types.FunctionType(
        function.__code__, namespace, function.__name__, function.__defaults__, function.__closure__
    )
    rebound.__kwdefaults__ = function.__kwdefaults__
    rebound.__qualname__ = function.__qualname__
    rebound.__dict__.update(function.__dict__)
    return rebound


def _functions_of(member) -> list[types.FunctionType]:
    """The Python functions a class member holds: itself, a static or class method's, a property's."""
    if isinstance(member, types.FunctionType):
        return [member]
    if isinstance(member, (staticmethod, classmethod)):
        return _functions_of(member.__func__)
    if isinstance(member, property):
        return [f for f in (member.fget, member.fset, member.fdel) if isinstance(f, types.FunctionType)]
    return []


def _rebind_member(member, original_globals: dict, namespace: dict):
    """``member`` with each of its functions that reads ``original_globals`` rebound to ``namespace``."""
    if isinstance(member, types.FunctionType):
        return _rebind(member, namespace) if member.__globals__ is original_globals else member
    if isinstance(member, (staticmethod, classmethod)):
        return type(member)(_rebind_member(member.__func__, original_globals, namespace))
    if isinstance(member, property):
        accessors = (member.fget, member.fset, member.fdel)
        return property(*(_rebind_member(f, original_globals, namespace) if f else None for f in accessors),
                        member.__doc__)
    return member


def _class_globals(student: type) -> dict | None:
    """The globals of the functions of ``student``, or of the first of its bases defined beside it
    (in the same module) that has functions; None when no such class defines one."""
    for cls in student.__mro__:
        if cls.__module__ == student.__module__:
            functions = [function for member in vars(cls).values() for function in _functions_of(member)]
            if functions:
                return functions[0].__globals__
    return None


def _rebuild_class(cls: type, original_globals: dict, namespace: dict, rebuilt: dict) -> type:
    """``cls`` with its methods reading ``namespace``: a subclass of ``cls`` holding the rebound methods,
    and deriving from the rebuilt versions of the bases that need one too; ``cls`` itself when neither
    it nor a base defines a method that reads ``original_globals``.

    Being a subclass, the rebuilt class keeps zero-argument ``super()`` working: the methods' ``__class__``
    cell still holds ``cls``, and every instance of the rebuilt class is an instance of ``cls``. Its
    method resolution order puts each rebuilt class before its original, so a method inherited from a
    base defined beside ``cls`` reads ``namespace`` too.
    """
    if cls not in rebuilt:
        members = {key: _rebind_member(value, original_globals, namespace) for key, value in vars(cls).items()
                   if any(f.__globals__ is original_globals for f in _functions_of(value))}
        new_bases = [_rebuild_class(base, original_globals, namespace, rebuilt) for base in cls.__bases__]
        new_bases = [new for new, base in zip(new_bases, cls.__bases__) if new is not base]
        if not members and not new_bases:
            rebuilt[cls] = cls
        else:
            members.update(__module__=cls.__module__, __qualname__=cls.__qualname__, __doc__=cls.__doc__)
            rebuilt[cls] = type(cls)(cls.__name__, (cls, *new_bases), members)
    return rebuilt[cls]


def with_dependencies(student: Callable | type, **references: Callable) -> Callable | type:
    """The student's function (or class) with the global names in ``references`` replaced.

    Example: ``with_dependencies(student_attention, softmax=bertlab.attention.softmax)`` runs the
    student's attention with the reference softmax, wherever the student's code (or a helper the
    student defined next to it) calls ``softmax``. The references run under :func:`allowed`.

    A class comes back as a subclass of the student's class whose methods (and those of its bases
    defined beside it) see the references, so ``super().__init__()`` and ``super().forward(x)``
    work as in the original. The student's classes, functions and globals are not modified.

    An object that lives elsewhere (the grader's handle on a function in the student's process)
    does the rebinding itself, through its ``__with_dependencies__(**references)`` method.
    """
    rebind_elsewhere = getattr(type(student), "__with_dependencies__", None)
    if rebind_elsewhere is not None:
        return rebind_elsewhere(student, **references)
    if isinstance(student, type):
        original_globals = _class_globals(student)
    elif isinstance(student, types.FunctionType):
        original_globals = student.__globals__
    else:
        return student
    if original_globals is None:
        return student
    namespace = dict(original_globals)
    for name, value in original_globals.items():  # helpers defined beside the student's function
        if isinstance(value, types.FunctionType) and value.__globals__ is original_globals:
            namespace[name] = _rebind(value, namespace)
    namespace.update({name: allowed(reference) for name, reference in references.items()})
    if isinstance(student, type):
        return _rebuild_class(student, original_globals, namespace, rebuilt={})
    return _rebind(student, namespace)


def visible_check(check: Callable[..., str], student, **options) -> str:
    """Run ``check`` (a ``check_<name>`` of :mod:`autograder.checks`) on the student's function or class
    with its visible cases, and return its summary; raise :class:`CheckFailed` with the check's
    message, the hint of a known mistake included, on the first case that fails.

    A visible test cell calls it first: ``print(visible_check(check_softmax, softmax))``. The visible
    cases are fixed (drawn from the seeds of the exercises' names alone), so a student meets the same
    cases in the notebook as the grader does in the visible test; the hidden tests call the same
    check on cases drawn from the grading run's seed. The check substitutes the reference versions
    of the earlier exercises, as in grading, so a correct function passes even when an earlier
    exercise is wrong. ``options`` go to the check (``forbid=False``). In a notebook, a failure shows
    as its message alone, and a stub (``NotImplementedError``) as one line that says the exercise is
    not written yet, without the frames of the checks.
    """
    with visible_cases():
        try:
            return check(student, **options)
        except NotImplementedError as error:  # the stub: one line in the notebook, not the checks' frames
            name = getattr(student, "__name__", "this exercise")
            line = f"NotImplementedError: {name} is not written yet: write it in its cell above, in place of its stub"
            error._render_traceback_ = lambda: [line]
            raise


def call_and_backward(function: Callable, *args, **kwargs):
    """``function(*args, **kwargs)`` with gradients enabled, then ``.backward()`` on its result.

    Returns the result; the gradients land in the ``.grad`` of the arguments that require them. A
    function that lives elsewhere (the grader's handle on a function in the student's process) runs
    both steps there, through its ``__call_and_backward__`` method, and sends the gradients back.
    """
    run_elsewhere = getattr(type(function), "__call_and_backward__", None)
    if run_elsewhere is not None:
        return run_elsewhere(function, *args, **kwargs)
    with torch.enable_grad():
        result = function(*args, **kwargs)
    result.backward()
    return result


# --------------------------------------------------------------------------------------------------
# A whole check
# --------------------------------------------------------------------------------------------------


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
    for name, before, after in [*zip(names, original_args, args), *((k, original_kwargs[k], kwargs[k]) for k in kwargs)]:
        if not _same(before, after):
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
    chapter in ``CHAPTER``, and keeps a ``check_<name>`` function, the name the notebooks' test cells call,
    whose docstring describes the cases and which returns ``<RECORD>.check(student, forbid=forbid)``.

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

    def parameter_names_for_messages(self) -> list[str]:
        """The names of the arguments in messages: ``parameter_names``, or the reference's parameters."""
        return list(self.parameter_names) if self.parameter_names is not None else parameter_names_of(self.reference)

    def check(self, student, *, forbid: bool = True) -> str:
        """Compare ``student`` with the reference on every case (with the references of the dependencies
        in place of the student's earlier exercises), then run the ``then`` tests; return a summary, or
        raise :class:`CheckFailed` on the first difference. ``forbid=False`` lifts the forbidden-call rule."""
        forbidden = list(self.forbidden) if forbid else []
        if self.dependencies:
            student = with_dependencies(student, **self.dependencies)
        cases = self.cases()
        compared = 0
        for number, case in enumerate(cases, start=1):
            context = f"test case {number} of {len(cases)} ({case.description})"
            compared += self.compare(self, student, case, context, forbidden) or 1
        summary = f"{self.name}: all {compared} {_kind_of_cases()}cases {self.agreement}"
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
