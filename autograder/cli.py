"""The ``autograder`` command (also ``python -m autograder``), one subcommand per job.

    autograder release [CHAPTER ...] [--check] [--dry-run] [--jobs N] [--timeout S] [--root DIR]
    autograder grade SUBMISSIONS --out DIR [--jobs N] [--timeout S] [--notebook-timeout S] [--memory MB]
                     [--db URL] [--root DIR] [--seed N] [--regrade] [--copies withhold|flag] [--unsandboxed]
                     [--prefer student-folders|chapter-folders|files] [--engine local|dask]
                     [--scheduler ADDRESS] [--tls-ca FILE --tls-cert FILE --tls-key FILE] [--insecure-network]

A subcommand is a function ``add_<name>_command(subcommands)`` that declares its arguments and sets
``handler``, a function of the parsed arguments returning the exit status.
"""

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from autograder.bounds import MAX_PRINTED_MESSAGE_CHARS, Limits
from autograder.collect import Layout
from autograder.core import ROOT, CopyPolicy, OutputLayout
import autograder.publish.release as release

if TYPE_CHECKING:
    from autograder.cluster import ClusterOptions

ENGINES = ("local", "dask")  # autograder.grade.Engine, which this module does not import to build its parser


def _folder(value: str) -> Path:
    """A folder option, absolute: the paths printed and compared under it are then relative to it
    wherever the command was started (``--root .`` as ``--root /the/clone``)."""
    return Path(value).resolve()


def _run_release(args: argparse.Namespace) -> int:
    try:
        warning = release.placeholder_warning(args.root)
        if warning:
            print(f"autograder release: {warning}", file=sys.stderr)
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
    parser.add_argument("chapters", nargs="*", metavar="CHAPTER",
                        help="chapter folders, e.g. 01_attention (default: all)")
    parser.add_argument("--check", action="store_true",
                        help="then execute the notebooks: solutions must pass all their tests, and the released "
                        "stubs (hidden tests restored) must fail only with NotImplementedError")
    parser.add_argument("--dry-run", action="store_true",
                        help="write nothing; list what differs between chapters/ and a fresh generation "
                        "(exit status 1 when something does)")
    parser.add_argument("--jobs", type=int, default=1, metavar="N",
                        help="notebooks executed at once by --check (default 1)")
    parser.add_argument("--root", type=_folder, default=ROOT, metavar="DIR",
                        help="the course repository (default: the one this package is installed from)")
    parser.add_argument("--timeout", type=int, default=600, metavar="S",
                        help="time limit per cell for --check, in seconds (default 600)")
    parser.set_defaults(handler=_run_release)


