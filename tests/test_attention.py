"""Tests for bertlab.attention, against torch's SDPA and nn.MultiheadAttention."""

import math
from functools import partial

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bertlab.attention import (
    MultiHeadAttention,
    additive_score,
    causal_mask,
    cosine_score,
    dot_score,
    general_score,
    padding_mask,
    repeat_kv,
    scaled_dot_product_attention,
    scaled_dot_score,
    softmax,
)
from bertlab.positional import apply_rope


def random_qkv(batch=2, heads=3, n=5, m=7, d=8, dtype=torch.float32, device="cpu"):
    def make(length):
        return torch.randn(batch, heads, length, d, dtype=dtype, device=device)

    return make(n), make(m), make(m)


def random_bool_mask(*shape, device="cpu"):
    """A random True = may-attend mask whose every query row keeps at least its first key."""
    mask = torch.rand(*shape, device=device) > 0.5
    mask[..., 0] = True
    return mask


# --------------------------------------------------------------------------------------------------
# softmax and the score functions
# --------------------------------------------------------------------------------------------------


def test_softmax_matches_torch_on_every_dim():
    x = torch.randn(3, 4, 5)
    for dim in (0, 1, -1):
        torch.testing.assert_close(softmax(x, dim=dim), torch.softmax(x, dim=dim))


def test_softmax_is_stable_for_huge_logits():
    x = torch.tensor([[1e4, 0.0, -1e4], [1e4, 1e4 - 1.0, 1e4 - 2.0]])
    out = softmax(x)
    assert torch.isfinite(out).all()
    # Independent values: e^0, e^-1, e^-2 normalized, computed in float64 by hand.
    expected = torch.tensor([math.exp(0), math.exp(-1), math.exp(-2)], dtype=torch.float64)
    torch.testing.assert_close(out[0], torch.tensor([1.0, 0.0, 0.0]))
    torch.testing.assert_close(out[1], (expected / expected.sum()).float())


def test_softmax_of_a_fully_masked_row_is_zero():
    x = torch.tensor([[0.0, 1.0], [float("-inf"), float("-inf")]], requires_grad=True)
    out = softmax(x)
    torch.testing.assert_close(out[1], torch.zeros(2))
    out.sum().backward()
    assert torch.isfinite(x.grad).all()


def test_dot_and_scaled_dot_scores():
    q, k = torch.randn(2, 5, 8), torch.randn(2, 7, 8)
    expected = torch.einsum("bnd,bmd->bnm", q, k)
    torch.testing.assert_close(dot_score(q, k), expected)
    torch.testing.assert_close(scaled_dot_score(q, k), expected / math.sqrt(8))


def test_general_score_is_the_bilinear_form():
    q, k, weight = torch.randn(2, 5, 4), torch.randn(2, 7, 6), torch.randn(4, 6)
    expected = torch.einsum("bnd,de,bme->bnm", q, weight, k)
    torch.testing.assert_close(general_score(q, k, weight), expected)


def test_additive_score_matches_a_loop_over_pairs():
    q, k = torch.randn(2, 3, 4), torch.randn(2, 5, 6)
    w_q, w_k, v = torch.randn(10, 4), torch.randn(10, 6), torch.randn(10)
    scores = additive_score(q, k, w_q, w_k, v)
    assert scores.shape == (2, 3, 5)
    for b in range(2):
        for i in range(3):
            for j in range(5):
                expected = v @ torch.tanh(w_q @ q[b, i] + w_k @ k[b, j])
                torch.testing.assert_close(scores[b, i, j], expected)


def test_cosine_score_matches_cosine_similarity():
    q, k = torch.randn(2, 5, 8), torch.randn(2, 7, 8)
    expected = F.cosine_similarity(q[:, :, None, :], k[:, None, :, :], dim=-1)
    torch.testing.assert_close(cosine_score(q, k), expected)
    assert torch.isfinite(cosine_score(torch.zeros(1, 8), k[0])).all()


