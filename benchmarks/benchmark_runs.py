"""What the fine-tuning benchmarks share: resumable stages, a summary over seeds, the machine's record.

``bert_results.py`` (MR, the learning curve, distillation) and ``task_results.py`` (sentence pairs,
tagging, spans) import this module; run them as scripts (``python benchmarks/NAME.py``), which puts
this folder on the import path.
"""

import argparse
import json
import os
import platform
import statistics
import time
import warnings
from pathlib import Path

import torch

from bertlab.utils import autocast_dtype


class Stages:
    """The named stages of a run, each finished one kept in ``folder/stages.json`` with its wall-clock
    seconds and its ``identity``: the course BERT's weights, the data and the settings that stage
    depends on. A run resumes after its last finished stage, and a run with other settings computes
    again only the stages that depend on them."""

    def __init__(self, folder: Path, common: dict):
        self.path = folder / "stages.json"
        self.common = common
        saved = json.loads(self.path.read_text()) if self.path.is_file() else {}
        self.saved: dict[str, dict] = saved.get("stages", {})  # a file of an older format: nothing to reuse
        self.seconds: dict[str, float] = {}

    def run(self, name: str, compute, **depends_on) -> dict:
        """``compute()``'s record (a JSON-serialisable dict), or the record of an earlier run of this
        stage with the same identity (``depends_on``, the settings it reads, and the common identity)."""
        identity = {**self.common, **depends_on}
        saved = self.saved.get(name)
        if saved is not None and saved["identity"] == identity:
            print(f"== {name}: finished by an earlier run ({saved['seconds']:.0f} s)", flush=True)
        else:
            print(f"\n== {name}", flush=True)
            start = time.perf_counter()
            saved = {"identity": identity, "record": compute(), "seconds": round(time.perf_counter() - start, 1)}
            self.saved[name] = saved
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps({"stages": self.saved}, indent=2) + "\n")
            print(f"== {name}: {saved['seconds']:.0f} s", flush=True)
        self.seconds[name] = saved["seconds"]
        return saved["record"]


def quietly(function, *args, **kwargs):
    """``function(*args, **kwargs)`` without the expected warnings of ``from_pretrained`` (a new head)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return function(*args, **kwargs)


def summary(scores: list[float]) -> dict:
    """One score of several seeds' runs: each seed's (``by_seed``, in the order of the seeds), their mean
    and their sample standard deviation (0 for one seed)."""
    return {"by_seed": scores, "mean": statistics.mean(scores),
            "std": statistics.stdev(scores) if len(scores) > 1 else 0.0}


def computed_in(device: torch.device, args: argparse.Namespace) -> str:
    """The dtype the forward passes compute in, "float32" where autocast is off: every stage depends on it."""
    dtype = autocast_dtype(device, args.precision)
    return "float32" if dtype is None else str(dtype).removeprefix("torch.")


def machine(device: torch.device) -> dict:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    return {"device": str(device), "device_name": name, "cpu_count": os.cpu_count(), "threads": torch.get_num_threads(),
            "torch": torch.__version__, "python": platform.python_version(),
            "load_average_at_end": os.getloadavg() if hasattr(os, "getloadavg") else None}


def cpu_name() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"
