"""What grading produces, as typed records: the run of a notebook (:class:`NotebookRun`, each test cell's
:class:`Outcome`), one :class:`NotebookResult` per (student, chapter), what the collector skipped
(:class:`Skipped`), and the class's :class:`ClassResults`, which ``results.json`` holds and whose
:meth:`ClassResults.summary` the command prints; a grading run's :class:`Report` holds them with what the
run did.

``results.json``::

    {"grader_version": ..., "bounds": "how memory, processes and CPU were bounded",
     "sandbox": "how the students' code was confined",
     "look_alikes": ["students whose names look alike: ...", ...],
     "notebooks": [{"student", "chapter", "origin", "timestamp", "fingerprint", "seed", "problem",
                    "notes": [...], "copies": [{"exercise", "reason", "certainty", "withheld"}],
                    "timed_out_cells": [cells stopped at the time limit of a cell, numbered from 1 in the notebook],
                    "tests": [{"grade_id", "points", "max_points", "status", "message", "cause"}],
                    "feedback", "seconds": {...}}, ...],
     "skipped": [{"path", "student", "reason"}, ...]}

``skipped`` holds at most ``MAX_SKIPPED_KEPT_PER_STUDENT`` entries per student (``student`` null counts
as one), then one entry that counts the rest (:mod:`autograder.collect.submissions`); a submission not graded
because the same (student, chapter) was found in another layout comes first, with the one graded and
the ``--prefer`` that would grade it instead. The summary lists ``MAX_SKIPPED_SHOWN_PER_STUDENT`` of
each student's entries and how many more there are.

``seed`` is the run seed the notebook's hidden tests drew their inputs from (a regrade with it meets
the same inputs). A (student, chapter) without a submission appears with ``origin`` null and every
test ``missing`` (cause ``no submission``). A test's ``status`` is a :class:`Status`, and its ``cause``
(a :class:`Cause`) tells apart what its status covers (:data:`CAUSES`).

:class:`ResultStore` keeps each graded notebook's result under ``DIR/.work/results``, signed with a
key of the output folder (which no sandbox sees): a later run reuses a result only when its
signature holds and its fingerprint is the new submission's.
"""

import hashlib
import hmac
import json
import os
import re
import secrets
from collections import defaultdict
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from pathlib import Path

from autograder.bounds import MAX_NAME_CHARS, MAX_SKIPPED_SHOWN_PER_STUDENT, SUMMARY_HINT_CHARS, SUMMARY_MESSAGE_CHARS
from autograder.core.output_layout import OutputLayout
from autograder.text import printable

GRADER_VERSION = "3"  # with the grader's and the reference's sources, part of every fingerprint


class Status(StrEnum):
    """A test cell's status, as results.json, the summary and the feedback write it."""

    PASSED = "passed"
    FAILED = "failed"  # a wrong answer (an assertion), or points the copy policy withheld
    ERROR = "error"  # any other exception
    TIMEOUT = "timeout"
    TAMPERED = "tampered"  # the submission's copy of the test cell was edited: the instructor's ran
    MISSING = "missing"  # the exercise it grades is not defined, or the chapter was not handed in


class Cause(StrEnum):
    """What a status covers, where an instructor tells them apart (:data:`CAUSES`); NONE elsewhere."""

    NONE = ""
    BLANK = "blank"  # an exercise left blank: it still raises NotImplementedError
    CRASH = "crash"  # any other exception, the memory limit, the student's process ending
    UNREADABLE = "unreadable"  # a notebook that cannot be read as the chapter's
    GRADER_ERROR = "grader error"  # a job the grader itself could not finish (graded again by the next run)
    NOT_DEFINED = "not defined"  # the exercise is not defined in the notebook (renamed or deleted)
    NO_SUBMISSION = "no submission"  # a chapter the student did not hand in
    REFERENCE_COPY = "reference copy"  # passed, but its code is certainly the reference's (withheld)
    REFERENCE_UNAVAILABLE = "reference unavailable"  # its code reached the reference, which the sandbox withholds