def test_small_functions_pass_gradcheck_in_float64():
    double = partial(torch.randn, dtype=torch.float64, requires_grad=True)
    q, k, v = double(2, 3, 4), double(2, 5, 4), double(2, 5, 6)
    mask = random_bool_mask(2, 3, 5)
    w_q, w_k, w_v, weight = double(7, 4), double(7, 4), double(7), double(4, 4)
    assert torch.autograd.gradcheck(softmax, (double(3, 5),))
    assert torch.autograd.gradcheck(scaled_dot_score, (q, k))
    assert torch.autograd.gradcheck(general_score, (q, k, weight))
    assert torch.autograd.gradcheck(additive_score, (q, k, w_q, w_k, w_v))
    assert torch.autograd.gradcheck(cosine_score, (q, k))
    assert torch.autograd.gradcheck(lambda *t: scaled_dot_product_attention(*t, mask=mask), (q, k, v))


# --------------------------------------------------------------------------------------------------
# masks and scaled dot-product attention
# --------------------------------------------------------------------------------------------------


def test_worked_example_of_the_lecture_notes():
    """Query [0, 0, 1] over six keys (= values), scaled by 1 / sqrt(3).

    Each score is q . k_j / sqrt(3) = 0 or 1/sqrt(3); with e = exp(1/sqrt(3)), a key with score 0 gets
    1 / (3 + 3e) = 0.120 and one with score 1/sqrt(3) gets e / (3 + 3e) = 0.213. Each coordinate of the
    context sums two small and one large weight: 0.4532, 0.4532, and three large ones: 0.6405.
    The notes print 0.639 for the last coordinate, a rounding slip (3 * 0.2135 = 0.6405).
    Without the 1/sqrt(3) scaling the weights would be 0.090 and 0.244 instead.
    """
    keys = torch.tensor([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0], [0, 1, 1], [1, 0, 1]], dtype=torch.float64)
    query = torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64)
    output, weights = scaled_dot_product_attention(query, keys, keys)

    e = math.exp(1 / math.sqrt(3))
    small, large = 1 / (3 + 3 * e), e / (3 + 3 * e)
    expected_weights = [small, small, large, small, large, large]
    expected_context = [2 * small + large, 2 * small + large, 3 * large]
    torch.testing.assert_close(weights[0], torch.tensor(expected_weights, dtype=torch.float64))
    torch.testing.assert_close(output[0], torch.tensor(expected_context, dtype=torch.float64))
    # The rounded numbers of the notes.
    assert [round(w, 3) for w in weights[0].tolist()] == [0.120, 0.120, 0.213, 0.120, 0.213, 0.213]
    assert [round(c, 4) for c in output[0].tolist()] == [0.4532, 0.4532, 0.6405]


def test_causal_mask_is_aligned_top_left_like_is_causal():
    torch.testing.assert_close(causal_mask(3), torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]]).bool())
    q, k, v = random_qkv(n=4, m=6)
    ours, _ = scaled_dot_product_attention(q, k, v, mask=causal_mask(4, 6))
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_padding_mask_shape_and_values():
    mask = padding_mask(torch.tensor([[1, 1, 0], [1, 0, 0]]))
    assert mask.dtype == torch.bool and mask.shape == (2, 1, 1, 3)
    assert mask[:, 0, 0].tolist() == [[True, True, False], [True, False, False]]
    with pytest.raises(ValueError, match="0 .* and 1"):
        padding_mask(torch.tensor([[1, 2, 0]]))


@pytest.mark.parametrize(
    "mask_shape",
    [None, (2, 1, 1, 7), (2, 3, 5, 7), (5, 7)],
    ids=["no-mask", "padding", "full", "shared"],
)
def test_sdpa_matches_torch(device, mask_shape):
    q, k, v = random_qkv(device=device)
    mask = None if mask_shape is None else random_bool_mask(*mask_shape, device=device)
    ours, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 5, device=device))


def test_sdpa_scale_and_bias_match_torch():
    q, k, v = random_qkv()
    bias = torch.randn(3, 5, 7)
    ours, _ = scaled_dot_product_attention(q, k, v, scale=0.3, attn_bias=bias)
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=0.3))


def test_sdpa_accepts_any_leading_dims():
    q, k, v = torch.randn(5, 8), torch.randn(7, 8), torch.randn(7, 4)
    ours, weights = scaled_dot_product_attention(q, k, v)
    assert ours.shape == (5, 4) and weights.shape == (5, 7)
    q, k, v = torch.randn(2, 2, 3, 5, 8), torch.randn(2, 2, 3, 7, 8), torch.randn(2, 2, 3, 7, 4)
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v)[0], F.scaled_dot_product_attention(q, k, v))


