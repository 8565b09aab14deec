"""Held-out scores of pretrained models: masked-token prediction (chapter 07) and next-token
prediction (chapter 11), with their count-based baselines.

Masked-token prediction: a BERT, the unigram baseline and a GPT are scored on the same masked
positions M (fixed masks, same seed): the loss is the mean cross-entropy -(1/|M|) sum_{i in M} log p(x_i)
in nats and the accuracy the share of i in M where the most probable token is x_i. A model that learned
nothing scores about ln V; the unigram predictor, which ignores the context, scores the cross-entropy of
the token frequencies. A BERT reads both sides of a masked word, a GPT (``causal_masked_lm``) its left
side only.

Next-token prediction: a GPT and the count-based models of :mod:`bertlab.ngram` are scored on the same
predicted tokens P of the same segments ([CLS] segment [SEP], as the GPT was trained): the loss
-(1/|P|) sum_{i in P} log p(x_i | x_<i), its perplexity e^loss, and the accuracy of the most probable
next token.

Every evaluation cuts the documents into the same full-sentence segments (``pack_full_sentences``,
through ``PretrainingDataset``), so the tokens the models are compared on are the same.
"""

import array
import dataclasses
import math
from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F

from bertlab.bert import BertForPreTraining
from bertlab.gpt import GPTLMHeadModel, next_token_nll
from bertlab.ngram import AddKUnigram, CountLanguageModel
from bertlab.pretraining_data import IGNORE_INDEX, CausalLMDataset, PretrainingDataset, check_documents


@dataclasses.dataclass(frozen=True)
class MaskedLMScores:
    """Masked-token prediction on held-out text: ``loss`` = -(1/|M|) sum_{i in M} log p(x_i) in nats and
    ``accuracy`` = share of i in M with argmax_v p(v) = x_i, over the |M| = ``predicted_tokens``
    predicted positions."""

    loss: float
    accuracy: float
    predicted_tokens: int


def _fixed_masks(tokenizer, documents, seq_len: int, seed: int) -> PretrainingDataset:
    """Full-sentence segments of ``documents`` masked once with ``seed``: every model is scored on the
    same masked tokens."""
    return PretrainingDataset(tokenizer, documents, seq_len=seq_len, nsp=False, masking="static", seed=seed)