CAUSES = {Status.ERROR: (Cause.BLANK, Cause.CRASH, Cause.UNREADABLE, Cause.GRADER_ERROR),
          Status.MISSING: (Cause.NOT_DEFINED, Cause.NO_SUBMISSION),
          Status.FAILED: (Cause.REFERENCE_COPY, Cause.REFERENCE_UNAVAILABLE)}

class Certainty(StrEnum):
    """How sure the grader is that an exercise is the reference's code (:mod:`autograder.run.reference_copies`)."""

    CERTAIN = "certain"
    SUSPECTED = "suspected"


class CopyPolicy(StrEnum):
    """What a certain copy of the reference costs (``autograder grade --copies``)."""

    WITHHOLD = "withhold"  # its test gets 0 points
    FLAG = "flag"  # the points stand; the copy is flagged for the instructor

UNSANDBOXED = ("WARNING: graded WITHOUT the sandbox (--unsandboxed): the students' code ran with the grading "
               "user's rights (files, network); only time and memory limits applied")


@dataclass(frozen=True)
class Outcome:
    """What the grader's own run of one test cell gave."""

    status: Status  # passed, failed, error, timeout or missing
    message: str = ""
    output: str = ""  # what the cell printed (the checks print a summary)
    cause: Cause = Cause.NONE  # of an error or a missing exercise (CAUSES)


@dataclass
class NotebookRun:
    """The student's cells' outputs (by index in the submission) and the test cells' outcomes."""

    outputs: dict[int, list] = field(default_factory=dict)
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    truncated: bool = False  # the outputs reached their cap
    timed_out: list[int] = field(default_factory=list)  # the code cells (by index in the submission) past their limit


@dataclass(frozen=True)
class TestResult:
    """The grade of one test cell."""

    grade_id: str
    points: float
    max_points: float
    status: Status
    message: str = ""
    cause: Cause = Cause.NONE  # for an error, a missing test or a withheld one, one of CAUSES[status]

    @property
    def kind(self) -> Status | Cause:
        """The status, or for an error or a missing test its cause: what the summary groups by."""
        return self.cause or self.status

    @property
    def headline(self) -> str:
        """The message in one line (see :func:`headline`)."""
        return headline(self.message)


def headline_parts(message: str) -> tuple[str, str | None]:
    """A test's message's first line (after the failing line of the test cell, when the message starts
    with it: ``line 3: ...``), and the hint of a known mistake, when it has one."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if len(lines) > 1 and re.match(r"line \d+: ", lines[0]):
        lines = lines[1:]
    if not lines:
        return "", None
    return lines[0], next((line for line in lines[1:] if line.startswith("Hint: ")), None)


def headline(message: str) -> str:
    """A test's message in one line: its first line, then the hint, when it has one (:func:`headline_parts`)."""
    first, hint = headline_parts(message)
    return f"{first} {hint}" if hint else first


@dataclass(frozen=True)
class ReferenceCopy:
    """An exercise whose code looks like the reference's, for the instructor to look at."""

    exercise: str
    reason: str
    certainty: Certainty = Certainty.SUSPECTED
    withheld: bool = False  # whether the copy policy withheld the points of its test

    def describe(self) -> str:
        """The flag in one line: the exercise, how sure, what was done, and why."""
        done = ", points withheld" if self.withheld else ""
        return f"{self.exercise} ({self.certainty} copy of the reference{done}): {self.reason}"


