"""Attention: alignment scores, scaled dot-product attention and multi-head attention (chapters 01, 02).

Notation of the book: a query q_i attends over keys k_j and values v_j. Shapes use B batch, H heads,
N queries, M keys, D head size; every function accepts any leading batch dimensions.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V                         (Vaswani et al., 2017)

Masks are boolean with True = may attend, as in ``torch.nn.functional.scaled_dot_product_attention``,
and broadcast against the (..., N, M) scores. A query row whose keys are all masked attends to nothing:
its weights and its output are zero, never NaN.
"""

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from bertlab.utils import compute_dtype, without_autocast

# --------------------------------------------------------------------------------------------------
# Softmax and the alignment (score) functions of the classic attention literature
# --------------------------------------------------------------------------------------------------


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Numerically stable softmax along ``dim``.

    softmax(x)_j = exp(x_j - max_l x_l) / sum_j' exp(x_j' - max_l x_l)

    Subtracting the row maximum leaves the result unchanged and keeps every exponent <= 0, so
    logits of 1e4 do not overflow. A row that is entirely -inf (every key masked) gives zeros.
    """
    row_max = x.amax(dim=dim, keepdim=True)
    row_max = row_max.masked_fill(row_max == float("-inf"), 0.0)  # a row of all -inf stays all -inf
    exponentials = torch.exp(x - row_max)
    total = exponentials.sum(dim=dim, keepdim=True)  # >= 1 unless the whole row is -inf
    return exponentials / total.clamp_min(torch.finfo(x.dtype).tiny)


def _check_head_sizes(q: torch.Tensor, k: torch.Tensor) -> None:
    """Raise a ValueError unless q (..., N, D) and k (..., M, D) have the same head size D."""
    if q.dim() < 2 or k.dim() < 2 or q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"queries {tuple(q.shape)} and keys {tuple(k.shape)} must both be (..., length, D) "
            "with the same head size D"
        )


def dot_score(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Dot-product score (Luong et al., 2015): score(q_i, k_j) = q_i^T k_j.

    q (..., N, D), k (..., M, D) -> scores (..., N, M).
    """
    _check_head_sizes(q, k)
    return q @ k.transpose(-2, -1)


