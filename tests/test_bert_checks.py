"""Mutation tests of chapter 06's checks (autograder/checks/bert.py).

For every exercise: the check accepts the solution of the solution notebook, other correct
implementations and (with the forbid-rule lifted) the reference; it rejects a catalogue of typical
wrong implementations, written the way students write them, each with the hint that explains it; and
calling the reference or library code that does the exercise's job fails with "implement this
yourself", however it was captured. The embedding check also runs once through the grader's sandbox,
where the student's class lives in another process.
"""

import collections
import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import bertlab.bert
import bertlab.tokenization
from autograder.checks import bert as checks
from autograder.checks.framework import CheckFailed
from bertlab.tokenization import truncate_longest_first as captured_truncation
from bertlab.tokenization import wordpiece_tokenize as captured_wordpiece
from checks_helpers import MutationTests, run_in_grader, run_solution_cells, solution_cells

SOLUTION = Path(__file__).resolve().parents[1] / "solutions" / "06_bert" / "06_bert.ipynb"
EXERCISES = ["wordpiece_tokenize", "bpe_merges", "encode", "BertEmbeddings", "count_parameters"]
REFERENCES = {
    "wordpiece_tokenize": bertlab.tokenization.wordpiece_tokenize,
    "bpe_merges": bertlab.tokenization.bpe_merges,
    "encode": bertlab.tokenization.encode,
    "BertEmbeddings": bertlab.bert.BertEmbeddings,
    "count_parameters": bertlab.bert.count_parameters,
}


@pytest.fixture(scope="module")
def solution_namespace():
    """The functions and classes defined by the solution cells of the solution notebook."""
    return run_solution_cells(SOLUTION, {"torch": torch, "nn": nn, "math": math})


# --------------------------------------------------------------------------------------------------
# wordpiece_tokenize: typical wrong implementations
# --------------------------------------------------------------------------------------------------


def wordpiece_shortest_first(word, vocab, unk_token="[UNK]", max_input_chars_per_word=100):
    if len(word) > max_input_chars_per_word:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        for end in range(start + 1, len(word) + 1):
            piece = ("##" if start else "") + word[start:end]
            if piece in vocab:
                pieces.append(piece)
                start = end
                break
        else:
            return [unk_token]
    return pieces


def wordpiece_prefix_everywhere(word, vocab, unk_token="[UNK]", max_input_chars_per_word=100):
    if len(word) > max_input_chars_per_word:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        end = len(word)
        while end > start and "##" + word[start:end] not in vocab:
            end -= 1
        if end == start:
            return [unk_token]
        pieces.append("##" + word[start:end])
        start = end
    return pieces


def wordpiece_keeps_pieces_before_unknown(word, vocab, unk_token="[UNK]", max_input_chars_per_word=100):
    if len(word) > max_input_chars_per_word:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                pieces.append(piece)
                start = end
                break
        else:
            pieces.append(unk_token)
            break
    return pieces


def wordpiece_without_prefix(word, vocab, unk_token="[UNK]", max_input_chars_per_word=100):
    if len(word) > max_input_chars_per_word:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        candidates = [word[start:end] for end in range(len(word), start, -1) if word[start:end] in vocab]
        if not candidates:
            return [unk_token]
        pieces.append(candidates[0])
        start += len(candidates[0])
    return pieces


def wordpiece_end_off_by_one(word, vocab, unk_token="[UNK]", max_input_chars_per_word=100):
    if len(word) > max_input_chars_per_word:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        for end in range(len(word) - 1, start, -1):  # misses word[start:len(word)]
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                break
        else:
            return [unk_token]
        pieces.append(piece)
        start = end
    return pieces


def wordpiece_limit_inclusive(word, vocab, unk_token="[UNK]", max_input_chars_per_word=100):
    if len(word) >= max_input_chars_per_word:
        return [unk_token]
    return _greedy(word, vocab, unk_token)


def _greedy(word, vocab, unk_token):
    pieces, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                break
        else:
            return [unk_token]
        pieces.append(piece)
        start = end
    return pieces


def wordpiece_fixed_unknown(word, vocab, unk_token="[UNK]", max_input_chars_per_word=100):
    if len(word) > max_input_chars_per_word:
        return ["[UNK]"]
    return _greedy(word, vocab, "[UNK]")


def wordpiece_backtracking(word, vocab, unk_token="[UNK]", max_input_chars_per_word=100):
    if len(word) > max_input_chars_per_word:
        return [unk_token]

    def split(start):
        if start == len(word):
            return []
        for end in range(len(word), start, -1):
            piece = ("##" if start else "") + word[start:end]
            rest = split(end) if piece in vocab else None
            if rest is not None:
                return [piece] + rest
        return None

    return split(0) or [unk_token]


