"""Tests of the translated edition: the Chinese student notebooks differ from the English ones in their
Markdown only, are what the catalogues generate, and the catalogues keep the English's MyST markup.
The machinery itself (blocks, msgmerge's fuzzy messages, the report, the release) on a tiny course."""

import fnmatch
import importlib.util
import posixpath
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from xml.etree import ElementTree
from xml.sax.saxutils import unescape

import nbformat
import pytest

from autograder.publish import figure_labels, release, translated_book, translations
from autograder.publish.myst_blocks import (
    LINK,
    NOT_RELATIVE,
    blocks,
    is_translatable,
    join_blocks,
    markup_differences,
    relocate_links,
    split_blocks,
)

ROOT = Path(__file__).resolve().parents[1]
LANGUAGE = "zh_CN"
CHAPTERS = release.chapter_names(ROOT)
TOOL = ROOT / "tools" / "translations.py"


def _read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def _editions(chapter: str) -> tuple[nbformat.NotebookNode, nbformat.NotebookNode]:
    english = ROOT / "chapters" / chapter / f"{chapter}.ipynb"
    translated = ROOT / "chapters" / LANGUAGE / chapter / f"{chapter}.ipynb"
    assert translated.is_file(), f"{translated.relative_to(ROOT)} is missing; run `autograder release`"
    return _read(english), _read(translated)


# --------------------------------------------------------------------------------------------------
# The course's Chinese edition
# --------------------------------------------------------------------------------------------------


def test_the_course_has_a_chinese_catalogue_for_every_chapter_its_pages_and_the_book():
    assert translations.languages(ROOT) == [LANGUAGE]
    assert translations.domains(ROOT) == ["intro", "references", translations.BOOK, *CHAPTERS]
    for domain in translations.domains(ROOT):
        assert translations.catalogue_path(ROOT, LANGUAGE, domain).is_file(), domain


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_code_cells_and_metadata_are_identical_in_both_editions(chapter):
    english, chinese = _editions(chapter)
    assert chinese.metadata == english.metadata
    assert [cell.cell_type for cell in chinese.cells] == [cell.cell_type for cell in english.cells]
    for ours, theirs in zip(english.cells, chinese.cells):
        assert theirs.id == ours.id, f"{chapter}: cell {ours.id} is {theirs.id} in {LANGUAGE}"
        assert theirs.metadata == ours.metadata, f"{chapter}, cell {ours.id}: metadata differ"
        if ours.cell_type == "code":
            assert theirs == ours, f"{chapter}, code cell {ours.id}: source, outputs or execution count differ"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chinese_notebooks_are_what_the_catalogues_generate(chapter):
    english = ROOT / "chapters" / chapter / f"{chapter}.ipynb"
    move = translations.Move(f"chapters/{chapter}", f"chapters/{LANGUAGE}/{chapter}",
                             translations.translated_pages(ROOT, LANGUAGE))
    expected = translations.translated_notebook_text(english,
                                                     translations.catalogue_path(ROOT, LANGUAGE, chapter), move)
    translated = ROOT / "chapters" / LANGUAGE / chapter / f"{chapter}.ipynb"
    assert translated.read_text(encoding="utf-8") == expected, \
        f"{translated.relative_to(ROOT)} is stale; run `autograder release`"


def test_catalogues_are_up_to_date_with_the_english():
    assert translations.stale_catalogues(ROOT) == [], "run `python tools/translations.py update`"


def test_catalogues_pass_the_check():
    problems = [problem for domain in translations.domains(ROOT)
                for problem in translations.catalogue_problems(translations.catalogue_path(ROOT, LANGUAGE, domain))]
    assert problems == []


def test_chapter_one_is_translated_completely():
    counts = translations.counts(translations.catalogue_path(ROOT, LANGUAGE, "01_attention"), "01_attention")
    assert counts.complete and counts.translated == counts.total > 50
    english, chinese = _editions("01_attention")
    for ours, theirs in zip(english.cells, chinese.cells):
        if ours.cell_type == "markdown":
            assert theirs.source != ours.source, f"cell {ours.id} is not translated"


def test_the_intro_and_the_book_s_words_are_translated_completely():
    for domain in ("intro", translations.BOOK):
        counts = translations.counts(translations.catalogue_path(ROOT, LANGUAGE, domain), domain)
        assert counts.complete and counts.translated == counts.total > 5, counts
    intro = (ROOT / "chapters" / LANGUAGE / "intro.md").read_text(encoding="utf-8")
    assert intro.startswith("# Transformer：从注意力到 BERT\n") and "```{tableofcontents}\n```" in intro
    words = translations.book_words(ROOT, LANGUAGE)
    assert words.title == "Transformer：从注意力到 BERT"
    assert words.captions["Attention"] == "注意力" and words.captions["Course"] == "课程"


