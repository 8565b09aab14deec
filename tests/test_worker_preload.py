"""The class run's workers: the server they are forked from does, once, the work of every job that
depends on no submission (autograder/worker_preload.py): the imports jobs made on first use, and the
feedback exporter with its template compiled, the checks' modules; a worker keeps the garbage collector
off what it starts with (autograder/job.py) and counts its setup before the grading."""

import json
import pickle
import subprocess
import sys
from pathlib import Path

from autograder.bounds import Limits
from autograder.core.chapters import load_chapters
from autograder.core.output_layout import JobFolder
from autograder.job import WORKER_MODULES, Job
from autograder.run.sandbox import SandboxOptions

REPO = Path(__file__).resolve().parents[1]
SERVER = f"""
import json, sys
for name in {WORKER_MODULES!r}:  # as the workers' server imports them
    __import__(name)
import torch
from autograder.report import feedback
from autograder.run import reference_copies
print(json.dumps({{
    "template compiled": feedback.exporter()._template_cached is not None,
    "bertlab modules": sorted(module.__name__ for module in reference_copies.reference_modules()),
    "dtensor imported": "torch.distributed.tensor" in sys.modules or not torch.distributed.is_available(),
    "checks modules": sorted(name for name in sys.modules if name.count(".") == 2
                             and name.startswith("autograder.checks.") and not name.endswith(".framework")),
}}))
"""


def test_the_workers_server_imports_and_renders_once_what_every_job_would():
    assert WORKER_MODULES[-1] == "autograder.worker_preload"
    server = subprocess.run([sys.executable, "-c", SERVER], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert server.returncode == 0 and server.stderr == "", server.stderr
    state = json.loads(server.stdout)
    bertlab = sorted(f"bertlab.{path.stem}" for path in (REPO / "bertlab").glob("*.py")
                     if not path.stem.startswith("_"))
    checks = sorted(f"autograder.checks.{path.stem}" for path in (REPO / "autograder" / "checks").glob("*.py")
                    if not path.stem.startswith("_"))
    assert state == {"template compiled": True, "bertlab modules": bertlab, "dtensor imported": True,
                     "checks modules": checks}


WORKER = """
import gc, multiprocessing, pickle, sys
from autograder.job import work
receiver, sender = multiprocessing.Pipe(duplex=False)
work(pickle.loads(sys.stdin.buffer.read()), sender)
status, result = receiver.recv()
print(status, result.tests[0].cause, gc.get_freeze_count(), ",".join(sorted(result.seconds)),
      result.seconds["setup"] >= 0)
"""


def test_a_worker_keeps_the_collector_off_what_it_starts_with(tmp_path):
    chapter = load_chapters(REPO)["01_attention"]
    (tmp_path / "files").mkdir()
    job = Job(student="alice", chapter=chapter, origin="alice.ipynb", timestamp="2026-11-20T10:00:00+00:00",
              fingerprint="", seed=1, submitted="", problem="not a notebook", notes=(),
              folder=JobFolder(tmp_path / "job"), chapter_source=str(REPO / "solutions" / "01_attention"),
              chapter_files=str(tmp_path / "files"), limits=Limits(), sandbox=SandboxOptions(isolate=True),
              references={})
    worker = subprocess.run([sys.executable, "-c", WORKER], input=pickle.dumps(job), capture_output=True, cwd=REPO,
                            timeout=300)
    status, cause, frozen, phases, setup_counted = worker.stdout.decode().split()
    assert (status, cause) == ("ok", "unreadable") and int(frozen) > 100_000  # PyTorch's objects, the grader's
    assert (phases, setup_counted) == ("feedback,run,setup,total", "True")  # its time before the grading too
