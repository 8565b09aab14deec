"""How long the English book and the Chinese book take to build, each from a cold start of its own
build folder, the Chinese one after the English one (the order of ``tools/translations.py build``).

    python benchmarks/book_builds.py [--output DIR] [--out benchmarks/results/book-builds.json]

The English build executes every chapter (``execute_notebooks: cache``) into a fresh execution cache;
the Chinese build (:mod:`autograder.publish.translated_book`) reads the same cache, since its code cells are
the English ones, and executes nothing. The course's target (issue 41): both builds together at most
1.3 times the English one alone. The record says the seconds of each, their ratio, and whether the
Chinese build executed any notebook (it must not). Timings depend on the machine and its load (both
recorded): compare rows of one run only.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autograder.publish import translated_book  # noqa: E402  (after the repository is on the path)

TARGET_RATIO = 1.3
LANGUAGE = "zh_CN"


@dataclass(frozen=True)
class Build:
    """One build: its seconds, and how many notebooks it executed and took from the cache."""

    seconds: float
    executed: int
    cached: int


def timed_build(command: list[str]) -> Build:
    """Run a ``jupyter-book build`` command; fail with its output's end when the build fails."""
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return Build(round(seconds, 1), result.stdout.count("Executing notebook"),
                 result.stdout.count("Using cached notebook"))


def measure(output: Path) -> dict:
    """Build both books into ``output`` (a folder without a build) and return the record."""
    english = timed_build(translated_book.jupyter_book_command(ROOT, output))
    files = translated_book.write_build_files(ROOT, LANGUAGE, output)
    chinese = timed_build(translated_book.jupyter_book_command(ROOT, output, files=files))
    ratio = (english.seconds + chinese.seconds) / english.seconds
    return {"english": asdict(english), "chinese": asdict(chinese), "both_over_english": round(ratio, 3),
            "target": TARGET_RATIO, "within_target": ratio <= TARGET_RATIO and chinese.executed == 0,
            "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "load": os.getloadavg()},
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, help="the build folder (default: a temporary one, deleted after)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "book-builds.json")
    args = parser.parse_args(argv)
    if args.output is not None and (args.output / translated_book.BUILD).exists():
        parser.error(f"{args.output / translated_book.BUILD} exists: the builds are measured from a cold start")
    with tempfile.TemporaryDirectory(prefix="book-builds-") as scratch:
        record = measure((args.output or Path(scratch)).resolve())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))
    return 0 if record["within_target"] else 1


if __name__ == "__main__":
    sys.exit(main())
