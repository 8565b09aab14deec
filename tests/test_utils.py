"""Tests for bertlab.utils: the device picked by default and the mixed precision chosen by device."""

from pathlib import Path

import pytest
import torch

from bertlab import utils
from bertlab.utils import autocast, autocast_dtype, compute_dtype, grad_scaler, resolve_device

DEFAULT_DEVICE = utils.default_device  # the real one: conftest replaces it in every test not marked gpu


def test_default_device_is_cuda_when_available(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert DEFAULT_DEVICE() == torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert DEFAULT_DEVICE() == torch.device("cpu")


def test_a_test_that_does_not_pin_its_device_fails_here():
    """conftest's guard: left to bertlab, a test would run on CUDA on a GPU machine."""
    with pytest.raises(AssertionError, match="left the device to bertlab"):
        resolve_device(None)
    with pytest.raises(AssertionError, match="left the device to bertlab"):
        resolve_device("auto")
    assert resolve_device("cpu") == torch.device("cpu")


def test_a_name_that_is_no_device_is_a_value_error_naming_it(monkeypatch):
    with pytest.raises(ValueError, match="'nonsense' is not a device"):
        resolve_device("nonsense")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="CUDA is not available"):
        resolve_device("cuda")


@pytest.mark.parametrize("native_bf16, expected", [(True, torch.bfloat16), (False, torch.float16)])
def test_mixed_precision_is_bf16_where_native_else_fp16(monkeypatch, native_bf16, expected):
    calls = []

    def is_bf16_supported(including_emulation=True):
        calls.append(including_emulation)
        return native_bf16 or including_emulation  # a T4 emulates bf16: supported only with emulation

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", is_bf16_supported)
    assert autocast_dtype(torch.device("cuda")) == expected
    assert calls == [False]  # emulated bf16 does not count


@pytest.mark.parametrize("native_bf16, scaled", [(True, False), (False, True)])
def test_the_gradient_scaler_is_on_for_fp16_only(monkeypatch, native_bf16, scaled):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: native_bf16)
    made = []
    monkeypatch.setattr(torch.amp, "GradScaler", lambda device, enabled: made.append((device, enabled)))
    grad_scaler(torch.device("cuda"))
    grad_scaler(torch.device("cpu"))
    assert made == [("cuda", scaled), ("cpu", False)]


@pytest.mark.parametrize("native_bf16, expected", [(True, torch.bfloat16), (False, torch.float32)])
def test_on_the_cpu_auto_is_bf16_where_it_is_native_else_float32(monkeypatch, native_bf16, expected):
    monkeypatch.setattr(utils, "cpu_computes_bfloat16", lambda: native_bf16)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with autocast(torch.device("cpu")):
        assert (a @ b).dtype == expected
    scaler = grad_scaler(torch.device("cpu"))
    loss = (a * 2).sum()
    assert not scaler.is_enabled() and scaler.scale(loss) is loss


def test_cpu_bfloat16_is_what_onednn_reports():
    """The rule reads oneDNN's own test of the CPU (AVX-512 BF16 or AMX), which this machine answers."""
    assert utils.cpu_computes_bfloat16() == torch.ops.mkldnn._is_mkldnn_bf16_supported()
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    if "avx512_bf16" in flags or "amx_bf16" in flags:
        assert utils.cpu_computes_bfloat16()


@pytest.mark.parametrize("precision, dtype",
                         [("float32", None), ("bfloat16", torch.bfloat16), ("float16", torch.float16)])
def test_an_explicit_precision_is_used_on_any_device(precision, dtype):
    assert autocast_dtype(torch.device("cpu"), precision) == dtype
    a = torch.randn(4, 4)
    with autocast(torch.device("cpu"), precision=precision):
        assert (a @ a).dtype == (dtype or torch.float32)
    assert grad_scaler(torch.device("cpu"), precision).is_enabled() == (dtype == torch.float16)
    with pytest.raises(ValueError, match="precision must be one of auto, float32, bfloat16, float16, got 'half'"):
        autocast_dtype(torch.device("cpu"), "half")


@pytest.mark.parametrize("dtype, expected", [(torch.float16, torch.float32), (torch.bfloat16, torch.float32),
                                             (torch.float32, torch.float32), (torch.float64, torch.float64)])
def test_compute_dtype(dtype, expected):
    assert compute_dtype(torch.zeros(1, dtype=dtype)) == expected


@pytest.mark.gpu
def test_autocast_on_this_gpu_uses_the_chosen_precision():
    device = torch.device("cuda")
    a = torch.randn(8, 8, device=device)
    with autocast(device):
        assert (a @ a).dtype == autocast_dtype(device)
    assert grad_scaler(device).is_enabled() == (autocast_dtype(device) == torch.float16)
