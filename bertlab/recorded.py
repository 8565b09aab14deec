"""The recorded results of the course's benchmarks, as the chapters read them, wherever they run.

The benchmark scripts write their records (JSON) to ``benchmarks/results/`` of the course repository:
that folder is the one source of truth, versioned with the code that made each record, and the
documented commands, ``benchmarks/RESULTS.md`` and the tests all name it. The records the chapters read
(:data:`CHAPTER_RECORDS`) also ship with the package, as byte-for-byte copies in
``bertlab/recorded_results/`` (package data), so that a chapter run outside the repository (on Colab,
or after ``pip install``) prints the same tables; ``tests/test_recorded.py`` fails when a copy differs from
its source, and says how to copy it again.

:func:`read_recorded_results` reads a record from the repository when it runs inside one (the source,
newer than any copy when a benchmark has just run) and from the package otherwise.
:class:`RecordedCheck` reads one expectation of a record and says whether it holds: a record made with
per-example predictions carries a paired :class:`Significance` test of it (``benchmarks/benchmark_runs.py``
computes it), and an expectation holds only when that test finds it at its confidence; a record without
them says that its significance was not computed, and how to compute it.
"""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path


class RecordedResultsUnavailable(Exception):
    """The recorded results of a benchmark cannot be shown; the message says why."""


#: The records that chapters read, shipped with the package: chapter 05 reads ``attention-cpu.json``,
#: chapter 07 ``course-bert.json``, chapter 08 ``mr-pooling.json`` and ``bert-cpu.json``, chapter 09
#: ``bert-cpu.json``, chapter 10 ``tasks-cpu.json`` and ``task-domain.json``, chapter 11
#: ``generation-cpu.json``, ``course-gpt.json`` and ``bert-vs-gpt-cpu.json``. A record is listed from the
#: day a chapter reads it, before its run has written it: until then the chapter prints why it is missing,
#: and the package ships its copy from the day ``benchmarks/results/`` holds it (``tests/test_recorded.py``
#: names each record not written yet, and fails for a written one that the package does not ship).
CHAPTER_RECORDS = ("attention-cpu.json", "course-bert.json", "mr-pooling.json", "bert-cpu.json", "tasks-cpu.json",
                   "task-domain.json", "generation-cpu.json", "course-gpt.json", "bert-vs-gpt-cpu.json")
RESULTS_FOLDER = Path("benchmarks") / "results"  # in the course repository
PACKAGED_FOLDER = "recorded_results"  # in the package


def packaged_results() -> Traversable:
    """The folder of the records shipped with the package (``bertlab/recorded_results``)."""
    return files("bertlab") / PACKAGED_FOLDER


def recorded_results_file(name: str, start: str | Path | None = None) -> Path | Traversable | None:
    """Where the record ``name`` is read from: ``benchmarks/results/<name>`` of the course repository that
    holds ``start`` (default: the current folder) or a folder above it; else its copy shipped with the
    package; None when neither exists."""
    start = Path.cwd() if start is None else Path(start).resolve()
    in_repository = (folder / RESULTS_FOLDER / name for folder in (start, *start.parents))
    found = next((path for path in in_repository if path.is_file()), None)
    if found is not None:
        return found
    packaged = packaged_results() / name
    return packaged if packaged.is_file() else None


def read_recorded_results(name: str, required: Mapping[str, Sequence[str]], start: str | Path | None = None) -> dict:
    """The recorded run ``name`` (JSON), from the course repository or the package
    (:func:`recorded_results_file`), as a dict.

    ``required`` ({key: [sub-keys]}) names the entries the reader uses, the layout of the script that
    wrote the file. Raises :class:`RecordedResultsUnavailable`, with one line saying why,
    when the record is nowhere, is unreadable, or lacks one of them (a run of an older script).
    """
    path = recorded_results_file(name, start)
    if path is None:
        raise RecordedResultsUnavailable(f"No recorded results here: {RESULTS_FOLDER / name} is neither in a course "
                                         "repository above this folder nor shipped with this installation of bertlab")
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise RecordedResultsUnavailable(f"{path} could not be read ({error})") from None
    if not isinstance(recorded, dict):
        raise RecordedResultsUnavailable(f"{path} holds a {type(recorded).__name__}, not the record of a run")
    missing = []
    for key, sub_keys in required.items():
        if key not in recorded:
            missing.append(key)
        else:
            missing += [f"{key}.{sub_key}" for sub_key in sub_keys
                        if not (isinstance(recorded[key], dict) and sub_key in recorded[key])]
    if missing:
        raise RecordedResultsUnavailable(f"{path} lacks {', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}: "
                                         f"it was written by an older version of the script")
    return recorded


# --------------------------------------------------------------------------------------------------
# The expectations of a record, and whether they hold
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Significance:
    """A paired test of "model A scores above model B" on the same n test examples.

    ``difference`` is score(A) - score(B) on all n examples, in points (of a percentage, or of SQuAD's
    F1); ``low`` and ``high`` bound its paired bootstrap interval at ``confidence`` (``resamples`` sets
    of n examples drawn with replacement, the same examples for both models: the percentiles
    (1 - confidence) / 2 and (1 + confidence) / 2 of the resampled differences). ``mcnemar_p`` is the
    exact McNemar test's two-sided p-value for accuracies (None for other scores): with b the examples
    only A gets right and c those only B does, p = min(1, 2 P(X <= min(b, c))) for X ~ Binomial(b + c,
    1/2). ``significant``: the expectation holds at ``confidence``, its margin below ``low`` (and,
    where computed, ``mcnemar_p`` below 1 - confidence with b > c). ``reverse_significant``: B scores
    above A by the same test, ``high`` below 0 (and ``mcnemar_p`` below 1 - confidence with c > b); None
    in records made before it was computed.
    """

    difference: float
    low: float
    high: float
    confidence: float
    resamples: int
    examples: int
    mcnemar_p: float | None
    significant: bool
    reverse_significant: bool | None = None

    def describe(self) -> str:
        """The difference, its interval and the McNemar p-value, in words."""
        mcnemar = "" if self.mcnemar_p is None else f"; exact McNemar p = {self.mcnemar_p:.2g}"
        return (f"difference {self.difference:+.1f}, {100 * self.confidence:.0f}% interval [{self.low:+.1f}, "
                f"{self.high:+.1f}] (paired bootstrap over {self.examples:,} test examples, {self.resamples:,} "
                f"resamples){mcnemar}")


