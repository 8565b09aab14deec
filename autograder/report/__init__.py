"""Reporting: what the instructor and each student get of a graded notebook, and the class's grades.

- ``graded_notebook``   the graded notebook, as nbgrader's autograde would have left it (the instructor's)
- ``sanitize``          what a submission wrote, made inert before a browser shows it: the graded notebook
                        kept for nbgrader's formgrader, the feedback page's Markdown and outputs
- ``feedback``          the student's feedback page: the graded notebook without hidden tests, sanitized,
                        bounded and locked (no script runs), rendered as nbgrader renders it
- ``feedback_exporter`` nbconvert's exporter of those pages, configured as nbgrader's
- ``book_markdown``     the feedback's Markdown cells: math as MathML, citations as text
- ``gradebook``         the class's grades into nbgrader's gradebook, and its CSV export, at once

This module is the room's interface: the orchestration imports these names from ``autograder.report``.
"""

from autograder.report.feedback import plain_page, render, student_view
from autograder.report.gradebook import export_csv, write_grades
from autograder.report.graded_notebook import build as build_graded_notebook
from autograder.report.sanitize import inert_notebook

__all__ = ["build_graded_notebook", "export_csv", "inert_notebook", "plain_page", "render", "student_view",
           "write_grades"]
