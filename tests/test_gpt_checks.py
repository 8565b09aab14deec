"""Mutation tests of chapter 11's checks (autograder/checks/gpt.py).

For every exercise: the check accepts the solution of the solution notebook, other correct
implementations and (with the forbid-rule lifted) the reference; it rejects typical wrong
implementations, written the way students write them, each with the hint that explains it; and calling
the reference or a library function that does the exercise's job fails with "implement this yourself",
however it was reached.
"""

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import bertlab.attention
import bertlab.gpt
from autograder.checks import gpt as checks
from bertlab.gpt import top_p_filter as captured_top_p_filter
from checks_helpers import MutationTests, run_solution_cells

SOLUTION = Path(__file__).resolve().parents[1] / "solutions" / "11_gpt" / "11_gpt.ipynb"
NEG_INF = float("-inf")


@pytest.fixture(scope="module")
def solution_namespace():
    """The functions defined by the solution cells of the solution notebook, executed together."""
    return run_solution_cells(SOLUTION, {"torch": torch, "math": math, "F": F})


# --------------------------------------------------------------------------------------------------
# causal_lm_loss
# --------------------------------------------------------------------------------------------------


def loss_off_by_one(logits, labels):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1))


def loss_shifted_backwards(logits, labels):
    return F.cross_entropy(logits[:, 1:].reshape(-1, logits.shape[-1]).float(), labels[:, :-1].reshape(-1))


def loss_padding_read_as_token_zero(logits, labels):
    log_probabilities = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    targets = labels[:, 1:].clamp(min=0)
    return -log_probabilities.gather(-1, targets.unsqueeze(-1)).mean()


def loss_summed(logits, labels):
    log_probabilities = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    targets = labels[:, 1:]
    keep = targets != -100
    return -log_probabilities[keep].gather(-1, targets[keep].unsqueeze(-1)).sum()


def loss_with_logsumexp(logits, labels):
    """The loss written out: logsumexp minus the label's logit, over the predicted tokens."""
    predicting, targets = logits[:, :-1].float(), labels[:, 1:]
    keep = targets != -100
    picked = predicting[keep].gather(-1, targets[keep][:, None]).squeeze(-1)
    return (torch.logsumexp(predicting[keep], dim=-1) - picked).mean()


def loss_with_a_loop(logits, labels):
    terms = [-torch.log_softmax(logits[b, i].float(), dim=-1)[labels[b, i + 1]]
             for b in range(labels.shape[0]) for i in range(labels.shape[1] - 1) if labels[b, i + 1] != -100]
    return torch.stack(terms).mean()


def loss_with_the_reference_inside(logits, labels):
    return bertlab.gpt.causal_lm_loss(logits, labels)


def loss_with_next_token_nll(logits, labels):
    nll, counted = bertlab.gpt.next_token_nll(logits, labels)
    return nll[counted].mean()


def loss_with_hugging_face(logits, labels):
    from transformers.loss.loss_utils import ForCausalLMLoss

    return ForCausalLMLoss(logits, labels, vocab_size=logits.shape[-1])


# --------------------------------------------------------------------------------------------------
# perplexity
# --------------------------------------------------------------------------------------------------


def perplexity_of_the_total(nll, counted=None):
    counted = torch.ones_like(nll, dtype=torch.bool) if counted is None else counted
    return torch.exp(nll[counted].sum()).float()


def perplexity_ignoring_counted(nll, counted=None):
    return torch.exp(nll.float().mean())


def perplexity_per_row(nll, counted=None):
    counted = torch.ones_like(nll, dtype=torch.bool) if counted is None else counted
    rows = [torch.exp(row[keep].mean()) for row, keep in zip(nll.float().reshape(-1, nll.shape[-1]),
                                                            counted.reshape(-1, nll.shape[-1]))]
    return torch.stack(rows).mean()


