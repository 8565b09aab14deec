"""The recorded results of the course's benchmarks, as the chapters read them (``bertlab/recorded.py``), and
the paired significance of a recorded comparison (``benchmarks/benchmark_runs.py``)."""

import argparse
import dataclasses
import fnmatch
import json
import random
import re
import subprocess
import sys
import tomllib

import pytest
import torch

from bertlab import recorded
from tests.script_helpers import benchmark_script
from tests.conftest import REPO_ROOT


# --------------------------------------------------------------------------------------------------
# The recorded results the book reads
# --------------------------------------------------------------------------------------------------

REQUIRED = {"command": [], "classification": ["course_bert", "random_init"]}


def write_results(folder, text):
    results = folder / "benchmarks" / "results"
    results.mkdir(parents=True)
    (results / "bert-cpu.json").write_text(text)
    return results / "bert-cpu.json"


def test_recorded_results_are_found_from_a_folder_below_the_repository(tmp_path):
    write_results(tmp_path, '{"command": "python x", "classification": {"course_bert": 1, "random_init": 2}}')
    chapter = tmp_path / "chapters" / "08_finetuning"
    chapter.mkdir(parents=True)
    record = recorded.read_recorded_results("bert-cpu.json", REQUIRED, start=chapter)
    assert record["classification"]["random_init"] == 2


@pytest.mark.parametrize("text, reason", [
    ('{"command": ', "could not be read"),
    ("[1, 2]", "holds a list, not the record of a run"),
    ('{"classification": {"course_bert": 1}}', "lacks command, classification.random_init: it was written by an older"),
    ('{"command": "x", "classification": 3}', "lacks classification.course_bert, classification.random_init"),
])
def test_recorded_results_that_cannot_be_shown_say_why_in_one_line(tmp_path, text, reason):
    write_results(tmp_path, text)
    with pytest.raises(recorded.RecordedResultsUnavailable) as unavailable:
        recorded.read_recorded_results("bert-cpu.json", REQUIRED, start=tmp_path)
    assert reason in str(unavailable.value) and "\n" not in str(unavailable.value)


# --------------------------------------------------------------------------------------------------
# The recorded runs, shipped with the package (bertlab.recorded)
# --------------------------------------------------------------------------------------------------

RESULTS = REPO_ROOT / "benchmarks" / "results"
PACKAGED = REPO_ROOT / "bertlab" / "recorded_results"
WRITTEN_RECORDS = [name for name in recorded.CHAPTER_RECORDS if (RESULTS / name).is_file()]  # the others: not yet


@pytest.mark.parametrize("name", recorded.CHAPTER_RECORDS)
def test_each_record_a_chapter_reads_ships_as_a_copy_of_benchmarks_results(name):
    """benchmarks/results/ is the one source of the records; the package ships a byte-for-byte copy of each
    one the chapters read, from the day its run has written it."""
    if not (RESULTS / name).is_file():
        assert not (PACKAGED / name).exists(), f"bertlab/recorded_results/{name} is a copy of no record"
        pytest.skip(f"benchmarks/results/{name} is not recorded yet: the package ships it once its run writes it")
    assert (PACKAGED / name).is_file() and (PACKAGED / name).read_bytes() == (RESULTS / name).read_bytes(), (
        f"bertlab/recorded_results/{name} is missing or differs from its source: cp benchmarks/results/{name} "
        "bertlab/recorded_results/")


def test_the_package_ships_no_record_the_chapters_do_not_read():
    shipped = {path.name for path in PACKAGED.iterdir() if path.name != "__pycache__"}
    assert shipped <= set(recorded.CHAPTER_RECORDS), sorted(shipped - set(recorded.CHAPTER_RECORDS))


def test_the_package_data_holds_the_records():
    settings = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = settings["package-data"]["bertlab"]
    for name in recorded.CHAPTER_RECORDS:
        assert any(fnmatch.fnmatch(f"{recorded.PACKAGED_FOLDER}/{name}", pattern) for pattern in patterns), name


