"""The benchmark scripts' stages, end to end on made-up data: every expectation of the record they write is
tested from the per-example results kept in the stages (``benchmarks/benchmark_runs.py``), holds only when
significant, and a stage file of an older layout (without those results) is completed by computing again only
the stages whose test results are read. Training, evaluating and predicting are replaced by fakes whose
results are fixed in advance, so that each test takes seconds."""

import dataclasses
import json
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from bertlab import recorded
from bertlab.finetuning import ExampleScores, TaskEvaluation
from bertlab.task_data import SentencePair, TaskSplits
from tests.test_recorded import benchmark_script


def _right(share: float, n: int, seed: int) -> list[int]:
    """n results of 1 and 0, round(share * n) of them 1, in an order shuffled by ``seed``."""
    results = [1] * round(share * n) + [0] * (n - round(share * n))
    random.Random(seed).shuffle(results)
    return results


def _checks(out: Path) -> dict[str, recorded.RecordedCheck]:
    record = json.loads(out.read_text())
    return {check.expectation: check for check in recorded.recorded_checks(record)}


def _to_an_older_layout(stages: Path, example_results: frozenset[str]) -> int:
    """Rewrites ``stages`` (a stages.json) as the layout before per-example results: none of
    ``example_results`` in any record, and every identity tagged with no layout. Returns the stages."""
    def strip(value):
        if isinstance(value, dict):
            return {key: strip(item) for key, item in value.items() if key not in example_results}
        return [strip(item) for item in value] if isinstance(value, list) else value

    saved = json.loads(stages.read_text())["stages"]
    older = {name: {**stage, "identity": {key: value for key, value in stage["identity"].items()
                                          if key != "record_layout"}, "record": strip(stage["record"])}
             for name, stage in saved.items()}
    stages.write_text(json.dumps({"stages": older}))
    return len(older)


# --------------------------------------------------------------------------------------------------
# benchmarks/task_results.py: sentence pairs
# --------------------------------------------------------------------------------------------------

TEST_PAIRS = 300
# The fake BERTs' share of the test pairs right: the course BERT 90%, the same BERT reading the hypothesis
# alone 89% (met by the scores, not significant on 300 pairs), random weights 50%.
SHARE_RIGHT = {(True, False): 0.90, (True, True): 0.89, (False, False): 0.50, (False, True): 0.50}


@pytest.fixture()
def task_results(monkeypatch):
    module = benchmark_script("task_results")
    trained: list[tuple] = []  # (pretrained, learning rate, seed, hypothesis only) of every fine-tuning run
    evaluated: list[str] = []  # the split of every evaluation, in order

    def pairs(n: int, seed: int) -> list[SentencePair]:
        rng = random.Random(seed)
        return [SentencePair(f"a man {rng.choice(['runs', 'sits', 'eats'])} here",
                             f"someone {rng.choice(['moves', 'rests', 'dines'])}", rng.randrange(3)) for _ in range(n)]

    splits = TaskSplits("snli", pairs(60, 1), pairs(40, 2), pairs(TEST_PAIRS, 3), "made-up pairs")

    def fake_model(task, source, labels):
        return SimpleNamespace(pretrained=isinstance(source, Path), lr=None, seed=None)

    def fake_finetune(task, model, tokenizer, examples, *, recipe, **options):
        model.lr, model.seed = recipe.encoder_lr, recipe.seed
        trained.append((model.pretrained, recipe.encoder_lr, recipe.seed, examples[0].premise == ""))

    def fake_example_scores(task, model, tokenizer, examples, **options):
        alone = examples[0].premise == ""
        return ExampleScores(_right(SHARE_RIGHT[model.pretrained, alone], len(examples),
                                    seed=100 * model.pretrained + 10 * alone + model.seed))

    def fake_evaluation(task, model, tokenizer, examples, *, what, **options):  # the dev score peaks at 1e-3
        evaluated.append(what)
        right = fake_example_scores(task, model, tokenizer, examples)
        score = sum(right.scores) / len(right.scores) if what == "test" else 0.8 if model.lr == 1e-3 else 0.6
        predictions = torch.tensor([pair.label if hit else (pair.label + 1) % 3
                                    for pair, hit in zip(examples, right.scores)])
        return TaskEvaluation({"accuracy": score, "macro_f1": score}, right, predictions)

    monkeypatch.setitem(module.TASKS, "pairs",
                        dataclasses.replace(module.TASKS["pairs"], load_splits=lambda root: splits))
    monkeypatch.setattr(module, "task_model", fake_model)
    monkeypatch.setattr(module, "finetune_task", fake_finetune)
    monkeypatch.setattr(module, "evaluate_task", lambda *arguments, **options: fake_evaluation(*arguments,
                                                                                                **options).scores)
    monkeypatch.setattr(module, "task_evaluation", fake_evaluation)
    monkeypatch.setitem(module.SETTINGS, "quick", {**module.SETTINGS["quick"], "seeds": [0, 1],
                                                   "learning_rates": [1e-4, 1e-3], "max_train_examples": None,
                                                   "max_evaluation_examples": None, "learning_curve": {}})
    return module, trained, evaluated


