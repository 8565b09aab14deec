"""Checks of chapter 11 (GPT), called by the hidden tests of ``chapters/11_gpt``.

Each ``check_<name>(student_fn)`` compares the student's function with ``bertlab.gpt.<name>`` on inputs
drawn from a generator seeded by the exercise's name (and the grading run's seed), lists the typical
mistakes it recognises, and the functions the student's code may not call.
"""

import torch
import torch.nn.functional as F

from autograder.checks.framework import (
    Case,
    Exercise,
    Mistake,
    check_functions,
    generator_for,
    mistakes_told_apart,
    random_choice,
    random_integer,
    random_normal,
)
from autograder.checks.shared_attention import ATTENTION_TOLERANCES
from bertlab import gpt as reference

IGNORE_INDEX = -100
NEG_INF = float("-inf")


# --------------------------------------------------------------------------------------------------
# causal_lm_loss
# --------------------------------------------------------------------------------------------------

CAUSAL_LM_LOSS_FORBIDDEN = (
    reference.causal_lm_loss,
    reference.next_token_nll,
    reference.GPTLMHeadModel.forward,
    "transformers.loss.loss_utils.ForCausalLMLoss",
)


def _random_labels(g: torch.Generator, batch: int, length: int, vocab_size: int) -> torch.Tensor:
    return torch.randint(vocab_size, (batch, length), generator=g)


def causal_lm_loss_cases() -> list[Case]:
    """Logits (B, N, V) and labels (B, N) of drawn sizes: every label counted; padding (-100) at the end of
    some rows and one in the middle; a row with nothing to predict; large logits; bfloat16; N = 2."""
    g = generator_for("causal_lm_loss")

    def sizes(shortest=4):
        return random_integer(g, 2, 4), random_integer(g, shortest, 12), random_integer(g, 10, 60)

    def logits(batch, length, vocab_size, scale=2.0, dtype=torch.float32):
        return random_normal(g, batch, length, vocab_size, scale=scale, dtype=dtype)

    B, N, V = sizes()
    full = (logits(B, N, V), _random_labels(g, B, N, V))
    B, N, V = sizes(shortest=6)
    padded = _random_labels(g, B, N, V)
    for row in range(B):  # rows of drawn lengths, padded after them; row 0 keeps its full length
        length = N if row == 0 else random_integer(g, 2, N - 1)
        padded[row, length:] = IGNORE_INDEX
    padded[0, random_integer(g, 1, N - 2)] = IGNORE_INDEX  # a position left out inside a row
    padded_case = (logits(B, N, V), padded)
    B, N, V = sizes()
    empty_row = _random_labels(g, B, N, V)
    empty_row[-1, 1:] = IGNORE_INDEX  # only its first token, which no position predicts
    empty_row_case = (logits(B, N, V), empty_row)
    B, N, V = sizes()
    huge = (logits(B, N, V, scale=100.0), _random_labels(g, B, N, V))
    B, N, V = sizes()
    half = (logits(B, N, V, dtype=torch.bfloat16), _random_labels(g, B, N, V))
    B, _, V = sizes()
    pairs = (logits(B, 2, V), _random_labels(g, B, 2, V))
    return [
        Case(f"logits {tuple(full[0].shape)}, labels {tuple(full[1].shape)}, every label counted", full),
        Case(f"logits {tuple(padded_case[0].shape)}, labels with -100 after each row's end (padding) and one -100 "
             f"inside row 0", padded_case),
        Case(f"logits {tuple(empty_row_case[0].shape)}, the last row has nothing to predict (labels -100 after its "
             f"first token)", empty_row_case),
        Case(f"logits {tuple(huge[0].shape)} of size about 100 (a naive softmax overflows)", huge),
        Case(f"logits {tuple(half[0].shape)} in bfloat16: the loss is computed in float32", half),
        Case(f"logits {tuple(pairs[0].shape)}: sequences of 2 tokens, one prediction each", pairs),
    ]


def _token_nll(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """-log softmax(logits)[label] at each position (label -100 read as token 0), float32."""
    log_probabilities = logits.float().log_softmax(dim=-1)
    return -log_probabilities.gather(-1, labels.clamp(min=0)[..., None]).squeeze(-1)


def _loss_without_shift(logits, labels):
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE_INDEX)


