"""Make the course's GPT: pretrain it on the course BERT's IMDB reviews, then ship it in ``bertlab/course_gpt/``.

    python tools/course_bert.py pack --data-root DIR         # the packed segments both models read
    python tools/course_gpt.py pretrain [--packed FILE] [--work runs/course-gpt] [--device cuda]
    python tools/course_gpt.py sweep --lrs 1e-3 2e-3 --steps 11350 [--seconds S] [--work runs/course-gpt-sweep]
    python tools/course_gpt.py score --data-root DIR [--work runs/course-gpt]
    python tools/course_gpt.py record --work RUN [RUN ...] [--out benchmarks/results/course-gpt-sweep.json]
    python tools/course_gpt.py export --data-root DIR [--work runs/course-gpt] [--packed FILE] [--bert FOLDER]
                                      [--machine "..."]

The course GPT is the course BERT's sibling for chapter 11: the same data, size and budget, trained the
other way. It reads the same packed segments of the 75,000 training reviews (``tools/course_bert.py
pack``), each as [CLS] segment [SEP], with the same WordPiece vocabulary; its size is the course BERT's
(``bertlab.gpt.PRESETS["course"]``: 4 layers of width 256, 4 heads, learned positions, 5.39M parameters
against BERT-mini's 5.53M); and ``pretrain`` runs ``bertlab pretrain --objective causal`` with the course
BERT's batch (``BATCH_SIZE``, 256 segments of up to 128 tokens) and number of steps (``STEPS``, both
imported from ``tools/course_bert.py``), its schedule (warm-up 10% then linear decay), no dropout and seed 0. Only the
objective differs: every next token instead of 15% masked ones. The learning rate is the GPT's own,
chosen like the BERT's by ``sweep`` (``--steps`` keeps the BERT's budget) on the held-out next-token loss
(``score``, ``record``).

``export`` writes what the package ships (float16 weights, ``config.json`` in Hugging Face's GPT-2 layout,
the vocabulary, the metrics and loss curve) and a model card (``README.md``) with the held-out scores on
the course BERT's 2,000 test reviews: the model's next-token loss, perplexity and accuracy against the
count-based baselines of ``bertlab.ngram`` (the add-k unigram and bigram, their k chosen on other test
reviews, and the interpolated Kneser-Ney bigram) on the same tokens, and the GPT's prediction of the
words the course BERT's card masks, from their left context, beside the course BERT's from both sides.
The scores also go to ``benchmarks/results/course-gpt.json``.
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
from bertlab.course_model import (COURSE_BERT_FOLDER, EVALUATION_SEED, HELD_OUT_REVIEWS, held_out_reviews,
                                  weights_sha256)
from bertlab.data import IMDB_HELD_OUT_FOLDERS, imdb_documents
from bertlab.gpt import GPTLMHeadModel
from bertlab.ngram import AddKBigram, AddKUnigram, KneserNeyBigram, NGramCounts
from bertlab.pretraining import (
    METRICS_FILE,
    PLOT_FILE,
    SETTINGS_FILE,
    PackedSegments,
    PretrainingRecipe,
    causal_masked_lm,
    evaluate_causal_lm,
    evaluate_masked_lm,
    plot_metrics,
)
from bertlab.tokenization import BertTokenizer
from course_bert import BATCH_SIZE, STEPS
from course_models import (COMMAND_FILE, PACKED_FILE, REPO_ROOT, CourseModel, main, placeholders, training_machine,
                           training_tokens)

PACKAGE_FOLDER = REPO_ROOT / "bertlab" / "course_gpt"
RESULTS_FILE = REPO_ROOT / "benchmarks" / "results" / "course-gpt.json"
OBJECTIVE_ARGUMENTS = ("pretrain", "--objective", "causal", "--preset", "course")
LEARNING_RATE = 2e-3  # the course BERT's, until the GPT's own sweep has chosen (benchmarks/RESULTS.md)
FINETUNING_DROPOUT = 0.1  # GPT-2's, in the shipped config.json: what fine-tuning uses
DEV_REVIEWS = 500  # test reviews of each polarity after the held-out ones, on which the add-k baselines choose k
ADD_K_GRID = (1.0, 0.1, 0.01, 0.001)


def export_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--packed", type=Path, default=PACKED_FILE,
                        help="the packed training segments (pack's file), whose counts the baselines read "
                             f"(default: {PACKED_FILE.relative_to(REPO_ROOT)})")
    parser.add_argument("--bert", type=Path, default=COURSE_BERT_FOLDER,
                        help="the BERT of the same data, size and budget whose masked words the card compares "
                             "(default: the shipped course BERT, bertlab/course_bert)")


def held_out_scores(model: GPTLMHeadModel, tokenizer: BertTokenizer, data_root: Path, seq_len: int) -> dict:
    """The model's next-token loss, perplexity and accuracy on the held-out test reviews."""
    return vars(evaluate_causal_lm(model, tokenizer, held_out_reviews(data_root), seq_len=seq_len))


