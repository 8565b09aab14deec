"""Make the course's pretrained BERT: pretrain it on IMDB reviews, then ship it in ``bertlab/course_bert/``.

    python tools/course_bert.py pack --data-root DIR [--packed runs/imdb-train-128.npz]
    python tools/course_bert.py pretrain [--packed FILE] [--work runs/course-bert] [--device cuda]
    python tools/course_bert.py sweep --lrs 5e-4 1e-3 --seconds 300 [--packed FILE] [--work runs/course-bert-sweep]
    python tools/course_bert.py score --data-root DIR [--work runs/course-bert]
    python tools/course_bert.py record --work RUN [RUN ...] [--out benchmarks/results/course-bert-sweep-gpu.json]
    python tools/course_bert.py export --data-root DIR [--work runs/course-bert] [--machine "..."]

``pack`` tokenizes the 75,000 unlabelled and training reviews of the Large Movie Review Dataset (Maas et
al., 2011) in ``DIR/aclImdb`` (the authors' archive, extracted) with the course's WordPiece vocabulary of
8,192 pieces (``bertlab/course_bert/vocab.txt``, learned from the same reviews by
``bertlab.tokenization.train_wordpiece_vocab``) into full-sentence segments of 128 tokens, one compressed
file (``bertlab.pretraining.PackedSegments``): tokenizing takes minutes of a CPU, and the file is all a
run needs, on this machine or a GPU's.

``pretrain`` runs ``bertlab pretrain`` on that file with the arguments recorded below
(``PRETRAIN_ARGUMENTS``, ``STEPS``, ``LEARNING_RATE``): BERT-mini, masked language modelling only (RoBERTa's
recipe, no next sentence prediction), batches of 256 segments, no dropout. The run writes a checkpoint
every 500 steps: if it stops, the same command continues where it stopped.

``sweep`` runs ``pretrain`` with several learning rates side by side (one process each, on one GPU), for
as many steps as fit in ``--seconds``: a calibration of 150 steps of every run, side by side, measures the
steps per second first. ``score`` gives each run's masked-token loss and accuracy on held-out test
reviews, to choose by; ``record`` puts the scored runs side by side in one file.

``export`` writes what the package ships: the weights in float16 (``model.safetensors``), ``config.json``,
``vocab.txt``, ``tokenizer_config.json``, the token counts of the training text (for the unigram
baseline), the metrics log and loss curve, and a model card
(``README.md``) with the masked-token scores on held-out test reviews, measured here against ln V and
the unigram predictor. The scores also go to ``benchmarks/results/course-bert.json``.

How the settings were chosen (``benchmarks/RESULTS.md``, "The course's BERT"): the vocabulary size by
``benchmarks/course_bert_vocabulary.py``; no dropout from the loss curve of a first CPU run (dropout 0.1:
it spent a third of its steps on a plateau); the learning rate by ``sweep`` on a GPU, on the held-out
masked-token loss and MR dev accuracy; the number of steps by the sweep's calibration.
"""

import argparse
import json
import math
import platform
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from bertlab import cli
from bertlab.bert import BertForPreTraining
from bertlab.course_model import EVALUATION_SEED, HELD_OUT_REVIEWS, held_out_reviews
from bertlab.data import imdb_documents
from bertlab.pretraining import (
    METRICS_FILE,
    PLOT_FILE,
    SETTINGS_FILE,
    TOKEN_COUNTS_FILE,
    PackedSegments,
    PretrainingRecipe,
    evaluate_masked_lm,
    load_metrics,
    plot_metrics,
    token_frequencies,
    unigram_masked_lm,
)
from bertlab.tokenization import BertTokenizer

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGE_FOLDER = REPO_ROOT / "bertlab" / "course_bert"
RESULTS_FILE = REPO_ROOT / "benchmarks" / "results" / "course-bert.json"
PACKED_FILE = REPO_ROOT / "runs" / "imdb-train-128.npz"
COMMAND_FILE = "command.json"  # the bertlab arguments of a run, written by pretrain, read by export

SEQ_LEN = 128
LOG_EVERY = 50
PRETRAIN_ARGUMENTS = [
    "pretrain", "--preset", "mini", "--no-nsp", "--masking", "dynamic", "--seq-len", str(SEQ_LEN),
    "--batch-size", "256", "--dropout", "0", "--seed", "0", "--log-every", str(LOG_EVERY), "--checkpoint-every",
    "500", "--no-progress",
]
STEPS = 11350  # what 387 s of an H200 held, two runs side by side (sweep's calibration)
LEARNING_RATE = 2e-3  # the sweep's better held-out masked-token loss, of 1e-3 and 2e-3
CALIBRATION_STEPS = 150  # three log lines: the first holds the start-up, the two others time the steps
FINETUNING_DROPOUT = 0.1  # BERT's, in the shipped config.json: what fine-tuning uses
CLASSIFIER_POOLING = "mean"  # chosen on MR dev by benchmarks/mr_pooling.py, in the shipped config.json


