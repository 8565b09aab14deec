"""How long each chapter takes to execute, as a reader runs it: top to bottom in a fresh kernel.

    python benchmarks/chapters.py [CHAPTER ...] [--solutions] [--timeout 900] [--executed DIR]
                                  [--out benchmarks/results/chapters-<device>.json]

Each chapter notebook of ``chapters/`` (the student version the book executes: blank exercises, their
test cells failing with NotImplementedError) runs in a fresh Jupyter kernel with nbclient, in its own
folder, as a reader's Jupyter would: no ``NBGRADER_EXECUTION``, so the training cells do their full
work. The course's BERT ships with the package, so no chapter depends on another having run first.
``--solutions`` also times the instructor's notebooks (every exercise solved, hidden tests included);
``--executed DIR`` keeps the executed notebooks there, to read every printed number against the prose.

A cell that fails other than a test cell tagged ``raises-exception`` is reported and fails the run.
The target of the course: every chapter under 3 minutes on a quiet 2-core CPU. Timings depend on the
machine and its load (both recorded): compare rows of one run only.
"""

import argparse
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import nbformat
import torch

from autograder.publish import release
from bertlab.utils import resolve_device

ROOT = release.ROOT
TARGET_SECONDS = 180


def execute(path: Path, timeout: int, executed: Path | None) -> tuple[float, list[str]]:
    """Seconds to run ``path`` top to bottom in a fresh kernel, and the unexpected errors' names; the
    executed notebook is written to ``executed / <folder>-<name>`` when executed is given."""
    notebook = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    release.execute(notebook, path.parent, timeout, grading=False)
    seconds = time.perf_counter() - start
    if executed is not None:
        executed.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, executed / f"{path.parent.parent.name}-{path.name}")
    unexpected = [f"cell {index} ({output.get('ename')}: {output.get('evalue', '')[:200]})"
                  for index, cell in enumerate(notebook.cells) if cell.cell_type == "code"
                  and "raises-exception" not in cell.metadata.get("tags", [])
                  for output in cell.get("outputs", []) if output.output_type == "error"]
    return seconds, unexpected


def run(chapters: list[str], folders: list[str], timeout: int, executed: Path | None = None) -> list[dict]:
    rows = []
    for folder in folders:
        for chapter in chapters:
            seconds, unexpected = execute(ROOT / folder / chapter / f"{chapter}.ipynb", timeout, executed)
            rows.append({"notebook": f"{folder}/{chapter}", "seconds": round(seconds, 1),
                         "under_target": seconds < TARGET_SECONDS, "unexpected_errors": unexpected})
            print(f"{folder}/{chapter}: {seconds:.0f} s" + (f"; UNEXPECTED ERRORS: {unexpected}" if unexpected else ""),
                  flush=True)
    return rows


def table(rows: list[dict]) -> str:
    lines = [f"| notebook | seconds | under {TARGET_SECONDS} s |", "|---|---:|---|"]
    lines += [f"| {row['notebook']} | {row['seconds']:.0f} | {'yes' if row['under_target'] else 'NO'} |"
              for row in rows]
    lines.append(f"| total | {sum(row['seconds'] for row in rows):.0f} | |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="*", metavar="CHAPTER", help="e.g. 08_finetuning (default: all)")
    parser.add_argument("--solutions", action="store_true", help="also time the solution notebooks")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell (default 900)")
    parser.add_argument("--executed", type=Path, metavar="DIR", help="keep the executed notebooks in DIR")
    parser.add_argument("--out", type=Path, help="JSON file (default: benchmarks/results/chapters-DEVICE.json)")
    args = parser.parse_args()
    available = release.chapter_names(ROOT)
    unknown = sorted(set(args.chapters) - set(available))
    if unknown:
        parser.error(f"no such chapter: {', '.join(unknown)} (chapters: {', '.join(available)})")
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    load_before = os.getloadavg()
    rows = run(args.chapters or available, ["chapters", "solutions"] if args.solutions else ["chapters"],
               args.timeout, args.executed)
    device = resolve_device("auto")
    results = {
        "started": started, "command": " ".join(["python", *sys.argv]),
        "machine": {"device": device.type, "cpu_count": os.cpu_count(), "torch": torch.__version__,
                    "python": platform.python_version(), "load_average_start": load_before,
                    "load_average_end": os.getloadavg()},
        "target_seconds": TARGET_SECONDS, "rows": rows,
    }
    markdown = table(rows)
    print("\n" + markdown)
    out = args.out or Path(__file__).resolve().parent / "results" / f"chapters-{device.type}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {out}")
    if any(row["unexpected_errors"] for row in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
