"""What the course's pretrained BERT achieves on BERT's other task types, under a fair protocol.

    python benchmarks/task_results.py --data-root DIR [--tasks pairs tagging spans] [--quick]
                                      [--device auto|cpu|cuda] [--threads T] [--work-dir DIR] [--no-progress]

DIR holds ``snli_1.0/``, ``UD_English-EWT/`` and ``squad-v1.1/`` (each task type's ``load_splits``):

- **pairs**, natural language inference on SNLI 1.0 (Bowman et al., 2015): train and dev carved from
  the official dev split by premise (the course's copy lacks the training split), test = the official
  test split. Scores: accuracy (and macro-F1).
- **tagging**, universal part-of-speech tags of the UD English Web Treebank: its own train, dev and
  test files. Score: the share of words tagged right.
- **spans**, extractive question answering on SQuAD 1.1 (Rajpurkar et al., 2016): the 48 articles of
  the official dev set split into train, dev and test by article. Scores: exact match and F1 (the
  official script's), in percent.

The protocol, the same for every BERT: the course's BERT (``bertlab/course_bert/``) and the same
architecture from random weights, fine-tuned whole with the same examples, epochs and batch size;
every window at most 128 tokens, the length the course BERT was pretrained at (its position
embeddings beyond 128 never received a gradient; SQuAD's contexts are cut into windows of 128 that
share ``stride`` pieces); each model's learning rate chosen on dev from the same grid with seed 0,
then the other seeds at that rate; test scores as mean and standard deviation over the seeds. The
simple baselines of each task: the majority class, a bag-of-words logistic regression on the pair
and on the hypothesis alone (Gururangan et al., 2018), the most frequent tag of each word, the
sliding window adapted from Rajpurkar et al. (2016) (``bertlab.task_baselines``). On sentence pairs
both BERTs are also fine-tuned on the hypothesis alone (``hypothesis_only``: what they make of the
annotation artefacts), and the comparison is made again on the first quarter and the first half of the
training split, with the same epochs (``learning_curve``) and with as many optimiser steps as the whole
split's (``learning_curve_equal_steps``, more epochs): whether the pretrained model's lead grows or
shrinks as labels grow, each point with its paired tests. And the whole comparison of the pairs, the
hypothesis alone included, is made again with 4 epochs instead of 2 (``longer_training``, each rate chosen
on dev again): what fine-tuning longer, as BERT's released code does its small models, changes.

Every fine-tuning run is a stage of its own, kept in ``--work-dir`` (default
``benchmarks/stages/task-results-<device>``, committed) with what it depends on, so that the same command
started again, in this clone or a fresh one, goes on after the last finished run (the full run takes
several hours of a 2-core CPU, most of them SQuAD's). When every run of a task has finished, its record is
written to ``benchmarks/results/tasks-<device>.json`` (and a Markdown table beside it, ``.md``), with the
tasks finished so far and those of an earlier run with the same weights and settings (``--tasks`` runs
some tasks only); chapter 10 reads it. Each expectation carries its paired test over the test examples (a
bootstrap interval; McNemar's test for the pairs' accuracies; the sentence the unit of tagging) and holds
only when significant at 95%: the stages keep each model's score on each test example, the record does
not. A run stored by an older layout, without them, is computed again only where its test scores are read
(each seed at the chosen learning rate; the other rates' runs on the first seed are read for their dev
score alone), and a task's baselines again (seconds).
"""

import argparse
import dataclasses
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import torch

from bertlab.bert import BertConfig
from bertlab.course_model import course_bert_folder, course_bert_sha256
from bertlab.finetuning import FineTuningRecipe
from bertlab.task_baselines import WINDOW_ANSWER_WORDS, answer_words
from bertlab.recorded import LEARNING_CURVES, Significance, whole_split_comparisons
from bertlab.task_data import SentencePair
from bertlab.task_finetuning import (SENTENCES, SPANS, TASKS, evaluate_task, finetune_task, span_task, task_evaluation,
                                     task_model)
from bertlab.tokenization import BertTokenizer
from bertlab.utils import PRECISIONS, seed_everything
from benchmark_runs import (RESULTS, Stages, checks_table, computed_in, default_work_dir, device_or_exit,
                            expectation, holding, machine, paired_comparison, quietly, summary,
                            without_example_results)

