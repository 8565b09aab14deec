"""The ``bertlab`` command (also ``python -m bertlab``): pretrain, fine-tune and distil small BERTs.

    bertlab pretrain --preset mini --steps 1000 --output runs/pretrain
    bertlab pretrain --objective causal --preset course --steps 1000 --output runs/gpt
    bertlab finetune --model runs/pretrain --dataset mr --output runs/finetune
    bertlab finetune --model runs/pretrain --task pairs|tagging|spans --data-root DIR --output runs/snli
    bertlab finetune --model runs/gpt --dataset mr --output runs/gpt-mr       (a GPT: sentence or pairs)
    bertlab distill --teacher runs/finetune --dataset mr --output runs/distill
    bertlab generate --model runs/gpt --prompt "this movie was" --top-p 0.9
    torchrun --nproc_per_node 2 -m bertlab pretrain ...       (DistributedDataParallel, rank 0 prints)

Each subcommand runs the library function of the same name (``bertlab.pretraining.pretrain``,
``bertlab.finetuning.finetune``, or ``bertlab.task_finetuning.finetune_task`` for the task types of
``--task``, ``bertlab.distillation.distill``), which writes the config, weights,
checkpoints, metrics and plots into ``--output``; the command adds the vocabulary and a
``results.json`` of its own. The output folders chain: ``pretrain`` writes a model folder that
``finetune --model`` reads (as it reads a Hugging Face BERT or GPT-2 checkpoint folder), and ``finetune``
writes the classifier that ``distill --teacher`` reads (a BERT's).

Errors: a bad argument prints one line and exits with status 2; a runtime error (a missing dataset or
checkpoint folder, a bad config) prints one line and exits with status 1. ``--debug`` shows the
traceback instead.
"""

import argparse
import contextlib
import hashlib
import importlib.metadata
import json
import math
import os
import sys
import warnings
from pathlib import Path

import torch

from bertlab.bert import PRESETS, BertConfig, BertForPreTraining, BertForSequenceClassification, checkpoint_files
from bertlab.course_model import COURSE_BERT_FOLDER, course_bert_sha256
from bertlab.data import PRETRAINING_CORPORA, SENTIMENT_DATASETS, load_sentiment, pretraining_corpus
from bertlab.distillation import DistillationRecipe, compare_models, distill, init_student_from_teacher
from bertlab.finetuning import (
    BaselineResult,
    FineTuningRecipe,
    Progress,
    TaskType,
    evaluate_task,
    finetune_task,
    format_value,
    freeze_layers,
    model_family,
    model_parts,
)
from bertlab.gpt import PRESETS as GPT_PRESETS
from bertlab.gpt import GPTConfig, GPTLMHeadModel, generate
from bertlab.pretraining import CHECKPOINT_FILE, MASKING_KINDS, PackedSegments, PretrainingRecipe, pretrain
from bertlab.pretraining_loop import OBJECTIVES
from bertlab.task_finetuning import SENTENCES, SPANS, TASKS, span_task
from bertlab.tokenization import BertTokenizer, train_wordpiece_vocab
from bertlab.utils import PRECISIONS, autocast, resolve_device, seed_everything

RESULTS_FILE = "results.json"
COMPARISON_FILE = "comparison.md"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"  # Hugging Face's; holds do_lower_case
#: ``bertlab pretrain``'s defaults: the book's recipe, for 1,000 steps.
PRETRAINING_DEFAULTS = PretrainingRecipe(max_steps=1000)
#: The learning rate the course chose on dev to fine-tune its BERT whole, for each --task (benchmarks/RESULTS.md):
#: sentence on MR (benchmarks/bert_results.py), the others on SNLI, UD EWT and SQuAD (benchmarks/task_results.py).
COURSE_BERT_LEARNING_RATES = {"sentence": 3e-4, "pairs": 1e-3, "tagging": 1e-3, "spans": 1e-3}
#: The course BERT's window: the length it was pretrained at (its position embeddings beyond never had a gradient).
COURSE_BERT_MAX_LENGTH = 128


class CommandLineError(Exception):
    """A problem found while the command runs (missing files, ...): one line on stderr, exit status 1."""