def scaled_dot_score(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Scaled dot-product score (Vaswani et al., 2017): score(q_i, k_j) = q_i^T k_j / sqrt(d_k).

    q (..., N, D), k (..., M, D) -> scores (..., N, M), with d_k = D.
    """
    return dot_score(q, k) / math.sqrt(q.shape[-1])


def general_score(q: torch.Tensor, k: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """General (bilinear) score (Luong et al., 2015): score(q_i, k_j) = q_i^T W k_j.

    q (..., N, Dq), k (..., M, Dk), weight W (Dq, Dk) -> scores (..., N, M).
    """
    if q.dim() < 2 or k.dim() < 2 or weight.shape != (q.shape[-1], k.shape[-1]):
        raise ValueError(
            f"general_score needs q (..., N, Dq), k (..., M, Dk) and weight (Dq, Dk); got q "
            f"{tuple(q.shape)}, k {tuple(k.shape)}, weight {tuple(weight.shape)}"
        )
    return q @ weight @ k.transpose(-2, -1)


def additive_score(
    q: torch.Tensor, k: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, v: torch.Tensor
) -> torch.Tensor:
    """Additive score (Bahdanau et al., 2015): score(q_i, k_j) = v^T tanh(W_q q_i + W_k k_j).

    q (..., N, Dq), k (..., M, Dk), w_q (A, Dq), w_k (A, Dk), v (A,) -> scores (..., N, M),
    where A is the size of the hidden layer of the alignment model.
    """
    hidden = v.shape[0] if v.dim() == 1 else None
    if (
        q.dim() < 2
        or k.dim() < 2
        or hidden is None
        or w_q.shape != (hidden, q.shape[-1])
        or w_k.shape != (hidden, k.shape[-1])
    ):
        raise ValueError(
            f"additive_score needs q (..., N, Dq), k (..., M, Dk), w_q (A, Dq), w_k (A, Dk) and v (A,); "
            f"got q {tuple(q.shape)}, k {tuple(k.shape)}, w_q {tuple(w_q.shape)}, "
            f"w_k {tuple(w_k.shape)}, v {tuple(v.shape)}"
        )
    projected_q = (q @ w_q.T).unsqueeze(-2)  # (..., N, 1, A)
    projected_k = (k @ w_k.T).unsqueeze(-3)  # (..., 1, M, A)
    return torch.tanh(projected_q + projected_k) @ v  # (..., N, M)


def cosine_score(q: torch.Tensor, k: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Cosine score (Graves et al., 2014): score(q_i, k_j) = q_i^T k_j / (||q_i|| ||k_j||).

    q (..., N, D), k (..., M, D) -> scores (..., N, M) in [-1, 1]; norms below ``eps`` are
    clamped to ``eps`` so a zero vector scores 0 instead of NaN.
    """
    _check_head_sizes(q, k)
    return dot_score(F.normalize(q, dim=-1, eps=eps), F.normalize(k, dim=-1, eps=eps))


# --------------------------------------------------------------------------------------------------
# Masks and scaled dot-product attention
# --------------------------------------------------------------------------------------------------


def causal_mask(n: int, m: int | None = None, device: torch.device | str | None = None) -> torch.Tensor:
    """(N, M) bool mask, True where key j <= query i: each position sees itself and the past.

    Aligned top-left, like ``is_causal=True`` in ``F.scaled_dot_product_attention``; M defaults to N.
    """
    m = n if m is None else m
    return torch.ones(n, m, dtype=torch.bool, device=device).tril()


def padding_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """From a (B, M) 0/1 (or bool) attention mask, 1 = real token, to a bool mask (B, 1, 1, M).

    The result broadcasts against (B, H, N, M) scores: no query may attend to a padding key.
    Any leading dimensions work: (..., M) -> (..., 1, 1, M). The 0/1 values of a CPU mask are
    checked; on an accelerator that check would make the host wait for the device, so it is skipped.
    """
    if attention_mask.dim() < 1:
        raise ValueError(f"attention_mask must be (B, M), got shape {tuple(attention_mask.shape)}")
    if (attention_mask.dtype != torch.bool and attention_mask.device.type == "cpu"
            and not ((attention_mask == 0) | (attention_mask == 1)).all()):
        raise ValueError("attention_mask must hold only 0 (padding) and 1 (token)")
    return attention_mask.bool()[..., None, None, :]


def check_attention_inputs(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    attn_bias: torch.Tensor | None,
) -> None:
    """Raise a ValueError naming the shapes unless the inputs of an attention fit together.

    q (..., N, D) and k (..., M, D) share the head size D; v (..., M, Dv) has one value per key; their
    leading dims broadcast together; ``mask`` (bool, or None) and ``attn_bias`` (or None) broadcast to
    the (..., N, M) scores. Every attention of ``bertlab`` calls it first, so that a wrong shape is
    reported by name rather than by a matrix product deep inside.
    """
    _check_head_sizes(q, k)
    if v.dim() < 2 or v.shape[-2] != k.shape[-2]:
        raise ValueError(f"keys {tuple(k.shape)} and values {tuple(v.shape)} must have the same length M")
    try:
        batch_shape = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the leading (batch, head) dims of queries {tuple(q.shape)}, keys {tuple(k.shape)} and values "
            f"{tuple(v.shape)} do not broadcast together"
        ) from None
    scores_shape = (*batch_shape, q.shape[-2], k.shape[-2])
    for name, tensor in (("mask", mask), ("attn_bias", attn_bias)):
        if tensor is None:
            continue
        try:
            fits = torch.broadcast_shapes(tensor.shape, scores_shape) == scores_shape
        except RuntimeError:
            fits = False
        if not fits:
            raise ValueError(
                f"{name} of shape {tuple(tensor.shape)} does not broadcast to the scores "
                f"{tuple(scores_shape)} of queries {tuple(q.shape)} and keys {tuple(k.shape)}"
            )
    if mask is not None and mask.dtype != torch.bool:
        raise ValueError(f"mask must be bool (True = may attend), got dtype {mask.dtype}")


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    scale: float | None = None,
    attn_bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention, written out step by step.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k) + bias, masked) V

    Args:
        q: (..., N, D) queries.
        k: (..., M, D) keys.
        v: (..., M, Dv) values.
        mask: bool, broadcastable to (..., N, M); True = may attend. Masked scores become -inf.
        dropout_p: dropout probability on the attention weights (pass 0.0 at evaluation).
        scale: factor on Q K^T; defaults to 1 / sqrt(d_k) with d_k = D.
        attn_bias: broadcastable to (..., N, M), added to the scaled scores (T5 buckets, ALiBi).

    Returns:
        output (..., N, Dv) and weights (..., N, M), the weights before dropout. A row whose keys
        are all masked has zero weights and a zero output. The scores and the softmax are computed
        in float32 for half-precision inputs, also inside an autocast region; the weights are
        returned in the dtype of q. ``mask`` and ``attn_bias`` are moved to q's device.
    """
    check_attention_inputs(q, k, v, mask, attn_bias)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    dtype = compute_dtype(q)
    with without_autocast(q.device):
        scores = (q.to(dtype) @ k.to(dtype).transpose(-2, -1)) * scale  # (..., N, M)
        if attn_bias is not None:
            scores = scores + attn_bias.to(device=q.device, dtype=dtype)
        if mask is not None:
            scores = scores.masked_fill(~mask.to(q.device), float("-inf"))
        weights = softmax(scores, dim=-1).to(q.dtype)
    output = F.dropout(weights, dropout_p) @ v if dropout_p > 0.0 else weights @ v  # (..., N, Dv)
    return output, weights


# --------------------------------------------------------------------------------------------------
# Multi-head attention
# --------------------------------------------------------------------------------------------------


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """Share key/value heads among query heads (grouped-query attention, Ainslie et al., 2023).

    x (B, Hkv, M, D) -> (B, Hkv * n_rep, M, D), where query head h uses key/value head h // n_rep.
    ``n_rep == 1`` returns ``x`` itself.
    """
    if n_rep == 1:
        return x
    return x.repeat_interleave(n_rep, dim=-3)


def fused_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    attn_bias: torch.Tensor | None,
    dropout_p: float,
) -> torch.Tensor:
    """The same output as :func:`scaled_dot_product_attention`, computed by PyTorch's fused kernel.

    q (..., N, D), k (..., M, D), v (..., M, Dv); ``mask`` (bool, True = may attend) and ``attn_bias``
    broadcast to (..., N, M), either may be None; ``dropout_p`` drops attention weights (0.0 at
    evaluation). Returns the output (..., N, Dv) only, as the fused kernel does not return the
    weights: :class:`MultiHeadAttention` uses it when no weights are asked for.

    ``F.scaled_dot_product_attention`` takes one mask, so a bool mask and a bias are merged into a
    float mask (bias where allowed, -inf elsewhere). Rows with no allowed key are opened to all keys
    and their output is zeroed afterwards: some CUDA kernels return NaN for fully masked rows.
    """
    check_attention_inputs(q, k, v, mask, attn_bias)
    attn_mask = mask
    row_has_key = None
    if mask is not None:
        mask = mask.to(q.device)
        row_has_key = mask.any(dim=-1, keepdim=True)  # (..., N, 1)
        attn_mask = mask | ~row_has_key
    if attn_bias is not None:
        attn_bias = attn_bias.to(device=q.device, dtype=q.dtype)
        attn_mask = attn_bias if attn_mask is None else torch.where(attn_mask, attn_bias, float("-inf"))
    output = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p)
    return output if row_has_key is None else output.masked_fill(~row_has_key, 0.0)


class MultiHeadAttention(nn.Module):
    """Multi-head attention (Vaswani et al., 2017), with grouped-query and multi-query variants.

    MultiHead(X, C) = Concat(head_1, ..., head_H) W^O,
    head_h = Attention(X W_h^Q, C W_h^K, C W_h^V),

    where C = X for self-attention and C = the encoder output (``context``) for cross-attention.
    With ``num_kv_heads`` < ``num_heads`` the query heads share key/value heads in groups
    (grouped-query attention, Ainslie et al., 2023); ``num_kv_heads=1`` is multi-query attention
    (Shazeer, 2019).

    Args:
        d_model: model width; the head size is D = d_model // num_heads.
        num_heads: number of query heads H.
        num_kv_heads: number of key/value heads, dividing ``num_heads``; defaults to ``num_heads``.
        dropout: dropout probability on the attention weights, applied in training mode only.
        bias: whether the projections ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj`` have biases.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        num_kv_heads: int | None = None,
        dropout: float = 0.0,
        bias: bool = True,
    ):
        super().__init__()
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if num_heads <= 0 or d_model % num_heads != 0:
            raise ValueError(f"num_heads ({num_heads}) must be positive and divide d_model ({d_model})")
        if num_kv_heads <= 0 or num_heads % num_kv_heads != 0:
            raise ValueError(f"num_kv_heads ({num_kv_heads}) must be positive and divide num_heads ({num_heads})")
        self.d_model = d_model
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = d_model // num_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(d_model, num_kv_heads * self.head_dim, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def _split_heads(self, x: torch.Tensor, num_heads: int) -> torch.Tensor:
        """(..., N, num_heads * D) -> (..., num_heads, N, D)."""
        return x.unflatten(-1, (num_heads, self.head_dim)).transpose(-3, -2)

    def _check_width(self, name: str, x: torch.Tensor) -> None:
        """Raise a ValueError unless x is (..., length, d_model)."""
        if x.dim() < 2 or x.shape[-1] != self.d_model:
            raise ValueError(f"{name} must be (..., length, d_model={self.d_model}), got shape {tuple(x.shape)}")

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        attn_bias: torch.Tensor | None = None,
        rope: Callable[[torch.Tensor], torch.Tensor] | None = None,
        need_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Attend from ``x`` (B, N, d_model) over ``context`` (B, M, d_model), or over ``x`` itself.

        Args:
            x: (B, N, d_model) queries' input.
            context: (B, M, d_model) keys' and values' input for cross-attention; None = self-attention.
            mask: bool, broadcastable to (B, H, N, M), True = may attend: e.g. a (B, 1, 1, M) padding
                mask from :func:`padding_mask` or an (N, M) :func:`causal_mask`.
            attn_bias: broadcastable to (B, H, N, M), e.g. (H, N, M); added to the scaled scores.
            rope: None, or a callable (B, H, N, D) -> (B, H, N, D) applying rotary position
                embeddings to the queries and the keys after the head split.
            need_weights: also return the attention weights (B, H, N, M). Without it the output is
                computed by ``F.scaled_dot_product_attention`` (fused kernels); with it by
                :func:`scaled_dot_product_attention`. Both give the same result.

        Returns:
            output (B, N, d_model), or (output, weights) when ``need_weights``.
        """
        self._check_width("x", x)
        context = x if context is None else context
        self._check_width("context", context)
        q = self._split_heads(self.q_proj(x), self.num_heads)  # (B, H, N, D)
        k = self._split_heads(self.k_proj(context), self.num_kv_heads)  # (B, Hkv, M, D)
        v = self._split_heads(self.v_proj(context), self.num_kv_heads)  # (B, Hkv, M, D)
        if rope is not None:
            q, k = rope(q), rope(k)
        group_size = self.num_heads // self.num_kv_heads
        k, v = repeat_kv(k, group_size), repeat_kv(v, group_size)  # (B, H, M, D)
        dropout_p = self.dropout if self.training else 0.0
        if need_weights:
            heads, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p, attn_bias=attn_bias)
        else:
            heads = fused_attention(q, k, v, mask, attn_bias, dropout_p)
        output = self.out_proj(heads.transpose(-3, -2).flatten(-2))  # (B, N, d_model)
        return (output, weights) if need_weights else output
