"""Grading throughput: a simulated class graded with --jobs 1 and --jobs 2, side by side.

    python benchmarks/grading.py [--students 50] [--chapters 01_attention ...] [--timeout 30]
                                 [--memory 4096] [--seed 0] [--dask] [--out benchmarks/results/grading.json]

The smallest run (a check that the script works, not a measurement): ``--students 1 --chapters 01_attention``.

For every released chapter (``chapters/NN/NN.ipynb`` with its solution) the class has ``--students``
submissions built from the released notebook. Over all (student, chapter) pairs the kinds are dealt
in the proportions 40% solved, 30% partly wrong (every exercise solved, but a random half of them
return a slightly wrong value: float tensors times 1.01, integers plus one, the first item of a
tuple or list so changed), 20% blank and 10% hostile, in turn: a forger that replaces every check
with one that passes, a top-level infinite loop, a memory hog and a cell that kills the kernel.
The counts are rounded by largest remainders (18 submissions: 7, 5, 4 and 2) and a seeded shuffle
decides who gets what. The same class is then

1. executed plainly: each notebook, hidden tests restored, in a fresh kernel with nbclient, one at
   a time, figures rendered as Jupyter renders them (what nbgrader's autograde does at its core,
   without sandbox, gradebook or feedback), with the threads and memory limit that a ``--jobs 1``
   sandbox has;
2. graded with ``--jobs 1``, then with ``--jobs 2``, into fresh output folders: each notebook runs
   once, its code cells in a sandboxed student process and its test cells in the grader;
3. with ``--dask``, graded once more with ``--engine dask --jobs 2`` (a two-worker Dask ``LocalCluster``,
   ``autograder.cluster``): its throughput against ``--jobs 2`` of the local engine, and the engine's
   cost per job (the difference of their wall times over the notebooks).

Each grading runs in a fresh process of its own, as a run of ``autograder grade`` does: its imports, its job
server (the process the jobs fork from) and, with ``--dask``, its cluster start with it. This script imports
at its top no more of the grader than the command's script does (``autograder.cli``): the workers of a
``LocalCluster`` import the main script again (multiprocessing's spawn), as they import the command's.

It prints a markdown table: wall time, notebooks per minute, the speed-up of two workers over one,
the time over plain execution, and where a job's time goes (the run in the sandbox, tests included,
and the feedback); then where each grading's time went besides its jobs' own work
(:class:`autograder.core.results.RunTimes`): from its start to its first job's process, the mean start of
a job's process (the job server's fork) and of its setup in it (a Dask job: its parcel unpacked), the mean
wait of a worker between two jobs, the worker-seconds idle at the end, the time from the last job's end to
the engine's close, and the CPU of its processes but the jobs' (with a LocalCluster: the scheduler and
nannies in the instructor's process, the workers and their job servers). The full class (50 students x 9
chapters, three passes) takes hours on 2 cores: ``--students`` sets the size; a run prints its own duration,
so a small run (``--students 2``) tells how large a class fits a time budget. Timings depend on the machine
and its load, which the table reports; compare rows of one run only.
"""

import argparse
import json
import multiprocessing
import os
import random
import resource
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell

from autograder.bounds import Limits
from autograder.core import course
from autograder.core.course import grade_id, is_solution
from autograder.core.results import ClassResults, RunTimes
from autograder.publish import release
from autograder.run.sandbox import isolation_available, resource_bounds

ROOT = course.ROOT

FORGER = """import importlib, pkgutil
import autograder.checks
for info in pkgutil.iter_modules(autograder.checks.__path__):  # import every check, then replace it
    module = importlib.import_module(f"autograder.checks.{info.name}")
    for name in dir(module):
        if name.startswith("check_"):
            setattr(module, name, lambda *args, **kwargs: "all cases agree")"""
HOSTILE = {
    "forger": FORGER,
    "looper": "while True:\n    pass",
    "hog": "block = bytearray(6 * 1024 ** 3)",
    "killer": "import os\nos._exit(0)",
}
SHARES = {"solved": 0.4, "partly": 0.3, "blank": 0.2, "hostile": 0.1}
WRONG = """def _slightly_off(value):
    torch = __import__("torch")
    if isinstance(value, torch.Tensor):
        return value * 1.01 if value.is_floating_point() else value + 1
    if type(value) in (int, float):
        return value + 1
    if isinstance(value, (tuple, list)) and value:
        return type(value)([_slightly_off(value[0]), *value[1:]]) if type(value) in (tuple, list) else value
    return value


_right_{name} = {name}


def {name}(*args, **kwargs):  # a wrong answer: the right one, slightly off
    return _slightly_off(_right_{name}(*args, **kwargs))"""


