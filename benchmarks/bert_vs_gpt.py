"""The course BERT against the course GPT on MR: the same data, size and budget, trained two ways (chapter 11).

    python benchmarks/bert_vs_gpt.py --data-root DIR [--quick] [--device auto|cpu|cuda] [--threads T]
                                     [--bert FOLDER] [--gpt FOLDER]
                                     [--out benchmarks/results/bert-vs-gpt-<device>.json] [--work-dir DIR]

DIR holds ``rt-polarity/`` (the sentence polarity dataset v1.0, MR; Pang and Lee, 2005), split 80/10/10
by ``bertlab.data`` as in the chapters. The two models are the ones the package ships: the course BERT
(``bertlab.course_model.course_bert_folder``, masked language modelling) and the course GPT
(``course_gpt_folder``, causal language modelling), pretrained on the same IMDB reviews with the same
vocabulary, size, batch and number of steps (their model cards). ``--bert`` and ``--gpt`` name other
folders, a pair of another budget.

The protocol, the same for both, is chapter 08's (``benchmarks/bert_results.py``): the same training
examples, epochs and batch size, texts cut to 64 tokens, the whole model fine-tuned. Each model chooses
on the dev set, with seed 0, its text vector (``classifier_pooling``: BERT's [CLS] vector or the mean of
its token vectors; the GPT's last token, the only one that has read the whole text, or the mean of its
token vectors) and its learning rate from the same grid; the other seeds are then trained with that
choice. The test accuracy is reported as mean and standard deviation over the seeds, and the difference
with its paired test over the test examples (``benchmark_runs.paired_comparison``: a bootstrap interval of
the difference of the seeds' mean per example, and McNemar's exact test for every seed): whichever way
it goes, it is significant only when both say so.

Resumable: each finished stage is kept in ``--work-dir`` (default ``benchmarks/stages/bert-vs-gpt-<device>``,
committed) with the weights' digests, the data and the settings it depends on; the same command started
again goes on after the last finished stage. A Markdown table is printed and written next to the JSON (``.md``).
"""

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import torch
from torch import nn

from benchmark_runs import (RESULTS, Stages, computed_in, default_work_dir, device_or_exit, machine, mr_splits,
                            paired_comparison, quietly, summary, without_example_results)
from bertlab.bert import BertForSequenceClassification
from bertlab.course_model import course_bert_folder, course_gpt_folder, weights_sha256
from bertlab.finetuning import FineTuningRecipe, choose_learning_rate, finetune, predict
from bertlab.gpt import GPTForSequenceClassification
from bertlab.tokenization import BertTokenizer
from bertlab.utils import PRECISIONS, resolve_device, seed_everything

SETTINGS = {
    "full": dict(seeds=[0, 1, 2], epochs=2, batch_size=32, max_length=64, learning_rates=[1e-4, 3e-4, 1e-3],
                 max_train_examples=None),
    "quick": dict(seeds=[0, 1], epochs=1, batch_size=32, max_length=64, learning_rates=[1e-3],
                  max_train_examples=200),
}


@dataclasses.dataclass(frozen=True)
class ComparedModel:
    """One of the two pretrained models: its folder, its classifier class and the text vectors it may
    classify (``classifier_pooling``), the one its shipped config names first."""

    name: str
    folder: Callable[[], Path]
    classifier: type[nn.Module]
    poolings: tuple[str, ...]

    def classifier_with(self, pooling: str) -> nn.Module:
        """The pretrained model with a new two-class head (seeded by the caller) reading ``pooling``."""
        pretrained = quietly(self.classifier.from_pretrained, self.folder(), num_labels=2)
        model = self.classifier(dataclasses.replace(pretrained.config, classifier_pooling=pooling), num_labels=2)
        model.load_state_dict(pretrained.state_dict())
        return model


MODELS = (
    ComparedModel("course BERT", course_bert_folder, BertForSequenceClassification, ("mean", "cls")),
    ComparedModel("course GPT", course_gpt_folder, GPTForSequenceClassification, ("last", "mean")),
)


