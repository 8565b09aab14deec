"""Small helpers shared by the training code: devices, seeds and mixed precision."""

import contextlib
import random

import numpy as np
import torch


def default_device() -> torch.device:
    """The device that ``None`` and ``"auto"`` stand for: CUDA when available, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """Return ``device`` as a ``torch.device``; ``None`` or ``"auto"`` is ``default_device()``."""
    if device is None or device == "auto":
        return default_device()
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {str(device)!r} was asked for, but CUDA is not available here")
    return device


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy and PyTorch; return a CPU ``torch.Generator`` seeded the same way."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype to compute sums and normalisations of ``x`` in: float32 for half-precision inputs
    (and float32), float64 for float64 inputs."""
    return torch.promote_types(x.dtype, torch.float32)


def without_autocast(device: torch.device):
    """A region where autocast is off, for arithmetic that must stay in ``compute_dtype`` (running
    sums, normalisations) even inside an ``autocast`` block."""
    if device.type in ("cpu", "cuda"):
        return torch.autocast(device.type, enabled=False)
    return contextlib.nullcontext()  # devices without autocast (meta, ...)


def autocast_dtype(device: torch.device) -> torch.dtype | None:
    """The precision of the forward pass on ``device``: None (float32) off CUDA; on CUDA, bfloat16
    where the GPU computes it natively (compute capability 8.0 and newer: A100, H100, RTX 30xx and
    later), else float16 (T4, V100, where bfloat16 is emulated and slow)."""
    if device.type != "cuda":
        return None
    return torch.bfloat16 if torch.cuda.is_bf16_supported(including_emulation=False) else torch.float16


def autocast(device: torch.device, enabled: bool = True):
    """Mixed-precision autocast in ``autocast_dtype(device)`` (when ``enabled``); a no-op context
    where that is float32 (the CPU)."""
    dtype = autocast_dtype(device) if enabled else None
    return contextlib.nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)


def grad_scaler(device: torch.device) -> torch.amp.GradScaler:
    """A gradient scaler, enabled exactly where ``autocast`` computes in float16.

    float16 has a small range: gradients below about 6e-8 underflow to zero. The scaler multiplies the
    loss by a factor S before ``backward`` and divides the gradients by S before the step, skipping
    steps whose gradients overflowed and lowering S then (Micikevicius et al., 2018). bfloat16 has
    float32's range and needs none; disabled, the scaler passes everything through unchanged.
    """
    return torch.amp.GradScaler(device.type, enabled=autocast_dtype(device) == torch.float16)