def test_the_references_page_is_translated_and_keeps_its_one_bibliography():
    counts = translations.counts(translations.catalogue_path(ROOT, LANGUAGE, "references"), "references")
    assert counts.complete and counts.translated == counts.total == 2, counts
    page = ROOT / translations.translated_page(LANGUAGE, "references")
    assert page == ROOT / "chapters" / LANGUAGE / "references.md"
    text = page.read_text(encoding="utf-8")
    assert text.startswith("# 参考文献\n") and text.count("```{bibliography}\n:all:\n```") == 1
    move = translations.Move("", f"chapters/{LANGUAGE}", translations.translated_pages(ROOT, LANGUAGE))
    assert text == translations.translated_page_text(ROOT, LANGUAGE, "references", move), "run `autograder release`"


def test_the_chinese_chapters_link_to_the_chinese_references_page():
    """The chapters' ``../../references.md`` reaches the translated page from chapters/zh_CN/NN/, not the
    English one, which is not a page of the Chinese book."""
    for chapter in CHAPTERS:
        links = _relative_links(_markdown_of(ROOT / "chapters" / LANGUAGE / chapter / f"{chapter}.ipynb"))
        assert "../references.md" in links and "../../../references.md" not in links, chapter


def _relative_links(text: str) -> list[str]:
    """The relative link targets of a Markdown text, without their anchors."""
    return [match["target"].partition("#")[0] for match in LINK.finditer(text)
            if not NOT_RELATIVE.match(match["target"])]


def _markdown_of(path: Path) -> str:
    if path.suffix == ".ipynb":
        return "\n\n".join(cell.source for cell in _read(path).cells if cell.cell_type == "markdown")
    return path.read_text(encoding="utf-8")


@pytest.mark.parametrize("path", sorted((ROOT / "chapters" / LANGUAGE).rglob("*.ipynb"))
                         + sorted((ROOT / "chapters" / LANGUAGE).glob("*.md")), ids=lambda path: path.name)
def test_every_relative_link_of_the_chinese_edition_reaches_a_file(path):
    """A link that works in chapters/NN/NN.ipynb (``../../references.md``) would break one folder deeper,
    in chapters/zh_CN/NN/: the release rewrites it."""
    for target in _relative_links(_markdown_of(path)):
        assert (path.parent / target).resolve().is_file(), \
            f"{path.relative_to(ROOT)}: the link {target} reaches no file"


def test_the_english_chapters_have_relative_links_to_rewrite():
    """The test above checks what the course has: the chapters do link to references.md."""
    links = [link for chapter in CHAPTERS
             for link in _relative_links(_markdown_of(ROOT / "chapters" / chapter / f"{chapter}.ipynb"))]
    assert "../../references.md" in links


@pytest.mark.parametrize("text, expected", [
    ("The [list](../../references.md#top).", "The [list](../../../references.md#top)."),
    ("![a figure](figure.png)", "![a figure](../../01_a/figure.png)"),
    ("[web](https://example.org/a.md), [here](#section), [root](/a.md), [mail](mailto:a@b.c)",
     "[web](https://example.org/a.md), [here](#section), [root](/a.md), [mail](mailto:a@b.c)"),
    ("`[code](../x.md)` and\n```\n[fence](../x.md)\n```", "`[code](../x.md)` and\n```\n[fence](../x.md)\n```"),
])
def test_relocate_links_reaches_the_same_files_from_one_folder_deeper(text, expected):
    assert relocate_links(text, "chapters/01_a", "chapters/zh_CN/01_a") == expected


def test_relocate_links_from_the_repository_root():
    assert relocate_links("[a](chapters/01_a/01_a.ipynb)", ".", "chapters/zh_CN") == "[a](../01_a/01_a.ipynb)"


def test_relocate_links_reaches_a_translated_page_instead_of_its_english():
    moved = {"references.md": "chapters/zh_CN/references.md"}
    text = "The [list](../../references.md#top), the [intro](../../intro.md)."
    assert (relocate_links(text, "chapters/01_a", "chapters/zh_CN/01_a", moved)
            == "The [list](../references.md#top), the [intro](../../../intro.md).")
    assert relocate_links("[self](references.md)", "", "chapters/zh_CN", moved) == "[self](references.md)"


SWITCH = translated_book.LanguageSwitch(language="zh_CN", label="中文", root="zh_CN/", back_label="English",
                                        pages=(("intro", "chapters/zh_CN/intro"),
                                               ("references", "chapters/zh_CN/references"),
                                               ("chapters/", "chapters/zh_CN/")))


def test_the_books_configuration_declares_the_switch_to_chinese():
    config = translations.read_yaml(ROOT / "_config.yml")
    assert translated_book.switch_of(config, "_config.yml") == SWITCH


