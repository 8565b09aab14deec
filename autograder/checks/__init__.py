"""Checks called by the test cells of the chapters, one module per ``bertlab`` topic.

``autograder.checks.<topic>.check_<name>(student_fn)`` compares the student's ``<name>`` with
``bertlab.<topic>.<name>`` and returns a short summary, or raises ``CheckFailed`` (an
``AssertionError``) with a message for the student. The shared machinery is in
:mod:`autograder.checks.framework`.

A visible test cell runs a check on its fixed cases with :func:`visible_check`, and hand-checked
cases of a function that builds on earlier exercises through :func:`with_dependencies`.
"""

from autograder.checks.framework import CheckFailed, visible_check, with_dependencies

__all__ = ["CheckFailed", "visible_check", "with_dependencies"]
