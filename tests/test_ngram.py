"""Tests of bertlab.ngram: counts and probabilities against loops over a tiny corpus written here, with the
formulas of Chen and Goodman (1999); the nll contract against bertlab.gpt.next_token_nll and torchmetrics."""

import math
from collections import Counter

import numpy as np
import pytest
import torch

from bertlab.gpt import next_token_nll, perplexity
from bertlab.ngram import (
    AddKBigram,
    AddKUnigram,
    CountLanguageModel,
    KneserNeyBigram,
    NGramCounts,
    absolute_discount,
    distinct_n,
)
from bertlab.pretraining_data import PackedSegments

V = 9  # ids 0 and 8 never occur; 7 and 8 are the framing tokens
BOS, EOS = 7, 8
SEGMENTS = [[1, 2, 3, 2, 1], [2, 3, 3, 4], [5], [], [1, 2, 6, 2, 3, 1, 2]]


# ------------------------------------------------------------------------------------------ by hand


def framed(segment, bos, eos):
    return ([bos] if bos is not None else []) + list(segment) + ([eos] if eos is not None else [])


def hand_counts(segments, bos=None, eos=None) -> tuple[Counter, Counter]:
    """The unigram counts (every token but bos) and the bigram counts (neighbours inside a segment)."""
    unigram, bigram = Counter(), Counter()
    for segment in segments:
        if not segment:
            continue
        tokens = framed(segment, bos, eos)
        for position, token in enumerate(tokens):
            if not (position == 0 and bos is not None):
                unigram[token] += 1
        for previous, token in zip(tokens, tokens[1:]):
            bigram[previous, token] += 1
    return unigram, bigram


def hand_add_k_unigram(unigram, k):
    total = sum(unigram.values())
    return lambda v, w: (unigram[w] + k) / (total + k * V)


def hand_add_k_bigram(bigram, k):
    def p(v, w):
        context_total = sum(count for (a, _), count in bigram.items() if a == v)
        return (bigram[v, w] + k) / (context_total + k * V)
    return p


def hand_kneser_ney(bigram, D=None):
    """Interpolated Kneser-Ney (Chen and Goodman, 1999), the recursion ending in 1 / V, written from the
    formulas with loops."""
    if D is None:
        n1 = sum(1 for count in bigram.values() if count == 1)
        n2 = sum(1 for count in bigram.values() if count == 2)
        D = n1 / (n1 + 2 * n2)
    distinct = len(bigram)  # N1+(. .)

    def continuation(w):  # N1+(. w)
        return len({a for (a, b) in bigram if b == w})

    continuing = sum(1 for w in range(V) if continuation(w) > 0)

    def p_cont(w):
        return max(continuation(w) - D, 0) / distinct + D * continuing / distinct / V

    def p(v, w):
        total = sum(count for (a, _), count in bigram.items() if a == v)
        if total == 0:
            return p_cont(w)
        followers = len({b for (a, b) in bigram if a == v})  # N1+(v .)
        return max(bigram[v, w] - D, 0) / total + D * followers / total * p_cont(w)
    return p


@pytest.fixture(params=["framed", "unframed"])
def framing(request):
    return (BOS, EOS) if request.param == "framed" else (None, None)


@pytest.fixture
def counts(framing):
    return NGramCounts.fit(SEGMENTS, V, bos_token_id=framing[0], eos_token_id=framing[1])


def models_and_hand_formulas(counts, framing):
    unigram, bigram = hand_counts(SEGMENTS, *framing)
    return [
        (AddKUnigram(counts.unigram, k=1.0), hand_add_k_unigram(unigram, 1.0)),
        (AddKUnigram(counts.unigram, k=0.1), hand_add_k_unigram(unigram, 0.1)),
        (AddKBigram(counts, k=1.0), hand_add_k_bigram(bigram, 1.0)),
        (AddKBigram(counts, k=0.05), hand_add_k_bigram(bigram, 0.05)),
        (KneserNeyBigram(counts), hand_kneser_ney(bigram)),
        (KneserNeyBigram(counts, discount=0.3), hand_kneser_ney(bigram, D=0.3)),
        (KneserNeyBigram(counts, discount=1.0), hand_kneser_ney(bigram, D=1.0)),
    ]