def _loss_unshifted_slices(keep: slice):
    """Logits and labels of the same positions, ``keep`` of each row: no shift, whatever is sliced off."""

    def causal_lm_loss(logits, labels):
        return F.cross_entropy(logits[:, keep].flatten(0, 1).float(), labels[:, keep].flatten(),
                               ignore_index=IGNORE_INDEX)

    return causal_lm_loss


def _loss_shifted_the_wrong_way(logits, labels):
    return F.cross_entropy(logits[:, 1:].flatten(0, 1).float(), labels[:, :-1].flatten(), ignore_index=IGNORE_INDEX)


def _loss_summed(logits, labels):
    return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=IGNORE_INDEX,
                           reduction="sum")


def _loss_ignored_positions_counted(logits, labels):
    return _token_nll(logits[:, :-1], labels[:, 1:]).mean()


def _loss_mean_over_all_positions(logits, labels):
    counted = labels[:, 1:] != IGNORE_INDEX
    return (_token_nll(logits[:, :-1], labels[:, 1:]) * counted).mean()


def _loss_mean_per_sequence(logits, labels):
    counted = (labels[:, 1:] != IGNORE_INDEX).float()
    per_sequence = (_token_nll(logits[:, :-1], labels[:, 1:]) * counted).sum(-1) / counted.sum(-1)
    return per_sequence.mean()


UNSHIFTED_HINT = ("the logits at position i predict the NEXT token, labels[:, i + 1]: compare logits[:, :-1] with "
                  "labels[:, 1:]. Without the shift each position is scored on its own input token (off by one).")

CAUSAL_LM_LOSS_MISTAKES = (
    Mistake(_loss_without_shift, UNSHIFTED_HINT),
    Mistake(_loss_unshifted_slices(slice(1, None)), UNSHIFTED_HINT),
    Mistake(_loss_unshifted_slices(slice(None, -1)), UNSHIFTED_HINT),
    Mistake(_loss_shifted_the_wrong_way,
            "shift the other way: the logits at i predict the token at i + 1, so drop the LAST position of the "
            "logits (logits[:, :-1]) and the FIRST label (labels[:, 1:]), not logits[:, 1:] with labels[:, :-1]."),
    Mistake(_loss_summed, "take the mean over the predicted tokens, not the sum."),
    Mistake(_loss_ignored_positions_counted,
            "leave the labels -100 (padding) out of the loss: they are not predicted; clamping -100 to token 0 "
            "(or letting the cross-entropy's ignore_index be another value) counts them as predictions."),
    Mistake(_loss_mean_over_all_positions,
            "divide by the number of counted predictions (labels[:, 1:] != -100), not by the number of positions."),
    Mistake(_loss_mean_per_sequence,
            "average over all the counted tokens of the batch together, not per sequence and then over the "
            "sequences (a row with nothing to predict has no mean)."),
)


CAUSAL_LM_LOSS = Exercise("causal_lm_loss", reference.causal_lm_loss, causal_lm_loss_cases,
                          mistakes=CAUSAL_LM_LOSS_MISTAKES, forbidden=CAUSAL_LM_LOSS_FORBIDDEN,
                          summary="""
                          Compare ``causal_lm_loss(logits, labels)`` with :func:`bertlab.gpt.causal_lm_loss`.

                          Cases: logits (B, N, V) and labels (B, N) of drawn sizes; every label counted; padding
                          (-100) after each row's end and inside a row; a row with nothing to predict; logits of
                          about 100; bfloat16 logits (the loss in float32); N = 2. Tolerance: the framework's
                          defaults (float32: atol 1e-5, rtol 1e-4). Forbidden: the reference,
                          :func:`bertlab.gpt.next_token_nll`, the model's forward and Hugging Face's causal-LM loss;
                          ``F.cross_entropy`` is allowed.
                          """)


# --------------------------------------------------------------------------------------------------
# perplexity
# --------------------------------------------------------------------------------------------------

PERPLEXITY_FORBIDDEN = (
    reference.perplexity,
    "torchmetrics.text.perplexity.Perplexity.update",
    "torchmetrics.functional.text.perplexity.perplexity",
)


