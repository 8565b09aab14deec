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
(``OBJECTIVE_ARGUMENTS``, ``BATCH_SIZE``, ``STEPS``, ``LEARNING_RATE``): BERT-mini, masked language modelling only
(RoBERTa's recipe, no next sentence prediction), batches of 256 segments, no dropout. The run writes a checkpoint
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
import shutil
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
    PretrainingRecipe,
    evaluate_masked_lm,
    plot_metrics,
    token_frequencies,
    unigram_masked_lm,
)
from bertlab.tokenization import BertTokenizer
from course_models import COMMAND_FILE, REPO_ROOT, CourseModel, main, placeholders, training_machine, training_tokens

PACKAGE_FOLDER = REPO_ROOT / "bertlab" / "course_bert"
RESULTS_FILE = REPO_ROOT / "benchmarks" / "results" / "course-bert.json"
OBJECTIVE_ARGUMENTS = ("pretrain", "--preset", "mini", "--no-nsp", "--masking", "dynamic")
BATCH_SIZE = 256
STEPS = 11350  # what 387 s of an H200 held, two runs side by side (sweep's calibration)
LEARNING_RATE = 2e-3  # the sweep's better held-out masked-token loss, of 1e-3 and 2e-3
FINETUNING_DROPOUT = 0.1  # BERT's, in the shipped config.json: what fine-tuning uses
CLASSIFIER_POOLING = "mean"  # chosen on MR dev by benchmarks/mr_pooling.py, in the shipped config.json


def card(recipe: PretrainingRecipe, config: dict, history: list[dict], scores: dict, machine: str,
         pretraining_dropout: float, command: list[str]) -> str:
    """The model card: what the model is, what it was trained on and how, and how well it predicts."""
    hours = sum(record["seconds"] for record in history) / 3600
    final = history[-1]
    model, unigram = scores["model"], scores["unigram"]
    return f"""# The course's BERT: BERT-mini pretrained on IMDB movie reviews

A small BERT (Devlin et al., 2019) for the chapters of *Transformers, from attention to BERT*: the
book's pretraining, fine-tuning and distillation chapters start from it, offline.

| | |
|---|---|
| architecture | BERT-mini (Turc et al., 2019): {config["num_hidden_layers"]} layers, hidden size \
{config["hidden_size"]}, {config["num_attention_heads"]} heads, feed-forward {config["intermediate_size"]}, \
post-LayerNorm, GELU, learned positions (up to {config["max_position_embeddings"]}) |
| parameters | {scores["parameters"] / 1e6:.2f}M (the MLM decoder is tied to the word embeddings) |
| vocabulary | {config["vocab_size"]} WordPiece pieces, lower-cased, learned from the training text with \
`bertlab.tokenization.train_wordpiece_vocab` (Hugging Face `tokenizers`) |
| training text | the 75,000 unlabelled (`train/unsup`) and training (`train/pos`, `train/neg`) reviews of the \
Large Movie Review Dataset v1.0 (Maas et al., 2011); the 25,000 test reviews are held out |
| objective | masked language modelling only, 15% of the tokens (80% [MASK], 10% random, 10% unchanged), new \
masks at every pass, on segments of contiguous full sentences of up to {recipe.seq_len} tokens (RoBERTa's recipe, \
Liu et al., 2019): no next sentence prediction, so the pooler and the NSP head keep their initial weights |
| optimisation | {recipe.max_steps} steps of {recipe.batch_size} segments, AdamW (betas 0.9/0.999, eps 1e-6, \
weight decay {recipe.weight_decay}), peak learning rate {recipe.lr:g}, linear warm-up over {recipe.warmup} steps \
and linear decay to 0, gradients clipped at norm {recipe.max_grad_norm}, seed {recipe.seed} |
| classifier | `BertForSequenceClassification` reads `classifier_pooling` = "{config["classifier_pooling"]}" from \
`config.json`: {"the mean of the final hidden states over the real tokens, since pretraining never trained the "
"pooler or the [CLS] summary (chosen on MR dev, `benchmarks/mr_pooling.py`); Hugging Face's class ignores the "
"field and reads the pooled [CLS]" if config["classifier_pooling"] == "mean" else "the pooled [CLS]"} |
| dropout | {pretraining_dropout:g} while pretraining{" (a run this short learns faster without it, as in Geiping "
"and Goldstein's Cramming, 2023)" if pretraining_dropout == 0 else ""}; `config.json` sets BERT's \
{config["hidden_dropout_prob"]:g} for fine-tuning |
| hardware and time | {machine}; {hours:.2f} hours of training |
| storage | float16 safetensors (the weights were kept in float32 while training) |

Made by `python tools/course_bert.py pack`, `pretrain` and `export`; the command `pretrain` ran:

    bertlab {" ".join(placeholders(command))}

## Held-out masked-token prediction

On {scores["held_out_reviews"]} test reviews ({model["predicted_tokens"]} masked tokens, fixed masks, seed \
{EVALUATION_SEED}):

| predictor | loss (nats) | accuracy |
|---|---|---|
| uniform over the vocabulary, ln V | {math.log(config["vocab_size"]):.3f} | {1 / config["vocab_size"]:.4f} |
| unigram: token frequencies of the training text, no context | {unigram["loss"]:.3f} | {unigram["accuracy"]:.3f} |
| this model | {model["loss"]:.3f} | {model["accuracy"]:.3f} |

Training MLM loss over the last {final["step"] - history[-2]["step"] if len(history) > 1 else final["step"]} \
steps: {final["mlm_loss"]:.3f} nats, accuracy {final["mlm_accuracy"]:.3f}
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

It is a small model trained for {hours:.1f} hours on {training_tokens(recipe) / 1e6:.0f}M token positions of \
movie reviews: it
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


def held_out_scores(model: BertForPreTraining, tokenizer: BertTokenizer, data_root: Path, seq_len: int) -> dict:
    """The model's masked-token loss and accuracy on the held-out test reviews (fixed masks)."""
    return vars(evaluate_masked_lm(model, tokenizer, held_out_reviews(data_root), seq_len=seq_len,
                                   seed=EVALUATION_SEED))