# ------------------------------------------------------------------------------------------ counts


def test_counts_are_the_counts_by_hand_and_never_cross_a_segment(framing):
    counts = NGramCounts.fit(SEGMENTS, V, bos_token_id=framing[0], eos_token_id=framing[1])
    unigram, bigram = hand_counts(SEGMENTS, *framing)
    assert counts.unigram.tolist() == [unigram[w] for w in range(V)]
    for v in range(V):
        for w in range(V):
            assert float(counts.bigram(torch.tensor(v), torch.tensor(w))) == bigram[v, w], (v, w)
    assert counts.keys.tolist() == sorted(v * V + w for v, w in bigram)
    assert float(counts.bigram(torch.tensor(1), torch.tensor(2))) == 3  # 1 2 in the first and twice in the last
    # the last token of a segment and the first of the next are no bigram: 1 | 2 (first, second), 4 | 5, 5 | 1
    for v, w in [(4, 5), (5, 1)]:
        assert float(counts.bigram(torch.tensor(v), torch.tensor(w))) == 0
    for v in range(V):
        followers = {b: count for (a, b), count in bigram.items() if a == v}
        assert counts.context_totals[v] == sum(followers.values())
        assert counts.context_types[v] == len(followers)
        assert counts.continuation[v] == len({a for (a, b) in bigram if b == v})


def test_packed_segments_and_lists_and_tensors_give_the_same_counts():
    lengths = [len(segment) for segment in SEGMENTS]
    packed = PackedSegments(np.array([t for s in SEGMENTS for t in s], dtype=np.uint16),
                            np.concatenate([[0], np.cumsum(lengths)]), 16, tuple(map(str, range(V))), True)
    reference = NGramCounts.fit(SEGMENTS, V, bos_token_id=BOS, eos_token_id=EOS)
    for segments in (packed, [torch.tensor(s, dtype=torch.long) for s in SEGMENTS], [np.array(s) for s in SEGMENTS]):
        other = NGramCounts.fit(segments, V, bos_token_id=BOS, eos_token_id=EOS)
        for name in ("unigram", "keys", "counts", "context_totals", "context_types", "continuation"):
            assert torch.equal(getattr(other, name), getattr(reference, name)), name


def test_the_default_discount_is_n1_over_n1_plus_2_n2():
    _, bigram = hand_counts(SEGMENTS, BOS, EOS)
    n1 = sum(1 for c in bigram.values() if c == 1)
    n2 = sum(1 for c in bigram.values() if c == 2)
    counts = NGramCounts.fit(SEGMENTS, V, bos_token_id=BOS, eos_token_id=EOS)
    assert KneserNeyBigram(counts).discount == pytest.approx(n1 / (n1 + 2 * n2))
    assert absolute_discount(torch.tensor([1.0, 1.0, 2.0, 5.0])) == pytest.approx(2 / (2 + 2 * 1))
    with pytest.raises(ValueError, match=r"n1 = 0"):
        absolute_discount(torch.tensor([2.0, 3.0]))


# ------------------------------------------------------------------------------------------ probabilities


def test_every_conditional_distribution_sums_to_one_and_is_positive(counts, framing):
    """Querying every next token w after every context v, seen or not (0 is never seen, 8 is never
    followed by a token, 5 only in a segment of its own when unframed)."""
    for model, _ in models_and_hand_formulas(counts, framing):
        for v in range(V):
            context = torch.full((V,), v)
            probabilities = model.log_prob(context, torch.arange(V)).exp()  # (V,), one query per token
            assert probabilities.dtype == torch.float64
            assert float(probabilities.sum()) == pytest.approx(1.0, abs=1e-12), (type(model).__name__, v)
            assert (probabilities > 0).all(), (type(model).__name__, v)
    assert counts.context_totals[0] == 0 and counts.context_totals[V - 1] == 0  # unseen contexts were among them