SETTINGS = {
    "full": dict(seeds=[0, 1, 2], epochs=2, batch_size=32, max_length=128, stride=32, max_answer_length=30,
                 learning_rates=[1e-4, 3e-4, 1e-3, 3e-3], max_train_examples=None, max_evaluation_examples=None,
                 learning_curve={"pairs": [0.25, 0.5]}, longer_training={"pairs": 4}),
    "quick": dict(seeds=[0], epochs=1, batch_size=32, max_length=128, stride=32, max_answer_length=30,
                  learning_rates=[1e-3], max_train_examples=200, max_evaluation_examples=200,
                  learning_curve={"pairs": [0.5]}, longer_training={}),
}
MODELS = ("course_bert", "random_init")
MODEL_NAMES = {"course_bert": "course BERT, fine-tuned whole", "random_init": "same BERT from random weights"}
#: The task types compared here; sentences (MR) are benchmarks/bert_results.py's.
TASK_NAMES = [name for name, task in TASKS.items() if task is not SENTENCES]


def baselines_complete(record: dict) -> bool:
    """Whether a stored record of a task's baselines holds each baseline's score on each test example (the
    paired tests read them); one of an older layout does not, and is computed again (seconds)."""
    return all("test_examples" in scores for scores in record.values())


def task_type(name: str, settings: dict):
    """The task type of ``bertlab.task_finetuning``, spans with the settings' stride and answer bound."""
    task = TASKS[name]
    return span_task(settings["stride"], settings["max_answer_length"]) if task is SPANS else task


def baselines(task, train: list, dev: list, test: list) -> dict:
    """The task's simple baselines (``task.baselines``: trained on ``train``, a setting chosen on ``dev``,
    scored on ``test`` as the BERTs are), each as a record: its scores, what else it reports, and its score on
    each test example (``test_examples``, as :func:`bertlab.task_finetuning.task_example_scores` gives the
    BERTs')."""
    return {name: {**result.scores, **result.details, "test_examples": dataclasses.asdict(result.example_scores)}
            for name, result in task.baselines(train, dev, test).items()}


@dataclasses.dataclass(frozen=True)
class Variant:
    """What one comparison trains, chooses on and tests: its stages' names end with ``label`` ("" for the
    task as it is, so that they keep their names), and each run trains ``epochs`` epochs."""

    label: str
    train: list
    dev: list
    test: list
    epochs: int


def hypothesis_only(pairs: list[SentencePair]) -> list[SentencePair]:
    """The pairs without their premise: [CLS] [SEP] hypothesis [SEP], what a model of the annotation
    artefacts reads (Gururangan et al., 2018)."""
    return [dataclasses.replace(pair, premise="") for pair in pairs]