@dataclass(frozen=True)
class NotebookResult:
    """The grade of one (student, chapter)."""

    student: str
    chapter: str
    tests: tuple[TestResult, ...]
    origin: str | None = None  # where the submission came from, in SUBMISSIONS; None: no submission
    timestamp: str | None = None  # of the submission, ISO 8601
    fingerprint: str | None = None  # of what the grade depends on (see grade.fingerprint)
    seed: int | None = None  # the run seed of the hidden tests' inputs
    problem: str | None = None  # why the notebook could not be graded as one of its chapter
    notes: tuple[str, ...] = ()
    copies: tuple[ReferenceCopy, ...] = ()
    timed_out_cells: tuple[int, ...] = ()  # the cells (numbered from 1 in the notebook) stopped at their time limit
    feedback: str | None = None  # the feedback page, relative to the output folder
    seconds: dict[str, float] = field(default_factory=dict, compare=False)

    @property
    def score(self) -> float:
        return sum(test.points for test in self.tests)

    @property
    def max_score(self) -> float:
        return sum(test.max_points for test in self.tests)

    def line(self) -> str:
        """One line for the instructor: the student, the chapter, the points, and what did not pass and
        why, grouped by kind (failed, blank, crash, not defined, ...), each test with the start of its
        message; "no submission" or why the notebook could not be read, once, for the whole chapter."""
        head = f"{_text(self.student)}, {_text(self.chapter)}: {self.score:g} / {self.max_score:g}"
        if self.origin is None:
            return f"{head}; {Cause.NO_SUBMISSION}"
        if self.problem:
            return f"{head}; {Cause.UNREADABLE}: {_short(self.problem)}"
        groups = defaultdict(list)
        for test in self.tests:
            if test.status != Status.PASSED:
                groups[test.kind].append(test)
        parts = [f"{kind}: " + ", ".join(test.grade_id if kind == Cause.BLANK or not test.message else
                                         f"{test.grade_id} ({_short(test.message)})" for test in tests)
                 for kind, tests in groups.items()]
        return "; ".join([head, *map(_text, parts)])

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "NotebookResult":
        known = {item.name for item in fields(cls)}
        values = {key: value for key, value in data.items() if key in known}
        values["tests"] = tuple(TestResult(**{**test, "status": Status(test["status"]),
                                              "cause": Cause(test.get("cause", ""))})
                                for test in data["tests"])
        values["copies"] = tuple(ReferenceCopy(**{**copy, "certainty": Certainty(copy["certainty"])})
                                 for copy in data.get("copies", ()))
        values["notes"] = tuple(data.get("notes", ()))
        values["timed_out_cells"] = tuple(data.get("timed_out_cells", ()))
        return cls(**values)


@dataclass(frozen=True)
class Skipped:
    """Something in SUBMISSIONS that was not graded, and why."""

    path: str  # relative to SUBMISSIONS (a zip member after a colon)
    reason: str
    student: str | None = None


