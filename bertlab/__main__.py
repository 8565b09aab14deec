"""``python -m bertlab``: the same as the ``bertlab`` command (``torchrun ... -m bertlab pretrain`` too)."""

import sys

from bertlab.cli import main

sys.exit(main())