def _run_main(module, tmp_path: Path, out: Path, *options: str) -> Path:
    """The script's ``main()`` with the command line of a quick run on the CPU into ``out``, and ``options``."""
    argv = [f"{module.__name__}.py", "--data-root", str(tmp_path), *options, "--quick", "--device", "cpu",
            "--work-dir", str(tmp_path / "work"), "--out", str(out), "--no-progress"]
    sys.argv, saved = argv, sys.argv
    try:
        module.main()
    finally:
        sys.argv = saved
    return out


def _run_tasks(module, tmp_path: Path) -> Path:
    return _run_main(module, tmp_path, tmp_path / "tasks.json", "--tasks", "pairs")


def test_task_records_test_every_expectation_from_the_stages_and_complete_an_older_layout(task_results, tmp_path):
    module, trained, evaluated = task_results
    out = _run_tasks(module, tmp_path)
    # 2 variants (the pairs, the hypothesis alone) x 2 models x (2 rates on seed 0, then seed 1 at the chosen rate)
    assert len(trained) == 12
    assert evaluated == ["dev", "test"] * 12  # each run evaluates the test split once
    checks = _checks(out)
    random_weights = checks["pairs: course BERT above the same BERT from random weights (accuracy)"]
    assert random_weights.holds is True and random_weights.significance.examples == TEST_PAIRS
    assert random_weights.significance.mcnemar_p < 0.05 and random_weights.significance.low > 0
    alone = checks["pairs: course BERT above the same BERT reading the hypothesis alone (accuracy)"]  # 90 vs 89
    assert alone.met_by_scores is True and alone.holds is False and not alone.significance.significant
    assert alone.significance.low < 0 < alone.significance.high
    random_alone = checks["pairs: same BERT from random weights above the same BERT reading the hypothesis alone "
                          "(accuracy)"]  # 50 vs 50
    assert not random_alone.met_by_scores and random_alone.significance.reverse_significant is False
    assert checks["pairs, hypothesis alone: course BERT above the same BERT from random weights (accuracy)"].holds
    alone_baseline = [name for name in checks
                      if name.startswith("pairs, hypothesis alone: course BERT above the best simple baseline")]
    assert alone_baseline == ["pairs, hypothesis alone: course BERT above the best simple baseline "
                              "(bag of words, hypothesis only)"]  # named for what it reads: no premise
    baseline = next(check for name, check in checks.items() if "best simple baseline" in name)
    assert baseline.significance is not None and baseline.holds is (baseline.met_by_scores and
                                                                      baseline.significance.significant)
    record = json.loads(out.read_text())  # the record ships without the per-example results
    assert "test_examples_by_seed" not in json.dumps(record) and '"test_examples"' not in json.dumps(record)
    assert "| not significant |" in out.with_suffix(".md").read_text()

    # The stages again, as the layout before per-example results kept them: only the runs whose test scores
    # are read (each seed at the chosen rate) and the baselines are computed again, and the record is the same.
    stages = tmp_path / "work" / "stages.json"
    _to_an_older_layout(stages, frozenset({"test_examples"}))
    trained.clear()
    _run_tasks(module, tmp_path)
    assert sorted(trained) == sorted((pretrained, 1e-3, seed, alone) for pretrained in (False, True)
                                     for seed in (0, 1) for alone in (False, True))
    again = _checks(out)
    assert {name: dataclasses.asdict(check) for name, check in again.items()} == {
        name: dataclasses.asdict(check) for name, check in checks.items()}

    # Every stage holds its results now: a run of the same command re-evaluates the record from them alone.
    trained.clear()
    _run_tasks(module, tmp_path)
    assert trained == [] and _checks(out) == again