@dataclass
class ClassResults:
    """What a grading run knows of the class: results.json."""

    notebooks: list[NotebookResult]
    skipped: list[Skipped]
    bounds: str
    sandbox: str = "Linux namespaces"  # how the students' code was confined (isolation_available)
    look_alikes: list[str] = field(default_factory=list)  # groups of students whose names look alike

    def to_json(self) -> str:
        return json.dumps({"grader_version": GRADER_VERSION, "bounds": self.bounds, "sandbox": self.sandbox,
                           "look_alikes": self.look_alikes,
                           "notebooks": [result.to_json() for result in self.notebooks],
                           "skipped": [asdict(item) for item in self.skipped]}, indent=1, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> "ClassResults":
        data = json.loads(text)
        return cls([NotebookResult.from_json(item) for item in data["notebooks"]],
                   [Skipped(**item) for item in data["skipped"]], data["bounds"],
                   data.get("sandbox", cls.sandbox), data.get("look_alikes", []))

    def summary(self) -> str:
        """Markdown: a warning when the students' code ran without the sandbox; per chapter the
        students, those who handed it in, the mean score, full marks and the exercises flagged; then one line
        per student and chapter (:meth:`NotebookResult.line`), the exercises flagged as copies of the
        reference, the code cells stopped at their time limit, the students whose names look alike, and what
        was skipped, student by student: at most MAX_SKIPPED_SHOWN_PER_STUDENT entries each, then how
        many more results.json holds."""
        by_chapter = defaultdict(list)
        for result in self.notebooks:
            by_chapter[result.chapter].append(result)
        lines = [f"{_text(self.sandbox)}", ""] if self.sandbox.startswith(UNSANDBOXED) else []
        lines += ["| chapter | students | handed in | mean score | full marks | copies |",
                 "|---|---:|---:|---:|---:|---:|"]
        for chapter in sorted(by_chapter):
            results = by_chapter[chapter]
            mean = sum(result.score for result in results) / len(results)
            maximum = max(result.max_score for result in results)
            lines.append(f"| {_cell(chapter)} | {len(results)} "
                         f"| {sum(result.origin is not None for result in results)} "
                         f"| {mean:.2f} / {maximum:g} | {sum(result.score == result.max_score for result in results)} "
                         f"| {sum(len(result.copies) for result in results)} |")
        if self.notebooks:
            lines += ["", "Per student and chapter:"]
            lines += [f"- {result.line()}" for result in sorted(self.notebooks, key=lambda r: (r.student, r.chapter))]
        copies = [(result, copy) for result in self.notebooks for copy in result.copies]
        if copies:
            lines += ["", "Exercises that may be the reference's code (for the instructor to look at):"]
            lines += [f"- {_text(result.student)}/{_text(result.chapter)}, {_text(copy.describe())}"
                      for result, copy in copies]
        stopped = [result for result in self.notebooks if result.timed_out_cells]
        if stopped:
            lines += ["", "Cells stopped at the time limit of a cell (--timeout; raise it to let them finish):"]
            lines += [f"- {_text(result.student)}/{_text(result.chapter)}: cell(s) "
                      + ", ".join(map(str, result.timed_out_cells)) for result in stopped]
        if self.look_alikes:
            lines += ["", "Names that look alike (check that they are different students):"]
            lines += [f"- {_text(line)}" for line in self.look_alikes]
        if self.skipped:
            lines += ["", "Not graded:"]
            by_student = defaultdict(list)
            for item in self.skipped:
                by_student[item.student].append(item)
            for student, items in by_student.items():
                shown, more = items[:MAX_SKIPPED_SHOWN_PER_STUDENT], len(items) - MAX_SKIPPED_SHOWN_PER_STUDENT
                lines += [f"- {_text(item.path)}: {_text(item.reason)}" for item in shown]
                if more > 0:
                    whose = f" of {_text(student)}" if student else ""
                    lines.append(f"- ... and {more:,} more{whose} (all in results.json)")
        return "\n".join(lines)


@dataclass(frozen=True)
class JobTimes:
    """When one job's process ran, as the process that started it saw it, on its machine's clock
    (``time.time()``, seconds): the instructor's with the local engine, a Dask worker's with Dask's."""

    slot: str  # where it ran: a slot of the local engine ("1", "2", ...), or a Dask worker's address
    started: float  # the engine took the job up: a slot of the local engine came free, or the Dask task began
    forked: float  # its process, forked by the job server (autograder.job.JobProcess), was running
    ended: float  # its process had ended and what it left was read


@dataclass
class RunTimes:
    """Where a grading run's time went besides the jobs' own work, for the instructor and the benchmark
    (``benchmarks/grading.py``). Instants are ``time.time()`` of the instructor's machine, a job's of the machine
    that ran it: compare them across machines only as far as their clocks agree."""

    began: float  # grade() began
    cpu_at_start: float = 0.0  # CPU of this machine's processes but the jobs' when it began (their time so far)
    jobs: list[JobTimes] = field(default_factory=list)
    connected: float | None = None  # a Dask run: its client reached the cluster (a LocalCluster's, once started)
    admitted: float | None = None  # a Dask run: its first worker was admitted (its grader and its sandbox checked)
    refreshes: int = 0  # a Dask run: its looks at the cluster for workers that joined
    refresh_seconds: float = 0.0  # their time
    # CPU from `began` to the last job's end of this machine's processes of the run: their own time, not that of the
    # processes they reaped (the jobs, their sandboxes, a sandbox's check); with a LocalCluster, its workers' too
    cpu_seconds: float | None = None
    worker_cpu_seconds: float | None = None  # a Dask run: its workers' own processes' CPU (not their job servers')
    closed: float | None = None  # the engine was done: its last job had ended, a LocalCluster was closed

    @property
    def to_first_job(self) -> float | None:
        """Seconds from the run's start to its first job's process running: what the engine took to start
        (a Dask run: the cluster's start, the workers' admission, the job servers' import of the grader)."""
        return min(job.forked for job in self.jobs) - self.began if self.jobs else None

    @property
    def fork(self) -> float | None:
        """Mean seconds from a job taken up to its process running (the job server's fork)."""
        return sum(job.forked - job.started for job in self.jobs) / len(self.jobs) if self.jobs else None

    @property
    def between_jobs(self) -> float | None:
        """Mean seconds a slot waited between the end of one job and the start of its next (the scheduling
        latency of a Dask worker's tasks; the local engine's loop), over the pairs of jobs one after the other."""
        gaps = [later.started - earlier.ended for earlier, later in self._consecutive()]
        return sum(gaps) / len(gaps) if gaps else None

    @property
    def idle_at_end(self) -> float | None:
        """Slot-seconds idle at the run's end: for each slot, from its last job's end to the run's last job's end."""
        if not self.jobs:
            return None
        last = {job.slot: job.ended for job in sorted(self.jobs, key=lambda job: job.ended)}
        return sum(max(last.values()) - ended for ended in last.values())

    @property
    def after_last_job(self) -> float | None:
        """Seconds from the last job's end to the engine done (a LocalCluster closed)."""
        return self.closed - max(job.ended for job in self.jobs) if self.jobs and self.closed else None

    def _consecutive(self) -> list[tuple[JobTimes, JobTimes]]:
        by_slot: dict[str, list[JobTimes]] = defaultdict(list)
        for job in sorted(self.jobs, key=lambda job: job.started):
            by_slot[job.slot].append(job)
        return [pair for jobs in by_slot.values() for pair in zip(jobs, jobs[1:])]


@dataclass
class Report:
    """What a grading run did."""

    results: ClassResults
    graded: int = 0  # (student, chapter) graded in this run
    reused: int = 0  # already graded with the same submission, not graded again
    failures: list[str] = field(default_factory=list)  # jobs the grader itself could not finish, and why
    grader_errors: dict[tuple[str, str], NotebookResult] = field(default_factory=dict)  # their results
    notes: list[str] = field(default_factory=list)
    engine: str | None = None  # where a Dask run graded, in words (an unencrypted network named); None: here
    times: RunTimes | None = None  # where the run's time went besides the jobs' own work

    @property
    def exit_status(self) -> int:
        return 1 if self.failures else 0


def _text(value: str) -> str:
    """A name or message of a submission, safe to print: one line, no control characters."""
    return printable(str(value).replace("\n", " "), MAX_NAME_CHARS)


def _short(message: str) -> str:
    """A message in one line (:func:`headline`) for the summary: its first line and its hint each cut on
    its own, so that a long first line leaves the hint whole."""
    first, hint = headline_parts(message)
    short = printable(first, SUMMARY_MESSAGE_CHARS)
    return f"{short} {printable(hint, SUMMARY_HINT_CHARS)}" if hint else short


def _cell(value: str) -> str:
    return _text(value).replace("|", "/")


class ResultStore:
    """The graded notebooks' results under ``.work/results``, signed with the key ``.work/key`` of the
    output folder (:class:`autograder.core.output_layout.OutputLayout`)."""

    def __init__(self, layout: OutputLayout):
        self.layout = layout
        key = layout.result_key
        if not key.exists():
            descriptor = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w") as file:
                file.write(secrets.token_hex(32))
        self.key = bytes.fromhex(key.read_text().strip())

    def path(self, student: str, chapter: str) -> Path:
        return self.layout.result(student, chapter)

    def _signature(self, body: str) -> str:
        return hmac.new(self.key, body.encode(), hashlib.sha256).hexdigest()

    def encode(self, result: NotebookResult) -> str:
        body = json.dumps(result.to_json(), sort_keys=True)
        return json.dumps({"result": body, "signature": self._signature(body)})

    def load(self) -> dict[tuple[str, str], NotebookResult]:
        """Every result this grader wrote (a file whose signature fails is ignored: graded again)."""
        results = {}
        for path in sorted(self.layout.results.glob("*/*.json")):
            try:
                stored = json.loads(path.read_text())
                if not hmac.compare_digest(self._signature(stored["result"]), stored["signature"]):
                    continue
                result = NotebookResult.from_json(json.loads(stored["result"]))
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if self.path(result.student, result.chapter) == path:
                results[result.student, result.chapter] = result
        return results
