"""The grader's shared core: the course's vocabulary and the records every step reads or writes.

- ``course``              the course's layout (``solutions/``, ``chapters/``) and its cells' vocabulary
- ``chapters``            what each chapter tests, read from its solution notebook
- ``instructor_context``  the instructor code the tests need, sliced from the solution notebook
- ``steps``               the notebook as the runner replays it: code cells, test cells, instructor code
- ``results``             the run's records: a notebook's run and outcomes, its result, what was skipped,
                          ``results.json`` and the summary, the signed result files, a grading run's report and
                          where its time went
- ``cell_outputs``        the outputs of the student's cells as the grader keeps them, and the HTML budgets
- ``citations``           the book's citations as text, from ``references.bib``
- ``output_layout``       every path of the output folder and of a job's folder
- ``files``               files written whole or not at all
- ``nbgrader_adapter``    nbgrader's gradebook and course layout (the release uses them too)

This module is the core's interface: the other rooms (``autograder.collect``, ``autograder.run``,
``autograder.report``, ``autograder.publish``) and the orchestration import the core's names from
``autograder.core``; the core's own modules import one another by module. The core imports nothing of
the rooms. Beside it, at the top of the package, ``autograder.bounds`` and ``autograder.text`` are
shared too, but stay out of this package: they use the standard library only, because the student
process imports them, and it must not import the core.
"""

from autograder.core.cell_outputs import OutputBudget, TagBudget, clean, start_tags
from autograder.core.chapters import Chapter, load_chapters
from autograder.core.citations import Reference, cite, read_references
from autograder.core.course import (
    CHAPTERS, INSTALL_TAG, ROOT, SOLUTIONS, GradingError, chapter_names, grade_id, hidden_test_lines, is_graded_test,
    python_source, strip_hidden_tests)
from autograder.core.files import PRIVATE, SHARED, replace_if_changed, write_atomically, write_if_changed
from autograder.core.instructor_context import free_names
from autograder.core.nbgrader_adapter import (
    create_gradebook, hidden_password, prepare_gradebook, quiet_nbgrader, register_chapters, without_password)
from autograder.core.output_layout import JobFolder, OutputLayout
from autograder.core.results import (
    GRADER_VERSION, UNSANDBOXED, Cause, Certainty, ClassResults, CopyPolicy, JobTimes, NotebookResult, NotebookRun,
    Outcome, ReferenceCopy, Report, ResultStore, RunTimes, Skipped, Status, TestResult)
from autograder.core.steps import CodeStep, ContextStep, SubmissionStep, TestStep

__all__ = [
    "CHAPTERS", "GRADER_VERSION", "INSTALL_TAG", "PRIVATE", "ROOT", "SHARED", "SOLUTIONS", "UNSANDBOXED", "Cause",
    "Certainty", "Chapter", "ClassResults", "CodeStep", "ContextStep", "CopyPolicy", "GradingError", "JobFolder",
    "JobTimes", "NotebookResult", "NotebookRun", "Outcome", "OutputBudget", "OutputLayout", "Reference",
    "ReferenceCopy", "Report", "ResultStore", "RunTimes", "Skipped", "Status", "SubmissionStep", "TagBudget",
    "TestResult", "TestStep",
    "chapter_names", "cite", "clean", "create_gradebook", "free_names", "grade_id", "hidden_password",
    "hidden_test_lines", "is_graded_test", "load_chapters", "prepare_gradebook", "python_source", "quiet_nbgrader",
    "read_references", "register_chapters", "replace_if_changed", "start_tags", "strip_hidden_tests",
    "without_password", "write_atomically", "write_if_changed",
]
