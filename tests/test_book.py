"""Build the book into a temporary folder and check what a reader gets: every chapter page with its
figures, its formulas (MathJax served from the book itself) and no traceback other than the test
cells of the blank exercises, each one line that says so (no frames, no build machine's path). Also: a failing
cell that is not tagged `raises-exception` fails the
build, and the pages pass in a real headless browser when chromium is installed. The Chinese book, built
over chapters/zh_CN from the English build's execution cache, gets the same checks, and every page of
either book links to the same page of the other."""

import importlib.util
import posixpath
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import nbformat
import polib
import pytest
import yaml
from bs4 import BeautifulSoup

from autograder.publish import figure_labels, release, translated_book, translations

ROOT = Path(__file__).resolve().parents[1]
LANGUAGE = "zh_CN"
CHAPTER_NOTEBOOKS = sorted((ROOT / "chapters").glob("*/*.ipynb"))
CHINESE_NOTEBOOKS = sorted((ROOT / "chapters" / LANGUAGE).glob("*/*.ipynb"))

pytestmark = pytest.mark.slow


#: `jupyter-book build` with warnings as errors (-W), nitpicky references (-n).
STRICT = ("-W", "-n", "--keep-going")


def build(source: Path, output: Path, files: translated_book.BuildFiles | None = None) -> subprocess.CompletedProcess:
    """Build the book in ``source`` into ``output/_build/html``, or with ``files`` its translation."""
    command = translated_book.jupyter_book_command(source, output, STRICT, files)
    return subprocess.run(command, capture_output=True, text=True, timeout=1800)


@pytest.fixture(scope="module")
def built_book(tmp_path_factory):
    output = tmp_path_factory.mktemp("book")
    result = build(ROOT, output)
    assert result.returncode == 0, f"the book build failed:\n{result.stdout[-6000:]}\n{result.stderr[-6000:]}"
    return output / "_build" / "html"


@pytest.fixture(scope="module")
def built_chinese_book(built_book):
    """The Chinese book, built after the English one and from its execution cache: it executes nothing.
    Measured by benchmarks/book_builds.py (RESULTS.md, "The Chinese book beside the English one") on
    the 2-core machine under load: the English build 2060 s, the Chinese one 23 s, both 1.01 times the
    English alone (the target: at most 1.3)."""
    output = built_book.parents[1]
    files = translated_book.write_build_files(ROOT, LANGUAGE, output)
    result = build(ROOT, output, files)
    assert result.returncode == 0, f"the Chinese build failed:\n{result.stdout[-6000:]}\n{result.stderr[-6000:]}"
    assert "Executing notebook" not in result.stdout, "the Chinese build executed a notebook the English one cached"
    return files.html


def _toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [chapter["file"] for part in toc["parts"] for chapter in part["chapters"]]


def test_every_chapter_is_in_the_table_of_contents():
    files = _toc_files()
    for notebook in CHAPTER_NOTEBOOKS:
        assert str(notebook.relative_to(ROOT).with_suffix("")) in files, f"add {notebook.relative_to(ROOT)} to _toc.yml"


@pytest.mark.parametrize("notebook", CHAPTER_NOTEBOOKS, ids=lambda path: path.stem)
def test_chapter_page_has_its_figures_math_and_only_intended_tracebacks(built_book, notebook):
    check_chapter_page(built_book / notebook.relative_to(ROOT).with_suffix(".html"), notebook)


@pytest.mark.parametrize("notebook", CHINESE_NOTEBOOKS, ids=lambda path: path.stem)
def test_chinese_chapter_page_has_its_figures_math_and_only_intended_tracebacks(built_chinese_book, notebook):
    check_chapter_page(built_chinese_book / notebook.relative_to(ROOT).with_suffix(".html"), notebook)


