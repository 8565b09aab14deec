"""Tests for bertlab.efficient, against torch's scaled_dot_product_attention and explicit formulas."""

from functools import partial

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from bertlab import attention
from bertlab.efficient import (
    attention_param_count,
    flash_attention,
    grouped_query_attention,
    kv_cache_bytes,
    linear_attention,
    longformer_mask,
    repeat_kv,
    sliding_window_attention,
    sliding_window_mask,
)

FLOAT32 = dict(atol=1e-5, rtol=1e-5)
HALF_TOLERANCE = {torch.float16: dict(atol=3e-3, rtol=3e-3), torch.bfloat16: dict(atol=3e-2, rtol=3e-2)}


def qkv(*batch, n, m=None, d=8, dv=None, dtype=torch.float32, device="cpu"):
    m = n if m is None else m
    dv = d if dv is None else dv
    q = torch.randn(*batch, n, d, dtype=dtype, device=device)
    k = torch.randn(*batch, m, d, dtype=dtype, device=device)
    v = torch.randn(*batch, m, dv, dtype=dtype, device=device)
    return q, k, v


class LargestAllocation(TorchDispatchMode):
    """Records the largest storage, in bytes, that an operation allocates (views of inputs excluded)."""

    def __init__(self, *inputs):
        super().__init__()
        self.inputs = {t.untyped_storage().data_ptr() for t in inputs}
        self.nbytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(tensor, torch.Tensor) and tensor.untyped_storage().data_ptr() not in self.inputs:
                self.nbytes = max(self.nbytes, tensor.untyped_storage().nbytes())
        return out


# --------------------------------------------------------------------------------------------------
# Sliding windows and Longformer
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("window", [1, 2, 3, 4, 7, 50])
def test_sliding_window_mask_matches_its_definition(window):
    n = 11
    bidirectional = sliding_window_mask(n, window)
    causal = sliding_window_mask(n, window, causal=True)
    for i in range(n):
        for j in range(n):
            assert bidirectional[i, j] == (abs(i - j) <= window // 2)
            assert causal[i, j] == (0 <= i - j < window)
    assert bidirectional.dtype == torch.bool and bidirectional.shape == (n, n)


def test_causal_sliding_window_is_a_band_of_the_causal_mask():
    # Mistral 7B: window 4096, so each token sees itself and the 4095 tokens before it.
    n, window = 40, 16
    band = torch.ones(n, n, dtype=torch.bool).tril().triu(-(window - 1))
    assert torch.equal(sliding_window_mask(n, window, causal=True), band)
    seen = sliding_window_mask(n, window, causal=True).sum(1)
    assert torch.equal(seen, torch.arange(n).clamp(max=window - 1) + 1)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n, window", [(33, 1), (33, 2), (33, 5), (33, 8), (32, 8), (33, 40), (1, 4)])
def test_sliding_window_attention_equals_dense_masked_attention(n, window, causal):
    q, k, v = qkv(2, 3, n=n, dv=5)
    mask = sliding_window_mask(n, window, causal=causal)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(sliding_window_attention(q, k, v, window, causal=causal), expected, **FLOAT32)


@pytest.mark.parametrize("batch", [(), (4,), (2, 2, 3)])
def test_sliding_window_attention_accepts_any_leading_dims(batch):
    q, k, v = qkv(*batch, n=19)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=sliding_window_mask(19, 6))
    torch.testing.assert_close(sliding_window_attention(q, k, v, 6), expected, **FLOAT32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sliding_window_attention_in_half_precision(device, dtype):
    q, k, v = qkv(2, 2, n=40, dtype=dtype, device=device)
    mask = sliding_window_mask(40, 9, causal=True, device=device)
    expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask)
    out = sliding_window_attention(q, k, v, 9, causal=True)
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), expected, **HALF_TOLERANCE[dtype])


def test_sliding_window_attention_never_builds_the_n_by_n_scores():
    n, window, d = 512, 16, 4
    q, k, v = qkv(n=n, d=d)
    with LargestAllocation(q, k, v) as largest:
        sliding_window_attention(q, k, v, window)
    assert largest.nbytes <= 4 * n * 2 * window  # the banded float32 scores, far below 4 * n * n