def pack(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    documents = imdb_documents(args.data_root)
    packed = PackedSegments.pack(BertTokenizer(PACKAGE_FOLDER / "vocab.txt"), documents, SEQ_LEN)
    args.packed.parent.mkdir(parents=True, exist_ok=True)
    packed.save(args.packed)
    print(f"wrote {args.packed}: {len(documents)} reviews, {len(packed)} segments, {len(packed.ids)} tokens "
          f"({args.packed.stat().st_size / 1e6:.1f} MB, {time.perf_counter() - start:.0f} s)")
    return 0


def pretrain(args: argparse.Namespace) -> int:
    argv = [*PRETRAIN_ARGUMENTS, "--packed", str(args.packed), "--steps", str(args.steps), "--lr", f"{args.lr:g}",
            "--output", str(args.work), "--device", args.device]
    print("bertlab " + " ".join(argv), flush=True)
    status = cli.main(argv)
    if status == 0:  # the command of a run that exists, for export's model card
        (args.work / COMMAND_FILE).write_text(json.dumps(argv) + "\n")
    return status


def run_side_by_side(args: argparse.Namespace, folder: Path, steps: int) -> list[Path]:
    """``pretrain`` once per learning rate, the processes side by side; the run folders, in --lrs order."""
    runs = [folder / f"lr-{lr:g}" for lr in args.lrs]
    processes = [subprocess.Popen([sys.executable, __file__, "pretrain", "--packed", str(args.packed),
                                   "--work", str(run), "--lr", f"{lr:g}", "--steps", str(steps),
                                   "--device", args.device])
                 for lr, run in zip(args.lrs, runs)]
    failed = [str(run) for run, process in zip(runs, processes) if process.wait() != 0]
    if failed:
        sys.exit(f"sweep: the runs in {', '.join(failed)} failed (their output is above)")
    return runs


def sweep(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    calibration = run_side_by_side(args, args.work / "calibration", CALIBRATION_STEPS)
    rates = []  # steps per second of each run, the first log line (the start-up) left out
    for run in calibration:
        records = load_metrics(run / METRICS_FILE)
        rates.append((records[-1]["step"] - records[0]["step"]) / sum(record["seconds"] for record in records[1:]))
    seconds_left = args.seconds - (time.perf_counter() - start)
    steps = max(LOG_EVERY, int(min(rates) * seconds_left) // LOG_EVERY * LOG_EVERY)
    print(f"sweep: {min(rates):.1f} steps/s side by side, {steps} steps in the {seconds_left:.0f} s left", flush=True)
    runs = run_side_by_side(args, args.work, steps)
    (args.work / "sweep.json").write_text(json.dumps({
        "lrs": args.lrs, "seconds": args.seconds, "steps_per_second_side_by_side": rates, "steps": steps,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor(),
        "runs": [str(run) for run in runs], "wall_seconds": time.perf_counter() - start,
    }, indent=2) + "\n")
    return 0


def placeholders(command: list[str]) -> list[str]:
    """The command with the paths of one machine (after --packed and --output) as FILE and DIR."""
    names = {"--packed": "FILE", "--output": "DIR"}
    return [names.get(previous, argument) for previous, argument in zip(["", *command], command)]


def card(recipe: PretrainingRecipe, config: dict, history: list[dict], scores: dict, machine: str,
         pretraining_dropout: float, command: list[str]) -> str:
    """The model card: what the model is, what it was trained on and how, and how well it predicts."""
    hours = sum(record["seconds"] for record in history) / 3600
    segments_tokens = recipe.max_steps * recipe.batch_size * recipe.seq_len
    final = history[-1]
    model, unigram = scores["model"], scores["unigram"]
    return f"""# The course's BERT: BERT-mini pretrained on IMDB movie reviews

A small BERT (Devlin et al., 2019) for the chapters of *Transformers, from attention to BERT*: the
book's pretraining, fine-tuning and distillation chapters start from it, offline.

| | |
|---|---|
| architecture | BERT-mini (Turc et al., 2019): {config["num_hidden_layers"]} layers, hidden size {config["hidden_size"]}, {config["num_attention_heads"]} heads, feed-forward {config["intermediate_size"]}, post-LayerNorm, GELU, learned positions (up to {config["max_position_embeddings"]}) |
| parameters | {scores["parameters"] / 1e6:.2f}M (the MLM decoder is tied to the word embeddings) |
| vocabulary | {config["vocab_size"]} WordPiece pieces, lower-cased, learned from the training text with `bertlab.tokenization.train_wordpiece_vocab` (Hugging Face `tokenizers`) |
| training text | the 75,000 unlabelled (`train/unsup`) and training (`train/pos`, `train/neg`) reviews of the Large Movie Review Dataset v1.0 (Maas et al., 2011); the 25,000 test reviews are held out |
| objective | masked language modelling only, 15% of the tokens (80% [MASK], 10% random, 10% unchanged), new masks at every pass, on segments of contiguous full sentences of up to {recipe.seq_len} tokens (RoBERTa's recipe, Liu et al., 2019): no next sentence prediction, so the pooler and the NSP head keep their initial weights |
| optimisation | {recipe.max_steps} steps of {recipe.batch_size} segments, AdamW (betas 0.9/0.999, eps 1e-6, weight decay {recipe.weight_decay}), peak learning rate {recipe.lr:g}, linear warm-up over {recipe.warmup} steps and linear decay to 0, gradients clipped at norm {recipe.max_grad_norm}, seed {recipe.seed} |
| classifier | `BertForSequenceClassification` reads `classifier_pooling` = "{config["classifier_pooling"]}" from `config.json`: {"the mean of the final hidden states over the real tokens, since pretraining never trained the pooler or the [CLS] summary (chosen on MR dev, `benchmarks/mr_pooling.py`); Hugging Face's class ignores the field and reads the pooled [CLS]" if config["classifier_pooling"] == "mean" else "the pooled [CLS]"} |
| dropout | {pretraining_dropout:g} while pretraining{" (a run this short learns faster without it, as in Geiping and Goldstein's Cramming, 2023)" if pretraining_dropout == 0 else ""}; `config.json` sets BERT's {config["hidden_dropout_prob"]:g} for fine-tuning |
| hardware and time | {machine}; {hours:.2f} hours of training |
| storage | float16 safetensors (the weights were kept in float32 while training) |

Made by `python tools/course_bert.py pack`, `pretrain` and `export`; the command `pretrain` ran:

    bertlab {" ".join(placeholders(command))}

## Held-out masked-token prediction

On {scores["held_out_reviews"]} test reviews ({model["predicted_tokens"]} masked tokens, fixed masks, seed {EVALUATION_SEED}):

| predictor | loss (nats) | accuracy |
|---|---|---|
| uniform over the vocabulary, ln V | {math.log(config["vocab_size"]):.3f} | {1 / config["vocab_size"]:.4f} |
| unigram: token frequencies of the training text, no context | {unigram["loss"]:.3f} | {unigram["accuracy"]:.3f} |
| this model | {model["loss"]:.3f} | {model["accuracy"]:.3f} |

Training MLM loss over the last {final["step"] - history[-2]["step"] if len(history) > 1 else final["step"]} steps: {final["mlm_loss"]:.3f} nats, accuracy {final["mlm_accuracy"]:.3f}
(`metrics.jsonl`, `loss_curve.png`).

## Use

```python
from bertlab.pretraining import course_bert_folder
from bertlab.bert import BertForPreTraining, BertForSequenceClassification
folder = course_bert_folder()
model = BertForPreTraining.from_pretrained(folder)             # or BertForSequenceClassification
# Hugging Face reads the same folder:
# transformers.BertForPreTraining.from_pretrained(folder), BertTokenizerFast.from_pretrained(folder)
```

It is a small model trained for {hours:.1f} hours on {segments_tokens / 1e6:.0f}M token positions of movie reviews: it
knows the words and phrasing of reviews, not the world; a released BERT-base saw 3.3B words for 1M steps.

## Data and citations

Andrew L. Maas, Raymond E. Daly, Peter T. Pham, Dan Huang, Andrew Y. Ng and Christopher Potts.
2011. Learning Word Vectors for Sentiment Analysis. In *Proceedings of ACL 2011*, pages 142-150.

Jacob Devlin, Ming-Wei Chang, Kenton Lee and Kristina Toutanova. 2019. BERT: Pre-training of Deep
Bidirectional Transformers for Language Understanding. In *Proceedings of NAACL-HLT 2019*.

Iulia Turc, Ming-Wei Chang, Kenton Lee and Kristina Toutanova. 2019. Well-Read Students Learn Better:
On the Importance of Pre-training Compact Models. arXiv:1908.08962.

Yinhan Liu et al. 2019. RoBERTa: A Robustly Optimized BERT Pretraining Approach. arXiv:1907.11692.

Jonas Geiping and Tom Goldstein. 2023. Cramming: Training a Language Model on a Single GPU in One Day.
In *Proceedings of ICML 2023*.
"""


def finished_run(work: Path) -> tuple[list[dict], dict]:
    """The metrics log and recipe of the finished run in ``work``; exits with a message otherwise."""
    history = load_metrics(work / METRICS_FILE)
    recipe = PretrainingRecipe.read(work)
    if not history or history[-1]["step"] != recipe.max_steps:
        sys.exit(f"{work} holds no finished run (last logged step {history[-1]['step'] if history else None} "
                 f"of {recipe.max_steps}): run 'python tools/course_bert.py pretrain' until it ends")
    return history, recipe


def held_out_scores(model, tokenizer, data_root: Path, seq_len: int):
    """The model's masked-token loss and accuracy on the held-out test reviews (fixed masks)."""
    held_out = held_out_reviews(data_root)
    return evaluate_masked_lm(model, tokenizer, held_out, seq_len=seq_len, seed=EVALUATION_SEED), held_out


def score(args: argparse.Namespace) -> int:
    _, recipe = finished_run(args.work)
    model = BertForPreTraining.from_pretrained(args.work).eval()
    scores, _ = held_out_scores(model, BertTokenizer(args.work / "vocab.txt"), args.data_root, recipe.seq_len)
    (args.work / "held_out.json").write_text(json.dumps(vars(scores), indent=2) + "\n")
    print(f"{args.work}: held-out MLM {scores}")
    return 0


def record(args: argparse.Namespace) -> int:
    """The candidates of a sweep, side by side: each run's command, training time and losses and its held-out
    scores (``score``'s ``held_out.json``), with the sweep's calibration, into ``--out``."""
    runs = []
    for work in args.work:
        history, recipe = finished_run(work)
        held_out = work / "held_out.json"
        if not held_out.is_file():
            sys.exit(f"{work} has no held_out.json: run 'python tools/course_bert.py score --work {work}' first")
        runs.append({"folder": work.name, "command": placeholders(json.loads((work / COMMAND_FILE).read_text())),
                     "settings": recipe.settings(), "training_seconds": sum(record["seconds"] for record in history),
                     "final_train_mlm_loss": history[-1]["mlm_loss"],
                     "final_train_mlm_accuracy": history[-1]["mlm_accuracy"],
                     "held_out": json.loads(held_out.read_text())})
    sweeps = [json.loads((work / "sweep.json").read_text()) for work in args.work if (work / "sweep.json").is_file()]
    args.out.write_text(json.dumps({
        "command": "python tools/course_bert.py record --work " + " ".join(str(work) for work in args.work),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "sweep": sweeps[0] if sweeps else None, "runs": runs,
        "held_out_reviews": 2 * HELD_OUT_REVIEWS, "evaluation_seed": EVALUATION_SEED,
    }, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


def export(args: argparse.Namespace) -> int:
    work = args.work
    history, recipe = finished_run(work)
    model = BertForPreTraining.from_pretrained(work).eval()
    tokenizer = BertTokenizer(work / "vocab.txt")
    command = json.loads((work / COMMAND_FILE).read_text())

    start = time.perf_counter()
    model_scores, held_out = held_out_scores(model, tokenizer, args.data_root, recipe.seq_len)
    counts = token_frequencies(tokenizer, imdb_documents(args.data_root))
    unigram_scores = unigram_masked_lm(counts, tokenizer, held_out, seq_len=recipe.seq_len, seed=EVALUATION_SEED)
    print(f"held-out MLM: model {model_scores}, unigram {unigram_scores}, "
          f"ln V = {math.log(tokenizer.vocab_size):.3f} ({time.perf_counter() - start:.0f} s)")

    PACKAGE_FOLDER.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(PACKAGE_FOLDER)  # config.json and the weights, under Hugging Face's names
    weights = PACKAGE_FOLDER / "model.safetensors"
    save_file({name: tensor.to(torch.float16) for name, tensor in load_file(weights).items()}, weights,
              metadata={"format": "pt"})  # half the size; from_pretrained computes in float32
    stored = json.loads((PACKAGE_FOLDER / "config.json").read_text())
    stored["torch_dtype"] = "float32"  # what to compute in: Hugging Face would otherwise keep float16
    pretraining_dropout = stored["hidden_dropout_prob"]
    stored["hidden_dropout_prob"] = stored["attention_probs_dropout_prob"] = FINETUNING_DROPOUT
    stored["classifier_pooling"] = CLASSIFIER_POOLING
    (PACKAGE_FOLDER / "config.json").write_text(json.dumps(stored, indent=2) + "\n")
    tokenizer.save_vocabulary(PACKAGE_FOLDER)
    (PACKAGE_FOLDER / TOKEN_COUNTS_FILE).write_text("".join(f"{int(count)}\n" for count in counts.tolist()))
    (PACKAGE_FOLDER / cli.TOKENIZER_CONFIG_FILE).write_text(json.dumps(
        {"do_lower_case": True, "tokenizer_class": "BertTokenizer", "model_max_length": stored["max_position_embeddings"]},
        indent=2) + "\n")
    for name in (METRICS_FILE, SETTINGS_FILE):
        shutil.copy(work / name, PACKAGE_FOLDER / name)
    plot_metrics(work / METRICS_FILE, PACKAGE_FOLDER / PLOT_FILE)
    machine = args.machine or f"{platform.machine()} CPU, {torch.get_num_threads()} threads, PyTorch {torch.__version__}"
    scores = {"parameters": sum(p.numel() for p in model.parameters()),
              "held_out_reviews": 2 * HELD_OUT_REVIEWS,
              "model": vars(model_scores), "unigram": vars(unigram_scores),
              "ln_vocab_size": math.log(tokenizer.vocab_size)}
    (PACKAGE_FOLDER / "README.md").write_text(card(recipe, stored, history, scores, machine, pretraining_dropout,
                                                   command))
    RESULTS_FILE.write_text(json.dumps({
        "command": "python tools/course_bert.py export --data-root DIR",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "pretraining": {"arguments": command, "settings": recipe.settings(), "machine": machine,
                        "training_hours": sum(record["seconds"] for record in history) / 3600,
                        "final_train_mlm_loss": history[-1]["mlm_loss"]},
        "held_out": scores,
    }, indent=2) + "\n")
    size = (PACKAGE_FOLDER / "model.safetensors").stat().st_size / 1e6
    print(f"wrote {PACKAGE_FOLDER} (weights {size:.1f} MB) and {RESULTS_FILE}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    steps = parser.add_subparsers(dest="step", required=True)
    pack_parser = steps.add_parser("pack", help="tokenize the training reviews into packed segments")
    pretrain_parser = steps.add_parser("pretrain", help="pretrain on the packed segments (re-run to resume)")
    sweep_parser = steps.add_parser("sweep", help="pretrain with several learning rates side by side, in a time budget")
    score_parser = steps.add_parser("score", help="a finished run's masked-token scores on held-out reviews")
    record_parser = steps.add_parser("record", help="the scored runs of a sweep, side by side, in one JSON file")
    export_parser = steps.add_parser("export", help="score a finished run and write bertlab/course_bert/")
    for step in (pack_parser, score_parser, export_parser):
        step.add_argument("--data-root", type=Path, required=True, help="folder holding aclImdb/")
    for step in (pack_parser, pretrain_parser, sweep_parser):
        step.add_argument("--packed", type=Path, default=PACKED_FILE,
                          help=f"the packed segments (default: {PACKED_FILE.relative_to(REPO_ROOT)})")
    for step in (pretrain_parser, sweep_parser):
        step.add_argument("--device", default="auto", help="auto, cpu or cuda (default: auto)")
    for step, folder in [(pretrain_parser, "course-bert"), (sweep_parser, "course-bert-sweep"),
                         (score_parser, "course-bert"), (export_parser, "course-bert")]:
        step.add_argument("--work", type=Path, default=REPO_ROOT / "runs" / folder,
                          help=f"the run's folder: checkpoint, metrics, final weights (default: runs/{folder})")
    pretrain_parser.add_argument("--lr", type=float, default=LEARNING_RATE, help=f"default: {LEARNING_RATE:g}")
    pretrain_parser.add_argument("--steps", type=int, default=STEPS, help=f"default: {STEPS}")
    record_parser.add_argument("--work", type=Path, nargs="+", required=True, help="the scored run folders")
    record_parser.add_argument("--out", type=Path, default=REPO_ROOT / "benchmarks" / "results" / "course-bert-sweep-gpu.json")
    sweep_parser.add_argument("--lrs", type=float, nargs="+", required=True, help="the learning rates to compare")
    sweep_parser.add_argument("--seconds", type=float, required=True,
                              help="wall-clock budget of the sweep, calibration included")
    export_parser.add_argument("--machine", help="the hardware to name in the model card (default: this CPU)")
    args = parser.parse_args()
    return {"pack": pack, "pretrain": pretrain, "sweep": sweep, "score": score, "record": record,
            "export": export}[args.step](args)


if __name__ == "__main__":
    sys.exit(main())