def test_sdpa_dropout_drops_weights_in_the_output_only():
    q, k, v = random_qkv()
    clean, clean_weights = scaled_dot_product_attention(q, k, v)
    dropped, weights = scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    torch.testing.assert_close(weights, clean_weights)  # the returned weights are before dropout
    assert not torch.allclose(dropped, clean)
    zeroed, _ = scaled_dot_product_attention(q, k, v, dropout_p=1.0)
    torch.testing.assert_close(zeroed, torch.zeros_like(zeroed))


def test_sdpa_fully_masked_rows_give_zero_not_nan(device):
    q, k, v = (t.requires_grad_() for t in random_qkv(device=device))
    mask = random_bool_mask(2, 1, 5, 7, device=device)
    mask[0, :, 2] = False  # query 2 of batch 0 may attend to nothing
    output, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    assert torch.isfinite(output).all()
    torch.testing.assert_close(output[0, :, 2], torch.zeros(3, 8, device=device))
    torch.testing.assert_close(weights[0, :, 2], torch.zeros(3, 7, device=device))
    output.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
    # Other rows are unaffected: they still match torch.
    reference = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(output[1], reference[1])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sdpa_in_half_precision_on_cpu(dtype):
    q, k, v = random_qkv()
    mask = random_bool_mask(2, 1, 5, 7)
    ours, weights = scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype), mask=mask)
    assert ours.dtype == dtype and weights.dtype == dtype
    reference = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(ours.float(), reference, atol=3e-2, rtol=3e-2)


def test_sdpa_bad_shapes_raise_value_errors_naming_them():
    q, k, v = random_qkv()
    with pytest.raises(ValueError, match=r"\(2, 3, 5, 8\).*\(2, 3, 7, 4\)"):
        scaled_dot_product_attention(q, k[..., :4], v)
    with pytest.raises(ValueError, match=r"\(2, 3, 7, 8\).*\(2, 3, 6, 8\)"):
        scaled_dot_product_attention(q, k, v[..., :6, :])
    with pytest.raises(ValueError, match=r"mask of shape \(2, 1, 1, 6\).*\(2, 3, 5, 7\)"):
        scaled_dot_product_attention(q, k, v, mask=torch.ones(2, 1, 1, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"mask of shape \(4, 2, 3, 5, 7\)"):  # would enlarge the output
        scaled_dot_product_attention(q, k, v, mask=torch.ones(4, 2, 3, 5, 7, dtype=torch.bool))
    with pytest.raises(ValueError, match="must be bool"):
        scaled_dot_product_attention(q, k, v, mask=torch.ones(5, 7))
    with pytest.raises(ValueError, match=r"attn_bias of shape \(4, 5, 7\)"):
        scaled_dot_product_attention(q, k, v, attn_bias=torch.zeros(4, 5, 7))
    with pytest.raises(ValueError, match=r"\(2, 3, 5, 8\).*\(4, 3, 7, 8\)"):
        scaled_dot_product_attention(q, torch.randn(4, 3, 7, 8), torch.randn(4, 3, 7, 8))
    with pytest.raises(ValueError, match=r"weight \(3, 3\)"):
        general_score(q, k, torch.zeros(3, 3))


# --------------------------------------------------------------------------------------------------
# multi-head attention
# --------------------------------------------------------------------------------------------------


def test_repeat_kv_gives_query_head_h_the_kv_head_h_over_n_rep():
    x = torch.randn(2, 3, 5, 4)
    assert repeat_kv(x, 1) is x
    repeated = repeat_kv(x, 4)
    assert repeated.shape == (2, 12, 5, 4)
    for h in range(12):
        torch.testing.assert_close(repeated[:, h], x[:, h // 4])


def copy_from_torch(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    """nn.MultiheadAttention keeps q, k, v stacked in one in_proj; ours has three nn.Linear."""
    projections = (ours.q_proj, ours.k_proj, ours.v_proj)
    with torch.no_grad():
        for proj, weight, bias in zip(projections, theirs.in_proj_weight.chunk(3), theirs.in_proj_bias.chunk(3)):
            proj.weight.copy_(weight)
            proj.bias.copy_(bias)
        ours.out_proj.load_state_dict(theirs.out_proj.state_dict())


@pytest.mark.parametrize("need_weights", [False, True])
def test_mha_matches_nn_multihead_attention(device, need_weights):
    theirs = nn.MultiheadAttention(16, 4, batch_first=True, device=device).eval()
    ours = MultiHeadAttention(16, 4).to(device).eval()
    copy_from_torch(ours, theirs)
    x = torch.randn(2, 6, 16, device=device)
    attention_mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]], device=device)
    mask = causal_mask(6, device=device) & padding_mask(attention_mask)  # True = may attend
    # nn.MultiheadAttention's masks mean the opposite: True = may NOT attend.
    expected, expected_weights = theirs(
        x, x, x, key_padding_mask=attention_mask == 0, attn_mask=~causal_mask(6, device=device),
        average_attn_weights=False,
    )
    result = ours(x, mask=mask, need_weights=need_weights)
    if need_weights:
        result, weights = result
        torch.testing.assert_close(weights, expected_weights)
    torch.testing.assert_close(result, expected)


def test_cross_attention_matches_nn_multihead_attention():
    theirs = nn.MultiheadAttention(16, 2, batch_first=True).eval()
    ours = MultiHeadAttention(16, 2).eval()
    copy_from_torch(ours, theirs)
    x, context = torch.randn(2, 3, 16), torch.randn(2, 7, 16)
    attention_mask = torch.tensor([[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0, 0]])
    expected, _ = theirs(x, context, context, key_padding_mask=attention_mask == 0)
    torch.testing.assert_close(ours(x, context, mask=padding_mask(attention_mask)), expected)


def mha_by_hand(module, x, context, attn_mask=None, rope=None, enable_gqa=False):
    """Project and split heads by hand, then call torch's SDPA."""
    def heads(t, num):
        return t.view(t.shape[0], t.shape[1], num, -1).transpose(1, 2)

    q = heads(module.q_proj(x), module.num_heads)
    k = heads(module.k_proj(context), module.num_kv_heads)
    v = heads(module.v_proj(context), module.num_kv_heads)
    if rope is not None:
        q, k = rope(q), rope(k)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, enable_gqa=enable_gqa)
    return module.out_proj(out.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1))


