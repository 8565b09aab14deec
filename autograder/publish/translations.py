"""Translations of the course: gettext catalogues of the English Markdown, and the translated notebooks.

English is the single source. For each language ``LANG`` (a folder ``locale/LANG/LC_MESSAGES``) a
catalogue ``<domain>.po`` holds one message per Markdown block (:mod:`autograder.publish.myst_blocks`) of a
chapter's Markdown cells (domain: the chapter, e.g. ``01_attention``) or of a page of :data:`PAGES`
(``intro.md``, domain ``intro``; ``references.md``, domain ``references``); a message's context
(``msgctxt``) is its cell's id (the domain for a page). The domain
``book`` holds the book's own words: its title (``_config.yml``, context ``title``) and the captions of
the parts of its table of contents (``_toc.yml``, context ``caption``). A chapter's catalogue also
holds the words of its figures, one message per label, context ``figure:<cell id>``
(:func:`figure_messages`, :mod:`autograder.publish.figure_labels`): the translated book substitutes
them in the executed figures.

- :func:`source_messages`, :func:`template`: the messages of the English source, as a POT template.
- :func:`update_catalogue` merges a template into a catalogue with ``msgmerge --previous``: a message
  whose English changed becomes fuzzy (the old English beside it), a new one untranslated.
- :func:`counts` and :func:`catalogue_problems`: the fuzzy and untranslated messages, and what
  ``msgfmt --check`` and :func:`autograder.publish.myst_blocks.markup_differences` find wrong.
- :func:`translate_notebook`: a notebook with each Markdown block replaced by its translation
  (untranslated and fuzzy messages stay English); every code cell, cell id and metadata as they were.
  Its relative links are rewritten for its folder (:func:`autograder.publish.myst_blocks.relocate_links`): a
  translation lives one folder deeper than its English, and a link to a page of :data:`PAGES` reaches
  that page's translation (:func:`translated_pages`), the page of the translated book.
- :func:`translated_page_text`: the same for a page of :data:`PAGES`; :func:`book_words`: the
  translated title and captions, for the translated book (:mod:`autograder.publish.translated_book`).

``tools/translations.py`` (update, report, check) and ``autograder release`` (the translated student
notebooks and pages in ``chapters/LANG/``) use them.
"""

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import nbformat
import polib
import yaml

from autograder.core import CHAPTERS, ROOT, SOLUTIONS, chapter_names, replace_if_changed
from autograder.publish import figure_labels
from autograder.publish.myst_blocks import (
    blocks, is_translatable, join_blocks, markup_differences, relocate_links, split_blocks)

LOCALE = "locale"
MESSAGES = "LC_MESSAGES"
#: Markdown pages of the book that are translated, besides the chapters: domain -> file in the repository.
#: The translation of one is ``chapters/LANG/<file>`` (:func:`translated_page`).
PAGES = {"intro": "intro.md", "references": "references.md"}
#: The domain of the book's title (``_config.yml``) and its parts' captions (``_toc.yml``).
BOOK = "book"
CONFIG = "_config.yml"
BOOK_SOURCES = (CONFIG, "_toc.yml")
BUILD = "_build"
#: Where Jupyter Book keeps its execution cache, under the build folder (MyST-NB's default).
CACHE = ".jupyter_cache"
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
    figure_labels: int = 0  # of the total, the words of the chapter's figures
    figure_labels_translated: int = 0

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


def source_paths(root: Path, domain: str) -> tuple[Path, ...]:
    """The English source of a domain: a page of :data:`PAGES`, the book's configuration and table of
    contents (:data:`BOOK`) or a chapter's solution notebook."""
    if domain in PAGES:
        return (Path(root) / PAGES[domain],)
    if domain == BOOK:
        return tuple(Path(root) / name for name in BOOK_SOURCES)
    return (Path(root) / SOLUTIONS / domain / f"{domain}.ipynb",)


def domains(root: Path = ROOT) -> list[str]:
    """The catalogues' domains: the pages of :data:`PAGES` that exist, the book's words when it has a
    configuration and a table of contents, then the chapters."""
    book = [BOOK] if all(path.is_file() for path in source_paths(root, BOOK)) else []
    return page_domains(root) + book + chapter_names(root)