def test_a_record_is_read_from_the_repository_above_else_from_the_package(tmp_path):
    repository = tmp_path / "course"
    (repository / "benchmarks" / "results").mkdir(parents=True)
    (repository / "benchmarks" / "results" / "tasks-cpu.json").write_text('{"command": "a newer run", "tasks": {}}')
    chapter = repository / "chapters" / "10_tasks"
    chapter.mkdir(parents=True)
    assert recorded.read_recorded_results("tasks-cpu.json", {"tasks": []}, start=chapter)["command"] == "a newer run"
    elsewhere = tmp_path / "colab"
    elsewhere.mkdir()
    packaged = recorded.packaged_results() / "tasks-cpu.json"
    assert recorded.recorded_results_file("tasks-cpu.json", start=elsewhere) == packaged
    shipped = recorded.read_recorded_results("tasks-cpu.json", {"tasks": ["pairs"]}, start=elsewhere)
    assert shipped == json.loads((RESULTS / "tasks-cpu.json").read_text())
    with pytest.raises(recorded.RecordedResultsUnavailable, match=r"lacks tasks.nothing: it was written by an older"):
        recorded.read_recorded_results("tasks-cpu.json", {"tasks": ["nothing"]}, start=elsewhere)
    with pytest.raises(recorded.RecordedResultsUnavailable, match="No recorded results here: benchmarks/results/x.json "
                                                                 "is neither in a course repository"):
        recorded.read_recorded_results("x.json", {}, start=elsewhere)


READ_OUTSIDE = """
import sys

from bertlab.pretraining import read_course_bert_results
from bertlab.recorded import describe_checks, read_recorded_results, recorded_results_file

for name in sys.argv[1:]:  # the records written so far
    print(name, recorded_results_file(name), sorted(read_recorded_results(name, {})))
tasks = read_course_bert_results("tasks-cpu.json", {"tasks": [], "checks": []})
for name, task in tasks["tasks"].items():
    print(name, task["dataset"], round(100 * task["course_bert"]["test"][task["metric"]]["mean"], 1))
print("\\n".join(describe_checks(tasks)))
"""


def test_the_records_are_read_outside_the_repository(tmp_path):
    """As on Colab, or after pip install: a Python started in a folder of no course repository finds every
    record the chapters read (each one written so far) in the package, and the records of the course BERT's
    runs match its weights."""
    run = subprocess.run([sys.executable, "-c", READ_OUTSIDE, *WRITTEN_RECORDS], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert run.returncode == 0, run.stderr
    tasks = json.loads((RESULTS / "tasks-cpu.json").read_text())
    for name in WRITTEN_RECORDS:
        assert f"{name} {PACKAGED / name} " in run.stdout, run.stdout
    for name, task in tasks["tasks"].items():
        score = 100 * task["course_bert"]["test"][task["metric"]]["mean"]
        assert f"{name} {task['dataset']} {round(score, 1)}" in run.stdout, run.stdout
    # the expectations as the repository's record gives them: the paired tests it computed, and the others
    assert run.stdout.endswith("\n".join(recorded.describe_checks(tasks)) + "\n"), run.stdout
    untested = [check for check in recorded.recorded_checks(tasks) if check.significance is None]
    assert run.stdout.count("; significance: not computed\n") == len(untested), run.stdout


def reading_notebook(chapter: str, reading: list[str]):
    """The cells of the released chapter that print its recorded runs (``reading``, by id), after its setup
    cell and the imports and function definitions of the code cells before them: a notebook that needs no
    data and trains nothing."""
    import ast

    import nbformat

    notebook = nbformat.read(REPO_ROOT / "chapters" / chapter / f"{chapter}.ipynb", as_version=4)
    cells = {cell.get("id"): cell for cell in notebook.cells}
    first = notebook.cells.index(cells[reading[0]])
    definitions = []
    for cell in notebook.cells[:first]:
        if cell.cell_type != "code" or cell.get("id") in ("install", "setup") or "nbgrader" in cell.metadata:
            continue
        tree = ast.parse(cell.source)
        definitions += [ast.get_source_segment(cell.source, node) for node in tree.body
                        if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef))]
    sources = [cells["setup"].source, "\n\n".join(definitions), *(cells[cell_id].source for cell_id in reading)]
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in sources],
                                    metadata=notebook.metadata)


