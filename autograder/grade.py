"""Grade a class: ``autograder grade SUBMISSIONS --out DIR`` (see :mod:`autograder.cli`).

The run, step by step (:func:`grade`):

1. **Collect** (:mod:`autograder.collect.submissions`): the submission that counts for each (student,
   chapter), and what was skipped, with why.
2. **Prepare** a private nbgrader course under ``DIR/.work/course`` (``source/`` is a copy of
   ``solutions/``) and the gradebook's knowledge of its chapters (:mod:`autograder.core.nbgrader_adapter`).
3. **Reuse** what this grader graded before: a signed result whose fingerprint (the submission, the
   instructor's notebook, the limits, the grader's and the reference's sources) is the new one's
   (:class:`autograder.core.results.ResultStore`). A submission older than the one graded is ignored, unless
   the one graded is of a layout that ``prefer`` now passes over (:func:`grade`).
4. **Grade** the rest, ``--jobs`` at a time, each in a fresh worker process that ends with its job
   (:mod:`autograder.job`, :class:`~autograder.job.JobProcess`), within a time limit per job
   (:func:`~autograder.job.job_seconds`): on this machine (:class:`Engine` ``local``), or on the workers of
   a Dask cluster (``dask``, :mod:`autograder.cluster`), which send back what the job wrote
   (:class:`~autograder.job.Finished`). The hidden tests' inputs come from the run's seed, chosen here and
   recorded with each result.
5. **Write**, here only, each atomically (a temporary file, then ``os.replace``), as each job ends: the graded
   notebook (``DIR/.work/course/autograded``, for nbgrader's formgrader), the feedback page
   (``DIR/feedback/<student>/<chapter>/<notebook>.html``) and the signed result; at the end, from every
   result, the gradebook's scores (``DIR/gradebook.db`` or ``--db``), ``DIR/results.json`` and
   ``DIR/grades.csv`` (:mod:`autograder.core.output_layout` names every path).

An interrupted run keeps what it finished; the next run resumes where it stopped. ``regrade`` grades
every submission again, whatever was stored.

Permissions: what is handed to students, the feedback pages and their folders, is readable by all
(0644, 0755); what holds the class's grades (``results.json``, ``grades.csv``, the SQLite gradebook,
the graded notebooks and the stored results) by the instructor only (0600). An output folder inside
the course's git repository is refused unless git ignores it: the grades must never be committed.
"""

import contextlib
import hashlib
import json
import multiprocessing
import multiprocessing.connection
import multiprocessing.forkserver
import os
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, replace
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from autograder.bounds import GIT_SECONDS, MAX_JOB_FAILURE_CHARS, Limits
from autograder.collect import Layout, Submission, collect_submissions, error_line, look_alike_names
from autograder.core import (
    PRIVATE, ROOT, SHARED, SOLUTIONS, UNSANDBOXED, Cause, Chapter, ClassResults, CopyPolicy, GradingError,
    NotebookResult, OutputLayout, Report, ResultStore, RunTimes, Skipped, Status, TestResult, load_chapters,
    prepare_gradebook, quiet_nbgrader, read_references, register_chapters, without_password, write_atomically)
from autograder.job import (
    Finished, Job, JobProcess, grader_sources, job_seconds, jobs_done, sandbox_options, tree_cpu_seconds, work,
    worker_context)
from autograder.report import export_csv, plain_page, write_grades
from autograder.run.sandbox import SandboxOptions, isolation_available, resource_bounds
from autograder.run.stand_ins import Withholding, withhold
from autograder.text import printable

if TYPE_CHECKING:
    from autograder.cluster import ClusterOptions

SHARED_FOLDER = 0o755


class Progress(StrEnum):
    """What stderr shows as jobs end."""

    BAR = "bar"  # a bar, on a terminal
    LINES = "lines"  # a line per finished job, for logs and pipes
    NONE = "none"  # nothing


class Engine(StrEnum):
    """Where the jobs run: worker processes of this machine, or the workers of a Dask cluster."""

    LOCAL = "local"
    DASK = "dask"


