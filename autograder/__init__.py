"""autograder: releases the course's chapters and grades a class's submissions with nbgrader's formats.

The grader is laid out by step (CONTRIBUTING.md, "Layout of the grader"): a room for each step above a
shared core, and the orchestration on top. A room imports only the core and the rooms of earlier steps;
``tests/test_layout.py`` holds them to it.

- ``autograder.core``       the shared core: the course and its chapters (``course``, ``chapters``,
                            ``instructor_context``, ``steps``), the run's records (``results``), the outputs kept
                            (``cell_outputs``), citations, the output folder's paths (``output_layout``), files
                            written whole (``files``) and nbgrader's gradebook (``nbgrader_adapter``)
- ``autograder.bounds``     every bound of the grader (sizes, outputs, messages, time, resources), by threat,
  ``autograder.text``       and the two rules of printable text: the core's, standard library only (the
                            student process imports them)
- ``autograder.collect``    collecting: what SUBMISSIONS holds, read without following links, and what was
                            skipped (``submissions``)
- ``autograder.run``        running a notebook once: the sandbox (``sandbox``, ``sandbox_inside``), the student
                            process (``grader_side``, ``student_side``, ``wire``), the runner (``runner``), the
                            references withheld (``stand_ins``) and the copies of them flagged (``reference_copies``)
- ``autograder.report``     reporting: the graded notebook (``graded_notebook``), made inert (``sanitize``), the
                            student's feedback page (``feedback``, ``feedback_exporter``, ``book_markdown``) and
                            the class's gradebook (``gradebook``)
- ``autograder.publish``    beside the steps: the release of ``chapters/`` from ``solutions/`` (``release``)
                            and the translations (``translations``, ``myst_blocks``, ``translated_book``)
- ``autograder.checks``     the checks that the chapters' hidden tests call, one module per topic

The orchestration, on top:

- ``autograder.cli``        the ``autograder`` command (``python -m autograder``): ``release`` and ``grade``
- ``autograder.grade``      a class's run: collect, prepare, reuse, grade the jobs, write the grades
- ``autograder.job``        one (student, chapter) in a fresh worker process: run, grade, graded notebook,
                            feedback; the job's process as both engines run it
- ``autograder.cluster``    the jobs on a Dask cluster's workers
- ``autograder.cluster_preload``  what a LocalCluster's worker does as it starts
- ``autograder.worker_preload``  what every worker would do for itself, done once by the workers' server
"""
