"""nbgrader, as the grader uses it: its gradebook and its course layout.

The grader does not run nbgrader's autograde (which executes a notebook, hidden tests and all, in
the student's kernel); it writes what autograde would have written, so that nbgrader's own tools
(``nbgrader export``, the formgrader, ``generate_feedback``) work on it:

- :func:`prepare_gradebook` (:func:`create_gradebook` for a SQLite file), :func:`register_chapters`:
  a gradebook (nbgrader's schema, stamped with its alembic version) in any database SQLAlchemy
  reaches, that knows the chapters' cells (nbgrader's generate_assignment); a database that cannot be
  reached is named in one line, without its password (:func:`hidden_password`).
- :func:`store_grades`: a graded notebook's points, as nbgrader's auto scores, and its flagged copies as comments.

A feedback page as nbgrader's generate_feedback renders it is the report's
(:func:`autograder.report.feedback_exporter.feedback_exporter`, :func:`autograder.report.feedback.render_feedback`).
"""

import logging
import warnings
from datetime import datetime
from pathlib import Path

from sqlalchemy.engine import make_url

from autograder.bounds import CONNECT_SECONDS, MAX_GRADEBOOK_ERROR_CHARS, MAX_NBGRADER_LOG_CHARS
from autograder.core.course import GradingError
from autograder.core.results import NotebookResult


def quiet_nbgrader() -> None:
    """Keep nbgrader's chatter off the console (its API captures its log), and SQLAlchemy 2's
    warnings about nbgrader's sessions, which are harmless."""
    from sqlalchemy.exc import SAWarning

    warnings.filterwarnings("ignore", category=SAWarning, module="nbgrader")
    for name in ("traitlets", "nbclient", "nbconvert"):
        logger = logging.getLogger(name)
        if not any(isinstance(handler, logging.NullHandler) for handler in logger.handlers):
            logger.addHandler(logging.NullHandler())


def nbgrader_api(nbgrader_course: Path, db_url: str, config=None):
    """nbgrader's Python API on ``nbgrader_course`` (its own layout: source/, autograded/, feedback/, ...)."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    config = config or Config()
    config.CourseDirectory.root = str(nbgrader_course)
    config.CourseDirectory.source_directory = "source"
    config.CourseDirectory.release_directory = "release"
    config.CourseDirectory.db_url = db_url
    config.CourseDirectory.course_id = "course"
    config.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__"]
    quiet_nbgrader()
    return NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)


def create_gradebook(path: Path) -> None:
    """An nbgrader gradebook in the SQLite file ``path`` (see :func:`prepare_gradebook`)."""
    prepare_gradebook(f"sqlite:///{path}")


def prepare_gradebook(db_url: str) -> None:
    """Reach the gradebook's database at ``db_url`` and, where it has no tables yet, create nbgrader's,
    stamped with nbgrader's schema version. Raises :class:`GradingError` in one line naming what
    failed (the database, host, port and user; never the password).

    nbgrader stamps a new gradebook by running the ``alembic`` command in a subprocess, which takes
    many seconds; this asks alembic's Python API for the same version instead.
    """
    import nbgrader
    import nbgrader.api
    from alembic.script import ScriptDirectory
    from sqlalchemy import create_engine, inspect, text
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    try:
        url = make_url(db_url)
        timeout = {"connect_timeout": CONNECT_SECONDS} if url.get_driver_name() in ("psycopg", "psycopg2") else {}
        engine = create_engine(url, connect_args=timeout)
    except ImportError as error:
        raise GradingError(f"the gradebook database {hidden_password(db_url)} needs the driver {error.name or error}, "
                           "which is not installed (PostgreSQL: pip install \"bertlab[postgres]\")") from None
    except (ArgumentError, ValueError) as error:
        raise GradingError(f"--db {hidden_password(db_url)}: {error}; a gradebook's URL reads "
                           "postgresql://user:password@host/database or sqlite:////path/gradebook.db") from None
    try:
        with engine.begin() as connection:
            if not inspect(connection).get_table_names():
                version = ScriptDirectory(str(Path(nbgrader.__file__).parent / "alembic")).get_current_head()
                nbgrader.api.Base.metadata.create_all(bind=connection)
                connection.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)"))
                connection.execute(text("INSERT INTO alembic_version (version_num) VALUES (:version)"),
                                   {"version": version})
    except SQLAlchemyError as error:
        raise GradingError(connection_problem(url, error)) from None
    finally:
        engine.dispose()


def hidden_password(db_url: str) -> str:
    """``db_url`` as it may be printed: its password, if any, as ``***``."""
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(db_url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return "(unreadable)"


def without_password(text: str, db_url: str) -> str:
    """``text`` with the password of ``db_url``, wherever it appears, as ``***``."""
    from sqlalchemy.exc import ArgumentError

    try:
        password = make_url(db_url).password
    except (ArgumentError, ValueError):
        return text
    return text.replace(str(password), "***") if password else text


def connection_problem(url, error: Exception) -> str:
    """One line: which database could not be used (host, port, database, user) and the driver's reason,
    without the password."""
    reason = " ".join(str(getattr(error, "orig", None) or error).split())
    where = [f"{name} {value}" for name, value in (("host", url.host), ("port", url.port), ("database", url.database),
                                                   ("user", url.username)) if value]
    return f"cannot use the gradebook ({', '.join(where)}): {without_password(reason, url)[:MAX_GRADEBOOK_ERROR_CHARS]}"


def register_chapters(nbgrader_course: Path, db_url: str, chapters: list[str]) -> None:
    """Record the chapters' cells in a gradebook (nbgrader's generate_assignment on ``nbgrader_course``)."""
    api = nbgrader_api(nbgrader_course, db_url)
    for name in chapters:
        result = api.generate_assignment(name, force=True, create=True)
        if not result["success"]:
            log = without_password((result.get("error") or "") + (result.get("log") or ""), db_url)
            if "Cannot add or remove cells" in log:
                raise GradingError(f"solutions/{name} gained or lost graded cells since it was graded into the "
                                   f"gradebook {hidden_password(db_url)}; grade into a new --out or --db")
            raise GradingError(f"nbgrader cannot register chapter {name} in {hidden_password(db_url)}:\n"
                               f"{log[-MAX_NBGRADER_LOG_CHARS:]}")


def store_grades(gradebook, result: NotebookResult, notebook: str) -> None:
    """Write one graded (student, chapter) into an open nbgrader Gradebook: the grader's points, and
    each exercise flagged as a copy of the reference as the automatic comment of its solution cell
    (whose grade id is the exercise's name), which the formgrader shows; other automatic comments
    are cleared, so that a regrade leaves no stale flag."""
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
    flags = {copy.exercise: f"Possible {copy.describe()}" for copy in result.copies}
    for comment in gradebook.find_submission_notebook(notebook, result.chapter, result.student).comments:
        comment.auto_comment = flags.get(comment.name)
    gradebook.db.commit()