def test_each_point_of_both_learning_curves_has_its_paired_tests(task_results, tmp_path, monkeypatch):
    module, _, _ = task_results
    monkeypatch.setitem(module.SETTINGS, "quick", {**module.SETTINGS["quick"], "learning_curve": {"pairs": [0.5]}})
    runs = []  # (training examples, epochs) of every fine-tuning run
    finetune = module.finetune_task
    monkeypatch.setattr(module, "finetune_task", lambda task, model, tokenizer, examples, *, recipe, **options: (
        runs.append((len(examples), recipe.epochs)), finetune(task, model, tokenizer, examples, recipe=recipe)))
    checks = _checks(_run_tasks(module, tmp_path))
    # The first half of the 60 training pairs: the same 1 epoch, then the whole split's number of steps (2 epochs).
    assert {run for run in runs if run[0] == 30} == {(30, 1), (30, 2)}
    for kind in ("same epochs", "same optimiser steps"):
        random_weights = checks[f"pairs, first 30 train ({kind}): course BERT above the same BERT from random weights "
                                "(accuracy)"]
        assert random_weights.measured == "90.0 vs 50.0 (+40.0)" and random_weights.holds is True
        assert random_weights.significance.examples == TEST_PAIRS and random_weights.significance.mcnemar_p < 0.05
        baseline = next(check for name, check in checks.items() if name.startswith(
            f"pairs, first 30 train ({kind}): course BERT above the best simple baseline"))
        assert baseline.significance is not None and baseline.significance.examples == TEST_PAIRS
    assert sum(name.startswith("pairs, first ") for name in checks) == 4


def test_longer_training_makes_the_whole_comparison_again_with_its_own_rates_and_paired_tests(task_results, tmp_path,
                                                                                           monkeypatch):
    module, _, _ = task_results
    monkeypatch.setitem(module.SETTINGS, "quick", {**module.SETTINGS["quick"], "longer_training": {"pairs": 3}})
    runs = []  # (epochs, hypothesis alone) of every fine-tuning run
    finetune = module.finetune_task
    monkeypatch.setattr(module, "finetune_task", lambda task, model, tokenizer, examples, *, recipe, **options: (
        runs.append((recipe.epochs, examples[0].premise == "")), finetune(task, model, tokenizer, examples,
                                                                          recipe=recipe)))
    out = _run_tasks(module, tmp_path)
    # the pairs and the hypothesis alone, each at 1 epoch (quick) and at 3: 2 models x (2 rates + 1 more seed)
    assert sorted(runs) == sorted((epochs, alone) for epochs in (1, 3) for alone in (False, True) for _ in range(6))
    longer = json.loads(out.read_text())["tasks"]["pairs"]["longer_training"]
    assert longer["epochs"] == 3 and longer["hypothesis_only"]["epochs"] == 3
    assert all(longer[model]["learning_rate"] == 1e-3 for model in ("course_bert", "random_init"))  # chosen on dev
    checks = _checks(out)
    longer_checks = {name: check for name, check in checks.items() if name.startswith("pairs, 3 epochs")}
    assert len(longer_checks) == 6  # as many as the whole split's: random, baseline, alone twice, premise twice
    assert len([name for name in checks if name.startswith("pairs")]) == 2 * len(longer_checks)
    random_weights = longer_checks["pairs, 3 epochs: course BERT above the same BERT from random weights (accuracy)"]
    assert random_weights.holds is True and random_weights.significance.examples == TEST_PAIRS
    assert all(check.significance is not None for check in longer_checks.values())
    table = out.with_suffix(".md").read_text()
    assert "| course BERT, fine-tuned whole, 3 epochs | 0.001 |" in table
    assert "| same BERT from random weights, hypothesis alone, 3 epochs | 0.001 |" in table


# --------------------------------------------------------------------------------------------------
# benchmarks/benchmark_runs.py: Stages
# --------------------------------------------------------------------------------------------------


def test_a_stage_is_computed_again_only_when_it_lacks_what_is_read(tmp_path):
    benchmark_runs = benchmark_script("benchmark_runs")
    computed = []

    def compute(name):
        def record():
            computed.append(name)
            return {"score": 0.5, "test_correct": [1, 0]}
        return record

    keeps = benchmark_runs.holding("test_correct")
    (tmp_path / "stages.json").write_text(json.dumps({"stages": {
        "old": {"identity": {"w": 1, "lr": 3}, "record": {"score": 0.4}, "seconds": 9.0},  # an older layout
        "tagged": {"identity": {"w": 1, "lr": 3, "record_layout": 2}, "record": {"score": 0.6, "test_correct": [1]},
                   "seconds": 9.0},  # the layout tag of an earlier scheme: compared without it
        "other": {"identity": {"w": 1, "lr": 4}, "record": {"score": 0.7, "test_correct": [1]}, "seconds": 9.0}}}))
    stages = benchmark_runs.Stages(tmp_path, {"w": 1})
    assert stages.stored("old", lr=3) == {"score": 0.4} and stages.stored("other", lr=3) is None
    assert stages.run("old", compute("old"), keeps, lr=3) == {"score": 0.5, "test_correct": [1, 0]}
    assert stages.run("tagged", compute("tagged"), keeps, lr=3) == {"score": 0.6, "test_correct": [1]}
    assert stages.run("other", compute("other"), keeps, lr=3)["score"] == 0.5  # other settings
    assert stages.run("old", compute("old"), lr=3)["score"] == 0.5 and computed == ["old", "other"]
    again = benchmark_runs.Stages(tmp_path, {"w": 1})  # what was computed is kept
    assert again.run("old", compute("old"), keeps, lr=3)["test_correct"] == [1, 0] and computed == ["old", "other"]



