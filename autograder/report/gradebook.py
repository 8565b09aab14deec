"""The class's grades into nbgrader's gradebook, and nbgrader's CSV export of it, for a whole class at once.

:func:`autograder.core.nbgrader_adapter.store_grades` writes one result through nbgrader's API (a few queries
and a commit each), and nbgrader's ``CsvExportPlugin`` asks for each chapter and student's submission
apart (a query each, whose score sums the grade table again): the end of a run would grow faster than
the class. Here it takes time in proportion to the class (``benchmarks/gradebook_writes.py``):

- :func:`write_grades` reads the gradebook's rows for the chapters' cells and the class's submissions
  once, then writes, in one transaction, only what differs from the results: the students and
  submissions that are new (a submission with nbgrader's rows for each notebook of its chapter: a grade
  per graded cell and a comment per solution or task cell, as ``Gradebook.add_submission`` makes them),
  the timestamps that changed, and the automatic scores and comments that changed, as ``store_grades``
  sets them (a grade whose manual score is set stays marked for review). An unchanged result writes
  nothing. New rows go to PostgreSQL with ``COPY`` (:func:`_insert`).
- :func:`export_csv` writes what ``nbgrader export`` writes (its columns and values, one row per chapter
  and student of the gradebook, chapters in order of due date and name, students of last and first name,
  then id), from five queries, with a last column ``reference_copies``.
"""

import csv
import io
from collections import defaultdict
from datetime import datetime
from pathlib import Path

from autograder.core import PRIVATE, NotebookResult, write_atomically

CSV_COLUMNS = ("assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email", "raw_score",
               "late_submission_penalty", "score", "max_score")  # nbgrader's CsvExportPlugin's


def write_grades(db_url: str, results: list[NotebookResult], notebooks: dict[str, str]) -> list[str]:
    """Write ``results`` into the gradebook at ``db_url`` (``notebooks``: each chapter's notebook name);
    return a line for each result that could not be written (its notebook unknown to the gradebook).
    Raises SQLAlchemy's errors when the database cannot be written; then nothing is."""
    from sqlalchemy import create_engine

    engine = create_engine(db_url)
    try:
        with engine.begin() as connection:
            book = _Book(connection)
            failures = [problem for result in results if (problem := book.set(result, notebooks.get(result.chapter)))]
            book.flush(connection)
        return failures
    finally:
        engine.dispose()