def check_chapter_page(page: Path, notebook: Path) -> None:
    """The page of ``notebook`` has its figures, formulas (MathJax served by the book), the Colab button,
    and the one-line traceback of each test cell of a blank exercise, no other."""
    assert page.exists(), f"no page for {notebook.relative_to(ROOT)}"
    soup = BeautifulSoup(page.read_text(), "html.parser")
    main = soup.find("main")

    figures = [img for img in main.find_all("img") if "_images/" in img["src"]]
    assert len(figures) >= 2, "a chapter has at least 2 figures"
    for img in figures:
        assert (page.parent / img["src"]).resolve().is_file(), f"missing image file {img['src']}"

    assert main.select(".math"), "no formula on the page"
    mathjax = [s["src"] for s in soup.find_all("script", src=True) if "mathjax" in s["src"].lower()]
    assert mathjax and all(not src.startswith("http") for src in mathjax), mathjax
    assert (page.parent / mathjax[0]).resolve().is_file()

    graded_tests = [cell for cell in nbformat.read(notebook, as_version=4).cells if release.is_graded_test(cell)]
    tracebacks = main.select(".output.traceback")
    assert len(tracebacks) == len(graded_tests), "one traceback per test cell of a blank exercise, no other"
    for traceback in tracebacks:
        assert traceback.find_parent(class_="tag_raises-exception") is not None
        text = traceback.get_text().strip()
        assert "NotImplementedError" in text and "is not written yet" in text
        assert len(text.splitlines()) <= 3, text  # a line, not the checks' frames
        assert str(ROOT) not in text and "site-packages" not in text and 'File "' not in text, text
    assert not main.select(".output.stderr"), "a cell wrote to stderr (a warning?)"
    for output in main.select(".cell_output"):  # a Markdown table a cell displays is a table, not its pipes
        assert not re.search(r"^\s*\|.*\|\s*$", output.get_text(), re.M), output.get_text()[:500]
    for formula in main.select(".math"):  # MathJax shows \_ in \text{} as written; \mathtt{a\_b} is a name
        assert not re.search(r"\\text\{[^}]*\\_", formula.get_text()), formula.get_text()
    assert "colab.research.google.com" in page.read_text(), "no Colab launch button"


def test_books_have_no_solutions_or_code_folders(built_book, built_chinese_book):
    for html in (built_book, built_chinese_book):
        for folder in ("solutions", "autograder", "bertlab", "tests", "benchmarks", "tools", "locale"):
            assert not (html / folder).exists(), folder
        for page in html.rglob("*.html"):
            text = page.read_text()
            assert "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text, page


def test_top_level_pages_exist_in_both_books(built_book, built_chinese_book):
    english_references = built_book / "references.html"
    chinese_references = built_chinese_book / "chapters" / LANGUAGE / "references.html"
    for html, references in ((built_book, english_references), (built_chinese_book, chinese_references)):
        assert (html / "instructors.html").exists()
        text = references.read_text().lower()
        assert "attention is all you need" in text and "bahdanau" in text
    assert (built_book / "intro.html").exists() and not (built_chinese_book / "references.html").exists()
    assert "注意力" in (built_chinese_book / "chapters" / LANGUAGE / "intro.html").read_text()
    assert "参考文献" in chinese_references.read_text()
    assert bibliographies(built_chinese_book) == {chinese_references: bibliography_labels(english_references)}


def test_every_page_of_both_books_switches_to_the_other_and_back(built_book, built_chinese_book):
    Site(built_book, built_chinese_book).check_switches()


