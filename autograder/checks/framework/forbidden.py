"""The "implement this yourself" rule: the calls a student's code may not make while a check runs (a hint for
honest mistakes, not a security measure: it runs in the student's own process)."""

import inspect
import sys
import types
from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager
from functools import wraps

import torch
from torch.overrides import TorchFunctionMode

from autograder.checks.framework.comparison import CheckFailed


_TORCH_MODULE_NAMES = {"torch._C._nn": "torch.nn.functional", "torch._C._special": "torch.special",
                       "torch._C._linalg": "torch.linalg"}


def describe_callable(function) -> str:
    """The name a student would write for ``function``, e.g. ``torch.nn.functional.softmax``."""
    if isinstance(function, str):
        return function
    if isinstance(function, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return f"torch.ops.{function}"
    name = getattr(function, "__name__", repr(function))
    qualname = getattr(function, "__qualname__", name)
    module = (getattr(function, "__module__", None)
              or getattr(getattr(function, "__objclass__", None), "__module__", None))
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
