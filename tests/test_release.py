"""Tests of the chapter release: chapters/ is what generation produces, solutions pass their tests,
blank chapters fail only with NotImplementedError; and the verification itself catches defects."""

import re
import shutil
from pathlib import Path

import nbformat
import pytest

from autograder.cli import main
from autograder.publish import release

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = release.chapter_names(ROOT)


def test_there_are_chapters():
    assert "01_attention" in CHAPTERS


def test_chapters_are_what_generation_produces():
    differences = release.stale_chapters(ROOT)
    assert not differences, "chapters/ is out of date; run `autograder release`:\n" + "\n".join(differences)


def test_generation_is_deterministic(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    release.generate(root=ROOT, output=first)
    release.generate(root=ROOT, output=second)
    for path in sorted(first.rglob("*.ipynb")):
        assert path.read_bytes() == (second / path.relative_to(first)).read_bytes(), path


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_released_chapter_has_stubs_and_no_solutions(chapter):
    url = release.repository_url(ROOT)
    for path in sorted((ROOT / "chapters" / chapter).glob("*.ipynb")):
        text = path.read_text()
        for secret in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS"):
            assert secret not in text, f"{path} contains {secret!r}"
        # the visible tests call the checks through visible_check only; check_<name>(<name>) is hidden
        assert not re.search(r"\bcheck_\w+\(", text), f"{path} calls a check outside visible_check"
        notebook = nbformat.read(path, as_version=4)
        code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
        assert all(not cell.outputs and cell.execution_count is None for cell in code_cells)
        assert "raise NotImplementedError()" in text
        install = [cell for cell in code_cells if release.INSTALL_TAG in cell.metadata.get("tags", [])]
        assert install and install[0] is code_cells[0], f"{path}: the first code cell must be tagged 'install'"
        assert url in install[0].source and release.URL_PLACEHOLDER not in install[0].source
        assert release.BOOK_HIDDEN_TAG in install[0].metadata.tags, f"{path}: the book shows the install cell"
        tests = [cell for cell in code_cells if release.is_graded_test(cell)]
        assert len(tests) >= 3, f"{path}: at least 3 graded exercises"
        for cell in tests:
            assert "raises-exception" in cell.metadata.get("tags", []), f"{path}: {cell.metadata.nbgrader.grade_id}"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_solution_and_test_cells_follow_the_conventions(chapter):
    for path in sorted((ROOT / "solutions" / chapter).glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        solutions = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("solution")]
        tests = {c.metadata.nbgrader.grade_id: c for c in notebook.cells if release.is_graded_test(c)}
        for cell in solutions:
            name = cell.metadata.nbgrader.grade_id
            assert f"def {name}(" in cell.source or f"class {name}" in cell.source, f"{path}: {name}"
            test = tests.get(f"test_{name}")
            assert test is not None, f"{path}: no test cell test_{name}"
            hidden = test.source.split("### BEGIN HIDDEN TESTS")
            assert len(hidden) == 2 and hidden[0].strip(), f"{path}: test_{name} needs visible and hidden tests"
            assert f"check_{name}({name})" in hidden[1], f"{path}: test_{name} must call check_{name}({name})"
            assert test.metadata.nbgrader.points > 0


@pytest.mark.slow
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_solution_passes_all_its_tests(chapter):
    for path in sorted((ROOT / "solutions" / chapter).glob("*.ipynb")):
        assert release.verify_solution(path) == []


@pytest.mark.slow
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_blank_chapter_fails_only_with_not_implemented_error(chapter):
    for path in sorted((ROOT / "solutions" / chapter).glob("*.ipynb")):
        assert release.verify_chapter(ROOT / "chapters" / chapter / path.name, path) == []


# --------------------------------------------------------------------------------------------------
# The machinery on a tiny course with deliberate defects
# --------------------------------------------------------------------------------------------------


def _cell(source, grade_id=None, solution=False, points=0, tags=(), cell_id=None):
    cell = nbformat.v4.new_code_cell(source)
    cell.id = cell_id or grade_id
    if grade_id:
        cell.metadata.nbgrader = {"grade": not solution, "grade_id": grade_id, "locked": not solution,
                                  "schema_version": 3, "solution": solution, "task": False}
        if not solution:
            cell.metadata.nbgrader["points"] = points
    if tags:
        cell.metadata.tags = list(tags)
    return cell


@pytest.fixture
def tiny_course(tmp_path):
    """A course with one chapter whose notebook has a wrong test, a test that cannot fail, a test
    failing with another error, and a demonstration cell that fails on the blank exercise."""
    shutil.copy(ROOT / "nbgrader_config.py", tmp_path)
    (tmp_path / "_config.yml").write_text("repository:\n  url: https://example.org/course\n")
    notebook = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                                 "language": "python"}})
    notebook.cells = [
        _cell('print("install from {repository_url}")', tags=["install"], cell_id="install"),
        _cell("def add(a, b):\n    ### BEGIN SOLUTION\n    return a + b\n    ### END SOLUTION", "add", solution=True),
        _cell("assert add(1, 2) == 3\n### BEGIN HIDDEN TESTS\nassert add(2, 2) == 4\n### END HIDDEN TESTS", "test_add",
              points=1, tags=["raises-exception"]),
        _cell("assert add(1, 1) == 3  # wrong", "test_wrong", points=1, tags=["raises-exception"]),
        _cell("assert True", "test_cannot_fail", points=1, tags=["raises-exception"]),
        _cell("int('x')", "test_other_error", points=1, tags=["raises-exception"]),
        _cell("print(add(1, 1))", cell_id="demo"),
    ]
    (tmp_path / "solutions" / "01_tiny").mkdir(parents=True)
    nbformat.write(notebook, tmp_path / "solutions" / "01_tiny" / "01_tiny.ipynb")
    (tmp_path / "chapters" / "00_orphan").mkdir(parents=True)
    return tmp_path