def run_task(name: str, args: argparse.Namespace, settings: dict, device: torch.device, stages: Stages) -> dict:
    """Every stage of one task: its baselines, then each BERT's runs; the task's record. Pairs also
    compare the BERTs on the hypothesis alone (``hypothesis_only``); a learning curve compares them on the
    first part of the training split with the same epochs (``learning_curve``) and with the same number of
    optimiser steps as the whole split (``learning_curve_equal_steps``)."""
    task = task_type(name, settings)
    splits = task.load_splits(args.data_root)
    train = splits.train[: settings["max_train_examples"]]
    dev, test = (split[: settings["max_evaluation_examples"]] for split in (splits.dev, splits.test))
    print(f"{name}: {len(train)} train, {len(dev)} dev, {len(test)} test ({splits.source})", flush=True)
    folder = course_bert_folder()
    tokenizer = BertTokenizer(folder / "vocab.txt")
    labels = None if task.labels is None else task.labels(splits.train)  # all the tags, whatever the cut
    training = {key: settings[key] for key in ("epochs", "batch_size", "max_length")}
    tested_run = holding("dev", "test", "test_examples", *(["answer_words"] if name == "spans" else []))
    if name == "spans":
        training.update(stride=settings["stride"], max_answer_length=settings["max_answer_length"])

    def make_model(model: str, seed: int):
        seed_everything(seed)  # the head's (and the random model's) initial weights
        source = folder if model == "course_bert" else BertConfig.load(folder)
        return quietly(task_model, task, source, labels)

    def fine_tuning_run(model: str, lr: float, seed: int, variant: Variant) -> dict:
        examples, dev, test = variant.train, variant.dev, variant.test
        network = make_model(model, seed)
        recipe = FineTuningRecipe(epochs=variant.epochs, batch_size=settings["batch_size"], encoder_lr=lr,
                                  max_length=settings["max_length"], seed=seed)
        finetune_task(task, network, tokenizer, examples, recipe=recipe, labels=labels, device=device,
                      progress=not args.no_progress, precision=args.precision)
        evaluation = {"labels": labels, "max_length": settings["max_length"], "precision": args.precision}
        dev_scores = evaluate_task(task, network, tokenizer, dev, **evaluation, what="dev")
        tested = task_evaluation(task, network, tokenizer, test, **evaluation, what="test")  # one pass over test
        scores = {"dev": dev_scores, "test": tested.scores, "test_examples": dataclasses.asdict(tested.example_scores)}
        if name == "spans":  # how long its answers (by question id) are, beside the gold answers' and the window's
            scores["answer_words"] = sum(answer_words(answer) for answer in tested.predictions.values()) / len(test)
        print(f"{name}, {model}, lr {lr:g}, seed {seed}, {len(examples)} train: dev {scores['dev']}, "
              f"test {scores['test']}", flush=True)
        return scores

    def compare(variant: Variant) -> dict:
        """The baselines and both BERTs of ``variant``, each BERT at its rate chosen on its dev split."""
        part, examples = variant.label, variant.train
        data = {"dataset": [splits.source, len(examples), len(variant.dev), len(variant.test)]}
        trained = {**training, "epochs": variant.epochs}  # the stage names tell the variants apart

        def run(model: str, lr: float, seed: int, tested: bool) -> dict:
            """The stage of one fine-tuning run. ``tested``: its test scores are read, so a run stored by an
            older layout, without its score on each test example, is computed again; the dev score of a
            rate not chosen is all that is read from the others."""
            return stages.run(f"{name}: {model}, lr {lr:g}, seed {seed}{part}",
                              lambda: fine_tuning_run(model, lr, seed, variant),
                              tested_run if tested else holding("dev"), **data, **trained, model=model, lr=lr,
                              seed=seed)

        record = {"train": len(examples), "epochs": variant.epochs, "baselines": stages.run(
            f"{name}: baselines{part}", lambda: baselines(task, examples, variant.dev, variant.test),
            baselines_complete, **data, **({"window_answer_words": WINDOW_ANSWER_WORDS} if name == "spans" else {}))}
        for model in MODELS:
            first_seed = settings["seeds"][0]
            dev_score = {lr: run(model, lr, first_seed, tested=False)["dev"][task.metric]
                         for lr in settings["learning_rates"]}
            best = max(settings["learning_rates"], key=lambda lr: dev_score[lr])  # ties: the first rate
            runs = [run(model, best, seed, tested=True) for seed in settings["seeds"]]
            grid_ends = (settings["learning_rates"][0], settings["learning_rates"][-1])
            record[model] = {
                "learning_rate": best,
                f"dev_{task.metric}_by_learning_rate": dev_score,
                "learning_rate_inside_grid": best not in grid_ends,
                "test": {metric: summary([run_scores["test"][metric] for run_scores in runs])
                         for metric in runs[0]["test"]},
                "test_examples_by_seed": [run_scores["test_examples"] for run_scores in runs],
                **({"answer_words": sum(run_scores["answer_words"] for run_scores in runs) / len(runs)}
                   if name == "spans" else {}),
            }
        return record

    def whole_split(label: str, epochs: int) -> dict:
        """The comparison on the whole training split with ``epochs`` epochs; for pairs, on the hypothesis
        alone too."""
        point = compare(Variant(label, train, dev, test, epochs))
        if name == "pairs":
            point["hypothesis_only"] = compare(Variant(f", hypothesis only{label}",
                                                       *map(hypothesis_only, (train, dev, test)), epochs))
        return point

    epochs = settings["epochs"]
    record = {"dataset": task.dataset, "source": splits.source, "dev": len(dev), "test": len(test),
              "metric": task.metric, **whole_split("", epochs)}
    if name in settings["longer_training"]:  # the whole comparison again, each rate chosen on dev at more epochs
        longer = settings["longer_training"][name]
        record["longer_training"] = whole_split(f", {longer} epochs", longer)
    sizes = [round(fraction * len(train)) for fraction in settings["learning_curve"].get(name, [])]
    if sizes:
        same_epochs, same_steps = LEARNING_CURVES
        record[same_epochs.key] = [compare(Variant(f", first {size} train", train[:size], dev, test, epochs))
                                   for size in sizes]
        record[same_steps.key] = [  # as many optimiser steps as the whole split's runs
            compare(Variant(f", first {size} train, {steps} epochs", train[:size], dev, test, steps))
            for size, steps in ((size, round(epochs * len(train) / size)) for size in sizes)]
    return record