def test_stages_are_kept_one_line_each_in_a_folder_git_keeps_unless_quick(tmp_path):
    """A run longer than a session goes on in a fresh clone: its stages are committed, compactly."""
    benchmark_runs = benchmark_script("benchmark_runs")
    stages = benchmark_runs.Stages(tmp_path, {"w": 1})
    for name in ("pairs: lr 1e-4", "pairs: lr 3e-4"):
        stages.run(name, lambda: {"test_correct": [1, 0, 1] * 1000})
    text = (tmp_path / "stages.json").read_text()
    assert len(text.splitlines()) == 4 and len(text) < 2 * 6000 + 400  # a line a stage, two bytes a result
    assert benchmark_runs.Stages(tmp_path, {"w": 1}).stored("pairs: lr 3e-4")["test_correct"][:3] == [1, 0, 1]
    root = Path(__file__).resolve().parents[1]
    folder = benchmark_runs.default_work_dir("task-results-cpu")
    assert folder.parent == root / "benchmarks" / "stages"
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"], cwd=root, capture_output=True, text=True,
        input="\n".join(str(path.relative_to(root)) for path in (
            folder / "stages.json", folder.with_name("task-results-cpu-quick") / "stages.json",
            benchmark_runs.default_work_dir("bert-results-cpu") / "teacher.pt")) + "\n").stdout.split()
    assert ignored == ["benchmarks/stages/task-results-cpu-quick/stages.json",
                       "benchmarks/stages/bert-results-cpu/teacher.pt"]

# --------------------------------------------------------------------------------------------------
# benchmarks/bert_results.py: MR classification and distillation
# --------------------------------------------------------------------------------------------------

TEST_SENTENCES = 300
# The fake models' share of the test sentences right: the distilled student 84% against 83% on the labels
# alone (met by the scores, not significant on 300 sentences), the course BERT 85% against random weights 60%.
MR_SHARE_RIGHT = {"course": 0.85, "random": 0.60, "head only": 0.75, "distilled": 0.84, "alone": 0.83}


class FakeClassifier:
    """Stands for ``BertForSequenceClassification``: what it is (``kind``) and the seed it was trained with
    fix its predictions on the test sentences."""

    def __init__(self, config, kind: str = "random"):
        self.config, self.kind, self.seed = config, kind, 0

    @classmethod
    def from_pretrained(cls, folder):
        return cls("the course BERT's", kind="course")

    def state_dict(self) -> dict:
        return {"seed": torch.tensor(self.seed)}

    def load_state_dict(self, state: dict) -> None:
        self.seed = int(state["seed"])