def test_probabilities_are_the_hand_computed_ones(counts, framing):
    for model, hand in models_and_hand_formulas(counts, framing):
        contexts, tokens = torch.meshgrid(torch.arange(V), torch.arange(V), indexing="ij")  # (V, V) each
        expected = torch.tensor([[hand(v, w) for w in range(V)] for v in range(V)], dtype=torch.float64)
        torch.testing.assert_close(model.log_prob(contexts, tokens).exp(), expected, rtol=1e-12, atol=0)
        torch.testing.assert_close(model.next_token_log_probs(torch.arange(V)).exp(), expected, rtol=1e-12, atol=0)


def test_kneser_ney_prefers_a_token_that_follows_many_contexts():
    """Chen and Goodman's point: after an unseen context, p_cont ranks tokens by how many different
    tokens they follow, not by their frequency. 9 occurs 4 times after 1 only; 3 occurs twice, after two
    different tokens."""
    segments = [[1, 9], [1, 9], [1, 9], [1, 9], [2, 3], [4, 3], [5, 6]]
    counts = NGramCounts.fit(segments, 10)
    assert counts.unigram[9] > counts.unigram[3]
    kn, add_one = KneserNeyBigram(counts, discount=0.5), AddKUnigram(counts.unigram)
    unseen = torch.tensor(7)
    assert kn.log_prob(unseen, torch.tensor(3)) > kn.log_prob(unseen, torch.tensor(9))
    assert add_one.log_prob(unseen, torch.tensor(3)) < add_one.log_prob(unseen, torch.tensor(9))
    # p(9 | 1) by hand: 4 distinct bigrams (1 9), (2 3), (4 3), (5 6); 3 tokens (9, 3, 6) follow some token;
    # p_cont(9) = (1 - 0.5) / 4 + 0.5 * 3 / 4 / 10 = 0.1625, p(9 | 1) = (4 - 0.5) / 4 + 0.5 * 1 / 4 * 0.1625
    assert float(kn.log_prob(torch.tensor(1), torch.tensor(9)).exp()) == pytest.approx(0.875 + 0.125 * 0.1625)


def test_most_probable_next_is_the_argmax_by_hand(counts, framing):
    for model, hand in models_and_hand_formulas(counts, framing):
        expected = [max(range(V), key=lambda w: (hand(v, w), -w)) for v in range(V)]  # lowest id among ties
        assert model.most_probable_next(torch.arange(V)).tolist() == expected, type(model).__name__
        assert model.most_probable_next(torch.tensor([[1, 2], [3, 0]])).tolist() == [expected[1:3], [expected[3],
                                                                                                     expected[0]]]


# ------------------------------------------------------------------------------------------ the nll contract


def batch_with_padding():
    ids = torch.tensor([[BOS, 1, 2, 3, 2, EOS], [BOS, 2, 6, EOS, -100, -100], [BOS, 0, 5, 1, 2, 8]])  # (3, 6)
    return ids


def test_next_token_nll_has_the_contract_of_the_gpt_s(counts, framing):
    ids = batch_with_padding()
    for model, hand in models_and_hand_formulas(counts, framing):
        nll, counted = model.next_token_nll(ids)
        assert nll.shape == counted.shape == (3, 5) and nll.dtype == torch.float32 and counted.dtype == torch.bool
        assert counted.tolist() == (ids[:, 1:] != -100).tolist()
        for b in range(3):
            for i in range(5):
                expected = -math.log(hand(int(ids[b, i]), int(ids[b, i + 1]))) if counted[b, i] else 0.0
                assert float(nll[b, i]) == pytest.approx(expected, rel=1e-6), (type(model).__name__, b, i)
        # the same numbers as bertlab.gpt.next_token_nll given the model's log-probabilities as logits
        logits = model.next_token_log_probs(ids.clamp(min=0)).float()  # (3, 6, V)
        gpt_nll, gpt_counted = next_token_nll(logits, ids)
        torch.testing.assert_close(nll, gpt_nll)
        assert torch.equal(counted, gpt_counted)
        # separate labels: the inputs padded with 0, the labels with -100
        padded = ids.masked_fill(ids == -100, 0)
        nll_labels, counted_labels = model.next_token_nll(padded, ids)
        torch.testing.assert_close(nll_labels, nll)
        assert torch.equal(counted_labels, counted)


