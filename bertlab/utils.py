"""Small helpers shared by the training code and the book: devices, seeds and mixed precision."""

import contextlib
import dataclasses
import functools
import random
import warnings
from collections.abc import Mapping

import numpy as np
import torch


def default_device() -> torch.device:
    """The device that ``None`` and ``"auto"`` stand for: CUDA when available, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """Return ``device`` as a ``torch.device``; ``None`` or ``"auto"`` is ``default_device()``. A name
    that is no device, or CUDA where there is none, is a ValueError that says so."""
    if device is None or device == "auto":
        return default_device()
    try:
        device = torch.device(device)
    except RuntimeError:
        raise ValueError(f"device {device!r} is not a device PyTorch knows (auto, cpu, cuda, cuda:N, ...)") from None
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


#: The precisions a training run may ask for: "auto" (the device's default below), or one explicitly.
PRECISIONS = ("auto", "float32", "bfloat16", "float16")


def check_precision(precision: str) -> None:
    """Raise a ValueError naming the choices unless ``precision`` is one of :data:`PRECISIONS`."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")


@functools.cache  # the processor does not change while the program runs; autocast asks at every step
def cpu_computes_bfloat16() -> bool:
    """True when this CPU has bfloat16 arithmetic in hardware (x86 AVX-512 BF16 or AMX, as oneDNN, which
    PyTorch's CPU kernels use, reports it); False on CPUs that would emulate it, and where PyTorch was
    built without oneDNN."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def autocast_dtype(device: torch.device, precision: str = "auto") -> torch.dtype | None:
    """The precision of the forward pass on ``device``: None for float32.

    ``"auto"``: on CUDA, bfloat16 where the GPU computes it natively (compute capability 8.0 and newer:
    A100, H100, RTX 30xx and later), else float16 (T4, V100, where bfloat16 is emulated and slow); on a
    CPU, bfloat16 where it computes it natively (``cpu_computes_bfloat16``: 1.45 times faster
    pretraining on such a CPU, ``benchmarks/cpu_precision.py``), else float32, as on other devices.
    ``"float32"``, ``"bfloat16"`` or ``"float16"`` ask for one explicitly.
    """
    check_precision(precision)
    if precision != "auto":
        return {"float32": None, "bfloat16": torch.bfloat16, "float16": torch.float16}[precision]
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported(including_emulation=False) else torch.float16
    if device.type == "cpu" and cpu_computes_bfloat16():
        return torch.bfloat16
    return None


def autocast(device: torch.device, enabled: bool = True, precision: str = "auto"):
    """Mixed-precision autocast in ``autocast_dtype(device, precision)`` (when ``enabled``); a no-op
    context where that is float32 (a CPU without bfloat16 arithmetic, by default)."""
    dtype = autocast_dtype(device, precision) if enabled else None
    return contextlib.nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)


def grad_scaler(device: torch.device, precision: str = "auto") -> torch.amp.GradScaler:
    """A gradient scaler, enabled exactly where ``autocast`` computes in float16.

    float16 has a small range: gradients below about 6e-8 underflow to zero. The scaler multiplies the
    loss by a factor S before ``backward`` and divides the gradients by S before the step, skipping
    steps whose gradients overflowed and lowering S then (Micikevicius et al., 2018). bfloat16 has
    float32's range and needs none; disabled, the scaler passes everything through unchanged.
    """
    return torch.amp.GradScaler(device.type, enabled=autocast_dtype(device, precision) == torch.float16)


def check_preset(config_class: type, presets: Mapping, name: str, overrides: Mapping, model: str) -> None:
    """Raise a ValueError naming the choices when ``name`` is not one of ``presets`` or ``overrides`` names a
    field that ``config_class`` (a dataclass, the config of ``model``) lacks."""
    if name not in presets:
        raise ValueError(f"unknown {model} preset {name!r}; expected one of {', '.join(map(repr, presets))}")
    names = [field.name for field in dataclasses.fields(config_class)]
    unknown = sorted(set(overrides) - set(names))
    if unknown:
        raise ValueError(f"unknown {config_class.__name__} field(s) {unknown}; the fields are {names}")


def recipe_from_keywords(recipe_class: type, recipe, keywords: Mapping, function: str, default=None):
    """The recipe a training function runs: ``recipe``; or one built from the settings passed to
    ``function`` as keywords (the API of earlier releases, deprecated: it warns); or, with neither,
    ``default`` (None: a recipe is required). Passing both, or a keyword that names no field of
    ``recipe_class``, is an error."""
    if not keywords:
        if recipe is None and default is None:
            raise TypeError(f"{function}() needs a recipe: {function}(..., {recipe_class.__name__}(...), ...)")
        return default if recipe is None else recipe
    if recipe is not None:
        raise TypeError(f"{function}() got a recipe and settings as keywords ({', '.join(keywords)}): pass "
                        f"them in the recipe, dataclasses.replace(recipe, ...)")
    unknown = sorted(set(keywords) - {field.name for field in dataclasses.fields(recipe_class)})
    if unknown:
        raise TypeError(f"{function}() got unexpected keyword arguments: {', '.join(unknown)}")
    warnings.warn(f"passing {function}()'s settings as keywords is deprecated and will be removed in the next "
                  f"release: pass {recipe_class.__name__}({', '.join(f'{name}=...' for name in keywords)})",
                  DeprecationWarning, stacklevel=3)
    return recipe_class(**keywords)