class UsageError(Exception):
    """Arguments that argparse accepts one by one but not together: one line on stderr, exit status 2."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse, with errors in one line (no usage block): ``bertlab pretrain: error: ... (see --help)``."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# --------------------------------------------------------------------------------------------------
# Argument types: each raises argparse.ArgumentTypeError, which argparse reports in one line.


def positive_int(text: str) -> int:
    value = _parse(int, text, "an integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    value = _parse(int, text, "an integer")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return value


def positive_float(text: str) -> float:
    value = _parse(float, text, "a number")
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    value = _parse(float, text, "a number")
    if not value >= 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}")
    return value


def fraction(text: str) -> float:
    value = _parse(float, text, "a number")
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1], got {text!r}")
    return value


def dropout_probability(text: str) -> float:
    value = _parse(float, text, "a number")
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1), got {text!r}")
    return value


def layer_ids(text: str) -> list[int]:
    """"0,2" -> [0, 2]: the teacher layers a student keeps."""
    try:
        ids = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be comma-separated layer numbers such as 0,2, got {text!r}") from None
    if any(index < 0 for index in ids) or any(later <= earlier for earlier, later in zip(ids, ids[1:])):
        raise argparse.ArgumentTypeError(f"must be increasing layer numbers >= 0 such as 0,2, got {text!r}")
    return ids


def _parse(kind: type, text: str, description: str):
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {description}, got {text!r}") from None


# --------------------------------------------------------------------------------------------------
# Shared steps


def is_main_process() -> bool:
    """False in the processes of rank 1, 2, ... that ``torchrun`` starts: only rank 0 prints."""
    return int(os.environ.get("RANK", "0")) == 0


def say(message: str = "") -> None:
    if is_main_process():
        print(message, flush=True)


def shown_progress(args: argparse.Namespace) -> Progress:
    """What training shows: the bars and the epoch lines; with --no-progress, the epoch lines only; in the
    processes of rank 1, 2, ... nothing (:func:`is_main_process`)."""
    if not is_main_process():
        return Progress.NONE
    return Progress.EPOCHS if args.no_progress else Progress.BARS


def check_data_root(args: argparse.Namespace) -> None:
    """--data-root, when given, must be a folder (it may not exist yet: --download makes it)."""
    if args.data_root is not None and args.data_root.exists() and not args.data_root.is_dir():
        raise UsageError(f"--data-root {args.data_root} is a file: pass the folder that holds the datasets' folders "
                         "(rt-polaritydata/, aclImdb/, ...)")


def missing_data(error: FileNotFoundError, args: argparse.Namespace, alternatives: str = "") -> CommandLineError:
    """The one-line error of data that is not where the command looked: what is missing, and, as the case
    may be, that the folder --data-root does not exist, or what else may be passed (--data-root and
    ``alternatives``)."""
    message = " ".join(str(error).rstrip(".").split())
    if args.data_root is None:
        return CommandLineError(f"{message}. Or pass --data-root{alternatives}.")
    if not args.data_root.exists():
        return CommandLineError(f"{message}: --data-root {args.data_root} does not exist.")
    return CommandLineError(f"{message}: --data-root {args.data_root} lacks it.")


def sentiment_splits(name: str, args: argparse.Namespace):
    """The train/dev/test splits (``SentimentSplits``) of the sentiment dataset ``name`` in --data-root,
    fetched with --download."""
    check_data_root(args)
    try:
        return load_sentiment(name, root=args.data_root, download=args.download, seed=args.split_seed)
    except FileNotFoundError as error:
        raise missing_data(error, args, ", --download, or --dataset synthetic") from error


def load_dataset(name: str, args: argparse.Namespace, max_eval_examples: int | None = None):
    """The splits of the sentiment dataset ``name`` (:func:`sentiment_splits`), train cut to
    ``--max-train-examples``, dev and test to ``max_eval_examples``."""
    return cut_splits(sentiment_splits(name, args), args.max_train_examples, max_eval_examples)


def cut_splits(splits, max_train_examples: int | None, max_eval_examples: int | None):
    """``splits`` (sentiment or task splits) with train cut to its first ``max_train_examples`` examples and
    dev and test to their first ``max_eval_examples`` (None: all), said in one line."""
    splits.train = splits.train[:max_train_examples]  # [:None] keeps all
    splits.dev, splits.test = splits.dev[:max_eval_examples], splits.test[:max_eval_examples]
    say(f"dataset: {splits.source}; {len(splits.train)} train, {len(splits.dev)} dev, {len(splits.test)} test")
    return splits


def load_tokenizer(folder: Path) -> BertTokenizer:
    """The tokenizer of a model folder: its ``vocab.txt``, cased or not as its ``tokenizer_config.json`` says."""
    vocab = folder / "vocab.txt"
    if not vocab.is_file():
        raise CommandLineError(f"{folder} has no vocab.txt: a model folder needs the vocabulary it was trained with")
    do_lower_case = True
    if (folder / TOKENIZER_CONFIG_FILE).is_file():
        do_lower_case = json.loads((folder / TOKENIZER_CONFIG_FILE).read_text()).get("do_lower_case", True)
    return BertTokenizer(vocab, do_lower_case=do_lower_case)


def load_model(folder: Path, model_class: type = BertForSequenceClassification, *, must_be_fine_tuned: bool,
               **options) -> tuple[torch.nn.Module, BertTokenizer]:
    """A ``model_class`` (default ``BertForSequenceClassification``) and its tokenizer from a checkpoint
    folder; ``options`` go to the constructor (``num_labels``).

    The warnings of ``from_pretrained`` (a head newly initialised, weights skipped) are printed as
    one-line notes; with ``must_be_fine_tuned`` they are an error instead: a teacher must be a trained
    classifier.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = model_class.from_pretrained(folder, **options)
    tokenizer = load_tokenizer(folder)
    for warning in caught:
        if must_be_fine_tuned:
            raise CommandLineError(f"{folder} is not a fine-tuned classifier (run bertlab finetune first): "
                                   f"{warning.message}")
        say(f"note: {warning.message}")
    return model, tokenizer


@contextlib.contextmanager
def warnings_as_notes():
    """Inside the block, a warning (words cut off by --seq-len, ...) is printed at once as a one-line note."""
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, *details: say(f"note: {message}")
        yield


def random_model(args: argparse.Namespace, model_class: type, texts: list[str], **options):
    """A randomly initialised ``model_class`` of size --preset and its tokenizer: --vocab, or a vocabulary
    learned from ``texts``; ``options`` go to the constructor."""
    tokenizer = BertTokenizer(args.vocab) if args.vocab else learn_tokenizer(texts, args.vocab_size)
    seed_everything(args.seed)
    preset = args.preset or "mini"
    model = model_class(BertConfig.preset(preset, vocab_size=tokenizer.vocab_size), **options)
    say(f"model: BERT-{preset}, randomly initialised")
    return model, tokenizer


def learn_tokenizer(texts: list[str], vocab_size: int) -> BertTokenizer:
    say(f"learning a WordPiece vocabulary of at most {vocab_size} tokens from {len(texts)} texts")
    return BertTokenizer(train_wordpiece_vocab(texts, vocab_size))


def check_file(option: str, path: Path | None) -> None:
    if path is not None and not path.is_file():
        raise UsageError(f"{option} {path}: no such file")


def write_results(folder: Path, results: dict) -> Path:
    path = Path(folder) / RESULTS_FILE
    path.write_text(json.dumps(results, indent=2, default=str) + "\n")  # paths as strings
    return path


def settings(args: argparse.Namespace) -> dict:
    """The command's arguments, for ``results.json``."""
    return {name: value for name, value in vars(args).items() if name != "handler"}


# --------------------------------------------------------------------------------------------------
# bertlab pretrain