def wordpiece_skips_unknown_characters(word, vocab, unk_token="[UNK]", max_input_chars_per_word=100):
    if len(word) > max_input_chars_per_word:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                pieces.append(piece)
                start = end
                break
        else:
            pieces.append(unk_token)
            start += 1
    return pieces


def wordpiece_as_tuple(word, vocab, unk_token="[UNK]", max_input_chars_per_word=100):
    return tuple(_greedy(word, vocab, unk_token)) if len(word) <= max_input_chars_per_word else (unk_token,)


# --------------------------------------------------------------------------------------------------
# encode: typical wrong implementations
# --------------------------------------------------------------------------------------------------


def _ids(tokens, vocab):
    return [vocab.get(token, vocab["[UNK]"]) for token in tokens]


def _longest_first(a, b, budget):
    """A correct "longest first" truncation, for mutants whose mistake is elsewhere."""
    if b is None:
        return a[:budget], None
    if len(a) + len(b) <= budget:
        return a, b
    short = min(len(a), len(b))
    keep_short = short if 2 * short <= budget else budget // 2
    if len(a) > len(b):
        return a[:budget - keep_short], b[:keep_short]
    return a[:keep_short], b[:budget - keep_short]


def _frame(a, b, vocab, max_length, *, cls=None, sep=None, pad=None, final_sep=True, first_sep_type=0,
           pad_mask=0, left=False):
    cls = vocab["[CLS]"] if cls is None else cls
    sep = vocab["[SEP]"] if sep is None else sep
    pad = vocab["[PAD]"] if pad is None else pad
    ids = [cls] + a + [sep]
    types = [0] * (len(a) + 1) + [first_sep_type]
    if b is not None:
        ids += b + ([sep] if final_sep else [])
        types += [1] * (len(b) + (1 if final_sep else 0))
    mask = [1] * len(ids)
    if max_length is not None:
        n = max_length - len(ids)
        if left:
            ids, types, mask = [pad] * n + ids, [0] * n + types, [pad_mask] * n + mask
        else:
            ids, types, mask = ids + [pad] * n, types + [0] * n, mask + [pad_mask] * n
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}


def _specials(b):
    return 2 if b is None else 3


def encode_without_final_sep(tokens_a, tokens_b, vocab, max_length=None):
    a = _ids(tokens_a, vocab)
    b = None if tokens_b is None else _ids(tokens_b, vocab)
    if max_length:
        a, b = _longest_first(a, b, max_length - _specials(b))
    return _frame(a, b, vocab, max_length, final_sep=False)


def encode_first_sep_in_segment_b(tokens_a, tokens_b, vocab, max_length=None):
    a = _ids(tokens_a, vocab)
    b = None if tokens_b is None else _ids(tokens_b, vocab)
    if max_length:
        a, b = _longest_first(a, b, max_length - _specials(b))
    return _frame(a, b, vocab, max_length, first_sep_type=0 if b is None else 1)


def encode_keeps_the_end(tokens_a, tokens_b, vocab, max_length=None):
    a = _ids(tokens_a, vocab)
    b = None if tokens_b is None else _ids(tokens_b, vocab)
    if max_length:
        kept_a, kept_b = _longest_first(a, b, max_length - _specials(b))
        a = a[len(a) - len(kept_a):]
        b = None if b is None else b[len(b) - len(kept_b):]
    return _frame(a, b, vocab, max_length)


def encode_budget_without_specials(tokens_a, tokens_b, vocab, max_length=None):
    a = _ids(tokens_a, vocab)
    b = None if tokens_b is None else _ids(tokens_b, vocab)
    if max_length:
        a, b = _longest_first(a, b, max_length)
    return _frame(a, b, vocab, max_length)


def encode_cuts_only_the_second(tokens_a, tokens_b, vocab, max_length=None):
    a = _ids(tokens_a, vocab)
    b = None if tokens_b is None else _ids(tokens_b, vocab)
    if max_length:
        budget = max_length - _specials(b)
        if b is None:
            a = a[:budget]
        else:
            b = b[:max(0, budget - len(a))]
    return _frame(a, b, vocab, max_length)