@pytest.mark.parametrize("page, counterpart, href", [
    ("chapters/01_attention/01_attention", "chapters/zh_CN/01_attention/01_attention",
     "../../zh_CN/chapters/zh_CN/01_attention/01_attention.html"),
    ("intro", "chapters/zh_CN/intro", "zh_CN/chapters/zh_CN/intro.html"),
    ("references", "chapters/zh_CN/references", "zh_CN/chapters/zh_CN/references.html"),
    ("instructors", "instructors", "zh_CN/instructors.html"),
])
def test_the_switch_links_a_page_to_its_translation_and_back(page, counterpart, href):
    assert SWITCH.counterpart(page) == counterpart
    assert SWITCH.href(page, f"{counterpart}.html") == href
    back = SWITCH.reverse()
    assert (back.language, back.label, back.root, back.back_label) == ("en", "English", "../", "中文")
    assert back.counterpart(counterpart) == page
    assert back.href(counterpart, f"{page}.html") == posixpath.relpath(f"{page}.html",
                                                                       posixpath.dirname(f"zh_CN/{counterpart}"))


def test_the_switch_maps_every_translated_page_to_where_the_release_writes_it():
    for domain, page in translations.PAGES.items():
        english = str(PurePosixPath(page).with_suffix(""))
        translated = str(translations.translated_page(LANGUAGE, domain).with_suffix(""))
        assert SWITCH.counterpart(english) == translated and SWITCH.reverse().counterpart(translated) == english
    # and the other way: a page the switch names (not a prefix of chapters) is one the release translates
    named = {here for here, _ in SWITCH.pages if not here.endswith("/")}
    assert named == {str(PurePosixPath(page).with_suffix("")) for page in translations.PAGES.values()}


def test_a_wrong_switch_is_named():
    with pytest.raises(translations.TranslationError, match="_config.yml: language_switch lacks .'back_label'."):
        translated_book.LanguageSwitch.from_config({"language": "zh_CN", "label": "中文", "root": "zh_CN/", "pages": {}},
                                                   "_config.yml")
    with pytest.raises(translations.TranslationError, match="_config.yml: no sphinx.config.language_switch"):
        translated_book.switch_of({"sphinx": {}}, "_config.yml")


def test_the_chinese_table_of_contents_and_configuration_are_generated_from_the_english(tmp_path):
    files = translated_book.write_build_files(ROOT, LANGUAGE, tmp_path)
    toc, english_toc = translations.read_yaml(files.toc), translations.read_yaml(ROOT / "_toc.yml")
    assert toc["root"] == "chapters/zh_CN/intro"
    assert [part["caption"] for part in toc["parts"]] == ["注意力", "位置与归一化", "高效注意力", "BERT", "仅解码器模型", "课程"]
    files_of = [[chapter["file"] for chapter in part["chapters"]] for part in toc["parts"]]
    assert files_of == [[SWITCH.counterpart(chapter["file"]) for chapter in part["chapters"]]
                        for part in english_toc["parts"]]
    assert files_of[-1] == ["instructors", "chapters/zh_CN/references"]
    config = translations.read_yaml(files.config)
    assert config["title"] == "Transformer：从注意力到 BERT"
    assert config["sphinx"]["config"]["language"] == LANGUAGE
    assert config["sphinx"]["config"]["language_switch"] == SWITCH.reverse().as_config()
    assert config["execute"]["cache"] == str(tmp_path / "_build" / ".jupyter_cache")
    assert "chapters/zh_CN/**" not in config["exclude_patterns"] and "locale/**" in config["exclude_patterns"]
    # the English pages that have a translation are not documents of the Chinese book: one bibliography
    replaced = {"intro.md", "references.md", *(f"chapters/{chapter}/{chapter}.ipynb" for chapter in CHAPTERS)}
    assert replaced <= set(config["exclude_patterns"]) and "instructors.md" not in config["exclude_patterns"]
    assert all(Path(path).is_dir() for path in config["sphinx"]["local_extensions"].values())
    assert files.html == tmp_path / "_build" / LANGUAGE / "_build" / "html"


def test_check_catches_a_dropped_formula_or_role(tmp_path):
    catalogue = translations.load(translations.catalogue_path(ROOT, LANGUAGE, "01_attention"))
    entry = next(entry for entry in catalogue if entry.msgctxt == "why-attention" and "{cite:t}" in entry.msgid)
    assert "$c_j$" in entry.msgstr
    entry.msgstr = entry.msgstr.replace("$c_j$", "c_j").replace("{cite:t}`bahdanau2015neural`", "Bahdanau")
    path = tmp_path / "01_attention.po"
    catalogue.save(str(path))
    problems = translations.catalogue_problems(path)
    assert len(problems) == 2, problems
    assert all(f"{path}:" in problem and "cell why-attention" in problem for problem in problems)
    assert any("math 'c_j' missing" in problem for problem in problems)
    assert any("role '{cite:t}bahdanau2015neural' missing" in problem for problem in problems)