@pytest.mark.parametrize("num_kv_heads", [2, 1], ids=["grouped-query", "multi-query"])
def test_grouped_query_attention_matches_sdpa_enable_gqa(num_kv_heads):
    module = MultiHeadAttention(32, 4, num_kv_heads=num_kv_heads).eval()
    assert module.k_proj.out_features == num_kv_heads * 8
    x = torch.randn(2, 5, 32)
    mask = random_bool_mask(2, 1, 5, 5)
    expected = mha_by_hand(module, x, x, attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(module(x, mask=mask), expected)
    torch.testing.assert_close(module(x, mask=mask, need_weights=True)[0], expected)


def test_attn_bias_and_rope_match_a_hand_computation():
    module = MultiHeadAttention(32, 4).eval()
    x = torch.randn(2, 6, 32)
    bias = torch.randn(4, 6, 6)
    rope = partial(apply_rope, interleaved=False)
    mask = causal_mask(6)
    expected = mha_by_hand(module, x, x, attn_mask=bias.masked_fill(~mask, float("-inf")), rope=rope)
    torch.testing.assert_close(module(x, mask=mask, attn_bias=bias, rope=rope), expected)


@pytest.mark.parametrize(
    "num_kv_heads, use_mask, use_bias, cross",
    [
        (4, False, False, False),
        (4, True, False, False),
        (4, False, True, False),
        (2, True, True, False),
        (1, True, True, True),
    ],
)
def test_fast_path_and_weights_path_agree(num_kv_heads, use_mask, use_bias, cross):
    module = MultiHeadAttention(32, 4, num_kv_heads=num_kv_heads, dropout=0.3).eval()
    x = torch.randn(2, 5, 32)
    context = torch.randn(2, 7, 32) if cross else None
    m = 7 if cross else 5
    mask = random_bool_mask(2, 1, 5, m) if use_mask else None
    bias = torch.randn(4, 5, m) if use_bias else None
    fast = module(x, context, mask=mask, attn_bias=bias, rope=apply_rope)
    slow, weights = module(x, context, mask=mask, attn_bias=bias, rope=apply_rope, need_weights=True)
    torch.testing.assert_close(fast, slow)
    assert weights.shape == (2, 4, 5, m)


def test_mha_fully_masked_rows_are_zero_on_both_paths(device):
    module = MultiHeadAttention(16, 4, bias=False).to(device)
    x = torch.randn(2, 4, 16, device=device, requires_grad=True)
    mask = random_bool_mask(2, 4, 4, device=device)[:, None]  # (B, 1, N, M)
    mask[1, :, 3] = False
    bias = torch.randn(4, 4, 4, device=device)
    for need_weights in (False, True):
        out = module(x, mask=mask, attn_bias=bias, need_weights=need_weights)
        out = out[0] if need_weights else out
        torch.testing.assert_close(out[1, 3], torch.zeros(16, device=device))  # no bias: zero in, zero out
        out.sum().backward()
        assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()


def test_dropout_acts_in_training_only():
    module = MultiHeadAttention(16, 4, dropout=0.5)
    x = torch.randn(2, 5, 16)
    assert not torch.allclose(module(x), module(x))
    module.eval()
    torch.testing.assert_close(module(x), module(x))


def test_self_attention_is_permutation_equivariant():
    module = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 6, 16)
    permutation = torch.randperm(6)
    torch.testing.assert_close(module(x[:, permutation]), module(x)[:, permutation])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_mha_in_half_precision_on_cpu(dtype):
    module = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 5, 16)
    mask = random_bool_mask(2, 1, 5, 5)
    expected = module(x, mask=mask)
    half = module.to(dtype)
    for need_weights in (False, True):
        out = half(x.to(dtype), mask=mask, need_weights=need_weights)
        out = out[0] if need_weights else out
        assert out.dtype == dtype
        torch.testing.assert_close(out.float(), expected, atol=5e-2, rtol=5e-2)


