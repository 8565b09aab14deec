"""nbgrader, as the grader uses it: its gradebook, its course layout and its feedback exporter.

The grader does not run nbgrader's autograde (which executes a notebook, hidden tests and all, in
the student's kernel); it writes what autograde would have written, so that nbgrader's own tools
(``nbgrader export``, the formgrader, ``generate_feedback``) work on it:

- :func:`create_gradebook`, :func:`register_chapters`: a gradebook (nbgrader's schema, stamped
  with its alembic version) that knows the chapters' cells (nbgrader's generate_assignment).
- :func:`store_grades`: a graded notebook's points, as nbgrader's auto scores.
- :func:`render_feedback`: nbgrader's generate_feedback on one notebook, with nbconvert's HTML
  sanitizer on.
- :func:`export_csv`: nbgrader's CSV export of the gradebook.
"""

import logging
import os
import tempfile
import warnings
from datetime import datetime
from pathlib import Path

from autograder.course import GradingError
from autograder.results import NotebookResult


def quiet_nbgrader() -> None:
    """Keep nbgrader's chatter off the console (its API captures its log), and SQLAlchemy 2's
    warnings about nbgrader's sessions, which are harmless."""
    from sqlalchemy.exc import SAWarning

    warnings.filterwarnings("ignore", category=SAWarning, module="nbgrader")
    for name in ("traitlets", "nbclient", "nbconvert"):
        logger = logging.getLogger(name)
        if not any(isinstance(handler, logging.NullHandler) for handler in logger.handlers):
            logger.addHandler(logging.NullHandler())


def nbgrader_api(course: Path, db_url: str, config=None):
    """nbgrader's Python API on ``course`` (its own layout: source/, autograded/, feedback/, ...)."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    config = config or Config()
    config.CourseDirectory.root = str(course)
    config.CourseDirectory.source_directory = "source"
    config.CourseDirectory.release_directory = "release"
    config.CourseDirectory.db_url = db_url
    config.CourseDirectory.course_id = "course"
    config.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__"]
    quiet_nbgrader()
    return NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)


def create_gradebook(path: Path) -> None:
    """An empty nbgrader gradebook at ``path``, stamped with nbgrader's schema version.

    nbgrader stamps a new gradebook by running the ``alembic`` command in a subprocess, which takes
    many seconds; this asks alembic's Python API for the same version instead.
    """
    import nbgrader
    import nbgrader.api
    from alembic.script import ScriptDirectory
    from sqlalchemy import create_engine, text

    version = ScriptDirectory(str(Path(nbgrader.__file__).parent / "alembic")).get_current_head()
    engine = create_engine(f"sqlite:///{path}")
    nbgrader.api.Base.metadata.create_all(bind=engine)
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)"))
        connection.execute(text("INSERT INTO alembic_version (version_num) VALUES (:version)"), {"version": version})
    engine.dispose()


def register_chapters(course: Path, db_url: str, chapters: list[str]) -> None:
    """Record the chapters' cells in a gradebook (nbgrader's generate_assignment on ``course``)."""
    api = nbgrader_api(course, db_url)
    for name in chapters:
        result = api.generate_assignment(name, force=True, create=True)
        if not result["success"]:
            log = (result.get("error") or "") + (result.get("log") or "")
            if "Cannot add or remove cells" in log:
                raise GradingError(f"solutions/{name} gained or lost graded cells since it was graded into the "
                                   f"gradebook {db_url}; grade into a new --out or --db")
            raise GradingError(f"nbgrader cannot register chapter {name} in {db_url}:\n{log[-3000:]}")


def store_grades(gradebook, result: NotebookResult, notebook: str) -> None:
    """Write one graded (student, chapter) into an open nbgrader Gradebook: the grader's points."""
    from nbgrader.api import MissingEntry

    gradebook.update_or_create_student(result.student)
    gradebook.update_or_create_submission(result.chapter, result.student,
                                          timestamp=datetime.fromisoformat(result.timestamp))
    for test in result.tests:
        try:
            grade = gradebook.find_grade(test.grade_id, notebook, result.chapter, result.student)
        except MissingEntry:
            continue
        grade.auto_score = test.points
        grade.needs_manual_grade = grade.manual_score is not None  # a grader's score gets reviewed
    gradebook.db.commit()


def render_feedback(course: Path, notebook, result: NotebookResult, notebook_name: str, sanitized_html) -> bytes:
    """nbgrader's feedback page of ``notebook`` (the graded notebook as the student may see it), made in
    ``course``, a private nbgrader course holding the chapter's source and a gradebook that knows it.

    nbgrader's feedback converter renders it with nbconvert's HTML sanitizer on
    (``HTMLExporter.sanitize_html``) and with the template ``autograder/templates/sanitized_feedback``,
    nbgrader's own feedback template whose Markdown cells also pass through ``sanitized_html``.
    """
    import nbformat
    import nbgrader
    from nbgrader.api import Gradebook
    from nbgrader.converters import GenerateFeedback
    from nbgrader.utils import capture_log
    from traitlets.config import Config

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        store_grades(gradebook, result, notebook_name)
    path = course / "autograded" / result.student / result.chapter / f"{notebook_name}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, path)
    config = Config()
    config.HTMLExporter.sanitize_html = True
    config.HTMLExporter.template_name = "sanitized_feedback"
    config.HTMLExporter.template_file = "sanitized_feedback.html.j2"
    config.HTMLExporter.extra_template_basedirs = [
        str(Path(__file__).parent / "templates"),
        str(Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates")]
    config.HTMLExporter.filters = {"sanitized_html": sanitized_html}
    api = nbgrader_api(course, f"sqlite:///{course / 'gradebook.db'}", config)
    api.coursedir.assignment_id, api.coursedir.student_id = result.chapter, result.student
    converter = GenerateFeedback(coursedir=api.coursedir, parent=api)
    converter.force = True
    outcome = capture_log(converter)
    html = course / "feedback" / result.student / result.chapter / f"{notebook_name}.html"
    if not outcome["success"] or not html.exists():
        detail = (outcome.get("log") or "") + (outcome.get("error") or "")
        raise RuntimeError(f"nbgrader could not render the feedback:\n{detail[-3000:]}")
    return html.read_bytes()


def export_csv(db_url: str, path: Path) -> None:
    """nbgrader's CSV export of the gradebook, written atomically."""
    from nbgrader.api import Gradebook
    from nbgrader.plugins import CsvExportPlugin

    with tempfile.TemporaryDirectory(dir=path.parent) as scratch, Gradebook(db_url) as gradebook:
        temporary = Path(scratch) / path.name
        CsvExportPlugin(to=str(temporary)).export(gradebook)
        os.replace(temporary, path)
