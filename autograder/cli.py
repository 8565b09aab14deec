"""The ``autograder`` command (also ``python -m autograder``), one subcommand per job.

    autograder release [CHAPTER ...] [--check] [--dry-run] [--jobs N] [--timeout S] [--root DIR]
    autograder grade SUBMISSIONS --out DIR [--jobs N] [--timeout S] [--memory MB] [--db URL]

A subcommand is a function ``add_<name>_command(subcommands)`` that declares its arguments and sets
``handler``, a function of the parsed arguments returning the exit status.
"""

import argparse
import sys
from pathlib import Path

from autograder import release
from autograder.grade import add_grade_command


def _run_release(args: argparse.Namespace) -> int:
    try:
        if args.dry_run:
            differences = release.stale_chapters(args.root)
            for line in differences:
                print(line)
            print("chapters/ is up to date" if not differences else "run `autograder release` to regenerate")
            return 1 if differences else 0
        for path in release.generate(args.chapters or None, root=args.root):
            print(f"generated {path.relative_to(args.root)}")
        if not args.check:
            return 0
        problems = release.verify(args.chapters or None, root=args.root, jobs=args.jobs, timeout=args.timeout)
    except release.ReleaseError as error:
        print(f"autograder release: {error}", file=sys.stderr)
        return 2
    for problem in problems:
        print(problem, file=sys.stderr)
    print("verified: solutions pass, stubs fail only with NotImplementedError" if not problems
          else f"{len(problems)} problem(s)")
    return 1 if problems else 0


def add_release_command(subcommands) -> None:
    parser = subcommands.add_parser(
        "release",
        help="regenerate chapters/ from solutions/ (and verify them with --check)",
        description="Regenerate the student notebooks in chapters/ from the solution notebooks in "
        "solutions/ with nbgrader (deterministic: same input, same bytes).",
    )
    parser.add_argument("chapters", nargs="*", metavar="CHAPTER", help="chapter folders, e.g. 01_attention (default: all)")
    parser.add_argument("--check", action="store_true",
                        help="then execute the notebooks: solutions must pass all their tests, and the released "
                        "stubs (hidden tests restored) must fail only with NotImplementedError")
    parser.add_argument("--dry-run", action="store_true",
                        help="write nothing; list what differs between chapters/ and a fresh generation "
                        "(exit status 1 when something does)")
    parser.add_argument("--jobs", type=int, default=1, metavar="N", help="notebooks executed at once by --check (default 1)")
    parser.add_argument("--root", type=Path, default=release.ROOT, metavar="DIR",
                        help="the course repository (default: the one this package is installed from)")
    parser.add_argument("--timeout", type=int, default=600, metavar="S", help="time limit per cell for --check, in seconds (default 600)")
    parser.set_defaults(handler=_run_release)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="autograder", description="Release and grade the course's chapters.")
    subcommands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_release_command(subcommands)
    add_grade_command(subcommands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
