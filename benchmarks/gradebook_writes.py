"""The end-of-run writes of ``autograder grade`` at scale: 1,000, 10,000 and 100,000 stored results.

    python benchmarks/gradebook_writes.py [--sizes 1000 10000 100000] [--databases sqlite postgresql]
                                          [--seed 0] [--out benchmarks/results/gradebook-writes.json]

No notebook is graded. For each size N, a fresh output folder is prepared as a grading run prepares it
(the course's ten chapters registered in a fresh gradebook: ``autograder.grade._prepare_course``), and N
signed results are stored in it (``ResultStore``): N / 10 students, each with a result for every chapter,
each test passed, failed or in error at random, one result in 20 with a flagged copy of the reference
(all drawn from ``--seed``). Then the run's last step, as ``autograder.grade.grade`` takes it: every
result (those it read back when it started, ``ResultStore.load``, timed apart as ``read``, and those it
stored since) written by ``_write_class_results`` (the gradebook, ``results.json``, ``grades.csv``),
three times:

1. ``new``: into the fresh gradebook, where every student and submission is new;
2. ``unchanged``: again, nothing having changed (nothing is written to the gradebook);
3. ``changed``: after 1 % of the stored results got new points (as a regrade of a few notebooks leaves).

Each write is timed in parts (the gradebook, ``results.json``, ``grades.csv``; its total is the end of the
run) and the gradebook rows are counted; the exported CSV is checked against nbgrader's own
``CsvExportPlugin`` for the smallest size (its rows, in any order: nbgrader orders students of the same
last and first name as the database returns them). PostgreSQL runs where its server is installed
(``initdb`` and ``pg_ctl`` on PATH or in Debian's ``/usr/lib/postgresql/*/bin``): a server of its own on a
free port of 127.0.0.1, in a temporary folder, as ``tests/test_postgres_gradebook.py`` starts one.
It prints a Markdown table and writes the raw numbers to ``--out``.
"""

import argparse
import contextlib
import csv
import io
import json
import os
import platform
import pwd
import random
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from unittest import mock

from autograder import grade
from autograder.core import course
from autograder.core.chapters import load_chapters
from autograder.core.nbgrader_adapter import prepare_gradebook, quiet_nbgrader
from autograder.core.output_layout import OutputLayout
from autograder.core.results import (
    Certainty, ClassResults, NotebookResult, ReferenceCopy, ResultStore, Status, TestResult)

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("gradebook", "results.json", "grades.csv")  # of the end of the run


