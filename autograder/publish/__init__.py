"""Publishing the course: the student chapters released from the solutions, and their translations.

- ``release``           regenerates ``chapters/`` (and ``chapters/LANG/``) from ``solutions/`` with nbgrader,
                        and verifies both
- ``translations``      the translation catalogues (``locale/``) and the translated notebooks and pages
- ``myst_blocks``       MyST Markdown as translation units: blocks, and the markup a translation keeps
- ``translated_book``   the translated book's build over ``chapters/LANG/`` and its language switch

This room stands beside the grading steps and imports only the core; only the command (``autograder
release``) imports it. This package's ``__init__`` imports nothing, so that the book's extension
(``_ext/language_switch.py``) and ``tools/translations.py``, which import the translation modules, do not
import the release, and nbgrader with it: import the room's modules.
"""
