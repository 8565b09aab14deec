"""Positional information for attention, which by itself is blind to order (chapter 03).

Absolute positions are added to the token embeddings:
- sinusoids, fixed (Vaswani et al., 2017, "Attention Is All You Need");
- a learned table, one vector per position (BERT, Devlin et al., 2019).

Relative positions act inside attention:
- T5 adds a learned scalar per head and per bucket of key index - query index (Raffel et al., 2020);
- ALiBi adds a fixed linear penalty -slope * distance per head (Press et al., 2022);
- RoPE rotates queries and keys so that their dot product depends only on the offset
  (RoFormer, Su et al., 2021; the rotate-half layout of GPT-NeoX, Black et al., 2022, and of
  Hugging Face's Llama, whose weights are permuted to match; Meta's own Llama code rotates interleaved pairs).

Shapes: H heads, N queries, M keys, D head size, P positions.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from bertlab.utils import compute_dtype


def _inverse_frequencies(dim: int, base: float, dtype: torch.dtype, device=None) -> torch.Tensor:
    """theta_i = base^(-2i / dim) for i = 0 .. ceil(dim / 2) - 1: shape (ceil(dim / 2),)."""
    exponents = torch.arange(0, dim, 2, dtype=dtype, device=device) / dim
    return base**-exponents


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value}")


# ----------------------------------------------------------------------------------------------------
# Absolute positions: sinusoids and a learned table


def sinusoidal_positional_encoding(num_positions: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The fixed sinusoidal encodings of the original Transformer, shape (P, d_model), float32.

    PE[p, 2i] = sin(p * theta_i) and PE[p, 2i + 1] = cos(p * theta_i), with theta_i = base^(-2i / d_model).
    Each (sin, cos) pair is a point on a circle turning with p, so PE[p + k] is a fixed rotation of PE[p]
    and <PE[p], PE[q]> = sum_i cos((p - q) * theta_i) depends only on the distance p - q.

    An odd ``d_model`` is allowed: the last feature is then the sine of one more frequency, whose cosine
    would not fit (the same as computing d_model + 1 features and dropping the last).
    """
    if num_positions < 0:
        raise ValueError(f"num_positions must be >= 0, got {num_positions}")
    _check_positive(d_model=d_model)
    positions = torch.arange(num_positions, dtype=torch.float32)
    angles = positions[:, None] * _inverse_frequencies(d_model, base, torch.float32)  # (P, ceil(d/2))
    encoding = torch.zeros(num_positions, d_model)
    encoding[:, 0::2] = torch.sin(angles)
    encoding[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return encoding


class LearnedPositionalEmbedding(nn.Module):
    """A learned vector per absolute position, as in BERT: ``weight`` has shape (P, d_model).

    Initialized from N(0, 0.02^2), BERT's ``initializer_range``. Unlike sinusoids it cannot encode a
    position it never learned: asking for one is an error, not a silent wrap-around.
    """

    def __init__(self, num_positions: int, d_model: int):
        super().__init__()
        _check_positive(num_positions=num_positions, d_model=d_model)
        self.num_positions = num_positions
        self.d_model = d_model
        self.weight = nn.Parameter(torch.empty(num_positions, d_model).normal_(std=0.02))

    def forward(self, positions: torch.Tensor | int) -> torch.Tensor:
        """Embeddings of ``positions``: an integer tensor (...,) -> (..., d_model), or a sequence
        length N -> the embeddings of positions 0 .. N - 1, shape (N, d_model)."""
        if isinstance(positions, int):
            if positions < 0:
                raise ValueError(f"sequence length must be >= 0, got {positions}")
            if positions > self.num_positions:
                raise ValueError(
                    f"sequence of length {positions} exceeds the {self.num_positions} positions "
                    f"this embedding learned"
                )
            return self.weight[:positions]  # (N, d_model)
        if positions.is_floating_point() or positions.is_complex():
            raise ValueError(f"positions must be an integer tensor, got dtype {positions.dtype}")
        if positions.numel() > 0:
            lowest, highest = positions.min().item(), positions.max().item()
            if lowest < 0:
                raise ValueError(f"positions must be >= 0, got {lowest}")
            if highest >= self.num_positions:
                raise ValueError(
                    f"sequence of length {highest + 1} exceeds the {self.num_positions} positions this "
                    f"embedding learned (largest position asked for: {highest})"
                )
        return F.embedding(positions, self.weight)

    def extra_repr(self) -> str:
        return f"{self.num_positions}, {self.d_model}"


# ----------------------------------------------------------------------------------------------------
# T5 relative position buckets


def relative_position_bucket(
    relative_position: torch.Tensor, bidirectional: bool = True, num_buckets: int = 32, max_distance: int = 128
) -> torch.Tensor:
    """T5's bucket for each relative position = key (memory) index - query index; same shape, int64.

    Identical to ``T5Attention._relative_position_bucket`` (after Mesh TensorFlow). When
    ``bidirectional``, half of the buckets are for keys after the query (relative position > 0) and half
    for keys at or before it; otherwise keys after the query all share bucket 0 (a causal decoder never
    sees them). Within each half of B buckets, distances 0 .. B/2 - 1 get a bucket each, and larger
    distances share B/2 logarithmically wider buckets up to ``max_distance``; every distance beyond it
    falls in the last bucket.
    """
    if relative_position.is_floating_point() or relative_position.is_complex():
        raise ValueError(f"relative_position must be an integer tensor, got dtype {relative_position.dtype}")
    relative_position = relative_position.long()
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets += (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        distance = (-relative_position).clamp(min=0)
    max_exact = num_buckets // 2
    if max_exact < 1:
        raise ValueError(
            f"num_buckets={num_buckets * (2 if bidirectional else 1)} is too small: need at least "
            f"{4 if bidirectional else 2} buckets (bidirectional={bidirectional})"
        )
    if max_distance <= max_exact:
        raise ValueError(f"max_distance={max_distance} must exceed the {max_exact} exact buckets")

    is_small = distance < max_exact
    # Distances >= max_exact: log-spaced buckets. The clamp only keeps log() finite where is_small
    # discards the value anyway; the float32 arithmetic is T5's, so buckets agree exactly.
    log_ratio = torch.log(distance.clamp(min=max_exact).float() / max_exact) / math.log(max_distance / max_exact)
    distance_if_large = (max_exact + (log_ratio * (num_buckets - max_exact)).long()).clamp(max=num_buckets - 1)
    return buckets + torch.where(is_small, distance, distance_if_large)


class T5RelativeBias(nn.Module):
    """T5's learned relative position bias: one scalar per head and bucket, added to the scores.

    ``relative_attention_bias`` is an ``nn.Embedding(num_buckets, num_heads)`` named as in Hugging Face
    T5, so its weights copy in. T5 encoders use ``bidirectional=True``, decoders ``False``.
    """

    def __init__(self, num_heads: int, bidirectional: bool = True, num_buckets: int = 32, max_distance: int = 128):
        super().__init__()
        _check_positive(num_heads=num_heads)
        self.num_heads = num_heads
        self.bidirectional = bidirectional
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.relative_attention_bias = nn.Embedding(num_buckets, num_heads)

    def forward(self, query_length: int, key_length: int | None = None, device=None) -> torch.Tensor:
        """bias[h, i, j] = weight[bucket(j - i), h] for query i and key j: shape (H, N, M)."""
        key_length = query_length if key_length is None else key_length
        device = self.relative_attention_bias.weight.device if device is None else device
        query_position = torch.arange(query_length, device=device)[:, None]  # (N, 1)
        key_position = torch.arange(key_length, device=device)[None, :]  # (1, M)
        buckets = relative_position_bucket(
            key_position - query_position, self.bidirectional, self.num_buckets, self.max_distance
        )  # (N, M)
        return self.relative_attention_bias(buckets).permute(2, 0, 1)  # (H, N, M)


# ----------------------------------------------------------------------------------------------------
# ALiBi: attention with linear biases


def _geometric_slopes(num_heads: int, device=None) -> torch.Tensor:
    """2^(-8h / H) for h = 1 .. H: the geometric sequence of ALiBi for H a power of two."""
    heads = torch.arange(1, num_heads + 1, dtype=torch.float64, device=device)
    return 2.0 ** (-8.0 * heads / num_heads)


def alibi_slopes(num_heads: int, *, device=None) -> torch.Tensor:
    """The ALiBi slope of each head, shape (H,), float32 (Press et al., 2022).

    For H a power of two: m_h = 2^(-8h / H), h = 1 .. H (H = 8 gives 1/2, 1/4, ..., 1/256). Otherwise,
    as in the paper's code: the slopes of the closest smaller power of two C, followed by the first
    H - C of every other slope of the 2C set (those interleave with the first C slopes).
    """
    _check_positive(num_heads=num_heads)
    closest_power_of_two = 2 ** math.floor(math.log2(num_heads))
    slopes = _geometric_slopes(closest_power_of_two, device)
    if closest_power_of_two < num_heads:
        extra = _geometric_slopes(2 * closest_power_of_two, device)[0::2][: num_heads - closest_power_of_two]
        slopes = torch.cat([slopes, extra])
    return slopes.float()


def alibi_bias(num_heads: int, n: int, m: int | None = None, causal: bool = True, *, device=None) -> torch.Tensor:
    """The ALiBi bias added to the attention scores, shape (H, N, M), float32.

    Query i and key j are aligned top-left (query i is at position i), like ``causal_mask``.
    - causal: bias[h, i, j] = -m_h * (i - j) for keys j <= i. Keys j > i get 0: ALiBi itself masks
      nothing, so pair the bias with ``causal_mask`` (those keys are masked out there); a finite value
      keeps bias + mask free of NaN, and 0 never rewards a future key over the query's own position.
    - not causal: bias[h, i, j] = -m_h * |i - j|.
    """
    _check_positive(n=n)
    m = n if m is None else m
    _check_positive(m=m)
    slopes = alibi_slopes(num_heads, device=device)  # (H,)
    query_position = torch.arange(n, device=device)[:, None]  # (N, 1)
    key_position = torch.arange(m, device=device)[None, :]  # (1, M)
    distance = query_position - key_position  # (N, M), i - j
    distance = distance.clamp(min=0) if causal else distance.abs()
    return -slopes[:, None, None] * distance  # (H, N, M)


# ----------------------------------------------------------------------------------------------------
# RoPE: rotary position embeddings


def _check_head_dim(head_dim: int, shape: tuple | None = None) -> None:
    if head_dim % 2 != 0 or head_dim < 2:
        where = f" (input shape {shape})" if shape is not None else ""
        raise ValueError(
            f"RoPE rotates pairs of features, so the head size must be even; got head_dim {head_dim}{where}"
        )


def _rotate_pairs(first, second, cos, sin):
    """Rotate each point (first, second) by the angle whose cosine and sine are given."""
    return first * cos - second * sin, first * sin + second * cos


def rope_matrix(
    position: float | int, head_dim: int, base: float = 10000.0, *, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """The rotation R_{theta,m} of RoFormer for position m, shape (D, D).

    Block diagonal with D / 2 blocks [[cos(m theta_i), -sin(m theta_i)], [sin(m theta_i), cos(m theta_i)]]
    acting on features (2i, 2i + 1), theta_i = base^(-2i / D). R_m^T R_n = R_{n-m}, which is why
    <R_m q, R_n k> = <q, R_{n-m} k> depends only on the offset n - m.
    """
    _check_head_dim(head_dim)
    angles = float(position) * _inverse_frequencies(head_dim, base, dtype)  # (D/2,)
    cos, sin = torch.cos(angles), torch.sin(angles)
    matrix = torch.zeros(head_dim, head_dim, dtype=dtype)
    even, odd = torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)
    matrix[even, even] = cos
    matrix[even, odd] = -sin
    matrix[odd, even] = sin
    matrix[odd, odd] = cos
    return matrix


def apply_rope(
    x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0, interleaved: bool = True
) -> torch.Tensor:
    """Rotate the features of queries or keys x (..., N, D) by their positions: x_m -> R_{theta,m} x_m.

    Feature pair i is rotated by the angle m * theta_i, theta_i = base^(-2i / D).
    - ``interleaved=True``: pairs are (2i, 2i + 1), as in RoFormer (Su et al.) and ``rope_matrix``.
    - ``interleaved=False``: pairs are (i, i + D/2), the rotate-half layout of GPT-NeoX and Hugging Face's Llama.
    The two are the same rotation on permuted features, so only weights trained with one layout
    work with it.

    Args:
        x: (..., N, D), D even; e.g. (B, H, N, D) queries or keys.
        positions: the position m of each of the N vectors, (N,) or broadcastable to (..., N), integer
            or float; defaults to 0 .. N - 1.
        base: the base of the geometric frequencies (10000 in RoFormer and Llama 2).
        interleaved: the pair layout, see above.

    Returns:
        (..., N, D) in the dtype of x; computed in float32 for half-precision inputs.
    """
    if x.dim() < 2:
        raise ValueError(f"apply_rope expects x of shape (..., N, D), got shape {tuple(x.shape)}")
    *_, seq_len, head_dim = x.shape
    _check_head_dim(head_dim, tuple(x.shape))
    input_dtype, dtype = x.dtype, compute_dtype(x)
    if positions is None:
        positions = torch.arange(seq_len, device=x.device)
    if positions.dim() == 0 or positions.shape[-1] != seq_len:
        raise ValueError(
            f"positions of shape {tuple(positions.shape)} do not match x of shape {tuple(x.shape)}: "
            f"expected (N,) or (..., N) with N = {seq_len}"
        )
    try:
        torch.broadcast_shapes(positions.shape, x.shape[:-1])
    except RuntimeError:
        raise ValueError(
            f"positions of shape {tuple(positions.shape)} do not broadcast to x's leading shape "
            f"{tuple(x.shape[:-1])}"
        ) from None

    positions = positions.to(device=x.device, dtype=dtype)
    angles = positions[..., None] * _inverse_frequencies(head_dim, base, dtype, x.device)  # (..., N, D/2)
    cos, sin = torch.cos(angles), torch.sin(angles)
    x = x.to(dtype)
    if interleaved:
        even, odd = _rotate_pairs(x[..., 0::2], x[..., 1::2], cos, sin)
        rotated = torch.stack([even, odd], dim=-1).flatten(-2)  # (..., N, D), pairs back in place
    else:
        first, second = _rotate_pairs(x[..., : head_dim // 2], x[..., head_dim // 2 :], cos, sin)
        rotated = torch.cat([first, second], dim=-1)
    return rotated.to(input_dtype)
