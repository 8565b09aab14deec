"""Mutation tests of chapter 05's checks (autograder/checks/efficient.py).

For every exercise: the check accepts the solution of the solution notebook, other correct
implementations and (with the forbid-rule lifted) the reference; it rejects a catalogue of typical
wrong implementations, each with the hint that explains it; calling a forbidden built-in or the
reference fails with "implement this yourself"; and the memory test of ``flash_attention`` and
``linear_attention`` rejects correct outputs computed through an (N, M) matrix.
"""

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.nn.functional import scaled_dot_product_attention as captured_sdpa

import bertlab.attention
import bertlab.efficient
from autograder.checks import efficient as checks
from autograder.checks.framework import CheckFailed
from checks_helpers import MutationTests, run_solution_cells

SOLUTION = Path(__file__).resolve().parents[1] / "solutions" / "05_efficient_attention" / "05_efficient_attention.ipynb"
EXERCISES = ["sliding_window_mask", "repeat_kv", "kv_cache_bytes", "flash_attention", "linear_attention"]
REFERENCES = {
    "sliding_window_mask": bertlab.efficient.sliding_window_mask,
    "repeat_kv": bertlab.attention.repeat_kv,
    "kv_cache_bytes": bertlab.efficient.kv_cache_bytes,
    "flash_attention": bertlab.efficient.flash_attention,
    "linear_attention": bertlab.efficient.linear_attention,
}
NEG_INF = float("-inf")


@pytest.fixture(scope="module")
def solution_namespace():
    """The functions defined by the solution cells of the solution notebook, executed together."""
    return run_solution_cells(SOLUTION, {"torch": torch, "math": math, "F": F})


# --------------------------------------------------------------------------------------------------
# Typical wrong implementations, as students write them, and the hint each must get
# --------------------------------------------------------------------------------------------------


def band(n, before, after, device=None):
    """(n, n) bool: True where -after <= i - j <= before (tril/triu, the way many students write it)."""
    return torch.ones(n, n, dtype=torch.bool, device=device).tril(after).triu(-before)