def dev_reviews(data_root: Path) -> list[list[str]]:
    """``DEV_REVIEWS`` test reviews of each polarity after the held-out ones (other reviews, same movies'
    split): where the baselines' smoothing is chosen, so that the held-out scores choose nothing."""
    return [document for folder in IMDB_HELD_OUT_FOLDERS
            for document in imdb_documents(data_root, [folder],
                                           max_reviews_per_folder=HELD_OUT_REVIEWS + DEV_REVIEWS)[HELD_OUT_REVIEWS:]]


def baseline_scores(tokenizer: BertTokenizer, packed: PackedSegments, data_root: Path, seq_len: int,
                    held_out: list) -> dict:
    """The count-based models of the training segments on the held-out tokens: the add-k unigram and bigram
    (k of ``ADD_K_GRID`` with the lowest loss on ``dev_reviews``) and the interpolated Kneser-Ney bigram."""
    counts = NGramCounts.fit(packed, tokenizer.vocab_size, bos_token_id=tokenizer.cls_token_id,
                             eos_token_id=tokenizer.sep_token_id)
    dev = dev_reviews(data_root)
    scores = {}
    add_k_models = {"add_k_unigram": lambda k: AddKUnigram(counts.unigram, k),
                    "add_k_bigram": lambda k: AddKBigram(counts, k)}
    for name, model_with in add_k_models.items():
        dev_losses = {k: evaluate_causal_lm(model_with(k), tokenizer, dev, seq_len=seq_len).loss for k in ADD_K_GRID}
        k = min(dev_losses, key=dev_losses.get)
        scores[name] = {"k": k, "dev_loss_by_k": dev_losses,
                        **vars(evaluate_causal_lm(model_with(k), tokenizer, held_out, seq_len=seq_len))}
    kneser_ney = KneserNeyBigram(counts)
    scores["kneser_ney_bigram"] = {"discount": kneser_ney.discount,
                                   **vars(evaluate_causal_lm(kneser_ney, tokenizer, held_out, seq_len=seq_len))}
    return scores