class _Book:
    """What a gradebook holds of the chapters and the class, read once, and what to change in it.

    A grade or comment read from the database is a tuple of its values; one of a new submission is the
    dict of the row to insert, whose values :meth:`set` changes in place."""

    def __init__(self, connection):
        from nbgrader.api import (
            Assignment, BaseCell, Comment, Grade, GradeCell, Notebook, SolutionCell, Student, SubmittedAssignment,
            SubmittedNotebook, TaskCell)
        from sqlalchemy import select

        rows = connection.execute(select(Assignment.name, Assignment.id, Notebook.name, Notebook.id)
                                  .join(Notebook, Notebook.assignment_id == Assignment.id)).all()
        self.notebooks = {(chapter, name): (assignment, notebook) for chapter, assignment, name, notebook in rows}
        self.of_assignment = defaultdict(list)  # assignment id -> its notebooks' ids
        for _, assignment, _, notebook in rows:
            self.of_assignment[assignment].append(notebook)
        self.graded = defaultdict(dict)  # notebook id -> {cell name: cell id}: its grade and task cells
        self.commented = defaultdict(dict)  # notebook id -> {cell id: cell name}: its solution and task cells
        for kind in (TaskCell, GradeCell, SolutionCell):  # of a name, the grade cell is the one nbgrader finds
            cells = select(BaseCell.name, BaseCell.id, BaseCell.notebook_id).join(
                kind.__table__, kind.__table__.c.id == BaseCell.id)
            for name, cell, notebook in connection.execute(cells):
                if kind is not SolutionCell:
                    self.graded[notebook][name] = cell
                if kind is not GradeCell:
                    self.commented[notebook][cell] = name
        self.students = set(connection.scalars(select(Student.id)))
        self.submissions = {(assignment, student): (submission, timestamp) for submission, assignment, student,
                            timestamp in connection.execute(select(
                                SubmittedAssignment.id, SubmittedAssignment.assignment_id,
                                SubmittedAssignment.student_id, SubmittedAssignment.timestamp))}
        self.submitted = {(submission, notebook): submitted for submitted, submission, notebook in connection.execute(
            select(SubmittedNotebook.id, SubmittedNotebook.assignment_id, SubmittedNotebook.notebook_id))}
        self.grades = defaultdict(dict)  # submitted notebook id -> {cell id: (id, auto, manual, review) or row}
        for grade, submitted, cell, auto, manual, review in connection.execute(
                select(Grade.id, Grade.notebook_id, Grade.cell_id, Grade.auto_score, Grade.manual_score,
                       Grade.needs_manual_grade)):
            self.grades[submitted][cell] = (grade, auto, manual, review)
        self.comments = defaultdict(dict)  # submitted notebook id -> {cell id: (id, automatic comment) or row}
        for comment, submitted, cell, text in connection.execute(
                select(Comment.id, Comment.notebook_id, Comment.cell_id, Comment.auto_comment)):
            self.comments[submitted][cell] = (comment, text)
        self.inserts = defaultdict(list)  # table -> rows
        self.updates = defaultdict(list)  # table -> {"key": id, column: value}
        self.tables = {"student": Student, "submission": SubmittedAssignment, "submitted": SubmittedNotebook,
                       "grade": Grade, "comment": Comment}

    def set(self, result: NotebookResult, notebook_name: str | None) -> str | None:
        """Record what ``result`` changes: its student, submission, scores and comments (as nbgrader's
        ``update_or_create_student``, ``update_or_create_submission`` and ``store_grades`` would write
        them); why it cannot be written, or None."""
        from nbgrader.utils import parse_utc

        found = self.notebooks.get((result.chapter, notebook_name))
        if found is None:
            return (f"{result.student}/{result.chapter}: not written to the gradebook: it knows no notebook "
                    f"{notebook_name} of chapter {result.chapter}")
        assignment, notebook = found
        if result.student not in self.students:
            self.students.add(result.student)
            self.inserts["student"].append({"id": result.student})
        timestamp = parse_utc(datetime.fromisoformat(result.timestamp))
        submission, stored = self.submissions.get((assignment, result.student), (None, None))
        if submission is None:
            submission = self._add_submission(assignment, result.student, timestamp)
        elif stored != timestamp:
            self.updates["submission"].append({"key": submission, "timestamp": timestamp})
        submitted = self.submitted.get((submission, notebook))
        if submitted is None:
            return (f"{result.student}/{result.chapter}: not written to the gradebook: its submission has no "
                    f"notebook {notebook_name}")
        grades = self.grades[submitted]
        for test in result.tests:
            cell = self.graded[notebook].get(test.grade_id)
            if cell in grades:  # a cell the gradebook knows; nbgrader's store_grades skips the others
                self._change("grade", grades, cell, auto_score=test.points,
                             needs_manual_grade=self._manual_score(grades[cell]) is not None)
        flags = {copy.exercise: f"Possible {copy.describe()}" for copy in result.copies}
        comments = self.comments[submitted]
        for cell in comments:
            self._change("comment", comments, cell, auto_comment=flags.get(self.commented[notebook].get(cell)))
        return None

    @staticmethod
    def _manual_score(grade) -> float | None:
        return grade["manual_score"] if isinstance(grade, dict) else grade[2]

    def _change(self, table: str, rows: dict, cell: str, **values) -> None:
        """Set ``values`` on the row of ``cell`` in ``rows``: a new row in place, one read from the
        database by an update where a value differs."""
        row = rows[cell]
        if isinstance(row, dict):
            row.update(values)
            return
        stored = dict(zip(values, row[1:] if table == "comment" else (row[1], row[3])))
        if stored != values:
            self.updates[table].append({"key": row[0], **values})

    def _add_submission(self, assignment: str, student: str, timestamp: datetime) -> str:
        """A new submission's rows, as nbgrader's ``add_submission`` makes them; its id."""
        from nbgrader.api import new_uuid

        submission = new_uuid()
        self.submissions[assignment, student] = (submission, timestamp)
        self.inserts["submission"].append({"id": submission, "assignment_id": assignment, "student_id": student,
                                           "timestamp": timestamp, "extension": None})
        for notebook in self.of_assignment[assignment]:
            submitted = new_uuid()
            self.submitted[submission, notebook] = submitted
            self.inserts["submitted"].append({"id": submitted, "assignment_id": submission, "notebook_id": notebook,
                                              "flagged": False, "late_submission_penalty": None})
            for cell in dict.fromkeys(self.graded[notebook].values()):
                row = {"id": new_uuid(), "notebook_id": submitted, "cell_id": cell, "auto_score": None,
                       "manual_score": None, "extra_credit": None, "needs_manual_grade": True}
                self.grades[submitted][cell] = row
                self.inserts["grade"].append(row)
            for cell in self.commented[notebook]:
                row = {"id": new_uuid(), "notebook_id": submitted, "cell_id": cell, "auto_comment": None,
                       "manual_comment": None}
                self.comments[submitted][cell] = row
                self.inserts["comment"].append(row)
        return submission

    def flush(self, connection) -> None:
        """Insert the new rows, parents first (:func:`_insert`), and update the changed ones."""
        from sqlalchemy import bindparam, update

        for name in ("student", "submission", "submitted", "grade", "comment"):
            if self.inserts[name]:
                _insert(connection, self.tables[name].__table__, self.inserts[name])
        for name, rows in self.updates.items():
            table = self.tables[name].__table__
            statement = update(table).where(table.c.id == bindparam("key")).values(
                {column: bindparam(column) for column in rows[0] if column != "key"})
            connection.execute(statement, rows)


