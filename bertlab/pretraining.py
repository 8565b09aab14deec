"""Pretraining BERT: masked language modelling and next sentence prediction (chapter 07).

BERT (Devlin et al., 2019) learns from unlabelled text with two tasks at once:

- masked language modelling (MLM): 15% of the tokens are chosen, hidden, and predicted back from
  both sides of their context; ``mask_tokens`` implements the recipe;
- next sentence prediction (NSP): given two segments A and B, predict whether B followed A in the
  text (IsNext, label 0) or was drawn from another document (NotNext, label 1);
  ``make_nsp_examples`` builds the pairs.

RoBERTa (Liu et al., 2019) kept MLM, dropped NSP for segments of contiguous full sentences, and drew
new masks every time a sequence is fed to the model ("dynamic masking") where BERT masked its data
once, offline ("static masking"). ``PretrainingDataset`` offers both choices, and ``pretrain`` runs
the training loop (AdamW, linear warm-up and decay, gradient clipping and accumulation, mixed
precision on CUDA, checkpoints that resume exactly, a metrics log and a loss curve), on one device or
on several with ``torchrun`` (DistributedDataParallel).

Scale: BERT trained 1M steps at batch 256 (sequences of up to 512 tokens); RoBERTa trained 500K steps
at batch 8K. The course's BERT (``course_bert``), which the later chapters fine-tune and distil, was
pretrained once with this code on a 2-core CPU (``tools/course_bert.py``) and ships with the package;
``evaluate_masked_lm`` and ``unigram_masked_lm`` score it on held-out text.
"""

import array
import contextlib
import dataclasses
import hashlib
import json
import math
import os
import random
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import Dataset, DistributedSampler
from tqdm.auto import tqdm

from bertlab.bert import BertForPreTraining
from bertlab.tokenization import BertTokenizer
from bertlab.utils import (
    RecordedResultsUnavailable,
    autocast,
    grad_scaler,
    read_recorded_results,
    resolve_device,
    seed_everything,
)

IGNORE_INDEX = -100  # label of the positions that are not predicted (ignored by cross-entropy)
IS_NEXT, NOT_NEXT = 0, 1  # NSP labels, as in BERT and Hugging Face's BertForPreTraining
MASKING_KINDS = ("dynamic", "static")

CHECKPOINT_FILE = "checkpoint.pt"
METRICS_FILE = "metrics.jsonl"
PLOT_FILE = "loss_curve.png"
SETTINGS_FILE = "pretraining_args.json"


# --------------------------------------------------------------------------------------------------
# Masked language modelling and next sentence prediction data
# --------------------------------------------------------------------------------------------------


def _check_probability(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value}")