def encode_bert_original_truncation(tokens_a, tokens_b, vocab, max_length=None):
    a = _ids(tokens_a, vocab)
    b = None if tokens_b is None else _ids(tokens_b, vocab)
    if max_length:
        budget = max_length - _specials(b)
        if b is None:
            a = a[:budget]
        else:
            while len(a) + len(b) > budget:  # _truncate_seq_pair of BERT's run_classifier.py
                if len(a) > len(b):
                    a.pop()
                else:
                    b.pop()
    return _frame(a, b, vocab, max_length)


def encode_bert_base_ids(tokens_a, tokens_b, vocab, max_length=None):
    a = [vocab.get(token, 100) for token in tokens_a]
    b = None if tokens_b is None else [vocab.get(token, 100) for token in tokens_b]
    if max_length:
        a, b = _longest_first(a, b, max_length - _specials(b))
    return _frame(a, b, vocab, max_length, cls=101, sep=102, pad=0)


def encode_attends_to_padding(tokens_a, tokens_b, vocab, max_length=None):
    a = _ids(tokens_a, vocab)
    b = None if tokens_b is None else _ids(tokens_b, vocab)
    if max_length:
        a, b = _longest_first(a, b, max_length - _specials(b))
    return _frame(a, b, vocab, max_length, pad_mask=1)


def encode_pads_left(tokens_a, tokens_b, vocab, max_length=None):
    a = _ids(tokens_a, vocab)
    b = None if tokens_b is None else _ids(tokens_b, vocab)
    if max_length:
        a, b = _longest_first(a, b, max_length - _specials(b))
    return _frame(a, b, vocab, max_length, left=True)


def encode_unknown_raises(tokens_a, tokens_b, vocab, max_length=None):
    a = [vocab[token] for token in tokens_a]
    b = None if tokens_b is None else [vocab[token] for token in tokens_b]
    if max_length:
        a, b = _longest_first(a, b, max_length - _specials(b))
    return _frame(a, b, vocab, max_length)


def encode_empty_pair_as_single(tokens_a, tokens_b, vocab, max_length=None):
    a = _ids(tokens_a, vocab)
    b = _ids(tokens_b, vocab) if tokens_b else None
    if max_length:
        a, b = _longest_first(a, b, max_length - _specials(b))
    return _frame(a, b, vocab, max_length)


def encode_returns_tensors(tokens_a, tokens_b, vocab, max_length=None):
    encoded = bertlab_free_encode(tokens_a, tokens_b, vocab, max_length)
    return {name: torch.tensor(values) for name, values in encoded.items()}


def bertlab_free_encode(tokens_a, tokens_b, vocab, max_length=None):
    """A correct encode, written differently from the solution."""
    a = _ids(tokens_a, vocab)
    b = None if tokens_b is None else _ids(tokens_b, vocab)
    if max_length is not None:
        a, b = _longest_first(a, b, max_length - _specials(b))
    return _frame(a, b, vocab, max_length)


# --------------------------------------------------------------------------------------------------
# BertEmbeddings: typical wrong implementations
# --------------------------------------------------------------------------------------------------


class Embeddings(nn.Module):
    """A correct embedding layer, written differently from the solution; the mutants change one step."""

    def __init__(self, config):
        super().__init__()
        H = config.hidden_size
        self.word_embeddings = nn.Embedding(config.vocab_size, H)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, H)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, H)
        self.norm = nn.LayerNorm(H, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.register_buffer("position_ids", torch.arange(config.max_position_embeddings), persistent=False)

    def forward(self, input_ids, token_type_ids):
        positions = self.position_ids[: input_ids.size(1)].unsqueeze(0).expand_as(input_ids)
        total = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        total = total + self.position_embeddings(positions)
        return self.dropout(self.norm(total))


class EmbeddingsWithPersistentBuffer(Embeddings):
    """Hugging Face's layout: a position_ids buffer in the state dict. Allowed."""

    def __init__(self, config):
        super().__init__(config)
        self.register_buffer("position_ids", torch.arange(config.max_position_embeddings).unsqueeze(0))

    def forward(self, input_ids, token_type_ids):
        positions = self.position_ids[:, : input_ids.shape[1]]
        x = (self.word_embeddings(input_ids) + self.position_embeddings(positions)
             + self.token_type_embeddings(token_type_ids))
        return F.dropout(self.norm(x), self.dropout.p, self.training)


class EmbeddingsWithoutPositions(Embeddings):
    def forward(self, input_ids, token_type_ids):
        return self.dropout(self.norm(self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)))


class EmbeddingsWithoutSegments(Embeddings):
    def forward(self, input_ids, token_type_ids):
        positions = torch.arange(input_ids.shape[1])
        return self.dropout(self.norm(self.word_embeddings(input_ids) + self.position_embeddings(positions)))