def printed(notebook) -> str:
    """Everything the executed cells show: their streams and the text, Markdown or HTML of their displays."""
    parts = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.output_type == "stream":
                parts.append(output.text)
            elif output.output_type in ("display_data", "execute_result"):
                data = output.data
                parts.append(data.get("text/markdown") or data.get("text/html") or data.get("text/plain", ""))
            elif output.output_type == "error":
                parts.append(f"{output.ename}: {output.evalue}")
    return "\n".join(parts)


def recorded_findings() -> str:
    """The part of chapter 10's reading that states what the recorded runs found, task by task."""
    import nbformat

    notebook = nbformat.read(REPO_ROOT / "chapters" / "10_tasks" / "10_tasks.ipynb", as_version=4)
    reading = next(cell.source for cell in notebook.cells if cell.get("id") == "recorded-reading")
    return reading[reading.index("On SNLI, the record answers"):reading.index("Five things hold")]


@pytest.mark.slow
@pytest.mark.parametrize("chapter, reading", [
    ("08_finetuning", ["recorded-results", "learning-curve"]),
    ("09_distillation", ["recorded-distillation"]),
    ("10_tasks", ["recorded-results", "domain-results"]),
])
def test_a_chapter_run_outside_the_repository_prints_the_recorded_tables(chapter, reading, tmp_path):
    """The reading cells of a released chapter, run by a Jupyter kernel in a folder of no repository (as
    on Colab, with the package installed from the clone), print the recorded tables and expectations."""
    from nbclient import NotebookClient

    notebook = reading_notebook(chapter, reading)
    NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}},
                   allow_errors=True).execute()
    shown = printed(notebook)
    assert "No recorded results" not in shown and "Error" not in shown, shown
    if chapter == "10_tasks":
        record, domain = (json.loads((RESULTS / name).read_text()) for name in ("tasks-cpu.json", "task-domain.json"))
        snli = record["tasks"]["pairs"]
        expected = [f"made by: {record['command']}", f"SNLI 1.0 ({snli['train']:,} training",
                    *(f"{name:<8} {100 * scores['model']['accuracy']:21.1f}%"
                      for name, scores in domain["domains"].items()),
                    "the expectations, on the whole test split:",
                    "course BERT, hypothesis alone", "random weights, hypothesis alone",
                    *(f"learning curve, {curve.kind}" for curve in recorded.LEARNING_CURVES),
                    # each point's paired tests, under its curve
                    *(f"  - {check.describe()}" for check in recorded.recorded_checks(record)
                      for curve in recorded.LEARNING_CURVES for point in snli[curve.key]
                      if check.subject == curve.subject("pairs", point["train"]))]
        if "longer_training" in snli:  # both BERTs again, fine-tuned longer
            epochs = snli["longer_training"]["epochs"]
            expected += [f"course BERT, {epochs} epochs", f"random weights, hypothesis alone, {epochs} epochs"]
        if "answer_words" in record["tasks"].get("spans", {}).get("course_bert", {}):  # how long the answers are
            expected.append("answers' mean length in words: gold (shortest of each question) ")
        # the reading's findings quote the numbers the cells print from the record that ships, each as a whole
        # number of the output (58.2 is not found in 158.27)
        for number in re.findall(r"\d+\.\d+", recorded_findings()):
            assert re.search(rf"(?<![\d.]){re.escape(number)}(?![\d])", shown), (number, shown)
        pending = [name for name in ("pairs", "tagging", "spans") if name not in record["tasks"]]  # MR is chapter 8's
        assert ("not recorded yet" in shown) == bool(pending), shown
    else:
        record = json.loads((RESULTS / "bert-cpu.json").read_text())
        if chapter == "08_finetuning":
            course_bert = record["classification"]["course_bert"]
            expected = [f"made by: {record['command']}",
                        f"{100 * course_bert['mean']:.1f}% ± {100 * course_bert['std']:.1f}",
                        "pretrained - random weights, by number of labelled examples: "]
        elif "by_seed" in record["distillation"]["distilled"]:  # every student over the seeds, paired tests
            text = record["distillation"]["teacher_labelled_text"]
            expected = [f"made by: {record['command']}", "distilled student, 2 layers",
                        f"over {len(record['distillation']['distilled']['by_seed'])} seeds: distilled student",
                        f"with {text['sentences']:,} sentences of unlabelled IMDB reviews labelled by the teacher:"]
        else:
            expected = [f"made by: {record['command']}", "distilled student, 2 layers",
                        "the distilled student above the same student on the labels alone (one seed each)"]
    without_tests = any(check.significance is None and check.untestable is None
                        for check in recorded.recorded_checks(record))
    line = f"significance: not computed (no per-example predictions in this record; re-run {record['command']}"
    assert (line in shown) == without_tests, shown
    for text in expected:
        assert text in shown, (text, shown)


