"""Translations of the course: gettext catalogues of the English Markdown, and the translated notebooks.

English is the single source. For each language ``LANG`` (a folder ``locale/LANG/LC_MESSAGES``) a
catalogue ``<domain>.po`` holds one message per Markdown block (:mod:`autograder.myst_blocks`) of a
chapter's Markdown cells (domain: the chapter, e.g. ``01_attention``) or of ``intro.md`` (domain
``intro``); a message's context (``msgctxt``) is its cell's id (``intro`` for ``intro.md``).

- :func:`source_messages`, :func:`template`: the messages of the English source, as a POT template.
- :func:`update_catalogue` merges a template into a catalogue with ``msgmerge --previous``: a message
  whose English changed becomes fuzzy (the old English beside it), a new one untranslated.
- :func:`counts` and :func:`catalogue_problems`: the fuzzy and untranslated messages, and what
  ``msgfmt --check`` and :func:`autograder.myst_blocks.markup_differences` find wrong.
- :func:`translate_notebook`: a notebook with each Markdown block replaced by its translation
  (untranslated and fuzzy messages stay English); every code cell, cell id and metadata as they were.

``tools/translations.py`` (update, report, check) and ``autograder release`` (the translated student
notebooks in ``chapters/LANG/``) use them.
"""

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat
import polib

from autograder.course import ROOT, SOLUTIONS, chapter_names
from autograder.files import replace_if_changed
from autograder.myst_blocks import blocks, is_translatable, join_blocks, markup_differences, split_blocks

LOCALE = "locale"
MESSAGES = "LC_MESSAGES"
#: Markdown pages of the book that are translated, besides the chapters: domain -> file in the repository.
PAGES = {"intro": "intro.md"}
#: The header of a new catalogue; msgmerge keeps it, and the template adds nothing that changes by itself.
HEADER = {
    "Project-Id-Version": "bertlab course",
    "Report-Msgid-Bugs-To": "",
    "PO-Revision-Date": "2026-01-01 00:00+0000",
    "Last-Translator": "the bertlab course authors",
    "Language-Team": "the bertlab course authors",
    "MIME-Version": "1.0",
    "Content-Type": "text/plain; charset=UTF-8",
    "Content-Transfer-Encoding": "8bit",
}
PLURAL_FORMS = {"zh_CN": "nplurals=1; plural=0;"}
BLOCK_EXCERPT_CHARS = 50  # of a block's first line, naming it in a message about its translation


class TranslationError(RuntimeError):
    """A catalogue cannot be read or merged; the message names the file."""


@dataclass(frozen=True)
class Message:
    """One Markdown block to translate: its cell's id (the context) and its English text."""

    context: str
    text: str


@dataclass(frozen=True)
class Counts:
    """How far a catalogue is translated (obsolete messages not counted)."""

    domain: str
    total: int
    translated: int
    fuzzy: int
    untranslated: int

    @property
    def complete(self) -> bool:
        return self.fuzzy == 0 and self.untranslated == 0


# --------------------------------------------------------------------------------------------------
# Where things are
# --------------------------------------------------------------------------------------------------


def languages(root: Path = ROOT) -> list[str]:
    """The languages with catalogues: folders ``locale/LANG/LC_MESSAGES``."""
    locale = Path(root) / LOCALE
    return sorted(path.parent.name for path in locale.glob(f"*/{MESSAGES}") if path.is_dir()) if locale.is_dir() else []


def catalogue_path(root: Path, language: str, domain: str) -> Path:
    return Path(root) / LOCALE / language / MESSAGES / f"{domain}.po"


def source_path(root: Path, domain: str) -> Path:
    """The English source of a domain: a page of :data:`PAGES` or a chapter's solution notebook."""
    if domain in PAGES:
        return Path(root) / PAGES[domain]
    return Path(root) / SOLUTIONS / domain / f"{domain}.ipynb"


def domains(root: Path = ROOT) -> list[str]:
    """The catalogues' domains: the pages of :data:`PAGES` that exist, then the chapters."""
    return [name for name, page in PAGES.items() if (Path(root) / page).is_file()] + chapter_names(root)


# --------------------------------------------------------------------------------------------------
# The English messages
# --------------------------------------------------------------------------------------------------


def text_messages(context: str, text: str) -> list[Message]:
    """The translatable blocks of ``text``, each once, in order."""
    unique = dict.fromkeys(block for block in blocks(text) if is_translatable(block))
    return [Message(context, block) for block in unique]


def notebook_messages(notebook: nbformat.NotebookNode, path: Path) -> list[Message]:
    """The messages of a notebook's Markdown cells; every Markdown cell needs an id."""
    messages = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "markdown":
            continue
        if not cell.get("id"):
            raise TranslationError(f"{path}: Markdown cell {index} has no id (the catalogue's context)")
        messages += text_messages(cell.id, cell.source)
    return messages


def source_messages(root: Path, domain: str) -> list[Message]:
    """The messages of a domain's English source."""
    path = source_path(root, domain)
    if domain in PAGES:
        return text_messages(domain, path.read_text(encoding="utf-8"))
    return notebook_messages(nbformat.read(path, as_version=4), path)


def template(messages: list[Message]) -> polib.POFile:
    """A POT template of ``messages``."""
    pot = polib.POFile(wrapwidth=79)
    pot.metadata = dict(HEADER)
    for message in messages:
        pot.append(polib.POEntry(msgctxt=message.context, msgid=message.text, msgstr=""))
    return pot


# --------------------------------------------------------------------------------------------------
# Catalogues
# --------------------------------------------------------------------------------------------------


