"""Mutation tests of chapter 04's checks (autograder/checks/norm.py).

For every exercise: the check accepts the solution of the solution notebook, other correct
implementations and (with the forbid-rule lifted) the reference; it rejects a catalogue of typical
wrong implementations, each with the hint that explains it; and calling a normalization built-in or
the reference fails with "implement this yourself", however the function was captured.
"""

import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.functional import layer_norm as captured_layer_norm

import bertlab.norm
import bertlab.transformer
from autograder.checks import norm as checks
from autograder.checks.framework import CheckFailed
from autograder.checks.portable import Written
from bertlab.norm import layer_norm as captured_reference_layer_norm
from checks_helpers import MutationTests, run_solution_cells

SOLUTION = Path(__file__).resolve().parents[1] / "solutions" / "04_normalization" / "04_normalization.ipynb"
EXERCISES = ["layer_norm", "post_norm_residual", "pre_norm_residual", "rms_norm"]


@pytest.fixture(scope="module")
def solution_namespace():
    """The functions defined by the solution cells of the solution notebook, executed together."""
    return run_solution_cells(SOLUTION, {"torch": torch, "math": math, "F": F, "nn": nn})


# --------------------------------------------------------------------------------------------------
# Typical wrong implementations, as students write them, and the hint each must get
# --------------------------------------------------------------------------------------------------


def _upcast(x):
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def _affine(out, weight, bias):
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


def ln_torch_var(x, weight=None, bias=None, eps=1e-5):
    h = _upcast(x)
    mean, var = h.mean(-1, keepdim=True), h.var(-1, keepdim=True)
    return _affine((h - mean) / torch.sqrt(var + eps), weight, bias).to(x.dtype)


def ln_std_plus_eps(x, weight=None, bias=None, eps=1e-5):
    h = _upcast(x)
    std = h.std(-1, keepdim=True, unbiased=False)
    return _affine((h - h.mean(-1, keepdim=True)) / (std + eps), weight, bias).to(x.dtype)


def ln_without_eps(x, weight=None, bias=None, eps=1e-5):
    h = _upcast(x)
    centered = h - h.mean(-1, keepdim=True)
    return _affine(centered / centered.pow(2).mean(-1, keepdim=True).sqrt(), weight, bias).to(x.dtype)


def ln_literal_eps(x, weight=None, bias=None, eps=1e-5):
    h = _upcast(x)
    centered = h - h.mean(-1, keepdim=True)
    return _affine(centered / torch.sqrt(centered.pow(2).mean(-1, keepdim=True) + 1e-5), weight, bias).to(x.dtype)


def ln_over_batch(x, weight=None, bias=None, eps=1e-5):
    h = _upcast(x)
    centered = h - h.mean(0, keepdim=True)
    return _affine(centered * torch.rsqrt(centered.pow(2).mean(0, keepdim=True) + eps), weight, bias).to(x.dtype)


def ln_whole_tensor(x, weight=None, bias=None, eps=1e-5):
    h = _upcast(x)
    return _affine((h - h.mean()) / torch.sqrt(h.var(correction=0) + eps), weight, bias).to(x.dtype)


def ln_forgets_gamma_beta(x, weight=None, bias=None, eps=1e-5):
    h = _upcast(x)
    var, mean = torch.var_mean(h, -1, keepdim=True, correction=0)
    return ((h - mean) / torch.sqrt(var + eps)).to(x.dtype)


def ln_shift_then_scale(x, weight=None, bias=None, eps=1e-5):
    h = _upcast(x)
    var, mean = torch.var_mean(h, -1, keepdim=True, correction=0)
    out = (h - mean) / torch.sqrt(var + eps)
    if bias is not None:
        out = out + bias
    if weight is not None:
        out = out * weight
    return out.to(x.dtype)


def ln_weight_implies_bias(x, weight=None, bias=None, eps=1e-5):
    h = _upcast(x)
    var, mean = torch.var_mean(h, -1, keepdim=True, correction=0)
    out = (h - mean) / torch.sqrt(var + eps)
    if weight is not None:
        out = weight * out + bias
    return out.to(x.dtype)


def ln_divides_by_variance(x, weight=None, bias=None, eps=1e-5):
    h = _upcast(x)
    var, mean = torch.var_mean(h, -1, keepdim=True, correction=0)
    return _affine((h - mean) / (var + eps), weight, bias).to(x.dtype)


def ln_without_centering(x, weight=None, bias=None, eps=1e-5):
    h = _upcast(x)
    return _affine(h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + eps), weight, bias).to(x.dtype)


