"""One job: grade one (student, chapter), in a fresh worker process of its own.

:func:`grade_job` reads the submission, runs it once (:func:`autograder.run.runner.run_notebook`: the
student's cells in a sandbox, the tests in the grader), grades each test cell (``tampered`` where
the submission's copy of a test cell differs from the released one: the instructor's version is what
ran), flags exercises that may be the reference's code (:mod:`autograder.run.reference_copies`) and
applies the copy policy (:func:`withhold_copies`), and writes two files into the job's folder: the
graded notebook for the instructor (made inert, as nbgrader's formgrader renders it unsanitized:
:func:`autograder.report.sanitize.inert_notebook`) and the feedback page for the student, rendered within
``FEEDBACK_SECONDS`` (:mod:`autograder.bounds`). It returns the result; the class run
(:mod:`autograder.grade`) puts the files in place and records the grades.

A worker runs one job and ends (:func:`work`): nothing of one student's run reaches the next. Both
engines (the local one, :mod:`autograder.grade`, and Dask's, :mod:`autograder.cluster`) run a job the same
way: in a fresh process forked from the workers' server (:func:`worker_context`), within its time limit
(:func:`job_seconds`), killed with its sandboxes past it (:class:`JobProcess`), sending back what it left
(:class:`Finished`). What every job's grade depends on besides its submission is here too: the grader's
and the reference's sources (:func:`grader_sources`) and the options of its sandbox (:func:`sandbox_options`).
"""

import contextlib
import functools
import gc
import hashlib
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import nbformat

from autograder import report
from autograder.bounds import (
    FEEDBACK_SECONDS, JOB_MARGIN_SECONDS, MAX_FEEDBACK_PROBLEM_CHARS, MAX_RESTARTS, MAX_WORKER_TRACEBACK_CHARS,
    REAP_SECONDS, STARTUP_SECONDS, Limits)
from autograder.collect import error_line, read_notebook
from autograder.core import (
    GRADER_VERSION, ROOT, SOLUTIONS, UNSANDBOXED, Cause, Certainty, Chapter, CodeStep, CopyPolicy, JobFolder, JobTimes,
    NotebookResult, NotebookRun, Outcome, Reference, ReferenceCopy, RunTimes, Status, SubmissionStep, TestResult,
    TestStep, grade_id, quiet_nbgrader)
from autograder.run.reference_copies import find_copies
from autograder.run.runner import run_notebook
from autograder.run.sandbox import SandboxOptions, cpu_times, descendants
from autograder.run.stand_ins import Withholding

SOURCES = ("autograder", "bertlab")  # packages whose code the grades depend on
# Imported once by the server the workers are forked from, rather than by every worker; the last one
# does the work of every job that depends on no submission.
WORKER_MODULES = ["autograder.job", "IPython.core.inputtransformer2", "bertlab.data", "autograder.worker_preload"]


@dataclass(frozen=True, kw_only=True)
class Job:
    """Everything a worker needs to grade one (student, chapter)."""

    student: str
    chapter: Chapter
    origin: str
    timestamp: str  # ISO 8601
    fingerprint: str
    seed: int  # the run seed of the hidden tests' inputs
    submitted: str  # the submission's bytes, stored in the private course
    problem: str | None  # why it cannot be read, found when it was collected
    notes: tuple[str, ...]
    folder: JobFolder  # the job's private folder (its working folder, the graded notebook, the feedback page)
    chapter_source: str  # the private course's copy of the chapter's folder in solutions/
    chapter_files: str  # the chapter's files but its notebook, which the worker and the sandbox start with
    limits: Limits
    sandbox: SandboxOptions  # whether it is isolated, what it must hide and may read, its variables
    references: dict[str, Reference]  # the course's references.bib, for the feedback's citations
    copy_policy: CopyPolicy = CopyPolicy.WITHHOLD  # what a certain copy of the reference costs
    withholding: Withholding = Withholding()  # the chapter's references, which the student process does not get


class StageTimeout(Exception):
    """A stage of the job ran past its time limit."""