def released_chapters(names: list[str] | None = None) -> list[str]:
    """The chapters with a solution and a released notebook (``names`` if given)."""
    available = [name for name in course.chapter_names(ROOT) if (ROOT / "chapters" / name / f"{name}.ipynb").exists()]
    return [name for name in available if not names or name in names]


def deal_kinds(count: int, rng: random.Random) -> list[str]:
    """``count`` kinds in the proportions of SHARES (largest remainders round), the hostile ones
    in turn, shuffled."""
    exact = {kind: share * count for kind, share in SHARES.items()}
    numbers = {kind: int(value) for kind, value in exact.items()}
    for kind in sorted(exact, key=lambda kind: exact[kind] - numbers[kind],
                       reverse=True)[:count - sum(numbers.values())]:
        numbers[kind] += 1
    hostile = [list(HOSTILE)[index % len(HOSTILE)] for index in range(numbers.pop("hostile"))]
    kinds = [kind for kind, number in numbers.items() for _ in range(number)] + hostile
    rng.shuffle(kinds)
    return kinds


def submission(released, answers: dict[str, str], kind: str, rng: random.Random):
    """A student's notebook of ``kind`` built from the released one and the solutions' cells."""
    notebook = nbformat.from_dict(json.loads(nbformat.writes(released)))
    names = sorted(answers)
    wrong = set(rng.sample(names, len(names) // 2)) if kind == "partly" else set()
    solved = set() if kind == "blank" else set(names)
    cells = []
    for cell in notebook.cells:
        name = grade_id(cell)
        if name in solved:
            cell.source = answers[name]
        cells.append(cell)
        if name in wrong and answers[name].lstrip().startswith("def "):
            cells.append(new_code_cell(WRONG.format(name=name)))
    if kind in HOSTILE:  # after the setup cell (imports)
        cells.insert(min(3, len(cells)), new_code_cell(HOSTILE[kind]))
    notebook.cells = cells
    return notebook


def make_class(folder: Path, students: int, chapters: list[str], seed: int) -> dict[str, int]:
    """Write ``students`` submissions per chapter under ``folder``; return how many of each kind."""
    rng = random.Random(seed)
    kinds = iter(deal_kinds(students * len(chapters), rng))
    counts: dict[str, int] = {}
    for chapter in chapters:
        solution = nbformat.read(ROOT / "solutions" / chapter / f"{chapter}.ipynb", as_version=4)
        released = nbformat.read(ROOT / "chapters" / chapter / f"{chapter}.ipynb", as_version=4)
        answers = {grade_id(cell): cell.source for cell in solution.cells if is_solution(cell)}
        for number in range(students):
            kind = next(kinds)
            path = folder / f"student{number:03d}" / chapter / f"{chapter}.ipynb"
            path.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(submission(released, answers, kind, rng), path)
            counts[kind] = counts.get(kind, 0) + 1
    return counts


def _execute_plainly(task: tuple[str, str, int, int, int]) -> float:
    """Execute one notebook with nbclient, hidden tests restored, with the grading's memory limit (a
    hog must not take the machine)."""
    path, solution_path, timeout, threads, memory_mb = task
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb * 1024 ** 2,) * 2)  # the kernel inherits it
    start = time.perf_counter()
    notebook = release.with_hidden_tests(nbformat.read(path, as_version=4), nbformat.read(solution_path, as_version=4))
    os.environ.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    try:
        release.execute(notebook, Path(path).parent, timeout, figures=True)
    except Exception:  # a killed kernel: the time until then is what plain execution costs
        pass
    return time.perf_counter() - start