def small_book(folder: Path, pages: dict[str, list]) -> Path:
    """A book of the course's settings (``_config.yml``, ``_ext``, ``references.bib``) whose chapters are
    ``pages``: {name: cells}, each page a notebook after an introduction."""
    book = folder / "book"
    book.mkdir(parents=True)
    for name in ("_config.yml", "references.bib"):
        shutil.copy(ROOT / name, book / name)
    shutil.copytree(ROOT / "_ext", book / "_ext")
    (book / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n"
                                   + "".join(f"  - file: {name}\n" for name in pages))
    (book / "intro.md").write_text("# Intro\n\nA formula: $x^2$.\n")
    for name, cells in pages.items():
        notebook = nbformat.v4.new_notebook(
            metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
        notebook.cells = [nbformat.v4.new_markdown_cell(f"# {name}"), *cells]
        nbformat.write(notebook, book / f"{name}.ipynb")
    return book


def test_a_failing_cell_that_is_not_tagged_fails_the_build(tmp_path):
    """The book's own settings (allow_errors false, raise_on_error true) on a one-page book."""
    tagged = nbformat.v4.new_code_cell("raise NotImplementedError()", metadata={"tags": ["raises-exception"]})
    book = small_book(tmp_path, {"broken": [tagged, nbformat.v4.new_code_cell("1 / 0")]})
    result = build(book, tmp_path / "out")
    assert result.returncode != 0
    assert "ZeroDivisionError" in result.stdout + result.stderr

    small_book(tmp_path / "fixed", {"broken": [tagged]})  # only the tagged failure: the build passes
    result = build(tmp_path / "fixed" / "book", tmp_path / "out")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


TABLE = "| task | score |\n| --- | ---: |\n| pairs | $57.8$ |"


def test_a_table_a_cell_displays_is_a_table_and_a_name_in_math_shows_no_backslash(tmp_path):
    """A Markdown table that a cell displays (IPython's Markdown) is a table on the page (MyST-NB renders
    it as MyST, not CommonMark); a program's name in math, $\\mathtt{word\\_ids}$, is typeset without
    the backslash that $\\text{word\\_ids}$ shows, and the browser check tells the two apart."""
    display = nbformat.v4.new_code_cell(f"from IPython.display import Markdown, display\ndisplay(Markdown({TABLE!r}))")
    book = small_book(tmp_path, {
        "named": [nbformat.v4.new_markdown_cell("A name: $\\mathtt{word\\_ids}[t]$."), display],
        "written": [nbformat.v4.new_markdown_cell("A name: $\\text{word\\_ids}[t]$.")]})
    result = build(book, tmp_path / "out")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    html = tmp_path / "out" / "_build" / "html"
    output = BeautifulSoup((html / "named.html").read_text(), "html.parser").select_one(".cell_output")
    assert [cell.get_text() for cell in output.select("table td")] == ["pairs", "\\(57.8\\)"], output
    assert "| ---" not in output.get_text()

    checker = _browser_checker()
    if checker.find_chromium() is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    problems = checker.check_book(html, log=lambda line: None)
    assert problems["named.html"] == [] and problems["intro.html"] == []
    assert problems["written.html"] == ["a formula shows its TeX: word\\_ids[t]"], problems


def _browser_checker():
    spec = importlib.util.spec_from_file_location("check_book_browser", ROOT / "tools" / "check_book_browser.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_book_in_headless_chromium(built_book, tmp_path):
    check_in_chromium(built_book, len(CHAPTER_NOTEBOOKS), tmp_path / "screenshots")


def test_chinese_book_in_headless_chromium(built_chinese_book, tmp_path):
    check_in_chromium(built_chinese_book, len(CHINESE_NOTEBOOKS), tmp_path / "screenshots")


def check_in_chromium(html: Path, chapters: int, screenshots: Path) -> None:
    """Every chapter page and top-level page of the book in ``html`` passes the browser check."""
    checker = _browser_checker()
    if checker.find_chromium() is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    results = checker.check_book(html, screenshots=screenshots, log=lambda line: None)
    assert len([page for page in results if checker.is_chapter_page(page)]) == chapters
    assert {page: problems for page, problems in results.items() if problems} == {}
    assert len(list(screenshots.glob("*.png"))) >= len(results)



# --------------------------------------------------------------------------------------------------
# The Chinese edition: a second build over chapters/zh_CN, and the language switch between the two
# --------------------------------------------------------------------------------------------------

TINY_TRANSLATIONS = {
    "# Tiny": "# 小章",
    "A translated paragraph with $x$.": "译好的一段，含 $x$。",
    "See the [references](../../references.md) {cite:p}`vaswani2017attention`.":
        "见[参考文献](../../references.md) {cite:p}`vaswani2017attention`。",
    "# Intro": "# 导言",
    "# References": "# 参考文献",
    "Transformers, from attention to BERT": "Transformer：从注意力到 BERT",
    "Tiny part": "小部分",
}  # the chapter's "An untranslated paragraph.", the caption "Course" and the references' paragraph stay English
TINY_FIGURE = ('import matplotlib.pyplot as plt\n\nplt.plot([0, 1], [1, 0])\nplt.title("Tiny figure & <key>")\n'
               'plt.show()')


def chinese_small_book(folder: Path) -> Path:
    """A course of the book's settings (``_config.yml``, ``_ext``, ``references``) with one chapter,
    ``01_tiny``, in two parts of the table of contents, its catalogues translated but for one paragraph
    and one caption (:data:`TINY_TRANSLATIONS`), released: ``chapters/01_tiny``, ``chapters/zh_CN``."""
    course = folder / "course"
    (course / "solutions" / "01_tiny").mkdir(parents=True)
    (course / "locale" / LANGUAGE / "LC_MESSAGES").mkdir(parents=True)
    for name in ("_config.yml", "references.bib", "references.md", "nbgrader_config.py"):
        shutil.copy(ROOT / name, course / name)
    shutil.copytree(ROOT / "_ext", course / "_ext")
    (course / "_toc.yml").write_text("format: jb-book\nroot: intro\nparts:\n"
                                     "  - caption: Tiny part\n    chapters:\n      - file: chapters/01_tiny/01_tiny\n"
                                     "  - caption: Course\n    chapters:\n      - file: references\n")
    (course / "intro.md").write_text("# Intro\n\nA formula: $x^2$.\n\n```{tableofcontents}\n```\n")
    notebook = nbformat.v4.new_notebook(
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    notebook.cells = [nbformat.v4.new_markdown_cell(
        "# Tiny\n\nA translated paragraph with $x$.\n\nAn untranslated paragraph.\n\n"
        "See the [references](../../references.md) {cite:p}`vaswani2017attention`.", id="text"),
        nbformat.v4.new_code_cell("print(6 * 7)", id="answer"),
        nbformat.v4.new_code_cell(TINY_FIGURE, id="figure")]
    nbformat.write(notebook, course / "solutions" / "01_tiny" / "01_tiny.ipynb")
    for domain in translations.domains(course):
        assert translations.update_catalogue(course, LANGUAGE, domain)
        path = translations.catalogue_path(course, LANGUAGE, domain)
        catalogue = translations.load(path)
        for entry in catalogue:
            entry.msgstr = TINY_TRANSLATIONS.get(entry.msgid, "")
        if domain == "01_tiny":  # what `update` reads from the English build's cache, once built
            catalogue.append(polib.POEntry(msgctxt=figure_labels.context("figure"), msgid="Tiny figure & <key>",
                                           msgstr="小图 & <键>"))
        catalogue.save(str(path))
    release.generate(root=course)
    return course


def bibliography_labels(page: Path) -> list[str]:
    """The labels of the bibliography entries of a built page (``VSP+17``), in order."""
    entries = BeautifulSoup(page.read_text(), "html.parser").select("div.citation")
    return [entry.select_one(".label").get_text("", strip=True).strip("[]") for entry in entries]


def bibliographies(html: Path) -> dict[Path, list[str]]:
    """Each page of a built book that has bibliography entries, with their labels."""
    return {page: labels for page in sorted(html.rglob("*.html")) if (labels := bibliography_labels(page))}


@dataclass(frozen=True)
class Site:
    """The two books published side by side: the English one at the site's root, the Chinese one in its
    folder zh_CN/ (read where they were built: nothing is copied)."""

    english: Path
    chinese: Path

    def file(self, page: PurePosixPath) -> Path:
        """The built file of the site's ``page``."""
        if page.parts[:1] == (LANGUAGE,):
            return self.chinese.joinpath(*page.parts[1:])
        return self.english.joinpath(*page.parts)

    def pages(self) -> list[PurePosixPath]:
        """Every page of both books but their roots' redirects (index.html)."""
        def pages_of(html: Path, prefix: PurePosixPath) -> list[PurePosixPath]:
            paths = (path.relative_to(html) for path in sorted(html.rglob("*.html")))
            return [prefix / path.as_posix() for path in paths
                    if path != Path("index.html") and path.parts[0] not in ("_static", "_sources", "_images")]
        return pages_of(self.english, PurePosixPath()) + pages_of(self.chinese, PurePosixPath(LANGUAGE))

    def switch(self, page: PurePosixPath) -> PurePosixPath:
        """The page that the language switch of ``page`` links to."""
        [link] = BeautifulSoup(self.file(page).read_text(), "html.parser").select("a.language-switch")
        return PurePosixPath(posixpath.normpath(posixpath.join(str(page.parent), link["href"])))

    def check_switches(self) -> None:
        """Every page links to an existing page of the other book, whose switch links back to it."""
        pages = self.pages()
        assert sum(page.parts[0] == LANGUAGE for page in pages) == len(pages) / 2, pages
        for page in pages:
            other = self.switch(page)
            assert self.file(other).is_file(), f"{page} switches to a missing page, {other}"
            assert (other.parts[0] == LANGUAGE) != (page.parts[0] == LANGUAGE), f"{page} switches to {other}"
            assert self.switch(other) == page, f"{other} does not switch back to {page}"


def test_chinese_book_renders_falls_back_to_english_and_switches_both_ways(tmp_path):
    """`tools/translations.py build` builds the English book, then the Chinese one from its cache."""
    course = chinese_small_book(tmp_path)
    output = tmp_path / "out"
    command = [sys.executable, str(ROOT / "tools" / "translations.py"), "--root", str(course), "build",
               "--output", str(output), "--", *STRICT]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # the chapter is executed once, by the English build; the Chinese build finds its outputs
    assert result.stdout.count("Executing notebook") == 1 and result.stdout.count("Using cached notebook") == 1
    files = translated_book.write_build_files(course, LANGUAGE, output)
    assert files.html == output / "_build" / LANGUAGE / "_build" / "html"

    chapter = BeautifulSoup((files.html / "chapters" / LANGUAGE / "01_tiny" / "01_tiny.html").read_text(),
                            "html.parser")
    text = chapter.find("main").get_text()
    assert "小章" in text and "译好的一段" in text and "An untranslated paragraph." in text and "42" in text
    assert chapter.find("html")["lang"] == "zh-CN"
    # the references page is the translated one: the chapter's link and its citation lead there, and it
    # is the Chinese book's only bibliography (the English page is not built into it)
    folder = files.html / "chapters" / LANGUAGE / "01_tiny"
    references_page = files.html / "chapters" / LANGUAGE / "references.html"
    [references] = [a for a in chapter.find("main").find_all("a") if a.get_text() == "参考文献"]
    assert (folder / references["href"]).resolve() == references_page
    [citation] = [a for a in chapter.find("main").find_all("a") if a.get_text() == "Vaswani et al., 2017"]
    target, _, anchor = citation["href"].partition("#")
    assert (folder / target).resolve() == references_page
    entry = BeautifulSoup(references_page.read_text(), "html.parser").find(id=anchor)
    assert "citation" in entry["class"] and "Attention is all you need" in entry.get_text()
    english_references = output / "_build" / "html" / "references.html"
    assert bibliographies(files.html) == {references_page: bibliography_labels(english_references)}
    assert len(bibliography_labels(english_references)) == len(set(bibliography_labels(english_references))) > 50
    assert bibliographies(output / "_build" / "html") == {english_references: bibliography_labels(english_references)}
    assert "参考文献" in BeautifulSoup(references_page.read_text(), "html.parser").find("h1").get_text()
    navigation = chapter.select_one(".bd-sidebar-primary").get_text()
    assert "小部分" in navigation and "Course" in navigation and "Tiny part" not in navigation
    assert "参考文献" in navigation and "References" not in navigation
    assert "Transformer：从注意力到 BERT" in chapter.find("title").get_text()
    assert "导言" in (files.html / "chapters" / LANGUAGE / "intro.html").read_text()

    # the figure: SVG, its text drawn as paths; its title translated, as text, in the Chinese book's copy only
    english_page = output / "_build" / "html" / "chapters" / "01_tiny" / "01_tiny.html"
    [english_figure] = [img["src"]
                        for img in BeautifulSoup(english_page.read_text(), "html.parser").find("main").find_all("img")
                        if "_images/" in img["src"]]
    [chinese_figure] = [img["src"] for img in chapter.find("main").find_all("img") if "_images/" in img["src"]]
    assert english_figure.endswith(".svg") and chinese_figure.endswith(".svg") and english_figure != chinese_figure
    english_svg = (english_page.parent / english_figure).read_text()
    chinese_svg = (files.html / "chapters" / LANGUAGE / "01_tiny" / chinese_figure).read_text()
    assert "<!-- Tiny figure &amp; &lt;key&gt; -->" in english_svg and "<text" not in english_svg  # text as paths
    assert ">小图 &amp; &lt;键&gt;</text>" in chinese_svg and "<!-- 小图 &amp; &lt;键&gt; -->" in chinese_svg
    assert "Tiny figure" not in chinese_svg and "小图" not in english_svg

    site = Site(output / "_build" / "html", files.html)
    assert len(site.pages()) == 10  # intro, the chapter, references, genindex and search in each book
    site.check_switches()
    assert site.switch(PurePosixPath("references.html")) == PurePosixPath(LANGUAGE, "chapters", LANGUAGE,
                                                                          "references.html")
