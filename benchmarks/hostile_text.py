"""The grader's own work on hostile text: a clean class and attacked classes graded side by side (issues 42, 43).

    python benchmarks/hostile_text.py [--chapter 01_attention] [--jobs 1] [--timeout 20] [--seed 0]
                                      [--out benchmarks/results/hostile-text.json]

A class of three students on one chapter (its released notebook; by default 01_attention, the shortest): an
honest student (the solution's answers), a blank one (the released notebook), and a third. In the clean class
the third is a second honest student; in each attacked class the third is an honest student who also hands in
one of the attacks of the issues:

- markup: a Markdown cell of 60,000 unclosed ``<div>`` (300 KB), which the sanitizer (html5lib) parsed for minutes;
- copier: the first exercise defined in an 8 MB cell, around a list literal of 4 million items, which the copy
  reader (IPython's transformation, ``ast.parse``) read for half a minute and 4.3 GB;
- padded: the notebook padded to ``MAX_CELLS`` cells, nine Markdown cells of 1,000 nested ``<div>`` for each code
  cell of a list of 1,000 items (22 MB);
- wide: a 6 MB code cell of ``1,``, whose feedback page was 147 MB.

Each class is graded into a fresh output folder, one after the other, with ``--jobs`` workers and ``--timeout``
seconds per cell (the attackers' big cells spend it in their sandbox: that is their own time, as any code's), after
a first run of the clean class that is not counted (the first run of a process starts the workers' server, which
the runs after it reuse). The script prints
a markdown table: each class's wall time and its ratio to the clean class's; the third student's job as its result
records it (its run, which holds the student's cells in the sandbox and the tests, then the notebook kept for the
formgrader and the feedback page); the grader's own work on the third student's text, redone in a fresh process
(read the notebook, read its code for copies, build the graded notebook, make it inert and write it, build and
render the feedback page: what a job does besides running the notebook), its time, its ratio to the clean
class's and that process's peak memory; the grading workers' peak memory; the largest feedback page. The
workers' peak memory is the largest ``VmHWM`` of the processes forked by the class run's forkserver (the
workers; their sandboxes are other processes), sampled every 0.05 s from ``/proc``. Timings depend on the
machine and its load; compare the rows of one run only.
"""

import argparse
import json
import multiprocessing
import os
import resource
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell

from autograder.bounds import MAX_CELLS, Limits
from autograder.core import course
from autograder.core.course import grade_id, is_solution
from autograder.core.results import ClassResults, NotebookResult
from autograder.grade import grade
from autograder.run.sandbox import isolation_available

ROOT = course.ROOT


def markup(notebook):
    notebook.cells.insert(1, new_markdown_cell("<div>" * 60_000))


def copier(notebook, exercise: str):
    cell = next(cell for cell in notebook.cells if grade_id(cell) == exercise)
    header, body = cell.source.split("\n", 1)
    cell.source = f"{header}\n    table = [{'1,' * 4_000_000}]\n{body}"


def padded(notebook):
    notebook.cells += [new_code_cell("x = [" + "1," * 1_000 + "]") if number % 10 == 9 else
                       new_markdown_cell("<div>" * 1_000) for number in range(MAX_CELLS - len(notebook.cells))]


def wide(notebook):
    notebook.cells.insert(1, new_code_cell("x = [" + "1," * 3_000_000 + "]"))


ATTACKS = ("markup", "copier", "padded", "wide")


def make_class(folder: Path, chapter: str, attack: str | None) -> None:
    """Write the class of three (honest, blank, and a third: honest, with ``attack`` if any) under ``folder``."""
    solution = nbformat.read(ROOT / "solutions" / chapter / f"{chapter}.ipynb", as_version=4)
    answers = {grade_id(cell): cell.source for cell in solution.cells if is_solution(cell)}

    def student(solved: bool):
        notebook = nbformat.read(ROOT / "chapters" / chapter / f"{chapter}.ipynb", as_version=4)
        for cell in notebook.cells:
            if solved and grade_id(cell) in answers:
                cell.source = answers[grade_id(cell)]
        return notebook

    third = student(solved=True)
    if attack == "copier":
        copier(third, next(iter(answers)))
    elif attack is not None:
        {"markup": markup, "padded": padded, "wide": wide}[attack](third)
    for name, notebook in (("honest", student(solved=True)), ("blank", student(solved=False)), ("third", third)):
        path = folder / name / chapter / f"{chapter}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, path)


