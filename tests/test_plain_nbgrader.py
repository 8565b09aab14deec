"""Plain nbgrader from the course's root, as instructors.md documents it ("Plain nbgrader"), end to end.

A copy of the repository's ``nbgrader_config.py`` with the tiny course of tests/grading_helpers.py as
its ``solutions/`` (chapter 01's install cell first) runs the documented commands: ``nbgrader
generate_assignment`` registers the chapter and fills the install cell's URL in ``release/``,
``autograde`` grades an honest, a blank and a tampering student in ``submitted/`` (warning of the
tampered test cell only), ``generate_feedback`` and
``export`` write the feedback and ``grades.csv``. ``chapters/`` stays as it was, and every file the
commands write is one the repository's ``.gitignore`` covers. The commands run as the README prints them,
``.venv/bin/python -m nbgrader ...``, in a shell where the environment is not activated: nbgrader runs
``alembic`` from PATH, which ``nbgrader_config.py`` finds in the environment's folder.
"""

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import nbformat
import pytest
from grading_helpers import ADD, DOUBLE, put, tiny_solutions, with_cells

from autograder.publish.release import BOOK_HIDDEN_TAG, INSTALL_TAG

REPO = Path(__file__).resolve().parents[1]
URL = "https://example.org/course"


def not_activated() -> dict[str, str]:
    """This process's environment as a shell's before ``. .venv/bin/activate``: no ``VIRTUAL_ENV``, and a
    PATH without the environment's commands (its ``bin/`` folder, nor any other folder with an ``alembic``)."""
    environment = {name: value for name, value in os.environ.items() if name != "VIRTUAL_ENV"}
    scripts = Path(sysconfig.get_path("scripts")).resolve()
    folders = [folder for folder in environment.get("PATH", "").split(os.pathsep) if folder
               and Path(folder).resolve() != scripts and shutil.which("alembic", path=folder) is None]
    return {**environment, "PATH": os.pathsep.join(folders)}


def nbgrader(course: Path, *arguments: str) -> str:
    """Run ``.venv/bin/python -m nbgrader ARGUMENTS`` in ``course`` with this checkout's packages, the environment
    not activated (as the README allows); its output."""
    environment = {**not_activated(),
                   "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "nbgrader", *arguments], cwd=course, env=environment, text=True,
                          capture_output=True, timeout=1800)
    assert done.returncode == 0, f"nbgrader {' '.join(arguments)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def git_ignores(relative: Path) -> bool:
    return subprocess.run(["git", "-C", str(REPO), "check-ignore", "-q", "--no-index", str(relative)]).returncode == 0


@pytest.mark.slow
def test_the_documented_nbgrader_commands_grade_a_class_and_write_only_where_git_does_not_look(tmp_path):
    course = tmp_path / "course"
    course.mkdir()
    shutil.copy(REPO / "nbgrader_config.py", course)
    (course / "_config.yml").write_text(f"repository:\n  url: {URL}\n")
    solution = tiny_solutions()["01_tiny"]
    solution.cells.insert(0, nbformat.read(REPO / "solutions" / "01_attention" / "01_attention.ipynb",
                                           as_version=4).cells[0])
    put(course, "solutions/01_tiny/01_tiny.ipynb", solution)
    chapter = put(course, "chapters/01_tiny/01_tiny.ipynb", "the book's copy, which nbgrader must leave alone")
    before = {path for path in course.rglob("*") if path.is_file()}

    nbgrader(course, "generate_assignment", "01_tiny")
    released = nbformat.read(course / "release" / "01_tiny" / "01_tiny.ipynb", as_version=4)
    install = released.cells[0]
    assert INSTALL_TAG in install.metadata.tags and BOOK_HIDDEN_TAG in install.metadata.tags
    assert URL in install.source and "{repository_url}" not in install.source
    put(course, "submitted/honest/01_tiny/01_tiny.ipynb", with_cells(released, add=ADD, double=DOUBLE))
    put(course, "submitted/blank/01_tiny/01_tiny.ipynb", released)
    put(course, "submitted/tamperer/01_tiny/01_tiny.ipynb", with_cells(released, test_double="assert True"))
    log = nbgrader(course, "autograde", "01_tiny")
    # nbgrader's false alarm on every test cell with hidden tests (jupyter/nbgrader#1961) is gone; an edited
    # test cell is still reported, and graded with the instructor's version
    assert log.count("has changed!") == 1 and "Attribute 'checksum' for cell test_double has changed!" in log, log
    nbgrader(course, "generate_feedback", "01_tiny")
    nbgrader(course, "export")

    rows = [line.split(",") for line in (course / "grades.csv").read_text().splitlines()]
    assert {row[3]: float(row[9]) for row in rows[1:]} == {"honest": 3.0, "blank": 0.0, "tamperer": 0.0}
    assert (course / "feedback" / "honest" / "01_tiny" / "01_tiny.html").exists()
    assert chapter.read_text() == "the book's copy, which nbgrader must leave alone"
    if subprocess.run(["git", "-C", str(REPO), "rev-parse"], capture_output=True).returncode != 0:
        pytest.skip("not a git checkout: cannot ask git what it ignores")
    written = sorted(path.relative_to(course) for path in course.rglob("*") if path.is_file() and path not in before)
    assert Path("grades.csv") in written and Path("gradebook.db") in written
    assert [path for path in written if not git_ignores(path)] == []
