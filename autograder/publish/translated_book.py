"""The translated book: a second Jupyter Book build over ``chapters/LANG/``, and the language switch
that links every page to the same page of the other edition.

The English book (``jupyter-book build .``, ``_build/html``) declares the switch in its ``_config.yml``,
``sphinx.config.language_switch`` (read by :meth:`LanguageSwitch.from_config`): the other edition's
language, where it is published relative to this book (``zh_CN/``: English at ``/``, Chinese at
``/zh_CN/``), the link's text each way, and how page names map, by prefix (``chapters/`` ->
``chapters/zh_CN/``, ``intro`` -> ``chapters/zh_CN/intro``, ``references`` -> ``chapters/zh_CN/references``;
any other page, ``instructors``, is the same page in both).

The translated edition is built from the same source folder with a generated configuration and
table of contents (:func:`write_build_files`), in ``_build/LANG/``:

- its table of contents is the English one, each page replaced by its translation where that exists
  (the English page otherwise) and each part's caption translated where the catalogue has it
  (:func:`autograder.publish.translations.book_words`);
- its configuration is the English one with ``language: LANG``, the translated title, the switch back
  to English, ``chapters/LANG/`` no longer excluded, the paths of local extensions made absolute, and
  the English build's execution cache: the translated notebooks have the English code cells, so
  jupyter-cache finds their outputs by the same hash and nothing is executed twice;
- every English page that the table of contents replaced by its translation is excluded, whatever
  ``only_build_toc_files`` says: no page is a document twice, in two languages. The bibliography is one
  (``references.md``, a ``{bibliography}`` with ``:all:``): sphinxcontrib-bibtex gives each citation one
  target per bibliography of the build, so a second one would warn of duplicates and could take the
  chapters' ``{cite}`` links away from the translated page.

``tools/translations.py build`` runs it; ``_ext/language_switch.py`` renders the switch.
"""

import fnmatch
import posixpath
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from autograder.core import CHAPTERS
from autograder.publish.translations import BUILD, CONFIG, TranslationError, book_words, english_cache, read_yaml

TOC = "_toc.yml"
#: The keys of a table of contents' entry that hold entries.
TOC_LISTS = ("parts", "chapters", "sections")
ENGLISH = "en"


@dataclass(frozen=True)
class LanguageSwitch:
    """The link on every page of one edition to the same page of the other.

    ``language``: the other edition's language (``zh_CN``); ``label``: the link's text (in that
    language); ``root``: the other edition's root relative to this one's (``zh_CN/``, ``../``);
    ``pages``: (prefix here, prefix there) pairs: a page name equal to a prefix, or under a prefix
    that ends with ``/``, maps to the other prefix with the same rest; ``back_label``, ``back_language``:
    the link's text and language on the other edition's pages, towards this one."""

    language: str
    label: str
    root: str
    pages: tuple[tuple[str, str], ...]
    back_label: str
    back_language: str = ENGLISH

    @classmethod
    def from_config(cls, value: object, where: str) -> "LanguageSwitch":
        """The switch of the ``language_switch`` value of a configuration; ``where`` names it in errors."""
        if not isinstance(value, dict):
            raise TranslationError(f"{where}: language_switch must be a mapping, not {value!r}")
        required = ("language", "label", "root", "pages", "back_label")
        missing = [key for key in required if key not in value]
        unknown = sorted(set(value) - {*required, "back_language"})
        if missing or unknown:
            raise TranslationError(f"{where}: language_switch lacks {missing} or has unknown keys {unknown}")
        if not isinstance(value["pages"], dict) or not value["root"].endswith("/"):
            raise TranslationError(f"{where}: language_switch.pages must be a mapping and its root end with '/'")
        return cls(value["language"], value["label"], value["root"], tuple(value["pages"].items()),
                   value["back_label"], value.get("back_language", ENGLISH))

    def as_config(self) -> dict:
        """The ``language_switch`` value that :meth:`from_config` reads back."""
        return {"language": self.language, "label": self.label, "root": self.root, "pages": dict(self.pages),
                "back_label": self.back_label, "back_language": self.back_language}

    def counterpart(self, docname: str) -> str:
        """The name of the page ``docname`` in the other edition."""
        matches = [(here, there) for here, there in self.pages
                   if docname == here or (here.endswith("/") and docname.startswith(here))]
        if not matches:
            return docname
        here, there = max(matches, key=lambda pair: len(pair[0]))
        return there + docname[len(here):]

    def href(self, docname: str, target_uri: str) -> str:
        """The relative link from the page ``docname`` to ``target_uri`` (a file name relative to the
        other edition's root, ``chapters/zh_CN/01_attention/01_attention.html``)."""
        target = posixpath.normpath(posixpath.join(self.root, target_uri))
        return posixpath.relpath(target, posixpath.dirname(docname) or ".")

    def reverse(self) -> "LanguageSwitch":
        """The switch of the other edition, back to this one."""
        back_root = "../" * len([part for part in self.root.split("/") if part])
        return LanguageSwitch(self.back_language, self.back_label, back_root,
                              tuple((there, here) for here, there in self.pages), self.label, self.language)


@dataclass(frozen=True)
class BuildFiles:
    """The generated files of a translated build and where it writes."""

    config: Path
    toc: Path
    output: Path  # Jupyter Book's --path-output: the HTML lands in output/_build/html

    @property
    def html(self) -> Path:
        return self.output / BUILD / "html"