def _cluster_options(args: argparse.Namespace) -> "ClusterOptions | None":
    """The Dask cluster the options name (None for the local engine); raises GradingError for options
    that do not go together."""
    from autograder.cluster import ClusterOptions, TlsFiles
    from autograder.core import GradingError
    from autograder.grade import Engine

    tls = [args.tls_ca, args.tls_cert, args.tls_key]
    if Engine(args.engine) == Engine.LOCAL:
        given = [option for option, value in (("--scheduler", args.scheduler), ("--tls-ca", args.tls_ca),
                                              ("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key),
                                              ("--insecure-network", args.insecure_network)) if value]
        if given:
            raise GradingError(f"{', '.join(given)}: only with --engine dask")
        return None
    if any(tls) and not all(tls):
        raise GradingError("--tls-ca, --tls-cert and --tls-key go together")
    return ClusterOptions(args.scheduler, TlsFiles(*tls) if all(tls) else None, args.insecure_network)


def _run_grade(args: argparse.Namespace) -> int:
    from autograder.core import GradingError, hidden_password
    from autograder.grade import Engine, Progress, grade
    from autograder.text import printable

    limits = Limits(cell_timeout=args.timeout, notebook_timeout=args.notebook_timeout, memory_mb=args.memory)
    try:
        report = grade(args.submissions, args.out, jobs=args.jobs, limits=limits, db=args.db, course_root=args.root,
                       progress=Progress.BAR if sys.stderr.isatty() else Progress.LINES, seed=args.seed,
                       regrade=args.regrade, unsandboxed=args.unsandboxed, copies=args.copies, prefer=args.prefer,
                       engine=Engine(args.engine), cluster=_cluster_options(args))
    except GradingError as error:
        print(f"autograder grade: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("autograder grade: interrupted; what was graded is saved, run again to resume", file=sys.stderr)
        return 130
    for note in report.notes:
        print(printable(note, MAX_PRINTED_MESSAGE_CHARS), file=sys.stderr)
    if report.engine:
        print(f"{report.engine}\n")
    print(report.results.summary())
    out = OutputLayout(args.out.resolve())
    print(f"\ngraded {report.graded}, unchanged {report.reused}")
    print(f"results:  {out.results_json} (every test's points, status, cause and message)")
    print(f"grades:   {out.grades_csv} and the gradebook {hidden_password(args.db) if args.db else out.gradebook}")
    print(f"feedback: {out.feedback}/ (<student>/<chapter>/<notebook>.html, to hand to each student)")
    for failure in report.failures:
        print(printable(failure, MAX_PRINTED_MESSAGE_CHARS), file=sys.stderr)
    return report.exit_status


def add_grade_command(subcommands) -> None:
    defaults = Limits()
    parser = subcommands.add_parser(
        "grade",
        help="grade a class's submissions: each notebook run once in a sandbox, the tests run by the grader",
        description="Grade every submission in SUBMISSIONS (a folder of <student>/<chapter>/<notebook>.ipynb "
        "as nbgrader collects them, of zip files or of notebooks named by student) into DIR: the gradebook, "
        "grades.csv, results.json and feedback/. Re-running grades only what changed.",
    )
    parser.add_argument("submissions", type=Path, metavar="SUBMISSIONS")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="where the results go")
    parser.add_argument("--jobs", type=int, default=1, metavar="N", help="notebooks graded at once (default 1)")
    parser.add_argument("--timeout", type=float, default=defaults.cell_timeout, metavar="S",
                        help=f"time limit per cell, in seconds (default {defaults.cell_timeout:g})")
    parser.add_argument("--notebook-timeout", type=float, default=defaults.notebook_timeout, metavar="S",
                        help=f"time limit per notebook, in seconds (default {defaults.notebook_timeout:g})")
    parser.add_argument("--memory", type=int, default=defaults.memory_mb, metavar="MB",
                        help=f"memory of a submission, in MB (default {defaults.memory_mb}): of all its processes "
                        "where cgroup v2 is delegated, else per process; a Python with PyTorch takes about 1 GB")
    parser.add_argument("--db", metavar="URL", help="SQLAlchemy URL of the gradebook (default: DIR/gradebook.db)")
    parser.add_argument("--root", type=_folder, default=ROOT, metavar="DIR",
                        help="the course repository, whose solutions/ are graded against (default: this one)")
    parser.add_argument("--seed", type=int, metavar="N",
                        help="the seed of the hidden tests' inputs (default: a new random one for each run; "
                        "results.json records the seed of every graded notebook)")
    parser.add_argument("--regrade", action="store_true",
                        help="grade every submission again, even those graded before and unchanged since")
    parser.add_argument("--copies", type=CopyPolicy, choices=list(CopyPolicy), default=CopyPolicy.WITHHOLD,
                        help="what an exercise whose code is certainly the reference's gets: 'withhold' its test's "
                        "points (the default; the reason is in the student's feedback), or 'flag' it only; both "
                        "flag every copy, certain or suspected, in the summary, results.json, grades.csv "
                        "(reference_copies) and the gradebook's comments")
    parser.add_argument("--unsandboxed", action="store_true",
                        help="where the sandbox cannot start (no Linux namespaces), run the students' code anyway, "
                        "with your own rights: it can read your files and reach the network (the results say so); "
                        "without this option such a run stops before any student code runs")
    parser.add_argument("--prefer", type=Layout, choices=list(Layout), default=Layout.STUDENT_FOLDERS,
                        help="which submission is graded when a student's chapter is found in two layouts of "
                        "SUBMISSIONS: the one in the student's own folder, <student>/... ('student-folders', the "
                        "default), in a chapter's folder, <chapter>/<student>.ipynb or <chapter>/<student>/... "
                        "('chapter-folders'), or a file named by the student, <student>.ipynb or <student>.zip "
                        "('files'); the other is reported under \"Not graded\", with this option")
    cluster = parser.add_argument_group("grading on a Dask cluster (pip install -e \".[cluster]\"; instructors.md, "
                                        "\"Grading a large class\")")
    cluster.add_argument("--engine", choices=ENGINES, default=ENGINES[0],
                         help="where the notebooks are graded: 'local', --jobs worker processes of this machine (the "
                         "default), or 'dask', the workers of a Dask cluster: a LocalCluster of --jobs workers on "
                         "127.0.0.1, or the cluster --scheduler names")
    cluster.add_argument("--scheduler", metavar="ADDRESS",
                         help="the address of a running Dask scheduler (tls://host:8786); another machine's must be "
                         "reached over TLS, unless --insecure-network")
    cluster.add_argument("--tls-ca", type=Path, metavar="FILE", help="the certificate authority of the cluster's "
                         "certificates (PEM), for mutual TLS (default: Dask's distributed.comm.tls configuration)")
    cluster.add_argument("--tls-cert", type=Path, metavar="FILE", help="this machine's certificate (PEM)")
    cluster.add_argument("--tls-key", type=Path, metavar="FILE", help="this machine's private key (PEM)")
    cluster.add_argument("--insecure-network", action="store_true",
                         help="accept a scheduler on another machine reached without TLS: whoever can reach it can "
                         "run code as you, so only on a network that the grading machines alone reach (the summary "
                         "says so)")
    parser.set_defaults(handler=_run_grade)


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