def test_perplexity_of_a_count_model_is_torchmetrics(counts):
    from torchmetrics.text import Perplexity

    ids = batch_with_padding()
    model = KneserNeyBigram(counts)
    nll, counted = model.next_token_nll(ids)
    metric = Perplexity(ignore_index=-100)
    metric.update(model.next_token_log_probs(ids[:, :-1].clamp(min=0)).float(), ids[:, 1:])
    torch.testing.assert_close(perplexity(nll, counted), metric.compute())


def test_the_perplexity_of_a_uniform_model_is_the_vocabulary_size(counts):
    ids = batch_with_padding()
    uniform = AddKUnigram(torch.zeros(V))  # no counts: (0 + k) / (0 + k V) = 1 / V
    nll, counted = uniform.next_token_nll(ids)
    torch.testing.assert_close(perplexity(nll, counted), torch.tensor(float(V)))
    never_seen = NGramCounts.fit([[1, 2]], V)  # every context of the batch but 1 is unseen: add-k gives 1 / V
    nll, counted = AddKBigram(never_seen).next_token_nll(torch.tensor([[3, 4, 5, 6, 0]]))
    torch.testing.assert_close(perplexity(nll, counted), torch.tensor(float(V)))


@pytest.mark.parametrize("input_ids, labels, message", [
    (torch.tensor([1, 2, 3]), None, r"input_ids must be a \(B, N\) integer tensor, got \(3,\)"),
    (torch.tensor([[1.0, 2.0]]), None, r"input_ids must be a \(B, N\) integer tensor.*float32"),
    (torch.tensor([[1, 2, 3]]), torch.tensor([[1, 2]]),
     r"labels must have the shape of input_ids, \(1, 3\), got \(1, 2\)"),
    (torch.tensor([[1, 2, V]]), None, rf"a counted label is {V}, outside the vocabulary \[0, {V}\)"),
    (torch.tensor([[1, -100, 3]]), None, r"a counted context is -100"),
    (torch.tensor([[1, 2, 3]]), torch.tensor([[1, -7, 3]]), r"a counted label is -7"),
])
def test_next_token_nll_names_bad_input(counts, input_ids, labels, message):
    with pytest.raises(ValueError, match=message):
        KneserNeyBigram(counts).next_token_nll(input_ids, labels)


def test_most_probable_next_names_a_context_outside_the_vocabulary(counts):
    for context in (torch.tensor([1, V]), torch.tensor([-1])):
        with pytest.raises(ValueError, match=rf"a context is {int(context[-1])}, outside the vocabulary \[0, {V}\)"):
            AddKBigram(counts).most_probable_next(context)


def test_models_move_to_a_device_and_score_there(counts, device):
    ids = batch_with_padding()
    for model, _ in models_and_hand_formulas(counts, (BOS, EOS)):
        moved = model.to(device)
        assert isinstance(moved, CountLanguageModel) and moved.device.type == device.type
        nll, counted = moved.next_token_nll(ids.to(device))
        expected, _ = model.next_token_nll(ids)
        torch.testing.assert_close(nll.cpu(), expected)
        assert torch.equal(moved.most_probable_next(ids[:, :-1].clamp(min=0).to(device)).cpu(),
                           model.most_probable_next(ids[:, :-1].clamp(min=0)))


