"""Make the course's pretrained BERT: pretrain it on IMDB reviews, then ship it in ``bertlab/course_bert/``.

    python tools/course_bert.py pretrain --data-root DIR [--work runs/course-bert]
    python tools/course_bert.py export --data-root DIR [--work runs/course-bert]

``pretrain`` runs ``bertlab pretrain`` with the arguments recorded below (``PRETRAIN_ARGUMENTS``) on the
75,000 unlabelled and training reviews of the Large Movie Review Dataset (Maas et al., 2011) in
``DIR/aclImdb`` (the authors' archive, extracted): BERT-mini, a WordPiece vocabulary of 8,192 pieces
learned from the same reviews, masked language modelling on full-sentence segments of 128 tokens
(RoBERTa's recipe, no next sentence prediction), 16,000 steps of 16 segments, no dropout. The run writes
a checkpoint every 100 steps: if it stops, the same command continues where it stopped.

``export`` writes what the package ships: the weights in float16 (``model.safetensors``), ``config.json``,
``vocab.txt``, ``tokenizer_config.json``, the token counts of the training text (for the unigram
baseline), the metrics log and loss curve, and a model card
(``README.md``) with the masked-token scores on held-out test reviews, measured here against ln V and
the unigram predictor. The scores also go to ``benchmarks/results/course-bert.json``.

How the settings were chosen (``benchmarks/RESULTS.md``, "The course's BERT"): the vocabulary size by
``benchmarks/course_bert_vocabulary.py``, the learning rate by ``benchmarks/course_bert_sweep.py``, the
batch of 16 and no dropout from the loss curve of a first run (32 segments, dropout 0.1: it spent a third
of its steps on a plateau), the number of steps to fill about 2 hours of a 2-core CPU at the measured speed.
"""

import argparse
import json
import math
import platform
import shutil
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from bertlab import cli
from bertlab.bert import BertForPreTraining
from bertlab.data import IMDB_HELD_OUT_FOLDERS, imdb_documents
from bertlab.pretraining import (
    METRICS_FILE,
    PLOT_FILE,
    SETTINGS_FILE,
    TOKEN_COUNTS_FILE,
    evaluate_masked_lm,
    load_metrics,
    token_frequencies,
    unigram_masked_lm,
)
from bertlab.tokenization import BertTokenizer

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGE_FOLDER = REPO_ROOT / "bertlab" / "course_bert"
RESULTS_FILE = REPO_ROOT / "benchmarks" / "results" / "course-bert.json"

PRETRAIN_ARGUMENTS = [
    "pretrain", "--corpus", "imdb", "--preset", "mini", "--vocab-size", "8192", "--no-nsp", "--masking", "dynamic",
    "--seq-len", "128", "--batch-size", "16", "--steps", "16000", "--lr", "5e-4", "--dropout", "0", "--seed", "0",
    "--log-every", "25", "--checkpoint-every", "100", "--no-progress",
]
FINETUNING_DROPOUT = 0.1  # BERT's, in the shipped config.json: what fine-tuning uses
HELD_OUT_REVIEWS = 1000  # test reviews per polarity scored by export (2,000 reviews, about 0.5M tokens)
EVALUATION_SEED = 1234


def pretrain(args: argparse.Namespace) -> int:
    argv = [*PRETRAIN_ARGUMENTS, "--data-root", str(args.data_root), "--output", str(args.work), "--device",
            args.device]
    print("bertlab " + " ".join(argv), flush=True)
    return cli.main(argv)


