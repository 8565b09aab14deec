"""Checks called by the test cells of the chapters, one module per ``bertlab`` topic.

``autograder.checks.<topic>.check_<name>(student_fn)`` compares the student's ``<name>`` with
``bertlab.<topic>.<name>`` and returns a short summary, or raises ``CheckFailed`` (an
``AssertionError``) with a message for the student. Each check is declared as a record,
:class:`~autograder.checks.framework.Exercise` (reference, cases, mistakes, forbidden functions,
dependencies, tolerance); a topic module declares its records at its top level and names its chapter
in ``CHAPTER``; :func:`exercises_by_chapter` collects them. The shared machinery is in
:mod:`autograder.checks.framework` (the comparison of outputs) and :mod:`autograder.checks.modules`
(the comparison of ``nn.Module`` classes); what a case hands to the student's code is defined in
:mod:`autograder.checks.portable`, which the student's process can import while a chapter is graded.

A visible test cell runs a check on its fixed cases with :func:`visible_check`, and hand-checked
cases of a function that builds on earlier exercises through :func:`with_dependencies`.
"""

import importlib
import pkgutil

from autograder.checks.framework import CheckFailed, Exercise, visible_check, with_dependencies

__all__ = ["CheckFailed", "exercises_by_chapter", "visible_check", "with_dependencies"]


def exercises_by_chapter() -> dict:
    """chapter -> (the module of checks that declares it as its ``CHAPTER``, the ``Exercise`` records at the
    module's top level, in the order they are declared), for every module of this package (imported here:
    the notebooks that import one module do not pay for all)."""
    found = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        chapter = getattr(module, "CHAPTER", None)
        if chapter is not None:
            assert chapter not in found, f"two modules of checks declare chapter {chapter}"
            found[chapter] = (module, tuple(value for value in vars(module).values() if isinstance(value, Exercise)))
    return dict(sorted(found.items()))
