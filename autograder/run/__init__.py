"""Running a submission: the sandbox, the student process and the grader's side of it, and the runner.

- ``runner``            the notebook run once: its code cells in the student process, its test cells in
                        the grader, within the notebook's limits
- ``grader_side``       the grader's side of the student process: starts it, sends it requests, stands
                        for its objects (``Remote``)
- ``student_side``      what runs inside the student process: the student's cells, answers to requests
- ``wire``              the frames and the plain data between both sides
- ``sandbox``           namespaces, the scratch space and the bounds a student process runs in
- ``sandbox_inside``    the program that builds the sandbox inside its new namespaces, started as a file
                        (``python -I -S autograder/run/sandbox_inside.py``): standard library only
- ``stand_ins``         the graded chapter's references withheld from the student process
- ``reference_copies``  exercises whose code is the reference's, found by reading the submission

This package's ``__init__`` imports nothing, so the room has no interface module: the student process
imports ``autograder.run.student_side``, ``autograder.run.wire`` and (from a withheld module's stand-ins)
``autograder.run.stand_ins``, and Python runs a package's ``__init__`` before any module of it; the
grader's side must not be imported there. Other rooms import what they need from the room's modules.
"""
