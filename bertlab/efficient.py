"""Efficient attention: sliding windows, grouped-query, flash and linear attention (chapter 05).

Dense attention stores an (N, M) matrix of scores per head, so its memory grows as N^2. This module
collects the standard ways around that, each written to be compared with the dense version:

- sliding-window attention (Longformer, Beltagy et al. 2020; Mistral 7B, Jiang et al. 2023) keeps
  only the keys near each query, and is computed in blocks so that memory grows as N * window;
- grouped-query attention (Ainslie et al. 2023; multi-query attention, Shazeer 2019) shares each key
  and value head between several query heads, which shrinks the parameters and the KV cache;
- flash attention (Dao et al. 2022) tiles queries and keys and combines the tiles with the online
  softmax (Milakov and Gimelshein 2018), so the (N, M) matrix never exists in memory;
- linear attention (Katharopoulos et al. 2020) replaces exp(q . k) by phi(q) . phi(k) and reorders
  the products, which costs O(N D^2) instead of O(N^2 D).

Shapes: B batch, H heads (Hq query heads, Hkv key/value heads), N queries, M keys, D head size.
Every function accepts any leading batch dims in place of (B, H). Masks are bool, True = may attend.
"""

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from .attention import check_attention_inputs, repeat_kv, scaled_dot_product_attention
from bertlab.utils import compute_dtype, without_autocast

__all__ = [
    "sliding_window_mask",
    "sliding_window_attention",
    "longformer_mask",
    "repeat_kv",
    "grouped_query_attention",
    "attention_param_count",
    "kv_cache_bytes",
    "flash_attention",
    "linear_attention",
]


# --------------------------------------------------------------------------------------------------
# Input checks
# --------------------------------------------------------------------------------------------------