def text_corpus(args: argparse.Namespace) -> tuple[list[list[str]], BertTokenizer]:
    """The documents of --corpus, --text and --dataset-text, and their tokenizer: --vocab, the vocabulary of
    the run being resumed, or one learned from the text."""
    try:
        documents = pretraining_corpus(args.text, corpus=args.corpus, root=args.data_root)
    except FileNotFoundError as error:
        raise missing_data(error, args) from error
    if args.dataset_text is not None:
        documents += [[text] for text, _ in load_dataset(args.dataset_text, args).train]  # a snippet per document
    sentences = [sentence for document in documents for sentence in document]
    say(f"corpus: {len(documents)} documents, {len(sentences)} sentences")
    run_vocab = args.output / "vocab.txt"
    if args.vocab:
        tokenizer = BertTokenizer(args.vocab)
    elif not args.no_resume and (args.output / CHECKPOINT_FILE).is_file() and run_vocab.is_file():
        say(f"resuming with the run's vocabulary, {run_vocab}")
        tokenizer = BertTokenizer(run_vocab)
    else:
        tokenizer = learn_tokenizer(sentences, args.vocab_size)
        tokenizer.save_vocabulary(args.output)  # a resumed run reads it instead of learning it again
    return documents, tokenizer


def packed_corpus(args: argparse.Namespace) -> tuple[PackedSegments, BertTokenizer]:
    """--packed: the segments of a file written by ``PackedSegments.save``, and the tokenizer of their vocabulary."""
    if not args.no_nsp and args.objective == "masked":
        raise UsageError("--packed needs --no-nsp: packed segments have no sentence pairs")
    given = [option for option, value in [("--vocab", args.vocab), ("--text", args.text),
                                          ("--dataset-text", args.dataset_text)] if value is not None]
    if given:
        raise UsageError(f"--packed holds the text and its vocabulary: drop {', '.join(given)}")
    check_file("--packed", args.packed)
    try:
        packed = PackedSegments.load(args.packed)
    except ValueError as error:
        raise CommandLineError(f"--packed: {error}") from None
    if packed.seq_len != args.seq_len:
        raise UsageError(f"--packed {args.packed} holds segments for --seq-len {packed.seq_len}, not {args.seq_len}")
    say(f"corpus: {len(packed)} packed segments, {len(packed.ids)} tokens, from {args.packed}")
    return packed, packed.tokenizer()


def pretraining_preset(args: argparse.Namespace) -> str:
    """--preset, or the default size of the model of --objective: BERT-mini, the course GPT. A size of the
    other model is a usage error that names the choices."""
    presets, default = (GPT_PRESETS, "course") if args.objective == "causal" else (PRESETS, "mini")
    preset = args.preset or default
    if preset not in presets:
        raise UsageError(f"--preset {preset} is not a size of the model of --objective {args.objective}; choose one "
                         f"of {', '.join(presets)}")
    return preset


def pretraining_model(args: argparse.Namespace, preset: str, tokenizer: BertTokenizer) -> tuple[torch.nn.Module, str]:
    """A randomly initialised model of --objective and ``preset`` over the tokenizer's vocabulary, and its name:
    a ``BertForPreTraining``, or a ``GPTLMHeadModel`` that starts a text with [CLS] and ends it with [SEP]."""
    seed_everything(args.seed)
    if args.objective == "causal":
        config = GPTConfig.preset(preset, vocab_size=tokenizer.vocab_size, bos_token_id=tokenizer.cls_token_id,
                                  eos_token_id=tokenizer.sep_token_id, pad_token_id=tokenizer.pad_token_id,
                                  resid_pdrop=args.dropout, embd_pdrop=args.dropout, attn_pdrop=args.dropout)
        return GPTLMHeadModel(config), f"GPT-{preset}"
    config = BertConfig.preset(preset, vocab_size=tokenizer.vocab_size, hidden_dropout_prob=args.dropout,
                               attention_probs_dropout_prob=args.dropout)
    return BertForPreTraining(config), f"BERT-{preset}"


def run_pretrain(args: argparse.Namespace) -> int:
    causal = args.objective == "causal"
    if args.dataset_text is not None and not args.no_nsp and not causal:
        raise UsageError("--dataset-text needs --no-nsp: a snippet is a single sentence, which has no next sentence")
    preset = pretraining_preset(args)  # a size of the other model fails before the data is prepared
    check_file("--vocab", args.vocab)
    resolve_device(args.device)  # a bad --device fails before the data is prepared
    check_data_root(args)
    documents, tokenizer = packed_corpus(args) if args.packed is not None else text_corpus(args)
    model, name = pretraining_model(args, preset, tokenizer)
    say(f"model: {name}, {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, "
        f"vocabulary of {tokenizer.vocab_size} tokens")
    recipe = PretrainingRecipe(
        max_steps=args.steps, batch_size=args.batch_size, seq_len=args.seq_len, lr=args.lr,
        weight_decay=args.weight_decay, warmup_steps=args.warmup_steps, grad_accum_steps=args.grad_accum_steps,
        objective=args.objective, masking=args.masking, nsp=not args.no_nsp, mlm_probability=args.mlm_probability,
        static_mask_copies=args.static_mask_copies, seed=args.seed, log_every=args.log_every,
        checkpoint_every=args.checkpoint_every)
    history = pretrain(model, tokenizer, documents, recipe, output_dir=args.output, device=args.device,
                       resume=not args.no_resume, progress=not args.no_progress, precision=args.precision,
                       compile_model=args.compile)
    task, loss, accuracy = ("next-token", "loss", "accuracy") if causal else ("MLM", "mlm_loss", "mlm_accuracy")
    logged = [record for record in history if record[loss] is not None]  # None: no token was predicted
    if logged:
        first, last = logged[0], logged[-1]
        say(f"{task} loss {first[loss]:.3f} (steps 1-{first['step']}) -> {last[loss]:.3f} "
            f"(step {last['step']}); ln(vocab size) = {math.log(tokenizer.vocab_size):.3f} is chance level; "
            f"{task} accuracy {last[accuracy]:.3f}")
    if history:
        say(f"wrote the model, vocab.txt, metrics.jsonl and loss_curve.png to {args.output}")
    return 0