def _run(command: list[str], what: Path) -> subprocess.CompletedProcess:
    if shutil.which(command[0]) is None:
        raise TranslationError(f"{what}: {command[0]} is not installed (GNU gettext)")
    return subprocess.run(command, capture_output=True, text=True)


def merged_catalogue(root: Path, language: str, domain: str) -> str:
    """The text of the domain's catalogue merged with its English source (``msgmerge --previous``)."""
    path = catalogue_path(root, language, domain)
    with tempfile.TemporaryDirectory(prefix="translations-") as scratch:
        pot = Path(scratch) / f"{domain}.pot"
        template(source_messages(root, domain)).save(str(pot))
        existing = path
        if not path.is_file():
            existing = Path(scratch) / f"{domain}.po"
            empty = polib.POFile(wrapwidth=79)
            empty.metadata = {**HEADER, "Language": language}
            if language in PLURAL_FORMS:
                empty.metadata["Plural-Forms"] = PLURAL_FORMS[language]
            empty.save(str(existing))
        merged = Path(scratch) / "merged.po"
        result = _run(["msgmerge", "--quiet", "--previous", f"--lang={language}", "--output-file", str(merged),
                       str(existing), str(pot)], path)
        if result.returncode != 0:
            raise TranslationError(f"{path}: msgmerge failed: {result.stderr.strip()}")
        return merged.read_text(encoding="utf-8")


def update_catalogue(root: Path, language: str, domain: str) -> bool:
    """Merge the domain's English source into its catalogue; return whether the file changed."""

    path = catalogue_path(root, language, domain)
    with tempfile.TemporaryDirectory(prefix="translations-") as scratch:
        merged = Path(scratch) / path.name
        merged.write_text(merged_catalogue(root, language, domain), encoding="utf-8")
        return replace_if_changed(merged, path)


def stale_catalogues(root: Path = ROOT) -> list[str]:
    """The catalogues that :func:`update_catalogue` would change; empty when all are up to date."""
    stale = []
    for language in languages(root):
        for domain in domains(root):
            path = catalogue_path(root, language, domain)
            current = path.read_text(encoding="utf-8") if path.is_file() else None
            if merged_catalogue(root, language, domain) != current:
                stale.append(f"{path.relative_to(root)} is not up to date with {source_path(root, domain).relative_to(root)}")
    return stale


def load(path: Path) -> polib.POFile:
    try:
        return polib.pofile(str(path), wrapwidth=79)
    except (OSError, ValueError) as error:
        raise TranslationError(f"{path}: cannot read the catalogue: {error}") from error


def counts(path: Path, domain: str) -> Counts:
    """The translated, fuzzy and untranslated messages of a catalogue."""
    catalogue = load(path)
    entries = [entry for entry in catalogue if not entry.obsolete]
    fuzzy = sum(1 for entry in entries if entry.fuzzy)
    translated = sum(1 for entry in entries if entry.translated())
    return Counts(domain, len(entries), translated, fuzzy, len(entries) - translated - fuzzy)


def _place(path: Path, entry: polib.POEntry) -> str:
    first_line = entry.msgid.split("\n", 1)[0]
    return f"{path}:{entry.linenum}: cell {entry.msgctxt}, block {first_line[:BLOCK_EXCERPT_CHARS]!r}"


def catalogue_problems(path: Path) -> list[str]:
    """What is wrong with a catalogue: ``msgfmt --check``'s errors, and each translated (or fuzzy)
    message that loses or adds MyST markup of its English (:func:`markup_differences`)."""
    result = _run(["msgfmt", "--check", "--output-file", "/dev/null", str(path)], path)
    problems = [f"{path}: msgfmt --check: {line}" for line in result.stderr.splitlines() if line.strip()]
    if result.returncode != 0 and not problems:
        problems.append(f"{path}: msgfmt --check failed")
    for entry in load(path):
        if entry.obsolete or not entry.msgstr:
            continue
        problems += [f"{_place(path, entry)}: {difference}" for difference in markup_differences(entry.msgid, entry.msgstr)]
    return problems


# --------------------------------------------------------------------------------------------------
# Translated notebooks
# --------------------------------------------------------------------------------------------------


def translations(path: Path) -> dict[tuple[str, str], str]:
    """The usable translations of a catalogue, by (context, English): translated, not fuzzy, not obsolete.
    An absent catalogue has none."""
    if not path.is_file():
        return {}
    return {(entry.msgctxt, entry.msgid): entry.msgstr for entry in load(path)
            if entry.translated() and not entry.obsolete}


def translate_text(context: str, text: str, catalogue: dict[tuple[str, str], str]) -> str:
    """``text`` with each block that has a translation replaced by it (separators kept)."""
    pieces = split_blocks(text)
    for index in range(0, len(pieces), 2):
        block = pieces[index]
        body = block.rstrip("\n")
        translated = catalogue.get((context, body))
        if translated is not None:
            pieces[index] = translated + block[len(body):]
    return join_blocks(pieces)


def translate_notebook(notebook: nbformat.NotebookNode, catalogue: dict[tuple[str, str], str]) -> nbformat.NotebookNode:
    """A copy of ``notebook`` whose Markdown cells are translated; every other cell and all metadata as
    they were."""
    translated = nbformat.from_dict(notebook)
    for cell in translated.cells:
        if cell.cell_type == "markdown":
            cell.source = translate_text(cell.get("id", ""), cell.source, catalogue)
    return translated


def translated_notebook_text(english: Path, catalogue: Path) -> str:
    """The text of the translation of the notebook file ``english`` (nbformat's layout, as
    :func:`autograder.release.write_notebook` writes it)."""
    notebook = nbformat.read(english, as_version=4)
    return nbformat.writes(translate_notebook(notebook, translations(catalogue))) + "\n"