class EmbeddingsNormFirst(Embeddings):
    def forward(self, input_ids, token_type_ids):
        positions = torch.arange(input_ids.shape[1])
        x = self.norm(self.word_embeddings(input_ids))
        return self.dropout(x + self.position_embeddings(positions) + self.token_type_embeddings(token_type_ids))


class EmbeddingsDefaultEpsilon(Embeddings):
    def __init__(self, config):
        super().__init__(config)
        self.norm = nn.LayerNorm(config.hidden_size)


class EmbeddingsPositionsFromOne(Embeddings):
    def forward(self, input_ids, token_type_ids):
        positions = torch.arange(1, input_ids.shape[1] + 1)
        x = (self.word_embeddings(input_ids) + self.position_embeddings(positions)
             + self.token_type_embeddings(token_type_ids))
        return self.dropout(self.norm(x))


class EmbeddingsPositionsFromTokenIds(Embeddings):
    def forward(self, input_ids, token_type_ids):
        x = (self.word_embeddings(input_ids) + self.position_embeddings(input_ids)
             + self.token_type_embeddings(token_type_ids))
        return self.dropout(self.norm(x))


class EmbeddingsScaledBySqrtH(Embeddings):
    def forward(self, input_ids, token_type_ids):
        positions = torch.arange(input_ids.shape[1])
        tokens = self.word_embeddings(input_ids) * math.sqrt(self.norm.normalized_shape[0])
        return self.dropout(self.norm(tokens + self.position_embeddings(positions)
                                      + self.token_type_embeddings(token_type_ids)))


class EmbeddingsDropoutFirst(Embeddings):
    def forward(self, input_ids, token_type_ids):
        positions = torch.arange(input_ids.shape[1])
        x = (self.word_embeddings(input_ids) + self.position_embeddings(positions)
             + self.token_type_embeddings(token_type_ids))
        return self.norm(self.dropout(x))


class EmbeddingsWithoutDropout(Embeddings):
    def forward(self, input_ids, token_type_ids):
        positions = torch.arange(input_ids.shape[1])
        return self.norm(self.word_embeddings(input_ids) + self.position_embeddings(positions)
                         + self.token_type_embeddings(token_type_ids))


class EmbeddingsDropoutAlwaysOn(Embeddings):
    def forward(self, input_ids, token_type_ids):
        positions = torch.arange(input_ids.shape[1])
        x = (self.word_embeddings(input_ids) + self.position_embeddings(positions)
             + self.token_type_embeddings(token_type_ids))
        return F.dropout(self.norm(x), self.dropout.p)  # training=True by default


class EmbeddingsHuggingFaceNames(Embeddings):
    def __init__(self, config):
        super().__init__(config)
        del self.norm
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)


# --------------------------------------------------------------------------------------------------
# count_parameters: typical wrong implementations
# --------------------------------------------------------------------------------------------------


def _fields(config):
    return (config.vocab_size, config.max_position_embeddings, config.type_vocab_size, config.hidden_size,
            config.intermediate_size, config.num_hidden_layers)


def count_without_biases(config, pooler=True):
    V, P, T, H, I, L = _fields(config)  # noqa: E741
    positions = P if config.position_embedding_type == "learned" else 0
    return (V + positions + T) * H + 2 * H + L * (4 * H * H + 2 * H * I + 4 * H) + (H * H if pooler else 0)


def count_without_layer_norms(config, pooler=True):
    V, P, T, H, I, L = _fields(config)  # noqa: E741
    positions = P if config.position_embedding_type == "learned" else 0
    layer = 4 * (H * H + H) + H * I + I + I * H + H
    return (V + positions + T) * H + L * layer + (H * H + H if pooler else 0)


def count_ignoring_the_pooler_flag(config, pooler=True):
    V, P, T, H, I, L = _fields(config)  # noqa: E741
    positions = P if config.position_embedding_type == "learned" else 0
    layer = 4 * (H * H + H) + H * I + I + I * H + H + 4 * H
    return (V + positions + T) * H + 2 * H + L * layer + H * H + H


def count_with_the_mlm_decoder(config, pooler=True):
    V, P, T, H, I, L = _fields(config)  # noqa: E741
    positions = P if config.position_embedding_type == "learned" else 0
    layer = 4 * (H * H + H) + H * I + I + I * H + H + 4 * H
    return 2 * V * H + (positions + T) * H + 2 * H + L * layer + (H * H + H if pooler else 0)