def ln_one_pass_variance(x, weight=None, bias=None, eps=1e-5):
    h = _upcast(x)
    mean = h.mean(-1, keepdim=True)
    var = (h**2).mean(-1, keepdim=True) - mean**2
    return _affine((h - mean) / torch.sqrt(var + eps), weight, bias).to(x.dtype)


def ln_in_input_precision(x, weight=None, bias=None, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return _affine((x - mean) / torch.sqrt(var + eps), weight, bias)


def ln_keeps_float32(x, weight=None, bias=None, eps=1e-5):
    h = _upcast(x)
    var, mean = torch.var_mean(h, -1, keepdim=True, correction=0)
    return _affine((h - mean) / torch.sqrt(var + eps), weight, bias)


def ln_always_float32(x, weight=None, bias=None, eps=1e-5):
    h = x.float()
    centered = h - h.mean(dim=-1, keepdim=True)
    out = centered / torch.sqrt(centered.pow(2).mean(dim=-1, keepdim=True) + eps)
    return _affine(out, None if weight is None else weight.float(), None if bias is None else bias.float()).to(x.dtype)


def ln_in_place(x, weight=None, bias=None, eps=1e-5):
    x -= x.mean(-1, keepdim=True)
    return _affine(x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps), weight, bias)


def rms_subtracts_mean(x, weight=None, eps=1e-6):
    h = _upcast(x)
    h = h - h.mean(-1, keepdim=True)
    out = h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (out * weight if weight is not None else out).to(x.dtype)


def rms_divides_by_std(x, weight=None, eps=1e-6):
    h = _upcast(x)
    out = h / h.std(-1, keepdim=True)
    return (out * weight if weight is not None else out).to(x.dtype)


def rms_l2_norm(x, weight=None, eps=1e-6):
    h = _upcast(x)
    out = h / torch.linalg.vector_norm(h, dim=-1, keepdim=True)
    return (out * weight if weight is not None else out).to(x.dtype)


def rms_without_eps(x, weight=None, eps=1e-6):
    h = _upcast(x)
    out = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True))
    return (out * weight if weight is not None else out).to(x.dtype)


def rms_eps_outside(x, weight=None, eps=1e-6):
    h = _upcast(x)
    out = h / (h.pow(2).mean(-1, keepdim=True).sqrt() + eps)
    return (out * weight if weight is not None else out).to(x.dtype)


