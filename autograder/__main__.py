"""``python -m autograder``: the same as the ``autograder`` command."""

import sys

from autograder.cli import main

sys.exit(main())