def count_with_four_h(config, pooler=True):
    V, P, T, H, _, L = _fields(config)
    positions = P if config.position_embedding_type == "learned" else 0
    layer = 4 * (H * H + H) + 2 * 4 * H * H + 4 * H + H + 4 * H
    return (V + positions + T) * H + 2 * H + L * layer + (H * H + H if pooler else 0)


def count_sinusoids_as_parameters(config, pooler=True):
    V, P, T, H, I, L = _fields(config)  # noqa: E741
    layer = 4 * (H * H + H) + H * I + I + I * H + H + 4 * H
    return (V + P + T) * H + 2 * H + L * layer + (H * H + H if pooler else 0)


def count_one_layer_norm_per_layer(config, pooler=True):
    V, P, T, H, I, L = _fields(config)  # noqa: E741
    positions = P if config.position_embedding_type == "learned" else 0
    layer = 4 * (H * H + H) + H * I + I + I * H + H + 2 * H
    return (V + positions + T) * H + 2 * H + L * layer + (H * H + H if pooler else 0)


def count_as_float(config, pooler=True):
    V, P, T, H, I, L = _fields(config)  # noqa: E741
    positions = P if config.position_embedding_type == "learned" else 0
    ratio = I / H  # a float: 4.0 in the presets
    layer = 4 * (H * H + H) + 2 * ratio * H * H + ratio * H + H + 4 * H
    return (V + positions + T) * H + 2 * H + L * layer + (H * H + H if pooler else 0)


# --------------------------------------------------------------------------------------------------
# bpe_merges: wrong implementations as students write them
# --------------------------------------------------------------------------------------------------


def _pair_counts(words, weighted=True):
    """Adjacent pairs of symbols over the words, each occurrence weighing its word's count (or 1)."""
    counts = collections.Counter()
    for symbols, count in words.items():
        for pair in zip(symbols, symbols[1:]):
            counts[pair] += count if weighted else 1
    return counts


def _merge(symbols, pair):
    out, i = [], 0
    while i < len(symbols):
        if tuple(symbols[i:i + 2]) == pair:
            out.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return tuple(out)


def _learn(word_counts, num_merges, choose, weighted=True, stop=True):
    """BPE's loop with the student's way of choosing the pair (``choose(counts)``)."""
    words, merges = {tuple(w): c for w, c in word_counts.items() if w}, []
    for _ in range(num_merges):
        counts = _pair_counts(words, weighted)
        if not counts and stop:
            break
        best = choose(counts)
        merges.append(best)
        words = {_merge(s, best): c for s, c in words.items()}
    return merges


def _smallest_of_the_most_frequent(counts):
    return min(counts, key=lambda pair: (-counts[pair], pair))


def bpe_counting_word_types(word_counts, num_merges):
    return _learn(word_counts, num_merges, _smallest_of_the_most_frequent, weighted=False)  # forgot the counts


def bpe_most_common_on_ties(word_counts, num_merges):
    return _learn(word_counts, num_merges, lambda counts: counts.most_common(1)[0][0])  # on a tie, the first counted


def bpe_without_stopping(word_counts, num_merges):
    return _learn(word_counts, num_merges, _smallest_of_the_most_frequent, stop=False)  # min() of nothing fails


def bpe_sorting_the_tied_pairs(word_counts, num_merges):
    """A correct one: the most frequent pairs sorted, the first taken."""
    return _learn(word_counts, num_merges, lambda counts: sorted(
        pair for pair, count in counts.items() if count == max(counts.values()))[0])


def bpe_replacing_text(word_counts, num_merges):
    words, merges = {" ".join(w): c for w, c in word_counts.items() if w}, []
    for _ in range(num_merges):
        counts = _pair_counts({tuple(word.split()): count for word, count in words.items()})
        if not counts:
            break
        best = _smallest_of_the_most_frequent(counts)
        merges.append(best)
        words = {word.replace(" ".join(best), "".join(best)): c for word, c in words.items()}  # matches inside symbols
    return merges