def export(args: argparse.Namespace, history: list[dict], recipe: PretrainingRecipe) -> int:
    work = args.work
    model = BertForPreTraining.from_pretrained(work).eval()
    tokenizer = BertTokenizer(work / "vocab.txt")
    command = json.loads((work / COMMAND_FILE).read_text())

    start = time.perf_counter()
    held_out = held_out_reviews(args.data_root)
    model_scores = evaluate_masked_lm(model, tokenizer, held_out, seq_len=recipe.seq_len, seed=EVALUATION_SEED)
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
        {"do_lower_case": True, "tokenizer_class": "BertTokenizer",
         "model_max_length": stored["max_position_embeddings"]},
        indent=2) + "\n")
    for name in (METRICS_FILE, SETTINGS_FILE):
        shutil.copy(work / name, PACKAGE_FOLDER / name)
    plot_metrics(work / METRICS_FILE, PACKAGE_FOLDER / PLOT_FILE)
    machine = training_machine(args)
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


COURSE_BERT = CourseModel(
    name="BERT", tool=Path(__file__).resolve(), work_name="course-bert", objective_arguments=OBJECTIVE_ARGUMENTS,
    batch_size=BATCH_SIZE,
    steps=STEPS, learning_rate=LEARNING_RATE, train_metrics=("mlm_loss", "mlm_accuracy"),
    load=lambda folder: BertForPreTraining.from_pretrained(folder).eval(), held_out_scores=held_out_scores,
    export=export, sweep_record=REPO_ROOT / "benchmarks" / "results" / "course-bert-sweep-gpu.json",
)


if __name__ == "__main__":
    sys.exit(main(COURSE_BERT, description=__doc__))
