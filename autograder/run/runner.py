"""The grader's run of one notebook: the student's cells once, in the sandbox; every test cell in the grader.

The student process (:class:`autograder.run.grader_side.StudentProcess`) executes the student's code cells,
in the notebook's order, and reports what they showed; it never receives a test cell. Where a test
cell stands, the grader runs the instructor's version of it (hidden tests included) in a namespace of
its own: the instructor code the tests need (:mod:`autograder.core.instructor_context`), run in the grader,
and the exercises the cell uses, looked up in the student process as handles
(:class:`autograder.run.grader_side.Remote`). Nothing else of the student's enters that namespace.

The graded chapter's references are withheld from the student process (:mod:`autograder.run.stand_ins`);
a check may release one into it only once the test of its exercise has run. So the tests run in the
instructor's order: before a test, the tests that come before it in the instructor's notebook and
have not run yet (a student who moved or deleted a test cell) run first.

Before the tests run, the checks' inputs are seeded with the run's seed
(:func:`autograder.checks.framework.use_run_seed`), which lives in the grader only: the student's
code cannot compute the hidden cases ahead of time.

Each test cell's outcome is ``passed`` (no exception), ``failed`` (an assertion, e.g. a
``CheckFailed``), ``error`` (any other exception: ``NotImplementedError``, the memory limit, the
student process ending), ``timeout`` or ``missing`` (the exercise it grades is not defined); an error's
cause is ``blank`` (NotImplementedError) or ``crash``, and a failure's is ``reference unavailable``
when the student's code reached the withheld reference (:class:`autograder.core.results.Status`,
:data:`autograder.core.results.CAUSES`).
"""

import contextlib
import io
import time
import traceback

from autograder.bounds import (
    MAX_CONTEXT_ERROR_CHARS,
    MAX_OUTCOME_MESSAGE_CHARS,
    MAX_RESTARTS,
    MAX_RUN_CELL_CHARS,
    MAX_TEST_OUTPUT_CHARS,
    Limits,
)
from autograder.core import (
    Cause, Chapter, CodeStep, ContextStep, NotebookRun, Outcome, OutputBudget, Status, SubmissionStep, TestStep, clean,
    free_names, hidden_test_lines, python_source)
from autograder.run.grader_side import StudentProcess, StudentProcessEnded, StudentTimeout
from autograder.run.sandbox import Sandbox
from autograder.run.stand_ins import ReferenceUnavailable, Withholding
from autograder.text import printable

CELL_TIMEOUT = "CellTimeout"  # the name of the error output of a cell stopped at its time limit


class _Students:
    """The student process of one notebook, restarted (replaying the cells so far) when it ends."""

    def __init__(self, sandbox: Sandbox, limits: Limits, deadline: float, withholding: Withholding):
        self.sandbox, self.limits, self.deadline = sandbox, limits, deadline
        self.withholding = withholding
        self.graded: set[str] = set()  # the exercises whose tests have run: their references may be released
        self.process: StudentProcess | None = None
        self.executed: list[str] = []
        self.restarts = 0

    def current(self) -> StudentProcess:
        if self.process is not None and not self.process.ended_because:
            return self.process
        if self.process is not None:
            self.process.close()
            if self.restarts == MAX_RESTARTS:
                raise StudentProcessEnded(f"the Python process running your code ended {MAX_RESTARTS + 1} times")
            self.restarts += 1
        self.process = StudentProcess(self.sandbox, self.limits, self.withholding, self.graded)
        self.process.deadline = self.deadline
        for source in self.executed:
            with contextlib.suppress(Exception, StudentTimeout, StudentProcessEnded):
                self.process.run_cell(source)
        return self.process

    def run_cell(self, source: str):
        """Execute one of the student's cells: its outputs (an error output when it could not finish)."""
        try:
            outputs = self.current().run_cell(source)
        except StudentTimeout as error:  # not replayed after a restart: it would run out of time again
            return [_error_output(CELL_TIMEOUT, f"this cell ran past its time limit: {error}")]
        except StudentProcessEnded as error:
            return [_error_output("ProcessEnded", f"the Python process running your code ended: {error}")]
        except Exception as error:  # the student process failed to run it (the student replaced parts of it)
            return [_error_output(type(error).__name__, str(error))]
        self.executed.append(source)
        return outputs

    def lookup(self, name: str):
        return self.current().lookup(name)

    def close(self) -> None:
        if self.process is not None:
            self.process.close()