MUTANTS = {
    "bpe_merges": [
        (bpe_counting_word_types, "weigh every pair by the count of its word"),
        (bpe_most_common_on_ties, "not the first one counted"),
        (bpe_replacing_text, "merge whole symbols"),
        (bpe_without_stopping, "stop when no word has two symbols left"),
    ],
    "wordpiece_tokenize": [
        (wordpiece_shortest_first, "take the LONGEST piece"),
        (wordpiece_prefix_everywhere, "only continuations carry '##'"),
        (wordpiece_keeps_pieces_before_unknown, "the WHOLE word becomes unk_token"),
        (wordpiece_without_prefix, "is looked up and returned as '##' + word[start:end]"),
        (wordpiece_end_off_by_one, "word[start:end] stops before word[end]"),
        (wordpiece_limit_inclusive, "MORE than max_input_chars_per_word"),
        (wordpiece_fixed_unknown, "return the given unk_token"),
        (wordpiece_backtracking, "WordPiece is greedy"),
        (wordpiece_skips_unknown_characters, "do not skip the character"),
        (wordpiece_as_tuple, "return a list of strings"),
    ],
    "encode": [
        (encode_without_final_sep, "a pair ends with a second [SEP]"),
        (encode_first_sep_in_segment_b, "the first [SEP] belongs to segment A"),
        (encode_keeps_the_end, "removes tokens from the END"),
        (encode_budget_without_specials, "the special tokens count towards max_length"),
        (encode_cuts_only_the_second, "cuts the LONGER text first"),
        (encode_bert_original_truncation, "the rule of BERT's original code"),
        (encode_bert_base_ids, "look the special tokens up in `vocab`"),
        (encode_attends_to_padding, "padding gets attention_mask 0"),
        (encode_pads_left, "pad on the right"),
        (encode_unknown_raises, "gets the id of [UNK]"),
        (encode_empty_pair_as_single, "an empty second text is still a pair"),
        (encode_returns_tensors, "return a list of Python ints"),
    ],
    "BertEmbeddings": [
        (EmbeddingsWithoutPositions, "add the position embeddings"),
        (EmbeddingsWithoutSegments, "add the segment embeddings"),
        (EmbeddingsNormFirst, "apply the LayerNorm to the SUM"),
        (EmbeddingsDefaultEpsilon, "eps=config.layer_norm_eps"),
        (EmbeddingsPositionsFromOne, "positions start at 0"),
        (EmbeddingsPositionsFromTokenIds, "not by the token ids"),
        (EmbeddingsScaledBySqrtH, "does not multiply the token embeddings by sqrt(H)"),
        (EmbeddingsDropoutFirst, "apply the dropout AFTER the LayerNorm"),
        (EmbeddingsWithoutDropout, "nothing was dropped"),
        (EmbeddingsDropoutAlwaysOn, "in eval mode (model.eval()) the dropout must do nothing"),
        (EmbeddingsHuggingFaceNames, "missing norm.bias (16,), norm.weight (16,)"),
    ],
    "count_parameters": [
        (count_without_biases, "every linear layer has a bias"),
        (count_without_layer_norms, "count the LayerNorms"),
        (count_ignoring_the_pooler_flag, "with pooler=False, leave out the pooler"),
        (count_with_the_mlm_decoder, "the MLM decoder is tied"),
        (count_with_four_h, "use config.intermediate_size"),
        (count_sinusoids_as_parameters, "the positions are a fixed table"),
        (count_one_layer_norm_per_layer, "TWO LayerNorms"),
        (count_as_float, "you returned a float, expected an int"),
    ],
}


def wordpiece_with_slices(word, vocab, unk_token="[UNK]", max_input_chars_per_word=100):
    """Correct, written with a while loop and a shrinking end."""
    if len(word) > max_input_chars_per_word:
        return [unk_token]
    tokens, start = [], 0
    while start < len(word):
        end, found = len(word), None
        while end > start:
            candidate = ("##" if start > 0 else "") + word[start:end]
            if candidate in vocab:
                found = candidate
                break
            end -= 1
        if found is None:
            return [unk_token]
        tokens.append(found)
        start = end
    return tokens


def count_by_parts(config, pooler=True):
    """Correct, with I = intermediate_size and the biases grouped differently."""
    V, P, T, H, I, L = _fields(config)  # noqa: E741
    weights = (V + (P if config.position_embedding_type == "learned" else 0) + T) * H
    weights += L * (4 * H * H + 2 * H * I) + (H * H if pooler else 0)
    biases_and_norms = 2 * H + L * (4 * H + I + H + 4 * H) + (H if pooler else 0)
    return weights + biases_and_norms


ALTERNATIVES = {
    "wordpiece_tokenize": [wordpiece_with_slices],
    "bpe_merges": [bpe_sorting_the_tied_pairs],
    "encode": [bertlab_free_encode],
    "BertEmbeddings": [Embeddings, EmbeddingsWithPersistentBuffer],
    "count_parameters": [count_by_parts],
}


def test_the_solution_cells_are_the_exercises_in_order():
    assert [grade_id for grade_id, _ in solution_cells(SOLUTION)] == EXERCISES