def run(args: argparse.Namespace, models: tuple[ComparedModel, ...]) -> dict:
    settings = SETTINGS["quick" if args.quick else "full"]
    device = resolve_device(args.device)
    splits = mr_splits(args.data_root, settings["max_train_examples"])
    train, dev, test = splits.train, splits.dev, splits.test
    digests = {model.name: weights_sha256(model.folder()) for model in models}
    stages = Stages(args.work_dir, {"weights_sha256": digests,
                                    "precision": computed_in(device, args),
                                    "dataset": [splits.source, len(train), len(dev), len(test)]})
    training = {key: settings[key] for key in ("epochs", "batch_size", "max_length")}
    tokenizer = BertTokenizer(course_bert_folder() / "vocab.txt")  # the vocabulary both models were trained with

    def trained(model: ComparedModel, pooling: str, lr: float, seed: int) -> nn.Module:
        seed_everything(seed)
        classifier = model.classifier_with(pooling)
        recipe = FineTuningRecipe(epochs=settings["epochs"], batch_size=settings["batch_size"], encoder_lr=lr,
                                  max_length=settings["max_length"], seed=seed)
        finetune(classifier, tokenizer, train, recipe=recipe, device=device, progress=not args.no_progress,
                 precision=args.precision)
        return classifier

    def test_correct(classifier: nn.Module) -> list[int]:
        """1 for each test example the model classifies right, 0 for the others (in the test split's order)."""
        predictions = predict(classifier, tokenizer, [text for text, _ in test], max_length=settings["max_length"],
                              precision=args.precision)
        return [int(prediction == label) for prediction, (_, label) in zip(predictions.tolist(), test)]

    results = {}
    for model in models:
        searches = {}
        for pooling in model.poolings:  # seed 0: the learning rate of each text vector, on dev
            def search(pooling=pooling) -> dict:
                tuned = choose_learning_rate(lambda lr: trained(model, pooling, lr, settings["seeds"][0]),
                                             settings["learning_rates"], tokenizer, dev,
                                             max_length=settings["max_length"], precision=args.precision)
                return {"learning_rate": tuned.learning_rate, "dev_accuracy": tuned.dev["accuracy"],
                        "dev_accuracy_by_learning_rate": tuned.dev_accuracy_by_learning_rate,
                        "test_correct": test_correct(tuned.model)}
            stage = f"{model.name}, {pooling}: learning rate on dev, seed {settings['seeds'][0]}"
            searches[pooling] = stages.run(stage, search, learning_rates=settings["learning_rates"],
                                           seed=settings["seeds"][0], **training)
        pooling = max(model.poolings, key=lambda name: searches[name]["dev_accuracy"])  # ties: the first
        lr = searches[pooling]["learning_rate"]
        other_seeds = stages.run(
            f"{model.name}, {pooling}, lr {lr:g}: seeds {settings['seeds'][1:]}",
            lambda: {"test_correct_by_seed": [test_correct(trained(model, pooling, lr, seed))
                                              for seed in settings["seeds"][1:]]},
            pooling=pooling, learning_rate=lr, seeds=settings["seeds"][1:], **training)
        correct = [searches[pooling]["test_correct"], *other_seeds["test_correct_by_seed"]]
        accuracies = [sum(run) / len(run) for run in correct]
        print(f"{model.name}: {pooling}, lr {lr:g}; test {[round(accuracy, 4) for accuracy in accuracies]}")
        results[model.name] = {"pooling": pooling, "learning_rate": lr,
                               "dev_search": {name: {key: value for key, value in search.items()
                                                     if key != "test_correct"} for name, search in searches.items()},
                               **summary(accuracies), "test_correct_by_seed": correct}

    bert, gpt = (results[model.name]["test_correct_by_seed"] for model in models)
    return {
        "command": " ".join(["python", "benchmarks/bert_vs_gpt.py", *sys.argv[1:]]),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(device), "precision": computed_in(device, args), "settings": settings,
        "dataset": {"source": splits.source, "train": len(train), "dev": len(dev), "test": len(test)},
        "folders": {model.name: str(model.folder()) for model in models},
        "course_gpt_sha256": digests[models[-1].name],  # the GPT compared: chapter 11 shows it beside the one shipped
        "models": results,
        # "BERT above GPT" tested, and the reverse, "GPT above BERT" (its reverse_significant)
        "bert_over_gpt": dataclasses.asdict(paired_comparison(bert, gpt, accuracy=True)),
        "stage_seconds": stages.seconds,
    }


def markdown(record: dict) -> str:
    lines = [f"MR test accuracy, {record['dataset']['train']} training sentences, {len(record['settings']['seeds'])} "
             f"seeds ({record['machine']['device_name']}, {record['precision']})", "",
             "| model | text vector (chosen on dev) | learning rate (chosen on dev) | test accuracy |",
             "|---|---|---:|---:|"]
    for name, result in record["models"].items():
        lines.append(f"| {name} | {result['pooling']} | {result['learning_rate']:g} | "
                     f"{100 * result['mean']:.1f} ± {100 * result['std']:.1f} |")
    difference = record["bert_over_gpt"]
    verdict = ("BERT above GPT, significant" if difference["significant"] else "GPT above BERT, significant"
               if difference["reverse_significant"] else "not significant either way")
    lines += ["", f"BERT - GPT: {difference['difference']:+.1f} points (95% paired bootstrap interval "
                  f"{difference['low']:+.1f} to {difference['high']:+.1f}; McNemar's exact test, the largest p over "
                  f"the seeds: {difference['mcnemar_p']:.3g}): {verdict} at 95%"]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, required=True, help="folder holding rt-polarity/")
    parser.add_argument("--quick", action="store_true", help="a few hundred examples, one epoch: a smoke test")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda (default: auto)")
    parser.add_argument("--precision", choices=PRECISIONS, default="auto")
    parser.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's choice)")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--bert", type=Path, help="the BERT's folder (default: the course BERT the package ships)")
    parser.add_argument("--gpt", type=Path, help="the GPT's folder (default: the course GPT the package ships)")
    parser.add_argument("--out", type=Path, help="default: benchmarks/results/bert-vs-gpt-<device>[-quick].json")
    parser.add_argument("--work-dir", type=Path, help="the finished stages, for resuming "
                        "(default: benchmarks/stages/bert-vs-gpt-<device>[-quick])")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    name = f"bert-vs-gpt-{device_or_exit(parser, args.device).type}{'-quick' if args.quick else ''}"
    args.out = args.out or RESULTS / f"{name}.json"
    args.work_dir = args.work_dir or default_work_dir(name)
    models = tuple(model if folder is None else dataclasses.replace(model, folder=lambda folder=folder: folder)
                   for model, folder in zip(MODELS, (args.bert, args.gpt)))
    record = run(args, models)
    table = markdown(record)
    print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(without_example_results(record), indent=2) + "\n")
    args.out.with_suffix(".md").write_text(table + "\n")
    print(f"wrote {args.out} and {args.out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
