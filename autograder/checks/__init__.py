"""Checks called by the hidden tests of the chapters, one module per ``bertlab`` topic.

``autograder.checks.<topic>.check_<name>(student_fn)`` compares the student's ``<name>`` with
``bertlab.<topic>.<name>`` and returns a short summary, or raises ``CheckFailed`` (an
``AssertionError``) with a message for the student. The shared machinery is in
:mod:`autograder.checks.framework`.
"""

from autograder.checks.framework import CheckFailed

__all__ = ["CheckFailed"]