def check_expectations(tasks: dict) -> list[dict]:
    """Issue 23's expectations for each finished task: the course BERT above random weights and above
    the best simple baseline, on the task's metric (means over the seeds), each with its paired test over
    the test examples (:func:`benchmark_runs.paired_comparison`; McNemar's too for pairs' accuracies,
    the sentence the unit of tagging): an expectation holds only when significant. Pairs add the first two
    on the hypothesis alone, each BERT above itself reading the hypothesis alone, and the first two at each
    point of the learning curves (a lead that shrinks as labels grow is a finding of its own); a task trained
    longer too (``longer_training``) has the checks of its whole split again at those epochs."""
    checks = []
    for name, record in tasks.items():
        checks += whole_split_checks(name, name, record["metric"], record)
        if "longer_training" in record:
            longer = record["longer_training"]
            checks += whole_split_checks(name, f"{name}, {longer['epochs']} epochs", record["metric"], longer)
        for curve in LEARNING_CURVES:
            for point in record.get(curve.key, []):
                checks += compared_to_random_and_baselines(name, curve.subject(name, point["train"]), record["metric"],
                                                           point)
    return checks


def whole_split_checks(task: str, label: str, metric: str, point: dict) -> list[dict]:
    """The checks of one comparison on the whole training split (``point``: the task's record, or its longer
    training), named by ``label``: :func:`compared_to_random_and_baselines`; for pairs, the same on the
    hypothesis alone, and each BERT above itself reading the hypothesis alone."""
    checks = compared_to_random_and_baselines(task, label, metric, point)
    if "hypothesis_only" in point:  # what reading the premise adds to the annotation artefacts
        scale = metric_scale(metric)
        checks += compared_to_random_and_baselines(task, f"{label}, hypothesis alone", metric,
                                                   point["hypothesis_only"])
        for model, name in (("course_bert", "course BERT"), ("random_init", "same BERT from random weights")):
            pair = point[model]["test"][metric]["mean"] * scale
            alone = point["hypothesis_only"][model]
            alone_score = alone["test"][metric]["mean"] * scale
            checks.append(expectation(
                f"{label}: {name} above the same BERT reading the hypothesis alone ({metric})",
                f"{pair:.1f} vs {alone_score:.1f} ({pair - alone_score:+.1f})", pair > alone_score,
                paired_test(task, point[model], alone.get("test_examples_by_seed"))))
    return checks


def metric_scale(metric: str) -> int:
    """What turns a score of ``metric`` into points: 100, or 1 for SQuAD's scores (in percent already)."""
    return 1 if metric in ("exact_match", "f1") else 100


def paired_test(name: str, bert: dict, other_runs: list | None) -> Significance | None:
    """The paired test of a BERT's runs ``bert`` (its record) above ``other_runs`` (each a run's scores on the
    test examples) of task ``name``; None where either lacks them (a record of an older layout)."""
    bert_runs = bert.get("test_examples_by_seed")
    if bert_runs is None or other_runs is None:
        return None
    return paired_comparison([run["scores"] for run in bert_runs], [run["scores"] for run in other_runs],
                             weights=bert_runs[0]["weights"], accuracy=name == "pairs")


