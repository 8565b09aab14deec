"""Publishing the course: the student chapters released from the solutions, and their translations.

- ``release``           regenerates ``chapters/`` (and ``chapters/LANG/``) from ``solutions/`` with nbgrader,
                        and verifies both
- ``translations``      the translation catalogues (``locale/``) and the translated notebooks and pages
- ``myst_blocks``       MyST Markdown as translation units: blocks, and the markup a translation keeps
- ``translated_book``   the translated book's build over ``chapters/LANG/`` and its language switch

This room stands beside the grading steps and imports only the core. This module is its interface for
the command (``autograder release``); the tools and the book's extension import its modules.
"""

from autograder.publish.release import ReleaseError, generate, placeholder_warning, stale_chapters, verify

__all__ = ["ReleaseError", "generate", "placeholder_warning", "stale_chapters", "verify"]
