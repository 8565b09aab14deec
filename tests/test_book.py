"""Build the book into a temporary folder and check what a reader gets: every chapter page with its
figures, its formulas (MathJax served from the book itself) and no traceback other than the test
cells of the blank exercises, each one line that says so (no frames, no build machine's path). Also: a failing cell that is not tagged `raises-exception` fails the
build, and the pages pass in a real headless browser when chromium is installed."""

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml
from bs4 import BeautifulSoup

from autograder import release

ROOT = Path(__file__).resolve().parents[1]
CHAPTER_NOTEBOOKS = sorted((ROOT / "chapters").glob("*/*.ipynb"))

pytestmark = pytest.mark.slow


def build(source: Path, output: Path) -> subprocess.CompletedProcess:
    """`jupyter-book build` with warnings as errors (-W), nitpicky references (-n)."""
    command = [sys.executable, "-c", "from jupyter_book.cli.main import main; main()",
               "build", str(source), "--path-output", str(output), "-W", "-n", "--keep-going"]
    return subprocess.run(command, capture_output=True, text=True, timeout=1800)


@pytest.fixture(scope="module")
def built_book(tmp_path_factory):
    output = tmp_path_factory.mktemp("book")
    result = build(ROOT, output)
    assert result.returncode == 0, f"the book build failed:\n{result.stdout[-6000:]}\n{result.stderr[-6000:]}"
    return output / "_build" / "html"


def _toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [chapter["file"] for part in toc["parts"] for chapter in part["chapters"]]


def test_every_chapter_is_in_the_table_of_contents():
    files = _toc_files()
    for notebook in CHAPTER_NOTEBOOKS:
        assert str(notebook.relative_to(ROOT).with_suffix("")) in files, f"add {notebook.relative_to(ROOT)} to _toc.yml"


@pytest.mark.parametrize("notebook", CHAPTER_NOTEBOOKS, ids=lambda path: path.stem)
def test_chapter_page_has_its_figures_math_and_only_intended_tracebacks(built_book, notebook):
    page = built_book / notebook.relative_to(ROOT).with_suffix(".html")
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


def test_book_has_no_solutions_or_code_folders(built_book):
    for folder in ("solutions", "autograder", "bertlab", "tests", "benchmarks", "tools"):
        assert not (built_book / folder).exists(), folder
    for page in built_book.rglob("*.html"):
        text = page.read_text()
        assert "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text, page


def test_top_level_pages_exist(built_book):
    for name in ("intro", "instructors", "references"):
        assert (built_book / f"{name}.html").exists()
    references = (built_book / "references.html").read_text().lower()
    assert "attention is all you need" in references and "bahdanau" in references


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
    checker = _browser_checker()
    if checker.find_chromium() is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    results = checker.check_book(built_book, screenshots=tmp_path / "screenshots", log=lambda line: None)
    chapter_pages = [page for page in results if page.startswith("chapters/")]
    assert len(chapter_pages) == len(CHAPTER_NOTEBOOKS)
    assert {page: problems for page, problems in results.items() if problems} == {}
    assert len(list((tmp_path / "screenshots").glob("*.png"))) >= len(results)
