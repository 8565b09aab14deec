"""The server the class run forks its workers from does, once, the work of every job that depends on
no submission (autograder/worker_preload.py): the imports jobs made on first use, and the feedback
exporter with its template compiled."""

import json
import subprocess
import sys
from pathlib import Path

from autograder.grade import WORKER_MODULES

REPO = Path(__file__).resolve().parents[1]
SERVER = f"""
import json, sys
for name in {WORKER_MODULES!r}:  # as the workers' server imports them
    __import__(name)
import torch
from autograder import feedback, reference_copies
print(json.dumps({{
    "template compiled": feedback.exporter()._template_cached is not None,
    "bertlab modules": sorted(module.__name__ for module in reference_copies.reference_modules()),
    "dtensor imported": "torch.distributed.tensor" in sys.modules or not torch.distributed.is_available(),
}}))
"""


def test_the_workers_server_imports_and_renders_once_what_every_job_would():
    assert WORKER_MODULES[-1] == "autograder.worker_preload"
    server = subprocess.run([sys.executable, "-c", SERVER], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert server.returncode == 0 and server.stderr == "", server.stderr
    state = json.loads(server.stdout)
    bertlab = sorted(f"bertlab.{path.stem}" for path in (REPO / "bertlab").glob("*.py")
                     if not path.stem.startswith("_"))
    assert state == {"template compiled": True, "bertlab modules": bertlab, "dtensor imported": True}

