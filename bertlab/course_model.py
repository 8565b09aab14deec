"""The course's models, pretrained once and shipped with the package: their folders, weights and records.

The course BERT, BERT-mini (4 layers of width 256) pretrained with masked language modelling on IMDB
reviews by ``tools/course_bert.py``: chapters 06 to 10 load it offline with ``course_bert``. The course
GPT, its sibling of the same size trained left to right on the same reviews by ``tools/course_gpt.py``,
for chapter 11: ``course_gpt``.
"""

import hashlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch

from bertlab.bert import BertForPreTraining
from bertlab.data import IMDB_HELD_OUT_FOLDERS, imdb_documents
from bertlab.gpt import GPTLMHeadModel
from bertlab.recorded import RecordedResultsUnavailable, read_recorded_results
from bertlab.tokenization import BertTokenizer
from bertlab.utils import resolve_device

COURSE_BERT_FOLDER = Path(__file__).resolve().parent / "course_bert"
COURSE_GPT_FOLDER = Path(__file__).resolve().parent / "course_gpt"
TOKEN_COUNTS_FILE = "token_counts.txt"
HELD_OUT_REVIEWS = 1000  # IMDB test reviews of each polarity on which the model card scores the course BERT
EVALUATION_SEED = 1234  # the seed of that evaluation's fixed masks


def course_bert_folder() -> Path:
    """The folder of the course's BERT, shipped with the package (no download).

    BERT-mini (4 layers of width 256) pretrained with masked language modelling on the 75,000
    unlabelled and training reviews of the IMDB dataset (Maas et al., 2011), with a WordPiece
    vocabulary of 8,192 pieces learned from them; ``README.md`` in the folder is its model card (data,
    settings, hardware, time, held-out scores) and ``tools/course_bert.py`` the script that made it.
    The folder holds ``config.json``, ``model.safetensors`` (float16), ``vocab.txt`` and
    ``tokenizer_config.json``: ``BertForPreTraining.from_pretrained(folder)`` (or
    ``BertForSequenceClassification`` to fine-tune) and ``BertTokenizer(folder / "vocab.txt")`` load it,
    and so do Hugging Face's ``transformers.BertForPreTraining.from_pretrained(folder)`` and
    ``BertTokenizerFast.from_pretrained(folder)``.
    """
    if not (COURSE_BERT_FOLDER / "config.json").is_file():
        raise FileNotFoundError(f"the course's BERT is missing from {COURSE_BERT_FOLDER}: reinstall bertlab, or "
                                "make it with tools/course_bert.py")
    return COURSE_BERT_FOLDER


def held_out_reviews(imdb_root: str | Path) -> list[list[str]]:
    """The reviews on which the model card scores the course BERT's masked-token predictions: the first
    ``HELD_OUT_REVIEWS`` of each polarity of IMDB's test split (``IMDB_HELD_OUT_FOLDERS``, other movies
    than the pretraining's), each a list of sentences."""
    return imdb_documents(imdb_root, IMDB_HELD_OUT_FOLDERS, max_reviews_per_folder=HELD_OUT_REVIEWS)


def course_bert_token_counts() -> torch.Tensor:
    """How often each token of the course BERT's vocabulary occurs in its training text: a (V,)
    float64 tensor of counts (``token_frequencies``, stored with the model as ``token_counts.txt``),
    for the unigram baseline ``unigram_masked_lm`` without reading the 20M tokens again."""
    path = course_bert_folder() / TOKEN_COUNTS_FILE
    return torch.tensor([float(line) for line in path.read_text().split()], dtype=torch.float64)


def weights_sha256(folder: str | Path) -> str:
    """The SHA-256 (hex) of a model folder's weights file (``model.safetensors``): which weights a run used."""
    return hashlib.sha256((Path(folder) / "model.safetensors").read_bytes()).hexdigest()


def course_bert_sha256() -> str:
    """The SHA-256 (hex) of the course BERT's weights file: which release of the model a run used."""
    return weights_sha256(course_bert_folder())


