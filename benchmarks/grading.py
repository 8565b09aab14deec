"""Grading throughput: a simulated class graded with --jobs 1 and --jobs 2, side by side.

    python benchmarks/grading.py [--students 50] [--timeout 30] [--seed 0] [--out benchmarks/results/grading.json]

For every chapter in ``solutions/`` the class has ``--students`` submissions built from the
released notebook: 40% fully solved, 30% partly solved (a random half of the exercises), 20% blank,
and 10% hostile, in turn: a forger that replaces every check with one that passes, a top-level
infinite loop, a memory hog, and a cell that kills the kernel. The same class is then

1. executed plainly: each notebook, hidden tests restored, in a fresh kernel with nbclient, one at
   a time (what nbgrader's autograde does at its core, without sandbox, gradebook or feedback);
2. graded with ``--jobs 1``, then with ``--jobs 2`` into fresh output folders.

It prints a markdown table: wall time, notebooks per minute, the speed-up of two workers over one,
the overhead over plain execution, and where a job's time goes (nbgrader's sandboxed run, the
trusted re-run of the tests, the feedback). Timings depend on the machine and its load, which the
table reports; compare rows of one run only.
"""

import argparse
import json
import os
import random
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell

from autograder import release
from autograder.grade import grade
from autograder.sandbox import Limits, isolation_available

ROOT = release.ROOT

FORGER = """import sys
for module in [m for name, m in list(sys.modules.items()) if name.startswith("autograder.checks.")]:
    for name in dir(module):
        if name.startswith("check_"):
            setattr(module, name, lambda *args, **kwargs: "all cases agree")
import autograder.checks.attention, autograder.checks.framework"""
HOSTILE = {
    "forger": FORGER,
    "looper": "while True:\n    pass",
    "hog": "block = bytearray(6 * 1024 ** 3)",
    "killer": "import os\nos._exit(0)",
}


def _grade_id(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def make_class(folder: Path, students: int, seed: int) -> dict[str, int]:
    """Write ``students`` submissions per chapter under ``folder``; return how many of each kind."""
    rng = random.Random(seed)
    kinds = {}
    for chapter in release.chapter_names(ROOT):
        if not (ROOT / "chapters" / chapter / f"{chapter}.ipynb").exists():
            continue  # not released yet
        solution = nbformat.read(ROOT / "solutions" / chapter / f"{chapter}.ipynb", as_version=4)
        released = nbformat.read(ROOT / "chapters" / chapter / f"{chapter}.ipynb", as_version=4)
        answers = {_grade_id(cell): cell.source for cell in solution.cells
                   if cell.metadata.get("nbgrader", {}).get("solution")}
        for number in range(students):
            share = number / students
            kind = "solved" if share < 0.4 else "partly" if share < 0.7 else "blank" if share < 0.9 else \
                list(HOSTILE)[number % len(HOSTILE)]
            notebook = nbformat.from_dict(json.loads(nbformat.writes(released)))
            solved = set(answers) if kind in ("solved", *HOSTILE) else \
                set(rng.sample(sorted(answers), len(answers) // 2)) if kind == "partly" else set()
            for cell in notebook.cells:
                if _grade_id(cell) in solved:
                    cell.source = answers[_grade_id(cell)]
            if kind in HOSTILE:  # after the first code cell (the imports)
                notebook.cells.insert(2, new_code_cell(HOSTILE[kind]))
            path = folder / f"student{number:03d}" / chapter / f"{chapter}.ipynb"
            path.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(notebook, path)
            kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def _execute_plainly(task: tuple[str, str, int]) -> float:
    path, solution_path, timeout = task
    start = time.perf_counter()
    notebook = release.with_hidden_tests(nbformat.read(path, as_version=4), nbformat.read(solution_path, as_version=4))
    try:
        release.execute(notebook, Path(path).parent, timeout)
    except Exception:  # a killed kernel: the time until then is what plain execution costs
        pass
    return time.perf_counter() - start


def execute_plainly(folder: Path, timeout: int) -> float:
    """Seconds to execute every notebook of the class, one at a time, without any grading machinery."""
    tasks = [(str(path), str(ROOT / "solutions" / path.parent.name / path.name), timeout)
             for path in sorted(folder.glob("*/*/*.ipynb"))]
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=1) as pool:  # a separate process, as a grading worker is
        list(pool.map(_execute_plainly, tasks))
    return time.perf_counter() - start


def phases(out: Path) -> dict[str, float]:
    """Mean seconds per job of each phase, from the result files of a grading run."""
    seconds = [json.loads(path.read_text())["seconds"] for path in (out / ".work" / "results").glob("*/*.json")]
    return {phase: statistics.mean(s.get(phase, 0.0) for s in seconds) for phase in ("kernel", "trusted", "feedback", "total")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=50)
    parser.add_argument("--timeout", type=int, default=30, help="time limit per cell, in seconds")
    parser.add_argument("--memory", type=int, default=4096, help="address space per sandboxed process, in MB")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="also write the raw numbers to this JSON file")
    args = parser.parse_args()
    limits = Limits(cell_timeout=args.timeout, notebook_timeout=20 * args.timeout, memory_mb=args.memory)
    with tempfile.TemporaryDirectory(prefix="grading-benchmark-") as scratch:
        scratch = Path(scratch)
        kinds = make_class(scratch / "class", args.students, args.seed)
        notebooks = sum(kinds.values())
        load = os.getloadavg()[0]
        plain = execute_plainly(scratch / "class", args.timeout)
        rows = []
        for jobs in (1, 2):
            start = time.perf_counter()
            report = grade(scratch / "class", scratch / f"out{jobs}", jobs=jobs, limits=limits, progress=False)
            wall = time.perf_counter() - start
            rows.append((jobs, wall, report, phases(scratch / f"out{jobs}")))
            shutil.rmtree(scratch / f"out{jobs}" / ".work" / "jobs", ignore_errors=True)
    print(f"Class: {notebooks} notebooks ({', '.join(f'{n} {kind}' for kind, n in kinds.items())}); "
          f"{os.cpu_count()} CPUs, load average {load:.1f} at the start; sandbox: {isolation_available()[1]}; "
          f"limits: {args.timeout} s per cell, {args.memory} MB.\n")
    print("| run | wall time (s) | notebooks / min | speed-up vs --jobs 1 | x plain execution | "
          "per job: nbgrader in sandbox (s) | trusted tests (s) | feedback (s) | failures |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| plain nbclient, 1 at a time | {plain:.0f} | {60 * notebooks / plain:.1f} | | 1.00 | | | | |")
    for jobs, wall, report, phase in rows:
        print(f"| grade --jobs {jobs} | {wall:.0f} | {60 * notebooks / wall:.1f} | {rows[0][1] / wall:.2f} | "
              f"{wall / plain:.2f} | {phase['kernel']:.1f} | {phase['trusted']:.1f} | {phase['feedback']:.1f} | "
              f"{len(report.failures)} |")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "notebooks": notebooks, "kinds": kinds, "cpus": os.cpu_count(), "load_average": load,
            "limits": {"cell_timeout": args.timeout, "memory_mb": args.memory}, "plain_seconds": plain,
            "runs": [{"jobs": jobs, "seconds": wall, "failures": len(report.failures), "phases": phase}
                     for jobs, wall, report, phase in rows]}, indent=1) + "\n")


if __name__ == "__main__":
    main()