def add_pretrain_command(subcommands, common: argparse.ArgumentParser) -> None:
    parser = subcommands.add_parser(
        "pretrain", parents=[common],
        help="pretrain a BERT with masked language modelling (and NSP), or a GPT with causal language modelling",
        description="Pretrain a BERT from scratch with masked language modelling and next sentence prediction "
        "(Devlin et al., 2019), or MLM alone on full-sentence segments (--no-nsp, as RoBERTa), or a GPT-2-style "
        "decoder (Radford et al., 2019) that predicts each token from the ones before it on the same full-sentence "
        "segments (--objective causal), on the offline "
        "corpus (the English prose of Python's pydoc topics) or the IMDB reviews (--corpus imdb), plus any text "
        "you add. The output folder receives "
        "config.json, model.safetensors, vocab.txt, pretraining_args.json, metrics.jsonl, loss_curve.png and "
        "checkpoint.pt; running the same command again resumes from the checkpoint. On several processes: "
        "torchrun --nproc_per_node N -m bertlab pretrain ...",
    )
    parser.add_argument("--objective", choices=OBJECTIVES, default="masked",
                        help="masked: a BERT learns masked language modelling (and NSP); causal: a GPT learns to "
                        "predict the next token, on the segments of --no-nsp (default: masked)")
    parser.add_argument("--preset", choices=list({**PRESETS, **GPT_PRESETS}), default=None,
                        help=f"model size: BERT's {', '.join(PRESETS)}; GPT's {', '.join(GPT_PRESETS)} (course: the "
                        "course BERT's size and vocabulary) (default: mini, course with --objective causal)")
    parser.add_argument("--output", type=Path, default=Path("runs/pretrain"), metavar="DIR",
                        help="output folder (default: runs/pretrain)")
    parser.add_argument("--steps", type=positive_int, default=PRETRAINING_DEFAULTS.max_steps,
                        help=f"optimizer steps (default: {PRETRAINING_DEFAULTS.max_steps})")
    parser.add_argument("--batch-size", type=positive_int, default=PRETRAINING_DEFAULTS.batch_size,
                        help=f"examples per step and process (default: {PRETRAINING_DEFAULTS.batch_size})")
    parser.add_argument("--lr", type=positive_float, default=PRETRAINING_DEFAULTS.lr,
                        help=f"peak learning rate (default: {PRETRAINING_DEFAULTS.lr:g})")
    parser.add_argument("--seq-len", type=positive_int, default=PRETRAINING_DEFAULTS.seq_len,
                        help=f"tokens per example (default: {PRETRAINING_DEFAULTS.seq_len})")
    parser.add_argument("--masking", choices=MASKING_KINDS, default=PRETRAINING_DEFAULTS.masking,
                        help="dynamic: new masks at every pass (RoBERTa); static: drawn once (BERT) "
                        f"(default: {PRETRAINING_DEFAULTS.masking})")
    parser.add_argument("--static-mask-copies", type=positive_int, default=PRETRAINING_DEFAULTS.static_mask_copies,
                        metavar="N", help="with static masking, differently masked copies of the data "
                        f"(default: {PRETRAINING_DEFAULTS.static_mask_copies})")
    parser.add_argument("--no-nsp", action="store_true",
                        help="MLM only, on segments of contiguous sentences (RoBERTa), "
                        "without next sentence prediction")
    parser.add_argument("--mlm-probability", type=fraction, default=PRETRAINING_DEFAULTS.mlm_probability,
                        help=f"share of tokens to predict (default: {PRETRAINING_DEFAULTS.mlm_probability})")
    parser.add_argument("--dropout", type=dropout_probability, default=0.1,
                        help="dropout on the hidden states and attention weights while pretraining (default: 0.1, "
                        "BERT's)")
    parser.add_argument("--warmup-steps", type=non_negative_int, default=None, help="default: 10%% of --steps")
    parser.add_argument("--weight-decay", type=non_negative_float, default=PRETRAINING_DEFAULTS.weight_decay,
                        help=f"AdamW weight decay (default: {PRETRAINING_DEFAULTS.weight_decay})")
    parser.add_argument("--grad-accum-steps", type=positive_int, default=PRETRAINING_DEFAULTS.grad_accum_steps,
                        metavar="N", help="micro-batches per optimizer step "
                        f"(default: {PRETRAINING_DEFAULTS.grad_accum_steps})")
    parser.add_argument("--compile", action="store_true", help="run the model through torch.compile")
    parser.add_argument("--vocab-size", type=positive_int, default=4096,
                        help="size of the WordPiece vocabulary learned from the corpus (default: 4096)")
    parser.add_argument("--vocab", type=Path, metavar="FILE", help="use this vocab.txt instead of learning one")
    parser.add_argument("--corpus", choices=PRETRAINING_CORPORA, default="pydoc",
                        help="pydoc: the English prose of Python's pydoc topics (offline, small); imdb: the 75,000 "
                        "unlabelled and training reviews of the IMDB archive (aclImdb/) in --data-root, the text of "
                        "the course's BERT (default: pydoc)")
    parser.add_argument("--text", type=Path, nargs="+", metavar="PATH",
                        help="more text: UTF-8 files, or folders of .txt files (blank lines separate documents)")
    parser.add_argument("--dataset-text", choices=SENTIMENT_DATASETS, metavar="NAME",
                        help="also pretrain on the unlabelled training texts of a sentiment dataset "
                        f"({', '.join(SENTIMENT_DATASETS)}; BERT needs --no-nsp: snippets are single sentences)")
    parser.add_argument("--packed", type=Path, metavar="FILE",
                        help="pretrain on the segments of FILE and their vocabulary, tokenized once by "
                        "bertlab.pretraining.PackedSegments (python tools/course_bert.py pack writes the IMDB "
                        "reviews'); in place of the corpus options, with --no-nsp or --objective causal")
    add_dataset_location_arguments(parser)
    parser.add_argument("--log-every", type=positive_int, default=PRETRAINING_DEFAULTS.log_every, metavar="STEPS",
                        help=f"default: {PRETRAINING_DEFAULTS.log_every}")
    parser.add_argument("--checkpoint-every", type=positive_int, default=PRETRAINING_DEFAULTS.checkpoint_every,
                        metavar="STEPS", help=f"default: {PRETRAINING_DEFAULTS.checkpoint_every}")
    parser.add_argument("--no-resume", action="store_true", help="start over even if --output holds a checkpoint")
    parser.set_defaults(handler=run_pretrain)