def chapter_11_lines() -> list[str]:
    """What chapter 11's reading cells print of each record it reads: a line of its table where the record
    is written, else the line that says it is not there."""
    generation = json.loads((RESULTS / "generation-cpu.json").read_text())
    lines = [f"recomputing / cached: {generation['ratio_recompute_over_cached']:.1f}x"]
    tables = {"course-gpt.json": lambda record: [f"recorded by {record['command']} on {record['date'][:10]}: ",
                                                 "the course GPT minus the Kneser-Ney bigram: ",
                                                 "the course GPT, the left side only"],
              "bert-vs-gpt-cpu.json": lambda record: [f"made by: {record['command']}\n", "BERT - GPT, in points: ",
                                                      "GPT above BERT: "]}
    for name, table in tables.items():
        if name in WRITTEN_RECORDS:
            lines += table(json.loads((RESULTS / name).read_text()))
        else:
            lines.append(f"No recorded results here: benchmarks/results/{name} is neither in a course repository")
    return lines


@pytest.mark.slow
def test_chapter_11_run_outside_the_repository_prints_each_record_or_why_it_is_not_there(tmp_path):
    """Chapter 11 reads records that its runs have not all written yet: run outside the repository, each
    reading cell prints its record's table from the package, or the line that says the record is missing."""
    from nbclient import NotebookClient

    notebook = reading_notebook("11_gpt", ["cache-timing", "course-gpt-perplexity", "course-gpt-masked-words",
                                           "bert-vs-gpt"])
    NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}},
                   allow_errors=True).execute()
    shown = printed(notebook)
    assert "Error" not in shown, shown
    for text in chapter_11_lines():
        assert text in shown, (text, shown)


# --------------------------------------------------------------------------------------------------
# The paired significance of a recorded comparison (benchmarks/benchmark_runs.py)
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def benchmark_runs():
    return benchmark_script("benchmark_runs")


