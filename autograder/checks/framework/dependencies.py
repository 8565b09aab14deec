"""Dependency isolation: the student's function run with the reference versions of the earlier exercises it
builds on, and the visible checks."""

import types
from collections.abc import Callable

import torch

from autograder.checks.framework.forbidden import allowed
from autograder.checks.framework.inputs import visible_cases


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