def perplexity_in_bits(nll, counted=None):
    counted = torch.ones_like(nll, dtype=torch.bool) if counted is None else counted
    return torch.pow(2.0, nll.float()[counted].mean())


def perplexity_by_sums(nll, counted=None):
    counted = torch.ones_like(nll, dtype=torch.bool) if counted is None else counted
    return torch.exp((nll.float() * counted).sum() / counted.sum())


def perplexity_with_torchmetrics(nll, counted=None):
    from torchmetrics.functional.text.perplexity import perplexity

    counted = torch.ones_like(nll, dtype=torch.bool) if counted is None else counted
    fake_logits = torch.stack([-nll, torch.zeros_like(nll)], dim=-1)[None]  # not the job: the call is what's caught
    return perplexity(fake_logits, torch.zeros_like(nll, dtype=torch.long)[None])


# --------------------------------------------------------------------------------------------------
# top_p_filter
# --------------------------------------------------------------------------------------------------


def descending(logits):
    probabilities = torch.softmax(logits.float(), dim=-1)
    sorted_probabilities, order = torch.sort(probabilities, dim=-1, descending=True, stable=True)
    return sorted_probabilities, torch.cumsum(sorted_probabilities, dim=-1), order


def drop(logits, remove_sorted, order):
    remove = torch.zeros_like(remove_sorted).scatter(-1, order, remove_sorted)
    return logits.masked_fill(remove, NEG_INF)


def top_p_below_p_only(logits, p):
    _, cumulative, order = descending(logits)
    remove = cumulative >= p
    remove[..., 0] = False
    return drop(logits, remove, order)


def top_p_no_shift(logits, p):
    _, cumulative, order = descending(logits)
    return drop(logits, cumulative > p, order)


def top_p_plus_one(logits, p):
    sorted_probabilities, cumulative, order = descending(logits)
    remove = torch.zeros_like(cumulative, dtype=torch.bool)
    remove[..., 2:] = (cumulative - sorted_probabilities)[..., 1:-1] >= p
    return drop(logits, remove, order)


def top_p_ascending_cumsum(logits, p):
    probabilities = torch.softmax(logits.float(), dim=-1)
    sorted_probabilities, order = torch.sort(probabilities, dim=-1)
    return drop(logits, torch.cumsum(sorted_probabilities, dim=-1) - sorted_probabilities >= p, order)


def top_p_descending_ties(logits, p):
    """Right but for ties: a descending sort keeps the lower ids of a tie."""
    sorted_probabilities, cumulative, order = descending(logits)
    return drop(logits, cumulative - sorted_probabilities >= p, order)


def top_p_like_hugging_face(logits, p):
    """The reference's rule written with a loop over the rows and the scatter done by indexing."""
    flat = logits.reshape(-1, logits.shape[-1])
    rows = []
    for row in flat:
        sorted_logits, order = torch.sort(row, stable=True)
        dropped = torch.cumsum(torch.softmax(sorted_logits.float(), dim=-1), dim=-1) <= 1 - p
        dropped[-1] = False
        out = row.clone()
        out[order[dropped]] = NEG_INF
        rows.append(out)
    return torch.stack(rows).reshape(logits.shape)


def top_p_with_the_reference(logits, p):
    return captured_top_p_filter(logits, p)


def top_p_through_filter_logits(logits, p):
    return bertlab.gpt.filter_logits(logits, top_p=p)


def top_p_with_hugging_face(logits, p):
    from transformers.generation.logits_process import TopPLogitsWarper

    return TopPLogitsWarper(p)(None, logits.reshape(-1, logits.shape[-1])).reshape(logits.shape)


# --------------------------------------------------------------------------------------------------
# attend_with_cache
# --------------------------------------------------------------------------------------------------


