"""autograder: releases the course's chapters and grades a class's submissions with nbgrader.

- ``autograder.release``   regenerates ``chapters/`` from ``solutions/`` and verifies both
- ``autograder.checks``    the checks that the chapters' hidden tests call, one module per topic
- ``autograder.cli``       the ``autograder`` command (``python -m autograder``)
"""