def _error_output(name: str, message: str) -> dict:
    return {"output_type": "error", "ename": name, "evalue": message, "traceback": [f"{name}: {message}"]}


class _TestCells:
    """The namespace the test cells run in, and the instructor code that prepares it."""

    def __init__(self, chapter: Chapter, students: _Students):
        self.chapter, self.students = chapter, students
        self.namespace: dict = {"__name__": "__test_cells__"}
        self.context_done: set[int] = set()
        self.context_error: str | None = None

    def bind_exercises(self, source: str) -> None:
        """Give the namespace the student's current objects for the exercises ``source`` reads."""
        for name in sorted(free_names_of(source) & set(self.chapter.exercises)):
            try:
                self.namespace[name] = self.students.lookup(name)
            except NameError:
                self.namespace.pop(name, None)

    def prepare(self, grade_id: str) -> None:
        """Run the instructor code that comes before this test in the instructor's notebook."""
        plan = self.chapter.context
        end = next((index for index, step in enumerate(plan) if step == TestStep(grade_id)), len(plan))
        for index in range(end):
            step = plan[index]
            if not isinstance(step, ContextStep) or index in self.context_done:
                continue
            self.context_done.add(index)
            try:
                self.bind_exercises(step.source)
                exec(compile(step.source, f"<instructor code before {grade_id}>", "exec"), self.namespace)
            except Exception as error:
                self.context_error = f"{type(error).__name__}: {printable(str(error), MAX_CONTEXT_ERROR_CHARS)}"

    def run(self, grade_id: str) -> Outcome:
        test = self.chapter.test(grade_id)
        output = _CappedText(MAX_TEST_OUTPUT_CHARS)
        filename = f"<test cell {grade_id}>"
        try:
            self.prepare(grade_id)
            if self.context_error:
                return Outcome(Status.ERROR, f"the grader could not prepare this test ({self.context_error})",
                               cause=Cause.CRASH)
            code = compile(python_source(test.source), filename, "exec")
            self.bind_exercises(test.source)
            with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
                exec(code, self.namespace)
        except BaseException as error:  # noqa: B036 -- every exception is a verdict
            return _classify(error, test.source, filename, test.exercise, output.getvalue())
        return Outcome(Status.PASSED, "", output.getvalue())


_FREE_NAMES: dict[str, frozenset[str]] = {}


def free_names_of(source: str) -> frozenset[str]:
    """The names a cell of the instructor reads before binding them (cached: the same cells run for
    every submission of a chapter)."""
    if source not in _FREE_NAMES:
        import ast

        _FREE_NAMES[source] = frozenset(free_names(ast.parse(python_source(source)).body))
    return _FREE_NAMES[source]


class _CappedText(io.StringIO):
    """A StringIO that keeps at most ``limit`` characters."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit

    def write(self, text: str) -> int:
        room = self.limit - self.tell()
        if room > 0:
            super().write(text[:room])
        return len(text)


def run_notebook(steps: list[SubmissionStep], chapter: Chapter, sandbox: Sandbox, limits: Limits,
                 seed: int, withholding: Withholding = Withholding()) -> NotebookRun:
    """Run a submission: ``steps`` is the notebook in order, a :class:`CodeStep` for a code cell of the
    student's and a :class:`TestStep` where a test cell stands. A test of the chapter that the steps
    do not place runs at the end; a test runs after those that precede it in the instructor's notebook.
    ``withholding``: the chapter's references, which the student process does not get."""
    from autograder.checks.framework import use_run_seed
    from bertlab.utils import seed_everything

    seed_everything(seed % 2**32)
    deadline = time.monotonic() + limits.notebook_timeout
    placed = {step.grade_id for step in steps if isinstance(step, TestStep)}
    steps = [*steps, *(TestStep(test.grade_id) for test in chapter.tests if test.grade_id not in placed)]
    students = _Students(sandbox, limits, deadline, withholding)
    tests = _TestCells(chapter, students)
    budget = OutputBudget()
    run = NotebookRun()
    try:
        with use_run_seed(seed):
            for step in steps:
                if isinstance(step, CodeStep):
                    raw = _run_code_cell(students, step.source, deadline)
                    if any(output.get("ename") == CELL_TIMEOUT for output in raw):
                        run.timed_out.append(step.index)
                    run.outputs[step.index] = clean(raw, budget)
                elif chapter.test(step.grade_id) is not None:
                    for test in _in_order(chapter, step.grade_id):
                        if test.grade_id not in run.outcomes:
                            run.outcomes[test.grade_id] = tests.run(test.grade_id) if time.monotonic() < deadline \
                                else Outcome(Status.TIMEOUT, f"the time limit of the notebook "
                                                             f"({limits.notebook_timeout:g} s) was reached")
                            students.graded.add(test.exercise)
    finally:
        students.close()
    run.truncated = budget.exhausted
    return run


