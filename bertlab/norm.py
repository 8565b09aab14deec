"""Normalization layers and the two ways to wrap a sublayer in a residual connection (chapter 04).

LayerNorm (Ba et al., 2016) centres and rescales each vector over its features; RMSNorm
(Zhang and Sennrich, 2019) only rescales, by the root mean square. The original Transformer
(Vaswani et al., 2017) and BERT normalize *after* the residual sum (post-norm); GPT-2 and most
later models normalize the input of each sublayer (pre-norm, Xiong et al., 2020).

Statistics are computed in float32 (or float64 for float64 inputs) and the result is cast back to
the input's dtype, so float16 and bfloat16 activations do not lose precision in the mean and variance.
"""

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from bertlab.utils import compute_dtype

NORM_KINDS = ("layernorm", "rmsnorm")

TensorFunction = Callable[[torch.Tensor], torch.Tensor]


def _check_feature_shape(name: str, parameter: torch.Tensor | None, x: torch.Tensor) -> None:
    """Raise a ValueError unless ``parameter`` is None or has shape (d,), d = x's last dim."""
    if parameter is not None and parameter.shape != x.shape[-1:]:
        raise ValueError(
            f"{name} has shape {tuple(parameter.shape)}, but the input's last dimension is "
            f"{x.shape[-1]} (input shape {tuple(x.shape)}): expected {name} of shape ({x.shape[-1]},)"
        )


def layer_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """Layer normalization over the last dimension.

    LN(x) = gamma * (x - mu) / sqrt(sigma^2 + eps) + beta, with mu = mean(x) and the biased variance
    sigma^2 = mean((x - mu)^2) taken over the d features of each vector, as in ``nn.LayerNorm``.

    Args:
        x: (..., d) input.
        weight: (d,) gain gamma, or None for gamma = 1.
        bias: (d,) shift beta, or None for beta = 0.
        eps: added to the variance for numerical stability.

    Returns:
        (..., d) tensor of the same dtype as ``x``.
    """
    _check_feature_shape("weight", weight, x)
    _check_feature_shape("bias", bias, x)
    dtype = compute_dtype(x)
    x32 = x.to(dtype)
    centered = x32 - x32.mean(dim=-1, keepdim=True)  # (..., d)
    variance = centered.pow(2).mean(dim=-1, keepdim=True)  # (..., 1), biased
    out = centered * torch.rsqrt(variance + eps)
    if weight is not None:
        out = out * weight.to(dtype)
    if bias is not None:
        out = out + bias.to(dtype)
    return out.to(x.dtype)


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6) -> torch.Tensor:
    """Root mean square normalization over the last dimension.

    RMSNorm(x) = gamma * x / sqrt(mean(x^2) + eps): no centring and no shift, as in ``nn.RMSNorm``.

    Args:
        x: (..., d) input.
        weight: (d,) gain gamma, or None for gamma = 1.
        eps: added to the mean square for numerical stability.

    Returns:
        (..., d) tensor of the same dtype as ``x``.
    """
    _check_feature_shape("weight", weight, x)
    dtype = compute_dtype(x)
    x32 = x.to(dtype)
    out = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps)
    if weight is not None:
        out = out * weight.to(dtype)
    return out.to(x.dtype)


class LayerNorm(nn.Module):
    """Layer normalization over the last dimension, with a learned gain ``weight`` (ones) and shift
    ``bias`` (zeros) of shape (d,), named as in ``nn.LayerNorm`` so its weights copy in directly."""

    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__()
        self.d = d
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d) -> (..., d): :func:`layer_norm`, computed by PyTorch's fused kernel for speed
        (the tests check that the two agree)."""
        _check_feature_shape("weight", self.weight, x)
        dtype = compute_dtype(x)
        weight, bias = self.weight.to(dtype), self.bias.to(dtype)
        return F.layer_norm(x.to(dtype), (self.d,), weight, bias, self.eps).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.d}, eps={self.eps}"


class RMSNorm(nn.Module):
    """RMS normalization over the last dimension, with a learned gain ``weight`` (ones) of shape (d,),
    named as in ``nn.RMSNorm``."""

    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.d = d
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d) -> (..., d): :func:`rms_norm`, computed by PyTorch's fused kernel for speed
        (the tests check that the two agree)."""
        _check_feature_shape("weight", self.weight, x)
        dtype = compute_dtype(x)
        return F.rms_norm(x.to(dtype), (self.d,), self.weight.to(dtype), self.eps).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.d}, eps={self.eps}"


def build_norm(kind: str, d: int, eps: float) -> LayerNorm | RMSNorm:
    """Return ``LayerNorm(d, eps)`` for kind "layernorm" or ``RMSNorm(d, eps)`` for "rmsnorm"."""
    if kind == "layernorm":
        return LayerNorm(d, eps)
    if kind == "rmsnorm":
        return RMSNorm(d, eps)
    raise ValueError(f"unknown norm kind {kind!r}; expected one of {', '.join(map(repr, NORM_KINDS))}")


def post_norm_residual(x: torch.Tensor, sublayer: TensorFunction, norm: TensorFunction) -> torch.Tensor:
    """Post-norm residual (original Transformer, BERT): y = Norm(x + Sublayer(x))."""
    return norm(x + sublayer(x))


def pre_norm_residual(x: torch.Tensor, sublayer: TensorFunction, norm: TensorFunction) -> torch.Tensor:
    """Pre-norm residual (GPT-2, Llama): y = x + Sublayer(Norm(x))."""
    return x + sublayer(norm(x))
