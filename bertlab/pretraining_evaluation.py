"""Masked-token prediction on held-out text: a model's scores and the unigram baseline's (chapter 07).

Both are scored on the same masked positions M (fixed masks, same seed): the loss is the mean
cross-entropy -(1/|M|) sum_{i in M} log p(x_i) in nats and the accuracy the share of i in M where the
most probable token is x_i. A model that learned nothing scores about ln V; the unigram predictor,
which ignores the context, scores the cross-entropy of the token frequencies.
"""

import array
import dataclasses
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from bertlab.bert import BertForPreTraining
from bertlab.pretraining_data import IGNORE_INDEX, PretrainingDataset, check_documents


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
    for start in range(0, len(dataset), batch_size):
        items = [dataset[index] for index in range(start, min(start + batch_size, len(dataset)))]
        batch = {name: tensor.to(device) for name, tensor in dataset.collate(items).items()}
        output = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                       mlm_labels=batch["mlm_labels"], predict_labelled_only=True)
        logits, targets = output.mlm_logits.float(), output.mlm_targets  # (M, V), (M,)
        loss += F.cross_entropy(logits, targets, reduction="sum")
        correct += int((logits.argmax(-1) == targets).sum())
        predicted += len(targets)
    model.train(was_training)
    if predicted == 0:
        raise ValueError("no token was chosen for prediction: the documents are too short to score")
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
    log_q = ((counts.double() + 1) / (counts.double() + 1).sum()).log()  # (V,)
    dataset = _fixed_masks(tokenizer, documents, seq_len, seed)
    targets = torch.cat([labels[labels != IGNORE_INDEX] for _, labels in dataset.static_masks])  # (M,)
    if len(targets) == 0:
        raise ValueError("no token was chosen for prediction: the documents are too short to score")
    return MaskedLMScores(loss=float(-log_q[targets].mean()), accuracy=float((targets == log_q.argmax()).double().mean()),
                          predicted_tokens=len(targets))