@pytest.mark.parametrize("script", ["bert_throughput", "generation"])
def test_a_timing_benchmark_refuses_a_device_that_is_none_in_one_line(script, capsys):
    assert benchmark_script(script).main(["--device", "nonsense"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: device 'nonsense' is not a device") and error.count("\n") == 1, error


def test_a_device_that_is_none_here_ends_a_script_with_its_parser_error(benchmark_runs, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as ended:
        benchmark_runs.device_or_exit(argparse.ArgumentParser(prog="script.py"), "cuda")
    assert ended.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "script.py: error: device 'cuda' was asked for, but CUDA is not available here")
    assert benchmark_runs.device_or_exit(argparse.ArgumentParser(), "cpu") == torch.device("cpu")


def test_paired_bootstrap_by_hand(benchmark_runs):
    # A is right on one of 4 examples, B on none: a resample's difference is K / 4, K ~ Binomial(4, 1/4), with
    # P(K <= 2) = 0.949 and P(K <= 3) = 0.996; so the 2.5th percentile is 0 and the 97.5th 3/4.
    assert benchmark_runs.paired_bootstrap([1, 0, 0, 0], [0, 0, 0, 0]) == (0.25, 0.0, 0.75)
    assert benchmark_runs.paired_bootstrap([1, 0, 1], [1, 0, 1]) == (0.0, 0.0, 0.0)
    # paired: B is A less 0.1 on every example, however much the examples differ: every resample says 0.1
    difference, low, high = benchmark_runs.paired_bootstrap([0.9, 0.1, 0.5, 0.3], [0.8, 0.0, 0.4, 0.2])
    assert (difference, low, high) == pytest.approx((0.1, 0.1, 0.1))
    # weighted: the words of 2 sentences, 3 of 4 and 1 of 2 right under A, 2 of 4 and 1 of 2 under B
    assert benchmark_runs.paired_bootstrap([3, 1], [2, 1], weights=[4, 2])[0] == pytest.approx(1 / 6)
    with pytest.raises(ValueError, match="one score per example"):
        benchmark_runs.paired_bootstrap([1, 0], [1])


def test_paired_bootstrap_is_seeded_and_its_interval_widens_with_the_confidence(benchmark_runs):
    rng = random.Random(0)
    a, b = [rng.random() < 0.7 for _ in range(500)], [rng.random() < 0.6 for _ in range(500)]
    first, again = benchmark_runs.paired_bootstrap(a, b, seed=3), benchmark_runs.paired_bootstrap(a, b, seed=3)
    assert first == again and first[1] < first[0] < first[2]
    narrower = benchmark_runs.paired_bootstrap(a, b, seed=3, confidence=0.5)
    assert first[1] < narrower[1] < narrower[2] < first[2]


def test_exact_mcnemar_agrees_with_scipy(benchmark_runs):
    from scipy.stats import binomtest

    rng = random.Random(0)
    drawn = [(rng.randint(0, 60), rng.randint(0, 60)) for _ in range(30)]
    for only_a, only_b in [(0, 0), (3, 1), (1, 3), (0, 7), (10, 10), (40, 20), *drawn]:
        both = rng.randint(0, 20)
        correct_a = [True] * only_a + [False] * only_b + [True] * both + [False] * 5
        correct_b = [False] * only_a + [True] * only_b + [True] * both + [False] * 5
        b, c, p = benchmark_runs.exact_mcnemar(correct_a, correct_b)
        assert (b, c) == (only_a, only_b)
        expected = 1.0 if b + c == 0 else binomtest(b, b + c, 0.5).pvalue
        assert p == pytest.approx(expected, rel=1e-9), (b, c)
    with pytest.raises(ValueError, match="scored on 2 and 1 examples"):
        benchmark_runs.exact_mcnemar([1, 0], [1])


def test_paired_comparison_of_seeds_against_a_baseline(benchmark_runs):
    rng = random.Random(1)
    labels_right = [rng.random() < 0.6 for _ in range(400)]  # a baseline, one run
    seeds = [[right or rng.random() < 0.5 for right in labels_right] for _ in range(3)]  # about 20 points above it
    significance = benchmark_runs.paired_comparison(seeds, [labels_right], accuracy=True)
    assert significance.significant and significance.examples == 400 and significance.resamples == 10_000
    assert 10 < significance.low < significance.difference < significance.high < 30
    assert significance.mcnemar_p == max(benchmark_runs.exact_mcnemar(seed, labels_right)[2] for seed in seeds) < 1e-6
    assert not benchmark_runs.paired_comparison(seeds, [labels_right], margin=40.0, accuracy=True).significant
    backwards = benchmark_runs.paired_comparison([labels_right], seeds, accuracy=True)
    assert backwards.high < 0 and not backwards.significant and backwards.reverse_significant
    assert not significance.reverse_significant
    one_seed_backwards = benchmark_runs.paired_comparison([labels_right], seeds[:1] + [labels_right], accuracy=True)
    assert one_seed_backwards.high < 0 and not one_seed_backwards.reverse_significant  # not for every seed
    # F1 of questions: no McNemar test, the interval alone
    f1 = benchmark_runs.paired_comparison([[0.5, 1.0, 0.2, 0.0] * 50], [[0.4, 1.0, 0.0, 0.0] * 50])
    assert f1.mcnemar_p is None and f1.significant and f1.difference == pytest.approx(7.5)
    f1_backwards = benchmark_runs.paired_comparison([[0.4, 1.0, 0.0, 0.0] * 50], [[0.5, 1.0, 0.2, 0.0] * 50])
    assert f1_backwards.reverse_significant and not f1_backwards.significant


def test_an_expectation_holds_only_when_its_paired_test_finds_it(benchmark_runs):
    significant = recorded.Significance(difference=4.2, low=3.1, high=5.3, confidence=0.95, resamples=10_000,
                                        examples=2077, mcnemar_p=1e-5, significant=True)
    holds = recorded.RecordedCheck.from_record(benchmark_runs.expectation(
        "tagging: course BERT above the same BERT from random weights (accuracy)", "94.9 vs 90.7 (+4.2)", True,
        significant))
    assert holds.holds is True
    assert holds.describe() == (
        "holds: tagging: course BERT above the same BERT from random weights (accuracy): 94.9 vs 90.7 (+4.2); "
        "difference +4.2, 95% interval [+3.1, +5.3] (paired bootstrap over 2,077 test examples, 10,000 resamples); "
        "exact McNemar p = 1e-05")
    unsure = dataclasses.replace(significant, low=-0.4, mcnemar_p=0.2, significant=False)
    record = benchmark_runs.expectation("pairs: above", "57.8 vs 56.8 (+1.0)", True, unsure)
    assert record["holds"] is False and record["met_by_scores"] is True
    assert recorded.RecordedCheck.from_record(record).describe().startswith("not significant at 95%: pairs: above")
    untested = benchmark_runs.expectation("pairs: above", "57.8 vs 56.8 (+1.0)", True, None)
    assert untested["holds"] is None and recorded.RecordedCheck.from_record(untested).holds is None
    assert recorded.describe_checks({"command": "python benchmarks/task_results.py", "checks": [record, untested]}) == [
        "- not significant at 95%: pairs: above: 57.8 vs 56.8 (+1.0); difference +4.2, 95% interval [-0.4, +5.3] "
        "(paired bootstrap over 2,077 test examples, 10,000 resamples); exact McNemar p = 0.2",
        "- met by the recorded scores: pairs: above: 57.8 vs 56.8 (+1.0); significance: not computed",
        "significance: not computed (no per-example predictions in this record; re-run "
        "python benchmarks/task_results.py to compute it)"]
    assert recorded.describe_checks({"command": "c", "checks": [record]})[-1].startswith("- not significant")
    below = dataclasses.replace(significant, difference=-3.1, low=-4.0, high=-2.2, significant=False,
                                reverse_significant=True)
    describe = [recorded.RecordedCheck.from_record(benchmark_runs.expectation(
        "pairs: above", "55.3 vs 58.4 (-3.1)", False, test)).describe() for test in (
        below, dataclasses.replace(below, high=0.3, reverse_significant=False),
        dataclasses.replace(below, high=0.3, reverse_significant=None))]
    assert [line.split(": pairs")[0] for line in describe] == [
        "does NOT hold: the reverse is significant at 95%",
        "does NOT hold (the reverse is not significant at 95% either)", "does NOT hold"]


@pytest.mark.parametrize("name", ["bert-cpu.json", "tasks-cpu.json"])
def test_the_shipped_records_claim_no_significance_they_did_not_compute(name):
    """An expectation holds only where the record computed its paired test and found it significant; one
    without a test says why (a timing, a score measured once) or that it was not computed, and then the
    lines end with how to compute it."""
    record = recorded.read_recorded_results(name, {"checks": [], "command": []})
    checks = recorded.recorded_checks(record)
    lines = recorded.describe_checks(record)
    for check, line in zip(checks, lines):
        if check.significance is None:
            assert check.holds is None, line
            assert line.startswith(("- met by the recorded scores: ", "- NOT met by the recorded scores: ")), line
            assert line.endswith("; significance: not computed" if check.untestable is None
                                 else f"; significance: none, {check.untestable}"), line
        else:
            assert check.holds == (check.met_by_scores and check.significance.significant), line
            assert line.endswith(check.significance.describe()), line
            reverse = check.significance.reverse_significant
            verdict = ("- holds: " if check.holds else "- not significant at 95%: " if check.met_by_scores
                       else "- does NOT hold: the reverse is significant at 95%: " if reverse
                       else "- does NOT hold: " if reverse is None  # a record made before the reverse was tested
                       else "- does NOT hold (the reverse is not significant at 95% either): ")
            assert line.startswith(verdict), line
    untested = any(check.significance is None and check.untestable is None for check in checks)
    assert len(lines) == len(checks) + untested
    if untested:
        assert lines[-1] == (f"significance: not computed (no per-example predictions in this record; re-run "
                             f"{record['command']} to compute it)")


@pytest.fixture(scope="module")
def bert_results():
    return benchmark_script("bert_results")


def _correct(accuracy: float, n: int, seed: int) -> list[int]:
    """n results of 1 and 0, the first round(accuracy * n) of them right, in a shuffled order."""
    results = [1] * round(accuracy * n) + [0] * (n - round(accuracy * n))
    random.Random(seed).shuffle(results)
    return results


def _seeds(accuracy: float, n: int = 400, first_seed: int = 0) -> dict:
    runs = [_correct(accuracy, n, first_seed + seed) for seed in range(3)]
    return {"mean": accuracy, "by_seed": [accuracy] * 3, "std": 0.0, "learning_rate": 1e-3,
            "test_correct_by_seed": runs}


def _mr_record(kept: bool) -> dict:
    """A record of bert_results.py with every score made up; ``kept``: with the per-example results."""
    def strip(record: dict) -> dict:
        return record if kept else {key: value for key, value in record.items() if not key.startswith("test_correct")}

    tfidf = {"C": 1.0, "test_accuracy": 0.79, "test_correct": _correct(0.79, 400, 50)}
    return {
        "course_bert": None,
        "classification": {"course_bert": strip(_seeds(0.80)), "random_init": strip(_seeds(0.70, first_seed=10)),
                           "tfidf_logistic_regression": strip(tfidf), "course_bert_head_only": strip(_seeds(0.72))},
        "learning_curve": {"sizes": [250, 1000, 3000], "pretrained": [strip(_seeds(0.70)), strip(_seeds(0.74))],
                           "random_init": [strip(_seeds(0.60, first_seed=20)), strip(_seeds(0.72, first_seed=30))]},
        "distillation": {
            "comparison": [{"accuracy": 0.80, "percent_of_teacher": 100.0},
                           {"accuracy": 0.78, "percent_of_teacher": 97.5, "speedup": 1.9}],
            **({"teacher_test_correct": _correct(0.80, 400, 60)} if kept else {}),
            "distilled": strip({**_seeds(0.78, first_seed=70), "test_accuracy": 0.78}),
            "labels_alone": strip({**_seeds(0.78, first_seed=80), "test_accuracy": 0.78}),
            "teacher_labelled_text": {"sentences": 8000, "labels": 400, "few_labels": 250,
                                      "distilled_with_text": strip(_seeds(0.80, first_seed=90)),
                                      "few_labels_alone": strip(_seeds(0.60, first_seed=100)),
                                      "few_labels_distilled": strip(_seeds(0.62, first_seed=110)),
                                      "few_labels_distilled_with_text": strip(_seeds(0.75, first_seed=120))},
        },
    }


def test_mr_expectations_hold_only_when_their_paired_test_finds_them(bert_results):
    checks = {check.expectation: check for check in map(recorded.RecordedCheck.from_record,
                                                        bert_results.check_expectations(_mr_record(kept=True)))}
    assert checks["fine-tuned course BERT >= 3 points above the same BERT from random weights"].holds is True
    tfidf = checks["fine-tuned course BERT above a tf-idf uni+bigram logistic regression"]  # 80 vs 79 of 400
    assert tfidf.met_by_scores and tfidf.holds is False and tfidf.significance.low < 0 < tfidf.significance.high
    assert checks["with 250 labels, the course BERT >= 5 points above random weights"].holds is True
    assert checks["with 1000 labels, the course BERT >= 5 points above random weights"].met_by_scores is False
    assert checks["frozen encoder with a trained head >= 70%"].holds is False  # 72% of 400: not surely above 70%
    assert checks["half-depth student keeps >= 95% of the teacher's accuracy"].significance is not None
    alone = checks["the distilled student above the same student on the labels alone"]
    assert not alone.met_by_scores and alone.significance.mcnemar_p is not None
    speed = checks["half-depth student runs >= 1.6x faster (inference)"]
    assert speed.holds is None and speed.untestable == "a timing, not a score on test examples"
    lines = recorded.describe_checks({"command": "python x"}, [speed])
    assert lines == ["- met by the recorded scores: half-depth student runs >= 1.6x faster (inference): 1.90x; "
                     "significance: none, a timing, not a score on test examples"]  # no call to re-run: none applies
    with_text = "with teacher-labelled text, the distilled student above the labels-only student ({} labels)"
    assert checks[with_text.format(250)].holds is True  # 75% vs 60%
    assert checks[with_text.format(400)].met_by_scores and checks[with_text.format(400)].holds is False  # 80 vs 78


def test_an_mr_record_without_per_example_results_claims_no_significance(bert_results):
    checks = list(map(recorded.RecordedCheck.from_record, bert_results.check_expectations(_mr_record(kept=False))))
    assert checks and all(check.significance is None and check.holds is None for check in checks)
    table = "\n".join(bert_results.checks_table(bert_results.check_expectations(_mr_record(kept=False))))
    assert "| fine-tuned course BERT >= 3 points above the same BERT from random weights | " in table
    assert "| met, untested |" in table and "| yes |" not in table


@pytest.fixture(scope="module")
def task_results():
    return benchmark_script("task_results")


def _task_model(scores_by_seed: list[list[float]], weights=None, metric="accuracy") -> dict:
    means = [sum(scores) / (sum(weights) if weights else len(scores)) for scores in scores_by_seed]
    return {"learning_rate": 1e-3, "test": {metric: {"mean": sum(means) / len(means), "by_seed": means, "std": 0.0}},
            "test_examples_by_seed": [{"scores": scores, "weights": weights} for scores in scores_by_seed]}


def test_task_expectations_are_tested_on_the_examples_sentences_the_unit_of_tagging(task_results):
    weights = [random.Random(3).randint(5, 30) for _ in range(300)]  # words per sentence
    right = [[round(0.97 * words) for words in weights]] * 3  # 97% of each sentence's words
    baseline = [round(0.85 * words) for words in weights]
    tagging = {"metric": "accuracy", "course_bert": _task_model(right, weights),
               "random_init": _task_model([[round(0.5 * words) for words in weights]] * 3, weights),
               "baselines": {"most frequent tag of each word": {
                   "accuracy": sum(baseline) / sum(weights),
                   "test_examples": {"scores": baseline, "weights": weights}}}}
    pairs = {"metric": "accuracy", "course_bert": _task_model([_correct(0.58, 1000, seed) for seed in range(3)]),
             "random_init": _task_model([_correct(0.57, 1000, 10 + seed) for seed in range(3)]),
             "baselines": {"bag of words, hypothesis only": {"accuracy": 0.567,
                                                            "test_examples": {"scores": _correct(0.567, 1000, 99),
                                                                              "weights": None}}}}
    checks = {check.expectation: check for check in map(recorded.RecordedCheck.from_record,
                                                        task_results.check_expectations({"tagging": tagging,
                                                                                         "pairs": pairs}))}
    assert checks["tagging: course BERT above the same BERT from random weights (accuracy)"].holds is True
    tagged = checks["tagging: course BERT above the best simple baseline (most frequent tag of each word)"]
    assert tagged.holds is True and tagged.significance.examples == 300 and tagged.significance.mcnemar_p is None
    snli = checks["pairs: course BERT above the same BERT from random weights (accuracy)"]  # 58 vs 57 of 1,000
    assert snli.met_by_scores and snli.holds is False and snli.significance.mcnemar_p is not None

    stripped = task_results.without_example_results({"tagging": tagging})
    assert "test_examples_by_seed" not in stripped["tagging"]["course_bert"]
    assert all(check["significance"] is None for check in task_results.check_expectations(stripped))