def test_longformer_mask_properties():
    n, window, global_positions = 20, 4, [0, 7]
    mask = longformer_mask(n, window, global_positions)
    local = sliding_window_mask(n, window)
    assert torch.equal(mask, mask.T)  # symmetric, like the local window
    for g in global_positions:
        assert mask[g].all() and mask[:, g].all()  # a global token sees and is seen by all
    others = [i for i in range(n) if i not in global_positions]
    # Between two non-global tokens only the local window remains.
    assert torch.equal(mask[others][:, others], local[others][:, others])
    assert torch.equal(longformer_mask(n, window, []), local)
    assert torch.equal(longformer_mask(n, window, torch.tensor(global_positions)), mask)


# --------------------------------------------------------------------------------------------------
# Grouped-query attention and its costs
# --------------------------------------------------------------------------------------------------


def test_repeat_kv_is_shared_with_attention_and_maps_query_heads_to_kv_heads():
    assert repeat_kv is attention.repeat_kv
    x = torch.randn(2, 3, 5, 4)
    repeated = repeat_kv(x, 4)
    assert repeated.shape == (2, 12, 5, 4)
    for h in range(12):
        assert torch.equal(repeated[:, h], x[:, h // 4])


@pytest.mark.parametrize("num_heads, num_kv_heads", [(8, 8), (8, 2), (8, 1), (6, 3)])
def test_grouped_query_attention_matches_torch_enable_gqa(device, num_heads, num_kv_heads):
    q = torch.randn(2, num_heads, 9, 8, device=device)
    k, v = torch.randn(2, 2, num_kv_heads, 13, 8, device=device).unbind(0)
    mask = torch.rand(2, 1, 9, 13, device=device) > 0.3
    mask[..., 0] = True  # every query sees a key (torch gives NaN otherwise)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(grouped_query_attention(q, k, v, mask), expected, **FLOAT32)
    expected = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    torch.testing.assert_close(grouped_query_attention(q, k, v), expected, **FLOAT32)


@pytest.mark.parametrize("d_model, num_heads, num_kv_heads", [(64, 8, 8), (64, 8, 2), (64, 8, 1), (48, 6, 3)])
@pytest.mark.parametrize("bias", [True, False])
def test_attention_param_count_matches_multi_head_attention(d_model, num_heads, num_kv_heads, bias):
    module = attention.MultiHeadAttention(d_model, num_heads, num_kv_heads, bias=bias)
    expected = sum(p.numel() for p in module.parameters())
    assert attention_param_count(d_model, num_heads, num_kv_heads, bias=bias) == expected


def test_attention_param_count_of_llama_2_70b():
    # Llama 2 70B (Touvron et al. 2023): d_model 8192, 64 query heads, 8 kv heads, no biases.
    # q and out: 2 * 8192^2; k and v: 2 * 8192 * (8 * 128) -> 150,994,944 per layer.
    assert attention_param_count(8192, 64, 8, bias=False) == 150_994_944
    # Full multi-head attention would have 4 * 8192^2 = 268,435,456.
    assert attention_param_count(8192, 64, 64, bias=False) == 268_435_456


def test_kv_cache_bytes_of_published_models():
    # Llama 2 70B: 80 layers, 8 kv heads of size 128, float16: 2 * 80 * 8 * 128 * 2 = 327,680 bytes
    # (320 KiB) per token; a 4096-token context takes 1.25 GiB.
    assert kv_cache_bytes(1, 1, 80, 8, 128) == 327_680
    assert kv_cache_bytes(1, 4096, 80, 8, 128) == 5 * 2**28
    # Mistral 7B (Jiang et al. 2023): 32 layers, 8 kv heads of size 128; its rolling buffer keeps the
    # last 4096 tokens, 512 MiB per sequence in float16 instead of 4 GiB for 32k tokens (8x less).
    assert kv_cache_bytes(1, 4096, 32, 8, 128) == 512 * 2**20
    assert kv_cache_bytes(1, 32768, 32, 8, 128) == 4 * 2**30


def test_kv_cache_bytes_matches_the_cache_of_a_hugging_face_llama():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    batch, seq_len = 2, 7
    with torch.no_grad():
        cache = model(torch.randint(0, 50, (batch, seq_len)), use_cache=True).past_key_values
    cached = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    assert kv_cache_bytes(batch, seq_len, 3, 2, 8, bytes_per_value=4) == cached  # float32 model


# --------------------------------------------------------------------------------------------------
# Flash attention
# --------------------------------------------------------------------------------------------------

SHAPES = [  # (N, M, block_size): lengths not divisible by the block, N != M, length 1
    (1, 1, 128),
    (1, 17, 4),
    (17, 1, 4),
    (64, 64, 16),
    (70, 130, 32),
    (130, 70, 32),
    (45, 45, 128),
]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n, m, block_size", SHAPES)
def test_flash_attention_matches_torch(n, m, block_size, causal):
    q, k, v = qkv(2, 3, n=n, m=m, dv=5)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    actual = flash_attention(q, k, v, causal=causal, block_size=block_size)
    torch.testing.assert_close(actual, expected, **FLOAT32)


@pytest.mark.parametrize("n, m, block_size", SHAPES)
def test_flash_attention_with_a_mask_matches_torch(n, m, block_size):
    q, k, v = qkv(2, 3, n=n, m=m)
    mask = torch.rand(2, 1, n, m) > 0.5
    mask[..., 0] = True
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(flash_attention(q, k, v, mask, block_size=block_size), expected, **FLOAT32)
    # A mask and causal=True combine: torch takes one mask, so give it both at once.
    causal = torch.ones(n, m, dtype=torch.bool).tril()
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask & causal)
    actual = flash_attention(q, k, v, mask, causal=True, block_size=block_size)
    torch.testing.assert_close(actual, expected, **FLOAT32)


def test_flash_attention_with_a_padding_mask(device):
    q, k, v = qkv(2, 4, n=50, d=16, device=device)
    lengths = torch.tensor([50, 23], device=device)
    tokens = (torch.arange(50, device=device) < lengths[:, None]).long()  # (B, M) 0/1
    mask = attention.padding_mask(tokens)  # (B, 1, 1, M)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(flash_attention(q, k, v, mask, block_size=16), expected, **FLOAT32)


def test_flash_attention_fully_masked_rows_give_zeros():
    q, k, v = qkv(2, 3, n=20, m=30)
    mask = torch.rand(2, 3, 20, 30) > 0.5
    mask[..., 0] = True
    mask[0, 1, 4] = False
    mask[1, :, 11:13] = False
    out = flash_attention(q, k, v, mask, block_size=8)
    seen = mask.any(-1)
    assert torch.equal(out[~seen], torch.zeros_like(out[~seen]))
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out[seen], expected[seen], **FLOAT32)
    torch.testing.assert_close(out, attention.scaled_dot_product_attention(q, k, v, mask)[0], **FLOAT32)