@pytest.fixture()
def bert_results(monkeypatch):
    module = benchmark_script("bert_results")
    trained: list[tuple] = []  # (kind, learning rate, seed) of every model trained
    rng = random.Random(0)
    words = ["good", "bad", "dull", "fine", "moving", "flat"]
    examples = [(f"review {i}: {rng.choice(words)} {rng.choice(words)}", rng.randrange(2)) for i in range(460)]
    train, dev, test = examples[:100], examples[100:160], examples[160:]
    where = {text: index for index, (text, _) in enumerate(test)}

    def fake_predict(model, tokenizer, texts, **options):  # right on a share of the test sentences fixed in advance
        seed = 10 * list(MR_SHARE_RIGHT).index(model.kind) + model.seed
        right = _right(MR_SHARE_RIGHT[model.kind], len(test), seed)

        def label(text: str) -> int:  # 0 for the sentences the teacher labels
            if text not in where:
                return 0
            gold = test[where[text]][1]
            return gold if right[where[text]] else 1 - gold

        return torch.tensor([label(text) for text in texts])

    def fake_finetune(model, tokenizer, examples, *, recipe, **options):
        model.kind = "alone" if model.kind == "student" else model.kind
        model.seed = recipe.seed
        trained.append((model.kind, recipe.encoder_lr, recipe.seed))

    def fake_distill(teacher, model, tokenizer, examples, *, recipe, **options):
        model.kind, model.seed = "distilled", recipe.seed
        trained.append((model.kind, recipe.encoder_lr, recipe.seed))

    def fake_choose_learning_rate(train_with, learning_rates, tokenizer, dev, **options):  # the last rate wins
        models = {lr: train_with(lr) for lr in learning_rates}
        return SimpleNamespace(model=models[learning_rates[-1]], learning_rate=learning_rates[-1],
                               dev_accuracy_by_learning_rate={lr: 0.5 + lr for lr in learning_rates})

    def fake_compare_models(teacher, student, tokenizer, test, **options):
        rows = [SimpleNamespace(accuracy=0.85, percent_of_teacher=100.0, speedup=1.0),
                SimpleNamespace(accuracy=0.84, percent_of_teacher=98.8, speedup=1.9)]
        return SimpleNamespace(rows=rows, to_markdown=lambda: "| teacher and student |")

    monkeypatch.setattr(module, "mr_splits", lambda root, max_train_examples: SimpleNamespace(
        name="mr", train=train[:max_train_examples], dev=dev, test=test, source="made-up sentences"))
    monkeypatch.setattr(module, "BertForSequenceClassification", FakeClassifier)
    monkeypatch.setattr(module, "predict", fake_predict)
    monkeypatch.setattr(module, "finetune", fake_finetune)
    monkeypatch.setattr(module, "distill", fake_distill)
    monkeypatch.setattr(module, "freeze_layers", lambda model, layers: setattr(model, "kind", "head only"))
    monkeypatch.setattr(module, "init_student_from_teacher", lambda teacher: FakeClassifier(None, kind="student"))
    monkeypatch.setattr(module, "choose_learning_rate", fake_choose_learning_rate)
    monkeypatch.setattr(module, "compare_models", fake_compare_models)
    monkeypatch.setattr(module, "unlabelled_sentences", lambda root, count: [f"unlabelled {i}" for i in range(20)])
    monkeypatch.setitem(module.SETTINGS, "quick", {**module.SETTINGS["quick"], "seeds": [0, 1],
                                                   "curve_sizes": [40], "max_train_examples": None, "repeats": 1})
    return module, trained


def _run_mr(module, tmp_path: Path) -> Path:
    return _run_main(module, tmp_path, tmp_path / "bert.json", "--imdb-root", str(tmp_path))


def test_mr_records_test_every_expectation_from_the_stages_and_complete_an_older_layout(bert_results, tmp_path):
    module, trained = bert_results
    out = _run_mr(module, tmp_path)
    grid, first, chosen = module.SETTINGS["quick"]["learning_rates"], 3e-4, 1e-3
    assert (first, chosen) == tuple(grid)  # the fake search chooses the last rate
    # 5 comparisons and 6 groups of students, each: every rate of its grid on seed 0, then seed 1 at the chosen rate
    assert len(trained) == 4 * 3 + 2 + 6 * 3
    checks = _checks(out)
    assert checks["fine-tuned course BERT >= 3 points above the same BERT from random weights"].holds is True
    students = checks["the distilled student above the same student on the labels alone"]  # 84 vs 83
    assert students.met_by_scores and students.holds is False and students.significance.mcnemar_p > 0.05
    untested = {"half-depth student runs >= 1.6x faster (inference)", "held-out masked-token accuracy >= 42%",
                "held-out MLM loss >= 1.5 nats below the unigram predictor"}
    for name, check in checks.items():
        assert (check.significance is None) is (name in untested), name
        assert check.holds is (None if name in untested else check.met_by_scores and check.significance.significant)
    assert "test_correct" not in out.read_text()  # the record ships without the per-example results

    # The stages as the layout before per-example results kept them: each is computed again, but only at the
    # rate it chose then (training is seeded: the model chosen then), and the record is the same.
    _to_an_older_layout(tmp_path / "work" / "stages.json",
                        frozenset({"test_correct", "test_correct_by_seed", "teacher_test_correct"}))
    trained.clear()
    _run_mr(module, tmp_path)
    head_only_rate = module.SETTINGS["quick"]["head_only_learning_rates"][-1]
    assert len(trained) == 11 * 2 and {lr for _, lr, _ in trained} == {chosen, head_only_rate}
    again = _checks(out)
    assert {name: dataclasses.asdict(check) for name, check in again.items()} == {
        name: dataclasses.asdict(check) for name, check in checks.items()}

    trained.clear()  # every stage holds its results now: the record is re-evaluated from them alone
    _run_mr(module, tmp_path)
    assert trained == [] and _checks(out) == again