def cached_attention(q, keys, values, allowed):
    scores = (q @ keys.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    return torch.softmax(scores.masked_fill(~allowed, NEG_INF), dim=-1) @ values


def cache_on_the_heads(q, k, v, cache_k, cache_v, mask=None):
    keys, values = torch.cat((cache_k, k), 1), torch.cat((cache_v, v), 1)
    past, new = cache_k.shape[2], q.shape[2]
    allowed = torch.ones(new, past + new, dtype=torch.bool).tril(past)
    return cached_attention(q, keys, values, allowed if mask is None else allowed & mask), keys, values


def cache_on_the_features(q, k, v, cache_k, cache_v, mask=None):
    keys, values = torch.cat([cache_k, k], dim=-1), torch.cat([cache_v, v], dim=-1)
    return F.scaled_dot_product_attention(q, keys, values), keys, values


def cache_without_the_new_keys(q, k, v, cache_k, cache_v, mask=None):
    keys, values = torch.cat([cache_k, k], dim=2), torch.cat([cache_v, v], dim=2)
    if cache_k.shape[2] == 0:
        return torch.zeros_like(q), keys, values
    allowed = torch.ones(q.shape[2], cache_k.shape[2], dtype=torch.bool)
    if mask is not None:
        allowed = allowed & mask[..., :cache_k.shape[2]]
    return cached_attention(q, cache_k, cache_v, allowed), keys, values


def cache_with_is_causal(q, k, v, cache_k, cache_v, mask=None):
    keys, values = torch.cat([cache_k, k], dim=-2), torch.cat([cache_v, v], dim=-2)
    if mask is None:
        return F.scaled_dot_product_attention(q, keys, values, is_causal=True), keys, values
    allowed = bertlab.attention.causal_mask(q.shape[-2], keys.shape[-2]) & mask
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=allowed), keys, values


def cache_causal_over_new_only(q, k, v, cache_k, cache_v, mask=None):
    keys, values = torch.cat([cache_k, k], dim=-2), torch.cat([cache_v, v], dim=-2)
    past, new = cache_k.shape[-2], q.shape[-2]
    allowed = torch.zeros(new, past + new, dtype=torch.bool)
    allowed[:, past:] = torch.ones(new, new, dtype=torch.bool).tril()
    return cached_attention(q, keys, values, allowed if mask is None else allowed & mask), keys, values


def cache_without_causal_mask(q, k, v, cache_k, cache_v, mask=None):
    keys, values = torch.cat([cache_k, k], dim=-2), torch.cat([cache_v, v], dim=-2)
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask), keys, values


def cache_new_first(q, k, v, cache_k, cache_v, mask=None):
    keys, values = torch.cat([k, cache_k], dim=-2), torch.cat([v, cache_v], dim=-2)
    past, new = cache_k.shape[-2], q.shape[-2]
    allowed = torch.ones(new, past + new, dtype=torch.bool).tril(past)
    return cached_attention(q, keys, values, allowed if mask is None else allowed & mask), keys, values


def cache_with_sdpa(q, k, v, cache_k, cache_v, mask=None):
    """Correct: PyTorch's attention with the bottom-right causal mask written as an index comparison."""
    keys, values = torch.cat([cache_k, k], dim=-2), torch.cat([cache_v, v], dim=-2)
    past, new = cache_k.shape[-2], q.shape[-2]
    allowed = torch.arange(past + new)[None, :] <= past + torch.arange(new)[:, None]  # (N, P + N)
    if mask is not None:
        allowed = allowed & mask
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=allowed), keys, values


def cache_with_the_model_layer(q, k, v, cache_k, cache_v, mask=None):
    return bertlab.gpt.attend_with_cache(q, k, v, cache_k, cache_v, mask)


def cache_with_hugging_face(q, k, v, cache_k, cache_v, mask=None):
    from transformers.cache_utils import DynamicCache

    cache = DynamicCache()
    cache.update(cache_k, cache_v, 0)
    keys, values = cache.update(k, v, 0)
    return cache_with_sdpa(q, k, v, cache_k, cache_v, mask)[0], keys, values


