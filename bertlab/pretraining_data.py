"""The data of BERT's pretraining: masked tokens, sentence pairs and full-sentence segments (chapter 07).

- Masked language modelling (MLM): ``mask_tokens`` chooses 15% of the tokens and hides them with
  BERT's recipe (80% [MASK], 10% a random token, 10% unchanged); the model predicts them back.
- Next sentence prediction (NSP): ``make_nsp_examples`` pairs each sentence with the next one
  (IsNext, label 0) or with a sentence of another document (NotNext, label 1).
- RoBERTa's inputs without NSP: ``pack_full_sentences`` packs contiguous sentences into segments.
- ``PackedSegments`` holds such segments as one array with their vocabulary, written once (tokenizing
  a large corpus takes minutes) and read by a run on another machine, a GPU's say.
- ``PretrainingDataset`` encodes either kind of example, and masks it once ("static", BERT) or anew
  at every batch ("dynamic", RoBERTa); its ``collate`` makes the batches of ``BertForPreTraining``.
- ``CausalLMDataset`` gives the same full-sentence segments unmasked, the batches of causal language
  modelling (``bertlab.gpt.GPTLMHeadModel``), so that a GPT learns from the text a BERT learns from.
"""

import dataclasses
import os
import random
import zipfile
from collections.abc import Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from bertlab.bert import IGNORE_INDEX  # label of the positions that are not predicted
from bertlab.tokenization import BertTokenizer

IS_NEXT, NOT_NEXT = 0, 1  # NSP labels, as in BERT and Hugging Face's BertForPreTraining
MASKING_KINDS = ("dynamic", "static")


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


def check_documents(documents) -> list[list[str]]:
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
    documents = check_documents(documents)
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
    for document in check_documents(documents):
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


