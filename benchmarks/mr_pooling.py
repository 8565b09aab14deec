"""Which text vector should a classifier read, for the course's BERT? MR dev accuracy, fairly compared.

    python benchmarks/mr_pooling.py run --data-root DIR --model NAME=FOLDER [--model ...] [--random-init]
                                    [--sizes 250 1000 4000 all] [--seeds 0 1 2] [--lrs 1e-4 3e-4 1e-3 3e-3]
                                    [--poolings cls mean] [--device cuda] [--workers 8] --log FILE.jsonl
    python benchmarks/mr_pooling.py report --log FILE.jsonl [--out benchmarks/results/mr-pooling.json]

The course's BERT is pretrained by masked language modelling alone (no next sentence prediction), so
its pooler and its ``[CLS]`` summary never received a gradient before fine-tuning; every token's
vector did. ``BertConfig.classifier_pooling`` offers both to ``BertForSequenceClassification``: "cls",
BERT's pooled ``[CLS]``, and "mean", the mean of the final hidden states over the real tokens (Reimers
and Gurevych, 2019).

``run`` fine-tunes every combination of model (pretrained folders given by ``--model``, and the same
architecture from random weights with ``--random-init``), pooling, number of labelled training examples
(the first 250, 1,000, 4,000 or all of MR's training split, as ``benchmarks/bert_results.py``'s curve),
learning rate and seed, with ``bertlab.finetuning.finetune`` and the protocol of ``bert_results.py``:
batch 32, texts cut to 64 tokens, 2 epochs, more for small sets so that every run takes at least 150
steps. Each run's MR **dev** accuracy (never test) is one line of ``--log``; a run already there is
skipped, so the command resumes. ``--workers`` runs jobs side by side (processes; on one GPU, each
with its own CUDA context).

``report`` takes, for every (model, pooling, size), the learning rate with the best mean dev accuracy
over the seeds (each model's rate tuned on dev, the same grid for all) and reports that mean and its
standard deviation, into ``--out`` and as a Markdown table.
"""

import argparse
import dataclasses
import json
import math
import multiprocessing
import statistics
import sys
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path

import torch

from bertlab.bert import POOLINGS, BertForSequenceClassification
from bertlab.data import load_sentiment
from bertlab.finetuning import FineTuningRecipe, evaluate, finetune
from bertlab.tokenization import BertTokenizer
from bertlab.utils import seed_everything

RANDOM_INIT = "random init"
PROTOCOL = dict(batch_size=32, max_length=64, epochs=2, min_steps=150)


def job_key(job: dict) -> tuple:
    return job["model"], job["pooling"], job["size"], job["lr"], job["seed"]