# --------------------------------------------------------------------------------------------------
# bertlab finetune


def run_finetune(args: argparse.Namespace) -> int:
    """``bertlab finetune --task NAME``: fine-tune a BERT on the dataset of one of BERT's task types
    (``bertlab.task_finetuning.TASKS``), test it, and score the task's baselines beside it. A GPT --model
    folder is fine-tuned for the task types whose BERT is a sequence classifier (sentence, pairs): tagging
    and spans need a head on every token, which bertlab's GPT lacks."""
    if args.model is not None and (args.preset is not None or args.vocab is not None):
        raise UsageError("--preset and --vocab describe a randomly initialised model; --model's folder sets both")
    check_file("--vocab", args.vocab)
    task = chosen_task(args)
    device = resolve_device(args.device)
    model_class = task.model_class
    if args.model is not None:  # before the dataset: a wrong folder is told at once (the head waits for the labels)
        checkpoint_files(args.model)
        model_class = folder_model_class(task, args)
        load_tokenizer(args.model)
    splits = task_splits(task, args)
    labels = task.labels(splits.train) if task.labels is not None else None  # of the whole split, before a cut
    splits = cut_splits(splits, args.max_train_examples, args.max_eval_examples)
    options = {} if labels is None else {"num_labels": len(labels)}
    if args.model is not None:
        model, tokenizer = load_model(args.model, model_class, must_be_fine_tuned=False, **options)
        say(f"model: {args.model} ({model.config.num_hidden_layers} layers, hidden size {model.config.hidden_size})")
    else:
        model, tokenizer = random_model(args, task.model_class, task.texts(splits.train), **options)
    freeze(model, args)
    course_bert = is_course_bert(args.model)
    lr, max_length = learning_rate(args, course_bert), window(args, model, task.max_length, course_bert)
    check_stride(args.stride, max_length)
    with warnings_as_notes():
        history = finetune_task(task, model, tokenizer, splits.train, splits.dev,
                                finetuning_recipe(args, lr, max_length), labels=labels, device=device,
                                progress=shown_progress(args), output_dir=args.output, precision=args.precision)
        tokenizer.save_vocabulary(args.output)
        test = evaluate_task(task, model, tokenizer, splits.test, labels=labels, max_length=max_length,
                             precision=args.precision, what="test")
    baselines = task.baselines(splits.train, splits.dev, splits.test)
    say_scores(test, baselines)
    write_results(args.output, {"command": "finetune", "task": task.name, "settings": settings(args), "lr": lr,
                                "max_length": max_length, "dataset": splits.name, "source": splits.source,
                                "labels": None if labels is None else list(labels.names), "history": history,
                                "test": test, "baselines": {name: {"scores": result.scores, **result.details}
                                                            for name, result in baselines.items()}})
    say(f"wrote the model, vocab.txt, history.json and {RESULTS_FILE} to {args.output}")
    return 0


def folder_model_class(task: TaskType, args: argparse.Namespace) -> type[torch.nn.Module]:
    """The task's model class in the family of the --model folder (a BERT's or a GPT's config.json); a task
    that the family has no model for is a usage error."""
    family = model_family(args.model)
    try:
        return family.model_class(task)
    except ValueError as error:
        raise UsageError(f"--model {args.model} is a {family.name}: {error}") from None


def chosen_task(args: argparse.Namespace) -> TaskType:
    """The task type of --task, spans with the windows of --stride; --stride, --dataset and --download only
    where they apply."""
    task = TASKS[args.task]
    if args.stride is not None and task is not SPANS:
        raise UsageError(f"--stride sets the windows of --task spans; --task {args.task} has none")
    if task is SENTENCES:
        return task
    if args.dataset is not None:
        raise UsageError(f"--dataset names a sentiment dataset, for --task sentence; --task {args.task} reads its "
                         "dataset from --data-root")
    if args.download:
        raise UsageError(f"--download fetches the sentiment datasets only: put the files of --task {args.task} in "
                         "--data-root")
    return span_task(stride=args.stride) if task is SPANS else task


def task_splits(task: TaskType, args: argparse.Namespace):
    """The splits of the task's dataset from --data-root (split with --split-seed): for sentences, the
    sentiment dataset of --dataset (default MR)."""
    if task is SENTENCES:
        return sentiment_splits(args.dataset or "mr", args)
    check_data_root(args)
    try:
        return task.load_splits(args.data_root, seed=args.split_seed)
    except FileNotFoundError as error:
        raise missing_data(error, args) from error


def finetuning_recipe(args: argparse.Namespace, lr: float, max_length: int) -> FineTuningRecipe:
    """The recipe of ``bertlab finetune``'s flags, at the learning rate and length chosen for the model."""
    return FineTuningRecipe(epochs=args.epochs, batch_size=args.batch_size, encoder_lr=lr, head_lr=args.head_lr,
                            weight_decay=args.weight_decay, layer_decay=args.layer_decay,
                            warmup_ratio=args.warmup_ratio, max_length=max_length, seed=args.seed)