def _batches(dataset: PretrainingDataset, batch_size: int, device: torch.device) -> Iterator[dict[str, torch.Tensor]]:
    """The dataset's items in order, ``batch_size`` at a time, collated and moved to ``device``."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    for start in range(0, len(dataset), batch_size):
        items = [dataset[index] for index in range(start, min(start + batch_size, len(dataset)))]
        yield {name: tensor.to(device) for name, tensor in dataset.collate(items).items()}


def _nothing_predicted() -> ValueError:
    return ValueError("no token was chosen for prediction: the documents are too short to score")


@torch.inference_mode()
def evaluate_masked_lm(model: BertForPreTraining, tokenizer, documents: Sequence[Sequence[str]], *,
                       seq_len: int = 128, batch_size: int = 64, seed: int = 1234) -> MaskedLMScores:
    """Score ``model`` at masked-token prediction on ``documents`` (held-out text), on its device.

    The documents are cut into full-sentence segments of at most ``seq_len`` tokens
    (``pack_full_sentences``) and masked once with BERT's recipe and a fixed ``seed``
    (``mask_tokens``), so that two models, or a model and ``unigram_masked_lm``, are scored on the
    same positions. A model that learned nothing scores about ln V nats.
    """
    dataset = _fixed_masks(tokenizer, documents, seq_len, seed)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    loss, correct, predicted = torch.zeros((), dtype=torch.float64, device=device), 0, 0
    for batch in _batches(dataset, batch_size, device):
        output = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                       mlm_labels=batch["mlm_labels"], predict_labelled_only=True)
        logits, targets = output.mlm_logits.float(), output.mlm_targets  # (M, V), (M,)
        loss += F.cross_entropy(logits, targets, reduction="sum")
        correct += int((logits.argmax(-1) == targets).sum())
        predicted += len(targets)
    model.train(was_training)
    if predicted == 0:
        raise _nothing_predicted()
    return MaskedLMScores(loss=float(loss) / predicted, accuracy=correct / predicted, predicted_tokens=predicted)


def token_frequencies(tokenizer, documents: Sequence[Sequence[str]]) -> torch.Tensor:
    """How often each token of the vocabulary occurs in ``documents``: a (V,) float64 tensor of counts."""
    ids = array.array("q")  # 8 bytes a token: 20M tokens in 160 MB, where a list of ints takes 720 MB
    for document in check_documents(documents):
        for sentence in document:
            ids.extend(tokenizer.convert_tokens_to_ids(tokenizer.tokenize(sentence)))
    if not ids:
        return torch.zeros(tokenizer.vocab_size, dtype=torch.float64)
    return torch.bincount(torch.frombuffer(ids, dtype=torch.int64), minlength=tokenizer.vocab_size).double()


def unigram_masked_lm(counts: torch.Tensor, tokenizer, documents: Sequence[Sequence[str]], *, seq_len: int = 128,
                      seed: int = 1234) -> MaskedLMScores:
    """Score the unigram predictor, which ignores the context, on the positions ``evaluate_masked_lm``
    scores with the same ``seq_len`` and ``seed``.

    It predicts every masked token with the same distribution q_v = (c_v + 1) / sum_u (c_u + 1), the
    ``counts`` c of a training corpus (``token_frequencies``) with add-one smoothing: its loss is the
    cross-entropy of the held-out tokens under q, its accuracy the share of the most frequent token.
    A model that uses the context scores below this loss.
    """
    if counts.shape != (tokenizer.vocab_size,):
        raise ValueError(f"counts must have shape ({tokenizer.vocab_size},), one per token, got {tuple(counts.shape)}")
    log_q = AddKUnigram(counts, k=1.0).next_token_log_probs(torch.zeros((), dtype=torch.long))  # (V,)
    dataset = _fixed_masks(tokenizer, documents, seq_len, seed)
    targets = torch.cat([labels[labels != IGNORE_INDEX] for _, labels in dataset.static_masks])  # (M,)
    if len(targets) == 0:
        raise _nothing_predicted()
    return MaskedLMScores(loss=float(-log_q[targets].mean()),
                          accuracy=float((targets == log_q.argmax()).double().mean()),
                          predicted_tokens=len(targets))


# --------------------------------------------------------------------------------------------------
# Next-token prediction: a GPT and the count-based models
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CausalLMScores:
    """Next-token prediction on held-out text, over the |P| = ``predicted_tokens`` predicted tokens:
    ``loss`` = -(1/|P|) sum_{i in P} log p(x_i | x_<i) in nats, ``perplexity`` = e^loss (V for a uniform
    guess over V tokens, 1 for a perfect predictor) and ``accuracy`` = share of i in P with
    argmax_v p(v | x_<i) = x_i."""

    loss: float
    perplexity: float
    accuracy: float
    predicted_tokens: int


def _check_causal_model(model, seq_len: int) -> torch.device:
    """The device of a GPT or a count-based model; a clear error for another model."""
    if isinstance(model, CountLanguageModel):
        return model.device
    if not isinstance(model, GPTLMHeadModel):
        raise TypeError(f"model must be a bertlab.gpt.GPTLMHeadModel or a count-based model of bertlab.ngram, got "
                        f"{type(model).__name__}")
    if seq_len > model.config.n_positions:
        raise ValueError(f"seq_len {seq_len} is longer than the model's n_positions={model.config.n_positions}")
    return next(model.parameters()).device


def _score_next_tokens(model: GPTLMHeadModel | CountLanguageModel,
                       batches: Iterator[tuple[torch.Tensor, torch.Tensor]]) -> tuple[float, float, int]:
    """(loss, accuracy, predicted tokens) of ``model`` predicting each labelled token from the tokens
    before it: input_ids (B, N) read, labels (B, N) predicted at i + 1 from the positions <= i (-100
    where nothing is predicted). A GPT is put in eval mode for the pass and back in its mode after;
    its inputs are padded on the right only, which no earlier position attends to under the causal
    mask, so no attention mask is needed."""
    was_training = isinstance(model, GPTLMHeadModel) and model.training
    if isinstance(model, GPTLMHeadModel):
        model.eval()
    loss, correct, predicted = 0.0, 0, 0
    for input_ids, labels in batches:
        if isinstance(model, GPTLMHeadModel):
            logits = model(input_ids).logits  # (B, N, V)
            nll, counted = next_token_nll(logits, labels)  # (B, N - 1) each
            guesses = logits[:, :-1].argmax(-1)  # (B, N - 1)
        else:
            nll, counted = model.next_token_nll(input_ids, labels)  # (B, N - 1) each
            guesses = model.most_probable_next(input_ids[:, :-1])  # (B, N - 1)
        loss += float(nll.double()[counted].sum())
        correct += int((guesses == labels[:, 1:])[counted].sum())
        predicted += int(counted.sum())
    if isinstance(model, GPTLMHeadModel):
        model.train(was_training)
    if predicted == 0:
        raise _nothing_predicted()
    return loss / predicted, correct / predicted, predicted


@torch.inference_mode()
def evaluate_causal_lm(model: GPTLMHeadModel | CountLanguageModel, tokenizer, documents: Sequence[Sequence[str]], *,
                       seq_len: int = 128, batch_size: int = 64) -> CausalLMScores:
    """Score ``model`` at next-token prediction on ``documents`` (held-out text), on its device.

    The documents are cut into the full-sentence segments of ``evaluate_masked_lm`` (at most ``seq_len``
    tokens with [CLS] and [SEP]), each read as [CLS] segment [SEP] (``CausalLMDataset``, the GPT's
    training examples): every token but [CLS] is predicted from the tokens before it,

        loss = -(1/|P|) sum_{i in P} log p(x_i | x_<i),   perplexity = e^loss,

    P the predicted tokens of all segments together, as :func:`bertlab.gpt.perplexity` counts them.
    ``model`` is a ``GPTLMHeadModel``, or a count-based model of :mod:`bertlab.ngram`, scored on exactly
    the same tokens (fit its counts with ``bos_token_id=tokenizer.cls_token_id`` and
    ``eos_token_id=tokenizer.sep_token_id``, the framing read here).

    Raises:
        TypeError: for another kind of model.
        ValueError: for a seq_len longer than the GPT's positions, or documents too short to score.
    """
    device = _check_causal_model(model, seq_len)
    dataset = CausalLMDataset(tokenizer, documents, seq_len=seq_len)
    loss, accuracy, predicted = _score_next_tokens(
        model, ((batch["input_ids"], batch["labels"]) for batch in _batches(dataset, batch_size, device)))
    return CausalLMScores(loss=loss, perplexity=math.exp(loss), accuracy=accuracy, predicted_tokens=predicted)


@torch.inference_mode()
def causal_masked_lm(model: GPTLMHeadModel | CountLanguageModel, tokenizer, documents: Sequence[Sequence[str]], *,
                     seq_len: int = 128, batch_size: int = 64, seed: int = 1234) -> MaskedLMScores:
    """Score a left-to-right model on the masked words ``evaluate_masked_lm`` scores a BERT on, with the
    same ``seq_len`` and ``seed``: the same segments, the same fixed masks M.

    The model reads the segment unmasked and predicts each masked position's original token from the
    tokens to its left (the logits at i - 1 for the token at i):

        loss = -(1/|M|) sum_{i in M} log p(x_i | x_<i)

    where a BERT reads both sides, x_<i and x_>i, with the masked tokens hidden. A masked word is never
    the first token ([CLS] is never masked), so each has a left context. ``model`` is a
    ``GPTLMHeadModel`` or a count-based model of :mod:`bertlab.ngram`.

    Raises:
        TypeError: for another kind of model.
        ValueError: for a seq_len longer than the GPT's positions, or documents too short to score.
    """
    device = _check_causal_model(model, seq_len)
    dataset = _fixed_masks(tokenizer, documents, seq_len, seed)

    def unmasked(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        labels = batch["mlm_labels"]  # (B, N): the original token at each masked position
        return torch.where(labels != IGNORE_INDEX, labels, batch["input_ids"]), labels  # (B, N) each

    loss, accuracy, predicted = _score_next_tokens(model, map(unmasked, _batches(dataset, batch_size, device)))
    return MaskedLMScores(loss=loss, accuracy=accuracy, predicted_tokens=predicted)
