"""What the fine-tuning benchmarks share: resumable stages, a summary over seeds, the paired significance
of a comparison, the machine's record.

``bert_results.py`` (MR, the learning curve, distillation) and ``task_results.py`` (sentence pairs,
tagging, spans) import this module; run them as scripts (``python benchmarks/NAME.py``), which puts
this folder on the import path.
"""

import argparse
import dataclasses
import json
import math
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from bertlab.data import load_sentiment
from bertlab.recorded import RecordedCheck, Significance
from bertlab.utils import autocast_dtype, resolve_device


#: The key under which stages.json files of an earlier scheme kept the layout of their records in every stage's
#: identity; identities are compared without it: whether a record holds what is read from it is asked of the record.
LAYOUT_KEY = "record_layout"

#: The results of the benchmarks (records read by the book and RESULTS.md).
RESULTS = Path(__file__).resolve().parent / "results"

#: Where a run keeps its finished stages by default: committed beside the records, so that a run longer than a
#: session goes on after its last finished stage in a fresh clone, with the same command.
STAGES = Path(__file__).resolve().parent / "stages"


def default_work_dir(name: str) -> Path:
    """The default folder of a run's stages: ``benchmarks/stages/NAME`` (git ignores the ``-quick`` runs' folders
    and any weights a run keeps there)."""
    return STAGES / name


def holding(*keys: str) -> Callable[[dict], bool]:
    """A test of a stage's record (:meth:`Stages.run`'s ``complete``): it holds every one of ``keys``."""
    return lambda record: all(key in record for key in keys)


class Stages:
    """The named stages of a run, each finished one kept in ``folder/stages.json`` with its wall-clock
    seconds and its ``identity``: the course BERT's weights, the data and the settings that stage
    depends on. A run resumes after its last finished stage, and a run with other settings computes
    again only the stages that depend on them. A stage whose record keeps its model's score on each test
    example (one number per example, in the order of the test split) lets :func:`paired_comparison` test
    a comparison from the stored stages, without training again; a stage stored by an older layout that
    lacks what is read from it now (``complete``) is computed again, alone, and the others are reused."""

    def __init__(self, folder: Path, common: dict):
        self.path = folder / "stages.json"
        self.common = common
        saved = json.loads(self.path.read_text()) if self.path.is_file() else {}
        self.saved: dict[str, dict] = saved.get("stages", {})  # a file of an older format: nothing to reuse
        self.seconds: dict[str, float] = {}

    def stored(self, name: str, **depends_on) -> dict | None:
        """The record of an earlier run of stage ``name`` with this identity (``depends_on`` and the common
        identity, whatever :data:`LAYOUT_KEY` it was stored with), complete or not; None if there is none."""
        saved = self.saved.get(name)
        if saved is None or _without_layout(saved["identity"]) != _without_layout({**self.common, **depends_on}):
            return None
        return saved["record"]

    def run(self, name: str, compute, complete: Callable[[dict], bool] | None = None, **depends_on) -> dict:
        """``compute()``'s record (a JSON-serialisable dict), or the record of an earlier run of this
        stage with the same identity (``depends_on``, the settings it reads, and the common identity) when
        ``complete(record)`` (default: any record): it holds what the caller reads from it. An earlier
        record that is not complete (an older layout, without each test example's result) is computed
        again."""
        earlier = self.stored(name, **depends_on)
        if earlier is not None and (complete is None or complete(earlier)):
            saved = self.saved[name]
            print(f"== {name}: finished by an earlier run ({saved['seconds']:.0f} s)", flush=True)
        else:
            reason = " (stored by an older layout, without what is read from it now: computing it again)" \
                if earlier is not None else ""
            print(f"\n== {name}{reason}", flush=True)
            start = time.perf_counter()
            saved = {"identity": {**self.common, **depends_on}, "record": compute(),
                     "seconds": round(time.perf_counter() - start, 1)}
            self.saved[name] = saved
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(_stages_json(self.saved))
            print(f"== {name}: {saved['seconds']:.0f} s", flush=True)
        self.seconds[name] = saved["seconds"]
        return saved["record"]


def _stages_json(stages: dict[str, dict]) -> str:
    """``{"stages": stages}`` as JSON with one stage per line: compact (a stage keeps one number per test
    example), and a stage added to a committed file is one line of its diff."""
    lines = ",\n".join(f"{json.dumps(name)}: {json.dumps(stage, separators=(',', ':'))}"
                        for name, stage in stages.items())
    return '{"stages": {\n' + lines + "\n}}\n"


def _without_layout(identity: dict) -> dict:
    return {key: value for key, value in identity.items() if key != LAYOUT_KEY}


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


# --------------------------------------------------------------------------------------------------
# Is "A above B" more than the luck of the test examples? Paired tests over the same examples
# --------------------------------------------------------------------------------------------------