def execute_plainly(folder: Path, timeout: int, memory_mb: int) -> float:
    """Seconds to execute every notebook of the class, one at a time, without any grading machinery."""
    threads = os.cpu_count() or 1  # as a --jobs 1 grading run gives its one sandbox
    tasks = [(str(path), str(ROOT / "solutions" / path.parent.name / path.name), timeout, threads, memory_mb)
             for path in sorted(folder.glob("*/*/*.ipynb"))]
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=1) as pool:  # a separate process, as a grading worker is
        list(pool.map(_execute_plainly, tasks))
    return time.perf_counter() - start


def phases(out: Path) -> dict[str, float]:
    """Mean seconds per job of each phase, from the results of a grading run (``setup``: in the job's process,
    before the grading; ``total``: the grading's)."""
    seconds = [result.seconds for result in ClassResults.from_json((out / "results.json").read_text()).notebooks
               if result.seconds]
    return {phase: statistics.mean(s.get(phase, 0.0) for s in seconds)
            for phase in ("setup", "run", "feedback", "total")}


def engine_times(times: RunTimes) -> dict[str, float | int | None]:
    """Where a grading's time went besides its jobs' own work (see :class:`RunTimes`), in seconds."""
    since = {name: None if value is None else value - times.began
             for name, value in (("connected", times.connected), ("admitted", times.admitted))}
    return {"to_first_job": times.to_first_job, "fork": times.fork, "between_jobs": times.between_jobs,
            "idle_at_end": times.idle_at_end, "after_last_job": times.after_last_job,
            "cpu_seconds": times.cpu_seconds, "worker_cpu_seconds": times.worker_cpu_seconds,
            "connected": since["connected"], "admitted": since["admitted"], "refreshes": times.refreshes,
            "refresh_seconds": times.refresh_seconds}


def graded(submissions: Path, out: Path, engine: str, jobs: int, limits: Limits, seed: int) -> dict:
    """Grade the class into ``out`` (in the fresh process of :func:`graded_apart`): the row of the table."""
    from autograder.grade import Engine, grade  # here, not at the top: see the module's docstring

    start = time.perf_counter()
    report = grade(submissions, out, jobs=jobs, limits=limits, seed=seed, engine=Engine(engine))
    return {"engine": engine, "jobs": jobs, "seconds": time.perf_counter() - start, "failures": len(report.failures),
            "phases": phases(out), "statuses": statuses(out), "times": engine_times(report.times)}


