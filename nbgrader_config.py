"""nbgrader's configuration for the course (see instructors.md, "Plain nbgrader").

``solutions/`` is nbgrader's source directory; an assignment is a chapter folder, e.g.
``01_attention``. Plain nbgrader works from the repository's root and writes only where git does not
look (``.gitignore``): ``nbgrader generate_assignment 01_attention`` writes ``release/01_attention``
and registers the chapter in the gradebook, ``gradebook.db``; ``nbgrader autograde``,
``generate_feedback`` and ``export`` read ``submitted/`` and write ``autograded/``, ``feedback/`` and
``grades.csv``. The student notebooks of the book, ``chapters/``, are ``autograder release``'s: it
runs generate_assignment with this configuration into a folder of its own, with a throwaway gradebook,
and normalizes the result. Both fill the install cell with :class:`autograder.publish.release.InstallCell`.
``nbgrader autograde`` restores the test cells with :class:`autograder.publish.release.OverwriteReleasedCells`,
which warns of a changed test cell only when it differs from the released one.
"""

import os
import shutil
import sysconfig
from pathlib import Path

from nbgrader.converters import Autograde, GenerateAssignment
from nbgrader.preprocessors import OverwriteCells

c = get_config()  # noqa: F821 (nbgrader provides get_config when it loads this file)

# nbgrader stamps a new gradebook by running the command `alembic` from PATH (nbgrader.api.get_alembic_version),
# which is in the environment's bin/ folder only while the environment is activated: `.venv/bin/python -m
# nbgrader generate_assignment ...` without activation, as the README allows, would fail with
# "FileNotFoundError: 'alembic'". When PATH has no alembic, the folder of this Python's commands, which has it, goes
# first on PATH (the commands nbgrader starts inherit it).
SCRIPTS = sysconfig.get_path("scripts")
if shutil.which("alembic") is None and shutil.which("alembic", path=SCRIPTS) is not None:
    os.environ["PATH"] = os.pathsep.join(filter(None, [SCRIPTS, os.environ.get("PATH")]))

ROOT = Path(__file__).resolve().parent

c.CourseDirectory.root = str(ROOT)
c.CourseDirectory.course_id = "bertlab"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "release"
c.CourseDirectory.db_url = f"sqlite:///{ROOT / 'gradebook.db'}"
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", ".jupyter_cache"]
# The install cell filled first; "autograder.publish.release.InstallCell" is imported when a command generates.
c.GenerateAssignment.preprocessors = ["autograder.publish.release.InstallCell",
                                      *GenerateAssignment.class_traits()["preprocessors"].default()]
c.InstallCell.root = str(ROOT)
# The test cells restored from the gradebook as by nbgrader's OverwriteCells, whose warning "Attribute
# 'checksum' for cell test_... has changed!" is a false alarm on every cell with hidden tests
# (jupyter/nbgrader#1961): the subclass warns only of a cell that differs from the released one.
c.Autograde.sanitize_preprocessors = [
    "autograder.publish.release.OverwriteReleasedCells" if preprocessor is OverwriteCells else preprocessor
    for preprocessor in Autograde.class_traits()["sanitize_preprocessors"].default()]
# Seconds per cell when nbgrader executes a notebook (autograde, validate): chapter 07's pretraining
# takes a minute on a quiet 2-core CPU; nbgrader's default, 30 s, would fail it.
c.ExecutePreprocessor.timeout = 600
# Notebooks rendered by nbgrader (the formgrader, feedback) with nbconvert's HTML sanitizer on: a student's
# Markdown and outputs must not run as script in the instructor's Jupyter session.
c.HTMLExporter.sanitize_html = True