def card(settings: dict, config: dict, history: list[dict], scores: dict, machine: str,
         pretraining_dropout: float) -> str:
    """The model card: what the model is, what it was trained on and how, and how well it predicts."""
    hours = sum(record["seconds"] for record in history) / 3600
    segments_tokens = settings["max_steps"] * settings["batch_size"] * settings["seq_len"]
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
| objective | masked language modelling only, 15% of the tokens (80% [MASK], 10% random, 10% unchanged), new masks at every pass, on segments of contiguous full sentences of up to {settings["seq_len"]} tokens (RoBERTa's recipe, Liu et al., 2019): no next sentence prediction, so the pooler and the NSP head keep their initial weights |
| optimisation | {settings["max_steps"]} steps of {settings["batch_size"]} segments, AdamW (betas 0.9/0.999, eps 1e-6, weight decay {settings["weight_decay"]}), peak learning rate {settings["lr"]:g}, linear warm-up over {settings["warmup_steps"]} steps and linear decay to 0, gradients clipped at norm {settings["max_grad_norm"]}, seed {settings["seed"]} |
| dropout | {pretraining_dropout:g} while pretraining{" (a run this short learns faster without it, as in Geiping and Goldstein's Cramming, 2023)" if pretraining_dropout == 0 else ""}; `config.json` sets BERT's {config["hidden_dropout_prob"]:g} for fine-tuning |
| hardware and time | {machine}; {hours:.2f} hours of training |
| storage | float16 safetensors (the model was trained in float32) |

Made by `python tools/course_bert.py pretrain` then `export`; the command it runs:

    bertlab {" ".join(PRETRAIN_ARGUMENTS)} --data-root DIR --output DIR

## Held-out masked-token prediction

On {scores["held_out_reviews"]} test reviews ({model["predicted_tokens"]} masked tokens, fixed masks, seed {EVALUATION_SEED}):

| predictor | loss (nats) | accuracy |
|---|---|---|
| uniform over the vocabulary, ln V | {math.log(config["vocab_size"]):.3f} | {1 / config["vocab_size"]:.4f} |
| unigram: token frequencies of the training text, no context | {unigram["loss"]:.3f} | {unigram["accuracy"]:.3f} |
| this model | {model["loss"]:.3f} | {model["accuracy"]:.3f} |

Training MLM loss over the last {settings.get("log_every", 25)} steps: {final["mlm_loss"]:.3f} nats, accuracy {final["mlm_accuracy"]:.3f}
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

It is a small model trained for {hours:.1f} hours of a 2-core CPU on {segments_tokens / 1e6:.0f}M token positions of movie
reviews: it knows the words and phrasing of reviews, not the world; a released BERT-base saw 3.3B words for 1M steps.

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


def export(args: argparse.Namespace) -> int:
    work = args.work
    history = load_metrics(work / METRICS_FILE)
    settings = json.loads((work / SETTINGS_FILE).read_text())
    if not history or history[-1]["step"] != settings["max_steps"]:
        sys.exit(f"{work} holds no finished run (last logged step {history[-1]['step'] if history else None} "
                 f"of {settings['max_steps']}): run 'python tools/course_bert.py pretrain' until it ends")
    model = BertForPreTraining.from_pretrained(work).eval()
    tokenizer = BertTokenizer(work / "vocab.txt")

    start = time.perf_counter()
    held_out = imdb_documents(args.data_root, IMDB_HELD_OUT_FOLDERS, max_reviews_per_folder=HELD_OUT_REVIEWS)
    counts = token_frequencies(tokenizer, imdb_documents(args.data_root))
    model_scores = evaluate_masked_lm(model, tokenizer, held_out, seq_len=settings["seq_len"], seed=EVALUATION_SEED)
    unigram_scores = unigram_masked_lm(counts, tokenizer, held_out, seq_len=settings["seq_len"], seed=EVALUATION_SEED)
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
    (PACKAGE_FOLDER / "config.json").write_text(json.dumps(stored, indent=2) + "\n")
    tokenizer.save_vocabulary(PACKAGE_FOLDER)
    (PACKAGE_FOLDER / TOKEN_COUNTS_FILE).write_text("".join(f"{int(count)}\n" for count in counts.tolist()))
    (PACKAGE_FOLDER / cli.TOKENIZER_CONFIG_FILE).write_text(json.dumps(
        {"do_lower_case": True, "tokenizer_class": "BertTokenizer", "model_max_length": stored["max_position_embeddings"]},
        indent=2) + "\n")
    for name in (METRICS_FILE, PLOT_FILE, SETTINGS_FILE):
        shutil.copy(work / name, PACKAGE_FOLDER / name)
    machine = args.machine or f"{platform.machine()} CPU, {torch.get_num_threads()} threads, PyTorch {torch.__version__}"
    scores = {"parameters": sum(p.numel() for p in model.parameters()),
              "held_out_reviews": 2 * HELD_OUT_REVIEWS,
              "model": vars(model_scores), "unigram": vars(unigram_scores),
              "ln_vocab_size": math.log(tokenizer.vocab_size)}
    (PACKAGE_FOLDER / "README.md").write_text(card(settings, stored, history, scores, machine, pretraining_dropout))
    RESULTS_FILE.write_text(json.dumps({
        "command": "python tools/course_bert.py export --data-root DIR",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "pretraining": {"arguments": PRETRAIN_ARGUMENTS, "settings": settings, "machine": machine,
                        "training_hours": sum(record["seconds"] for record in history) / 3600,
                        "final_train_mlm_loss": history[-1]["mlm_loss"]},
        "held_out": scores,
    }, indent=2) + "\n")
    size = (PACKAGE_FOLDER / "model.safetensors").stat().st_size / 1e6
    print(f"wrote {PACKAGE_FOLDER} (weights {size:.1f} MB) and {RESULTS_FILE}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=["pretrain", "export"])
    parser.add_argument("--data-root", type=Path, required=True, help="folder holding aclImdb/")
    parser.add_argument("--work", type=Path, default=REPO_ROOT / "runs" / "course-bert",
                        help="the run's folder: checkpoint, metrics, final weights (default: runs/course-bert)")
    parser.add_argument("--device", default="auto", help="for pretrain: auto, cpu or cuda (default: auto)")
    parser.add_argument("--machine", help="for export: the hardware to name in the model card")
    args = parser.parse_args()
    return pretrain(args) if args.step == "pretrain" else export(args)


if __name__ == "__main__":
    sys.exit(main())