def freeze(model: torch.nn.Module, args: argparse.Namespace) -> None:
    """--freeze N: the embeddings and the N lowest layers (a BERT's encoder layers, a GPT's blocks) stop training."""
    if args.freeze is not None:
        parts = model_parts(model)
        num_layers = len(parts.layers)
        if args.freeze > num_layers:
            raise CommandLineError(f"--freeze {args.freeze}: the model has only {num_layers} {parts.stack_name} layers")
        freeze_layers(model, num_layers - args.freeze)


def is_course_bert(folder: Path | None) -> bool:
    """Whether the --model ``folder`` holds the course's BERT: its folder in the package, or a copy of its weights."""
    course_weights = COURSE_BERT_FOLDER / "model.safetensors"
    if folder is None or not course_weights.is_file():
        return False
    if folder.resolve() == COURSE_BERT_FOLDER.resolve():
        return True
    weights = folder / "model.safetensors"
    return (weights.is_file() and weights.stat().st_size == course_weights.stat().st_size
            and hashlib.sha256(weights.read_bytes()).hexdigest() == course_bert_sha256())


def learning_rate(args: argparse.Namespace, course_bert: bool) -> float:
    """--lr; else, for the course's BERT, the rate the course chose for the task (``COURSE_BERT_LEARNING_RATES``),
    and otherwise 5e-5 for a pretrained --model, 1e-4 from random weights, with a note that says so."""
    if args.lr is not None:
        return args.lr
    if course_bert:
        lr = COURSE_BERT_LEARNING_RATES[args.task]
        say(f"learning rate: {lr:g}, the course's choice for its BERT on --task {args.task} (benchmarks/RESULTS.md)")
        return lr
    lr, source = (5e-5, "for a pretrained --model") if args.model is not None else (1e-4, "from random weights")
    say(f"note: learning rate {lr:g}, the default {source}; the best rate depends on the model and the task "
        "(the course's BERT, 4 layers of width 256, does best with 3e-4 to 1e-3): compare a few with --lr on dev")
    return lr


def window(args: argparse.Namespace, model: torch.nn.Module, task_default: int, course_bert: bool) -> int:
    """--seq-len, the tokens of an encoded example; else 128 for the course's BERT (the length it was pretrained
    at), and otherwise the task's default (``task_default``) within the model's positions."""
    positions = model.config.max_position_embeddings
    if args.seq_len is not None:
        if args.seq_len > positions:
            raise UsageError(f"--seq-len {args.seq_len} exceeds the model's {positions} positions "
                             "(max_position_embeddings in its config.json)")
        return args.seq_len
    return COURSE_BERT_MAX_LENGTH if course_bert else min(task_default, positions)


def check_stride(stride: int | None, max_length: int) -> None:
    """--stride must leave the windows room to advance: fewer context pieces than a window of ``max_length``
    tokens holds with the shortest question ([CLS] piece [SEP] ... [SEP], ``max_length - 4``)."""
    if stride is not None and stride >= max_length - 4:
        raise UsageError(f"--stride {stride} does not fit windows of {max_length} tokens (--seq-len): a window holds "
                         f"at most {max_length - 4} context pieces, fewer after a longer question, and two windows "
                         "must share fewer; give a smaller --stride, or none (the default fits every window)")


def say_scores(test: dict[str, float], baselines: dict[str, BaselineResult]) -> None:
    """One line per test score, in percent, beside each baseline's that has that score."""
    for name, value in test.items():
        beside = "; ".join(f"{baseline}: {format_value(name, result.scores[name])}"
                           for baseline, result in baselines.items() if name in result.scores)
        say(f"test_{name} {format_value(name, value)}" + (f" ({beside})" if beside else ""))


def add_finetune_command(subcommands, common: argparse.ArgumentParser) -> None:
    parser = subcommands.add_parser(
        "finetune", parents=[common], help="fine-tune a BERT: sentiment, sentence pairs, tagging or spans (a GPT: "
        "sentiment or sentence pairs)",
        description="Fine-tune all the weights of a BERT (Devlin et al., 2019) from a pretrained model folder "
        "(bertlab pretrain's output or a Hugging Face BERT checkpoint folder with config.json, model.safetensors "
        "or pytorch_model.bin, and vocab.txt) or from random weights, for one of BERT's task types (--task): "
        "sentence classification on a sentiment dataset (--dataset), or, from the datasets' folders in "
        "--data-root, natural language inference on sentence pairs (pairs: snli_1.0/, train and dev carved from "
        "the official dev split by premise, test the official test split), part-of-speech tagging (tagging: "
        "UD_English-EWT/, its own splits) or question answering by span extraction (spans: squad-v1.1/, the "
        "official dev set split by article 80/10/10). A GPT's folder (bertlab pretrain --objective causal, or a "
        "Hugging Face GPT-2 checkpoint folder) is fine-tuned for sentence and pairs, classifying the state of the "
        "last token or the mean of the states (classifier_pooling in its config.json); tagging and spans need a "
        "head on every token, which bertlab's GPT lacks. The output folder receives config.json, model.safetensors, "
        f"vocab.txt, history.json (dev metrics per epoch) and {RESULTS_FILE} (with the test metrics).",
    )
    parser.add_argument("--task", choices=list(TASKS), default="sentence",
                        help="sentence (sentiment classification, the default), pairs (SNLI), tagging (UPOS of "
                        "the English Web Treebank) or spans (SQuAD v1.1)")
    parser.add_argument("--model", type=Path, metavar="DIR",
                        help="pretrained model folder, a BERT's or a GPT's (GPT: --task sentence or pairs) (default: "
                        "none, a randomly initialised --preset BERT)")
    parser.add_argument("--preset", choices=list(PRESETS), default=None,
                        help="size of a randomly initialised model, without --model (default: mini)")
    parser.add_argument("--vocab", type=Path, metavar="FILE",
                        help="without --model: a vocab.txt (default: learn one from the training texts)")
    parser.add_argument("--vocab-size", type=positive_int, default=4096,
                        help="without --model or --vocab: size of the vocabulary to learn (default: 4096)")
    parser.add_argument("--output", type=Path, default=Path("runs/finetune"), metavar="DIR",
                        help="output folder (default: runs/finetune)")
    add_dataset_arguments(parser, default=None)
    parser.add_argument("--max-eval-examples", type=positive_int, metavar="N",
                        help="use only the first N dev and the first N test examples (default: all)")
    parser.add_argument("--epochs", type=positive_int, default=3, help="default: 3")
    parser.add_argument("--batch-size", type=positive_int, default=32, help="default: 32")
    parser.add_argument("--lr", type=positive_float, default=None,
                        help="peak learning rate of the encoder (default: the course's choice for its BERT, "
                        f"{', '.join(f'{task} {lr:g}' for task, lr in COURSE_BERT_LEARNING_RATES.items())}; 5e-5 "
                        "with another --model, 1e-4 from random weights)")
    parser.add_argument("--head-lr", type=positive_float, default=None,
                        help="learning rate of the pooler and classifier (default: --lr)")
    parser.add_argument("--layer-decay", type=positive_float, default=1.0,
                        help="layer-wise learning-rate decay factor, 1 for none (default: 1)")
    parser.add_argument("--weight-decay", type=non_negative_float, default=0.01, help="default: 0.01")
    parser.add_argument("--warmup-ratio", type=fraction, default=0.1, help="share of steps of warm-up (default: 0.1)")
    parser.add_argument("--seq-len", type=positive_int, default=None,
                        help="maximum tokens per example (default: 128; for --task spans, 128 with the course's BERT, "
                        "the length it was pretrained at, else 384; at most the model's positions)")
    parser.add_argument("--stride", type=non_negative_int, default=None,
                        help="--task spans: context pieces that two windows of a long context share (default: a "
                        "quarter of the window, at most half of what a question leaves for the context)")
    parser.add_argument("--freeze", type=non_negative_int, metavar="N",
                        help="freeze the embeddings and the N lowest layers, a BERT's encoder layers or a GPT's "
                        "blocks (default: train all weights, as BERT does)")
    parser.set_defaults(handler=run_finetune)