def compared_to_random_and_baselines(task: str, label: str, metric: str, point: dict) -> list[dict]:
    """The course BERT above the same BERT from random weights, and above the best simple baseline, on
    ``metric`` in ``point`` (the record of ``task`` or a point of its learning curve), named by ``label``."""
    scale = metric_scale(metric)
    pretrained, random_init = (point[model]["test"][metric]["mean"] * scale for model in MODELS)
    baseline_name, baseline = max(((key, scores[metric] * scale) for key, scores in point["baselines"].items()),
                                  key=lambda item: item[1])
    baseline_examples = point["baselines"][baseline_name].get("test_examples")
    return [expectation(f"{label}: course BERT above the same BERT from random weights ({metric})",
                        f"{pretrained:.1f} vs {random_init:.1f} ({pretrained - random_init:+.1f})",
                        pretrained > random_init,
                        paired_test(task, point["course_bert"], point["random_init"].get("test_examples_by_seed"))),
            expectation(f"{label}: course BERT above the best simple baseline ({baseline_name})",
                        f"{pretrained:.1f} vs {baseline:.1f} ({pretrained - baseline:+.1f})", pretrained > baseline,
                        paired_test(task, point["course_bert"],
                                    None if baseline_examples is None else [baseline_examples]))]


def markdown(results: dict) -> str:
    """The record as Markdown tables: one per task, then the expectations."""
    lines = [f"Course BERT `{results['course_bert_sha256'][:12]}`, {results['machine']['device_name']}, "
             f"{results['machine']['threads']} threads, computed in {results['machine']['precision']}; "
             f"mean ± standard deviation over {len(results['settings']['seeds'])} seed(s)."]
    for name, record in results["tasks"].items():
        metrics = list(record["course_bert"]["test"])
        lines += ["", f"**{record['dataset']}** ({name}; {record['train']} train, {record['dev']} dev, "
                  f"{record['test']} test examples; {record['source']})", "",
                  "| model | learning rate | " + " | ".join(f"test {metric}" for metric in metrics) + " |",
                  "|---|---:|" + "---:|" * len(metrics)]
        for baseline, scores in record["baselines"].items():
            lines.append(f"| {baseline} | - | " + " | ".join(
                format_score(metric, scores[metric]) if metric in scores else "-" for metric in metrics) + " |")
        for label, point in whole_split_comparisons(record):
            for model in MODELS:
                test = point[model]["test"]
                lines.append(f"| {MODEL_NAMES[model]}{label} | {point[model]['learning_rate']:g} | " + " | ".join(
                    format_summary(metric, test[metric]) for metric in metrics) + " |")
        if "answer_words" in record["course_bert"]:
            window = record["baselines"]["sliding window"]
            lines += ["", f"Answers' mean length in words: gold (each question's shortest) "
                      f"{window['gold_answer_words']:.1f}, course BERT {record['course_bert']['answer_words']:.1f}, "
                      f"random weights {record['random_init']['answer_words']:.1f}, sliding window "
                      f"{window['answer_words']:.1f} (its longest answer, {window['max_answer_words']} words, "
                      f"chosen on dev; its test F1 by longest answer: " + ", ".join(
                          f"{limit}: {f1:.1f}" for limit, f1 in window["test_f1_by_max_answer_words"].items()) + ")."]
        for curve in LEARNING_CURVES:
            if curve.key in record:
                lines += learning_curve_table(record, curve.key, curve.kind)
    lines += ["", *checks_table(results["checks"])]
    return "\n".join(lines)


def learning_curve_table(record: dict, key: str, kind: str) -> list[str]:
    """Markdown lines: the test score of every baseline and BERT by the number of training examples (the
    points of ``record[key]``, trained for ``kind``, and the whole split), and the course BERT's mean minus
    the best baseline's score and minus the random-weights BERT's mean."""
    metric, points = record["metric"], [*record[key], record]
    columns = [*record["baselines"], *MODELS]

    def score(point: dict, column: str) -> str:
        if column in point["baselines"]:
            return format_score(metric, point["baselines"][column][metric])
        return f"{format_summary(metric, point[column]['test'][metric])} (lr {point[column]['learning_rate']:g})"

    def leads(point: dict) -> str:
        bert = point["course_bert"]["test"][metric]["mean"]
        best_baseline = max(scores[metric] for scores in point["baselines"].values())
        random_init = point["random_init"]["test"][metric]["mean"]
        return " | ".join(f"{'-' if lead < 0 else '+'}{format_score(metric, abs(lead), unit='')}"
                          for lead in (bert - best_baseline, bert - random_init))

    return ["", f"Learning curve, {kind} (test {metric}; the first examples of the training split):", "",
            "| training examples | " + " | ".join(MODEL_NAMES.get(column, column) for column in columns)
            + " | course BERT minus the best baseline | course BERT minus random weights |",
            "|---:|" + "---:|" * (len(columns) + 2),
            *(f"| {point['train']} | " + " | ".join(score(point, column) for column in columns) + f" | {leads(point)} |"
              for point in points)]