def rms_forgets_weight(x, weight=None, eps=1e-6):
    h = _upcast(x)
    return (h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rms_over_batch(x, weight=None, eps=1e-6):
    h = _upcast(x)
    out = h / torch.sqrt(h.pow(2).mean(0, keepdim=True) + eps)
    return (out * weight if weight is not None else out).to(x.dtype)


def rms_keeps_float32(x, weight=None, eps=1e-6):
    h = _upcast(x)
    out = h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return out * weight if weight is not None else out


def post_norm_as_pre_norm(x, sublayer, norm):
    return x + sublayer(norm(x))


def post_norm_of_input(x, sublayer, norm):
    return norm(x) + sublayer(x)


def post_norm_of_output(x, sublayer, norm):
    out = sublayer(x)
    return x + norm(out)


def post_norm_without_residual(x, sublayer, norm):
    return norm(sublayer(x))


def post_norm_without_norm(x, sublayer, norm):
    return sublayer(x) + x


def pre_norm_as_post_norm(x, sublayer, norm):
    return norm(x + sublayer(x))


def pre_norm_of_output(x, sublayer, norm):
    return x + norm(sublayer(x))


def pre_norm_normalized_residual(x, sublayer, norm):
    x = norm(x)
    return x + sublayer(x)


def pre_norm_without_residual(x, sublayer, norm):
    return sublayer(norm(x))


def pre_norm_normalizes_sum(x, sublayer, norm):
    return norm(x + sublayer(norm(x)))


MUTANTS = {
    "layer_norm": [
        (ln_torch_var, "use the biased variance"),
        (ln_std_plus_eps, "eps goes inside the square root"),
        (ln_without_eps, "add eps to the variance before the square root"),
        (ln_literal_eps, "use the `eps` argument"),
        (ln_over_batch, "not over the batch"),
        (ln_whole_tensor, "not one for the whole tensor"),
        (ln_forgets_gamma_beta, "apply the gain and the shift"),
        (ln_shift_then_scale, "scale first, then shift"),
        (ln_weight_implies_bias, "weight and bias may each be None"),
        (ln_divides_by_variance, "not by the variance"),
        (ln_without_centering, "subtract the mean mu"),
        (ln_one_pass_variance, "catastrophic cancellation"),
        (ln_in_input_precision, "compute the mean and the variance in float32"),
        (ln_keeps_float32, "cast the result back"),
        (ln_always_float32, "compute in float32 only for half-precision inputs"),
        (ln_in_place, "changed its input `x` in place"),
    ],
    "rms_norm": [
        (rms_subtracts_mean, "does not subtract the mean"),
        (rms_divides_by_std, "not by the standard deviation"),
        (rms_l2_norm, "not their sum"),
        (rms_without_eps, "an all-zero vector has RMS 0"),
        (rms_eps_outside, "eps goes inside the square root"),
        (rms_forgets_weight, "multiply by the gain"),
        (rms_over_batch, "not over the batch"),
        (rms_keeps_float32, "cast the result back"),
    ],
    "post_norm_residual": [
        (post_norm_as_pre_norm, "that is pre-norm"),
        (post_norm_of_input, "not x alone"),
        (post_norm_of_output, "not x + Norm(Sublayer(x))"),
        (post_norm_without_residual, "add x before normalizing"),
        (post_norm_without_norm, "apply `norm` to the sum"),
    ],
    "pre_norm_residual": [
        (pre_norm_as_post_norm, "that is post-norm"),
        (pre_norm_of_output, "not its output"),
        (pre_norm_normalized_residual, "carries x itself, not Norm(x)"),
        (pre_norm_without_residual, "add the residual connection"),
        (pre_norm_normalizes_sum, "do not normalize the sum"),
    ],
}


def layer_norm_with_var_mean(x, weight=None, bias=None, eps=1e-5):
    h = _upcast(x)
    var, mean = torch.var_mean(h, dim=-1, keepdim=True, correction=0)
    return _affine((h - mean) * torch.rsqrt(var + eps), weight, bias).to(x.dtype)


def layer_norm_in_float64(x, weight=None, bias=None, eps=1e-5):
    h = x.double()
    centered = h - h.mean(-1, keepdim=True)
    out = centered / centered.pow(2).mean(-1, keepdim=True).add(eps).sqrt()
    weight, bias = (None if p is None else p.double() for p in (weight, bias))
    return _affine(out, weight, bias).to(x.dtype)


def rms_norm_with_vector_norm(x, weight=None, eps=1e-6):
    h = _upcast(x)
    mean_square = torch.linalg.vector_norm(h, dim=-1, keepdim=True) ** 2 / h.shape[-1]
    out = h * torch.rsqrt(mean_square + eps)
    return (out if weight is None else out * weight).to(x.dtype)


# Correct implementations written differently from the solution: the checks must accept them.
ALTERNATIVES = {
    "layer_norm": [layer_norm_with_var_mean, layer_norm_in_float64],
    "rms_norm": [rms_norm_with_vector_norm],
    "post_norm_residual": [lambda x, sublayer, norm: norm(sublayer(x) + x)],
    "pre_norm_residual": [lambda x, sublayer, norm: sublayer(norm(x)).add(x)],
}


def test_failure_message_says_what_where_and_shows_small_inputs():
    with pytest.raises(CheckFailed) as failure:
        checks.check_layer_norm(ln_torch_var)
    message = str(failure.value)
    assert "test case 1 of 10 (x of shape (4,), float32, no weight or bias)" in message
    assert re.search(r"the largest difference is [\d.e-]+ at index \(\d,\): you returned [-\d.e]+, expected", message)
    assert "Inputs:\n    x = tensor(" in message


def test_hand_checkable_residual_case_prints_the_functions():
    def wrong_only_on_plain_functions(x, sublayer, norm):
        return norm(x) + sublayer(norm(x)) if isinstance(sublayer, Written) else x + sublayer(norm(x))

    with pytest.raises(CheckFailed, match=r"sublayer = lambda h: 2 \* h\n    norm = lambda h: h \+ 1"):
        checks.check_pre_norm_residual(wrong_only_on_plain_functions)


# --------------------------------------------------------------------------------------------------
# "Implement this yourself"
# --------------------------------------------------------------------------------------------------


def layer_norm_with_captured_functional(x, weight=None, bias=None, eps=1e-5):
    return captured_layer_norm(x, x.shape[-1:], weight, bias, eps)


def layer_norm_with_module(x, weight=None, bias=None, eps=1e-5):
    module = nn.LayerNorm(x.shape[-1], eps=eps, elementwise_affine=False, dtype=x.dtype)
    return _affine(module(x), weight, bias)


def layer_norm_with_aten(x, weight=None, bias=None, eps=1e-5):
    return torch.ops.aten.native_layer_norm.default(x, list(x.shape[-1:]), weight, bias, eps)[0]


def layer_norm_with_group_norm(x, weight=None, bias=None, eps=1e-5):
    flat = x.reshape(-1, 1, x.shape[-1])  # one group over the d "positions" of each row
    return _affine(F.group_norm(flat, 1, eps=eps).reshape(x.shape), weight, bias)


def layer_norm_with_batch_norm(x, weight=None, bias=None, eps=1e-5):
    rows = x.reshape(-1, x.shape[-1]).T  # (d, M): each row of x becomes a "channel"
    return _affine(F.batch_norm(rows, None, None, training=True, eps=eps).T.reshape(x.shape), weight, bias)


def layer_norm_with_rms_norm(x, weight=None, bias=None, eps=1e-5):
    return _affine(F.rms_norm(x - x.mean(-1, keepdim=True), x.shape[-1:], eps=eps), weight, bias)


def layer_norm_with_captured_reference(x, weight=None, bias=None, eps=1e-5):
    return captured_reference_layer_norm(x, weight, bias, eps)


def layer_norm_with_reference_module(x, weight=None, bias=None, eps=1e-5):
    module = bertlab.norm.LayerNorm(x.shape[-1], eps).to(x.dtype)
    return _affine(module(x).detach(), weight, bias)


def layer_norm_hiding_the_call(x, weight=None, bias=None, eps=1e-5):
    try:
        return F.layer_norm(x, x.shape[-1:], weight, bias, eps)
    except Exception:  # the check's exception is swallowed, but the call was recorded
        return layer_norm_with_var_mean(x, weight, bias, eps)


def rms_norm_with_normalize(x, weight=None, eps=1e-6):
    out = F.normalize(x, dim=-1) * math.sqrt(x.shape[-1])
    return out if weight is None else out * weight


def rms_norm_with_module(x, weight=None, eps=1e-6):
    return nn.RMSNorm(x.shape[-1], eps=eps, elementwise_affine=False)(x) * (1 if weight is None else weight)


def rms_norm_with_mirrored_layer_norm(x, weight=None, eps=1e-6):
    mirrored = torch.cat([x, -x], dim=-1)  # mean 0, variance mean(x^2)
    out = F.layer_norm(mirrored, mirrored.shape[-1:], eps=eps)[..., : x.shape[-1]]
    return out if weight is None else out * weight


def pre_norm_with_captured_reference(x, sublayer, norm):
    return bertlab.norm.pre_norm_residual(x, sublayer, norm)


def post_norm_through_encoder_residual(x, sublayer, norm):
    layer = bertlab.transformer.EncoderLayer(x.shape[-1], 1, 4, norm_first=False)
    return layer.residual(x, sublayer, norm)


class TestNormChecks(MutationTests):
    """The shared mutation tests (tests/checks_helpers.py) of this chapter's checks."""

    checks = checks
    references = {name: getattr(bertlab.norm, name) for name in EXERCISES}
    mutants = MUTANTS
    alternatives = ALTERNATIVES
    cheats = [
        ("layer_norm", layer_norm_with_captured_functional, "torch.nn.functional.layer_norm"),
        ("layer_norm", layer_norm_with_module, "torch.nn.functional.layer_norm"),
        ("layer_norm", layer_norm_with_aten, "torch.ops.aten.native_layer_norm"),
        ("layer_norm", layer_norm_with_group_norm, "torch.nn.functional.group_norm"),
        ("layer_norm", layer_norm_with_batch_norm, "torch.nn.functional.batch_norm"),
        ("layer_norm", layer_norm_with_rms_norm, "torch.nn.functional.rms_norm"),
        ("layer_norm", layer_norm_with_captured_reference, "bertlab.norm.layer_norm"),
        ("layer_norm", layer_norm_with_reference_module, "bertlab.norm.LayerNorm.forward"),
        ("layer_norm", layer_norm_hiding_the_call, "torch.nn.functional.layer_norm"),
        ("rms_norm", rms_norm_with_normalize, "torch.nn.functional.normalize"),
        ("rms_norm", rms_norm_with_module, "torch.nn.functional.rms_norm"),
        ("rms_norm", rms_norm_with_mirrored_layer_norm, "torch.nn.functional.layer_norm"),
        ("pre_norm_residual", pre_norm_with_captured_reference, "bertlab.norm.pre_norm_residual"),
        ("post_norm_residual", post_norm_through_encoder_residual, "bertlab.norm.post_norm_residual"),
    ]


def test_residual_checks_let_the_given_norm_call_normalization_built_ins():
    """The norms passed to the residual blocks are nn.LayerNorm and nn.RMSNorm: calling them is the job."""
    checks.check_post_norm_residual(lambda x, sublayer, norm: norm(x + sublayer(x)))
    checks.check_pre_norm_residual(lambda x, sublayer, norm: x + sublayer(norm(x)))