class TestGPTChecks(MutationTests):
    """The shared mutation tests (tests/checks_helpers.py) of this chapter's checks."""

    checks = checks
    references = {
        "causal_lm_loss": bertlab.gpt.causal_lm_loss,
        "perplexity": bertlab.gpt.perplexity,
        "top_p_filter": bertlab.gpt.top_p_filter,
        "attend_with_cache": bertlab.gpt.attend_with_cache,
    }
    mutants = {
        "causal_lm_loss": [
            (loss_off_by_one, "predict the NEXT token"),
            (loss_shifted_backwards, "shift the other way"),
            (loss_padding_read_as_token_zero, "leave the labels -100 (padding) out of the loss"),
            (loss_summed, "not the sum"),
        ],
        "perplexity": [
            (perplexity_of_the_total, "not to the summed loss"),
            (perplexity_ignoring_counted, "average over the counted tokens only"),
            (perplexity_per_row, "the mean of per-row perplexities is another number"),
            (perplexity_in_bits, "not 2 to it"),
        ],
        "top_p_filter": [
            (top_p_below_p_only, "keep the token that crosses p"),
            (top_p_no_shift, "always keep the most probable token"),
            (top_p_plus_one, "one token too many"),
            (top_p_ascending_cumsum, "sort the tokens from the MOST probable down"),
            (top_p_descending_ties, "drops the one with the LOWER id first"),
        ],
        "attend_with_cache": [
            (cache_on_the_heads, "not along the heads (dim 1)"),
            (cache_on_the_features, "not along the head size (dim -1)"),
            (cache_without_the_new_keys, "attend over the cached keys AND the new ones"),
            (cache_with_is_causal, "align the causal mask bottom-right"),
            (cache_causal_over_new_only, "they may all be attended"),
            (cache_without_causal_mask, "mask the future"),
            (cache_new_first, "AFTER the cached ones"),
        ],
    }
    alternatives = {
        "causal_lm_loss": [loss_with_logsumexp, loss_with_a_loop],
        "perplexity": [perplexity_by_sums],
        "top_p_filter": [top_p_like_hugging_face],
        "attend_with_cache": [cache_with_sdpa],
    }
    cheats = [
        ("causal_lm_loss", loss_with_the_reference_inside, "bertlab.gpt.causal_lm_loss"),
        ("causal_lm_loss", loss_with_next_token_nll, "bertlab.gpt.next_token_nll"),
        ("causal_lm_loss", loss_with_hugging_face, "ForCausalLMLoss"),
        ("perplexity", perplexity_with_torchmetrics, "torchmetrics.functional.text.perplexity.perplexity"),
        ("top_p_filter", top_p_with_the_reference, "bertlab.gpt.top_p_filter"),
        ("top_p_filter", top_p_through_filter_logits, "bertlab.gpt.filter_logits"),
        ("top_p_filter", top_p_with_hugging_face, "TopPLogitsWarper.__call__"),
        ("attend_with_cache", cache_with_the_model_layer, "bertlab.gpt.attend_with_cache"),
        ("attend_with_cache", cache_with_hugging_face, "DynamicLayer.update"),
    ]


def test_top_p_ties_are_split_by_id_as_the_exercise_states():
    """The case of a tie at the nucleus's edge: the reference and Hugging Face keep the higher ids of the group."""
    from transformers.generation.logits_process import TopPLogitsWarper

    from autograder.checks.framework import visible_cases

    with visible_cases():
        tie_case = checks.top_p_filter_cases()[2]
    logits, p = tie_case.args[0], tie_case.kwargs["p"]
    expected = TopPLogitsWarper(p)(None, logits[None])[0]
    assert torch.equal(torch.isinf(bertlab.gpt.top_p_filter(logits, p)), torch.isinf(expected))
    tied = (logits == 2.0).nonzero().flatten()
    kept = torch.isfinite(expected[tied])
    assert 0 < kept.sum() < len(tied) and kept.tolist() == sorted(kept.tolist())  # the lower ids dropped