# --------------------------------------------------------------------------------------------------
# bertlab distill


def run_distill(args: argparse.Namespace) -> int:
    device = resolve_device(args.device)
    teacher, tokenizer = load_model(args.teacher, must_be_fine_tuned=True)  # before the dataset, as finetune
    splits = load_dataset(args.dataset, args)
    student = init_student_from_teacher(teacher, args.layers)
    say(f"student: {student.config.num_hidden_layers} of the teacher's {teacher.config.num_hidden_layers} layers "
        f"({'layers ' + ','.join(map(str, args.layers)) if args.layers else 'every other one, from layer 0'})")
    recipe = DistillationRecipe(epochs=args.epochs, batch_size=args.batch_size, encoder_lr=args.lr, alpha=args.alpha,
                                temperature=args.temperature, weight_decay=args.weight_decay,
                                warmup_ratio=args.warmup_ratio, max_length=args.seq_len, seed=args.seed)
    history = distill(teacher, student, tokenizer, splits.train, splits.dev, recipe, device=device,
                      progress=shown_progress(args), output_dir=args.output, precision=args.precision)
    tokenizer.save_vocabulary(args.output)
    comparison = compare_models(teacher, student, tokenizer, splits.test, batch_size=args.batch_size,
                                max_length=args.seq_len, repeats=args.repeats)
    table = comparison.to_markdown()
    (args.output / COMPARISON_FILE).write_text(f"Test set of {splits.name} ({splits.source}).\n\n{table}\n")
    say(table)
    rows = [vars(row) for row in comparison.rows]
    write_results(args.output, {"command": "distill", "settings": settings(args),
                                "student_layers": student.config.num_hidden_layers, "dataset": splits.name,
                                "source": splits.source, "history": history,
                                "comparison": rows})
    say(f"wrote the student, vocab.txt, history.json, {COMPARISON_FILE} and {RESULTS_FILE} to {args.output}")
    return 0


def add_distill_command(subcommands, common: argparse.ArgumentParser) -> None:
    parser = subcommands.add_parser(
        "distill", parents=[common], help="distil a fine-tuned BERT into a shallower student",
        description="Distil a fine-tuned BERT classifier (bertlab finetune's output) into a student that starts "
        "from some of its layers (default: every other one, as DistilBERT), with Hinton et al.'s loss "
        "alpha * CE + (1 - alpha) * T^2 * KL, then compare teacher and student on the test set (parameters, "
        f"inference time, accuracy). The output folder receives the student, vocab.txt, history.json, "
        f"{COMPARISON_FILE} and {RESULTS_FILE}.",
    )
    parser.add_argument("--teacher", type=Path, required=True, metavar="DIR", help="fine-tuned classifier folder")
    parser.add_argument("--layers", type=layer_ids, metavar="IDS",
                        help="teacher layers the student keeps, e.g. 0,2 (default: every other layer)")
    parser.add_argument("--alpha", type=fraction, default=0.5, help="weight of the label loss (default: 0.5)")
    parser.add_argument("--temperature", type=positive_float, default=2.0, help="softmax temperature T (default: 2)")
    parser.add_argument("--output", type=Path, default=Path("runs/distill"), metavar="DIR",
                        help="output folder (default: runs/distill)")
    add_dataset_arguments(parser)
    parser.add_argument("--epochs", type=positive_int, default=3, help="default: 3")
    parser.add_argument("--batch-size", type=positive_int, default=32, help="default: 32")
    parser.add_argument("--lr", type=positive_float, default=1e-4, help="peak learning rate (default: 1e-4)")
    parser.add_argument("--weight-decay", type=non_negative_float, default=0.01, help="default: 0.01")
    parser.add_argument("--warmup-ratio", type=fraction, default=0.1, help="share of steps of warm-up (default: 0.1)")
    parser.add_argument("--seq-len", type=positive_int, default=128, help="maximum tokens per text (default: 128)")
    parser.add_argument("--repeats", type=positive_int, default=5,
                        help="timed inference passes per model in the comparison (default: 5)")
    parser.set_defaults(handler=run_distill)