def test_failure_messages_show_the_case_and_the_first_difference():
    with pytest.raises(CheckFailed) as failure:
        checks.check_encode(encode_first_sep_in_segment_b)
    message = str(failure.value)
    assert "test case 2 of 16 (a pair of 4 and 3 tokens, no max_length)" in message
    assert "token_type_ids: you returned" in message and "(first difference at position 5: 1 instead of 0)" in message
    assert "Inputs:\n    tokens_a = [" in message
    first = checks.wordpiece_tokenize_cases()[0]
    shortest = wordpiece_shortest_first(*first.args)
    with pytest.raises(CheckFailed, match=re.escape(f"output: you returned {shortest!r}, expected")):
        checks.check_wordpiece_tokenize(wordpiece_shortest_first)


def test_embedding_check_names_the_parameters_it_cannot_load():
    with pytest.raises(CheckFailed) as failure:
        checks.check_BertEmbeddings(EmbeddingsHuggingFaceNames)
    message = str(failure.value)
    assert "unexpected LayerNorm.bias (16,), LayerNorm.weight (16,)" in message
    assert "Name the submodules word_embeddings, position_embeddings" in message


def test_count_parameters_mistakes_are_told_apart_on_the_first_case():
    """The first case is the one most wrong counts fail on: there, each mistake that is wrong gives its
    own number, so the hint names the right one (the others are told apart by later cases)."""
    first = checks.count_parameters_cases()[0]
    expected = bertlab.bert.count_parameters(*first.args, **first.kwargs)
    counts = [mistake.implementation(*first.args, **first.kwargs) for mistake in checks.COUNT_PARAMETERS_MISTAKES]
    wrong = [count for count in counts if count != expected]
    assert len(set(wrong)) == len(wrong) >= len(counts) - 2  # the pooler=False and sinusoidal mistakes agree here


# --------------------------------------------------------------------------------------------------
# "Implement this yourself"
# --------------------------------------------------------------------------------------------------


def wordpiece_with_captured_reference(word, vocab, unk_token="[UNK]", max_input_chars_per_word=100):
    return captured_wordpiece(word, vocab, unk_token, max_input_chars_per_word)


def wordpiece_with_the_tokenizer_class(word, vocab, unk_token="[UNK]", max_input_chars_per_word=100):
    return bertlab.tokenization.WordPieceTokenizer(vocab, unk_token, max_input_chars_per_word).tokenize_word(word)


def wordpiece_with_hugging_face(word, vocab, unk_token="[UNK]", max_input_chars_per_word=100):
    from transformers.models.bert.tokenization_bert_legacy import WordpieceTokenizer

    return WordpieceTokenizer(vocab=dict.fromkeys(vocab, 0), unk_token=unk_token,
                              max_input_chars_per_word=max_input_chars_per_word).tokenize(word)


def wordpiece_with_the_rust_library(word, vocab, unk_token="[UNK]", max_input_chars_per_word=100):
    from tokenizers import models

    ids = {token: index for index, token in enumerate([unk_token, *vocab])}
    model = models.WordPiece(ids, unk_token=unk_token, max_input_chars_per_word=max_input_chars_per_word)
    return [token.value for token in model.tokenize(word)]


def wordpiece_hiding_the_call(word, vocab, unk_token="[UNK]", max_input_chars_per_word=100):
    try:
        return captured_wordpiece(word, vocab, unk_token, max_input_chars_per_word)
    except Exception:  # the check's exception is swallowed, but the call was recorded
        return wordpiece_with_slices(word, vocab, unk_token, max_input_chars_per_word)


def encode_with_captured_truncation(tokens_a, tokens_b, vocab, max_length=None):
    a = _ids(tokens_a, vocab)
    b = None if tokens_b is None else _ids(tokens_b, vocab)
    if max_length is not None:
        a, b = captured_truncation(a, b, max_length - _specials(b))
    return _frame(a, b, vocab, max_length)


def encode_with_the_rust_library(tokens_a, tokens_b, vocab, max_length=None):
    from tokenizers import Tokenizer, models, processors

    ids = {token: index for index, token in enumerate(vocab)}
    tokenizer = Tokenizer(models.WordLevel(ids, unk_token="[UNK]"))
    tokenizer.post_processor = processors.BertProcessing(("[SEP]", ids["[SEP]"]), ("[CLS]", ids["[CLS]"]))
    if max_length is not None:
        tokenizer.enable_truncation(max_length)
        tokenizer.enable_padding(length=max_length, pad_id=ids["[PAD]"])
    encoding = tokenizer.encode(tokens_a, tokens_b, is_pretokenized=True)
    return {"input_ids": encoding.ids, "token_type_ids": encoding.type_ids, "attention_mask": encoding.attention_mask}