def card(recipe: PretrainingRecipe, config: dict, history: list[dict], scores: dict, machine: str,
         command: list[str]) -> str:
    """The model card: what the model is, what it was trained on and how, and how well it predicts."""
    hours = sum(record["seconds"] for record in history) / 3600
    final = history[-1]
    model, baselines, masked = scores["model"], scores["baselines"], scores["masked_words"]
    vocab_size = config["vocab_size"]
    rows = [("uniform over the vocabulary", math.log(vocab_size), vocab_size, 1 / vocab_size),
            (f"add-k unigram (k = {baselines['add_k_unigram']['k']:g}, chosen on other test reviews), no context",
             *(baselines["add_k_unigram"][name] for name in ("loss", "perplexity", "accuracy"))),
            (f"add-k bigram (k = {baselines['add_k_bigram']['k']:g})",
             *(baselines["add_k_bigram"][name] for name in ("loss", "perplexity", "accuracy"))),
            (f"interpolated Kneser-Ney bigram (D = {baselines['kneser_ney_bigram']['discount']:.3f})",
             *(baselines["kneser_ney_bigram"][name] for name in ("loss", "perplexity", "accuracy"))),
            ("this model", model["loss"], model["perplexity"], model["accuracy"])]
    table = "\n".join(f"| {name} | {loss:.3f} | {ppl:.1f} | {accuracy:.3f} |" for name, loss, ppl, accuracy in rows)
    return f"""# The course's GPT: a GPT-2-style decoder pretrained on IMDB movie reviews

A small GPT (Radford et al., 2019) for chapter 11 of *Transformers, from attention to BERT*: the course
BERT's sibling, trained on the same reviews with the same size and budget, left to right.

| | |
|---|---|
| architecture | GPT-2 (Radford et al., 2019): {config["n_layer"]} pre-LayerNorm blocks of width {config["n_embd"]}, \
{config["n_head"]} heads, feed-forward {4 * config["n_embd"] if config.get("n_inner") is None else config["n_inner"]}, \
GELU (tanh), learned positions (up to {config["n_positions"]}), causal self-attention |
| parameters | {scores["parameters"] / 1e6:.2f}M (the output layer is tied to the token embeddings; the course BERT \
has 5.53M) |
| vocabulary | the course BERT's {config["vocab_size"]} WordPiece pieces; [CLS] starts a text and [SEP] ends it |
| training text | the 75,000 unlabelled (`train/unsup`) and training (`train/pos`, `train/neg`) reviews of the \
Large Movie Review Dataset v1.0 (Maas et al., 2011), in the course BERT's segments of contiguous full sentences of \
up to {recipe.seq_len} tokens; the 25,000 test reviews are held out |
| objective | causal language modelling: every token predicted from the tokens before it (the loss of each \
position i on the token i + 1) |
| optimisation | {recipe.max_steps} steps of {recipe.batch_size} segments, AdamW (betas 0.9/0.999, eps 1e-6, \
weight decay {recipe.weight_decay}), peak learning rate {recipe.lr:g}, linear warm-up over {recipe.warmup} steps \
and linear decay to 0, gradients clipped at norm {recipe.max_grad_norm}, seed {recipe.seed}: the course BERT's, \
but for the learning rate |
| dropout | 0 while pretraining, as the course BERT; `config.json` sets GPT-2's {config["resid_pdrop"]:g} for \
fine-tuning |
| hardware and time | {machine}; {hours:.2f} hours of training |
| storage | float16 safetensors (the weights were kept in float32 while training) |

Made by `python tools/course_bert.py pack`, then `python tools/course_gpt.py pretrain` and `export`; the
command `pretrain` ran:

    bertlab {" ".join(placeholders(command))}

## Held-out next-token prediction

On the course BERT's {scores["held_out_reviews"]} held-out test reviews ({model["predicted_tokens"]} predicted \
tokens; the
count-based models counted the training text):

| predictor | loss (nats) | perplexity | accuracy |
|---|---|---|---|
{table}

Training loss over the last {final["step"] - history[-2]["step"] if len(history) > 1 else final["step"]} steps: \
{final["loss"]:.3f} nats, accuracy {final["accuracy"]:.3f}
(`metrics.jsonl`, `loss_curve.png`).

## The course BERT's masked words, from the left

The words the course BERT's card masks ({masked["bert"]["predicted_tokens"]} tokens of the same reviews, fixed masks,
seed {EVALUATION_SEED}): a BERT reads both sides of each, this model only the words before it. The BERT is
`{masked["bert_folder"]}`, trained on {masked["bert_training_tokens"] / 1e6:.0f}M token positions (this model: \
{training_tokens(recipe) / 1e6:.0f}M).

| predictor | loss (nats) | accuracy |
|---|---|---|
| the BERT, both sides | {masked["bert"]["loss"]:.3f} | {masked["bert"]["accuracy"]:.3f} |
| this model, left context only | {masked["gpt"]["loss"]:.3f} | {masked["gpt"]["accuracy"]:.3f} |

## Use

```python
from bertlab.course_model import course_gpt_folder
from bertlab.gpt import GPTLMHeadModel, GPTForSequenceClassification
folder = course_gpt_folder()
model = GPTLMHeadModel.from_pretrained(folder)                 # or GPTForSequenceClassification
# Hugging Face reads the same folder: transformers.GPT2LMHeadModel.from_pretrained(folder)
```

## Data and citations

Andrew L. Maas, Raymond E. Daly, Peter T. Pham, Dan Huang, Andrew Y. Ng and Christopher Potts.
2011. Learning Word Vectors for Sentiment Analysis. In *Proceedings of ACL 2011*, pages 142-150.

Alec Radford, Jeffrey Wu, Rewon Child, David Luan, Dario Amodei and Ilya Sutskever. 2019. Language Models
are Unsupervised Multitask Learners. OpenAI technical report.

Reinhard Kneser and Hermann Ney. 1995. Improved Backing-off for M-gram Language Modeling. In
*Proceedings of ICASSP 1995*, pages 181-184.

Stanley F. Chen and Joshua Goodman. 1999. An Empirical Study of Smoothing Techniques for Language
Modeling. *Computer Speech and Language*, 13(4):359-394.
"""