def fingerprint(submission: Submission, chapter: Chapter, limits: Limits, isolated: bool,
                copy_policy: CopyPolicy) -> str:
    """What a grade depends on: the submission, the instructor's notebook, the limits (not the number
    of threads, which only changes the speed), whether the sandbox confined the code, the copy
    policy, and the grader's and the reference's sources."""
    bounds = {name: float(value) for name, value in asdict(limits).items() if name != "threads"}
    parts = (grader_sources(), chapter.fingerprint, json.dumps(bounds, sort_keys=True), submission.problem or "",
             submission.digest, "sandboxed" if isolated else "unsandboxed", copy_policy)
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _shared_folder(folder: Path, top: Path) -> None:
    """``folder`` and its parents up to ``top``, made where missing, readable and searchable by all."""
    folder.mkdir(parents=True, exist_ok=True)
    for each in (folder, *folder.parents):
        each.chmod(SHARED_FOLDER)
        if each == top:
            break


def _prepare_course(layout: OutputLayout, course_root: Path, chapter_names: list[str], db_url: str) -> None:
    """The private nbgrader course (source/ from solutions/), each chapter's files but its notebook
    (which every job starts from) and the gradebook's knowledge of the chapters."""
    shutil.rmtree(layout.sources, ignore_errors=True)
    for name in chapter_names:
        shutil.copytree(course_root / SOLUTIONS / name, layout.source(name),
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
        shutil.rmtree(layout.chapter_files(name), ignore_errors=True)
        shutil.copytree(layout.source(name), layout.chapter_files(name), ignore=shutil.ignore_patterns("*.ipynb"))
    register_chapters(layout.nbgrader_course, db_url, chapter_names)


def _data_note(options: SandboxOptions) -> str:
    """What the sandboxes see of the course's data, in words (for the notes of the run)."""
    from bertlab.data import data_root

    if options.share:
        return f"the course's data: the sandboxes read {options.share[0]} (read-only; BERTLAB_DATA points there)"
    return (f"the course's data: none in the sandboxes ({data_root()} is not a folder): the chapters skip their "
            "live runs on it")


def _sandbox_in_force(unsandboxed: bool) -> tuple[bool, str]:
    """Whether the sandboxes get namespaces, and how the student's code is confined, in words.

    Raises GradingError when namespaces do not work here, unless ``unsandboxed`` accepts running the
    students' code with the grading user's rights."""
    isolated, how = isolation_available()
    if isolated:
        return True, how
    if not unsandboxed:
        raise GradingError(f"the sandbox cannot start here, so no student code is run: {how}. Fix it (instructors.md, "
                           "\"Threat model\"), or pass --unsandboxed to run the students' code with your own rights")
    return False, f"{UNSANDBOXED} ({how})"


def _missing(results: dict[tuple[str, str], NotebookResult], chapters: dict[str, Chapter]) -> list[NotebookResult]:
    """A result of 0 for every (student, chapter) without a submission, in the chapters others handed in."""
    students = sorted({student for student, _ in results})
    graded = sorted({name for _, name in results if name in chapters})
    return [NotebookResult(student, name, tests=tuple(TestResult(test.grade_id, 0.0, test.points, Status.MISSING,
                                                                 f"no submission for {name}", Cause.NO_SUBMISSION)
                                                      for test in chapters[name].tests))
            for student in students for name in graded if (student, name) not in results]


def _check_folders(submissions: Path, out: Path, course_root: Path) -> None:
    """SUBMISSIONS and ``out`` apart; ``out`` not where git would commit it (see :func:`_committable`)."""
    submissions = submissions.resolve()
    if out == submissions or submissions in out.parents or out in submissions.parents:
        raise GradingError(f"--out {out} and SUBMISSIONS {submissions} must not be inside one another")
    if _committable(out, course_root):
        raise GradingError(f"--out {out} is inside the course repository {course_root}, where git would commit the "
                           "students' grades: grade into a folder outside it, or into grading/, "
                           "which .gitignore covers")


def _committable(out: Path, course_root: Path) -> bool:
    """Whether ``out`` lies in the course's git work tree and git does not ignore what grading writes
    there (False where git or the repository is absent)."""
    if out != course_root and course_root not in out.parents:
        return False
    try:
        check = subprocess.run(["git", "-C", str(course_root), "check-ignore", "-q",
                                str(OutputLayout(out).results_json)],
                               capture_output=True, timeout=GIT_SECONDS)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return check.returncode == 1  # 0: ignored; 1: not ignored; 128: not a repository


def grade(
    submissions: Path,
    out: Path,
    *,
    jobs: int = 1,
    limits: Limits | None = None,
    db: str | None = None,
    course_root: Path = ROOT,
    progress: Progress = Progress.NONE,
    seed: int | None = None,
    regrade: bool = False,
    unsandboxed: bool = False,
    copies: CopyPolicy = CopyPolicy.WITHHOLD,
    prefer: Layout = Layout.STUDENT_FOLDERS,
    engine: Engine = Engine.LOCAL,
    cluster: "ClusterOptions | None" = None,
) -> Report:
    """Grade every submission in ``submissions`` into ``out``; see the module's docstring.

    ``limits`` bound each notebook; ``db`` is a SQLAlchemy URL of the gradebook (default: SQLite at
    ``out/gradebook.db``); ``progress`` (:class:`Progress`) is shown on stderr; ``seed`` is the
    run seed of the hidden tests' inputs (default: a new random one); ``regrade`` grades every
    submission again, reusing no stored result. Where the sandbox cannot start, no student code runs
    (:class:`GradingError`) unless ``unsandboxed`` accepts running it with the grading user's rights;
    the results then say so. ``copies`` is the copy policy (:class:`~autograder.core.results.CopyPolicy`): ``withhold``
    gives 0 points to a test whose exercise is certainly the reference's code, ``flag`` leaves the
    points; both flag every copy in results.json, grades.csv and the gradebook. ``prefer`` is the
    layout of SUBMISSIONS graded when a (student, chapter) is found in several (the others are reported
    as not graded; :func:`autograder.collect.submissions.collect_submissions`). ``engine`` says where the jobs
    run: ``local``, ``jobs`` worker processes of this machine; ``dask``, the workers of a Dask cluster, a
    ``LocalCluster`` of ``jobs`` workers on this machine unless ``cluster`` names a running one
    (:class:`autograder.cluster.ClusterOptions`). Raises :class:`GradingError` when grading cannot
    start; a submission that fails is graded with the reason instead.
    """
    if progress not in set(Progress):
        raise ValueError(f"progress={progress!r}: one of {', '.join(Progress)}")
    if copies not in set(CopyPolicy):
        raise ValueError(f"copies={copies!r}: one of {', '.join(CopyPolicy)}")
    if prefer not in set(Layout):
        raise ValueError(f"prefer={prefer!r}: one of {', '.join(Layout)}")
    if engine not in set(Engine):
        raise ValueError(f"engine={engine!r}: one of {', '.join(Engine)}")
    if cluster is not None and engine != Engine.DASK:
        raise ValueError("cluster options are for engine=Engine.DASK")
    times = RunTimes(time.time(), cpu_at_start=tree_cpu_seconds())
    if engine == Engine.DASK:  # before anything: a cluster that cannot be used safely stops the run here
        from autograder.cluster import ClusterOptions, DaskEngine

        dask = DaskEngine(cluster or ClusterOptions(), jobs)
    quiet_nbgrader()
    out, course_root = Path(out).resolve(), Path(course_root).resolve()
    _check_folders(Path(submissions), out, course_root)
    isolated, sandbox = _sandbox_in_force(unsandboxed)
    layout = OutputLayout(out)
    layout.work.mkdir(parents=True, exist_ok=True)
    limits = limits or Limits()
    threads = max(1, (os.cpu_count() or 1) // max(1, jobs))
    limits = replace(limits, threads=threads)
    db_url = db or f"sqlite:///{layout.gradebook}"
    seed = secrets.randbits(62) if seed is None else seed
    with _exclusive(layout):
        prepare_gradebook(db_url)
        if not db:
            layout.gradebook.chmod(PRIVATE)
        chapters = load_chapters(course_root)
        if not chapters:
            raise GradingError(f"no chapter to grade: {course_root / SOLUTIONS} has no notebooks")
        found, skipped = collect_submissions(submissions, chapters, prefer)
        bounds = resource_bounds().describe(limits)  # a Dask run's are its workers' (autograder.cluster)
        report = Report(ClassResults([], skipped, bounds, sandbox, look_alike_names(found)),
                        notes=[f"memory, processes and CPU: {bounds}"] if engine == Engine.LOCAL else [], times=times)
        if engine == Engine.DASK:
            report.engine = dask.description
        if not isolated:
            report.notes.append(sandbox)
        if not found:
            report.notes.append(f"no notebook to grade was found in {submissions} (what was there is under "
                                "\"Not graded\", with why)")
        store = ResultStore(layout)
        previous = store.load()
        involved = sorted({s.chapter for s in found if s.chapter in chapters}
                          | {c for _, c in previous if c in chapters})
        private = (out, Path(submissions).resolve())
        options = sandbox_options(course_root, isolated, private)
        report.notes.append(_data_note(options))
        references = read_references(course_root / "references.bib")
        withheld = {name: withhold(name, chapters[name].exercises, layout.stand_ins(name))
                    if isolated and engine == Engine.LOCAL else Withholding()  # a Dask worker makes its own
                    for name in {s.chapter for s in found if s.chapter in chapters}}
        todo = []
        for submission in found:
            if submission.chapter not in chapters:
                skipped.append(Skipped(submission.origin, submission.problem or "its chapter is unknown",
                                       submission.student))
                continue
            chapter = chapters[submission.chapter]
            print_id = fingerprint(submission, chapter, limits, isolated, copies)
            old = None if regrade else previous.get((submission.student, submission.chapter))
            if old and old.fingerprint == print_id:
                report.reused += 1
                continue
            if old and datetime.fromisoformat(old.timestamp) > submission.timestamp and (
                    old.origin not in submission.passed_over):  # the one graded may be of a layout now passed over
                report.notes.append(f"{submission.origin}: older than the submission already graded for "
                                    f"{submission.student}/{submission.chapter}, ignored")
                continue
            todo.append(_job(submission, chapter, layout, print_id, seed, limits, options, references, copies,
                             withheld[chapter.name]))
        with contextlib.ExitStack() as dask_lifetime:  # the engine starts while the course is prepared:
            if todo and engine == Engine.LOCAL:  # the workers' server imports the grader
                worker_context()
                multiprocessing.forkserver.ensure_running()
            elif todo:  # the Dask cluster is reached (a LocalCluster's workers start their job servers)
                dask_lifetime.enter_context(dask.connected(times))
            _prepare_course(layout, course_root, involved, db_url)
            if progress == Progress.LINES:
                where = f"{max(1, jobs)} at a time" if engine == Engine.LOCAL else "on a Dask cluster"
                print(f"grading {len(todo)} notebook(s), {where} ({report.reused} unchanged)", file=sys.stderr,
                      flush=True)
            finish = _Finisher(layout, store, report, _ProgressShown(len(todo), progress))
            try:
                if engine == Engine.LOCAL:
                    _run_jobs(todo, jobs, finish, times)
                else:
                    dask.run(todo, finish, report, private, isolated)
            finally:
                dask_lifetime.close()  # the Dask client (and a LocalCluster) closed before the results are written
                times.closed = time.time()
                finish.progress.close()
                _write_class_results(layout, db_url, chapters, {**previous, **finish.stored, **report.grader_errors},
                                     report)
                shutil.rmtree(layout.jobs, ignore_errors=True)
    return report


def _write_class_results(layout: OutputLayout, db_url: str, chapters: dict[str, Chapter],
                         results: dict[tuple[str, str], NotebookResult], report: Report) -> None:
    """The gradebook, results.json and grades.csv, from every result (this run's and the stored ones,
    so that the next run heals one cut short before this step), each in time proportional to the class
    (:mod:`autograder.report.gradebook`: what is unchanged in the gradebook is not written again); a record or a
    step that fails is reported in ``report.failures`` and the others are still written. The one place
    where grades reach the class's gradebook."""
    notebooks = [result for result in results.values() if result.chapter in chapters]
    try:
        names = {name: chapter.notebook for name, chapter in chapters.items()}
        report.failures += write_grades(db_url, notebooks, names)
    except Exception as error:
        report.failures.append(f"the gradebook could not be written: {without_password(error_line(error), db_url)}")
    report.results.notebooks = sorted(notebooks + _missing(results, chapters),
                                      key=lambda result: (result.student, result.chapter))
    write_atomically(layout.results_json, report.results.to_json())
    try:
        export_csv(db_url, layout.grades_csv, notebooks)
    except Exception as error:
        report.failures.append(f"grades.csv could not be written: {error_line(error)}")


def _job(submission: Submission, chapter: Chapter, layout: OutputLayout, print_id: str, seed: int, limits: Limits,
         options: SandboxOptions, references: dict, copy_policy: CopyPolicy, withholding: Withholding) -> Job:
    """The job of one submission, whose bytes are copied into the private course first."""
    stored = layout.submitted(submission.student, submission.chapter)
    problem = submission.problem
    try:
        write_atomically(stored, submission.read())
    except (OSError, GradingError) as error:
        write_atomically(stored, b"")
        problem = problem or f"the file could not be read ({error})"
    folder = layout.job_folder(submission.student, submission.chapter)
    return Job(student=submission.student, chapter=chapter, origin=submission.origin,
               timestamp=submission.timestamp.isoformat(), fingerprint=print_id, seed=seed, submitted=str(stored),
               problem=problem, notes=tuple(submission.notes), folder=folder,
               chapter_source=str(layout.source(chapter.name)),
               chapter_files=str(layout.chapter_files(chapter.name)), limits=limits,
               sandbox=options, references=references, copy_policy=copy_policy, withholding=withholding)


class _ProgressShown:
    """What stderr shows as jobs end (:class:`Progress`): a bar, a line per job, or nothing."""

    def __init__(self, total: int, progress: Progress):
        from tqdm import tqdm

        self.total, self.done, self.lines = total, 0, progress == Progress.LINES
        self.bar = tqdm(total=total, desc="grading", unit="notebook", disable=progress != Progress.BAR or not total)

    def ended(self, line: str) -> None:
        self.done += 1
        self.bar.update()
        if self.lines:
            print(f"[{self.done}/{self.total}] {line}", file=sys.stderr, flush=True)

    def close(self) -> None:
        self.bar.close()


class _Finisher:
    """Puts a finished job's files in place and stores its signed result, as each job ends: the one
    writer of the output folder, whichever engine ran the job."""

    def __init__(self, layout: OutputLayout, store: ResultStore, report: Report, progress: _ProgressShown):
        self.layout, self.store, self.report, self.progress = layout, store, report, progress
        self.stored: dict[tuple[str, str], NotebookResult] = {}  # the results this run stored, as stored

    def __call__(self, job: Job, output: Finished | None, failure: str | None) -> None:
        """Put the job's files in place, or record why the grader failed; show a line saying how it went."""
        self.progress.ended(self._put(job, output, failure))

    def _put(self, job: Job, output: Finished | None, failure: str | None) -> str:
        name = f"{job.student}/{job.chapter.name}"
        page = self.layout.feedback_page(job.student, job.chapter.name, job.chapter.notebook)
        try:
            if output is None:
                raise RuntimeError(failure)
            _shared_folder(page.parent, self.layout.feedback)
            write_atomically(page, output.feedback, SHARED)
            graded = self.layout.autograded(job.student, job.chapter.name, job.chapter.notebook)
            write_atomically(graded, output.graded)
            result = replace(output.result, feedback=str(page.relative_to(self.layout.root)))
            stored = self.store.encode(result)
            write_atomically(self.store.path(job.student, job.chapter.name), stored)
            # as ResultStore.load reads it back, so that results.json is the same when a later run writes it
            self.stored[job.student, job.chapter.name] = NotebookResult.from_json(
                json.loads(json.loads(stored)["result"]))
            self.report.graded += 1
            return f"{result.line()} ({result.seconds.get('total', 0):.0f} s)"
        except Exception as error:
            why = error_line(error) if output is not None else printable(next(iter((failure or "").splitlines()),
                                                                                  "no result"), MAX_JOB_FAILURE_CHARS)
            self.report.failures.append(f"{name}: the grader failed: {why}")
            result = grader_error_result(job, why)
            self.report.grader_errors[job.student, job.chapter.name] = replace(
                result, feedback=self._plain(page, result))
            return f"{name}: the grader failed (see the end of the run)"

    def _plain(self, page: Path, result: NotebookResult) -> str | None:
        """A plain feedback page for a job the grader could not finish; its path, or None when even
        that cannot be written."""
        try:
            _shared_folder(page.parent, self.layout.feedback)
            write_atomically(page, plain_page(result, "The grader could not grade this notebook; it is graded again "
                                                      "by the next run."), SHARED)
        except OSError:
            return None
        return str(page.relative_to(self.layout.root))


def grader_error_result(job: Job, why: str) -> NotebookResult:
    """The result of a job the grader could not finish: every test an error of cause "grader error",
    with why in one line. It is not stored, so the next run grades the submission again."""
    message = f"the grader could not grade this notebook ({why}); it is graded again by the next run"
    return NotebookResult(job.student, job.chapter.name, origin=job.origin, timestamp=job.timestamp, seed=job.seed,
                          notes=job.notes, tests=tuple(TestResult(test.grade_id, 0.0, test.points, Status.ERROR,
                                                                  message, Cause.GRADER_ERROR)
                                                       for test in job.chapter.tests))


def _run_jobs(todo: list[Job], jobs: int, finish: _Finisher, times: RunTimes) -> None:
    """Each job in a fresh worker process (forked from a server that imported the grader once), at
    most ``jobs`` at a time, each killed when it runs past :func:`job_seconds`; when each ran goes to ``times``."""
    if not todo:
        return
    context = worker_context()
    waiting, running, free = list(todo), {}, [str(slot) for slot in range(max(1, jobs), 0, -1)]
    try:
        while waiting or running:
            while waiting and free:
                job = waiting.pop(0)
                shutil.rmtree(job.folder.root, ignore_errors=True)
                job.folder.root.mkdir(parents=True)
                running[JobProcess(context, work, (job,), job.folder, job_seconds(job.limits), free.pop())] = job
            wait = max(0.0, min(process.deadline for process in running) - time.monotonic())
            multiprocessing.connection.wait([each for process in running for each in process.sentinels], wait)
            for process, job in list(running.items()):
                outcome = process.outcome()
                if outcome is not None:
                    del running[process]
                    free.append(process.slot)
                    times.jobs.append(process.times)
                    finish(job, *outcome)
        jobs_done(times)
    except KeyboardInterrupt:
        for process in running:
            process.kill()
        raise


class _exclusive:
    """One grading run at a time per output folder (a lock file, released when the process ends)."""

    def __init__(self, layout: OutputLayout):
        self.path, self.out = layout.lock, layout.root

    def __enter__(self):
        import fcntl

        self.file = open(self.path, "w")
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.file.close()
            raise GradingError(f"another grading run is using {self.out}") from None
        return self

    def __exit__(self, *exc_info):
        self.file.close()