def switch_of(config: dict, where: str) -> LanguageSwitch:
    """The language switch that the English configuration ``config`` declares."""
    value = config.get("sphinx", {}).get("config", {}).get("language_switch")
    if value is None:
        raise TranslationError(f"{where}: no sphinx.config.language_switch (the pages of the other edition)")
    return LanguageSwitch.from_config(value, where)


def replacement_page(name: str, switch: LanguageSwitch, exists: Callable[[str], bool]) -> str:
    """The page of the other edition that replaces the English page ``name``: its counterpart where that
    ``exists`` (a predicate on page names), else ``name`` itself."""
    translated = switch.counterpart(name)
    return translated if exists(translated) else name


def toc_pages(item: dict) -> list[str]:
    """Every page name of a Jupyter Book table of contents (or of one of its entries), in order: its
    root, then each entry's file."""
    own = [item[key] for key in ("root", "file") if key in item]
    return own + [name for key in TOC_LISTS for child in item.get(key, []) for name in toc_pages(child)]


def replaced_pages(toc: dict, switch: LanguageSwitch, exists: Callable[[str], bool]) -> list[str]:
    """The English pages of ``toc`` that the translated table of contents replaces by their translation."""
    return [name for name in toc_pages(toc) if replacement_page(name, switch, exists) != name]


def translated_toc(toc: dict, switch: LanguageSwitch, captions: dict[str, str],
                   exists: Callable[[str], bool]) -> dict:
    """The English table of contents ``toc`` with each page that ``exists`` in the other edition (a
    predicate on page names) replaced by it and each caption translated where ``captions`` has it."""

    def entry(item: dict) -> dict:
        item = dict(item)
        if "file" in item:
            item["file"] = replacement_page(item["file"], switch, exists)
        if "caption" in item:
            item["caption"] = captions.get(item["caption"], item["caption"])
        for key in TOC_LISTS:
            if key in item:
                item[key] = [entry(child) for child in item[key]]
        return item

    return {**entry(toc), "root": replacement_page(toc["root"], switch, exists)}


def translated_config(config: dict, root: Path, switch: LanguageSwitch, title: str, cache: Path,
                      replaced: list[str]) -> dict:
    """The English configuration ``config`` (of the book in ``root``) for the edition of ``switch``, the
    source files ``replaced`` (English pages that have a translation, relative to ``root``) excluded."""
    config = dict(config)
    if title:
        config["title"] = title
    folder = f"{CHAPTERS}/{switch.language}/"
    config["exclude_patterns"] = [pattern for pattern in config.get("exclude_patterns", [])
                                  if not fnmatch.fnmatch(folder + "page.ipynb", pattern)] + replaced
    config["execute"] = {**config.get("execute", {}), "cache": str(cache)}
    sphinx = dict(config.get("sphinx", {}))
    sphinx["local_extensions"] = {name: str((root / path).resolve())
                                  for name, path in sphinx.get("local_extensions", {}).items()}
    sphinx["config"] = {**sphinx.get("config", {}), "language": switch.language,
                        "language_switch": switch.reverse().as_config()}
    config["sphinx"] = sphinx
    return config


def write_build_files(root: Path, language: str, output: Path) -> BuildFiles:
    """Write the configuration and table of contents of the book in ``root`` in ``language``, whose
    English build writes into ``output`` (``output/_build/html``), and return where the translated
    build writes: ``output/_build/LANG``."""
    root, output = Path(root).resolve(), Path(output).resolve()
    config, toc = read_yaml(root / CONFIG), read_yaml(root / TOC)
    switch = switch_of(config, str(root / CONFIG))
    if switch.language != language:
        raise TranslationError(f"{root / CONFIG}: language_switch is to {switch.language}, not {language}")
    words = book_words(root, language)

    def source(name: str) -> Path | None:
        """The source file of the page ``name``, if it has one."""
        candidates = [(root / name).with_suffix(suffix) for suffix in (".ipynb", ".md")]
        return next((path for path in candidates if path.is_file()), None)

    def exists(name: str) -> bool:
        return source(name) is not None

    replaced = [path.relative_to(root).as_posix() for name in replaced_pages(toc, switch, exists)
                if (path := source(name)) is not None]

    files = BuildFiles(output / BUILD / language / CONFIG, output / BUILD / language / TOC, output / BUILD / language)
    files.config.parent.mkdir(parents=True, exist_ok=True)
    files.toc.write_text(yaml.safe_dump(translated_toc(toc, switch, words.captions, exists), allow_unicode=True,
                                        sort_keys=False), encoding="utf-8")
    files.config.write_text(yaml.safe_dump(translated_config(config, root, switch, words.title,
                                                             english_cache(config, root, output), replaced),
                                           allow_unicode=True, sort_keys=False), encoding="utf-8")
    return files


def jupyter_book_command(source: Path, output: Path, options: tuple[str, ...] = (),
                         files: BuildFiles | None = None) -> list[str]:
    """The command that builds the book in ``source`` into ``output/_build/html`` with Jupyter Book's
    ``options`` (``-W``, ``-n``, ``--keep-going``): the English book, or with ``files`` the translated
    one (its configuration and table of contents, into ``files.output``)."""
    command = [sys.executable, "-c", "from jupyter_book.cli.main import main; main()", "build", str(source)]
    if files is not None:
        command += ["--config", str(files.config), "--toc", str(files.toc)]
        output = files.output
    return [*command, "--path-output", str(output), *options]