@contextmanager
def time_limit(seconds: float, stage: str):
    """Raise StageTimeout in this (main) thread when the block runs longer than ``seconds``; a library
    that swallows the exception still gets it raised again when the block ends."""
    expired = []

    def expire(signum, frame):
        expired.append(True)
        raise StageTimeout(f"{stage} ran past its time limit of {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    if expired:
        raise StageTimeout(f"{stage} ran past its time limit of {seconds:g} s")


def test_cell_problems(notebook, chapter: Chapter) -> dict[str, str]:
    """How the submission's copy of each test cell differs from what was released."""

    def normalized(text: str) -> str:
        return "\n".join(line.rstrip() for line in text.strip().splitlines())

    copies = {}
    for cell in notebook.cells:
        copies.setdefault(grade_id(cell), []).append(cell)
    problems = {}
    for test in chapter.tests:
        found = copies.get(test.grade_id, [])
        if not found:
            problems[test.grade_id] = f"the test cell {test.grade_id} was deleted"
        elif len(found) > 1:
            problems[test.grade_id] = f"the test cell {test.grade_id} appears {len(found)} times"
        elif found[0].cell_type != "code" or normalized(found[0].source) not in (normalized(test.released),
                                                                                    normalized(test.source)):
            problems[test.grade_id] = f"the test cell {test.grade_id} was edited"
        elif not found[0].metadata["nbgrader"].get("grade") or \
                float(found[0].metadata["nbgrader"].get("points", -1)) != test.points:
            problems[test.grade_id] = f"the grading metadata of the test cell {test.grade_id} was changed"
    return problems


def steps_of(notebook, chapter: Chapter) -> list[SubmissionStep]:
    """The submission as the runner sees it: the student's code cells, and where tests stand."""
    test_ids = {test.grade_id for test in chapter.tests}
    steps = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code":
            name = grade_id(cell)
            steps.append(TestStep(name) if name in test_ids else CodeStep(index, cell.source))
    return steps


def grade_of(test, outcome: Outcome, problem: str | None, notes: tuple[str, ...]) -> TestResult:
    """A test cell's grade: the grader's outcome sets the points; an edited test cell is ``tampered``."""
    passed = outcome.status == Status.PASSED
    points = test.points if passed else 0.0
    status, message, cause = outcome.status, outcome.message, outcome.cause
    if problem:
        verdict = "your code passed this test" if passed else f"{outcome.status}: {outcome.message}"
        message = f"{problem}; graded with the instructor's version ({verdict})"
        status, cause = Status.TAMPERED, Cause.NONE
    return TestResult(test.grade_id, points, test.points, status, "\n".join([message, *notes]).strip(), cause)


def withhold_copies(tests: tuple[TestResult, ...], copies: tuple[ReferenceCopy, ...],
                    chapter: Chapter) -> tuple[tuple[TestResult, ...], tuple[ReferenceCopy, ...]]:
    """The copy policy ``withhold``: each passed test of an exercise that is certainly the reference's
    code gets 0 points, status ``failed`` and cause ``reference copy``, with the reason; those copies
    are marked withheld. Suspected copies keep their points (they are flagged only)."""
    certain = {copy.exercise: copy for copy in copies if copy.certainty == Certainty.CERTAIN}
    graded, withheld = [], set()
    for test in tests:
        copy = certain.get(chapter.test(test.grade_id).exercise)
        if copy is not None and test.points > 0:
            message = (f"0 points: your {copy.exercise} is the reference's code ({copy.reason}). Write it yourself; "
                       "if you did, ask your instructor to review it.")
            test = replace(test, points=0.0, status=Status.FAILED, message=message, cause=Cause.REFERENCE_COPY)
            withheld.add(copy.exercise)
        graded.append(test)
    return tuple(graded), tuple(replace(copy, withheld=copy.exercise in withheld) for copy in copies)


def grade_job(job: Job) -> NotebookResult:
    """Grade one (student, chapter); write the graded notebook and the feedback into the job's folder
    (:class:`autograder.core.output_layout.JobFolder`); return the result."""
    start = time.perf_counter()
    folder, chapter = job.folder, job.chapter
    notebook, problem = (None, job.problem) if job.problem else read_notebook(Path(job.submitted).read_bytes())
    instructor = nbformat.read(Path(job.chapter_source) / f"{chapter.notebook}.ipynb", as_version=4)
    run, problems, copies = None, {}, ()
    if notebook is not None:
        problems = test_cell_problems(notebook, chapter)
        files, covers = Path(job.chapter_files), job.withholding.covers
        with job.sandbox.new_sandbox(job.limits, files=files, covers=covers) as sandbox:
            run = run_notebook(steps_of(notebook, chapter), chapter, sandbox, job.limits, job.seed, job.withholding)
        code = [cell.source for cell in notebook.cells if cell.cell_type == "code" and grade_id(cell) not in
                {test.grade_id for test in chapter.tests}]
        copies = tuple(find_copies(code, chapter.exercises))
    seconds = {"run": time.perf_counter() - start}
    unreadable = Outcome(Status.ERROR, f"this submission cannot be graded: {problem}", cause=Cause.UNREADABLE)
    outcomes = run.outcomes if run else {test.grade_id: unreadable for test in chapter.tests}
    notes = job.notes + (("the outputs of the notebook were cut at their limit",) if run and run.truncated else ())
    unsandboxed = () if job.sandbox.isolate else (UNSANDBOXED,)
    tests = tuple(grade_of(test, outcomes[test.grade_id], problems.get(test.grade_id), notes) for test in chapter.tests)
    if job.copy_policy == CopyPolicy.WITHHOLD:
        tests, copies = withhold_copies(tests, copies, chapter)
    result = NotebookResult(
        student=job.student, chapter=chapter.name, origin=job.origin, timestamp=job.timestamp,
        fingerprint=job.fingerprint, seed=job.seed, problem=problem, notes=unsandboxed + notes, copies=copies,
        tests=tests, timed_out_cells=tuple(index + 1 for index in run.timed_out) if run else ())
    graded = report.build_graded_notebook(notebook, instructor, chapter, run, result)
    nbformat.write(report.inert_notebook(graded, job.references), folder.graded)  # for the formgrader
    before_feedback = time.perf_counter()
    page, page_problem = _feedback_page(job, graded, run, result)
    folder.feedback.write_bytes(page)
    seconds["feedback"] = time.perf_counter() - before_feedback
    seconds["total"] = time.perf_counter() - start
    result = replace(result, notes=result.notes + ((page_problem,) if page_problem else ()),
                     seconds={name: round(value, 2) for name, value in seconds.items()})
    return result


def _feedback_page(job: Job, graded, run: NotebookRun | None, result: NotebookResult) -> tuple[bytes, str | None]:
    """The feedback page, or a plain one and why, when nbconvert fails or runs out of time."""
    view = report.student_view(graded, job.chapter, result, {name: outcome.output for name, outcome in
                                                            (run.outcomes.items() if run else ())})
    try:
        with time_limit(FEEDBACK_SECONDS, "rendering the feedback"):
            return report.render(view, result, job.chapter, job.references), None
    except Exception as error:  # noqa: BLE001 -- whatever nbconvert raises, the student gets a page
        problem = f"the feedback page is a plain one: {error if isinstance(error, StageTimeout) else error_line(error)}"
        problem = problem[:MAX_FEEDBACK_PROBLEM_CHARS]
        return report.plain_page(result, problem), problem


def work(job: Job, connection, began: float | None = None) -> None:
    """A worker process's whole life: grade ``job``, send its result (or the error) back, end. The result's
    ``seconds`` hold ``setup``: from ``began`` (the ``time.perf_counter()`` at which this process began its
    work; by default, this call) to the start of the grading (:func:`grade_job`).

    The instructor code of the tests runs here as in the notebook's graded run (``NBGRADER_EXECUTION``
    set, the course's data, the chapter's files in the working folder). What the worker inherits from
    the server it is forked from (the grader's modules, :mod:`autograder.worker_preload`) lives as long
    as the worker: the garbage collector leaves it alone (``gc.freeze``), which spared each full
    collection a walk through 400,000 objects (0.2 s) and their memory pages a copy."""
    import torch

    began = time.perf_counter() if began is None else began
    gc.freeze()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the class run's to handle
    quiet_nbgrader()
    os.environ["NBGRADER_EXECUTION"] = "autograde"
    os.environ.update(job.sandbox.variables)
    torch.set_num_threads(job.limits.threads)
    shutil.copytree(job.chapter_files, job.folder.files)  # the job's one copy of the chapter's files
    os.chdir(job.folder.files)
    try:
        setup = time.perf_counter() - began
        result = grade_job(job)
        connection.send(("ok", replace(result, seconds={"setup": round(setup, 2), **result.seconds})))
    except BaseException as error:  # noqa: B036 -- whatever happens, the class run hears of it
        import traceback

        end = traceback.format_exc()[-MAX_WORKER_TRACEBACK_CHARS:]
        connection.send(("error", f"{type(error).__name__}: {error}\n{end}"))
    finally:
        connection.close()


# --------------------------------------------------------------------------------------------------
# What a job's grade depends on besides its submission, and what its sandbox gets
# --------------------------------------------------------------------------------------------------


@functools.cache
def source_digests() -> dict[str, str]:
    """The SHA-256 of each source file of the grader and the reference, by its path ("autograder/grade.py")."""
    return {f"{package}/{path.relative_to(ROOT / package).as_posix()}":
            hashlib.sha256(path.read_bytes()).hexdigest()
            for package in SOURCES for path in sorted((ROOT / package).rglob("*.py"))}


@functools.cache
def grader_sources() -> str:
    """A digest of the grader's and the reference's source files: a grade depends on both."""
    digest = hashlib.sha256(GRADER_VERSION.encode())
    for name, each in source_digests().items():
        digest.update(f"{name}\0{each}\0".encode())
    return digest.hexdigest()


def sandbox_options(course_root: Path, isolated: bool, private: tuple[Path, ...]) -> SandboxOptions:
    """Whether the sandboxes get namespaces, what every sandbox hides (should it bind a folder that
    holds them: the course's ``solutions/`` and ``.git``, and the ``private`` folders and files, such
    as the output and submissions folders) and may read: the course's data folder
    (``bertlab.data.data_root``), read-only, when there is one."""
    from bertlab.data import data_root

    hide = (course_root / SOLUTIONS, course_root / ".git", *private)
    data = data_root().resolve()  # a link's target: the sandbox binds the folder itself, where the variable points
    share = (data,) if data.is_dir() else ()
    return SandboxOptions(isolate=isolated, hide=hide, share=share,
                          variables={"BERTLAB_DATA": str(data)} if share else {})


# --------------------------------------------------------------------------------------------------
# The job's process, as both engines run it
# --------------------------------------------------------------------------------------------------


def job_seconds(limits: Limits) -> float:
    """The time limit of one job: the notebook's, the student processes' starts, the feedback, a margin."""
    return limits.notebook_timeout + (MAX_RESTARTS + 1) * STARTUP_SECONDS + FEEDBACK_SECONDS + JOB_MARGIN_SECONDS


@dataclass(frozen=True)
class Finished:
    """What a job that ended with a result sends back to the instructor's process, from either engine:
    the result, and the files it wrote into its folder, as bytes."""

    result: NotebookResult
    feedback: bytes  # the student's feedback page
    graded: bytes  # the graded notebook, for the formgrader


def worker_context():
    """The multiprocessing context of the workers: each forked from a server that imported the grader."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(WORKER_MODULES)
    return context


def tree_cpu_seconds() -> float:
    """The CPU seconds used so far by this process and its living descendants, each its own time only, not that
    of the children it reaped: so not the jobs' processes, which their job server reaps, nor their sandboxes."""
    return sum(times.own for times in cpu_times(descendants([os.getpid()])).values())


def jobs_done(times: RunTimes) -> None:
    """Record in ``times``, once the run's last job ended, the CPU this machine's processes but the jobs' used
    since the run began (:func:`tree_cpu_seconds`: with a LocalCluster, its scheduler, nannies and workers)."""
    times.cpu_seconds = tree_cpu_seconds() - times.cpu_at_start


def kill_descendants(pid: int) -> None:
    """Kill every process that descends from the process ``pid``: a job's process's sandboxes. Their first
    process also dies with its parent (``sandbox_inside.enter``); this ends, besides, a sandbox that the job's
    process was still starting when it was killed."""
    for each in descendants([pid]):
        if each != pid:
            with contextlib.suppress(OSError):
                os.kill(each, signal.SIGKILL)


class JobProcess:
    """One job in a fresh worker process of its own, forked from the workers' server (:func:`worker_context`),
    as both engines run it: ``target(*args, connection)`` grades the job into ``folder`` and sends its
    result (or why it failed) on ``connection`` (:func:`autograder.job.work`); past ``seconds`` the
    process is killed, with its sandboxes (:meth:`kill`). What it leaves (:meth:`outcome`) is read from
    ``folder``, which is then deleted. :attr:`times` says when it ran, in the engine's ``slot``."""

    def __init__(self, context, target, args: tuple, folder: JobFolder, seconds: float, slot: str):
        self.folder, self.slot = folder, slot
        self.started, self.ended = time.time(), None
        self.receiver, sender = context.Pipe(duplex=False)
        self.process = context.Process(target=target, args=(*args, sender), daemon=True)
        self.process.start()
        self.forked = time.time()
        sender.close()
        self.deadline = time.monotonic() + seconds

    @property
    def times(self) -> JobTimes:
        """When the job was taken up, its process forked and (once :meth:`outcome` is known) ended."""
        return JobTimes(self.slot, self.started, self.forked, self.ended or time.time())

    @property
    def sentinels(self) -> list:
        """What :func:`multiprocessing.connection.wait` waits on: the result, or the process's end."""
        return [self.receiver, self.process.sentinel]

    def outcome(self) -> tuple[Finished | None, str | None] | None:
        """``(what the job left, None)`` or ``(None, why it failed)`` once the job ended; None while it
        works within its time limit."""
        ended = self._ended()
        if ended is None:
            return None
        self.receiver.close()
        self.process.join(timeout=REAP_SECONDS)
        result, failure = ended
        try:
            if result is None:
                return None, failure
            return Finished(result, self.folder.feedback.read_bytes(), self.folder.graded.read_bytes()), None
        except OSError as error:
            return None, f"the job's files cannot be read: {error}"
        finally:
            shutil.rmtree(self.folder.root, ignore_errors=True)
            self.ended = time.time()

    def wait(self) -> tuple[Finished | None, str | None]:
        """The :meth:`outcome`, once the job ended or ran out of time."""
        while (ended := self.outcome()) is None:
            multiprocessing.connection.wait(self.sentinels, max(0.0, self.deadline - time.monotonic()))
        return ended

    def kill(self) -> None:
        """Kill the job's process and every process it started: stopped first, so that it starts no other
        while they are found. A process already reaped is left alone: its process id may be another's."""
        if self.process.exitcode is None:
            with contextlib.suppress(ProcessLookupError):  # it ended this instant
                os.kill(self.process.pid, signal.SIGSTOP)
            kill_descendants(self.process.pid)
            self.process.kill()

    def _ended(self) -> tuple[NotebookResult | None, str | None] | None:
        """The process's (result, failure), or None while it still works within its time limit."""
        if self.receiver.poll():
            try:
                status, value = self.receiver.recv()
            except (EOFError, OSError):
                return None, f"the worker process ended (exit status {self.process.exitcode})"
            return (value, None) if status == "ok" else (None, value)
        if not self.process.is_alive():
            return None, f"the worker process ended without a result (exit status {self.process.exitcode})"
        if time.monotonic() > self.deadline:
            self.kill()
            return None, "the job ran past its time limit and was stopped"
        return None