class WorkerMemory(threading.Thread):
    """The peak resident memory (VmHWM) of the grading workers: the processes forked by this process's
    forkserver, sampled every 0.05 s from /proc while the thread runs."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak_kb = 0
        self.running = True

    def run(self) -> None:
        while self.running:
            parents = _parents()
            servers = {pid for pid, parent in parents.items()
                       if parent == os.getpid() and "forkserver" in _cmdline(pid)}
            for pid, parent in parents.items():
                if parent in servers:
                    self.peak_kb = max(self.peak_kb, _peak_kb(pid))
            time.sleep(0.05)

    def stop(self) -> float:
        """Stop sampling; the peak, in MB."""
        self.running = False
        self.join()
        return self.peak_kb / 1024


def _parents() -> dict[int, int]:
    """pid -> parent pid, of every process /proc shows."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat[stat.rindex(")") + 2:].split()[1])
    return parents


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def _peak_kb(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), 0)


def text_work(chapter: str, submitted: Path, result: NotebookResult) -> float:
    """Seconds of what a job does with a submission besides running it (see the module's docstring), for the
    submission at ``submitted`` and its ``result``, in this process."""
    from autograder.collect.submissions import read_notebook
    from autograder.core.chapters import load_chapters
    from autograder.core.citations import read_references
    from autograder.report import feedback, graded_notebook
    from autograder.report.sanitize import inert_notebook
    from autograder.run.reference_copies import find_copies

    graded_chapter = load_chapters(ROOT)[chapter]
    references = read_references(ROOT / "references.bib")
    instructor = nbformat.read(ROOT / "solutions" / chapter / f"{chapter}.ipynb", as_version=4)
    start = time.perf_counter()
    notebook, _ = read_notebook(submitted.read_bytes())
    find_copies([cell.source for cell in notebook.cells if cell.cell_type == "code"], graded_chapter.exercises)
    graded = graded_notebook.build(notebook, instructor, graded_chapter, None, result)
    nbformat.writes(inert_notebook(graded, references))
    try:
        feedback.render(feedback.student_view(graded, graded_chapter, result, {}), result, graded_chapter, references)
    except feedback.PageTooLarge:
        pass  # the job writes the plain page instead
    return time.perf_counter() - start


def text_work_in_a_fresh_process(chapter: str, clean: tuple[Path, NotebookResult],
                                 third: tuple[Path, NotebookResult]) -> tuple[float, float]:
    """Seconds of :func:`text_work` on the third student's submission, after one on a clean one (which makes what
    a job's first page makes: the exporter, its template), and the peak memory of the process, in MB."""
    text_work(chapter, *clean)
    seconds = text_work(chapter, *third)
    return seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def grade_class(folder: Path, out: Path, chapter: str, jobs: int, limits: Limits, seed: int) -> dict:
    """Grade one class into ``out``: its wall time, the third student's job and the grader's own work on the third
    student's text, the workers' peak memory, the largest feedback page."""
    memory = WorkerMemory()
    memory.start()
    start = time.perf_counter()
    report = grade(folder, out, jobs=jobs, limits=limits, seed=seed)
    seconds = time.perf_counter() - start
    peak = memory.stop()
    graded = ClassResults.from_json((out / "results.json").read_text()).notebooks
    results = {result.student: result for result in graded}
    submitted = {name: folder / name / chapter / f"{chapter}.ipynb" for name in results}
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        work, work_peak = pool.submit(text_work_in_a_fresh_process, chapter, (submitted["honest"], results["honest"]),
                                      (submitted["third"], results["third"])).result()
    third = results["third"]
    return {"seconds": seconds, "failures": len(report.failures), "worker_peak_mb": peak,
            "largest_page_mb": max(path.stat().st_size for path in (out / "feedback").rglob("*.html")) / 1e6,
            "scores": {name: f"{result.score:g} / {result.max_score:g}" for name, result in results.items()},
            "third": third.seconds, "text_work": work, "text_work_peak_mb": work_peak,
            "third_notes": list(third.notes), "third_copies": [copy.describe() for copy in third.copies]}