@dataclass(frozen=True)
class RecordedCheck:
    """One expectation of a recorded run (an entry of its ``checks``).

    ``met_by_scores``: whether the record's scores (means over the seeds) meet it; ``significance``: its
    paired test, None in a record made without per-example predictions, or where no test over test
    examples applies (``untestable``, the reason: a timing, a score measured once). It holds only when
    significant.
    """

    expectation: str
    measured: str
    met_by_scores: bool
    significance: Significance | None
    untestable: str | None = None

    @property
    def subject(self) -> str:
        """What the expectation is about, the start of its name: a task (its whole test split), or a point of
        one of its learning curves (:meth:`LearningCurve.subject`)."""
        return self.expectation.split(": ", 1)[0]

    @classmethod
    def from_record(cls, check: Mapping) -> "RecordedCheck":
        """Read an entry of ``checks``: ``holds`` is whether the scores meet it, in records without
        ``met_by_scores`` (those made before significance was computed)."""
        significance = check.get("significance")
        return cls(check["expectation"], check["measured"], bool(check.get("met_by_scores", check["holds"])),
                   None if significance is None else Significance(**significance), check.get("untestable"))

    @property
    def holds(self) -> bool | None:
        """True or False when its significance was computed, None when it was not."""
        return None if self.significance is None else self.met_by_scores and self.significance.significant

    def describe(self) -> str:
        """One line: the verdict, the expectation, the numbers, and the paired test (or that there was none)."""
        if self.significance is None:
            verdict = "met by the recorded scores" if self.met_by_scores else "NOT met by the recorded scores"
            why = "not computed" if self.untestable is None else f"none, {self.untestable}"
            return f"{verdict}: {self.expectation}: {self.measured}; significance: {why}"
        confidence = f"{100 * self.significance.confidence:.0f}%"
        if self.holds:
            verdict = "holds"
        elif self.met_by_scores:
            verdict = f"not significant at {confidence}"
        elif self.significance.reverse_significant:
            verdict = f"does NOT hold: the reverse is significant at {confidence}"
        else:
            verdict = "does NOT hold" + ("" if self.significance.reverse_significant is None
                                         else f" (the reverse is not significant at {confidence} either)")
        return f"{verdict}: {self.expectation}: {self.measured}; {self.significance.describe()}"


def recorded_checks(recorded: Mapping) -> list[RecordedCheck]:
    """The expectations of a recorded run (its ``checks``), in order."""
    return [RecordedCheck.from_record(check) for check in recorded["checks"]]


def describe_checks(recorded: Mapping, checks: Sequence[RecordedCheck] | None = None) -> list[str]:
    """The lines that a chapter prints of the expectations ``checks`` of a recorded run (by default all of
    its ``checks``): one per expectation, then, when some had no paired test, why, and the command that
    computes it (the record's ``command``)."""
    checks = recorded_checks(recorded) if checks is None else checks
    lines = [f"- {check.describe()}" for check in checks]
    if any(check.significance is None and check.untestable is None for check in checks):
        lines.append(f"significance: not computed (no per-example predictions in this record; re-run "
                     f"{recorded['command']} to compute it)")
    return lines


# --------------------------------------------------------------------------------------------------
# The learning curves of a task's record (benchmarks/task_results.py writes them, chapter 10 reads them)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LearningCurve:
    """A learning curve of a task's record: the comparison made again on the first examples of the
    training split, its points (one record each, with its number of examples ``train``) under ``key``;
    ``kind`` says what the smaller sets keep equal to the whole split's runs."""

    key: str
    kind: str

    def subject(self, task: str, train: int) -> str:
        """The subject of the expectations of the point of ``train`` examples of ``task``'s curve
        (:attr:`RecordedCheck.subject`)."""
        return f"{task}, first {train} train ({self.kind})"


#: The learning curves of a task's record: the same epochs (fewer optimiser steps for fewer examples), and as
#: many optimiser steps as the whole split's runs (more epochs).
LEARNING_CURVES = (LearningCurve("learning_curve", "same epochs"),
                   LearningCurve("learning_curve_equal_steps", "same optimiser steps"))


def whole_split_comparisons(record: Mapping) -> list[tuple[str, Mapping]]:
    """The comparisons of a task's record on its whole training split, each with what its rows add to a
    model's name: the task as it is (""), on the hypothesis alone, and both again trained for more epochs
    (``longer_training``), those the record has."""
    longer = record.get("longer_training")
    comparisons = [("", record), (", hypothesis alone", record.get("hypothesis_only"))]
    if longer is not None:
        comparisons += [(f", {longer['epochs']} epochs", longer),
                        (f", hypothesis alone, {longer['epochs']} epochs", longer.get("hypothesis_only"))]
    return [(label, point) for label, point in comparisons if point is not None]