def _run_code_cell(students: _Students, source: str, deadline: float) -> list:
    """A code cell's outputs: run in the student process, unless the notebook's time is up or the cell is
    longer than MAX_RUN_CELL_CHARS (IPython's transformation of a cell, in that process, grows faster than
    its size: a cell of megabytes would spend the cell's time limit before any of it runs)."""
    if time.monotonic() >= deadline:
        return [_error_output("Timeout", "not run: the notebook's time limit was reached")]
    if len(source) > MAX_RUN_CELL_CHARS:
        return [_error_output("CellTooLarge", f"not run: this cell has {len(source):,} characters, more than the "
                                              f"{MAX_RUN_CELL_CHARS:,} a cell may have")]
    return students.run_cell(source)


def _in_order(chapter: Chapter, grade_id: str) -> list:
    """The chapter's tests up to the one of ``grade_id``, in the instructor's order."""
    tests = list(chapter.tests)
    return tests[:tests.index(chapter.test(grade_id)) + 1]


def _classify(error: BaseException, source: str, filename: str, exercise: str | None, output: str) -> Outcome:
    """The status and the student's message for an exception of a test cell."""
    if isinstance(error, KeyboardInterrupt):
        raise error
    if isinstance(error, StudentTimeout):
        return Outcome(Status.TIMEOUT, f"your code ran too long: {error}", output)
    if isinstance(error, StudentProcessEnded):
        return Outcome(Status.ERROR, _cap(f"the Python process running your code ended: {error}"), output, Cause.CRASH)
    if any(_is_memory_error(link) for link in _exception_chain(error)):
        return Outcome(Status.ERROR, "your code ran out of memory (the sandbox's memory limit was reached)", output,
                       Cause.CRASH)
    unavailable = next((link for link in _exception_chain(error) if isinstance(link, ReferenceUnavailable)), None)
    if unavailable is not None:
        return Outcome(Status.FAILED, _cap(f"the reference was not available: {unavailable}"), output,
                       Cause.REFERENCE_UNAVAILABLE)
    if isinstance(error, NameError) and exercise and f"'{exercise}'" in str(error):
        return Outcome(Status.MISSING, f"`{exercise}` is not defined in your notebook", output, Cause.NOT_DEFINED)
    if isinstance(error, NotImplementedError):
        return Outcome(Status.ERROR,
                       _cap(f"not implemented yet (NotImplementedError{': ' + str(error) if str(error) else ''})"),
                       output, Cause.BLANK)
    where = _failing_line(error, source, filename)
    if isinstance(error, AssertionError):
        if not str(error):
            return Outcome(Status.FAILED, f"this assertion failed, {where}" if where else "an assertion failed",
                           output)
        return Outcome(Status.FAILED, _cap(f"{where}\n{error}" if where else str(error)), output)
    message = f"{type(error).__name__}: {error}" + (f" (in the test {where})" if where else "")
    student_traceback = getattr(error, "student_traceback", "")
    if student_traceback:
        message += "\nwhere your code raised it:\n" + student_traceback
    return Outcome(Status.ERROR, _cap(message), output, Cause.CRASH)


def _cap(message: str) -> str:
    return printable(message, MAX_OUTCOME_MESSAGE_CHARS)


def _exception_chain(error: BaseException) -> list[BaseException]:
    chain = []
    while error is not None and error not in chain:
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


def _is_memory_error(error: BaseException) -> bool:
    return (isinstance(error, MemoryError) or "can't allocate memory" in str(error)
            or "out of memory" in str(error).lower())


def _failing_line(error: BaseException, source: str, filename: str) -> str:
    """Where in the test cell ``error`` arose, as ``line 3: <its code>`` (the line's number in the cell as
    the student received it, where the visible tests come first); "" when it lies in the hidden tests."""
    lines = python_source(source).splitlines()
    hidden = hidden_test_lines(source)
    numbers = [frame.lineno for frame in traceback.extract_tb(error.__traceback__) if frame.filename == filename]
    if not numbers or numbers[-1] in hidden or numbers[-1] > len(lines):
        return ""
    return f"line {numbers[-1]}: {lines[numbers[-1] - 1].strip()}"