def _nll_and_counted(g: torch.Generator, shape: tuple[int, ...], share: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Negative log-likelihoods in nats (|N(0, 2^2)|, 0 where not counted, as ``next_token_nll`` returns
    them) and which are counted, about ``share`` of them, at least one in every row."""
    nll = random_normal(g, *shape, scale=2.0).abs()
    counted = torch.rand(shape, generator=g) < share
    counted.view(-1, shape[-1])[:, 0] = True
    return nll.masked_fill(~counted, 0.0), counted


def perplexity_cases() -> list[Case]:
    """nll (B, N) and counted of drawn sizes: rows with different numbers of counted tokens; counted None;
    a single text (N,); a row with no counted token; values left where not counted; a uniform guess."""
    g = generator_for("perplexity")

    def shape():
        return random_integer(g, 2, 5), random_integer(g, 4, 16)

    uneven = _nll_and_counted(g, shape(), 0.6)
    # rows of equal counts give the row-wise mistakes the right answer: draw again until each mistake shows
    while not mistakes_told_apart(Case("", uneven), (Mistake(reference.perplexity, ""), *PERPLEXITY_MISTAKES)):
        uneven = _nll_and_counted(g, shape(), 0.6)
    everything = random_normal(g, *shape(), scale=2.0).abs()
    text = _nll_and_counted(g, (random_integer(g, 5, 40),), 0.8)
    nll, counted = _nll_and_counted(g, shape(), 0.7)
    counted[-1] = False  # a row with nothing counted
    with_empty_row = (nll.masked_fill(~counted, 0.0), counted)
    nll, counted = _nll_and_counted(g, shape(), 0.5)
    garbage = nll.where(counted, random_normal(g, *nll.shape, scale=5.0).abs())  # whatever nll holds there
    vocab_size = random_integer(g, 5, 50_000)
    uniform = torch.full(shape(), float(torch.tensor(vocab_size, dtype=torch.float64).log()))
    return [
        Case(f"nll {tuple(uneven[0].shape)}, counted with {uneven[1].sum(-1).tolist()} tokens in the rows", uneven),
        Case(f"nll {tuple(everything.shape)}, counted=None (every token)", (everything,)),
        Case(f"nll {tuple(text[0].shape)}: one text", text),
        Case(f"nll {tuple(with_empty_row[0].shape)}, the last row has no counted token", with_empty_row),
        Case(f"nll {tuple(garbage.shape)} holding values where counted is False (they are left out)",
             (garbage, counted)),
        Case(f"nll {tuple(uniform.shape)} all log {vocab_size}: a uniform guess over {vocab_size} tokens",
             (uniform,)),
    ]


def _counted_or_all(nll, counted):
    return torch.ones_like(nll, dtype=torch.bool) if counted is None else counted


def _perplexity_of_the_sum(nll, counted=None):
    return nll.float()[_counted_or_all(nll, counted)].sum().exp()


def _perplexity_mean_over_all_positions(nll, counted=None):
    return nll.float().mean().exp()


def _perplexity_mean_over_rows(nll, counted=None):
    counted = _counted_or_all(nll, counted).float()
    per_row = ((nll.float() * counted).sum(-1) / counted.sum(-1)).exp()
    return per_row.mean()


def _perplexity_base_2(nll, counted=None):
    return 2 ** nll.float()[_counted_or_all(nll, counted)].mean()


def _perplexity_mean_of_row_means(nll, counted=None):
    counted = _counted_or_all(nll, counted).float()
    return ((nll.float() * counted).sum(-1) / counted.sum(-1)).mean().exp()


def _perplexity_without_exp(nll, counted=None):
    return nll.float()[_counted_or_all(nll, counted)].mean()


PERPLEXITY_MISTAKES = (
    Mistake(_perplexity_of_the_sum,
            "take e to the MEAN negative log-likelihood per token, not to the summed loss (which grows with the "
            "length of the text)."),
    Mistake(_perplexity_mean_over_all_positions,
            "average over the counted tokens only (nll[counted]): the positions where counted is False are not "
            "predictions."),
    Mistake(_perplexity_mean_over_rows,
            "take one mean over all the counted tokens, then e to it: the mean of per-row perplexities is another "
            "number (and a row with no counted token has none)."),
    Mistake(_perplexity_mean_of_row_means,
            "average over all the counted tokens at once, not per row then over the rows: rows with more "
            "tokens weigh more."),
    Mistake(_perplexity_base_2,
            "the nll is in nats (natural logarithms), so the perplexity is e to its mean, not 2 to it."),
    Mistake(_perplexity_without_exp, "perplexity is e to the mean nll (torch.exp), not the mean nll itself."),
)


PERPLEXITY = Exercise("perplexity", reference.perplexity, perplexity_cases, mistakes=PERPLEXITY_MISTAKES,
                      forbidden=PERPLEXITY_FORBIDDEN,
                      summary="""
                      Compare ``perplexity(nll, counted=None)`` with :func:`bertlab.gpt.perplexity`.

                      Cases: nll (B, N) and (N,) of drawn sizes; rows with different numbers of counted tokens;
                      counted None; a row with no counted token; values where counted is False; a uniform guess
                      (perplexity V). Tolerance: the framework's defaults (float32: atol 1e-5, rtol 1e-4).
                      Forbidden: the reference and torchmetrics' perplexity.
                      """)


# --------------------------------------------------------------------------------------------------
# top_p_filter
# --------------------------------------------------------------------------------------------------

TOP_P_FILTER_FORBIDDEN = (
    reference.top_p_filter,
    reference.filter_logits,
    reference.next_token,
    "transformers.generation.logits_process.TopPLogitsWarper.__call__",
)


def _nucleus_edge_in_a_tie(g: torch.Generator) -> tuple[torch.Tensor, float]:
    """Logits (V,) with one top token, a group of tied tokens at drawn ids and lower ones, and p halfway inside
    the tied group's probability: the edge of the nucleus splits the tied group."""
    tied, rest = random_integer(g, 3, 6), random_integer(g, 2, 6)
    values = torch.cat([torch.tensor([3.0]), torch.full((tied,), 2.0), random_normal(g, rest, shift=-1.0)])
    order = torch.randperm(len(values), generator=g)
    probabilities = values.softmax(-1)
    inside = random_integer(g, 0, tied - 2)  # the nucleus ends inside the group, after `inside` + 1 of its tokens
    p = float(probabilities[0] + (inside + 0.5) * probabilities[1])
    return values[order], round(p, 6)


def top_p_filter_cases() -> list[Case]:
    """Logits of drawn sizes and drawn p: the top token above p; (B, V) rows; the nucleus's edge inside a
    group of tied tokens; p = 1 with -inf logits; float64 and bfloat16 in 3-D; V = 1; logits of about 100."""
    g = generator_for("top_p_filter")

    def p_between(low, high):
        return round(low + (high - low) * float(torch.rand((), generator=g)), 4)

    peaked = random_normal(g, random_integer(g, 6, 20))
    peaked[random_integer(g, 0, len(peaked) - 1)] = 6.0  # the top token's probability is above 0.7
    rows = random_normal(g, random_integer(g, 2, 5), random_integer(g, 8, 40), scale=2.0)
    tie, tie_p = _nucleus_edge_in_a_tie(g)
    filtered = random_normal(g, random_integer(g, 2, 4), random_integer(g, 6, 20), scale=2.0)
    filtered[filtered < filtered.median(dim=-1, keepdim=True).values] = NEG_INF  # half of each row already dropped
    shape = (random_integer(g, 2, 3), random_integer(g, 2, 3), random_integer(g, 10, 30))
    doubles = random_normal(g, *shape, scale=2.0, dtype=torch.float64)
    halves = random_normal(g, *shape, scale=2.0, dtype=torch.bfloat16)
    return [
        Case(f"logits {tuple(peaked.shape)}, the most probable token's probability above p", (peaked,),
             {"p": p_between(0.2, 0.6)}),
        Case(f"logits {tuple(rows.shape)} (a batch of rows)", (rows,), {"p": p_between(0.3, 0.95)}),
        Case(f"logits {tuple(tie.shape)} in which the nucleus's edge falls inside a group of tied tokens: the "
             f"lower ids of the group are dropped first", (tie,), {"p": tie_p}),
        Case(f"logits {tuple(filtered.shape)} with -inf entries (already filtered), p = 1", (filtered,), {"p": 1.0}),
        Case(f"logits {shape}, float64", (doubles,), {"p": p_between(0.3, 0.95)}),
        Case(f"logits {shape}, bfloat16", (halves,), {"p": p_between(0.3, 0.95)}),
        Case("logits (1,): a vocabulary of one token", (random_normal(g, 1),), {"p": p_between(0.1, 0.9)}),
        Case(f"logits {tuple(rows.shape)} of size about 100", (random_normal(g, *rows.shape, scale=100.0),),
             {"p": p_between(0.3, 0.95)}),
    ]


def _descending(logits: torch.Tensor, *, stable: bool = True):
    """(probabilities sorted in decreasing order, their cumulative sums, the order), ties by increasing id."""
    probabilities = logits.float().softmax(dim=-1)
    sorted_probabilities, order = probabilities.sort(dim=-1, descending=True, stable=stable)
    return sorted_probabilities, sorted_probabilities.cumsum(dim=-1), order


def _drop_sorted(logits: torch.Tensor, remove: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """-inf at the tokens whose place in ``order`` is marked in ``remove``."""
    return logits.masked_fill(torch.zeros_like(remove).scatter(-1, order, remove), NEG_INF)


def _top_p_dropping_the_crossing_token(logits, p):
    _, cumulative, order = _descending(logits)
    remove = cumulative > p
    remove[..., 0] = False
    return _drop_sorted(logits, remove, order)


def _top_p_without_the_top_token(logits, p):
    _, cumulative, order = _descending(logits)
    return _drop_sorted(logits, cumulative > p, order)


def _top_p_one_token_too_many(logits, p):
    sorted_probabilities, cumulative, order = _descending(logits)
    before = cumulative - sorted_probabilities  # the probability of the more probable tokens
    remove = torch.cat([torch.zeros_like(before[..., :1], dtype=torch.bool), before[..., :-1] >= p], dim=-1)
    return _drop_sorted(logits, remove, order)


def _top_p_sorted_the_wrong_way(logits, p):
    probabilities = logits.float().softmax(dim=-1)
    sorted_probabilities, order = probabilities.sort(dim=-1, stable=True)  # increasing: the least probable first
    before = sorted_probabilities.cumsum(dim=-1) - sorted_probabilities
    return _drop_sorted(logits, before >= p, order)


def _top_p_ties_the_other_way(logits, p):
    sorted_probabilities, cumulative, order = _descending(logits)
    return _drop_sorted(logits, cumulative - sorted_probabilities >= p, order)


def _top_p_softmax_over_the_first_axis(logits, p):
    sorted_logits, order = logits.sort(dim=-1, stable=True)
    tail = sorted_logits.float().softmax(dim=0).cumsum(dim=-1) <= 1 - p
    tail[..., -1] = False
    return logits.masked_fill(torch.zeros_like(tail).scatter(-1, order, tail), NEG_INF)


def _top_p_probabilities(logits, p):
    return reference.top_p_filter(logits, p).float().softmax(dim=-1).to(logits.dtype)


def _top_p_zeros(logits, p):
    kept = torch.isfinite(reference.top_p_filter(logits, p))
    return logits.masked_fill(~kept, 0.0)


TOP_P_FILTER_MISTAKES = (
    Mistake(_top_p_dropping_the_crossing_token,
            "keep the token that crosses p: the nucleus is the SMALLEST set of most probable tokens whose "
            "probability REACHES p, so the token that takes the cumulative probability past p belongs to it. "
            "Keeping only the tokens whose cumulative probability stays below p leaves the nucleus short of p."),
    Mistake(_top_p_without_the_top_token,
            "always keep the most probable token: when its probability alone is above p, it is the nucleus "
            "(your filter dropped every token, and sampling from all -inf gives NaN)."),
    Mistake(_top_p_one_token_too_many,
            "you keep one token too many: stop at the token that takes the cumulative probability to p or past "
            "it; the next one is dropped."),
    Mistake(_top_p_sorted_the_wrong_way,
            "sort the tokens from the MOST probable down (or drop from the least probable up, as long as the "
            "dropped ones hold at most 1 - p): your nucleus holds the least probable tokens."),
    Mistake(_top_p_ties_the_other_way,
            "the tokens are right but for a tie at the nucleus's edge: of tied tokens, the reference drops the "
            "one with the LOWER id first (a stable sort in increasing order, as Hugging Face's TopPLogitsWarper). "
            "Sort with logits.sort(dim=-1, stable=True), drop while the cumulative probability is <= 1 - p."),
    Mistake(_top_p_softmax_over_the_first_axis,
            "the probabilities are over the vocabulary, the last axis: softmax(dim=-1), not over the rows of the "
            "batch (dim 0)."),
    Mistake(_top_p_probabilities,
            "return logits, with -inf for the dropped tokens, not probabilities: sampling applies the softmax."),
    Mistake(_top_p_zeros,
            "set the dropped tokens' logits to -inf (probability e^-inf = 0), not to 0, which still gives them "
            "probability."),
)


TOP_P_FILTER = Exercise("top_p_filter", reference.top_p_filter, top_p_filter_cases, mistakes=TOP_P_FILTER_MISTAKES,
                        forbidden=TOP_P_FILTER_FORBIDDEN,
                        summary="""
                        Compare ``top_p_filter(logits, p)`` with :func:`bertlab.gpt.top_p_filter`.

                        Cases: logits (V,), (B, V) and (B, H, V) of drawn sizes and p: the most probable token's
                        probability above p; the nucleus's edge inside a group of tied tokens (the lower ids
                        dropped first); p = 1 with -inf logits; float64 and bfloat16; V = 1; logits of about 100.
                        The same tokens must be -inf; the kept logits within the framework's defaults. Forbidden:
                        the reference, :func:`bertlab.gpt.filter_logits` and ``next_token``, and Hugging Face's
                        ``TopPLogitsWarper``.
                        """)


# --------------------------------------------------------------------------------------------------
# attend_with_cache
# --------------------------------------------------------------------------------------------------

ATTEND_WITH_CACHE_FORBIDDEN = (
    reference.attend_with_cache,
    reference.GPTAttention.forward,
    "transformers.cache_utils.DynamicLayer.update",
    "transformers.cache_utils.DynamicCache.update",
)


def attend_with_cache_cases() -> list[Case]:
    """q, k, v (B, H, N, D) and a cache (B, H, P, D) of drawn sizes: one new token after P >= 2 cached
    positions; the prompt with an empty cache; a chunk of N > 1 after P != N; a padding mask; float64;
    bfloat16."""
    g = generator_for("attend_with_cache")

    def step(new, past, dtype=torch.float32):
        B, H, D = random_integer(g, 1, 3), random_integer(g, 1, 4), random_choice(g, [4, 8, 16])
        q, k, v = (random_normal(g, B, H, new, D, dtype=dtype) for _ in range(3))
        cache_k, cache_v = (random_normal(g, B, H, past, D, dtype=dtype) for _ in range(2))
        return q, k, v, cache_k, cache_v

    def shapes(args):
        return f"q, k, v {tuple(args[0].shape)}, cache_k, cache_v {tuple(args[3].shape)}"

    one = step(1, random_integer(g, 2, 12))
    prompt = step(random_integer(g, 3, 8), 0)
    chunk_new = random_integer(g, 2, 5)
    chunk = step(chunk_new, chunk_new + random_integer(g, 1, 8))
    padded = step(random_integer(g, 1, 3), random_integer(g, 4, 10))
    total = padded[3].shape[-2] + padded[0].shape[-2]
    real = torch.rand(padded[0].shape[0], 1, 1, total, generator=g) < 0.7  # (B, 1, 1, P + N)
    real[..., 0] = True  # every query sees at least one key
    doubles = step(random_integer(g, 2, 4), random_integer(g, 5, 9), torch.float64)
    halves = step(1, random_integer(g, 2, 9), torch.bfloat16)
    return [
        Case(f"{shapes(one)}: one new token after {one[3].shape[-2]} cached positions", one),
        Case(f"{shapes(prompt)}: the prompt, an empty cache (P = 0)", prompt),
        Case(f"{shapes(chunk)}: {chunk_new} new tokens after {chunk[3].shape[-2]} cached positions", chunk),
        Case(f"{shapes(padded)}, a padding mask {tuple(real.shape)}", padded, {"mask": real}),
        Case(f"{shapes(doubles)}, float64", doubles),
        Case(f"{shapes(halves)}, bfloat16", halves),
    ]


def _cached_attention(keys_first=True, causal="bottom_right", attend_to_new=True, use_mask=True, axis=-2,
                      return_new=False):
    """A wrong cached step: the keys appended along ``axis``, old before new (``keys_first``) or after, a causal
    mask aligned ``causal`` ("bottom_right" is right, "top_left", "new_only", "none"), the new keys attended
    to or not, the mask used or not, and the extended keys returned or only the new ones."""

    def attend_with_cache(q, k, v, cache_k, cache_v, mask=None):
        pair = (lambda old, new: [old, new]) if keys_first else (lambda old, new: [new, old])
        keys, values = torch.cat(pair(cache_k, k), dim=axis), torch.cat(pair(cache_v, v), dim=axis)
        past, new = cache_k.shape[-2], q.shape[-2]
        allowed = {
            "bottom_right": torch.ones(new, past + new, dtype=torch.bool).tril(diagonal=past),
            "top_left": torch.ones(new, past + new, dtype=torch.bool).tril(),
            "new_only": torch.cat([torch.zeros(new, past, dtype=torch.bool),
                                   torch.ones(new, new, dtype=torch.bool).tril()], dim=-1),
            "none": torch.ones(new, past + new, dtype=torch.bool),
        }[causal]
        if mask is not None and use_mask:
            allowed = allowed & mask
        attended_keys, attended_values = (keys, values) if attend_to_new else (cache_k, cache_v)
        if not attend_to_new:
            allowed = allowed[..., :past]
        scores = q.float() @ attended_keys.float().transpose(-2, -1) / q.shape[-1] ** 0.5
        weights = scores.masked_fill(~allowed, NEG_INF).softmax(dim=-1).nan_to_num()
        output = (weights @ attended_values.float()).to(q.dtype)
        return (output, k, v) if return_new else (output, keys, values)

    return attend_with_cache


ATTEND_WITH_CACHE_MISTAKES = (
    Mistake(_cached_attention(axis=1),
            "append the new keys and values along the positions, dim -2 of (B, H, P, D): "
            "torch.cat([cache_k, k], dim=-2), not along the heads (dim 1)."),
    Mistake(_cached_attention(axis=-1),
            "append the new keys and values along the positions, dim -2 of (B, H, P, D): "
            "torch.cat([cache_k, k], dim=-2), not along the head size (dim -1)."),
    Mistake(_cached_attention(attend_to_new=False),
            "attend over the cached keys AND the new ones: a new token sees itself (and the new tokens "
            "before it), so concatenate first, then attend over all P + N keys."),
    Mistake(_cached_attention(causal="top_left"),
            "align the causal mask bottom-right: new position i is absolute position P + i, so it sees keys "
            "j <= P + i, all the cached ones included: tril(diagonal=P). A mask aligned top-left "
            "(tril() of (N, P + N), or is_causal=True) hides the cache from the new tokens."),
    Mistake(_cached_attention(causal="new_only"),
            "the cached positions are all in the past of every new token: they may all be attended. Only the "
            "new tokens after position P + i are masked (tril(diagonal=P) over the P + N keys)."),
    Mistake(_cached_attention(causal="none"),
            "with more than one new token, mask the future: new token i must not see the new tokens after it "
            "(a causal mask over the P + N keys, tril(diagonal=P)); only for N = 1 is there nothing to mask."),
    Mistake(_cached_attention(keys_first=False),
            "append the new keys and values AFTER the cached ones, torch.cat([cache_k, k], dim=-2): the "
            "positions stay in order, so that the next step's causal mask and cache are right."),
    Mistake(_cached_attention(use_mask=False),
            "combine `mask` (True = may attend, e.g. padding) with the causal mask (&), so that the masked "
            "keys get no weight."),
    Mistake(_cached_attention(return_new=True),
            "return the EXTENDED keys and values, (B, H, P + N, D): they are the cache of the next step."),
)


ATTEND_WITH_CACHE = Exercise("attend_with_cache", reference.attend_with_cache, attend_with_cache_cases,
                             mistakes=ATTEND_WITH_CACHE_MISTAKES, forbidden=ATTEND_WITH_CACHE_FORBIDDEN,
                             tolerance=ATTENTION_TOLERANCES, output_names=("output", "keys", "values"),
                             parameter_names=("q", "k", "v", "cache_k", "cache_v", "mask"),
                             summary="""
                             Compare ``attend_with_cache(q, k, v, cache_k, cache_v, mask=None)`` with
                             :func:`bertlab.gpt.attend_with_cache`: the output and the extended keys and values.

                             Cases of drawn sizes: one new token after P >= 2 cached positions; the prompt with an
                             empty cache; N > 1 new tokens after P != N; a padding mask; float64; bfloat16.
                             Tolerance: float32 atol 2e-5, rtol 2e-4; otherwise the defaults. Forbidden: the
                             reference, ``GPTAttention.forward`` and Hugging Face's caches; the attention functions
                             (``F.scaled_dot_product_attention``, chapter 01's) are allowed.
                             """)


#: The chapter whose exercises this module checks, and their records, in the order of the chapter.
CHAPTER = "11_gpt"


__getattr__ = check_functions(globals())  # check_<name> for each record above