def table(rows: dict[str, dict]) -> str:
    clean = rows["clean"]
    lines = ["| class | wall time (s) | x clean | third's job (s): run, then formgrader's copy and page | "
             "grader's work on the third's text (s) | x clean | its peak memory (MB) | workers' peak memory (MB) | "
             "largest page (MB) | scores (honest, blank, third) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for name, row in rows.items():
        job = row["third"]
        lines.append(f"| {name} | {row['seconds']:.1f} | {row['seconds'] / clean['seconds']:.2f} | "
                     f"{job['run']:.1f}, {job['total'] - job['run']:.1f} | {row['text_work']:.2f} | "
                     f"{row['text_work'] / clean['text_work']:.1f} | {row['text_work_peak_mb']:.0f} | "
                     f"{row['worker_peak_mb']:.0f} | {row['largest_page_mb']:.2f} | {row['scores']['honest']}, "
                     f"{row['scores']['blank']}, {row['scores']['third']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chapter", default="01_attention", help="the chapter of the class (default 01_attention)")
    parser.add_argument("--jobs", type=int, default=1, help="grading workers (default 1)")
    parser.add_argument("--timeout", type=int, default=20, help="time limit per cell, in seconds (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="of the hidden tests' inputs")
    parser.add_argument("--out", type=Path, help="also write the raw numbers to this JSON file")
    args = parser.parse_args()
    limits = Limits(cell_timeout=args.timeout)
    began, load = datetime.now(timezone.utc), os.getloadavg()
    rows = {}
    with tempfile.TemporaryDirectory(prefix="hostile-text-") as scratch:
        for attack in (None, *ATTACKS):
            make_class(Path(scratch) / (attack or "clean"), args.chapter, attack)
        grade(Path(scratch) / "clean", Path(scratch) / "warm-up", jobs=args.jobs, limits=limits, seed=args.seed)
        for name in ("clean", *ATTACKS):
            rows[name] = grade_class(Path(scratch) / name, Path(scratch) / f"{name}-out", args.chapter, args.jobs,
                                     limits, args.seed)
    minutes = (datetime.now(timezone.utc) - began).total_seconds() / 60
    end_load = os.getloadavg()
    print(f"Chapter {args.chapter}, --jobs {args.jobs}, --timeout {args.timeout}; {os.cpu_count()} CPUs, load average "
          f"(1, 5, 15 min) {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at the start, {end_load[0]:.1f} {end_load[1]:.1f} "
          f"{end_load[2]:.1f} at the end; sandbox: {isolation_available()[1]}. Started {began:%Y-%m-%d %H:%M} UTC, "
          f"took {minutes:.1f} min.\n")
    print(table(rows))
    for name, row in rows.items():
        if row["third_notes"] or row["failures"]:
            print(f"\n{name}: notes {row['third_notes']}; failures {row['failures']}")
    print("\nThe third student's flags:", "; ".join(f"{name}: {len(row['third_copies'])} exercise(s)"
                                                  for name, row in rows.items()))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"started": began.isoformat(timespec="seconds"), "minutes": minutes,
                                        "chapter": args.chapter, "jobs": args.jobs, "timeout": args.timeout,
                                        "cpus": os.cpu_count(),
                                        "load_average_start": load, "load_average_end": end_load, "classes": rows},
                                       indent=1) + "\n")


if __name__ == "__main__":
    main()