def graded_apart(*args) -> dict:
    """:func:`graded` in a fresh process, as a run of ``autograder grade`` (its imports, its job server)."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(graded, *args).result()


def statuses(out: Path) -> dict[str, int]:
    """How many test cells got each status in a grading run."""
    counts: dict[str, int] = {}
    for result in ClassResults.from_json((out / "results.json").read_text()).notebooks:
        for test in result.tests:
            counts[str(test.status)] = counts.get(str(test.status), 0) + 1
    return dict(sorted(counts.items()))


def table(notebooks: int, plain: float, rows: list[dict]) -> str:
    lines = ["| run | wall time (s) | notebooks / min | speed-up vs --jobs 1 | x plain execution | "
             "per job: run in sandbox, tests included (s) | feedback (s) | failures |",
             "|---|---:|---:|---:|---:|---:|---:|---:|",
             f"| plain nbclient, 1 at a time | {plain:.0f} | {60 * notebooks / plain:.1f} | | 1.00 | | | |"]
    for row in rows:
        phase = row["phases"]
        engine = "" if row["engine"] == "local" else f" --engine {row['engine']}"
        lines.append(f"| grade{engine} --jobs {row['jobs']} | {row['seconds']:.0f} | "
                     f"{60 * notebooks / row['seconds']:.1f} | "
                     f"{rows[0]['seconds'] / row['seconds']:.2f} | {row['seconds'] / plain:.2f} | {phase['run']:.1f} | "
                     f"{phase['feedback']:.1f} | {row['failures']} |")
    return "\n".join(lines)


def times_table(rows: list[dict]) -> str:
    """Where each grading's time went besides its jobs' own work (:func:`engine_times`, :func:`phases`)."""
    def seconds(value) -> str:
        return "" if value is None else f"{value:.2f}"

    lines = ["| run | to the first job's process (s) | cluster reached, first worker admitted (s) | fork (s) | "
             "setup in the job's process (s) | between two jobs (s) | idle at the end (worker-s) | "
             "after the last job (s) | CPU but the jobs' (s) | of it, Dask workers' own (s) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        times, engine = row["times"], "" if row["engine"] == "local" else f" --engine {row['engine']}"
        cluster = f"{seconds(times['connected'])}, {seconds(times['admitted'])}" if times["connected"] else ""
        lines.append(f"| grade{engine} --jobs {row['jobs']} | {seconds(times['to_first_job'])} | {cluster} | "
                     f"{seconds(times['fork'])} | {seconds(row['phases']['setup'])} | "
                     f"{seconds(times['between_jobs'])} | "
                     f"{seconds(times['idle_at_end'])} | {seconds(times['after_last_job'])} | "
                     f"{seconds(times['cpu_seconds'])} | {seconds(times['worker_cpu_seconds'])} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=50, help="submissions per chapter (default 50)")
    parser.add_argument("--chapters", nargs="*", metavar="CHAPTER", help="default: every released chapter")
    parser.add_argument("--timeout", type=int, default=30, help="time limit per cell, in seconds (default 30)")
    parser.add_argument("--memory", type=int, default=4096, help="memory of a submission, in MB (see autograder grade)")
    parser.add_argument("--seed", type=int, default=0, help="of the class's kinds, and of the hidden tests' inputs")
    parser.add_argument("--dask", action="store_true",
                        help="also grade with --engine dask --jobs 2 "
                             "(needs the cluster extra, pip install -e \".[cluster]\")")
    parser.add_argument("--out", type=Path, help="also write the raw numbers to this JSON file")
    args = parser.parse_args()
    limits = Limits(cell_timeout=args.timeout, notebook_timeout=20 * args.timeout, memory_mb=args.memory)
    chapters = released_chapters(args.chapters)
    began, load = datetime.now(timezone.utc), os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="grading-benchmark-") as scratch:
        scratch = Path(scratch)
        kinds = make_class(scratch / "class", args.students, chapters, args.seed)
        notebooks = sum(kinds.values())
        plain = execute_plainly(scratch / "class", args.timeout, args.memory)
        rows = []
        for engine, jobs in (("local", 1), ("local", 2), *((("dask", 2),) if args.dask else ())):
            rows.append(graded_apart(scratch / "class", scratch / f"out-{engine}-{jobs}", engine, jobs, limits,
                                     args.seed))
    end_load = os.getloadavg()
    minutes = (datetime.now(timezone.utc) - began).total_seconds() / 60
    print(f"Class: {notebooks} notebooks, {args.students} students x {len(chapters)} chapters ({', '.join(chapters)}): "
          f"{', '.join(f'{n} {kind}' for kind, n in sorted(kinds.items()))}. {os.cpu_count()} CPUs, load average "
          f"(1, 5, 15 min) {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at the start, {end_load[0]:.1f} {end_load[1]:.1f} "
          f"{end_load[2]:.1f} at the end; sandbox: {isolation_available()[1]}; limits: {args.timeout} s per cell, "
          f"{args.memory} MB; bounds: {resource_bounds().describe(limits)}. Started {began:%Y-%m-%d %H:%M} UTC, "
          f"took {minutes:.1f} min.\n")
    print(table(notebooks, plain, rows))
    print("\nWhere each grading's time went besides its jobs' own work:\n")
    print(times_table(rows))
    print("\nStatuses of the test cells:", "; ".join(f"{row['engine']} --jobs {row['jobs']}: {row['statuses']}"
                                                    for row in rows))
    if args.dask:
        local, dask = rows[1], rows[2]
        print(f"\nDask against the local engine, both --jobs 2: {local['seconds'] / dask['seconds']:.2f} times its "
              f"throughput; the engine's cost per job {(dask['seconds'] - local['seconds']) / notebooks:+.2f} s; the "
              f"same statuses: {'yes' if dask['statuses'] == local['statuses'] else 'NO'}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "started": began.isoformat(timespec="seconds"), "minutes": minutes, "notebooks": notebooks,
            "students": args.students, "chapters": chapters, "kinds": kinds, "cpus": os.cpu_count(),
            "load_average_start": load, "load_average_end": end_load,
            "limits": {"cell_timeout": args.timeout, "memory_mb": args.memory}, "plain_seconds": plain,
            "runs": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
