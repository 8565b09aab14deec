"""Catching device bugs without a GPU: run code on PyTorch's ``meta`` device under ``DeviceAudit``.

A function that combines a CPU tensor with one on the model's device works on a CPU-only machine,
where both are CPU tensors, and fails on a GPU. Running the model on ``meta`` (tensors with shapes and
no data) makes "the model's device" differ from the CPU everywhere; ``meta`` alone does not catch
every mix (a CPU tensor indexed by a ``meta`` index does not raise), so ``DeviceAudit`` checks every
torch call: the tensors it combines must live on one device.
"""

import torch
from torch.overrides import TorchFunctionMode

# Calls that move tensors between devices on purpose, or only read their metadata.
MOVES = {torch.Tensor.to, torch.Tensor.cpu, torch.Tensor.cuda, torch.Tensor.copy_, torch.Tensor.__setitem__}


def _devices(value, found: set) -> None:
    if isinstance(value, torch.Tensor):
        if not (value.device.type == "cpu" and value.dim() == 0):  # CPU scalars mix with any device
            found.add(value.device)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _devices(item, found)
    elif isinstance(value, dict):
        for item in value.values():
            _devices(item, found)


class DeviceAudit(TorchFunctionMode):
    """Raise at the first torch call whose tensor arguments live on different devices."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in MOVES:
            found: set = set()
            _devices(args, found)
            _devices(kwargs, found)
            if len(found) > 1:
                names = ", ".join(sorted(str(device) for device in found))
                raise AssertionError(f"{getattr(func, '__qualname__', func)} combines tensors on {names}")
        return func(*args, **kwargs)
