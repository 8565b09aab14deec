"""A notebook as the runner replays it: steps, in the notebook's order.

A submission is a sequence of :class:`CodeStep` (a code cell of the student's, run in the student
process) and :class:`TestStep` (where a test cell stands, run in the grader): :data:`SubmissionStep`.
The instructor code the tests need (:func:`autograder.core.instructor_context.plan`) is a sequence of
:class:`ContextStep` and :class:`TestStep` (:data:`PlanStep`): the statements run in the grader before
the test that follows them.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class CodeStep:
    """A code cell of the student's."""

    index: int  # its index among the submission's cells (its outputs are kept under it)
    source: str


@dataclass(frozen=True)
class TestStep:
    """Where a graded test cell stands."""

    grade_id: str


@dataclass(frozen=True)
class ContextStep:
    """A top-level statement of the instructor's notebook that the tests need."""

    source: str


SubmissionStep = CodeStep | TestStep
PlanStep = ContextStep | TestStep