def test_check_cli_fails_on_a_broken_catalogue(tmp_path):
    course = tmp_path / "course"
    for name in ("solutions/01_attention", "locale/zh_CN/LC_MESSAGES"):
        (course / name).mkdir(parents=True)
    shutil.copy(ROOT / "solutions" / "01_attention" / "01_attention.ipynb", course / "solutions" / "01_attention")
    po = course / "locale" / "zh_CN" / "LC_MESSAGES" / "01_attention.po"
    text = translations.catalogue_path(ROOT, LANGUAGE, "01_attention").read_text(encoding="utf-8")
    po.write_text(text.replace("{cite:p}`jain2019attention`", "(Jain and Wallace)"), encoding="utf-8")
    result = subprocess.run([sys.executable, str(TOOL), "--root", str(course), "check"], capture_output=True, text=True)
    assert result.returncode == 1 and "jain2019attention' missing" in result.stdout \
        and "cell maps-text" in result.stdout


# --------------------------------------------------------------------------------------------------
# Blocks and markup
# --------------------------------------------------------------------------------------------------


def test_blocks_split_at_blank_lines_outside_fences_and_formulas():
    text = ("Intro $x$.\n\n$$\na\n\nb\n$$\n\n:::{admonition} Answers\n:class: dropdown\n\n1. one\n:::\n\n"
            "```python\nx = 1\n\ny = 2\n```\n\n\nLast\n")
    assert blocks(text) == ["Intro $x$.", "$$\na\n\nb\n$$", ":::{admonition} Answers\n:class: dropdown\n\n1. one\n:::",
                            "```python\nx = 1\n\ny = 2\n```", "Last"]
    assert join_blocks(split_blocks(text)) == text
    assert [is_translatable(block) for block in blocks(text)] == [True, False, True, False, True]


def test_every_markdown_cell_of_the_course_splits_and_joins_to_itself():
    for chapter in CHAPTERS:
        for cell in _read(ROOT / "solutions" / chapter / f"{chapter}.ipynb").cells:
            if cell.cell_type == "markdown":
                assert join_blocks(split_blocks(cell.source)) == cell.source, f"{chapter}, cell {cell.id}"


@pytest.mark.parametrize("english, translated, problem", [
    ("See {ref}`the figure <fig-a>`.", "见{ref}`图 <fig-b>`。", "role '{ref}fig-a' missing"),
    ("Call `f(x)` on $x$.", "对 $x$ 调用 f(x)。", "inline code 'f(x)' missing"),
    ("The [page](../a.md).", "[页面](../b.md)。", "link '../a.md' missing"),
    ("Use 16 keys.", "使用十六个键。", "number '16' missing"),
    ("## Title", "# 标题", "starts with '#' where the English starts with '##'"),
    ("$$\na\n$$\nText", "文字", "display math 'a' missing"),
    (":::{note}\n:class: dropdown\nText\n:::", ":::{warning}\n文字\n:::", "directive 'note' missing"),
])
def test_markup_differences_name_what_a_translation_lost(english, translated, problem):
    assert problem in markup_differences(english, translated)


def test_cited_keys_may_be_reordered_and_link_text_translated():
    assert markup_differences("{cite:p}`a2020,b2021` and [text](x.md) in 2 steps",
                              "{cite:p}`b2021,a2020` 与[文字](x.md)，分 2 步") == []


# --------------------------------------------------------------------------------------------------
# The workflow on a tiny course: update, translate, change the English, report, release
# --------------------------------------------------------------------------------------------------


def _markdown(source: str, cell_id: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_markdown_cell(source)
    cell.id = cell_id
    return cell


def _tiny_notebook(first_paragraph: str) -> nbformat.NotebookNode:
    notebook = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                                 "language": "python"}})
    code = nbformat.v4.new_code_cell('print("install from {repository_url}")', metadata={"tags": ["install"]})
    code.id = "install"
    notebook.cells = [_markdown(f"# Tiny\n\n{first_paragraph}\n\nSecond, with $x$.", "intro"), code,
                      _markdown("Third {cite:p}`key2020`.", "outro")]
    return notebook


@pytest.fixture
def tiny_course(tmp_path):
    shutil.copy(ROOT / "nbgrader_config.py", tmp_path)
    (tmp_path / "_config.yml").write_text("repository:\n  url: https://example.org/course\n")
    (tmp_path / "solutions" / "01_tiny").mkdir(parents=True)
    nbformat.write(_tiny_notebook("First paragraph."), tmp_path / "solutions" / "01_tiny" / "01_tiny.ipynb")
    return tmp_path


@dataclass(frozen=True)
class ToolRun:
    """What a run of tools/translations.py returned and printed."""

    returncode: int
    stdout: str
    stderr: str


