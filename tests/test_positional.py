"""Tests for bertlab.positional against Hugging Face T5, Llama and Bloom, and the papers' formulas."""

import math

import pytest
import torch
from transformers import LlamaConfig, T5Config
from transformers.models.bloom.modeling_bloom import build_alibi_tensor
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb
from transformers.models.t5.modeling_t5 import T5Attention

from bertlab.positional import (
    LearnedPositionalEmbedding,
    T5RelativeBias,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    relative_position_bucket,
    rope_matrix,
    sinusoidal_positional_encoding,
)

# ----------------------------------------------------------------------------------------------------
# Sinusoids and learned positions


@pytest.mark.parametrize("d_model", [8, 7])
def test_sinusoids_match_the_formula(d_model):
    encoding = sinusoidal_positional_encoding(20, d_model)
    assert encoding.shape == (20, d_model) and encoding.dtype == torch.float32
    for position in (0, 1, 13):
        for feature in range(d_model):
            angle = position / 10000 ** (2 * (feature // 2) / d_model)
            expected = math.sin(angle) if feature % 2 == 0 else math.cos(angle)
            assert encoding[position, feature].item() == pytest.approx(expected, abs=1e-6)


def test_sinusoid_inner_product_depends_only_on_distance():
    encoding = sinusoidal_positional_encoding(64, 32).double()
    gram = encoding @ encoding.T  # (P, P)
    for distance in (0, 1, 5, 20):
        diagonal = torch.diagonal(gram, offset=distance)
        torch.testing.assert_close(diagonal, diagonal[0].expand_as(diagonal), atol=1e-5, rtol=0)
    # ... and it is not constant across distances.
    assert gram[0, 1] > gram[0, 20]


def test_learned_positional_embedding():
    embedding = LearnedPositionalEmbedding(16, 8)
    assert embedding.weight.shape == (16, 8)
    torch.testing.assert_close(embedding(5), embedding.weight[:5])
    positions = torch.tensor([[3, 0, 15], [1, 1, 2]])
    torch.testing.assert_close(embedding(positions), embedding.weight[positions])
    assert embedding(positions).shape == (2, 3, 8)
    with pytest.raises(ValueError, match="sequence of length 17 exceeds the 16 positions this embedding learned"):
        embedding(17)
    with pytest.raises(ValueError, match="sequence of length 21 exceeds the 16 positions"):
        embedding(torch.tensor([0, 20]))
    with pytest.raises(ValueError, match="must be >= 0"):
        embedding(torch.tensor([-1]))
    with pytest.raises(ValueError, match="integer tensor"):
        embedding(torch.tensor([0.0, 1.0]))


# ----------------------------------------------------------------------------------------------------
# T5 relative position buckets


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("num_buckets", "max_distance"), [(32, 128), (8, 20), (16, 16), (6, 50)])
def test_t5_buckets_match_hugging_face(bidirectional, num_buckets, max_distance):
    relative_position = torch.arange(-300, 301)[None, :] + torch.arange(0, 3)[:, None]  # (3, 601)
    ours = relative_position_bucket(relative_position, bidirectional, num_buckets, max_distance)
    theirs = T5Attention._relative_position_bucket(relative_position, bidirectional, num_buckets, max_distance)
    assert torch.equal(ours, theirs)
    assert ours.min() >= 0 and ours.max() < num_buckets


@pytest.mark.parametrize("is_decoder", [False, True])
def test_t5_relative_bias_matches_hugging_face(is_decoder, device):
    config = T5Config(
        d_model=16, d_kv=4, num_heads=4, relative_attention_num_buckets=8, relative_attention_max_distance=20
    )
    config.is_decoder = is_decoder
    theirs = T5Attention(config, has_relative_attention_bias=True).to(device)
    ours = T5RelativeBias(4, bidirectional=not is_decoder, num_buckets=8, max_distance=20).to(device)
    ours.load_state_dict({"relative_attention_bias.weight": theirs.relative_attention_bias.weight})
    for query_length, key_length in [(5, 5), (7, 30), (30, 3)]:
        expected = theirs.compute_bias(query_length, key_length)[0]  # (H, N, M)
        torch.testing.assert_close(ours(query_length, key_length), expected, rtol=0, atol=0)
    assert ours(6).shape == (4, 6, 6)


def test_t5_bias_sign_convention():
    # Relative position = key - query: with bidirectional buckets, keys after the query use the upper half.
    bias = T5RelativeBias(1, num_buckets=8, max_distance=20)
    with torch.no_grad():
        bias.relative_attention_bias.weight.copy_(torch.arange(8.0)[:, None])
    table = bias(3)[0]
    assert table[0, 1] == 4 + 1  # key one step after the query: upper half, bucket 4 + 1
    assert table[1, 0] == 1  # key one step before: lower half, bucket 1


def test_bad_bucket_arguments_raise():
    with pytest.raises(ValueError, match="integer tensor"):
        relative_position_bucket(torch.tensor([1.0]))
    with pytest.raises(ValueError, match="num_buckets=2 is too small"):
        relative_position_bucket(torch.tensor([1]), bidirectional=True, num_buckets=2)
    with pytest.raises(ValueError, match="max_distance=4"):
        relative_position_bucket(torch.tensor([1]), num_buckets=32, max_distance=4)


# ----------------------------------------------------------------------------------------------------
# ALiBi


def _paper_slopes(n):
    """The slopes as written in the ALiBi reference code (ofirpress/attention_with_linear_biases)."""

    def get_slopes_power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        ratio = start
        return [start * ratio**i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return get_slopes_power_of_2(closest_power_of_2) + _paper_slopes(2 * closest_power_of_2)[0::2][
        : n - closest_power_of_2
    ]


@pytest.mark.parametrize("num_heads", [1, 2, 5, 6, 8, 12, 16, 20])
def test_alibi_slopes_match_paper_and_bloom(num_heads):
    slopes = alibi_slopes(num_heads)
    assert slopes.shape == (num_heads,) and slopes.dtype == torch.float32
    torch.testing.assert_close(slopes, torch.tensor(_paper_slopes(num_heads), dtype=torch.float32))
    # Bloom's bias for an all-ones mask is slope * key index; key index 1 gives the slopes.
    bloom = build_alibi_tensor(torch.ones(1, 4), num_heads, torch.float32)  # (H, 1, 4)
    torch.testing.assert_close(slopes, bloom[:, 0, 1])


def test_alibi_slopes_for_eight_heads():
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([2.0**-k for k in range(1, 9)]))


def test_alibi_bias_values(device):
    slopes = alibi_slopes(3)
    causal = alibi_bias(3, 5, 7, device=device).cpu()
    symmetric = alibi_bias(3, 5, 7, causal=False, device=device).cpu()
    assert causal.shape == symmetric.shape == (3, 5, 7)
    for head in range(3):
        for i in range(5):
            for j in range(7):
                expected = -slopes[head] * abs(i - j)
                assert symmetric[head, i, j] == expected
                assert causal[head, i, j] == (expected if j <= i else 0.0)


def test_causal_alibi_matches_bloom_after_softmax():
    # Bloom adds slope * j instead of -slope * (i - j): the difference is constant in each row,
    # so the attention weights over the visible (causal) keys are the same.
    num_heads, n = 6, 9
    scores = torch.randn(num_heads, n, n)
    visible = torch.ones(n, n).tril().bool()
    bloom = build_alibi_tensor(torch.ones(1, n), num_heads, torch.float32)  # (H, 1, M)
    ours = torch.softmax((scores + alibi_bias(num_heads, n)).masked_fill(~visible, -math.inf), dim=-1)
    theirs = torch.softmax((scores + bloom).masked_fill(~visible, -math.inf), dim=-1)
    torch.testing.assert_close(ours, theirs)


def test_bad_alibi_arguments_raise():
    with pytest.raises(ValueError, match="num_heads must be a positive integer, got 0"):
        alibi_slopes(0)
    with pytest.raises(ValueError, match="m must be a positive integer"):
        alibi_bias(2, 3, 0)


# ----------------------------------------------------------------------------------------------------
# RoPE


@pytest.mark.parametrize("base", [10000.0, 500000.0])
def test_rotate_half_rope_matches_llama(base, device):
    batch, heads, seq_len, head_dim = 2, 3, 11, 16
    config = LlamaConfig(
        hidden_size=heads * head_dim,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        rope_parameters={"rope_type": "default", "rope_theta": base},
    )
    rotary = LlamaRotaryEmbedding(config).to(device)
    q = torch.randn(batch, heads, seq_len, head_dim, device=device)
    k = torch.randn(batch, heads, seq_len, head_dim, device=device)
    position_ids = torch.stack([torch.arange(seq_len), torch.arange(5, 5 + seq_len)]).to(device)  # (B, N)
    cos, sin = rotary(q, position_ids)
    expected_q, expected_k = apply_rotary_pos_emb(q, k, cos, sin)

    positions = position_ids[:, None, :]  # (B, 1, N), broadcast over heads
    torch.testing.assert_close(apply_rope(q, positions, base, interleaved=False), expected_q)
    torch.testing.assert_close(apply_rope(k, positions, base, interleaved=False), expected_k)
    # Default positions are 0 .. N - 1, the first row of position_ids.
    torch.testing.assert_close(apply_rope(q[:1], base=base, interleaved=False), expected_q[:1])


def test_interleaved_rope_equals_rotation_matrix():
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    positions = torch.tensor([0, 1, 2, 7, 50, 1000])
    rotated = apply_rope(x, positions)
    for index, position in enumerate(positions.tolist()):
        matrix = rope_matrix(position, 8, dtype=torch.float64)
        torch.testing.assert_close(rotated[:, index], x[:, index] @ matrix.T)
        torch.testing.assert_close(matrix @ matrix.T, torch.eye(8, dtype=torch.float64))


def _complex_rope(x, base=10000.0):
    """RoFormer / Meta's Llama reference, in float64: feature pairs as complex numbers times exp(i m theta_j)."""
    *leading, seq_len, head_dim = x.shape
    theta = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.arange(seq_len, dtype=torch.float64)[:, None] * theta  # (N, D/2)
    pairs = torch.view_as_complex(x.double().reshape(*leading, seq_len, head_dim // 2, 2))
    return torch.view_as_real(pairs * torch.polar(torch.ones_like(angles), angles)).reshape(x.shape)


def test_interleaved_rope_matches_complex_multiplication():
    x = torch.randn(3, 10, 12, dtype=torch.float64)
    torch.testing.assert_close(apply_rope(x), _complex_rope(x))


def test_two_layouts_are_a_permutation_of_each_other():
    x = torch.randn(4, 9, 10)
    half_to_interleaved = torch.stack([torch.arange(5), torch.arange(5, 10)], dim=-1).flatten()
    torch.testing.assert_close(
        apply_rope(x[..., half_to_interleaved], interleaved=True),
        apply_rope(x, interleaved=False)[..., half_to_interleaved],
    )


@pytest.mark.parametrize("interleaved", [True, False])
def test_rope_scores_depend_only_on_offset(interleaved):
    # <R_m q, R_n k> = <q, R_{n-m} k>
    q, k = torch.randn(2, 16, dtype=torch.float64)

    def rotate(vector, position):
        return apply_rope(vector[None], torch.tensor([position]), interleaved=interleaved)[0]

    for m, n in [(0, 0), (3, 10), (10, 3), (100, 117)]:
        torch.testing.assert_close(rotate(q, m) @ rotate(k, n), q @ rotate(k, n - m))
    rotated_q, rotated_k = rope_matrix(3, 16, dtype=torch.float64) @ q, rope_matrix(10, 16, dtype=torch.float64) @ k
    torch.testing.assert_close(rotated_q @ rotated_k, q @ (rope_matrix(7, 16, dtype=torch.float64) @ k))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rope_half_precision(dtype, device):
    # Positions up to 2047: half-precision angles would be off by whole radians; float32 ones are not.
    x = torch.randn(2, 2048, 8, device=device).to(dtype)
    out = apply_rope(x)
    assert out.dtype == dtype
    expected = _complex_rope(x.cpu()).to(dtype)  # rounded once, from float64
    tolerance = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {"atol": 3e-3, "rtol": 3e-3}
    torch.testing.assert_close(out.cpu().float(), expected.float(), **tolerance)


def test_gradcheck_apply_rope():
    x = torch.randn(2, 5, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: apply_rope(t), (x,))
    assert torch.autograd.gradcheck(lambda t: apply_rope(t, interleaved=False), (x,))


def test_bad_rope_inputs_raise():
    with pytest.raises(ValueError, match="head size must be even; got head_dim 7"):
        apply_rope(torch.randn(2, 3, 7))
    with pytest.raises(ValueError, match="head_dim 5"):
        rope_matrix(1, 5)
    with pytest.raises(ValueError, match=r"positions of shape \(4,\) do not match x of shape \(2, 3, 8\)"):
        apply_rope(torch.randn(2, 3, 8), torch.arange(4))
    with pytest.raises(ValueError, match=r"do not broadcast"):
        apply_rope(torch.randn(2, 3, 8), torch.zeros(5, 3))
    with pytest.raises(ValueError, match=r"\(\.\.\., N, D\)"):
        apply_rope(torch.randn(8))


def test_apply_rope_takes_cpu_positions_for_queries_on_another_device():
    from device_helpers import DeviceAudit

    x = torch.randn(2, 3, 5, 8, device="meta")
    with DeviceAudit():
        rotated = apply_rope(x, positions=torch.arange(5))
    assert rotated.device.type == "meta" and rotated.shape == x.shape