def _check_positive(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


# --------------------------------------------------------------------------------------------------
# Sliding-window attention
# --------------------------------------------------------------------------------------------------


def _window_reach(window: int, causal: bool) -> tuple[int, int]:
    """How many keys before and after its own position a query sees: (before, after)."""
    _check_positive("window", window)
    return (window - 1, 0) if causal else (window // 2, window // 2)


def sliding_window_mask(
    n: int, window: int, causal: bool = False, device: torch.device | str | None = None
) -> torch.Tensor:
    """The (N, N) bool mask of sliding-window attention, True = may attend.

    Bidirectional (Longformer): query i sees key j when |i - j| <= window // 2.
    Causal (Mistral 7B, window 4096): query i sees key j when 0 <= i - j < window.
    """
    _check_positive("n", n)
    before, after = _window_reach(window, causal)
    positions = torch.arange(n, device=device)
    distance = positions[:, None] - positions[None, :]  # (N, N), i - j
    return (distance <= before) & (distance >= -after)


def sliding_window_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, causal: bool = False
) -> torch.Tensor:
    """Self-attention restricted to a sliding window, computed block by block.

    Equal to ``scaled_dot_product_attention(q, k, v, sliding_window_mask(N, window, causal))``:
        out_i = sum_{j in W(i)} softmax_j(q_i . k_j / sqrt(D)) v_j,
    with W(i) the window of query i (see ``sliding_window_mask``). The queries are cut into blocks
    of ``window`` rows; block b only needs the keys from (its first row - before) to (its last row +
    after), a band of at most 2 * window keys. All blocks are computed in one batched product, so
    the scores take N * 2 * window numbers instead of N^2.

    q, k: (..., N, D); v: (..., N, Dv). Returns (..., N, Dv).
    """
    check_attention_inputs(q, k, v, mask=None, attn_bias=None)
    n = q.shape[-2]
    if k.shape[-2] != n:
        raise ValueError(
            f"sliding-window attention is self-attention: q and k need the same length N; "
            f"got q {tuple(q.shape)}, k {tuple(k.shape)}"
        )
    before, after = _window_reach(window, causal)
    block = window
    num_blocks = math.ceil(n / block)
    padding = num_blocks * block - n
    band = block + before + after  # keys seen by one block of queries

    # Pad so that every block of queries has a full band of keys; padded keys get masked out.
    q_blocks = F.pad(q, (0, 0, 0, padding)).unflatten(-2, (num_blocks, block))  # (..., NB, block, D)
    k_bands = F.pad(k, (0, 0, before, after + padding)).unfold(-2, band, block).transpose(-1, -2)
    v_bands = F.pad(v, (0, 0, before, after + padding)).unfold(-2, band, block).transpose(-1, -2)
    # (..., NB, band, D): band b holds the original keys b * block - before ... b * block - before + band - 1

    # Query row r of block b is position b * block + r; key c of band b is b * block - before + c.
    rows = torch.arange(block, device=q.device)
    cols = torch.arange(band, device=q.device)
    starts = torch.arange(num_blocks, device=q.device) * block
    distance = rows[:, None] - cols[None, :] + before  # (block, band), i - j, the same in every block
    key_position = starts[:, None] - before + cols[None, :]  # (NB, band)
    in_window = (distance <= before) & (distance >= -after)
    real_key = (key_position >= 0) & (key_position < n)
    mask = in_window & real_key[:, None, :]  # (NB, block, band)

    out, _ = scaled_dot_product_attention(q_blocks, k_bands, v_bands, mask=mask)
    return out.flatten(-3, -2)[..., :n, :]  # (..., N, Dv)


def longformer_mask(
    n: int,
    window: int,
    global_positions: Sequence[int] | torch.Tensor,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The (N, N) bool mask of Longformer attention (Beltagy et al. 2020), True = may attend.

    A bidirectional sliding window (|i - j| <= window // 2) plus the global tokens G (integer
    indices, e.g. [CLS]), which see every position and are seen by every position:
        mask[i, j] = |i - j| <= window // 2  or  i in G  or  j in G.
    """
    positions = torch.as_tensor(global_positions, device=device).flatten()
    if positions.numel() and (positions.dtype == torch.bool or positions.is_floating_point()):
        raise ValueError(f"global_positions must be integer indices, got dtype {positions.dtype}")
    if positions.numel() and (positions.min() < 0 or positions.max() >= n):
        raise ValueError(
            f"global_positions must lie in [0, {n}) for a sequence of length {n}; "
            f"got {positions.tolist()}"
        )
    is_global = torch.zeros(n, dtype=torch.bool, device=device)
    is_global[positions.long()] = True
    local = sliding_window_mask(n, window, device=device)
    return local | is_global[:, None] | is_global[None, :]


# --------------------------------------------------------------------------------------------------
# Grouped-query attention and its costs
# --------------------------------------------------------------------------------------------------


def _check_heads(num_heads: int, num_kv_heads: int) -> None:
    if num_heads % num_kv_heads != 0:
        raise ValueError(
            f"the number of key/value heads ({num_kv_heads}) must divide the number of query heads "
            f"({num_heads})"
        )


def grouped_query_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Grouped-query attention (Ainslie et al. 2023): query head h uses key/value head h // (Hq / Hkv).

        out_h = softmax(q_h k_{g(h)}^T / sqrt(D)) v_{g(h)},   g(h) = h // (Hq / Hkv).

    Hkv = Hq is multi-head attention, Hkv = 1 is multi-query attention (Shazeer 2019).
    q: (..., Hq, N, D); k: (..., Hkv, M, D); v: (..., Hkv, M, Dv); mask broadcastable to
    (..., Hq, N, M). Returns the output (..., Hq, N, Dv), like ``F.scaled_dot_product_attention``
    with ``enable_gqa=True``.
    """
    shapes = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
    if q.dim() < 3 or k.dim() != q.dim() or v.dim() != q.dim():
        raise ValueError(f"q, k and v need the same number of dims (..., H, length, D); got {shapes}")
    if k.shape[-3] != v.shape[-3]:
        raise ValueError(f"k and v must have the same number of heads (dim -3); got {shapes}")
    _check_heads(q.shape[-3], k.shape[-3])
    n_rep = q.shape[-3] // k.shape[-3]
    k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)
    out, _ = scaled_dot_product_attention(q, k, v, mask=mask)
    return out


def attention_param_count(d_model: int, num_heads: int, num_kv_heads: int, bias: bool = True) -> int:
    """Parameters of one attention layer: the q, k, v and output projections (with biases by default).

    With D = d_model / num_heads, the key and value projections map d_model to num_kv_heads * D:
        params = 2 (d_model^2 + d_model) + 2 (d_model * Hkv D + Hkv D)     (with biases)
               = 2 d_model^2 + 2 d_model * Hkv D                              (bias=False)
    This is the parameter count of ``bertlab.attention.MultiHeadAttention(d_model, num_heads,
    num_kv_heads, bias=bias)``.
    """
    for name, value in (("d_model", d_model), ("num_heads", num_heads), ("num_kv_heads", num_kv_heads)):
        _check_positive(name, value)
    if d_model % num_heads != 0:
        raise ValueError(f"num_heads ({num_heads}) must divide d_model ({d_model})")
    _check_heads(num_heads, num_kv_heads)
    kv_dim = num_kv_heads * (d_model // num_heads)
    query_and_output = 2 * (d_model * d_model + (d_model if bias else 0))
    key_and_value = 2 * (d_model * kv_dim + (kv_dim if bias else 0))
    return query_and_output + key_and_value


def kv_cache_bytes(
    batch: int,
    seq_len: int,
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    bytes_per_value: int = 2,
) -> int:
    """Bytes of the key/value cache of a decoder: one key and one value vector per token, head, layer.

        bytes = 2 * batch * seq_len * num_layers * num_kv_heads * head_dim * bytes_per_value
    (bytes_per_value = 2 for float16/bfloat16). Grouped-query attention divides it by Hq / Hkv.
    """
    arguments = {
        "batch": batch,
        "seq_len": seq_len,
        "num_layers": num_layers,
        "num_kv_heads": num_kv_heads,
        "head_dim": head_dim,
        "bytes_per_value": bytes_per_value,
    }
    for name, value in arguments.items():
        _check_positive(name, value)
    return 2 * batch * seq_len * num_layers * num_kv_heads * head_dim * bytes_per_value


# --------------------------------------------------------------------------------------------------
# Flash attention
# --------------------------------------------------------------------------------------------------


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    causal: bool = False,
    block_size: int = 128,
) -> torch.Tensor:
    """Exact attention, tiled over queries and keys with the online softmax (Dao et al. 2022).

    For each block of queries, the key blocks are visited one at a time while keeping, per query,
    the running maximum m, the running sum l and the running unnormalized output o:
        s_j   = q . k_j / sqrt(D)                       (scores of one key block)
        m'    = max(m, max_j s_j)
        l'    = exp(m - m') l + sum_j exp(s_j - m')
        o'    = exp(m - m') o + sum_j exp(s_j - m') v_j
    and at the end out = o / l = sum_j softmax_j(s_j) v_j. Only (block_size, block_size) scores
    exist at any time, never the (N, M) matrix. Sums are accumulated in float32 (float64 for
    float64 inputs).

    q: (..., N, D); k: (..., M, D); v: (..., M, Dv); mask: bool, broadcastable to (..., N, M).
    ``causal=True`` lets query i see keys j <= i (aligned top-left, like ``is_causal`` in torch);
    it combines with ``mask``. A query that may see no key gets a zero output.
    Returns (..., N, Dv), in the dtype of q.
    """
    check_attention_inputs(q, k, v, mask, attn_bias=None)
    _check_positive("block_size", block_size)
    n, m = q.shape[-2], k.shape[-2]
    if mask is not None:
        scores_shape = (*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]), n, m)
        mask = mask.expand(scores_shape)  # a view: no (N, M) copy is made
    scale = 1.0 / math.sqrt(q.shape[-1])
    with without_autocast(q.device):  # float32 sums even inside an autocast region
        dtype = compute_dtype(q)

        out_blocks = []
        for q_start in range(0, n, block_size):
            q_end = min(q_start + block_size, n)
            q_block = q[..., q_start:q_end, :].to(dtype) * scale  # (..., Bq, D)
            running_max = q_block.new_full(q_block.shape[:-1], -math.inf)  # (..., Bq)
            running_sum = q_block.new_zeros(q_block.shape[:-1])  # (..., Bq)
            running_out = q_block.new_zeros(q_block.shape[:-1] + v.shape[-1:])  # (..., Bq, Dv)

            # Causal: keys after the last query of the block are masked for every query of the block.
            k_stop = min(m, q_end) if causal else m
            for k_start in range(0, k_stop, block_size):
                k_end = min(k_start + block_size, k_stop)
                scores = q_block @ k[..., k_start:k_end, :].to(dtype).transpose(-1, -2)  # (..., Bq, Bk)
                allowed = _tile_mask(mask, causal, q_start, q_end, k_start, k_end, q.device)
                if allowed is not None:
                    scores = scores.masked_fill(~allowed, -math.inf)

                # The maximum only keeps exp() in range; the result does not depend on it (no gradient).
                new_max = torch.maximum(running_max, scores.detach().amax(dim=-1))
                # Rows that have seen no allowed key yet keep max -inf; shift them by 0 to avoid inf - inf.
                shift = new_max.masked_fill(new_max == -math.inf, 0.0)
                weights = torch.exp(scores - shift[..., None])  # (..., Bq, Bk), 0 where masked
                correction = torch.exp(running_max - shift)  # (..., Bq), 0 while nothing was seen
                running_sum = correction * running_sum + weights.sum(dim=-1)
                running_out = correction[..., None] * running_out + weights @ v[..., k_start:k_end, :].to(dtype)
                running_max = new_max

            # A fully masked query has running_sum = 0 and running_out = 0: its output is 0.
            normalizer = torch.where(running_sum > 0, running_sum, torch.ones_like(running_sum))
            out_blocks.append(running_out / normalizer[..., None])
        return torch.cat(out_blocks, dim=-2).to(q.dtype)