def classifier(job: dict) -> BertForSequenceClassification:
    """A new classifier for the job: the pretrained folder's weights, or random ones of the same shape."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the expected warning of from_pretrained: a new head
        pretrained = BertForSequenceClassification.from_pretrained(job["folder"])
    model = BertForSequenceClassification(dataclasses.replace(pretrained.config, classifier_pooling=job["pooling"]))
    if job["model"] != RANDOM_INIT:  # else the random weights of the caller's seed
        model.load_state_dict(pretrained.state_dict())
    return model


def run_job(job: dict) -> dict:
    torch.set_num_threads(job["threads"])
    splits = load_sentiment("mr", root=job["data_root"])
    train = splits.train if job["size"] == "all" else splits.train[: int(job["size"])]
    tokenizer = BertTokenizer(Path(job["folder"]) / "vocab.txt")
    epochs = max(PROTOCOL["epochs"], math.ceil(PROTOCOL["min_steps"] * PROTOCOL["batch_size"] / len(train)))
    seed_everything(job["seed"])
    model = classifier(job)
    start = time.perf_counter()
    recipe = FineTuningRecipe(epochs=epochs, batch_size=PROTOCOL["batch_size"], encoder_lr=job["lr"],
                              max_length=PROTOCOL["max_length"], seed=job["seed"])
    finetune(model, tokenizer, train, recipe=recipe, device=job["device"], progress=False)
    dev = evaluate(model, tokenizer, splits.dev, max_length=PROTOCOL["max_length"])
    return {**{name: job[name] for name in ("model", "pooling", "size", "lr", "seed")},
            "train_examples": len(train), "epochs": epochs, "dev_accuracy": dev["accuracy"],
            "seconds": round(time.perf_counter() - start, 1), "device": job["device"]}


def run(args: argparse.Namespace) -> int:
    models = dict(spec.split("=", 1) for spec in args.model)
    if args.random_init:
        models[RANDOM_INIT] = next(iter(models.values()))  # its config and vocabulary
    done = set()
    if args.log.is_file():
        done = {job_key(json.loads(line)) for line in args.log.read_text().splitlines() if line.strip()}
    jobs = [{"model": name, "folder": folder, "pooling": pooling, "size": size, "lr": lr, "seed": seed,
             "data_root": args.data_root, "device": args.device, "threads": args.threads}
            for seed in args.seeds for size in args.sizes for name, folder in models.items()
            for pooling in args.poolings for lr in args.lrs]
    jobs = [job for job in jobs if job_key(job) not in done]
    print(f"{len(jobs)} runs to do ({len(done)} in {args.log} already)", flush=True)
    args.log.parent.mkdir(parents=True, exist_ok=True)
    context = multiprocessing.get_context("spawn")  # CUDA in every worker
    with context.Pool(args.workers) as pool, args.log.open("a") as log:
        for result in pool.imap_unordered(run_job, jobs):
            log.write(json.dumps(result) + "\n")
            log.flush()
            print(f"{result['model']}, {result['pooling']}, {result['size']} labels, lr {result['lr']:g}, seed "
                  f"{result['seed']}: dev {100 * result['dev_accuracy']:.1f}% ({result['seconds']} s)", flush=True)
    return 0


def report(args: argparse.Namespace) -> int:
    results = [json.loads(line) for line in args.log.read_text().splitlines() if line.strip()]
    groups: dict[tuple, dict[float, list[float]]] = {}
    for result in results:
        by_lr = groups.setdefault((result["model"], result["pooling"], str(result["size"])), {})
        by_lr.setdefault(result["lr"], []).append(result["dev_accuracy"])
    rows = []
    for (model, pooling, size), by_lr in groups.items():
        seeds = max(len(accuracies) for accuracies in by_lr.values())
        complete = {lr: accuracies for lr, accuracies in by_lr.items() if len(accuracies) == seeds}
        lr = max(complete, key=lambda rate: statistics.mean(complete[rate]))
        accuracies = complete[lr]
        rows.append({"model": model, "pooling": pooling, "size": size, "learning_rate": lr, "seeds": seeds,
                     "dev_accuracy_mean": statistics.mean(accuracies),
                     "dev_accuracy_std": statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0,
                     "mean_dev_accuracy_by_learning_rate": {f"{rate:g}": statistics.mean(values)
                                                            for rate, values in sorted(by_lr.items())}})
    sizes = sorted({row["size"] for row in rows}, key=lambda size: math.inf if size == "all" else int(size))
    print("| model | pooling | " + " | ".join(f"{size} labels" for size in sizes) + " |")
    print("|---|---|" + "---:|" * len(sizes))
    for model, pooling in sorted({(row["model"], row["pooling"]) for row in rows}):
        cells = []
        for size in sizes:
            row = next((row for row in rows if (row["model"], row["pooling"], row["size"]) == (model, pooling, size)),
                       None)
            cells.append("" if row is None else f"{100 * row['dev_accuracy_mean']:.1f} ± "
                         f"{100 * row['dev_accuracy_std']:.1f} (lr {row['learning_rate']:g}, {row['seeds']} seeds)")
        print(f"| {model} | {pooling} | " + " | ".join(cells) + " |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "command": "python benchmarks/mr_pooling.py run ...; python benchmarks/mr_pooling.py report",
        "note": args.note,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "protocol": PROTOCOL, "devices": sorted({result["device"] for result in results}),
        "rows": sorted(rows, key=lambda row: (row["model"], row["pooling"], row["size"])), "runs": results,
    }, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="fine-tune the grid, one line of --log per run")
    run_parser.add_argument("--data-root", type=Path, help="folder holding rt-polarity/ (default: $BERTLAB_DATA)")
    run_parser.add_argument("--model", action="append", required=True, metavar="NAME=FOLDER",
                            help="a pretrained model folder and the name to report it under")
    run_parser.add_argument("--random-init", action="store_true", help="also the first model's shape, random weights")
    run_parser.add_argument("--sizes", nargs="+", default=["250", "1000", "4000", "all"])
    run_parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    run_parser.add_argument("--lrs", type=float, nargs="+", default=[1e-4, 3e-4, 1e-3, 3e-3])
    run_parser.add_argument("--poolings", nargs="+", choices=POOLINGS, default=list(POOLINGS))
    run_parser.add_argument("--device", default="cpu")
    run_parser.add_argument("--workers", type=int, default=1)
    run_parser.add_argument("--threads", type=int, default=1, help="torch CPU threads per worker (default: 1)")
    for command in (run_parser, commands.add_parser("report", help="choose each learning rate on dev, tabulate")):
        command.add_argument("--log", type=Path, required=True, help="the JSON lines of the runs")
    commands.choices["report"].add_argument("--out", type=Path, default=Path("benchmarks/results/mr-pooling.json"))
    commands.choices["report"].add_argument("--note", default="", help="how the runs were made, for the record")
    args = parser.parse_args()
    return run(args) if args.command == "run" else report(args)


if __name__ == "__main__":
    sys.exit(main())