@dataclasses.dataclass(frozen=True)
class PackedSegments:
    """Full-sentence segments (``pack_full_sentences``) stored flat, with the vocabulary that wrote them.

    Segment i is ``ids[offsets[i]:offsets[i + 1]]``, token ids without [CLS] and [SEP], at most
    seq_len - 2 of them. ``save`` writes one compressed ``.npz`` file (no pickle), ``load`` reads it
    back; ``tokenizer()`` rebuilds the ``BertTokenizer`` of the ids, so that the file is all a run needs.

    Attributes:
        ids: (T,) the token ids of all segments, one after the other.
        offsets: (S + 1,) where each segment starts, and T at the end.
        seq_len: the example length the segments were packed for, [CLS] and [SEP] included.
        vocab: the tokens of the vocabulary, in id order.
        do_lower_case: whether the tokenizer lower-cased the text.
    """

    ids: np.ndarray
    offsets: np.ndarray
    seq_len: int
    vocab: tuple[str, ...]
    do_lower_case: bool

    @classmethod
    def pack(cls, tokenizer, documents: Sequence[Sequence[str]], seq_len: int) -> "PackedSegments":
        """Pack ``documents`` with ``pack_full_sentences`` and keep the result as arrays."""
        segments = pack_full_sentences(tokenizer, documents, seq_len)
        lengths = np.array([len(segment) for segment in segments], dtype=np.int64)
        dtype = np.uint16 if tokenizer.vocab_size <= 2 ** 16 else np.int32
        ids = np.fromiter((token for segment in segments for token in segment), dtype=dtype, count=lengths.sum())
        return cls(ids, np.concatenate([[0], np.cumsum(lengths)]), seq_len,
                   tuple(tokenizer.ids_to_tokens), tokenizer.do_lower_case)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def segments(self) -> list[list[int]]:
        return [self.ids[start:end].tolist() for start, end in zip(self.offsets[:-1], self.offsets[1:])]

    def tokenizer(self):
        """The ``BertTokenizer`` of the vocabulary the segments were encoded with."""
        return BertTokenizer(list(self.vocab), do_lower_case=self.do_lower_case)

    def save(self, path: str | os.PathLike) -> None:
        """Write the segments and their vocabulary to ``path``, a compressed ``.npz`` file."""
        with open(path, "wb") as file:  # a file object, so numpy does not append ".npz" to the name
            np.savez_compressed(file, ids=self.ids, offsets=self.offsets, seq_len=self.seq_len,
                                vocab=np.array(self.vocab), do_lower_case=self.do_lower_case)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "PackedSegments":
        """Read a file written by ``save``; a clear error for a missing or foreign file."""
        try:
            with np.load(path, allow_pickle=False) as stored:
                packed = cls(stored["ids"], stored["offsets"], int(stored["seq_len"]),
                             tuple(stored["vocab"].tolist()), bool(stored["do_lower_case"]))
        except FileNotFoundError:
            raise FileNotFoundError(f"packed segments file {path} does not exist") from None
        except (KeyError, ValueError, OSError, zipfile.BadZipFile) as error:
            raise ValueError(f"{path} is not a file of packed segments written by PackedSegments.save "
                             f"({type(error).__name__}: {error})") from None
        if packed.offsets[0] != 0 or packed.offsets[-1] != len(packed.ids) or (np.diff(packed.offsets) < 0).any():
            raise ValueError(f"{path} is damaged: its offsets do not cut its {len(packed.ids)} ids into segments")
        if len(packed.ids) and packed.ids.max() >= len(packed.vocab):
            raise ValueError(f"{path} is damaged: it holds the id {packed.ids.max()}, outside its vocabulary of "
                             f"{len(packed.vocab)} tokens")
        return packed


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
        documents: a list of documents, each a list of sentences; or, with ``nsp=False``, segments
            already packed (``PackedSegments``) with this tokenizer's vocabulary for this seq_len.
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
        if nsp and isinstance(documents, PackedSegments):
            raise ValueError("packed segments have no sentence pairs for next sentence prediction: use nsp=False")
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
        if isinstance(documents, PackedSegments):
            if documents.seq_len != self.seq_len:
                raise ValueError(f"the segments were packed for seq_len {documents.seq_len}, not {self.seq_len}: "
                                 f"pack them again, or pretrain with seq_len={documents.seq_len}")
            if list(documents.vocab) != self.tokenizer.ids_to_tokens:
                raise ValueError("the segments were packed with another vocabulary than the tokenizer's: use "
                                 "their own, PackedSegments.tokenizer()")
            segments = documents.segments()
        else:
            segments = pack_full_sentences(self.tokenizer, documents, self.seq_len)
        examples = []
        for segment in segments:
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
        input_ids = _pad(items, "input_ids", self.tokenizer.pad_token_id)
        batch = {"token_type_ids": _pad(items, "token_type_ids", 0),
                 "attention_mask": input_ids != self.tokenizer.pad_token_id}
        if self.static_masks is not None:
            batch["input_ids"] = _pad(items, "masked_input_ids", self.tokenizer.pad_token_id)
            batch["mlm_labels"] = _pad(items, "mlm_labels", IGNORE_INDEX)
        else:
            batch["input_ids"], batch["mlm_labels"] = self.mask(input_ids, generator)
        if self.nsp:
            batch["nsp_labels"] = torch.stack([item["nsp_labels"] for item in items])
        return batch


class CausalLMDataset(PretrainingDataset):
    """The full-sentence segments of ``PretrainingDataset(nsp=False)``, [CLS] segment [SEP], unmasked:
    the examples of causal language modelling, where each token is predicted from the ones before it.

    [CLS] starts every example and [SEP] ends it (the model's ``bos_token_id`` and ``eos_token_id``), so a
    model trained on them learns where a text starts and when it ends. ``documents`` and ``seq_len`` are as
    for :class:`PretrainingDataset`; ``collate`` makes the batches of ``GPTLMHeadModel.forward``.
    """

    def __init__(self, tokenizer, documents, *, seq_len: int = 128):
        super().__init__(tokenizer, documents, seq_len=seq_len, nsp=False)

    def collate(self, items: list[dict], generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        """Pad items to the longest one (``generator`` is not used: nothing is drawn).

        Returns:
            input_ids (B, N), padded with [PAD], and labels (B, N): the same ids, -100 at the padding. The
            model shifts them: the logits at position i are scored against labels[:, i + 1].
        """
        return {"input_ids": _pad(items, "input_ids", self.tokenizer.pad_token_id),
                "labels": _pad(items, "input_ids", IGNORE_INDEX)}


def _pad(items: list[dict], key: str, value: int) -> torch.Tensor:
    """The 1-D tensors ``item[key]`` of the items in one (B, N) batch, N the longest, padded on the right
    with ``value``."""
    length = max(len(item[key]) for item in items)
    batch = torch.full((len(items), length), value, dtype=torch.long)
    for row, item in enumerate(items):
        batch[row, : len(item[key])] = item[key]
    return batch
