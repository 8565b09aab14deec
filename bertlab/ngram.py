"""Count-based language models over token ids: the baselines of a GPT's perplexity (chapter 11).

A language model gives each next token a probability p(x_i | x_<i). Before neural networks, the
context was cut to the last n - 1 tokens and the probabilities read off counts of a training text
(Chen and Goodman, 1999):

- ``AddKUnigram``: no context, p(w) = (c(w) + k) / (N + k V);
- ``AddKBigram``: the previous token, p(w | v) = (c(v w) + k) / (c(v .) + k V);
- ``KneserNeyBigram``: interpolated Kneser-Ney (Kneser and Ney, 1995; Chen and Goodman, 1999), which
  subtracts a discount D from every seen bigram and gives the mass to a *continuation* unigram: how
  many different tokens a token follows, rather than how often it occurs.

``NGramCounts.fit`` counts a training stream of segments (``PackedSegments``, or a list of id
sequences) once, vectorised: the V^2 bigrams (67M for the course's 8,192 tokens, 268 MB as a dense
float32 table) are kept sparse, as the sorted keys v V + w of those seen and their counts, and looked
up with ``torch.searchsorted``. A bigram never crosses the start of a segment.

Every model implements :meth:`CountLanguageModel.log_prob`; what they share is written once in the
base class: the next-token negative log-likelihood with the contract of
:func:`bertlab.gpt.next_token_nll`, so that :func:`bertlab.gpt.perplexity` scores a count-based model
and a GPT alike, the distribution after a context, and its most probable token.

``distinct_n`` measures the diversity of generated text (Li et al., 2016).

Shapes: V vocabulary size, K the number of distinct bigrams seen, B batch, N positions.
"""

import abc
import dataclasses
import functools
from collections.abc import Sequence

import numpy as np
import torch

from bertlab.bert import IGNORE_INDEX
from bertlab.pretraining_data import PackedSegments

_ROWS_PER_CHUNK = 256  # contexts whose (rows, V) distributions are computed at once by most_probable_next


# --------------------------------------------------------------------------------------------------
# The counts
# --------------------------------------------------------------------------------------------------


def _check_vocab_id(name: str, value, vocab_size: int) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < vocab_size):
        raise ValueError(f"{name} must be None or a token id in [0, vocab_size={vocab_size}), got {value!r}")


def _as_id_tensor(sequence, index: int) -> torch.Tensor:
    """One segment as a 1-D int64 tensor; a clear error for anything else."""
    if isinstance(sequence, (str, bytes)):
        raise TypeError(f"segments[{index}] must be a sequence of token ids, got a {type(sequence).__name__}")
    try:
        ids = torch.as_tensor(sequence if isinstance(sequence, torch.Tensor) else np.asarray(sequence))
    except (TypeError, ValueError, RuntimeError) as error:
        raise TypeError(f"segments[{index}] must be a sequence of integer token ids ({error})") from None
    if ids.numel() == 0:
        return torch.zeros(0, dtype=torch.long)
    if ids.dim() != 1 or ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise TypeError(f"segments[{index}] must be a 1-D sequence of integer token ids, got shape "
                        f"{tuple(ids.shape)} of {ids.dtype}")
    return ids.long().cpu()


def _flatten(segments) -> tuple[torch.Tensor, torch.Tensor]:
    """The segments' ids one after the other, (T,) int64, and the length of each, (S,) int64."""
    if isinstance(segments, PackedSegments):
        return torch.from_numpy(segments.ids.astype(np.int64)), torch.from_numpy(np.diff(segments.offsets))
    if isinstance(segments, (str, bytes, torch.Tensor)) or not isinstance(segments, Sequence):
        raise TypeError(f"segments must be PackedSegments or a list of id sequences, got {type(segments).__name__}")
    pieces = [_as_id_tensor(sequence, index) for index, sequence in enumerate(segments)]
    if not pieces:
        return torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)
    return torch.cat(pieces), torch.tensor([len(piece) for piece in pieces], dtype=torch.long)