def export(args: argparse.Namespace, history: list[dict], recipe: PretrainingRecipe) -> int:
    work = args.work
    model = GPTLMHeadModel.from_pretrained(work).eval()
    tokenizer = BertTokenizer(work / "vocab.txt")
    command = json.loads((work / COMMAND_FILE).read_text())

    start = time.perf_counter()
    held_out = held_out_reviews(args.data_root)
    model_scores = evaluate_causal_lm(model, tokenizer, held_out, seq_len=recipe.seq_len)
    baselines = baseline_scores(tokenizer, PackedSegments.load(args.packed), args.data_root, recipe.seq_len, held_out)
    bert = BertForPreTraining.from_pretrained(args.bert).eval()
    bert_tokenizer = BertTokenizer(args.bert / "vocab.txt")
    masked_words = {
        "bert_folder": str(args.bert.resolve().relative_to(REPO_ROOT)) if args.bert.resolve().is_relative_to(REPO_ROOT)
        else str(args.bert),
        "bert_training_tokens": training_tokens(PretrainingRecipe.read(args.bert)),
        "bert": vars(evaluate_masked_lm(bert, bert_tokenizer, held_out, seq_len=recipe.seq_len, seed=EVALUATION_SEED)),
        "gpt": vars(causal_masked_lm(model, tokenizer, held_out, seq_len=recipe.seq_len, seed=EVALUATION_SEED)),
    }
    print(f"held-out: model {model_scores}, baselines {baselines}, masked words {masked_words} "
          f"({time.perf_counter() - start:.0f} s)")

    PACKAGE_FOLDER.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(PACKAGE_FOLDER)  # config.json and the weights, in Hugging Face's GPT-2 layout
    weights = PACKAGE_FOLDER / "model.safetensors"
    save_file({name: tensor.to(torch.float16) for name, tensor in load_file(weights).items()}, weights,
              metadata={"format": "pt"})  # half the size; from_pretrained computes in float32
    stored = json.loads((PACKAGE_FOLDER / "config.json").read_text())
    stored["torch_dtype"] = "float32"  # what to compute in: Hugging Face would otherwise keep float16
    stored["resid_pdrop"] = stored["embd_pdrop"] = stored["attn_pdrop"] = FINETUNING_DROPOUT
    (PACKAGE_FOLDER / "config.json").write_text(json.dumps(stored, indent=2) + "\n")
    tokenizer.save_vocabulary(PACKAGE_FOLDER)
    (PACKAGE_FOLDER / cli.TOKENIZER_CONFIG_FILE).write_text(json.dumps(
        {"do_lower_case": True, "tokenizer_class": "BertTokenizer", "model_max_length": stored["n_positions"]},
        indent=2) + "\n")
    for name in (METRICS_FILE, SETTINGS_FILE):
        shutil.copy(work / name, PACKAGE_FOLDER / name)
    plot_metrics(work / METRICS_FILE, PACKAGE_FOLDER / PLOT_FILE, title="GPT pretraining")
    machine = training_machine(args)
    scores = {"parameters": sum(p.numel() for p in model.parameters()),
              "held_out_reviews": 2 * HELD_OUT_REVIEWS, "model": vars(model_scores), "baselines": baselines,
              "masked_words": masked_words, "ln_vocab_size": math.log(tokenizer.vocab_size)}
    (PACKAGE_FOLDER / "README.md").write_text(card(recipe, stored, history, scores, machine, command))
    RESULTS_FILE.write_text(json.dumps({
        "command": "python tools/course_gpt.py export --data-root DIR",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "course_gpt_sha256": weights_sha256(PACKAGE_FOLDER),  # the weights shipped: chapter 11 shows only theirs
        "pretraining": {"arguments": command, "settings": recipe.settings(), "machine": machine,
                        "training_hours": sum(record["seconds"] for record in history) / 3600,
                        "final_train_loss": history[-1]["loss"]},
        "held_out": scores,
    }, indent=2) + "\n")
    size = weights.stat().st_size / 1e6
    print(f"wrote {PACKAGE_FOLDER} (weights {size:.1f} MB) and {RESULTS_FILE}")
    return 0


COURSE_GPT = CourseModel(
    name="GPT", tool=Path(__file__).resolve(), work_name="course-gpt", objective_arguments=OBJECTIVE_ARGUMENTS,
    batch_size=BATCH_SIZE,
    steps=STEPS, learning_rate=LEARNING_RATE, train_metrics=("loss", "accuracy"),
    load=lambda folder: GPTLMHeadModel.from_pretrained(folder), held_out_scores=held_out_scores,
    export=export, sweep_record=REPO_ROOT / "benchmarks" / "results" / "course-gpt-sweep.json",
    export_options=export_options,
)


if __name__ == "__main__":
    sys.exit(main(COURSE_GPT, description=__doc__))
