"""Small helpers shared by the training code: devices, seeds and mixed precision."""

import contextlib
import random

import numpy as np
import torch


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """Return ``device`` as a ``torch.device``; ``None`` or ``"auto"`` picks CUDA when available."""
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
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


def autocast(device: torch.device, enabled: bool = True):
    """bf16 autocast on CUDA (when ``enabled``); a no-op context on CPU, where float32 is used."""
    if enabled and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()