@dataclasses.dataclass(frozen=True, eq=False)
class NGramCounts:
    """The unigram and bigram counts of a training stream of token ids.

    Attributes:
        vocab_size: V.
        unigram: (V,) float64, c(w): how often w is predicted in the stream, i.e. every token but a
            segment's ``bos_token_id`` (N = sum_w c(w) tokens).
        keys: (K,) int64, increasing: v V + w for each bigram (v, w) seen, v the context, w the next token.
        counts: (K,) float64, c(v w) > 0 for each key.
        context_totals: (V,) float64, c(v .) = sum_w c(v w), how often v is followed by a token.
        context_types: (V,) float64, N1+(v .) = |{w : c(v w) > 0}|, how many different tokens follow v.
        continuation: (V,) float64, N1+(. w) = |{v : c(v w) > 0}|, how many different tokens w follows.
    """

    vocab_size: int
    unigram: torch.Tensor
    keys: torch.Tensor
    counts: torch.Tensor
    context_totals: torch.Tensor
    context_types: torch.Tensor
    continuation: torch.Tensor

    @classmethod
    def fit(cls, segments, vocab_size: int, *, bos_token_id: int | None = None,
            eos_token_id: int | None = None) -> "NGramCounts":
        """Count the unigrams and bigrams of ``segments``.

        Each segment is framed as ``bos`` x_1 ... x_L ``eos`` when those ids are given (the course
        GPT's examples are [CLS] segment [SEP]: pass the tokenizer's ``cls_token_id`` and
        ``sep_token_id`` so that the counts know how a text starts and ends); empty segments are
        skipped. The bigrams are the pairs of neighbours inside a framed segment, never across two;
        the unigrams are its tokens but ``bos``, which is never predicted.

        Args:
            segments: ``PackedSegments``, or a list of 1-D sequences of token ids (lists, arrays, tensors).
            vocab_size: V; every id must be in [0, V).
            bos_token_id, eos_token_id: ids put before and after each segment, or None.

        Raises:
            TypeError: for segments that are not sequences of integer ids.
            ValueError: for an id outside [0, V), or a stream with no bigram.
        """
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
            raise ValueError(f"vocab_size must be a positive integer, got {vocab_size!r}")
        if vocab_size > 2 ** 31:
            raise ValueError(f"vocab_size {vocab_size} is too large for keys v V + w in int64")
        _check_vocab_id("bos_token_id", bos_token_id, vocab_size)
        _check_vocab_id("eos_token_id", eos_token_id, vocab_size)
        if isinstance(segments, PackedSegments) and len(segments.vocab) != vocab_size:
            raise ValueError(f"the segments were packed with a vocabulary of {len(segments.vocab)} tokens, "
                             f"not vocab_size={vocab_size}")
        ids, lengths = _flatten(segments)  # (T,), (S,)
        outside = (ids < 0) | (ids >= vocab_size)  # (T,)
        if outside.any():
            raise ValueError(f"the segments hold the id {int(ids[outside][0])}, "
                             f"outside the vocabulary [0, {vocab_size})")
        lengths = lengths[lengths > 0]
        bos, eos = int(bos_token_id is not None), int(eos_token_id is not None)
        framed_lengths = lengths + bos + eos  # (S,)
        starts = torch.cumsum(framed_lengths, 0) - framed_lengths  # (S,) where each framed segment starts
        stream = torch.empty(int(framed_lengths.sum()), dtype=torch.long)  # (T + S (bos + eos),)
        segment_of_token = torch.repeat_interleave(torch.arange(len(lengths)), lengths)  # (T,)
        stream[torch.arange(len(ids)) + segment_of_token * (bos + eos) + bos] = ids
        if bos:
            stream[starts] = bos_token_id
        if eos:
            stream[starts + framed_lengths - 1] = eos_token_id
        first = torch.zeros(len(stream), dtype=torch.bool)
        first[starts] = True  # (T',): True at the first token of each framed segment
        pairs = ~first[1:]  # (T' - 1,): neighbours inside one segment
        keys, counts = torch.unique(stream[:-1][pairs] * vocab_size + stream[1:][pairs], sorted=True,
                                    return_counts=True)  # (K,) each
        if len(keys) == 0:
            raise ValueError("the segments hold no bigram: every segment is shorter than two tokens")
        predicted = stream[~first] if bos else stream  # (N,): bos is a context only
        counts, ones = counts.double(), torch.ones(len(keys), dtype=torch.float64)  # (K,) each
        contexts, tokens = keys // vocab_size, keys % vocab_size  # (K,) each

        def total(index: torch.Tensor, values: torch.Tensor) -> torch.Tensor:  # (V,): values summed by index
            return torch.zeros(vocab_size, dtype=torch.float64).index_add_(0, index, values)

        return cls(vocab_size, torch.bincount(predicted, minlength=vocab_size).double(), keys, counts,
                   context_totals=total(contexts, counts), context_types=total(contexts, ones),
                   continuation=total(tokens, ones))

    def bigram(self, context: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
        """c(v w) for integer tensors ``context`` v and ``token`` w of broadcastable shapes -> float64,
        0 for a bigram never seen."""
        key = context.long() * self.vocab_size + token.long()  # (...)
        index = torch.searchsorted(self.keys, key).clamp(max=len(self.keys) - 1)  # (...)
        return torch.where(self.keys[index] == key, self.counts[index], 0.0)

    def to(self, device: torch.device | str) -> "NGramCounts":
        """The same counts on ``device``."""
        return dataclasses.replace(self, **{field.name: getattr(self, field.name).to(device)
                                            for field in dataclasses.fields(self) if field.name != "vocab_size"})

    @property
    def device(self) -> torch.device:
        return self.unigram.device


def absolute_discount(counts: torch.Tensor) -> float:
    """Ney, Essen and Kneser's (1994) estimate of the absolute discount from counts of counts,

        D = n1 / (n1 + 2 n2),   n_r = |{ngrams seen exactly r times}|

    (as used by Chen and Goodman, 1999), the D used by :class:`KneserNeyBigram` by default.

    Raises:
        ValueError: when D would be 0 (no n-gram seen once: nothing left for unseen ones) or undefined.
    """
    n1, n2 = int((counts == 1).sum()), int((counts == 2).sum())
    if n1 == 0:
        raise ValueError(f"no n-gram is seen exactly once (n1 = 0, n2 = {n2}): D = n1 / (n1 + 2 n2) = 0 would "
                         f"give unseen tokens no probability; pass a discount in (0, 1]")
    return n1 / (n1 + 2 * n2)


# --------------------------------------------------------------------------------------------------
# The models
# --------------------------------------------------------------------------------------------------


class CountLanguageModel(abc.ABC):
    """What every count-based model of this module offers, from its :meth:`log_prob` alone.

    A model is a frozen dataclass of tensors; ``vocab_size`` and ``device`` say which tokens it scores
    and where its tensors live, and :meth:`to` moves them.
    """

    @property
    @abc.abstractmethod
    def vocab_size(self) -> int:
        """V, the number of tokens each distribution is over."""

    @abc.abstractmethod
    def log_prob(self, context: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
        """log p(token | context) in nats, float64, for token ids of broadcastable shapes (the previous
        token as the context; a unigram model ignores it)."""

    @property
    @abc.abstractmethod
    def device(self) -> torch.device:
        """The device of the model's tensors, where its inputs must be."""

    def to(self, device: torch.device | str) -> "CountLanguageModel":
        """The same model on ``device``."""
        moved = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, (torch.Tensor, NGramCounts)):
                moved[field.name] = value.to(device)
        return dataclasses.replace(self, **moved)

    def next_token_nll(self, input_ids: torch.Tensor,
                       labels: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The negative log-likelihood of each next token, and which ones are predicted, with the
        contract of :func:`bertlab.gpt.next_token_nll`:

            nll_{b,i} = -log p(y_{b,i+1} | x_{b,i}),   counted_{b,i} = (y_{b,i+1} != -100)

        input_ids (B, N) the tokens read, labels (B, N) the tokens predicted (the same ids, -100 where
        nothing is predicted; default: ``input_ids``, which may then hold -100 itself) -> nll (B, N - 1)
        in nats, float32, 0 where not counted, and counted (B, N - 1), boolean. So
        ``bertlab.gpt.perplexity(nll, counted)`` scores a count-based model as it scores a GPT.

        Raises:
            ValueError: for inputs that are not (B, N) integer tensors of one shape, a counted label or
                its context outside [0, V).
        """
        labels = input_ids if labels is None else labels
        for name, ids in (("input_ids", input_ids), ("labels", labels)):
            if (not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.is_floating_point()
                    or ids.dtype == torch.bool):
                raise ValueError(f"{name} must be a (B, N) integer tensor, got "
                                 f"{tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__}"
                                 f"{' of ' + str(ids.dtype) if isinstance(ids, torch.Tensor) else ''}")
        if labels.shape != input_ids.shape:
            raise ValueError(f"labels must have the shape of input_ids, {tuple(input_ids.shape)}, "
                             f"got {tuple(labels.shape)}")
        context, target = input_ids[:, :-1], labels[:, 1:]  # (B, N - 1) each
        counted = target != IGNORE_INDEX  # (B, N - 1)
        for name, ids in (("label", target), ("context", context)):
            outside = counted & ((ids < 0) | (ids >= self.vocab_size))
            if outside.any():
                raise ValueError(f"a counted {name} is {int(ids[outside][0])}, outside the vocabulary "
                                 f"[0, {self.vocab_size}) (-100 marks a token that is not predicted)")
        log_p = self.log_prob(context.clamp(0, self.vocab_size - 1), target.clamp(0, self.vocab_size - 1))
        return (-log_p).float().masked_fill(~counted, 0.0), counted

    def next_token_log_probs(self, context: torch.Tensor) -> torch.Tensor:
        """log p(w | context) for every token w: context (...) -> (..., V), float64."""
        return self.log_prob(context[..., None], torch.arange(self.vocab_size, device=context.device))

    def most_probable_next(self, context: torch.Tensor) -> torch.Tensor:
        """argmax_w p(w | context) (the lowest id among ties): context (...) -> (...), int64.

        The most probable token after a context is computed once, when a context is first asked for (V
        probabilities each: all V = 8,192 contexts take seconds), and kept.
        """
        if ((context < 0) | (context >= self.vocab_size)).any():
            raise ValueError(f"a context is {int(context[(context < 0) | (context >= self.vocab_size)][0])}, outside "
                             f"the vocabulary [0, {self.vocab_size})")
        context = context.long()
        table = self._most_probable_table
        missing = context[table[context] < 0].unique()  # (U,): contexts not computed yet
        for chunk in missing.split(_ROWS_PER_CHUNK):
            table[chunk] = self.next_token_log_probs(chunk).argmax(-1)
        return table[context]

    @functools.cached_property
    def _most_probable_table(self) -> torch.Tensor:
        """(V,): the most probable next token after each context computed so far, -1 elsewhere."""
        return torch.full((self.vocab_size,), -1, dtype=torch.long, device=self.device)


def _check_k(k: float) -> None:
    if isinstance(k, bool) or not isinstance(k, (int, float)) or not k > 0 or k == float("inf"):
        raise ValueError(f"k must be a finite number > 0 (add-k smoothing gives every token k pseudo-counts), "
                         f"got {k!r}")


@dataclasses.dataclass(frozen=True, eq=False)
class AddKUnigram(CountLanguageModel):
    """The unigram model with add-k smoothing (add-one, Laplace's, for k = 1), which ignores the context:

        p(w) = (c(w) + k) / (N + k V),   N = sum_u c(u)

    ``counts`` (V,) are the unigram counts c (``NGramCounts.unigram``, or
    ``bertlab.pretraining_evaluation.token_frequencies``).
    """

    counts: torch.Tensor
    k: float = 1.0

    def __post_init__(self):
        if not isinstance(self.counts, torch.Tensor) or self.counts.dim() != 1 or (self.counts < 0).any():
            shape = tuple(self.counts.shape) if isinstance(self.counts, torch.Tensor) else type(self.counts).__name__
            raise ValueError(f"counts must be a (V,) tensor of unigram counts >= 0 (NGramCounts.unigram), got {shape}")
        _check_k(self.k)

    @property
    def vocab_size(self) -> int:
        return len(self.counts)

    @property
    def device(self) -> torch.device:
        return self.counts.device

    def log_prob(self, context: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
        counts = self.counts.double()
        probability = (counts[token.long()] + self.k) / (counts.sum() + self.k * self.vocab_size)  # (...)
        return probability.log().expand(torch.broadcast_shapes(context.shape, token.shape))


@dataclasses.dataclass(frozen=True, eq=False)
class _BigramModel(CountLanguageModel):
    """A model read off :class:`NGramCounts`."""

    counts: NGramCounts

    @property
    def vocab_size(self) -> int:
        return self.counts.vocab_size

    @property
    def device(self) -> torch.device:
        return self.counts.device


@dataclasses.dataclass(frozen=True, eq=False)
class AddKBigram(_BigramModel):
    """The bigram model with add-k smoothing:

        p(w | v) = (c(v w) + k) / (c(v .) + k V),   c(v .) = sum_u c(v u)

    A context never followed by a token in training (c(v .) = 0) gives the uniform 1 / V.
    """

    k: float = 1.0

    def __post_init__(self):
        _check_k(self.k)

    def log_prob(self, context: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
        numerator = self.counts.bigram(context, token) + self.k  # (...)
        return (numerator / (self.counts.context_totals[context.long()] + self.k * self.vocab_size)).log()


@dataclasses.dataclass(frozen=True, eq=False)
class KneserNeyBigram(_BigramModel):
    """Interpolated Kneser-Ney smoothing of bigrams (Kneser and Ney, 1995), in the interpolated form of
    Chen and Goodman (1999), the recursion ended with the uniform distribution 1 / V:

        p(w | v) = max(c(v w) - D, 0) / c(v .) + D N1+(v .) / c(v .) p_cont(w)      if c(v .) > 0
        p(w | v) = p_cont(w)                                                         if c(v .) = 0
        p_cont(w) = max(N1+(. w) - D, 0) / N1+(. .) + D N1+(. .>0) / N1+(. .) 1 / V

    with c(v .) = sum_u c(v u), N1+(v .) the number of different tokens seen after v, N1+(. w) the
    number of different tokens seen before w, N1+(. .) = sum_w N1+(. w) the number of distinct
    bigrams, and N1+(. .>0) the number of tokens w with N1+(. w) > 0.

    The discount D is subtracted from every seen bigram and its mass D N1+(v .) given to p_cont, the
    *continuation* distribution: a token that follows many different tokens ("movie") is a likelier
    continuation of an unfamiliar context than one that is frequent after one context only
    ("Francisco", after "San"). p_cont is itself discounted by D towards 1 / V, so every token has a
    probability > 0 after every context. A context never followed by a token in training (c(v .) = 0),
    such as a token never seen, backs off to p_cont entirely. Each distribution sums to 1 for
    0 < D <= 1: the discounts removed from the seen counts are exactly the mass given to the level below.

    ``discount`` D defaults to :func:`absolute_discount` of the bigram counts, n1 / (n1 + 2 n2); the
    same D discounts the continuation counts (one D per level, as Chen and Goodman estimate it, needs
    counts of counts that a vocabulary of frequent word pieces, each following many others, may not have).
    """

    discount: float | None = None

    def __post_init__(self):
        if self.discount is None:
            object.__setattr__(self, "discount", absolute_discount(self.counts.counts))
        elif (isinstance(self.discount, bool) or not isinstance(self.discount, (int, float))
              or not 0 < self.discount <= 1):
            raise ValueError(f"discount must be in (0, 1] (0 leaves unseen tokens no probability; above 1 a seen "
                             f"count would turn negative), got {self.discount!r}")

    def continuation_log_prob(self, token: torch.Tensor) -> torch.Tensor:
        """log p_cont(w) for token ids w (...) -> (...), float64."""
        continuation, D = self.counts.continuation, self.discount
        distinct_bigrams, continuing_tokens = continuation.sum(), (continuation > 0).sum(dtype=continuation.dtype)
        seen = (continuation[token.long()] - D).clamp(min=0) / distinct_bigrams  # (...)
        return (seen + D * continuing_tokens / distinct_bigrams / self.vocab_size).log()

    def log_prob(self, context: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
        D, context = self.discount, context.long()
        total = self.counts.context_totals[context]  # (...) c(v .)
        types = self.counts.context_types[context]  # (...) N1+(v .)
        lower = self.continuation_log_prob(token).exp()  # (...)
        discounted = (self.counts.bigram(context, token) - D).clamp(min=0)  # (...)
        interpolated = (discounted + D * types * lower) / total.clamp(min=1)  # (...)
        return torch.where(total > 0, interpolated, lower).log()


# --------------------------------------------------------------------------------------------------
# Diversity of generated text
# --------------------------------------------------------------------------------------------------


def distinct_n(sequences: Sequence[Sequence], n: int) -> float:
    """Distinct-n, the diversity of generated text (Li et al., 2016), over the whole set of samples:

        distinct-n = |{distinct n-grams over all samples}| / sum_s max(L_s - n + 1, 0)

    the number of different n-grams (tuples of n consecutive tokens inside one sample) divided by the
    number of n-grams, both counted over all the samples together (corpus level, as Li et al. report
    it for a system's responses; the mean of per-sample ratios is another number). 1 means no n-gram
    repeats; a model that loops on one phrase scores near 0. Li et al. divide by the number of
    generated tokens, which is the same for n = 1 and larger by n - 1 per sample for n > 1; this is
    the common form that divides by the number of n-grams, so that the value lies in (0, 1].

    Args:
        sequences: the samples, each a sequence of tokens (ids, or strings); a sample shorter than n
            has no n-gram.
        n: the n-gram order, >= 1.

    Raises:
        ValueError: for n < 1, no samples, or samples with no n-gram at all.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    if isinstance(sequences, (str, bytes)) or not isinstance(sequences, Sequence) or len(sequences) == 0:
        raise ValueError("sequences must be a non-empty list of samples, each a sequence of tokens")
    samples = []
    for index, sample in enumerate(sequences):
        if isinstance(sample, (str, bytes)) or not isinstance(sample, (Sequence, torch.Tensor, np.ndarray)):
            raise ValueError(f"sequences[{index}] must be a sequence of tokens (a list of ids or of strings), got "
                             f"{type(sample).__name__}")
        samples.append(sample.tolist() if isinstance(sample, (torch.Tensor, np.ndarray)) else list(sample))
    ngrams = [tuple(sample[start:start + n]) for sample in samples for start in range(len(sample) - n + 1)]
    if not ngrams:
        raise ValueError(f"no sample has n = {n} tokens: there is no {n}-gram to count")
    return len(set(ngrams)) / len(ngrams)