def _insert(connection, table, rows: list[dict]) -> None:
    """Insert ``rows`` into ``table``: through psycopg 3 with PostgreSQL's ``COPY``, a stream of rows
    (an INSERT a row, as psycopg runs SQLAlchemy's inserts, takes minutes for a large class), else with
    SQLAlchemy's inserts."""
    if connection.dialect.driver != "psycopg":
        connection.execute(table.insert(), rows)
        return
    quote = connection.dialect.identifier_preparer
    columns = list(rows[0])
    copying = f"COPY {quote.format_table(table)} ({', '.join(map(quote.quote, columns))}) FROM STDIN"
    with connection.connection.dbapi_connection.cursor() as cursor, cursor.copy(copying) as copy:
        for row in rows:
            copy.write_row([row[column] for column in columns])


def export_csv(db_url: str, path: Path, results: list[NotebookResult]) -> None:
    """nbgrader's CSV export of the gradebook at ``db_url`` (``nbgrader export``), with a last column
    ``reference_copies``: each exercise of that (student, chapter) flagged as a copy of the reference,
    with how sure and what was done (``results``' copies); written atomically, readable by its owner only
    (it holds the students' grades)."""
    from nbgrader.api import Assignment, Grade, Student, SubmittedAssignment, SubmittedNotebook
    from sqlalchemy import create_engine, func, select

    flags = {(result.student, result.chapter): "; ".join(copy.describe() for copy in result.copies)
             for result in results}
    engine = create_engine(db_url)
    try:
        with engine.connect() as connection:
            chapters = connection.execute(select(Assignment.id, Assignment.name, Assignment.duedate,
                                                 Assignment.max_score)
                                          .order_by(Assignment.duedate, Assignment.name)).all()
            students = connection.execute(select(Student.id, Student.last_name, Student.first_name, Student.email)
                                          .order_by(Student.last_name, Student.first_name, Student.id)).all()
            scores = dict(connection.execute(select(SubmittedNotebook.assignment_id, func.sum(Grade.score))
                                             .join(Grade, Grade.notebook_id == SubmittedNotebook.id)
                                             .group_by(SubmittedNotebook.assignment_id)).all())
            penalties = dict(connection.execute(
                select(SubmittedNotebook.assignment_id, func.sum(SubmittedNotebook.late_submission_penalty))
                .group_by(SubmittedNotebook.assignment_id)).all())
            submissions = {(assignment, student): (submission, timestamp) for submission, assignment, student,
                           timestamp in connection.execute(select(
                               SubmittedAssignment.id, SubmittedAssignment.assignment_id,
                               SubmittedAssignment.student_id, SubmittedAssignment.timestamp))}
    finally:
        engine.dispose()
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, [*CSV_COLUMNS, "reference_copies"])
    writer.writeheader()
    for assignment, chapter, duedate, max_score in chapters:
        for student, last_name, first_name, email in students:
            submission, timestamp = submissions.get((assignment, student), (None, None))
            raw = _or_zero(scores.get(submission)) if submission else 0.0
            penalty = _or_zero(penalties.get(submission)) if submission else 0.0
            row = {"assignment": chapter, "duedate": duedate, "timestamp": timestamp, "student_id": student,
                   "last_name": last_name, "first_name": first_name, "email": email, "raw_score": raw,
                   "late_submission_penalty": penalty, "score": max(0.0, raw - penalty) if submission else 0.0,
                   "max_score": max_score, "reference_copies": flags.get((student, chapter), "")}
            writer.writerow({key: "" if value is None else str(value) for key, value in row.items()})
    write_atomically(path, text.getvalue(), PRIVATE)


def _or_zero(value) -> float:
    """A sum of SQL's, 0.0 where it had nothing to sum (as nbgrader's ``coalesce(sum(...), 0.0)``)."""
    return 0.0 if value is None else value