def test_mha_bad_arguments_raise_value_errors_naming_the_numbers():
    with pytest.raises(ValueError, match=r"num_heads \(3\).*d_model \(16\)"):
        MultiHeadAttention(16, 3)
    with pytest.raises(ValueError, match=r"num_kv_heads \(4\).*num_heads \(6\)"):
        MultiHeadAttention(24, 6, num_kv_heads=4)
    module = MultiHeadAttention(16, 4)
    with pytest.raises(ValueError, match=r"d_model=16.*\(2, 5, 12\)"):
        module(torch.randn(2, 5, 12))
    with pytest.raises(ValueError, match=r"context.*\(2, 5, 8\)"):
        module(torch.randn(2, 5, 16), context=torch.randn(2, 5, 8))
    with pytest.raises(ValueError, match=r"mask of shape \(2, 1, 1, 4\)"):
        module(torch.randn(2, 5, 16), mask=torch.ones(2, 1, 1, 4, dtype=torch.bool))


# ---------------------------------------------------------------------------------------------- devices


def test_softmax_of_the_weights_stays_in_float32_inside_an_autocast_region():
    q, k, v = random_qkv()
    expected_output, expected_weights = scaled_dot_product_attention(q, k, v)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        output, weights = scaled_dot_product_attention(q, k, v)
    assert weights.dtype == torch.float32
    torch.testing.assert_close(weights, expected_weights, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(output.float(), expected_output, atol=3e-2, rtol=3e-2)  # weights @ v in bf16


def test_masks_and_biases_made_on_the_cpu_work_with_queries_on_another_device():
    """``alibi_bias`` and ``causal_mask`` default to the CPU; the queries may live on a GPU."""
    from bertlab.attention import fused_attention
    from bertlab.positional import alibi_bias
    from device_helpers import DeviceAudit

    q, k, v = (tensor.to("meta") for tensor in random_qkv(n=5, m=5))
    bias, mask = alibi_bias(3, 5), causal_mask(5)  # (H, N, M) and (N, M), on the CPU
    with DeviceAudit():
        output, weights = scaled_dot_product_attention(q, k, v, mask=mask, attn_bias=bias)
        fused = fused_attention(q, k, v, mask, bias, 0.0)
    assert output.device.type == weights.device.type == fused.device.type == "meta"
