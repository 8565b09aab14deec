"""autograder: releases the course's chapters and grades a class's submissions with nbgrader's formats.

- ``autograder.cli``        the ``autograder`` command (``python -m autograder``): ``release`` and ``grade``
- ``autograder.course``     the course's layout and cell vocabulary
- ``autograder.chapters``   what each chapter tests, as the grader reads it from its solution notebook
- ``autograder.release``    regenerates ``chapters/`` from ``solutions/`` and verifies both
- ``autograder.translations`` the translation catalogues (``locale/``) and the translated chapters
                            (``chapters/LANG/``); ``autograder.myst_blocks`` their units, MyST blocks
- ``autograder.translated_book`` the translated book's build over ``chapters/LANG/`` and its language switch
- ``autograder.checks``     the checks that the chapters' hidden tests call, one module per topic
- ``autograder.bounds``     every bound of the grader (sizes, outputs, messages, time, resources), by threat

Grading, step by step (``autograder.grade`` runs them for a class):

- ``submissions``           what SUBMISSIONS holds, read without following links, and what was skipped
- ``job``                   one (student, chapter) in a fresh worker: run, grade, graded notebook, feedback
- ``runner``                the notebook run once: its cells in the student process, its tests in the grader
- ``steps``                 the notebook as the runner replays it: code cells, test cells, instructor code
- ``instructor_context``    the instructor code the tests need, sliced from the solution notebook
- ``grader_side``, ``student_side``, ``wire``   the grader's side of the student process (which it
  starts and asks about the student's objects), what runs inside that process, and the data between them
- ``sandbox``               namespaces, the scratch space and the bounds the student's code runs in
- ``cell_outputs``, ``graded_notebook``, ``feedback``   outputs kept, the instructor's notebook, the student's page
- ``book_markdown``, ``citations``   the feedback's Markdown cells: math as MathML, citations from references.bib
- ``reference_copies``      exercises whose code may be the reference's, flagged for the instructor
- ``results``               typed results (statuses, causes), ``results.json``, the summary, signed result files
- ``output_layout``         every path of the output folder and of a job's folder
- ``nbgrader_adapter``      nbgrader's gradebook and feedback exporter
"""
