"""Keep the translation catalogues in step with the English source (see CONTRIBUTING.md, "Translations").

    python tools/translations.py update [--language LANG] [--dry-run]
    python tools/translations.py report [--language LANG] [--release]
    python tools/translations.py check  [--language LANG]
    python tools/translations.py build  [--language LANG] [--output DIR] [-- JUPYTER_BOOK_OPTIONS]

- ``update`` extracts the Markdown blocks of the solution notebooks (and of the pages ``intro.md`` and
  ``references.md``), and the words of each chapter's figures as the English build executed them (its
  execution cache; a chapter that the cache lacks keeps the labels its catalogue has), and merges them into
  ``locale/LANG/LC_MESSAGES/<domain>.po`` with ``msgmerge --previous``: changed English becomes
  fuzzy, new English untranslated. It writes only the catalogues that change; ``--dry-run`` lists them
  (exit status 1 when there are any). ``--language`` also starts a new language.
- ``report`` prints, per catalogue, its translated, fuzzy and untranslated messages (figure labels
  included, and counted apart: translated/all); with ``--release``
  the exit status is 1 unless every one is fully translated (the release gate).
- ``check`` runs ``msgfmt --check`` and checks that every translation keeps its English's MyST roles,
  directives, math, links, cited keys, inline code and numbers, and every figure label its lines, math
  and numbers; exit status 1 on any problem.
- ``build`` builds the English book (``DIR/_build/html``, ``DIR`` the repository by default), then the
  book in each language over ``chapters/LANG/`` (``DIR/_build/LANG/_build/html``), with the English
  build's execution cache: the code cells are the same, so nothing runs twice; its figures' words are
  translated in their SVG (``_ext/figure_labels.py``). Publish the second in
  the folder ``LANG/`` of the first: the language switch on every page links there and back
  (``autograder/publish/translated_book.py``, ``_ext/language_switch.py``). Options after ``--`` go to
  ``jupyter-book build`` (``-- -W -n --keep-going``).

Then ``autograder release`` writes the translated student notebooks to ``chapters/LANG/``.
"""

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autograder.core import ROOT  # noqa: E402  (after the repository is on the path)
from autograder.publish import translated_book, translations  # noqa: E402


def _languages(args: argparse.Namespace) -> list[str]:
    return [args.language] if args.language else translations.languages(args.root)


def update(args: argparse.Namespace) -> int:
    if args.dry_run:
        stale = translations.stale_catalogues(args.root)
        print("\n".join(stale) if stale else "the catalogues are up to date")
        return 1 if stale else 0
    for language in _languages(args):
        for domain in translations.domains(args.root):
            if translations.update_catalogue(args.root, language, domain):
                print(f"updated {translations.catalogue_path(args.root, language, domain).relative_to(args.root)}")
    return 0


def report(args: argparse.Namespace) -> int:
    complete = True
    for language in _languages(args):
        print(f"{language}: {'catalogue':<24}{'messages':>9}{'translated':>11}{'fuzzy':>7}{'untranslated':>13}"
              f"{'figure labels':>15}")
        for domain in translations.domains(args.root):
            path = translations.catalogue_path(args.root, language, domain)
            if not path.is_file():
                print(f"{language}: {domain:<24} no catalogue (run update)")
                complete = False
                continue
            counts = translations.counts(path, domain)
            complete = complete and counts.complete
            note = "  (English only)" if counts.total and not counts.translated else ""
            labels = f"{counts.figure_labels_translated}/{counts.figure_labels}" if counts.figure_labels else "-"
            print(f"{language}: {domain:<24}{counts.total:>9}{counts.translated:>11}{counts.fuzzy:>7}"
                  f"{counts.untranslated:>13}{labels:>15}{note}")
    if args.release and not complete:
        print("not ready for a release: translate the fuzzy and untranslated messages", file=sys.stderr)
        return 1
    return 0


def check(args: argparse.Namespace) -> int:
    problems = []
    for language in _languages(args):
        for domain in translations.domains(args.root):
            path = translations.catalogue_path(args.root, language, domain)
            if path.is_file():
                problems += translations.catalogue_problems(path)
    for problem in problems:
        print(problem)
    print(f"{len(problems)} problem(s)" if problems else "the catalogues are consistent with the English")
    return 1 if problems else 0


def build(args: argparse.Namespace) -> int:
    options = tuple(option for option in args.options if option != "--")
    output = (args.output or args.root).resolve()
    commands = [translated_book.jupyter_book_command(args.root, output, options)]
    for language in _languages(args):
        files = translated_book.write_build_files(args.root, language, output)
        commands.append(translated_book.jupyter_book_command(args.root, output, options, files))
    for command in commands:
        result = subprocess.run(command)
        if result.returncode != 0:
            return result.returncode
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="translations", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the course repository (default: this one)")
    subcommands = parser.add_subparsers(required=True, dest="command")
    for name, handler, help_text in (
        ("update", update, "merge the English source into the catalogues (msgmerge --previous)"),
        ("report", report, "count translated, fuzzy and untranslated messages per catalogue"),
        ("check", check, "msgfmt --check, and the MyST markup of every translation"),
        ("build", build, "build the English book, then the book in each language (shared execution cache)"),
    ):
        command = subcommands.add_parser(name, help=help_text)
        command.add_argument("--language", metavar="LANG", help="one language, e.g. zh_CN (default: all in locale/)")
        command.set_defaults(handler=handler)
    subcommands.choices["update"].add_argument("--dry-run", action="store_true",
                                               help="write nothing; list the catalogues that are not up to date")
    subcommands.choices["report"].add_argument("--release", action="store_true",
                                               help="exit status 1 unless every catalogue is fully translated")
    subcommands.choices["build"].add_argument("--output", type=Path, metavar="DIR",
                                              help="where the books are built, in DIR/_build (default: the repository)")
    subcommands.choices["build"].add_argument("options", nargs=argparse.REMAINDER,
                                              help="after --: options of jupyter-book build (-W -n --keep-going)")
    args = parser.parse_args(argv)
    args.root = args.root.resolve()
    try:
        return args.handler(args)
    except translations.TranslationError as error:
        print(f"translations: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