def read_course_bert_results(name: str, required: Mapping[str, Sequence[str]], start: str | Path | None = None) -> dict:
    """``bertlab.recorded.read_recorded_results`` (from the course repository, else the copy shipped with
    the package) for a recorded run of the course's BERT, which must have used the weights installed
    here: the run's ``course_bert_sha256`` is compared with :func:`course_bert_sha256`, and
    :class:`~bertlab.recorded.RecordedResultsUnavailable` says so when they differ, so that a chapter never
    shows another release's numbers as this model's."""
    return _read_results_of_installed_weights(name, required, start, "course_bert_sha256", "BERT", course_bert_sha256)


def read_course_gpt_results(name: str, required: Mapping[str, Sequence[str]], start: str | Path | None = None) -> dict:
    """:func:`read_course_bert_results` for a recorded run of the course's GPT: its ``course_gpt_sha256``
    must be the digest of the GPT installed here (``course_gpt_folder``); a GPT that is not installed is
    :class:`~bertlab.recorded.RecordedResultsUnavailable` too."""
    return _read_results_of_installed_weights(name, required, start, "course_gpt_sha256", "GPT",
                                              lambda: weights_sha256(course_gpt_folder()))


def _read_results_of_installed_weights(name: str, required: Mapping[str, Sequence[str]], start: str | Path | None,
                                       key: str, model: str, installed_sha256: Callable[[], str]) -> dict:
    """The record ``name`` when its ``key`` is ``installed_sha256()``, the digest of the course's ``model``
    installed here; else :class:`~bertlab.recorded.RecordedResultsUnavailable`, in one line that names the
    command to run again (the record's own)."""
    recorded = read_recorded_results(name, {**required, key: []}, start)
    try:
        installed = installed_sha256()
    except FileNotFoundError as missing:
        raise RecordedResultsUnavailable(str(missing)) from None
    if recorded[key] != installed:
        command = recorded.get("command", "its benchmark")
        raise RecordedResultsUnavailable(
            f"benchmarks/results/{name} was recorded with other weights of the course's {model} than the ones "
            f"installed here: run {command} again")
    return recorded


def course_bert(device: str | torch.device | None = None) -> tuple[BertForPreTraining, BertTokenizer]:
    """The course's BERT (``course_bert_folder``) in eval mode on ``device`` (None: CUDA when
    available), in float32, and its tokenizer."""
    folder = course_bert_folder()
    model = BertForPreTraining.from_pretrained(folder).to(resolve_device(device)).eval()
    return model, BertTokenizer(folder / "vocab.txt")


def course_gpt_folder() -> Path:
    """The folder of the course's GPT, shipped with the package (no download): a GPT-2-style decoder of
    the course BERT's size, vocabulary, training text and budget, trained left to right; ``README.md`` in
    the folder is its model card and ``tools/course_gpt.py`` the script that made it. The folder holds
    ``config.json``, ``model.safetensors`` (float16), ``vocab.txt`` and ``tokenizer_config.json``:
    ``GPTLMHeadModel.from_pretrained(folder)`` (or ``GPTForSequenceClassification``) and Hugging Face's
    ``transformers.GPT2LMHeadModel.from_pretrained(folder)`` load it.
    """
    if not (COURSE_GPT_FOLDER / "config.json").is_file():
        raise FileNotFoundError(f"the course's GPT is missing from {COURSE_GPT_FOLDER}: reinstall bertlab, or "
                                "make it with tools/course_gpt.py")
    return COURSE_GPT_FOLDER


def course_gpt(device: str | torch.device | None = None) -> tuple[GPTLMHeadModel, BertTokenizer]:
    """The course's GPT (``course_gpt_folder``) in eval mode on ``device`` (None: CUDA when available), in
    float32, and its tokenizer (the course BERT's vocabulary)."""
    folder = course_gpt_folder()
    return GPTLMHeadModel.from_pretrained(folder).to(resolve_device(device)).eval(), BertTokenizer(folder / "vocab.txt")