@pytest.mark.parametrize("batch", [(), (5,), (2, 2, 3)])
def test_flash_attention_accepts_any_leading_dims(batch):
    q, k, v = qkv(*batch, n=21, m=10)
    expected = F.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(flash_attention(q, k, v, block_size=8), expected, **FLOAT32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_flash_attention_in_half_precision(device, dtype):
    q, k, v = qkv(2, 4, n=100, m=90, d=32, dtype=dtype, device=device)
    expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    out = flash_attention(q, k, v, causal=True, block_size=32)
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), expected, **HALF_TOLERANCE[dtype])


def test_flash_attention_never_builds_the_n_by_m_scores():
    n, m, block_size = 256, 320, 32
    q, k, v = qkv(n=n, m=m, d=4)
    mask = torch.rand(n, m) > 0.1
    with LargestAllocation(q, k, v, mask) as largest:
        flash_attention(q, k, v, mask, block_size=block_size)
    # One float32 tile of scores, or the (N, D) output; the (N, M) scores would take 4 * n * m bytes.
    assert largest.nbytes <= 4 * max(block_size * block_size, n * 4)


def test_flash_attention_gradients():
    q, k, v = (t.double().requires_grad_() for t in qkv(2, n=7, m=5, d=3))
    mask = torch.rand(7, 5) > 0.3
    mask[2] = False  # a fully masked row
    assert torch.autograd.gradcheck(partial(flash_attention, mask=mask, block_size=3), (q, k, v))
    assert torch.autograd.gradcheck(partial(flash_attention, causal=True, block_size=2), (q, k, v))


def test_flash_attention_gradients_match_torch():
    q, k, v = (t.requires_grad_() for t in qkv(2, n=40, m=40, d=8))
    grad = torch.randn(2, 40, 8)
    ours = torch.autograd.grad(flash_attention(q, k, v, causal=True, block_size=16), (q, k, v), grad)
    theirs = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v), grad)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


# --------------------------------------------------------------------------------------------------
# Linear attention
# --------------------------------------------------------------------------------------------------


def explicit_linear_attention(q, k, v, causal):
    """out_i = sum_j phi(q_i).phi(k_j) v_j / sum_j phi(q_i).phi(k_j), as an (N, M) matrix: O(N^2)."""
    similarity = (F.elu(q) + 1) @ (F.elu(k) + 1).transpose(-1, -2)  # (..., N, M)
    if causal:
        similarity = similarity.tril()
    return (similarity @ v) / similarity.sum(-1, keepdim=True)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_linear_attention_matches_the_explicit_formula(device, batch, causal):
    q, k, v = qkv(*batch, n=23, d=6, dv=4, device=device)
    expected = explicit_linear_attention(q, k, v, causal)
    torch.testing.assert_close(linear_attention(q, k, v, causal=causal), expected, **FLOAT32)