def page_domains(root: Path = ROOT) -> list[str]:
    """The domains of the pages of :data:`PAGES` that exist."""
    return [name for name, page in PAGES.items() if (Path(root) / page).is_file()]


def translated_page(language: str, domain: str) -> PurePosixPath:
    """Where ``autograder release`` writes the translation of the page of :data:`PAGES` ``domain``,
    relative to the repository: ``chapters/LANG/<page>``."""
    return PurePosixPath(CHAPTERS, language, PAGES[domain])


def translated_pages(root: Path, language: str) -> tuple[tuple[str, str], ...]:
    """``(page, its translation)`` for each page of :data:`PAGES` that exists (:func:`translated_page`),
    paths relative to the repository: a translated text's link to the page reaches the translation
    (:class:`Move`)."""
    return tuple((PAGES[domain], str(translated_page(language, domain))) for domain in page_domains(root))


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


def read_yaml(path: Path) -> dict:
    """A YAML mapping (the book's ``_config.yml``, ``_toc.yml``); a clear error naming the file otherwise."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise TranslationError(f"{path}: cannot read it: {error}") from error
    if not isinstance(data, dict):
        raise TranslationError(f"{path}: not a YAML mapping")
    return data


def toc_captions(toc: dict) -> list[str]:
    """The captions of a Jupyter Book table of contents' parts, in order."""
    return [part["caption"] for part in toc.get("parts", []) if part.get("caption")]


def book_messages(root: Path) -> list[Message]:
    """The book's title and its parts' captions."""
    config, toc = (read_yaml(path) for path in source_paths(root, BOOK))
    title = [Message("title", config["title"])] if config.get("title") else []
    return title + [Message("caption", caption) for caption in dict.fromkeys(toc_captions(toc))]


def source_messages(root: Path, domain: str) -> list[Message]:
    """The messages of a domain's English source."""
    if domain == BOOK:
        return book_messages(root)
    [path] = source_paths(root, domain)
    if domain in PAGES:
        return text_messages(domain, path.read_text(encoding="utf-8"))
    return notebook_messages(nbformat.read(path, as_version=4), path)


def english_cache(config: dict, root: Path, output: Path) -> Path:
    """The English build's execution cache: ``execute.cache`` of its configuration (relative to the
    book) when set, else MyST-NB's default, ``.jupyter_cache`` in the build folder of ``output``."""
    cache = config.get("execute", {}).get("cache")
    return (root / cache).resolve() if cache else (output / BUILD / CACHE).resolve()


def figure_messages(root: Path, language: str, domain: str) -> list[Message]:
    """The labels of a chapter's figures (context ``figure:<cell id>``), as the English book's build
    executed the chapter (its execution cache, :func:`autograder.publish.figure_labels.executed_labels`);
    when the cache has no execution of the chapter's current code, those the catalogue has, kept until
    the book is built again. Other domains have none."""
    if domain not in chapter_names(root):
        return []
    root = Path(root)
    config = read_yaml(root / CONFIG) if (root / CONFIG).is_file() else {}
    notebook = root / CHAPTERS / domain / f"{domain}.ipynb"
    labels = figure_labels.executed_labels(english_cache(config, root, root), notebook) if notebook.is_file() else None
    if labels is not None:
        return [Message(figure_labels.context(label.cell_id), label.text) for label in labels]
    path = catalogue_path(root, language, domain)
    return [Message(entry.msgctxt, entry.msgid) for entry in (load(path) if path.is_file() else [])
            if not entry.obsolete and figure_labels.is_figure_context(entry.msgctxt)]


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
        template(source_messages(root, domain) + figure_messages(root, language, domain)).save(str(pot))
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
                sources = ", ".join(str(source.relative_to(root)) for source in source_paths(root, domain))
                stale.append(f"{path.relative_to(root)} is not up to date with {sources}")
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
    labels = [entry for entry in entries if figure_labels.is_figure_context(entry.msgctxt)]
    return Counts(domain, len(entries), translated, fuzzy, len(entries) - translated - fuzzy,
                  len(labels), sum(1 for entry in labels if entry.translated()))