def test_generate_writes_stubs_and_leaves_orphans_to_the_author(tiny_course):
    assert release.stale_chapters(tiny_course)  # not generated yet
    [path] = release.generate(root=tiny_course)
    assert path == tiny_course / "chapters" / "01_tiny" / "01_tiny.ipynb"
    text = path.read_text()
    assert "raise NotImplementedError()" in text and "return a + b" not in text and "add(2, 2)" not in text
    assert "https://example.org/course" in text
    # a chapter folder without a solution is not deleted: the check names it
    assert release.stale_chapters(tiny_course) == ["chapters/00_orphan should not be there"]
    (tiny_course / "chapters" / "00_orphan").rmdir()
    assert release.stale_chapters(tiny_course) == []
    path.write_text(text.replace("add(1, 2)", "add(1, 5)"))
    assert any("differs" in line for line in release.stale_chapters(tiny_course))


def test_releasing_again_writes_only_what_changed_and_deletes_nothing(tiny_course):
    """A book build executing chapters/ while a release runs must keep its files (a chapter folder deleted
    and copied again lost its kernel): an unchanged notebook is not touched, a changed one is replaced in
    one step, and a file the release did not write stays."""
    chapter = tiny_course / "chapters" / "01_tiny"
    [notebook] = release.generate(root=tiny_course)
    extra = chapter / "notes.md"
    extra.write_text("the author's notes")
    before = notebook.stat()
    assert release.generate(root=tiny_course) == []
    after = notebook.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert extra.read_text() == "the author's notes"

    solution = tiny_course / "solutions" / "01_tiny" / "01_tiny.ipynb"
    solution.write_text(solution.read_text().replace("assert add(1, 2) == 3", "assert add(2, 3) == 5"))
    assert release.generate(root=tiny_course) == [notebook]
    assert "add(2, 3) == 5" in notebook.read_text() and extra.read_text() == "the author's notes"
    assert sorted(path.name for path in chapter.iterdir()) == ["01_tiny.ipynb", "notes.md"]  # no temporary left


def test_generate_names_unknown_chapters(tiny_course):
    with pytest.raises(release.ReleaseError, match="02_missing.*01_tiny"):
        release.generate(["02_missing"], root=tiny_course)


@pytest.mark.slow
def test_verification_reports_every_defect(tiny_course):
    release.generate(root=tiny_course)
    solution = tiny_course / "solutions" / "01_tiny" / "01_tiny.ipynb"
    wrong, other_error = release.verify_solution(solution)
    assert "cell test_wrong: AssertionError" in wrong and "cell test_other_error: ValueError" in other_error
    problems = "\n".join(release.verify_chapter(tiny_course / "chapters" / "01_tiny" / "01_tiny.ipynb", solution))
    assert "test_cannot_fail: passes on the blank exercise" in problems
    assert "test_other_error: fails with ValueError" in problems
    assert "NotImplementedError (only test cells may fail)" in problems  # the demonstration cell
    assert "test_add" not in problems and "test_wrong" not in problems  # both stop at the stub


def test_cli_release(tiny_course, capsys):
    root = ["--root", str(tiny_course)]
    assert main(["release", *root, "--dry-run"]) == 1
    assert "chapters/01_tiny is missing" in capsys.readouterr().out
    assert main(["release", *root]) == 0
    assert "generated chapters/01_tiny/01_tiny.ipynb" in capsys.readouterr().out
    assert main(["release", *root, "--dry-run"]) == 1  # the release deletes nothing, and says what to delete
    assert "chapters/00_orphan should not be there" in capsys.readouterr().out
    (tiny_course / "chapters" / "00_orphan").rmdir()
    assert main(["release", *root, "--dry-run"]) == 0
    assert main(["release", *root, "02_missing"]) == 2
    assert "no solution notebook for 02_missing" in capsys.readouterr().err


def test_cli_release_takes_a_relative_root(tiny_course, capsys, monkeypatch):
    monkeypatch.chdir(tiny_course)
    assert main(["release", "--root", "."]) == 0
    assert "generated chapters/01_tiny/01_tiny.ipynb" in capsys.readouterr().out


def test_release_warns_about_the_placeholder_url_and_still_generates(tiny_course, capsys):
    (tiny_course / "_config.yml").write_text(f"repository:\n  url: {release.PLACEHOLDER_REPOSITORY}\n")
    assert main(["release", "--root", str(tiny_course)]) == 0
    printed = capsys.readouterr()
    [warning] = printed.err.splitlines()
    assert "_config.yml" in warning and "repository.url" in warning and "placeholder" in warning
    assert "generated chapters/01_tiny/01_tiny.ipynb" in printed.out


def test_release_without_a_repository_url_is_one_line(tiny_course, capsys):
    (tiny_course / "_config.yml").write_text("title: no repository\n")
    assert main(["release", "--root", str(tiny_course)]) == 2
    [error] = capsys.readouterr().err.splitlines()
    assert "has no repository.url" in error