def encode_with_the_reference(tokens_a, tokens_b, vocab, max_length=None):
    return bertlab.tokenization.encode(tokens_a, tokens_b, vocab, max_length)


class EmbeddingsSubclassingTheReference(bertlab.bert.BertEmbeddings):
    pass


class EmbeddingsWrappingTheReference(nn.Module):
    def __init__(self, config):
        super().__init__()
        inner = bertlab.bert.BertEmbeddings(config)
        self.word_embeddings, self.position_embeddings = inner.word_embeddings, inner.position_embeddings
        self.token_type_embeddings, self.norm, self.dropout = inner.token_type_embeddings, inner.norm, inner.dropout
        self.forward_ = inner.forward

    def forward(self, input_ids, token_type_ids):
        return self.forward_(input_ids, token_type_ids)


def count_by_building_the_model(config, pooler=True):
    model = bertlab.bert.BertModel(config, add_pooling_layer=pooler)
    return sum(parameter.numel() for parameter in model.parameters())


def count_by_building_layers(config, pooler=True):
    V, P, T, H, I, L = _fields(config)  # noqa: E741

    def linear(a, b):
        return sum(p.numel() for p in nn.Linear(a, b).parameters())

    positions = P if config.position_embedding_type == "learned" else 0
    layer = 4 * linear(H, H) + linear(H, I) + linear(I, H) + 4 * H
    return (V + positions + T) * H + 2 * H + L * layer + (linear(H, H) if pooler else 0)


class TestBertChecks(MutationTests):
    """The shared mutation tests (tests/checks_helpers.py) of this chapter's checks."""

    checks = checks
    references = REFERENCES
    mutants = MUTANTS
    alternatives = ALTERNATIVES
    failure_context = ""  # the embedding check names its cases by their inputs, not by number
    cheats = [
        ("wordpiece_tokenize", wordpiece_with_captured_reference, "bertlab.tokenization.wordpiece_tokenize"),
        ("wordpiece_tokenize", wordpiece_with_the_tokenizer_class,
         "bertlab.tokenization.WordPieceTokenizer.tokenize_word"),
        ("wordpiece_tokenize", wordpiece_with_hugging_face, "WordpieceTokenizer.tokenize"),
        ("wordpiece_tokenize", wordpiece_hiding_the_call, "bertlab.tokenization.wordpiece_tokenize"),
        ("wordpiece_tokenize", wordpiece_with_the_rust_library, "tokenizers.models.Model.tokenize"),
        ("encode", encode_with_the_rust_library, "tokenizers.Tokenizer.encode"),
        ("encode", encode_with_captured_truncation, "bertlab.tokenization.truncate_longest_first"),
        ("encode", encode_with_the_reference, "bertlab.tokenization.encode"),
        ("BertEmbeddings", EmbeddingsSubclassingTheReference, "bertlab.bert.BertEmbeddings.__init__"),
        ("BertEmbeddings", EmbeddingsWrappingTheReference, "bertlab.bert.BertEmbeddings.__init__"),
        ("count_parameters", count_by_building_the_model, "torch.nn.modules.module.Module.__init__"),
        ("count_parameters", count_by_building_layers, "torch.nn.modules.module.Module.__init__"),
    ]


# --------------------------------------------------------------------------------------------------
# Through the grader: the student's class lives in a sandboxed process
# --------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_embedding_check_grades_a_class_in_the_student_process():
    from autograder.run.sandbox import Limits

    solution = dict(solution_cells(SOLUTION))["BertEmbeddings"]
    wrong = solution.replace("nn.LayerNorm(H, eps=config.layer_norm_eps)", "nn.LayerNorm(H)")
    assert wrong != solution
    test = "from autograder.checks.bert import check_BertEmbeddings\nprint(check_BertEmbeddings(BertEmbeddings))"
    steps = [("code", "import torch\nfrom torch import nn"), ("code", solution), ("test", "test_right"),
             ("code", wrong), ("test", "test_wrong")]
    limits = Limits(cell_timeout=120, notebook_timeout=300)
    outcomes = run_in_grader(steps, {"test_right": test, "test_wrong": test}, ["BertEmbeddings"], limits)
    assert outcomes["test_right"].status == "passed", outcomes["test_right"]
    assert "BertEmbeddings: all 12 hidden cases agree" in outcomes["test_right"].output
    assert outcomes["test_wrong"].status == "failed", outcomes["test_wrong"]
    assert "eps=config.layer_norm_eps" in outcomes["test_wrong"].message