def format_summary(metric: str, summary_record: dict) -> str:
    """A score over the seeds (``benchmark_runs.summary``) as "mean ± standard deviation"."""
    return f"{format_score(metric, summary_record['mean'])} ± {format_score(metric, summary_record['std'], unit='')}"


def format_score(metric: str, value: float, unit: str = "%") -> str:
    """A score in percent: accuracies and F1 of classifiers are fractions, SQuAD's already percents."""
    percent = value * metric_scale(metric)
    return f"{percent:.1f}{unit}" if metric != "loss" else f"{value:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, help="folder holding the datasets (default: $BERTLAB_DATA)")
    parser.add_argument("--tasks", nargs="+", choices=TASK_NAMES, default=TASK_NAMES)
    parser.add_argument("--quick", action="store_true", help="a small check of the script: 200 examples, 1 seed")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's choice)")
    parser.add_argument("--precision", default="auto", choices=PRECISIONS,
                        help="of every forward pass (bertlab.utils.autocast; default: auto)")
    parser.add_argument("--out", type=Path, help="JSON file (default: benchmarks/results/tasks-DEVICE[-quick].json)")
    parser.add_argument("--work-dir", type=Path, help="the finished runs, for resuming (default: "
                                                      "benchmarks/stages/task-results-DEVICE[-quick])")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    args = parser.parse_args()
    device = device_or_exit(parser, args.device)
    run_name = f"{device.type}{'-quick' if args.quick else ''}"
    work_dir = args.work_dir or default_work_dir(f"task-results-{run_name}")
    out = args.out or RESULTS / f"tasks-{run_name}.json"
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    settings = SETTINGS["quick" if args.quick else "full"]
    stages = Stages(work_dir, {"course_bert_sha256": course_bert_sha256(), "precision": computed_in(device, args)})
    results = {
        "command": " ".join(["python", *sys.argv]),
        "mode": "quick" if args.quick else "full",
        "settings": settings,
        "course_bert_sha256": course_bert_sha256(),  # chapter 10 shows this run only beside these weights
        "tasks": {},
    }
    earlier_checks: dict[str, list[dict]] = {}  # task -> its checks in the earlier record
    if out.is_file():  # keep the tasks of an earlier run of the same weights and settings (--tasks)
        earlier = json.loads(out.read_text())
        if (earlier.get("course_bert_sha256"), earlier.get("settings")) == (results["course_bert_sha256"], settings):
            results["tasks"] = earlier["tasks"]
            for name in earlier["tasks"]:
                earlier_checks[name] = [check for check in earlier.get("checks", [])
                                        if check["expectation"].startswith(f"{name}: ")]
    full: dict[str, dict] = {}  # the tasks of this run, with their results on each test example
    for name in args.tasks:
        try:
            full[name] = run_task(name, args, settings, device, stages)
        except FileNotFoundError as error:  # a dataset that is not there: the other tasks still run
            print(f"{name}: skipped ({error})", flush=True)
            continue
        earlier_checks.pop(name, None)
        results["tasks"][name] = without_example_results(full[name])  # the record ships without them
        # the checks of the tasks run now tested from their examples; an earlier task's as recorded then
        checks = {**earlier_checks, **{task: check_expectations({task: full[task]}) for task in full}}
        results.update(date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                       machine={**machine(device), "precision": computed_in(device, args)},
                       checks=[check for task in results["tasks"] for check in checks.get(task, [])],
                       seconds=stages.seconds)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2) + "\n")
        out.with_suffix(".md").write_text(markdown(results) + "\n")
        print(f"\n{markdown(results)}\n\nwrote {out} (tasks so far: {', '.join(results['tasks'])})", flush=True)

if __name__ == "__main__":
    main()