def _tile_mask(
    mask: torch.Tensor | None,
    causal: bool,
    q_start: int,
    q_end: int,
    k_start: int,
    k_end: int,
    device: torch.device,
) -> torch.Tensor | None:
    """The (..., Bq, Bk) bool tile of the mask (and of the causal mask), or None when all is allowed."""
    allowed = None if mask is None else mask[..., q_start:q_end, k_start:k_end]
    if causal and k_end - 1 > q_start:  # some key of the tile lies after some query
        query = torch.arange(q_start, q_end, device=device)
        key = torch.arange(k_start, k_end, device=device)
        before = key[None, :] <= query[:, None]  # (Bq, Bk)
        allowed = before if allowed is None else allowed & before
    return allowed


# --------------------------------------------------------------------------------------------------
# Linear attention
# --------------------------------------------------------------------------------------------------


def _elu_feature_map(x: torch.Tensor) -> torch.Tensor:
    """phi(x) = elu(x) + 1, positive everywhere (Katharopoulos et al. 2020)."""
    return F.elu(x) + 1


def linear_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False
) -> torch.Tensor:
    """Linear attention (Katharopoulos et al. 2020) with the feature map phi(x) = elu(x) + 1.

        out_i = phi(q_i)^T (sum_j phi(k_j) v_j^T) / phi(q_i)^T (sum_j phi(k_j))
    with j over all keys, or over j <= i when ``causal`` (the sums become prefix sums). Computing
    S = sum_j phi(k_j) v_j^T (D x Dv) first costs O(N D Dv) instead of the O(N M D) of softmax
    attention. There is no 1/sqrt(D) scale. The causal prefix sums keep one S per position,
    (..., N, D, Dv). Sums are accumulated in float32 (float64 for float64 inputs).

    q: (..., N, D); k: (..., M, D); v: (..., M, Dv); causal needs N = M. Returns (..., N, Dv).
    """
    check_attention_inputs(q, k, v, mask=None, attn_bias=None)
    if causal and q.shape[-2] != k.shape[-2]:
        raise ValueError(
            f"causal linear attention needs as many queries as keys; "
            f"got q {tuple(q.shape)}, k {tuple(k.shape)}"
        )
    with without_autocast(q.device):  # float32 sums even inside an autocast region
        dtype = compute_dtype(q)
        phi_q = _elu_feature_map(q.to(dtype))  # (..., N, D)
        phi_k = _elu_feature_map(k.to(dtype))  # (..., M, D)
        v = v.to(dtype)
        if causal:
            states = torch.cumsum(phi_k[..., :, None] * v[..., None, :], dim=-3)  # (..., N, D, Dv)
            numerator = (phi_q[..., None, :] @ states).squeeze(-2)  # (..., N, Dv)
            denominator = (phi_q * torch.cumsum(phi_k, dim=-2)).sum(dim=-1)  # (..., N)
        else:
            state = phi_k.transpose(-1, -2) @ v  # (..., D, Dv)
            numerator = phi_q @ state  # (..., N, Dv)
            denominator = (phi_q * phi_k.sum(dim=-2, keepdim=True)).sum(dim=-1)  # (..., N)
        # phi > 0, so the denominator is positive; the clamp only guards against float32 underflow.
        denominator = denominator.clamp_min(torch.finfo(dtype).tiny)
        return (numerator / denominator[..., None]).to(q.dtype)