def test_linear_attention_with_more_keys_than_queries():
    q, k, v = qkv(2, n=5, m=31)
    expected = explicit_linear_attention(q, k, v, causal=False)
    torch.testing.assert_close(linear_attention(q, k, v), expected, **FLOAT32)


def test_causal_linear_attention_last_position_sees_everything():
    q, k, v = qkv(3, n=12)
    causal, full = linear_attention(q, k, v, causal=True), linear_attention(q, k, v)
    torch.testing.assert_close(causal[..., -1, :], full[..., -1, :], **FLOAT32)
    # The first position sees only its own value.
    torch.testing.assert_close(causal[..., 0, :], v[..., 0, :], **FLOAT32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_linear_attention_in_half_precision(dtype):
    q, k, v = qkv(2, n=30, d=8, dtype=dtype)
    expected = explicit_linear_attention(q.float(), k.float(), v.float(), True)
    out = linear_attention(q, k, v, causal=True)
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), expected, **HALF_TOLERANCE[dtype])


@pytest.mark.parametrize("causal", [False, True])
def test_linear_attention_gradients(causal):
    q, k, v = (t.double().requires_grad_() for t in qkv(2, n=6, d=3, dv=2))
    assert torch.autograd.gradcheck(partial(linear_attention, causal=causal), (q, k, v))


# --------------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------------


def test_bad_input_raises_clear_errors():
    q, k, v = qkv(2, n=6)
    with pytest.raises(ValueError, match="window"):
        sliding_window_mask(6, 0)
    with pytest.raises(ValueError, match="window"):
        sliding_window_attention(q, k, v, 0)
    with pytest.raises(ValueError, match="same length"):
        sliding_window_attention(q, k[:, :4], v[:, :4], 2)
    with pytest.raises(ValueError, match="block_size"):
        flash_attention(q, k, v, block_size=0)
    with pytest.raises(ValueError, match=r"\(2, 6, 8\).*\(2, 6, 4\)"):
        flash_attention(q, k[..., :4], v)  # mismatched head sizes
    with pytest.raises(ValueError, match="head size"):
        linear_attention(q, k[..., :4], v)
    with pytest.raises(ValueError, match="same length M"):
        flash_attention(q, k, v[:, :5])
    with pytest.raises(ValueError, match=r"mask of shape \(5, 6\)"):
        flash_attention(q, k, v, torch.ones(5, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match="bool"):
        flash_attention(q, k, v, torch.ones(6, 6))
    with pytest.raises(ValueError, match="as many queries as keys"):
        linear_attention(q, k[:, :4], v[:, :4], causal=True)
    with pytest.raises(ValueError, match=r"key/value heads \(4\) must divide .* query heads \(6\)"):
        grouped_query_attention(torch.randn(1, 6, 3, 8), torch.randn(1, 4, 3, 8), torch.randn(1, 4, 3, 8))
    with pytest.raises(ValueError, match=r"key/value heads \(3\) must divide .* query heads \(8\)"):
        attention_param_count(64, 8, 3)
    with pytest.raises(ValueError, match=r"num_heads \(5\) must divide d_model \(64\)"):
        attention_param_count(64, 5, 5)
    with pytest.raises(ValueError, match=r"global_positions must lie in \[0, 6\)"):
        longformer_mask(6, 2, [1, 6])
    with pytest.raises(ValueError, match="integer indices"):
        longformer_mask(6, 2, torch.tensor([True, False, False, False, False, False]))
    with pytest.raises(ValueError, match="seq_len"):
        kv_cache_bytes(1, 0, 2, 2, 8)


# ---------------------------------------------------------------------------------------------- autocast


@pytest.mark.parametrize("function", [flash_attention, partial(flash_attention, causal=True, block_size=4),
                                      linear_attention, partial(linear_attention, causal=True)])
def test_sums_stay_in_float32_inside_an_autocast_region(function):
    """Under autocast the matmuls would run in bfloat16 (errors near 1e-2); the running sums must not."""
    q, k, v = qkv(2, n=16, d=8)
    expected = function(q, k, v)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = function(q, k, v)
    assert inside.dtype == torch.float32
    torch.testing.assert_close(inside, expected, **FLOAT32)