def paired_bootstrap(
    scores_a: Sequence[float],
    scores_b: Sequence[float],
    weights: Sequence[float] | None = None,
    *,
    resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """The difference of two models' scores on the same n test examples, and its paired bootstrap interval.

    Example i has the score a_i under model A and b_i under model B (1 or 0 for a right or a wrong
    prediction, a question's F1, the words of a sentence tagged right) and a weight w_i (1 by default;
    the words of a sentence), and a model's score on a multiset S of examples is sum_S a_i / sum_S w_i,
    so the difference is

        D(S) = sum_{i in S} (a_i - b_i) / sum_{i in S} w_i .

    Each of the ``resamples`` draws n examples with replacement, S*, the same ones for both models (the
    pairing: what both models find hard cancels), and the interval is the (1 - c) / 2 and (1 + c) / 2
    percentiles of D(S*), c = ``confidence`` (Efron and Tibshirani's percentile interval). Seeded by
    ``seed``: the same inputs give the same interval. Returns (D(all examples), low, high), in the unit
    of the scores.
    """
    weights = [1.0] * len(scores_a) if weights is None else weights
    if not len(scores_a) == len(scores_b) == len(weights) > 0:
        raise ValueError(f"give one score per example to both models and one weight per example, got "
                         f"{len(scores_a)}, {len(scores_b)} and {len(weights)}")
    differences = np.asarray(scores_a, dtype=np.float64) - np.asarray(scores_b, dtype=np.float64)  # (n,)
    weights = np.asarray(weights, dtype=np.float64)
    rng = np.random.default_rng(seed)
    n, resampled = len(differences), []
    for start in range(0, resamples, 256):  # (chunk, n) counts at a time: 10,000 x n would not fit for large n
        counts = rng.multinomial(n, np.full(n, 1 / n), size=min(256, resamples - start))  # how often each example
        resampled.append(counts @ differences / (counts @ weights))
    low, high = np.quantile(np.concatenate(resampled), [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(differences.sum() / weights.sum()), float(low), float(high)


def exact_mcnemar(correct_a: Sequence[bool], correct_b: Sequence[bool]) -> tuple[int, int, float]:
    """The exact McNemar test of two classifiers' accuracies on the same examples.

    Only the examples on which they disagree count: b of them A gets right and B wrong, c the reverse.
    If both had the same accuracy, each disagreement would go either way with probability 1/2, so b
    follows Binomial(b + c, 1/2); the two-sided p-value is

        p = min(1, 2 sum_{k=0}^{min(b, c)} C(b + c, k) / 2^(b + c)),   1 when b + c = 0.

    Returns (b, c, p).
    """
    if len(correct_a) != len(correct_b):
        raise ValueError(f"the two models were scored on {len(correct_a)} and {len(correct_b)} examples")
    only_a = sum(bool(a) and not bool(b) for a, b in zip(correct_a, correct_b))
    only_b = sum(bool(b) and not bool(a) for a, b in zip(correct_a, correct_b))
    disagreements = only_a + only_b
    tail = sum(math.comb(disagreements, k) for k in range(min(only_a, only_b) + 1))
    return only_a, only_b, min(1.0, 2 * tail / 2 ** disagreements)


def paired_comparison(
    runs_a: Sequence[Sequence[float]],
    runs_b: Sequence[Sequence[float]],
    *,
    margin: float = 0.0,
    weights: Sequence[float] | None = None,
    accuracy: bool = False,
    scale: float = 100.0,
    resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Significance:
    """The paired test of "model A scores more than ``margin`` points above model B" on the same test
    examples, from their per-example scores (one list per run: a model trained with several seeds has
    several; a baseline one).

    A model's score on example i is the mean of its runs' scores there, and :func:`paired_bootstrap`
    gives the difference and its interval, multiplied by ``scale`` (100: fractions to points). With
    ``accuracy`` (scores of 1 and 0), :func:`exact_mcnemar` tests every pair of runs, each run of A
    against each run of B when one model has one run, the runs of the same seed otherwise, and the
    largest p-value is kept: the claim must hold for every seed. The expectation is significant when
    the interval lies above ``margin`` and, for accuracies, every pair has b > c with p below
    1 - ``confidence``; the reverse, B above A, when the interval lies below 0 and, for accuracies, every
    pair has c > b with p below 1 - ``confidence``. The interval covers the choice of the test examples,
    not of the training examples or the seed; the record's spread over the seeds covers the seed.
    """
    mean_a, mean_b = (np.mean(np.asarray(runs, dtype=np.float64), axis=0) for runs in (runs_a, runs_b))
    difference, low, high = (scale * value for value in paired_bootstrap(
        mean_a, mean_b, weights, resamples=resamples, confidence=confidence, seed=seed))
    significant, reverse_significant, mcnemar_p = low > margin, high < 0, None
    if accuracy:
        pairs = ([(a, b) for a in runs_a for b in runs_b] if 1 in (len(runs_a), len(runs_b))
                 else list(zip(runs_a, runs_b, strict=True)))
        tests = [exact_mcnemar(a, b) for a, b in pairs]
        mcnemar_p = max(p for _, _, p in tests)
        significant = significant and mcnemar_p < 1 - confidence and all(b > c for b, c, _ in tests)
        reverse_significant = (reverse_significant and mcnemar_p < 1 - confidence
                               and all(c > b for b, c, _ in tests))
    return Significance(difference=difference, low=low, high=high, confidence=confidence, resamples=resamples,
                        examples=len(mean_a), mcnemar_p=mcnemar_p, significant=bool(significant),
                        reverse_significant=bool(reverse_significant))


def expectation(name: str, measured: str, met_by_scores: bool, significance: Significance | None,
                untestable: str | None = None) -> dict:
    """An entry of a record's ``checks`` (``bertlab.recorded.RecordedCheck`` reads it): ``holds`` only when
    the scores meet it and its paired test finds it significant; None when no test could be made (no
    per-example scores; or ``untestable``, why none applies), so that a record never claims what it did
    not test."""
    holds = None if significance is None else met_by_scores and significance.significant
    return {"expectation": name, "measured": measured, "met_by_scores": met_by_scores,
            "significance": None if significance is None else dataclasses.asdict(significance), "holds": holds,
            **({} if untestable is None else {"untestable": untestable})}


#: The entries of stage records that hold a model's result on each test example: kept in the stage files, which
#: the paired tests read, and left out of the records that ship (:func:`without_example_results`).
EXAMPLE_RESULTS = frozenset({"test_correct", "test_correct_by_seed", "teacher_test_correct", "test_examples",
                             "test_examples_by_seed"})


def without_example_results(record):
    """``record`` (JSON data) without its :data:`EXAMPLE_RESULTS` entries, at any depth."""
    if isinstance(record, dict):
        return {key: without_example_results(value) for key, value in record.items() if key not in EXAMPLE_RESULTS}
    if isinstance(record, list):
        return [without_example_results(value) for value in record]
    return record


def checks_table(checks: Sequence[dict]) -> list[str]:
    """The Markdown lines of a record's expectations: each one's numbers, its paired test and whether it
    holds (yes only when significant; "met, untested" where no per-example results allowed a test)."""
    lines = ["| expectation | measured | paired test | holds |", "|---|---|---|---|"]
    for entry in checks:
        check = RecordedCheck.from_record(entry)
        test = check.significance.describe() if check.significance else check.untestable or "-"
        if check.holds is None:
            verdict = ("met" if check.untestable else "met, untested") if check.met_by_scores else "NO"
        else:
            verdict = "yes" if check.holds else "not significant" if check.met_by_scores else "NO"
        lines.append(f"| {check.expectation} | {check.measured} | {test} | {verdict} |")
    return lines


def computed_in(device: torch.device, args: argparse.Namespace) -> str:
    """The dtype the forward passes compute in, "float32" where autocast is off: every stage depends on it."""
    dtype = autocast_dtype(device, args.precision)
    return "float32" if dtype is None else str(dtype).removeprefix("torch.")


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work, so that a timer read next measures it (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def mr_splits(data_root: Path, max_train_examples: int | None):
    """MR's splits (``bertlab.data.load_sentiment``, 80/10/10 as in the chapters), the training split cut to
    its first ``max_train_examples`` (None: all), with a line saying their sizes and source."""
    splits = load_sentiment("mr", root=data_root)
    splits = dataclasses.replace(splits, train=splits.train[:max_train_examples])
    print(f"MR: {len(splits.train)} train, {len(splits.dev)} dev, {len(splits.test)} test ({splits.source})")
    return splits


def device_or_exit(parser: argparse.ArgumentParser, name: str) -> torch.device:
    """``resolve_device(name)``; a name that is no device here (``cuda`` without a GPU) ends the script
    with the parser's one-line error."""
    try:
        return resolve_device(name)
    except ValueError as error:
        parser.error(str(error))


def measured(measure: Callable[[argparse.Namespace], dict], markdown_table: Callable[[dict], str],
             args: argparse.Namespace) -> int:
    """A timing benchmark's end: ``measure(args)``, its table printed and its record written to ``args.out``
    (if given); exit status 2 with a one-line error for a bad option value (a ValueError of ``measure``)."""
    try:
        result = measure(args)
    except ValueError as error:  # a bad --device, or a size the model does not take
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(markdown_table(result))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


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