def window_strict(n, window, causal=False, device=None):
    if causal:
        return band(n, window - 1, 0, device)
    return band(n, window // 2 - 1, window // 2 - 1, device)


def window_whole_on_each_side(n, window, causal=False, device=None):
    return band(n, window - 1, 0, device) if causal else band(n, window, window, device)


def window_causal_sees_future(n, window, causal=False, device=None):
    i = torch.arange(n, device=device)[:, None]
    j = torch.arange(n, device=device)[None, :]
    return (i - j < window) if causal else (i - j).abs() <= window // 2


def window_causal_one_too_many(n, window, causal=False, device=None):
    # the mask of Mistral's reference code, triu(diagonal=-window): W + 1 keys
    return band(n, window, 0, device) if causal else band(n, window // 2, window // 2, device)


def window_ignores_causal(n, window, causal=False, device=None):
    return band(n, window // 2, window // 2, device)


def window_causal_looks_ahead(n, window, causal=False, device=None):
    return band(n, 0, window - 1, device) if causal else band(n, window // 2, window // 2, device)


def window_float(n, window, causal=False, device=None):
    i = torch.arange(n, device=device, dtype=torch.float32)
    distance = i[:, None] - i[None, :]
    return ((distance >= 0) & (distance < window)).float() if causal else (distance.abs() <= window // 2).float()


def repeat_tiled(x, n_rep):
    return x.repeat(1, n_rep, 1, 1)


def repeat_expand_wrong_order(x, n_rep):
    expanded = x.unsqueeze(-4).expand(*x.shape[:-3], n_rep, *x.shape[-3:])  # (..., n_rep, Hkv, M, D)
    return expanded.reshape(*x.shape[:-3], n_rep * x.shape[-3], *x.shape[-2:])


def repeat_dim_one(x, n_rep):
    return torch.repeat_interleave(x, n_rep, dim=1)


def repeat_not_merged(x, n_rep):
    return torch.stack([x] * n_rep, dim=-3)


def cache_only_keys(batch, seq_len, num_layers, num_kv_heads, head_dim, bytes_per_value=2):
    return batch * seq_len * num_layers * num_kv_heads * head_dim * bytes_per_value


def cache_one_layer(batch, seq_len, num_layers, num_kv_heads, head_dim, bytes_per_value=2):
    return 2 * batch * seq_len * num_kv_heads * head_dim * bytes_per_value


def cache_float32_default(batch, seq_len, num_layers, num_kv_heads, head_dim, bytes_per_value=4):
    return 2 * batch * seq_len * num_layers * num_kv_heads * head_dim * bytes_per_value


def cache_in_bits(batch, seq_len, num_layers, num_kv_heads, head_dim, bytes_per_value=2):
    return 2 * batch * seq_len * num_layers * num_kv_heads * head_dim * bytes_per_value * 8


def cache_without_batch(batch, seq_len, num_layers, num_kv_heads, head_dim, bytes_per_value=2):
    return 2 * seq_len * num_layers * num_kv_heads * head_dim * bytes_per_value


def cache_in_gib(batch, seq_len, num_layers, num_kv_heads, head_dim, bytes_per_value=2):
    return 2 * batch * seq_len * num_layers * num_kv_heads * head_dim * bytes_per_value / 2**30


def flash(q, k, v, mask=None, causal=False, block_size=128, *, scale=True, rescale="both", divide=True,
          guard_empty_rows=True, causal_strict=False, full_causal_mask=False, correction_after_update=False):
    """A student's flash attention with one mistake switched on by the keyword arguments."""
    n, m = q.shape[-2], k.shape[-2]
    out_dtype = q.dtype
    compute = torch.float64 if q.dtype == torch.float64 else torch.float32
    q, k, v = q.to(compute), k.to(compute), v.to(compute)
    if scale:
        q = q / math.sqrt(q.shape[-1])
    if full_causal_mask and causal:
        keep = torch.ones(n, m, dtype=torch.bool).tril()  # an (N, M) tensor: what flash attention avoids
        mask = keep if mask is None else mask & keep
        causal = False
    outputs = []
    for i0 in range(0, n, block_size):
        qi = q[..., i0:i0 + block_size, :]
        m_i = torch.full(qi.shape[:-1], NEG_INF, dtype=q.dtype)
        l_i = torch.zeros(qi.shape[:-1], dtype=q.dtype)
        o_i = torch.zeros(*qi.shape[:-1], v.shape[-1], dtype=q.dtype)
        for j0 in range(0, m, block_size):
            s = qi @ k[..., j0:j0 + block_size, :].transpose(-2, -1)
            if mask is not None:
                full = mask.expand(*mask.shape[:-2], n, m)
                s = s.masked_fill(~full[..., i0:i0 + block_size, j0:j0 + block_size], NEG_INF)
            if causal:
                rows = torch.arange(i0, i0 + s.shape[-2])[:, None]
                cols = torch.arange(j0, j0 + s.shape[-1])[None, :]
                s = s.masked_fill(cols >= rows if causal_strict else cols > rows, NEG_INF)
            m_new = torch.maximum(m_i, s.max(dim=-1).values)
            m_safe = torch.where(m_new == NEG_INF, 0.0, m_new) if guard_empty_rows else m_new
            p = torch.exp(s - m_safe.unsqueeze(-1))
            if correction_after_update:
                m_i = m_new
            alpha = torch.exp(m_i - m_safe)
            l_i = (alpha if rescale in ("both", "sum") else 1.0) * l_i + p.sum(dim=-1)
            o_i = ((alpha.unsqueeze(-1) if rescale in ("both", "output") else 1.0) * o_i
                   + p @ v[..., j0:j0 + block_size, :])
            m_i = m_new
        if not divide:
            outputs.append(o_i)
        elif guard_empty_rows:
            outputs.append(o_i / l_i.clamp_min(1e-30).unsqueeze(-1))
        else:
            outputs.append(o_i / l_i.unsqueeze(-1))
    return torch.cat(outputs, dim=-2).to(out_dtype)


def flash_without_scale(q, k, v, mask=None, causal=False, block_size=128):
    return flash(q, k, v, mask, causal, block_size, scale=False)


def flash_without_rescaling(q, k, v, mask=None, causal=False, block_size=128):
    return flash(q, k, v, mask, causal, block_size, rescale="none")


def flash_rescales_only_the_sum(q, k, v, mask=None, causal=False, block_size=128):
    return flash(q, k, v, mask, causal, block_size, rescale="sum")


def flash_correction_after_the_update(q, k, v, mask=None, causal=False, block_size=128):
    return flash(q, k, v, mask, causal, block_size, correction_after_update=True)


def flash_without_division(q, k, v, mask=None, causal=False, block_size=128):
    return flash(q, k, v, mask, causal, block_size, divide=False)


def flash_nan_on_masked_rows(q, k, v, mask=None, causal=False, block_size=128):
    return flash(q, k, v, mask, causal, block_size, guard_empty_rows=False)


def flash_causal_strict(q, k, v, mask=None, causal=False, block_size=128):
    return flash(q, k, v, mask, causal, block_size, causal_strict=True)


def flash_with_an_n_by_m_causal_mask(q, k, v, mask=None, causal=False, block_size=128):
    return flash(q, k, v, mask, causal, block_size, full_causal_mask=True)


def dense_attention(q, k, v, mask=None, causal=False, block_size=128):
    """Correct outputs, computed through the (N, M) scores."""
    compute = torch.promote_types(q.dtype, torch.float32)
    scores = q.to(compute) @ k.to(compute).transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    if causal:
        scores = scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool).tril().logical_not(), NEG_INF)
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return (weights @ v.to(compute)).to(q.dtype)


def tiles_over_queries_only(q, k, v, mask=None, causal=False, block_size=128):
    """Correct outputs, one block of queries at a time but with all the keys: (Bq, M) scores."""
    blocks = []
    for start in range(0, q.shape[-2], block_size):
        stop = start + block_size
        block_mask = (None if mask is None
                      else mask.expand(*mask.shape[:-2], q.shape[-2], k.shape[-2])[..., start:stop, :])
        if causal:
            rows = torch.arange(start, min(stop, q.shape[-2]))[:, None]
            keep = torch.arange(k.shape[-2])[None, :] <= rows
            block_mask = keep if block_mask is None else block_mask & keep
        blocks.append(dense_attention(q[..., start:stop, :], k, v, block_mask))
    return torch.cat(blocks, dim=-2)


def phi(x):
    return F.elu(x) + 1


def linear(q, k, v, causal=False, *, feature=phi, scale=False, normalize=True, exclusive=False, ignore_causal=False):
    """A student's linear attention with one mistake switched on by the keyword arguments."""
    dtype = q.dtype
    q, k, v = (t.to(torch.promote_types(dtype, torch.float32)) for t in (q, k, v))
    if scale:
        q = q / math.sqrt(q.shape[-1])
    fq, fk = feature(q), feature(k)
    if causal and not ignore_causal:
        kv = torch.einsum("...nd,...ne->...nde", fk, v).cumsum(dim=-3)
        z = fk.cumsum(dim=-2)
        if exclusive:
            kv = torch.cat([torch.zeros_like(kv[..., :1, :, :]), kv[..., :-1, :, :]], dim=-3)
            z = torch.cat([torch.zeros_like(z[..., :1, :]), z[..., :-1, :]], dim=-2)
        numerator = torch.einsum("...nd,...nde->...ne", fq, kv)
        denominator = torch.einsum("...nd,...nd->...n", fq, z)
    else:
        numerator = fq @ (fk.transpose(-2, -1) @ v)
        denominator = fq @ fk.sum(dim=-2).unsqueeze(-1)
        denominator = denominator.squeeze(-1)
    out = numerator / denominator.unsqueeze(-1) if normalize else numerator
    return out.to(dtype)


def linear_with_relu(q, k, v, causal=False):
    return linear(q, k, v, causal, feature=F.relu)


def linear_with_elu_only(q, k, v, causal=False):
    return linear(q, k, v, causal, feature=F.elu)


def linear_scaled(q, k, v, causal=False):
    return linear(q, k, v, causal, scale=True)


def linear_unnormalized(q, k, v, causal=False):
    return linear(q, k, v, causal, normalize=False)


def linear_ignores_causal(q, k, v, causal=False):
    return linear(q, k, v, causal, ignore_causal=True)


def linear_exclusive_prefix(q, k, v, causal=False):
    return linear(q, k, v, causal, exclusive=True)


def linear_quadratic(q, k, v, causal=False):
    """Correct outputs, computed through the (N, M) matrix phi(Q) phi(K)^T."""
    dtype = q.dtype
    q, k, v = (t.to(torch.promote_types(dtype, torch.float32)) for t in (q, k, v))
    similarity = phi(q) @ phi(k).transpose(-2, -1)
    if causal:
        similarity = similarity.tril()
    return (similarity @ v / similarity.sum(dim=-1, keepdim=True)).to(dtype)


MUTANTS = {
    "sliding_window_mask": [
        (window_strict, "use <=, not <"),
        (window_whole_on_each_side, "not w on each side"),
        (window_causal_sees_future, "must not see the future"),
        (window_causal_one_too_many, "not W + 1"),
        (window_ignores_causal, "your mask ignores `causal`"),
        (window_causal_looks_ahead, "the causal window looks back"),
        (window_float, "return a bool tensor"),
    ],
    "repeat_kv": [
        (repeat_tiled, "repeat_interleave"),
        (repeat_expand_wrong_order, "h % Hkv"),
        (repeat_dim_one, "Use dim=-3"),
        (repeat_not_merged, "merge the group axis with the head axis"),
    ],
    "kv_cache_bytes": [
        (cache_only_keys, "a key AND a value"),
        (cache_one_layer, "multiply by num_layers"),
        (cache_float32_default, "defaults to 2"),
        (cache_in_bits, "return bytes, not bits"),
        (cache_without_batch, "multiply by batch"),
        (cache_in_gib, "expected an int"),
    ],
    "flash_attention": [
        (flash_without_scale, "1 / sqrt(D)"),
        (flash_without_rescaling, "multiply both by exp(m - m')"),
        (flash_correction_after_the_update, "multiply both by exp(m - m')"),
        (flash_rescales_only_the_sum, "rescale the running output as well"),
        (flash_without_division, "divide it by the running sum"),
        (flash_nan_on_masked_rows, "must get a zero output, not NaN"),
        (flash_causal_strict, "a query sees itself"),
        (dense_attention, "allocated a tensor of shape (2, 512, 512)"),
        (tiles_over_queries_only, "visit the keys block by block"),
        (flash_with_an_n_by_m_causal_mask, "allocated a tensor of shape (512, 512)"),
    ],
    "linear_attention": [
        (linear_with_relu, "not relu(x)"),
        (linear_with_elu_only, "elu alone can be negative"),
        (linear_scaled, "no 1 / sqrt(D) scale"),
        (linear_unnormalized, "divide by the normalizer"),
        (linear_ignores_causal, "use prefix sums"),
        (linear_exclusive_prefix, "query i sees itself"),
        (linear_quadratic, "never build the (N, M) matrix"),
    ],
}


# Correct implementations written differently from the solution: the checks must accept them.
def window_by_bands(n, window, causal=False, device=None):
    return band(n, window - 1, 0, device) if causal else band(n, window // 2, window // 2, device)


def repeat_by_expand(x, n_rep):
    expanded = x.unsqueeze(-3).expand(*x.shape[:-2], n_rep, *x.shape[-2:])  # (..., Hkv, n_rep, M, D)
    return expanded.flatten(-4, -3)


def cache_by_product(batch, seq_len, num_layers, num_kv_heads, head_dim, bytes_per_value=2):
    return math.prod([2, batch, seq_len, num_layers, num_kv_heads, head_dim, bytes_per_value])


def flash_row_by_row_blocks(q, k, v, mask=None, causal=False, block_size=128):
    return flash(q, k, v, mask, causal, block_size=block_size)


def linear_by_einsum(q, k, v, causal=False):
    return linear(q, k, v, causal)


ALTERNATIVES = {
    "sliding_window_mask": [window_by_bands],
    "repeat_kv": [repeat_by_expand],
    "kv_cache_bytes": [cache_by_product],
    "flash_attention": [flash_row_by_row_blocks],
    "linear_attention": [linear_by_einsum],
}


def test_flash_attention_is_compared_with_pytorch():
    """The expected outputs come from F.scaled_dot_product_attention, not from the reference."""
    summary = checks.check_flash_attention(bertlab.efficient.flash_attention, forbid=False)
    assert "agree with F.scaled_dot_product_attention" in summary and "no (N, M) matrix" in summary
    q, k, v = torch.randn(3, 2, 9, 8).unbind(0)
    mask = torch.rand(9, 9) > 0.4
    mask[3] = False
    expected = checks.attention_by_sdpa(q, k, v, mask, causal=True)
    assert torch.equal(expected[:, 3], torch.zeros(2, 8))
    torch.testing.assert_close(expected, bertlab.efficient.flash_attention(q, k, v, mask, causal=True, block_size=4))


def test_memory_failure_says_what_was_allocated():
    with pytest.raises(CheckFailed) as failure:
        checks.check_flash_attention(dense_attention)
    message = str(failure.value)
    assert "flash_attention is not right yet, on the memory test (q, k, v (2, 512, 16), block_size=64)" in message
    assert "allocated a tensor of shape (2, 512, 512) (524,288 numbers); at most 32,768 are needed" in message


# --------------------------------------------------------------------------------------------------
# "Implement this yourself"
# --------------------------------------------------------------------------------------------------


def flash_with_captured_sdpa(q, k, v, mask=None, causal=False, block_size=128):
    return captured_sdpa(q, k, v, attn_mask=mask, is_causal=causal)


def flash_with_course_attention(q, k, v, mask=None, causal=False, block_size=128):
    return bertlab.attention.scaled_dot_product_attention(q, k, v, mask)[0]


def flash_with_aten(q, k, v, mask=None, causal=False, block_size=128):
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, is_causal=causal)[0]


def flash_hiding_the_reference(q, k, v, mask=None, causal=False, block_size=128):
    try:
        bertlab.efficient.flash_attention(q, k, v, mask, causal, block_size)
    except Exception:  # the recorded call fails the check all the same
        pass
    return flash(q, k, v, mask, causal, block_size)


def repeat_from_efficient(x, n_rep):
    from bertlab.efficient import repeat_kv

    return repeat_kv(x, n_rep)


def window_through_longformer(n, window, causal=False, device=None):
    mask = bertlab.efficient.longformer_mask(n, window, [], device=device)
    return mask.tril() & band(n, window - 1, 0, device) if causal else mask


def cache_with_reference_default(batch, seq_len, num_layers, num_kv_heads, head_dim, bytes_per_value=2,
                                 implementation=bertlab.efficient.kv_cache_bytes):
    return implementation(batch, seq_len, num_layers, num_kv_heads, head_dim, bytes_per_value)


class TestEfficientChecks(MutationTests):
    """The shared mutation tests (tests/checks_helpers.py) of this chapter's checks."""

    checks = checks
    references = REFERENCES
    mutants = MUTANTS
    alternatives = ALTERNATIVES
    failure_context = r"(test case \d+ of \d+|the memory test) \("
    cheats = [
        ("flash_attention", flash_with_captured_sdpa, "torch.nn.functional.scaled_dot_product_attention"),
        ("flash_attention", flash_with_course_attention, "bertlab.attention.scaled_dot_product_attention"),
        ("flash_attention", flash_with_aten, "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu"),
        ("flash_attention", flash_hiding_the_reference, "bertlab.efficient.flash_attention"),
        ("repeat_kv", repeat_from_efficient, "bertlab.attention.repeat_kv"),
        ("sliding_window_mask", window_through_longformer, "bertlab.efficient.longformer_mask"),
        ("kv_cache_bytes", cache_with_reference_default, "bertlab.efficient.kv_cache_bytes"),
    ]
