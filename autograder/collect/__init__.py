"""Collecting: what a class handed in, read without following links, and what was skipped (and why).

- ``submissions``   the submissions found in SUBMISSIONS (three layouts, :class:`Layout`), each read and
                    named, the one that counts for each (student, chapter), and a submission's notebook
                    read leniently (:func:`read_notebook`)

This module is the room's interface: the orchestration imports these names from ``autograder.collect``.
"""

from autograder.collect.submissions import (
    Layout, Submission, collect_submissions, error_line, look_alike_names, read_notebook)

__all__ = ["Layout", "Submission", "collect_submissions", "error_line", "look_alike_names", "read_notebook"]