def _load_tool():
    spec = importlib.util.spec_from_file_location("translations_tool", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def tool(capsys):
    """Run tools/translations.py's main in this process (its own run as a script: test_check_cli_...)."""
    main = _load_tool().main

    def run(course: Path, *args: str) -> ToolRun:
        capsys.readouterr()
        returncode = main(["--root", str(course), *args])
        printed = capsys.readouterr()
        return ToolRun(returncode, printed.out, printed.err)
    return run


def test_update_translate_change_report_and_release(tiny_course, tool):
    solution = tiny_course / "solutions" / "01_tiny" / "01_tiny.ipynb"
    po = translations.catalogue_path(tiny_course, LANGUAGE, "01_tiny")
    assert tool(tiny_course, "update", "--language", LANGUAGE).returncode == 0
    assert [entry.msgid for entry in translations.load(po)] == ["# Tiny", "First paragraph.", "Second, with $x$.",
                                                                "Third {cite:p}`key2020`."]
    assert tool(tiny_course, "update", "--dry-run").returncode == 0

    catalogue = translations.load(po)
    for entry, text in zip(catalogue, ["# 小例子", "第一段。", "第二段，含 $x$。"]):
        entry.msgstr = text
    catalogue.save(str(po))
    assert translations.counts(po, "01_tiny") == translations.Counts("01_tiny", 4, 3, 0, 1)

    nbformat.write(_tiny_notebook("First paragraph, changed."), solution)
    assert tool(tiny_course, "update", "--dry-run").returncode == 1
    assert "updated locale/zh_CN/LC_MESSAGES/01_tiny.po" in tool(tiny_course, "update").stdout
    [fuzzy] = [entry for entry in translations.load(po) if entry.fuzzy]
    assert (fuzzy.msgid, fuzzy.previous_msgid, fuzzy.msgstr) == ("First paragraph, changed.", "First paragraph.",
                                                                  "第一段。")
    assert translations.counts(po, "01_tiny") == translations.Counts("01_tiny", 4, 2, 1, 1)
    report = tool(tiny_course, "report")
    assert report.returncode == 0 and "01_tiny" in report.stdout and "4          2      1            1" in report.stdout
    assert tool(tiny_course, "report", "--release").returncode == 1
    assert tool(tiny_course, "check").returncode == 0

    written = release.generate(root=tiny_course)
    english = tiny_course / "chapters" / "01_tiny" / "01_tiny.ipynb"
    chinese = tiny_course / "chapters" / LANGUAGE / "01_tiny" / "01_tiny.ipynb"
    assert written == [english, chinese]
    cells = _read(chinese).cells
    # translated where the translation is current; the fuzzy and the untranslated message stay English
    assert cells[0].source == "# 小例子\n\nFirst paragraph, changed.\n\n第二段，含 $x$。"
    assert cells[2].source == "Third {cite:p}`key2020`."
    assert cells[1] == _read(english).cells[1]
    assert release.stale_chapters(tiny_course) == []
    assert release.generate(root=tiny_course) == []  # nothing changed, nothing written

    catalogue = translations.load(po)
    for entry in catalogue:
        entry.msgstr, entry.flags = entry.msgstr or "第三 {cite:p}`key2020`。", []
    catalogue.save(str(po))
    assert tool(tiny_course, "report", "--release").returncode == 0
    assert release.stale_chapters(tiny_course) == [f"chapters/{LANGUAGE}/01_tiny/01_tiny.ipynb differs from what "
                                                   "generation produces"]
    assert release.generate(root=tiny_course) == [chinese]
    assert _read(chinese).cells[0].source == "# 小例子\n\n第一段。\n\n第二段，含 $x$。"


def test_a_references_page_is_translated_released_and_replaces_the_english_in_the_translated_book(tiny_course, tool):
    """A course with the book's configuration and a bibliography page: ``update`` makes its catalogue, the
    release writes its translation beside the chapters and points the chapter's link at it, and the
    translated book lists it in place of the English page, which it excludes (one bibliography), with
    the switch between the two both ways."""
    for name in ("_config.yml", "references.md", "references.bib"):
        shutil.copy(ROOT / name, tiny_course / name)
    (tiny_course / "_toc.yml").write_text("format: jb-book\nroot: chapters/01_tiny/01_tiny\nparts:\n"
                                          "  - caption: Course\n    chapters:\n      - file: references\n")
    solution = _tiny_notebook("First paragraph.")
    solution.cells.append(_markdown("See the [references](../../references.md).", "see"))
    nbformat.write(solution, tiny_course / "solutions" / "01_tiny" / "01_tiny.ipynb")
    assert tool(tiny_course, "update", "--language", LANGUAGE).returncode == 0
    assert translations.domains(tiny_course) == ["references", translations.BOOK, "01_tiny"]
    po = translations.catalogue_path(tiny_course, LANGUAGE, "references")
    catalogue = translations.load(po)
    assert [entry.msgid for entry in catalogue][0] == "# References"
    for entry in catalogue:
        entry.msgstr = "# 参考文献" if entry.msgid == "# References" else "各章引用的论文。"
    catalogue.save(str(po))
    po = translations.catalogue_path(tiny_course, LANGUAGE, "01_tiny")
    catalogue = translations.load(po)
    next(entry for entry in catalogue if entry.msgctxt == "see").msgstr = "见[参考文献](../../references.md)。"
    catalogue.save(str(po))
    assert tool(tiny_course, "check").returncode == 0

    release.generate(root=tiny_course)
    page = tiny_course / "chapters" / LANGUAGE / "references.md"
    expected = "# 参考文献\n\n各章引用的论文。\n\n```{bibliography}\n:all:\n```\n"
    assert page.read_text(encoding="utf-8") == expected
    chinese = _read(tiny_course / "chapters" / LANGUAGE / "01_tiny" / "01_tiny.ipynb")
    assert chinese.cells[-1].source == "见[参考文献](../references.md)。"
    assert (page.parent / "01_tiny" / "../references.md").resolve() == page.resolve()
    english = _read(tiny_course / "chapters" / "01_tiny" / "01_tiny.ipynb")
    assert english.cells[-1].source == "See the [references](../../references.md)."

    files = translated_book.write_build_files(tiny_course, LANGUAGE, tiny_course)
    toc = translations.read_yaml(files.toc)
    assert toc["root"] == "chapters/zh_CN/01_tiny/01_tiny"
    assert toc["parts"][0]["chapters"] == [{"file": "chapters/zh_CN/references"}]
    excluded = translations.read_yaml(files.config)["exclude_patterns"]
    assert "references.md" in excluded and "chapters/01_tiny/01_tiny.ipynb" in excluded
    assert not any(fnmatch.fnmatch(f"chapters/{LANGUAGE}/references.md", pattern) for pattern in excluded)
    switch = translated_book.switch_of(translations.read_yaml(tiny_course / "_config.yml"), "_config.yml")
    assert switch.counterpart("references") == "chapters/zh_CN/references"
    assert switch.reverse().counterpart("chapters/zh_CN/references") == "references"


def test_a_markdown_cell_without_an_id_is_named(tiny_course, tool):
    solution = tiny_course / "solutions" / "01_tiny" / "01_tiny.ipynb"
    notebook = _read(solution)
    del notebook.cells[2]["id"]
    notebook.nbformat_minor = 4  # ids became mandatory in 4.5
    nbformat.write(notebook, solution)
    result = tool(tiny_course, "update", "--language", LANGUAGE)
    assert result.returncode == 2 and "01_tiny.ipynb: Markdown cell 2 has no id" in result.stderr


# --------------------------------------------------------------------------------------------------
# Figure labels: the words of the figures, translated in their SVG
# --------------------------------------------------------------------------------------------------


def _svg_figure(title: str = "Attention weights", xlabel: str = "key $j$") -> str:
    """An SVG figure drawn as the book's kernels draw them (figure_labels.SVG_RC)."""
    import io

    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(figure_labels.SVG_RC):
        figure = Figure(figsize=(4, 3))
        axis = figure.subplots()
        axis.plot([0, 1, 2], [0.1, 0.5, 0.4], label="scaled")
        axis.set_xticks([0, 1, 2], ["The", "cat", "12"])
        axis.set(title=title, xlabel=xlabel, ylabel="attention weight")
        axis.legend()
        axis.text(1, 0.2, "12.7 ms")  # a measurement on a bar: numbers and a unit, no message
        figure.suptitle("Two lines\nof a title")
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    return buffer.getvalue()


def _sources(svg: str) -> list[str]:
    """The source of every line that the SVG draws, as the comment before it says."""
    root = ElementTree.XMLParser(target=ElementTree.TreeBuilder(insert_comments=True))
    root.feed(svg)
    return [unescape(comment.text.strip()) for comment in root.close().iter(ElementTree.Comment)]


def _texts(svg: str) -> list[str]:
    """Every line that the SVG draws as text (a translated one), a mathtext line's glyphs joined in
    order of position; the English lines are drawn as paths."""
    root = ElementTree.fromstring(svg)
    svg_text = "{http://www.w3.org/2000/svg}text"
    lines = []
    for element in root.iter(svg_text):
        spans = list(element)
        if spans:
            lines.append("".join(span.text for span in sorted(spans, key=lambda span: float(span.get("x")))))
        else:
            lines.append(element.text)
    return lines


def test_a_figure_s_labels_are_its_words_and_not_its_numbers_or_measurements():
    svg = _svg_figure()
    assert "12.7 ms" in _sources(svg) and "0.5" in _sources(svg) and _texts(svg) == []  # all drawn as paths
    labels = figure_labels.svg_labels(svg)
    assert sorted(labels) == sorted(["The", "cat", "key $j$", "attention weight", "Attention weights", "scaled",
                                     "Two lines\nof a title"])


def test_a_translated_label_replaces_the_english_in_the_chinese_svg_only():
    english = _svg_figure()
    chinese = figure_labels.translate_svg(english, {"Attention weights": "注意力权重", "key $j$": "键 $j$",
                                                    "Two lines\nof a title": "两行\n的标题", "The": "这只"})
    texts = _texts(chinese)
    assert "注意力权重" in texts and "两行" in texts and "的标题" in texts and "这只" in texts
    assert "键\xa0j" in texts  # the mathtext line: 键, a space (matplotlib writes it no-break) and j
    assert "注意力权重" in _sources(chinese) and "键 $j$" in _sources(chinese)
    assert "Attention weights" not in _sources(chinese) and "key $j$" not in _sources(chinese)
    assert "attention weight" in _sources(chinese) and "cat" in _sources(chinese)  # untranslated: English, as paths
    assert "attention weight" not in texts and "cat" not in texts
    assert "Attention weights" in _sources(english) and "key $j$" in _sources(english) and _texts(english) == []
    assert figure_labels.translate_svg(english, {}) == english
    assert figure_labels.translate_svg(english, {"not in the figure": "不在图中"}) == english


def test_a_translated_mathtext_line_is_centred_where_the_english_was():
    """The axis label "key $j$" is centred under the axis: its translation, laid out with the wide
    character one em (10 px at matplotlib's default 10 pt), has the same middle."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    chinese = figure_labels.translate_svg(_svg_figure(), {"key $j$": "键 $j$"})
    root = ElementTree.fromstring(chinese)
    [shift] = [group for group in root.iter("{http://www.w3.org/2000/svg}g")  # the group around the glyphs
               if any(span.text == "键" for text in group.findall("{http://www.w3.org/2000/svg}text") for span in text)]
    offset = float(shift.get("transform").removeprefix("translate(").split()[0])
    width = lambda text: TextToPath().get_text_width_height_descent(text, FontProperties(size=10), ismath=True)[0]
    chinese_width = 10 + width(" $j$")
    assert offset + chinese_width / 2 == pytest.approx(width("key $j$") / 2, abs=1e-3)


def test_a_translated_line_of_a_two_line_title_is_anchored_at_its_middle():
    """matplotlib places each line of a multi-line text by its left edge (no text-anchor): the
    translation anchors each line at the middle of its English line, so it stays centred."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    root = ElementTree.fromstring(figure_labels.translate_svg(_svg_figure(), {"Two lines\nof a title": "两行\n的标题"}))
    [first] = [element for element in root.iter("{http://www.w3.org/2000/svg}text") if element.text == "两行"]
    assert "text-anchor: middle" in first.get("style")
    size = float(re.search(r"font-size: ([\d.]+)px", first.get("style"))[1])
    width = TextToPath().get_text_width_height_descent("Two lines", FontProperties(size=size), ismath=False)[0]
    assert float(first.get("x")) == pytest.approx(width / 2, abs=1e-3)


def test_a_label_with_xml_markup_is_read_and_written_escaped():
    english = _svg_figure(title="Weights & <masks>")
    assert "<!-- Weights &amp; &lt;masks&gt; -->" in english  # the line's source, in a comment
    assert "Weights & <masks>" in figure_labels.svg_labels(english)
    chinese = figure_labels.translate_svg(english, {"Weights & <masks>": "权重 & <掩码> \"引\""})
    assert '>权重 &amp; &lt;掩码&gt; "引"</text>' in chinese and '<!-- 权重 &amp; &lt;掩码&gt; "引" -->' in chinese
    assert "权重 & <掩码> \"引\"" in _texts(chinese)  # a well-formed SVG that reads back as the translation
    assert "权重 & <掩码> \"引\"" in figure_labels.svg_labels(chinese)


@pytest.mark.parametrize("english, translated, problem", [
    ("position $p$", "位置 p", "math 'p' missing"),
    ("head 1: slope 1/2", "头：斜率 1/2", "number '1' missing"),
    ("two\nlines", "一行", "1 lines where the figure has 2"),
    ("$d_k$ and\nkeys", "键\n$d_k$ 和", "line 1: math 'd_k' missing"),
])
def test_label_differences_name_what_a_figure_s_translation_lost(english, translated, problem):
    assert problem in figure_labels.label_differences(english, translated)
    assert figure_labels.label_differences(english, english) == []


def _cache_executed(course: Path, chapter: str, svg: str) -> None:
    """Put in the course's execution cache the released chapter as if the book had executed it, its
    code cell showing the figure ``svg`` (jupyter-cache matches a notebook by its code)."""
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    path = course / "chapters" / chapter / f"{chapter}.ipynb"
    executed = _read(path)
    [code] = [cell for cell in executed.cells if cell.cell_type == "code"]
    code.outputs = [nbformat.v4.new_output("display_data", data={"image/svg+xml": svg, "text/plain": "<Figure>"})]
    cache = get_cache(course / "_build" / ".jupyter_cache")
    cache.cache_notebook_bundle(CacheBundleIn(executed, str(path)), check_validity=False, overwrite=True)


def test_update_takes_the_figure_labels_from_the_executed_chapter_and_report_counts_them(tiny_course, tool):
    po = translations.catalogue_path(tiny_course, LANGUAGE, "01_tiny")
    assert tool(tiny_course, "update", "--language", LANGUAGE).returncode == 0
    release.generate(root=tiny_course)
    _cache_executed(tiny_course, "01_tiny", _svg_figure(title="Weights & <masks>", xlabel="head 1: key $j$"))
    assert tool(tiny_course, "update", "--dry-run").returncode == 1  # the figure's labels are new
    assert tool(tiny_course, "update").returncode == 0
    labels = {entry.msgid: entry for entry in translations.load(po) if entry.msgctxt == "figure:install"}
    assert sorted(labels) == sorted(["The", "cat", "head 1: key $j$", "attention weight", "Weights & <masks>",
                                     "scaled", "Two lines\nof a title"])
    counts = translations.counts(po, "01_tiny")
    assert (counts.total, counts.figure_labels, counts.figure_labels_translated) == (4 + 7, 7, 0)

    catalogue = translations.load(po)
    for entry in catalogue:
        entry.msgstr = {"# Tiny": "# 小例子", "First paragraph.": "第一段。", "Second, with $x$.": "第二段，含 $x$。",
                        "Third {cite:p}`key2020`.": "第三 {cite:p}`key2020`。", "The": "这只", "cat": "猫",
                        "head 1: key $j$": "头 1：键 $j$", "attention weight": "注意力权重",
                        "Weights & <masks>": "权重与<掩码>", "scaled": "缩放"}.get(entry.msgid, "")
    catalogue.save(str(po))
    report = tool(tiny_course, "report")
    assert "01_tiny" in report.stdout and "6/7" in report.stdout and "figure labels" in report.stdout
    assert tool(tiny_course, "report", "--release").returncode == 1  # "Two lines\nof a title" is untranslated
    assert tool(tiny_course, "check").returncode == 0

    catalogue = translations.load(po)
    next(entry for entry in catalogue if entry.msgid == "Two lines\nof a title").msgstr = "两行标题"
    catalogue.save(str(po))
    check = tool(tiny_course, "check")
    assert check.returncode == 1 and "cell figure:install" in check.stdout \
        and "1 lines where the figure has 2" in check.stdout

    shutil.rmtree(tiny_course / "_build")  # no executed chapter: the catalogue keeps its labels
    assert tool(tiny_course, "update", "--dry-run").returncode == 0
    assert translations.counts(po, "01_tiny").figure_labels == 7


def test_the_books_kernels_draw_svg_with_text_as_paths():
    config = {}
    exec(figure_labels.KERNEL_CONFIG, {"c": _Config(config)})
    assert config == {"InlineBackend.figure_formats": {"svg"}, "InlineBackend.rc": {"svg.fonttype": "path"},
                      "InlineBackend.print_figure_kwargs": {"bbox_inches": "tight", "metadata": {"Date": None}}}


class _Config:
    """Records the assignments of an IPython configuration file (``c.Section.name = value``)."""

    def __init__(self, values: dict, prefix: str = ""):
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_prefix", prefix)

    def __getattr__(self, name: str) -> "_Config":
        return _Config(self._values, f"{self._prefix}{name}.")

    def __setattr__(self, name: str, value: object) -> None:
        self._values[f"{self._prefix}{name}"] = value


def test_a_rotated_tick_label_aligned_right_still_ends_at_its_tick():
    """A tick label rotated by 30 degrees and aligned right (matplotlib places it by its start, no
    text-anchor): its translation is anchored at its end, where the English ends."""
    import io

    import matplotlib
    from matplotlib.figure import Figure
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    with matplotlib.rc_context(figure_labels.SVG_RC):
        figure = Figure(figsize=(3, 3))
        axis = figure.subplots()
        axis.set_xticks([0, 1], ["previous token", "next token"], rotation=30, ha="right")
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg")
    root = ElementTree.fromstring(figure_labels.translate_svg(buffer.getvalue(), {"previous token": "前一个词元"}))
    [placed] = [group for group in root.iter("{http://www.w3.org/2000/svg}g")
                if any(text.text == "前一个词元" for text in group.findall("{http://www.w3.org/2000/svg}text"))]
    [label] = placed
    assert "rotate(-30" in placed.get("transform") and "text-anchor: end" in label.get("style")
    width = TextToPath().get_text_width_height_descent("previous token", FontProperties(size=10), ismath=False)[0]
    assert float(label.get("x")) == pytest.approx(width, abs=1e-3)


def test_a_title_on_the_left_of_its_axes_still_starts_at_its_edge():
    """A title with loc="left" starts where its axes start: its translation is anchored at its start
    (a centred title keeps its middle: the tests above)."""
    import io

    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(figure_labels.SVG_RC):
        figure = Figure(figsize=(4, 3))
        axis = figure.subplots()
        axis.plot([0, 1], [0, 1])
        axis.set_title("(a) sentence pair", loc="left")
        axis.set_title("right side", loc="right")
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg")
    root = ElementTree.fromstring(figure_labels.translate_svg(buffer.getvalue(), {"(a) sentence pair": "(a) 句子对",
                                                                                  "right side": "右边"}))
    anchors = {text.text: (text.get("style").rsplit("text-anchor: ", 1)[1], float(text.get("x")))
               for text in root.iter("{http://www.w3.org/2000/svg}text")}
    assert anchors["(a) 句子对"] == ("start", 0.0) and anchors["右边"][0] == "end"