# ------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("segments, vocab_size, framing, error, message", [
    (SEGMENTS, 0, {}, ValueError, r"vocab_size must be a positive integer, got 0"),
    (SEGMENTS, 5, {}, ValueError, r"the segments hold the id 5, outside the vocabulary \[0, 5\)"),
    ([[1, -1]], V, {}, ValueError, r"the segments hold the id -1"),
    (SEGMENTS, V, {"bos_token_id": V}, ValueError,
     rf"bos_token_id must be None or a token id in \[0, vocab_size={V}\)"),
    ([[1.5, 2.0]], V, {}, TypeError, r"segments\[0\] must be a 1-D sequence of integer token ids"),
    ([[[1, 2]]], V, {}, TypeError, r"segments\[0\] must be a 1-D sequence of integer token ids, got shape \(1, 2\)"),
    (["a text"], V, {}, TypeError, r"segments\[0\] must be a sequence of token ids, got a str"),
    (torch.tensor([1, 2]), V, {}, TypeError, r"segments must be PackedSegments or a list of id sequences"),
    ([[1], [2], []], V, {}, ValueError, r"no bigram"),
    (PackedSegments(np.array([1, 2], dtype=np.uint16), np.array([0, 2]), 8, ("a", "b", "c"), True), V, {},
     ValueError, rf"packed with a vocabulary of 3 tokens, not vocab_size={V}"),
])
def test_fit_names_bad_input(segments, vocab_size, framing, error, message):
    with pytest.raises(error, match=message):
        NGramCounts.fit(segments, vocab_size, **framing)


def test_a_single_token_segment_is_a_bigram_once_framed():
    counts = NGramCounts.fit([[1], [2]], V, bos_token_id=BOS, eos_token_id=EOS)
    assert counts.keys.tolist() == sorted([BOS * V + 1, 1 * V + EOS, BOS * V + 2, 2 * V + EOS])


@pytest.mark.parametrize("make, message", [
    (lambda counts: AddKUnigram(counts.unigram, k=0), r"k must be a finite number > 0"),
    (lambda counts: AddKBigram(counts, k=-1.0), r"k must be a finite number > 0"),
    (lambda counts: AddKUnigram(-counts.unigram), r"counts must be a \(V,\) tensor of unigram counts >= 0"),
    (lambda counts: KneserNeyBigram(counts, discount=0.0), r"discount must be in \(0, 1\]"),
    (lambda counts: KneserNeyBigram(counts, discount=1.5), r"discount must be in \(0, 1\]"),
    (lambda counts: KneserNeyBigram(NGramCounts.fit([[1, 2, 1, 2, 1]], V)), r"no n-gram is seen exactly once"),
])
def test_models_name_bad_settings(counts, make, message):
    with pytest.raises(ValueError, match=message):
        make(counts)


# ------------------------------------------------------------------------------------------ distinct-n


def test_distinct_n_is_a_count_by_hand_over_all_samples():
    samples = [["the", "movie", "was", "the", "movie"], ["the", "movie", "ends"], ["ok"]]
    # unigrams: 9 in all; distinct: the, movie, was, ends, ok = 5
    assert distinct_n(samples, 1) == pytest.approx(5 / 9)
    # bigrams: 4 + 2 + 0 = 6; distinct: (the movie), (movie was), (was the), (movie ends) = 4
    assert distinct_n(samples, 2) == pytest.approx(4 / 6)
    # trigrams: 3 + 1 = 4, all different; a corpus-level ratio, not the mean of per-sample ratios
    assert distinct_n(samples, 3) == pytest.approx(4 / 4)
    assert distinct_n([torch.tensor([1, 2, 1, 2]), np.array([1, 2])], 2) == pytest.approx(2 / 4)
    assert distinct_n([[3, 3, 3, 3]], 1) == pytest.approx(1 / 4)


@pytest.mark.parametrize("sequences, n, message", [
    ([[1, 2]], 0, r"n must be an integer >= 1, got 0"),
    ([[1, 2]], 1.5, r"n must be an integer >= 1, got 1.5"),
    ([], 1, r"sequences must be a non-empty list"),
    ("some text", 1, r"sequences must be a non-empty list"),
    (["some text"], 1, r"sequences\[0\] must be a sequence of tokens"),
    ([[1, 2], [3]], 3, r"no sample has n = 3 tokens"),
])
def test_distinct_n_names_bad_input(sequences, n, message):
    with pytest.raises(ValueError, match=message):
        distinct_n(sequences, n)