def mask_tokens(
    input_ids: torch.Tensor,
    *,
    mask_token_id: int,
    vocab_size: int,
    special_tokens_mask: torch.Tensor | None = None,
    mlm_probability: float = 0.15,
    mask_replace_prob: float = 0.8,
    random_replace_prob: float = 0.1,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Corrupt a batch for masked language modelling, with BERT's recipe (Devlin et al., 2019, 3.1).

    Each position i that is not special is chosen independently with probability p = mlm_probability
    (15% in BERT). A chosen token x_i becomes

        [MASK]                       with probability mask_replace_prob   (80%)
        a token uniform over vocab   with probability random_replace_prob (10%)
        x_i itself                   otherwise                            (10%)

    and the model must predict x_i there: labels_i = x_i at chosen positions, -100 elsewhere, so that
    the cross-entropy only counts the chosen ones.

    Why not always [MASK]? [MASK] never occurs when the model is fine-tuned, so a model that only saw
    [MASK] at predicted positions could learn useful representations for masked slots only. Because
    10% of the predicted tokens are left as they are and 10% are replaced by random words, the model
    cannot tell which input tokens are genuine and which must be corrected, so it has to keep a good
    contextual representation of *every* token (Devlin et al., 2019, appendix A.1 and C.2). The random
    replacements are rare (1.5% of all tokens), which the paper found does not hurt understanding.

    Positions are drawn independently (a Bernoulli draw per token, as in Hugging Face's
    ``DataCollatorForLanguageModeling``), so a sequence holds 15% chosen tokens on average; BERT's
    original data script picked exactly round(15% of the length) per sequence. The random tokens are
    drawn from the whole vocabulary, as in BERT's script.

    Args:
        input_ids: (B, N) (or any shape) integer token ids. Not modified.
        mask_token_id: id of [MASK].
        vocab_size: random replacements are drawn uniformly from [0, vocab_size).
        special_tokens_mask: bool tensor shaped like ``input_ids``, True where a token must never be
            chosen ([CLS], [SEP], padding); None lets every position be chosen.
        mlm_probability: probability p that a position is chosen.
        mask_replace_prob: probability that a chosen token becomes [MASK].
        random_replace_prob: probability that a chosen token becomes a random token.
        generator: a ``torch.Generator`` for reproducible masks; draws happen on its device.

    Returns:
        (masked_input_ids, labels), both shaped like ``input_ids``; labels are -100 where nothing is
        predicted.
    """
    if not isinstance(input_ids, torch.Tensor) or input_ids.is_floating_point() or input_ids.is_complex():
        raise TypeError(f"input_ids must be an integer tensor, got {type(input_ids).__name__} "
                        f"{getattr(input_ids, 'dtype', '')}")
    for name, value in [("mlm_probability", mlm_probability), ("mask_replace_prob", mask_replace_prob),
                        ("random_replace_prob", random_replace_prob)]:
        _check_probability(name, value)
    if mask_replace_prob + random_replace_prob > 1.0:
        raise ValueError(f"mask_replace_prob + random_replace_prob must be at most 1, got "
                         f"{mask_replace_prob} + {random_replace_prob} = {mask_replace_prob + random_replace_prob}")
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
    if not 0 <= mask_token_id < vocab_size:
        raise ValueError(f"mask_token_id {mask_token_id} is outside the vocabulary [0, {vocab_size})")
    if special_tokens_mask is not None and special_tokens_mask.shape != input_ids.shape:
        raise ValueError(f"special_tokens_mask has shape {tuple(special_tokens_mask.shape)}, but input_ids "
                         f"has shape {tuple(input_ids.shape)}: they must match")

    draw_device = generator.device if generator is not None else input_ids.device

    def uniform() -> torch.Tensor:  # U[0, 1) per position, on the input's device
        return torch.rand(input_ids.shape, generator=generator, device=draw_device).to(input_ids.device)

    chosen = uniform() < mlm_probability
    if special_tokens_mask is not None:
        chosen &= ~special_tokens_mask.to(device=input_ids.device, dtype=torch.bool)
    replacement = uniform()  # one draw decides between [MASK], random token and unchanged
    to_mask = chosen & (replacement < mask_replace_prob)
    to_random = chosen & (replacement >= mask_replace_prob) & (replacement < mask_replace_prob + random_replace_prob)
    random_tokens = torch.randint(vocab_size, input_ids.shape, generator=generator, device=draw_device)

    masked_input_ids = input_ids.masked_fill(to_mask, mask_token_id)
    masked_input_ids = torch.where(to_random, random_tokens.to(input_ids), masked_input_ids)
    labels = input_ids.masked_fill(~chosen, IGNORE_INDEX)
    return masked_input_ids, labels


def _check_documents(documents) -> list[list[str]]:
    """Return the non-empty documents; raise a clear error unless documents is a list of lists of str."""
    if isinstance(documents, str) or not isinstance(documents, Sequence):
        raise TypeError(f"documents must be a list of documents, each a list of sentences (str), "
                        f"got {type(documents).__name__}")
    for index, document in enumerate(documents):
        if isinstance(document, str) or not isinstance(document, Sequence):
            raise TypeError(f"documents[{index}] must be a list of sentences (str), got {type(document).__name__}; "
                            f"wrap a single text as [[sentence, sentence, ...]]")
        for position, sentence in enumerate(document):
            if not isinstance(sentence, str):
                raise TypeError(f"documents[{index}][{position}] must be a str, got {type(sentence).__name__}")
    return [list(document) for document in documents if len(document) > 0]


def make_nsp_examples(documents: Sequence[Sequence[str]], seed: int = 0) -> list[tuple[str, str, int]]:
    """Sentence pairs for next sentence prediction (Devlin et al., 2019, 3.1).

    For every two consecutive sentences (s_i, s_{i+1}) of a document, flip a fair coin: heads gives
    (s_i, s_{i+1}, 0) -- IsNext; tails gives (s_i, s', 1) -- NotNext, where s' is a uniformly chosen
    sentence of a uniformly chosen *other* document.

    BERT's segments A and B are spans of one or more sentences filling up to 512 tokens; here each
    segment is a single sentence, which keeps the examples short for CPU training (RoBERTa, Liu et
    al., 2019, found single-sentence pairs hurt downstream accuracy at scale).

    Args:
        documents: a list of documents, each a list of sentences; at least two non-empty documents.
        seed: seeds the coins and the random sentences; the same seed gives the same pairs.

    Returns:
        A list of (sentence_a, sentence_b, label), label 0 = IsNext, 1 = NotNext, in document order.
    """
    documents = _check_documents(documents)
    if len(documents) < 2:
        raise ValueError(f"next sentence prediction needs at least 2 non-empty documents (NotNext sentences come "
                         f"from another document), got {len(documents)}")
    rng = random.Random(seed)
    examples = []
    for index, document in enumerate(documents):
        for sentence, next_sentence in zip(document, document[1:]):
            if rng.random() < 0.5:
                examples.append((sentence, next_sentence, IS_NEXT))
            else:
                other = rng.randrange(len(documents) - 1)
                other += other >= index  # any document but this one
                examples.append((sentence, rng.choice(documents[other]), NOT_NEXT))
    if not examples:
        raise ValueError("no document has two consecutive sentences: next sentence prediction has no pairs")
    return examples


def pack_full_sentences(tokenizer, documents: Sequence[Sequence[str]], seq_len: int) -> list[list[int]]:
    """RoBERTa's FULL-SENTENCES inputs (Liu et al., 2019, 4.2), as token ids without [CLS]/[SEP].

    Contiguous sentences are packed greedily until the next one would not fit in seq_len - 2 tokens
    (room for [CLS] and [SEP]); packing crosses document boundaries, with an extra [SEP] between two
    documents. A sentence longer than the budget is truncated.

    Returns:
        A list of segments, each a list of at most seq_len - 2 token ids.
    """
    budget = seq_len - 2
    segments, current, new_document = [], [], False
    for document in _check_documents(documents):
        for sentence in document:
            ids = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(sentence))[:budget]
            if not ids:
                continue
            separator = [tokenizer.sep_token_id] if new_document and current else []
            if len(current) + len(separator) + len(ids) > budget:
                segments.append(current)
                current, separator = [], []
            current += separator + ids
            new_document = False
        new_document = True
    if current:
        segments.append(current)
    return segments


class PretrainingDataset(Dataset):
    """Tokenized pretraining examples, with static or dynamic masking, with or without NSP.

    With ``nsp=True`` each example is a pair from ``make_nsp_examples``, encoded as
    [CLS] A [SEP] B [SEP] with token types 0 for [CLS] A [SEP] and 1 for B [SEP], truncated to seq_len
    tokens (the longer segment loses tokens first, as in BERT). With ``nsp=False`` each example is a
    segment of contiguous full sentences (``pack_full_sentences``), [CLS] segment [SEP], token types 0.

    Masking (``mask_tokens``):

    - "static": as BERT, masks are drawn once, here, and the same example always comes back with the
      same masks. BERT duplicated its data 10 times with different masks (``static_mask_copies``), so
      each sequence is seen with 10 masks over 40 epochs;
    - "dynamic": as RoBERTa, ``collate`` draws new masks every time a batch is made.

    Items are dicts of 1-D tensors; ``collate`` pads a list of items into a batch for
    ``BertForPreTraining.forward``.

    Args:
        tokenizer: a ``BertTokenizer``.
        documents: a list of documents, each a list of sentences.
        seq_len: maximum tokens per example, special tokens included.
        nsp: sentence pairs with NSP labels (BERT), or full-sentence segments without (RoBERTa).
        masking: "dynamic" or "static".
        static_mask_copies: with static masking, how many differently masked copies of each example.
        mlm_probability: share of the tokens to predict.
        seed: seeds the NSP pairs and the static masks.
    """

    def __init__(self, tokenizer, documents, *, seq_len: int = 128, nsp: bool = True, masking: str = "dynamic",
                 static_mask_copies: int = 1, mlm_probability: float = 0.15, seed: int = 0):
        if masking not in MASKING_KINDS:
            raise ValueError(f"masking must be one of {MASKING_KINDS}, got {masking!r}")
        if seq_len < 4:
            raise ValueError(f"seq_len must be at least 4 ([CLS] A [SEP] B [SEP] needs room), got {seq_len}")
        if static_mask_copies < 1:
            raise ValueError(f"static_mask_copies must be at least 1, got {static_mask_copies}")
        _check_probability("mlm_probability", mlm_probability)
        self.tokenizer, self.seq_len, self.nsp, self.masking = tokenizer, seq_len, nsp, masking
        self.mlm_probability = mlm_probability
        self.special_token_ids = torch.tensor([tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id])
        self.examples = self._encode_pairs(documents, seed) if nsp else self._encode_segments(documents)
        if not self.examples:
            raise ValueError("the documents hold no text to pretrain on")
        self.static_masks = None
        if masking == "static":
            generator = torch.Generator().manual_seed(seed)
            self.static_masks = [self.mask(example["input_ids"], generator)
                                 for _ in range(static_mask_copies) for example in self.examples]

    def _encode_pairs(self, documents, seed: int) -> list[dict]:
        examples = []
        for sentence_a, sentence_b, label in make_nsp_examples(documents, seed=seed):
            encoded = self.tokenizer.encode(sentence_a, sentence_b, max_length=self.seq_len, truncation=True)
            examples.append({"input_ids": torch.tensor(encoded["input_ids"]),
                             "token_type_ids": torch.tensor(encoded["token_type_ids"]),
                             "nsp_labels": torch.tensor(label)})
        return examples

    def _encode_segments(self, documents) -> list[dict]:
        examples = []
        for segment in pack_full_sentences(self.tokenizer, documents, self.seq_len):
            input_ids = torch.tensor([self.tokenizer.cls_token_id, *segment, self.tokenizer.sep_token_id])
            examples.append({"input_ids": input_ids, "token_type_ids": torch.zeros_like(input_ids)})
        return examples

    def mask(self, input_ids: torch.Tensor, generator: torch.Generator | None = None):
        """``mask_tokens`` with this dataset's tokenizer; [CLS], [SEP] and [PAD] are never chosen."""
        return mask_tokens(input_ids, mask_token_id=self.tokenizer.mask_token_id,
                           vocab_size=self.tokenizer.vocab_size,
                           special_tokens_mask=torch.isin(input_ids, self.special_token_ids),
                           mlm_probability=self.mlm_probability, generator=generator)

    def __len__(self) -> int:
        return len(self.static_masks) if self.static_masks is not None else len(self.examples)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        item = dict(self.examples[index % len(self.examples)])
        if self.static_masks is not None:
            item["masked_input_ids"], item["mlm_labels"] = self.static_masks[index]
        return item

    def collate(self, items: list[dict], generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        """Pad items to the longest one and mask them (dynamic masking) or use their fixed masks (static).

        Returns:
            input_ids (B, N) with masks applied, token_type_ids (B, N), attention_mask (B, N) bool with
            True = real token (may attend), mlm_labels (B, N) with -100 where nothing is predicted, and
            nsp_labels (B,) when the dataset has NSP.
        """
        length = max(len(item["input_ids"]) for item in items)

        def pad(key: str, value: int) -> torch.Tensor:  # (B, N)
            batch = torch.full((len(items), length), value, dtype=torch.long)
            for row, item in enumerate(items):
                batch[row, : len(item[key])] = item[key]
            return batch

        input_ids = pad("input_ids", self.tokenizer.pad_token_id)
        batch = {"token_type_ids": pad("token_type_ids", 0),
                 "attention_mask": input_ids != self.tokenizer.pad_token_id}
        if self.static_masks is not None:
            batch["input_ids"] = pad("masked_input_ids", self.tokenizer.pad_token_id)
            batch["mlm_labels"] = pad("mlm_labels", IGNORE_INDEX)
        else:
            batch["input_ids"], batch["mlm_labels"] = self.mask(input_ids, generator)
        if self.nsp:
            batch["nsp_labels"] = torch.stack([item["nsp_labels"] for item in items])
        return batch


# --------------------------------------------------------------------------------------------------
# Optimisation
# --------------------------------------------------------------------------------------------------


def weight_decay_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW parameter groups: decay the weight matrices, not the biases nor the LayerNorm weights.

    As in BERT's optimizer, which excludes "bias" and "LayerNorm" parameters from weight decay
    (Loshchilov and Hutter's decoupled weight decay, 2019). Biases and normalization gains/shifts are
    exactly the 1-D parameters, so the rule is: decay if the parameter has 2 or more dimensions
    (matrices and embedding tables). Frozen parameters (requires_grad False) are left out.
    """
    parameters = [parameter for parameter in model.parameters() if parameter.requires_grad]
    return [{"params": [parameter for parameter in parameters if parameter.ndim >= 2], "weight_decay": weight_decay},
            {"params": [parameter for parameter in parameters if parameter.ndim < 2], "weight_decay": 0.0}]


def get_linear_schedule(optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int) -> LambdaLR:
    """Linear warm-up then linear decay to 0, BERT's learning-rate schedule.

    lr(t) = lr * t / warmup_steps                                for t < warmup_steps
    lr(t) = lr * max(0, (total_steps - t) / (total_steps - warmup_steps))   afterwards,

    for the optimizer step t = 0, 1, ... (call ``scheduler.step()`` after each ``optimizer.step()``).
    """
    if total_steps < 1:
        raise ValueError(f"total_steps must be positive, got {total_steps}")
    if not 0 <= warmup_steps <= total_steps:
        raise ValueError(f"warmup_steps must be in [0, total_steps = {total_steps}], got {warmup_steps}")

    def factor(step: int) -> float:
        if step < warmup_steps:
            return step / warmup_steps
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return LambdaLR(optimizer, factor)


# --------------------------------------------------------------------------------------------------
# The training loop
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class _Process:
    """Where this process runs: its rank among world_size processes and its device."""

    rank: int
    world_size: int
    device: torch.device
    started_group: bool  # True when pretrain initialised the process group and must destroy it

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _setup_process(device) -> _Process:
    """One process, or one of the processes ``torchrun`` started (env vars WORLD_SIZE, LOCAL_RANK).

    Under torchrun each process takes the GPU cuda:LOCAL_RANK (NCCL backend) when CUDA is available,
    else the CPU (gloo backend).
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size == 1 and not dist.is_initialized():
        return _Process(0, 1, resolve_device(device), started_group=False)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = resolve_device(device)
    if device.type == "cuda":
        device = torch.device("cuda", local_rank if device.index is None else device.index)
        torch.cuda.set_device(device)
    started_group = not dist.is_initialized()
    if started_group:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return _Process(dist.get_rank(), dist.get_world_size(), device, started_group)


def _mask_generator(seed: int, rank: int, micro_batch: int) -> torch.Generator:
    """The generator of a micro-batch's dynamic masks: a function of (seed, rank, micro-batch index)."""
    state = np.random.SeedSequence([seed, rank, micro_batch]).generate_state(1, dtype=np.uint64)[0]
    return torch.Generator().manual_seed(int(state))


def _micro_batches(dataset: PretrainingDataset, sampler: DistributedSampler, batch_size: int, start: int,
                   seed: int, rank: int):
    """Yield the micro-batches start, start + 1, ... of this process, forever (epoch after epoch).

    Micro-batch m is a pure function of m: epoch e = m // batches_per_epoch shuffles the examples with
    seed + e (``DistributedSampler``, which gives each process its own share), and the masks come
    from ``_mask_generator(seed, rank, m)``. Resuming at micro-batch m therefore sees exactly the
    data that the uninterrupted run would have seen.
    """
    batches_per_epoch = len(sampler) // batch_size
    index = start
    while True:
        epoch, position = divmod(index, batches_per_epoch)
        sampler.set_epoch(epoch)
        order = list(sampler)
        for position in range(position, batches_per_epoch):
            items = [dataset[i] for i in order[position * batch_size: (position + 1) * batch_size]]
            yield dataset.collate(items, generator=_mask_generator(seed, rank, index))
            index += 1


def _without_empty_mlm_loss(output, batch: dict[str, torch.Tensor]):
    """``output`` whose MLM loss is 0, with zero gradient, when the micro-batch has no chosen token.

    The MLM loss is the mean over the chosen positions M, -(1/|M|) sum_{i in M} log p(x_i); with M empty
    ``F.cross_entropy`` returns 0/0 = NaN (as Hugging Face's models do), and one NaN gradient would turn
    every weight into NaN. Such micro-batches are rare with long sequences but not with short ones: a
    micro-batch of k maskable tokens has none chosen with probability (1 - p)^k, 20% for k = 10 at
    p = 0.15. Then loss = mlm_loss + nsp_loss becomes 0 + nsp_loss (or 0 without NSP): the micro-batch
    contributes no MLM gradient. ``torch.where`` chooses on the device, without a host synchronisation;
    the NaN branch it drops receives a zero gradient, and cross-entropy's backward writes nothing at
    ignored positions, so no NaN reaches the weights.
    """
    chosen = (batch["mlm_labels"] != IGNORE_INDEX).any()
    mlm_loss = torch.where(chosen, output.mlm_loss, torch.zeros_like(output.mlm_loss))
    loss = mlm_loss if output.nsp_loss is None else mlm_loss + output.nsp_loss
    return dataclasses.replace(output, loss=loss, mlm_loss=mlm_loss)


class _MetricsWindow:
    """Sums of the training metrics since the last log line, kept on the device (no sync per step)."""

    NAMES = ("loss", "mlm_loss", "nsp_loss", "micro_batches", "mlm_micro_batches", "mlm_correct", "mlm_predicted",
             "nsp_correct", "nsp_examples", "tokens")

    def __init__(self, device: torch.device):
        self.sums = torch.zeros(len(self.NAMES), dtype=torch.float64, device=device)
        self.start = time.perf_counter()

    @torch.no_grad()
    def update(self, output, batch: dict[str, torch.Tensor]) -> None:
        predicted = batch["mlm_labels"] != IGNORE_INDEX  # (B, N)
        values = dict.fromkeys(self.NAMES, 0)
        values.update(loss=output.loss, mlm_loss=output.mlm_loss, micro_batches=1,
                      mlm_micro_batches=predicted.any(), mlm_predicted=predicted.sum(),
                      # mlm_logits (M, V): the model predicts the labelled positions only (_train)
                      mlm_correct=(output.mlm_logits.argmax(-1) == output.mlm_targets).sum(),
                      tokens=batch["attention_mask"].sum())
        if "nsp_labels" in batch:
            values.update(nsp_loss=output.nsp_loss, nsp_examples=len(batch["nsp_labels"]),
                          nsp_correct=(output.nsp_logits.argmax(-1) == batch["nsp_labels"]).sum())
        self.sums += torch.stack([torch.as_tensor(values[name], dtype=torch.float64, device=self.sums.device)
                                  for name in self.NAMES])

    def summary(self, process: _Process, nsp: bool) -> dict[str, float | None]:
        """Means over the window and over all processes, the throughput in tokens/s (non-padding) and
        the window's wall-clock seconds."""
        if process.world_size > 1:
            dist.all_reduce(self.sums)
        sums = dict(zip(self.NAMES, self.sums.tolist()))
        seconds = time.perf_counter() - self.start
        return {
            "loss": sums["loss"] / sums["micro_batches"],
            # over the micro-batches that predicted something; None when none did (see _without_empty_mlm_loss)
            "mlm_loss": sums["mlm_loss"] / sums["mlm_micro_batches"] if sums["mlm_micro_batches"] else None,
            "nsp_loss": sums["nsp_loss"] / sums["micro_batches"] if nsp else None,
            "mlm_accuracy": sums["mlm_correct"] / max(1.0, sums["mlm_predicted"]),
            "nsp_accuracy": sums["nsp_correct"] / sums["nsp_examples"] if nsp else None,
            "tokens_per_second": sums["tokens"] / seconds,
            "seconds": seconds,
        }


class _WithoutNextSentencePrediction(nn.Module):
    """A ``BertForPreTraining`` whose NSP logits are cut from the graph, for MLM-only training.

    The pooler and the NSP head then receive no gradient; DistributedDataParallel (with
    find_unused_parameters) sees that they cannot be reached from the outputs and does not wait
    for their gradients.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, **batch):
        output = self.model(**batch)
        return dataclasses.replace(output, nsp_logits=output.nsp_logits.detach())


def _rng_states(device: torch.device) -> dict:
    """This process's random states (dropout draws from torch's), in a form ``torch.load`` accepts safely."""
    numpy_state = np.random.get_state()
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
            "python": random.getstate(),
            "numpy": (numpy_state[0], numpy_state[1].tolist(), *numpy_state[2:])}


def _set_rng_states(states: dict, device: torch.device) -> None:
    torch.set_rng_state(states["torch"])
    if device.type == "cuda" and states["cuda"] is not None:
        torch.cuda.set_rng_state(states["cuda"], device)
    random.setstate(states["python"])
    name, keys, *rest = states["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), *rest))


def load_metrics(metrics_path: str | Path) -> list[dict]:
    """The records of a metrics log (JSON lines), in order."""
    metrics_path = Path(metrics_path)
    if not metrics_path.is_file():
        raise FileNotFoundError(f"metrics log {metrics_path} does not exist")
    with metrics_path.open() as file:
        return [json.loads(line) for line in file if line.strip()]


def _write_metrics(metrics_path: Path, records: list[dict]) -> None:
    with metrics_path.open("w") as file:
        file.writelines(json.dumps(record) + "\n" for record in records)


def plot_metrics(metrics_path: str | Path, out_png: str | Path) -> Path:
    """Plot the losses and accuracies of a metrics log against the optimizer step, into a PNG.

    Uses matplotlib's Agg canvas directly (no display, no change to pyplot's backend).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    records = load_metrics(metrics_path)
    if not records:
        raise ValueError(f"metrics log {metrics_path} is empty: nothing to plot")
    steps = [record["step"] for record in records]
    figure = Figure(figsize=(10, 4), layout="constrained")
    FigureCanvasAgg(figure)
    loss_axes, accuracy_axes = figure.subplots(1, 2)
    for axes, names, ylabel in [(loss_axes, ("loss", "mlm_loss", "nsp_loss"), "cross-entropy (nats)"),
                                (accuracy_axes, ("mlm_accuracy", "nsp_accuracy"), "accuracy")]:
        for name in names:
            values = [record.get(name) for record in records]
            if any(value is not None for value in values):
                axes.plot(steps, [math.nan if value is None else value for value in values], label=name)
        axes.set_xlabel("optimizer step")
        axes.set_ylabel(ylabel)
        axes.grid(alpha=0.3)
        axes.legend()
    figure.suptitle("BERT pretraining")
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out_png, dpi=100)
    return out_png


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def pretrain(
    model: nn.Module,
    tokenizer,
    documents: Sequence[Sequence[str]],
    *,
    output_dir: str | Path,
    max_steps: int,
    batch_size: int = 32,
    seq_len: int = 128,
    lr: float = 1e-3,
    weight_decay: float = 0.01,
    warmup_steps: int | None = None,
    grad_accum_steps: int = 1,
    max_grad_norm: float | None = 1.0,
    masking: str = "dynamic",
    nsp: bool = True,
    mlm_probability: float = 0.15,
    static_mask_copies: int = 1,
    device: str | torch.device | None = None,
    seed: int = 0,
    log_every: int = 10,
    checkpoint_every: int = 200,
    stop_at_step: int | None = None,
    resume: bool = True,
    progress: bool = True,
) -> list[dict]:
    """Pretrain a ``BertForPreTraining`` with MLM (and NSP), on one device or under ``torchrun``.

    Each optimizer step averages the losses L = L_MLM + L_NSP (L_MLM alone with ``nsp=False``) of
    grad_accum_steps micro-batches of batch_size examples per process (L_MLM = 0 for a micro-batch in
    which no token was chosen, where the mean would be 0/0), clips the gradient's global
    norm to max_grad_norm, and takes an AdamW step (Loshchilov and Hutter, 2019; betas (0.9, 0.999),
    eps 1e-6 as in BERT; no weight decay on biases and LayerNorm weights) with a learning rate that
    rises linearly over warmup_steps and falls linearly to 0 at max_steps. The forward pass runs in
    bf16 autocast on CUDA (fp16 with a gradient scaler on GPUs without native bf16), in float32 on
    the CPU. One step sees batch_size * grad_accum_steps * world_size examples.

    Multi-GPU: launched with ``torchrun --nproc_per_node P script.py``, each process trains a
    DistributedDataParallel replica on its own share of every epoch (``DistributedSampler``); NCCL on
    GPUs, gloo on CPUs. Only rank 0 writes files, logs and shows progress. The model's weights are
    those of rank 0 at the start (DDP broadcasts them).

    Outputs in output_dir: ``config.json`` and the weights (``model.save_pretrained``), ``vocab.txt``,
    ``pretraining_args.json``, ``metrics.jsonl`` (one JSON line every log_every steps: step, epoch,
    loss, mlm_loss, nsp_loss, mlm_accuracy, nsp_accuracy, lr, tokens_per_second, seconds; the metrics
    are means over the steps since the previous line, mlm_loss over the micro-batches that predicted a
    token, None if none did; seconds, the wall-clock time of those steps), ``loss_curve.png`` and
    ``checkpoint.pt`` (model, optimizer, scheduler, gradient scaler, step, random states of every
    process; the data order is a function of the step). With ``resume=True`` a call continues from
    the checkpoint in output_dir and ends exactly as one uninterrupted run would; ``resume=False``
    starts over.

    Args:
        model: a ``BertForPreTraining``; trained in place, left on ``device``.
        tokenizer: the ``BertTokenizer`` of the model's vocabulary.
        documents: the corpus, a list of documents, each a list of sentences.
        output_dir: folder for the outputs (created).
        max_steps: optimizer steps of the whole run (the schedule ends there).
        batch_size: examples per micro-batch and per process.
        seq_len: maximum tokens per example.
        lr: peak learning rate.
        weight_decay: AdamW's decoupled weight decay on the weight matrices.
        warmup_steps: steps of linear warm-up; None for 10% of max_steps.
        grad_accum_steps: micro-batches per optimizer step.
        max_grad_norm: clip the gradient norm to this value; None to not clip.
        masking: "dynamic" (new masks at every draw, RoBERTa) or "static" (fixed once, BERT).
        nsp: train next sentence prediction on sentence pairs (BERT), or MLM only on full-sentence
            segments (RoBERTa).
        mlm_probability: share of the tokens to predict.
        static_mask_copies: with static masking, the number of differently masked copies of the data.
        device: "cpu", "cuda", ...; None for CUDA when available.
        seed: seeds the data, the masks and dropout.
        log_every: steps between metrics lines.
        checkpoint_every: steps between checkpoints (one is also written when the call ends).
        stop_at_step: end this call after this step, without changing the schedule (a later call
            with resume=True goes on; stop at a multiple of log_every for the same log lines as
            an uninterrupted run); None to train to max_steps.
        resume: continue from output_dir's checkpoint when there is one.
        progress: show a tqdm progress bar.

    Returns:
        The metrics history, a list of the dicts written to ``metrics.jsonl`` (the same on every process).
    """
    _check_positive(max_steps=max_steps, batch_size=batch_size, seq_len=seq_len, grad_accum_steps=grad_accum_steps,
                    log_every=log_every, checkpoint_every=checkpoint_every)
    warmup_steps = max_steps // 10 if warmup_steps is None else warmup_steps
    end_step = max_steps if stop_at_step is None else stop_at_step
    if not 1 <= end_step <= max_steps:
        raise ValueError(f"stop_at_step must be between 1 and max_steps = {max_steps}, got {stop_at_step}")
    config = model.config
    if seq_len > config.max_position_embeddings:
        raise ValueError(f"seq_len {seq_len} exceeds the model's max_position_embeddings "
                         f"{config.max_position_embeddings}")
    if tokenizer.vocab_size > config.vocab_size:
        raise ValueError(f"the tokenizer has {tokenizer.vocab_size} tokens but the model's vocab_size is "
                         f"{config.vocab_size}: build the model with vocab_size >= {tokenizer.vocab_size}")

    settings = dict(max_steps=max_steps, batch_size=batch_size, seq_len=seq_len, lr=lr, weight_decay=weight_decay,
                    warmup_steps=warmup_steps, grad_accum_steps=grad_accum_steps, max_grad_norm=max_grad_norm,
                    masking=masking, nsp=nsp, mlm_probability=mlm_probability,
                    static_mask_copies=static_mask_copies, seed=seed)
    process = _setup_process(device)
    try:
        return _train(model, tokenizer, documents, Path(output_dir), settings, process, end_step=end_step,
                      log_every=log_every, checkpoint_every=checkpoint_every, resume=resume, progress=progress)
    finally:
        if process.started_group:
            dist.destroy_process_group()


def _save_checkpoint(path: Path, step: int, model: nn.Module, optimizer, scheduler, scaler, settings: dict,
                     process: _Process) -> None:
    """Write the training state atomically (rank 0); every process contributes its random states."""
    rng_states = [None] * process.world_size
    if process.world_size > 1:
        dist.all_gather_object(rng_states, _rng_states(process.device))
    else:
        rng_states[0] = _rng_states(process.device)
    if process.is_main:
        state = {"step": step, "settings": settings, "model": model.state_dict(),
                 "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                 "scaler": scaler.state_dict(), "rng_states": rng_states,
                 "micro_batches_seen": step * settings["grad_accum_steps"]}
        temporary = path.with_suffix(".tmp")
        torch.save(state, temporary)
        os.replace(temporary, path)  # a crash while writing never leaves a broken checkpoint


def _load_checkpoint(path: Path, model: nn.Module, optimizer, scheduler, scaler, settings: dict,
                     process: _Process) -> int:
    """Restore the training state of ``path``; return its step. The run's settings must be the same.

    The file is read onto the CPU: ``load_state_dict`` then copies the weights to the model's device
    and the optimizer state next to its parameters (AdamW's step counts stay on the CPU, as in a
    fresh run), and the random states must be CPU byte tensors for ``torch.set_rng_state`` and
    ``torch.cuda.set_rng_state``.
    """
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # a truncated or foreign file: pickle, zip and torch raise many kinds
        raise ValueError(f"cannot resume from {path}: it is not a readable checkpoint ({error}); delete it, "
                         f"or pass resume=False (--no-resume) to start over") from None
    different = {name: (state["settings"].get(name), value) for name, value in settings.items()
                 if state["settings"].get(name) != value}
    if different:
        changes = ", ".join(f"{name} {old!r} -> {new!r}" for name, (old, new) in different.items())
        raise ValueError(f"cannot resume from {path}: it was written with other settings ({changes}); "
                         f"pass the same arguments, or resume=False (or another output_dir) to start over")
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as error:
        raise ValueError(f"the checkpoint {path} does not fit this model (another config?): {error}") from None
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    if state.get("scaler"):  # empty when the run that wrote it did not scale its losses
        scaler.load_state_dict(state["scaler"])
    _set_rng_states(state["rng_states"][process.rank], process.device)
    return state["step"]


def _train(model, tokenizer, documents, output_dir: Path, settings: dict, process: _Process, *, end_step: int,
           log_every: int, checkpoint_every: int, resume: bool, progress: bool) -> list[dict]:
    settings = {**settings, "world_size": process.world_size}
    seed, batch_size, accumulation = settings["seed"], settings["batch_size"], settings["grad_accum_steps"]
    seed_everything(seed + process.rank)  # dropout differs between processes
    dataset = PretrainingDataset(tokenizer, documents, seq_len=settings["seq_len"], nsp=settings["nsp"],
                                 masking=settings["masking"], static_mask_copies=settings["static_mask_copies"],
                                 mlm_probability=settings["mlm_probability"], seed=seed)
    sampler = DistributedSampler(dataset, num_replicas=process.world_size, rank=process.rank, shuffle=True, seed=seed)
    batches_per_epoch = len(sampler) // batch_size
    if batches_per_epoch == 0:
        raise ValueError(f"the corpus gives {len(dataset)} examples, fewer than one batch of {batch_size} per "
                         f"process ({process.world_size} processes): use a smaller batch_size or more text")

    model.to(process.device)
    optimizer = torch.optim.AdamW(weight_decay_groups(model, settings["weight_decay"]), lr=settings["lr"],
                                  betas=(0.9, 0.999), eps=1e-6)
    scheduler = get_linear_schedule(optimizer, settings["warmup_steps"], settings["max_steps"])
    scaler = grad_scaler(process.device)  # enabled for float16 autocast only

    output_dir.mkdir(parents=True, exist_ok=True)
    checkpoint_path, metrics_path = output_dir / CHECKPOINT_FILE, output_dir / METRICS_FILE
    step, history = 0, []
    if resume and checkpoint_path.is_file():
        step = _load_checkpoint(checkpoint_path, model, optimizer, scheduler, scaler, settings, process)
        if metrics_path.is_file():  # drop the lines logged after the checkpoint by an interrupted run
            history = [record for record in load_metrics(metrics_path) if record["step"] <= step]
    if process.world_size > 1:
        dist.barrier()  # every process has read the files before rank 0 rewrites them
    if process.is_main:
        if not resume:
            checkpoint_path.unlink(missing_ok=True)  # a later resume must not go back to an older run
        (output_dir / SETTINGS_FILE).write_text(json.dumps(settings, indent=2) + "\n")
        _write_metrics(metrics_path, history)

    network = model if settings["nsp"] else _WithoutNextSentencePrediction(model)
    if process.world_size > 1:
        network = DistributedDataParallel(network, device_ids=[process.device.index] if process.device.type == "cuda"
                                          else None, find_unused_parameters=not settings["nsp"])
    network.train()
    batches = _micro_batches(dataset, sampler, batch_size, start=step * accumulation, seed=seed, rank=process.rank)
    window = _MetricsWindow(process.device)
    bar = tqdm(total=end_step, initial=step, desc="pretraining", unit="step",
               disable=not progress or not process.is_main)
    while step < end_step:
        for micro_step in range(accumulation):
            batch = {name: tensor.to(process.device, non_blocking=True) for name, tensor in next(batches).items()}
            synchronize = micro_step == accumulation - 1 or process.world_size == 1
            with contextlib.nullcontext() if synchronize else network.no_sync():
                with autocast(process.device):
                    output = _without_empty_mlm_loss(network(**batch, predict_labelled_only=True), batch)
                scaler.scale(output.loss / accumulation).backward()
            window.update(output, batch)
        if settings["max_grad_norm"] is not None:
            scaler.unscale_(optimizer)  # clip the true gradients
            nn.utils.clip_grad_norm_(model.parameters(), settings["max_grad_norm"])
        lr = scheduler.get_last_lr()[0]
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        bar.update()

        if step % log_every == 0 or step == end_step:
            record = {"step": step, "epoch": step * accumulation / batches_per_epoch,
                      **window.summary(process, settings["nsp"]), "lr": lr}
            history.append(record)
            if process.is_main:
                with metrics_path.open("a") as file:
                    file.write(json.dumps(record) + "\n")
            bar.set_postfix(loss=f"{record['loss']:.3f}", mlm_acc=f"{record['mlm_accuracy']:.3f}")
            window = _MetricsWindow(process.device)
        if step % checkpoint_every == 0 or step == end_step:
            _save_checkpoint(checkpoint_path, step, model, optimizer, scheduler, scaler, settings, process)
    bar.close()

    if process.is_main:
        model.save_pretrained(output_dir)
        tokenizer.save_vocabulary(output_dir)
        if history:
            plot_metrics(metrics_path, output_dir / PLOT_FILE)
    if process.world_size > 1:
        dist.barrier()  # the outputs are complete when pretrain returns, on every process
    return history


# --------------------------------------------------------------------------------------------------
# Evaluation on held-out text
# --------------------------------------------------------------------------------------------------


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
    for document in _check_documents(documents):
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


# --------------------------------------------------------------------------------------------------
# The course's BERT, shipped with the package
# --------------------------------------------------------------------------------------------------

COURSE_BERT_FOLDER = Path(__file__).resolve().parent / "course_bert"
TOKEN_COUNTS_FILE = "token_counts.txt"


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


def course_bert_token_counts() -> torch.Tensor:
    """How often each token of the course BERT's vocabulary occurs in its training text: a (V,)
    float64 tensor of counts (``token_frequencies``, stored with the model as ``token_counts.txt``),
    for the unigram baseline ``unigram_masked_lm`` without reading the 20M tokens again."""
    path = course_bert_folder() / TOKEN_COUNTS_FILE
    return torch.tensor([float(line) for line in path.read_text().split()], dtype=torch.float64)


def course_bert_sha256() -> str:
    """The SHA-256 (hex) of the course BERT's weights file: which release of the model a run used."""
    return hashlib.sha256((course_bert_folder() / "model.safetensors").read_bytes()).hexdigest()


def read_course_bert_results(name: str, required: Mapping[str, Sequence[str]], start: str | Path | None = None) -> dict:
    """``bertlab.utils.read_recorded_results`` for a recorded run of the course's BERT, which must have
    used the weights installed here: the run's ``course_bert_sha256`` is compared with
    :func:`course_bert_sha256`, and :class:`~bertlab.utils.RecordedResultsUnavailable` says so when
    they differ, so that a chapter never shows another release's numbers as this model's."""
    recorded = read_recorded_results(name, {**required, "course_bert_sha256": []}, start)
    if recorded["course_bert_sha256"] != course_bert_sha256():
        raise RecordedResultsUnavailable(
            f"benchmarks/results/{name} was recorded with other weights of the course's BERT than the ones "
            f"installed here: run benchmarks/bert_results.py again")
    return recorded


def course_bert(device: str | torch.device | None = None) -> tuple[BertForPreTraining, BertTokenizer]:
    """The course's BERT (``course_bert_folder``) in eval mode on ``device`` (None: CUDA when
    available), in float32, and its tokenizer."""
    folder = course_bert_folder()
    model = BertForPreTraining.from_pretrained(folder).to(resolve_device(device)).eval()
    return model, BertTokenizer(folder / "vocab.txt")