def synthetic_results(chapters: dict, size: int, seed: int) -> list[NotebookResult]:
    """``size`` results: ``size // len(chapters)`` students, a result for each chapter."""
    draw = random.Random(seed)
    start = datetime(2026, 11, 1, tzinfo=timezone.utc)
    results = []
    for index in range(size // len(chapters)):
        student = f"student{index:06d}"
        for name, chapter in chapters.items():
            tests = []
            for test in chapter.tests:
                status = draw.choices([Status.PASSED, Status.FAILED, Status.ERROR], [6, 3, 1])[0]
                tests.append(TestResult(test.grade_id, test.points if status == Status.PASSED else 0.0, test.points,
                                        status, "" if status == Status.PASSED else f"{test.grade_id} is not right yet"))
            copies = (ReferenceCopy(chapter.exercises[0], "it uses the reference", Certainty.CERTAIN),) if (
                draw.random() < 0.05 and chapter.exercises) else ()
            stamp = start + timedelta(minutes=draw.randrange(60 * 24 * 20))
            results.append(NotebookResult(student, name, tuple(tests), origin=f"{student}/{name}/{name}.ipynb",
                                          timestamp=stamp.isoformat(), fingerprint=secrets.token_hex(32), seed=seed,
                                          copies=copies, feedback=f"feedback/{student}/{name}/{name}.html",
                                          seconds={"run": 8.0, "total": 8.5}))
    return results


def store(layout: OutputLayout, results: list[NotebookResult]) -> ResultStore:
    """The results signed and stored as the grading run stores each (``_Finisher``)."""
    stored = ResultStore(layout)
    for result in results:
        path = stored.path(result.student, result.chapter)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(stored.encode(result))
    return stored


class Timer:
    """Seconds spent in the functions it wraps, by step."""

    def __init__(self):
        self.seconds = dict.fromkeys(("read", *STEPS), 0.0)

    def wrap(self, step: str, function, only=None):
        def timed(*args, **kwargs):
            if only is not None and not only(*args):
                return function(*args, **kwargs)
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[step] += time.perf_counter() - start
        return timed


def rows(db_url: str) -> dict[str, int]:
    """The rows of nbgrader's tables that grading writes."""
    from sqlalchemy import create_engine, text

    engine = create_engine(db_url)
    try:
        with engine.connect() as connection:
            return {table: connection.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()
                    for table in ("student", "submitted_assignment", "submitted_notebook", "grade", "comment")}
    finally:
        engine.dispose()


def end_of_run(layout: OutputLayout, db_url: str, chapters: dict, stored: ResultStore) -> dict:
    """The run's last step, timed in parts, after the read of the stored results a run starts with."""
    timer = Timer()
    report = grade.Report(ClassResults([], [], "synthetic"))
    patches = [mock.patch.object(ClassResults, "to_json", timer.wrap("results.json", ClassResults.to_json)),
               mock.patch.object(grade, "write_atomically", timer.wrap(
                   "results.json", grade.write_atomically, only=lambda path, *rest: path == layout.results_json))]
    patches += [mock.patch.object(grade, name, timer.wrap(step, getattr(grade, name)))
                for name, step in (("write_grades", "gradebook"), ("store_grades", "gradebook"),
                                   ("export_csv", "grades.csv")) if hasattr(grade, name)]
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        start = time.perf_counter()
        results = stored.load()
        timer.seconds["read"] = time.perf_counter() - start
        start = time.perf_counter()
        grade._write_class_results(layout, db_url, chapters, results, report)
        total = time.perf_counter() - start
    assert report.failures == [], report.failures[:3]
    return {"seconds": {step: round(value, 3) for step, value in timer.seconds.items()}, "total": round(total, 3)}


def nbgrader_csv_rows(db_url: str) -> list[tuple]:
    """The rows of nbgrader's own CSV export of the gradebook, in a canonical order."""
    from nbgrader.api import Gradebook
    from nbgrader.plugins import CsvExportPlugin

    with tempfile.TemporaryDirectory() as scratch, Gradebook(db_url) as gradebook:
        CsvExportPlugin(to=f"{scratch}/grades.csv").export(gradebook)
        return sorted(tuple(row.values()) for row in csv.DictReader(open(f"{scratch}/grades.csv", newline="")))


def measure(size: int, database: str, db_url: str | None, chapters: dict, seed: int) -> dict:
    """The three end-of-run writes of ``size`` results into a fresh gradebook."""
    with tempfile.TemporaryDirectory(prefix="gradebook-writes-") as folder:
        layout = OutputLayout(Path(folder))
        layout.work.mkdir(parents=True)
        db_url = db_url or f"sqlite:///{layout.gradebook}"
        prepare_gradebook(db_url)
        grade._prepare_course(layout, course.ROOT, sorted(chapters), db_url)
        results = synthetic_results(chapters, size, seed)
        stored = store(layout, results)
        measured = {"size": len(results), "database": database}
        measured["new"] = end_of_run(layout, db_url, chapters, stored)
        measured["rows"] = rows(db_url)
        measured["unchanged"] = end_of_run(layout, db_url, chapters, stored)
        draw = random.Random(seed + 1)
        changed = draw.sample(results, max(1, len(results) // 100))
        store(layout, [replace(result, tests=tuple(replace(test, points=test.max_points - test.points)
                                                   for test in result.tests)) for result in changed])
        measured["changed"] = end_of_run(layout, db_url, chapters, stored)
        if size == min(SIZES_CHECKED):
            ours = sorted(tuple(row[column] for column in row if column != "reference_copies")
                          for row in csv.DictReader(io.StringIO(layout.grades_csv.read_text(), newline="")))
            measured["csv_as_nbgrader"] = ours == nbgrader_csv_rows(db_url)
        return measured


SIZES_CHECKED = [1000]


# --------------------------------------------------------------------------------------------------
# A PostgreSQL server of its own
# --------------------------------------------------------------------------------------------------


def server_binaries() -> Path | None:
    """The folder of PostgreSQL's initdb and pg_ctl: on PATH, else Debian's newest /usr/lib/postgresql/*/bin."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).parent
    folders = sorted(Path("/usr/lib/postgresql").glob("*/bin"),
                     key=lambda path: int(path.parent.name) if path.parent.name.isdigit() else 0)
    return next((folder for folder in reversed(folders) if (folder / "initdb").exists()), None)


@contextlib.contextmanager
def postgresql():
    """A PostgreSQL server on a free port of 127.0.0.1 for the time of the block (run as ``postgres`` or
    ``nobody`` when this is root, as PostgreSQL refuses root): a function that makes a new database and
    returns its URL."""
    binaries = server_binaries()
    user = None
    if os.geteuid() == 0:
        users = {entry.pw_name: entry for entry in pwd.getpwall()}
        user = next(users[name] for name in ("postgres", "nobody") if name in users)
    prefix = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", "--"] if user else []
    folder = Path(tempfile.mkdtemp(prefix="bench-postgres-"))
    password = secrets.token_hex(12)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (folder / "password").write_text(password)
    if user:
        for path in (folder, folder / "password"):
            os.chown(path, user.pw_uid, user.pw_gid)

    def run(*command):
        subprocess.run([*prefix, *map(str, command)], check=True, capture_output=True, cwd=folder, timeout=300,
                       env={**os.environ, "LC_ALL": "C"})

    run(binaries / "initdb", "-D", folder / "data", "-U", "grader", "--pwfile", folder / "password",
        "--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8")
    run(binaries / "pg_ctl", "-D", folder / "data", "-l", folder / "server.log", "-w", "-t", "120", "-o",
        f"-p {port} -k {folder} -c listen_addresses=127.0.0.1", "start")
    made = []

    def database() -> str:
        import psycopg

        name = f"gradebook{len(made)}"
        with psycopg.connect(host="127.0.0.1", port=port, user="grader", password=password, dbname="postgres",
                             autocommit=True) as connection:
            connection.execute(f"CREATE DATABASE {name}")
        made.append(name)
        return f"postgresql://grader:{password}@127.0.0.1:{port}/{name}"

    try:
        yield database
    finally:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            run(binaries / "pg_ctl", "-D", folder / "data", "-m", "immediate", "stop")
        shutil.rmtree(folder, ignore_errors=True)


def table(measurements: list[dict]) -> str:
    lines = ["| database | results | write | gradebook | results.json | grades.csv | end of the run (s) | per 1,000 "
             "| read at the start |", "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for measured in measurements:
        for write in ("new", "unchanged", "changed"):
            seconds, total = measured[write]["seconds"], measured[write]["total"]
            lines.append(f"| {measured['database']} | {measured['size']:,} | {write} | "
                         + " | ".join(f"{seconds[step]:.2f}" for step in STEPS)
                         + f" | {total:.2f} | {1000 * total / measured['size']:.2f} | {seconds['read']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--databases", nargs="+", choices=("sqlite", "postgresql"), default=["sqlite", "postgresql"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gradebook-writes.json")
    args = parser.parse_args()
    quiet_nbgrader()
    SIZES_CHECKED[:] = [min(args.sizes)]
    chapters = load_chapters(course.ROOT)
    databases = [name for name in args.databases if name == "sqlite" or server_binaries() is not None]
    begun, measurements = time.perf_counter(), []
    with contextlib.ExitStack() as stack:
        new_database = stack.enter_context(postgresql()) if "postgresql" in databases else None
        for database in databases:
            for size in args.sizes:
                measured = measure(size, database, new_database() if database == "postgresql" else None, chapters,
                                   args.seed)
                measurements.append(measured)
                print(table([measured]).splitlines()[-3:], flush=True)
    print(table(measurements))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "date": datetime.now().date().isoformat(),
        "machine": f"{os.cpu_count()} CPUs, {platform.processor() or platform.machine()}",
        "python": platform.python_version(), "seconds": round(time.perf_counter() - begun, 1),
        "chapters": len(chapters), "tests_per_result": sum(len(c.tests) for c in chapters.values()) / len(chapters),
        "measurements": measurements}, indent=1) + "\n")


if __name__ == "__main__":
    main()