# --------------------------------------------------------------------------------------------------
# bertlab generate


def run_generate(args: argparse.Namespace) -> int:
    device = resolve_device(args.device)
    model = GPTLMHeadModel.from_pretrained(args.model).to(device)
    tokenizer = load_tokenizer(args.model)
    config = model.config
    start = [] if config.bos_token_id is None else [config.bos_token_id]
    prompt = start + tokenizer.convert_tokens_to_ids(tokenizer.tokenize(args.prompt))
    if not prompt:
        raise UsageError("the model has no bos_token_id to start from: give a --prompt")
    input_ids = torch.tensor([prompt] * args.num_samples, device=device)  # (samples, N)
    with autocast(device, precision=args.precision):
        tokens = generate(model.eval(), input_ids, args.max_new_tokens, do_sample=not args.greedy,
                          temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                          generator=torch.Generator(device).manual_seed(args.seed), eos_token_id=config.eos_token_id)
    for row in tokens:
        say(tokenizer.decode(row))
    return 0


def add_generate_command(subcommands, common: argparse.ArgumentParser) -> None:
    parser = subcommands.add_parser(
        "generate", parents=[common], help="continue a prompt with a GPT",
        description="Continue --prompt with a GPT-2-style model folder (bertlab.gpt, or a transformers "
        "GPT2LMHeadModel) holding the WordPiece vocab.txt it was trained with: sampled with temperature, top-k and "
        "top-p (nucleus) filtering, seeded by --seed, or greedy; each new token reuses the keys and values of the "
        "tokens before it (KV cache). Prints one continuation a line.",
    )
    parser.add_argument("--model", type=Path, required=True, metavar="DIR", help="GPT model folder")
    parser.add_argument("--prompt", default="", help="text to continue (default: none, from the start token)")
    parser.add_argument("--max-new-tokens", type=positive_int, default=50, metavar="N", help="default: 50")
    parser.add_argument("--num-samples", type=positive_int, default=1, metavar="N", help="default: 1")
    parser.add_argument("--greedy", action="store_true", help="the most probable token at each step (no sampling)")
    parser.add_argument("--temperature", type=positive_float, default=1.0, help="softmax temperature (default: 1)")
    parser.add_argument("--top-k", type=positive_int, metavar="K", help="sample among the K most probable tokens")
    parser.add_argument("--top-p", type=fraction, metavar="P",
                        help="sample among the most probable tokens holding probability P (nucleus)")
    parser.set_defaults(handler=run_generate)


# --------------------------------------------------------------------------------------------------
# The parser and the entry point


def add_dataset_location_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-root", type=Path, metavar="DIR",
                        help="folder holding the datasets (default: $BERTLAB_DATA, else ~/.cache/bertlab)")
    parser.add_argument("--download", action="store_true",
                        help="download a missing dataset from its authors' URL (checksum verified)")
    parser.add_argument("--split-seed", type=int, default=0, help="seed of the train/dev/test split (default: 0)")
    parser.add_argument("--max-train-examples", type=positive_int, metavar="N",
                        help="use only the first N training examples (default: all)")


def add_dataset_arguments(parser: argparse.ArgumentParser, default: str | None = "mr") -> None:
    """--dataset (None as ``default``: mr, and only for finetune's sentence task) and the data folder's options."""
    parser.add_argument("--dataset", choices=SENTIMENT_DATASETS, default=default,
                        help="mr (sentence polarity v1.0), sst2, imdb or synthetic (generated sentences, no data "
                        "needed) (default: mr" + (")" if default else "; --task sentence only)"))
    add_dataset_location_arguments(parser)


def installed_version() -> str:
    """The version of the installed package; a source checkout on PYTHONPATH has none to read."""
    try:
        return importlib.metadata.version("bertlab")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed: running from a source folder)"


def build_parser() -> ArgumentParser:
    common = ArgumentParser(add_help=False)
    common.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                        help="auto: CUDA when available (default: auto)")
    common.add_argument("--threads", type=positive_int, metavar="N",
                        help="CPU threads of torch (default: torch's choice; 1 is faster on a busy machine)")
    common.add_argument("--seed", type=int, default=0, help="seed of the weights, data order and masks (default: 0)")
    common.add_argument("--precision", choices=PRECISIONS, default="auto",
                        help="the forward pass's precision: auto is bf16 or fp16 on CUDA, bf16 on a CPU that computes "
                        "it natively (AVX-512 BF16, AMX; benchmarks/cpu_precision.py) and float32 on other CPUs "
                        "(default: auto)")
    common.add_argument("--no-progress", action="store_true",
                        help="no progress bars (the line of each epoch, its loss and dev scores, stays)")
    common.add_argument("--debug", action="store_true", help="show the traceback of an error")

    parser = ArgumentParser(prog="bertlab", description="Pretrain, fine-tune and distil small BERTs (bertlab "
                            "reference package). Run 'bertlab COMMAND --help' for a command's options.")
    parser.add_argument("--version", action="version", version=f"bertlab {installed_version()}")
    subcommands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_pretrain_command(subcommands, common)
    add_finetune_command(subcommands, common)
    add_distill_command(subcommands, common)
    add_generate_command(subcommands, common)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``bertlab`` with the arguments ``argv`` (default: the command line); return the exit status."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit:  # --help, --version and argument errors (already printed)
        return exit.code if isinstance(exit.code, int) else 2
    prog = f"bertlab {args.command}"
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    seed_everything(args.seed)  # before anything random: the new head of a --model, a random model, the data order
    try:
        return args.handler(args)
    except UsageError as error:
        print(f"{prog}: error: {error} (see {prog} --help)", file=sys.stderr)
        return 2
    except (CommandLineError, ValueError, OSError) as error:  # FileNotFoundError is an OSError
        if args.debug:
            raise
        print(f"{prog}: error: {' '.join(str(error).split())}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if args.debug:
            raise
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
