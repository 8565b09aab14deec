"""Tests for bertlab.norm against torch.nn.LayerNorm and torch.nn.RMSNorm."""

import pytest
import torch
from torch import nn

from bertlab.norm import (
    LayerNorm,
    RMSNorm,
    build_norm,
    layer_norm,
    pre_norm_residual,
    post_norm_residual,
    rms_norm,
)

SHAPES = [(7,), (2, 5, 16), (2, 3, 4, 33)]


def _random_affine(reference: nn.Module) -> None:
    with torch.no_grad():
        for parameter in reference.parameters():
            parameter.normal_()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_matches_torch(shape, affine):
    x = torch.randn(shape) * 3 + 1
    reference = nn.LayerNorm(shape[-1], eps=1e-5, elementwise_affine=affine)
    if affine:
        _random_affine(reference)
        out = layer_norm(x, reference.weight, reference.bias)
    else:
        out = layer_norm(x)
    torch.testing.assert_close(out, reference(x))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("affine", [True, False])
def test_rms_norm_matches_torch(shape, affine):
    x = torch.randn(shape) * 3 + 1
    reference = nn.RMSNorm(shape[-1], eps=1e-6, elementwise_affine=affine)
    if affine:
        _random_affine(reference)
    torch.testing.assert_close(rms_norm(x, reference.weight if affine else None), reference(x))


def test_modules_match_torch_with_copied_weights(device):
    x = torch.randn(3, 4, 10, device=device)
    ours, reference = LayerNorm(10).to(device), nn.LayerNorm(10).to(device)
    _random_affine(reference)
    ours.load_state_dict(reference.state_dict())
    torch.testing.assert_close(ours(x), reference(x))

    ours, reference = RMSNorm(10).to(device), nn.RMSNorm(10, eps=1e-6).to(device)
    _random_affine(reference)
    ours.load_state_dict(reference.state_dict())
    torch.testing.assert_close(ours(x), reference(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_modules_equal_the_written_out_functions(dtype):
    """The modules use PyTorch's fused kernels for speed; they must compute the book's formulas."""
    x = (torch.randn(3, 4, 10) * 3 + 1).to(dtype)
    layer, rms = LayerNorm(10), RMSNorm(10)
    for module in (layer, rms):
        _random_affine(module)
    torch.testing.assert_close(layer(x), layer_norm(x, layer.weight, layer.bias, layer.eps))
    torch.testing.assert_close(rms(x), rms_norm(x, rms.weight, rms.eps))


def test_module_defaults():
    layer, rms = LayerNorm(6), RMSNorm(6)
    assert layer.eps == 1e-5 and rms.eps == 1e-6
    assert [name for name, _ in layer.named_parameters()] == ["weight", "bias"]
    assert [name for name, _ in rms.named_parameters()] == ["weight"]
    torch.testing.assert_close(layer.weight, torch.ones(6))
    torch.testing.assert_close(layer.bias, torch.zeros(6))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_matches_float32_reference(dtype):
    # Large offset: a naive half-precision variance would lose most of its digits.
    x = (torch.randn(4, 64) + 30).to(dtype)
    weight, bias = torch.randn(64).to(dtype), torch.randn(64).to(dtype)
    expected_layer = nn.functional.layer_norm(x.float(), (64,), weight.float(), bias.float())
    expected_rms = nn.functional.rms_norm(x.float(), (64,), weight.float(), eps=1e-6)

    out_layer, out_rms = layer_norm(x, weight, bias), rms_norm(x, weight)
    assert out_layer.dtype == dtype and out_rms.dtype == dtype
    tolerance = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {"atol": 3e-3, "rtol": 3e-3}
    torch.testing.assert_close(out_layer.float(), expected_layer, **tolerance)
    torch.testing.assert_close(out_rms.float(), expected_rms, **tolerance)


def test_gradcheck_layer_norm_and_rms_norm():
    x = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(5, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer_norm, (x, weight, bias))
    assert torch.autograd.gradcheck(rms_norm, (x, weight))


def test_residual_wrappers():
    x = torch.randn(2, 4, 8)
    sublayer, norm = nn.Linear(8, 8), nn.LayerNorm(8)
    torch.testing.assert_close(post_norm_residual(x, sublayer, norm), norm(x + sublayer(x)))
    torch.testing.assert_close(pre_norm_residual(x, sublayer, norm), x + sublayer(norm(x)))
    # Post-norm output is normalized; pre-norm keeps the residual stream un-normalized.
    post = post_norm_residual(x, sublayer, nn.LayerNorm(8))
    torch.testing.assert_close(post.mean(-1), torch.zeros(2, 4), atol=1e-5, rtol=0)
    pre = pre_norm_residual(x * 10, sublayer, nn.LayerNorm(8))
    assert pre.std(-1).mean() > 5


def test_build_norm():
    assert isinstance(build_norm("layernorm", 8, 1e-5), LayerNorm)
    rms = build_norm("rmsnorm", 8, 1e-6)
    assert isinstance(rms, RMSNorm) and rms.eps == 1e-6 and rms.weight.shape == (8,)
    with pytest.raises(ValueError, match="'batchnorm'.*'layernorm', 'rmsnorm'"):
        build_norm("batchnorm", 8, 1e-5)


def test_bad_parameter_shapes_raise():
    x = torch.randn(2, 8)
    with pytest.raises(ValueError, match=r"weight has shape \(7,\).*last dimension is 8"):
        layer_norm(x, torch.ones(7))
    with pytest.raises(ValueError, match=r"bias has shape \(8, 1\)"):
        layer_norm(x, torch.ones(8), torch.zeros(8, 1))
    with pytest.raises(ValueError, match=r"weight has shape \(4,\)"):
        RMSNorm(4)(x)