def _place(path: Path, entry: polib.POEntry) -> str:
    first_line = entry.msgid.split("\n", 1)[0]
    return f"{path}:{entry.linenum}: cell {entry.msgctxt}, block {first_line[:BLOCK_EXCERPT_CHARS]!r}"


def catalogue_problems(path: Path) -> list[str]:
    """What is wrong with a catalogue: ``msgfmt --check``'s errors, and each translated (or fuzzy)
    message that loses or adds MyST markup of its English (:func:`markup_differences`), or a figure's
    label that changes its lines, math or numbers (:func:`autograder.publish.figure_labels.label_differences`)."""
    result = _run(["msgfmt", "--check", "--output-file", "/dev/null", str(path)], path)
    problems = [f"{path}: msgfmt --check: {line}" for line in result.stderr.splitlines() if line.strip()]
    if result.returncode != 0 and not problems:
        problems.append(f"{path}: msgfmt --check failed")
    for entry in load(path):
        if entry.obsolete or not entry.msgstr:
            continue
        differences = (figure_labels.label_differences if figure_labels.is_figure_context(entry.msgctxt)
                       else markup_differences)(entry.msgid, entry.msgstr)
        problems += [f"{_place(path, entry)}: {difference}" for difference in differences]
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


@dataclass(frozen=True)
class Move:
    """Where a translation is written, for its relative links: the folders of the English and of the
    translation, relative to the repository (``""`` for the repository itself), and the translated pages
    (``(English page, translation)`` pairs, :func:`translated_pages`), which take their English's place."""

    english_folder: str
    translated_folder: str
    pages: tuple[tuple[str, str], ...] = ()

    def links(self, text: str) -> str:
        """``text`` with its relative links rewritten to reach, from the translation's folder, what they
        reach from the English's, or its translation when that is one of :attr:`pages`."""
        return relocate_links(text, self.english_folder, self.translated_folder, dict(self.pages))


def translate_notebook(notebook: nbformat.NotebookNode, catalogue: dict[tuple[str, str], str],
                       move: Move) -> nbformat.NotebookNode:
    """A copy of ``notebook`` whose Markdown cells are translated, their relative links rewritten for
    the translation's folder; every other cell and all metadata as they were."""
    translated = nbformat.from_dict(notebook)
    for cell in translated.cells:
        if cell.cell_type == "markdown":
            cell.source = move.links(translate_text(cell.get("id", ""), cell.source, catalogue))
    return translated


def translated_notebook_text(english: Path, catalogue: Path, move: Move) -> str:
    """The text of the translation of the notebook file ``english`` (nbformat's layout, as
    :func:`autograder.publish.release.write_notebook` writes it)."""
    notebook = nbformat.read(english, as_version=4)
    return nbformat.writes(translate_notebook(notebook, translations(catalogue), move)) + "\n"


def translated_page_text(root: Path, language: str, domain: str, move: Move) -> str:
    """The translation of the page of :data:`PAGES` ``domain``, its relative links rewritten for ``move``."""
    [path] = source_paths(root, domain)
    catalogue = translations(catalogue_path(root, language, domain))
    return move.links(translate_text(domain, path.read_text(encoding="utf-8"), catalogue))


@dataclass(frozen=True)
class BookWords:
    """The translated book's title and its parts' captions (English where untranslated)."""

    title: str
    captions: dict[str, str]


def book_words(root: Path, language: str) -> BookWords:
    """The title and captions of :data:`BOOK` in ``language``; each untranslated one stays English."""
    catalogue = translations(catalogue_path(root, language, BOOK))
    words = {(message.context, message.text): catalogue.get((message.context, message.text), message.text)
             for message in book_messages(root)}
    return BookWords(title=next((text for (context, _), text in words.items() if context == "title"), ""),
                     captions={english: text for (context, english), text in words.items() if context == "caption"})
