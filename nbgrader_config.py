"""nbgrader's configuration for the course.

``solutions/`` is nbgrader's source directory and ``chapters/`` its release directory; an assignment
is a chapter folder, e.g. ``01_attention`` (``solutions/01_attention/01_attention.ipynb`` becomes
``chapters/01_attention/01_attention.ipynb``). Regenerate the chapters with ``autograder release``,
which runs nbgrader's generate_assignment with this configuration and normalizes the result.

The gradebook is ``gradebook.db`` at the root, a file git ignores; ``autograder release`` uses a
throwaway gradebook of its own, and ``autograder grade`` takes ``--db``.
"""

from pathlib import Path

c = get_config()  # noqa: F821 (nbgrader provides get_config when it loads this file)

ROOT = Path(__file__).resolve().parent

c.CourseDirectory.root = str(ROOT)
c.CourseDirectory.course_id = "bertlab"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "chapters"
c.CourseDirectory.db_url = f"sqlite:///{ROOT / 'gradebook.db'}"
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", ".jupyter_cache"]
