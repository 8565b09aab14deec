"""Checks of chapter 04 (normalization), called by the hidden tests of ``chapters/04_normalization``.

Each ``check_<name>(student_fn)`` compares the student's function with ``bertlab.norm.<name>`` on
inputs drawn from a generator seeded by the exercise's name, lists the typical mistakes it can
recognise, and the built-ins the student's code may not call. ``forbid=False`` lifts that rule (the
tests use it to run a check on the reference itself).

The normalization exercises may use ``mean``, ``var``, ``std``, ``sqrt``, ``rsqrt`` and
``torch.linalg.vector_norm``; what they may not call is a built-in that normalizes (layer, RMS,
batch, group, instance normalization, ``F.normalize``), nor the reference.
"""

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from autograder.checks.framework import (
    Case,
    DEFAULT_TOLERANCES,
    Exercise,
    Mistake,
    Tolerance,
    check_functions,
    generator_for,
    random_normal,
)
from autograder.checks.portable import Written
from bertlab import norm as reference
from bertlab.transformer import FeedForward
from bertlab.utils import compute_dtype


#: Every PyTorch and Hugging Face built-in that normalizes a tensor, and the references: a layer
#: norm written with group_norm, batch_norm on the transpose, or rms_norm of the centred input
#: still hands the job to a built-in.
NORMALIZATION_BUILTINS = (
    reference.layer_norm,
    reference.rms_norm,
    reference.LayerNorm.forward,
    reference.RMSNorm.forward,
    F.layer_norm,
    F.rms_norm,
    F.group_norm,
    F.batch_norm,
    F.instance_norm,
    F.normalize,
    torch.layer_norm,
    torch.native_layer_norm,
    torch.rms_norm,
    torch.group_norm,
    torch.native_group_norm,
    torch.batch_norm,
    torch.native_batch_norm,
    torch.instance_norm,
    torch.ops.aten.layer_norm,
    torch.ops.aten.native_layer_norm,
    torch.ops.aten.rms_norm,
    torch.ops.aten._fused_rms_norm,
    torch.ops.aten.group_norm,
    torch.ops.aten.native_group_norm,
    torch.ops.aten.batch_norm,
    torch.ops.aten.native_batch_norm,
    torch.ops.aten._native_batch_norm_legit,
    torch.ops.aten.instance_norm,
    nn.LayerNorm.forward,
    nn.RMSNorm.forward,
    nn.GroupNorm.forward,
    nn.modules.batchnorm._BatchNorm.forward,
    nn.modules.instancenorm._InstanceNorm.forward,
    "transformers.models.llama.modeling_llama.LlamaRMSNorm.forward",
    "transformers.models.t5.modeling_t5.T5LayerNorm.forward",
)


# --------------------------------------------------------------------------------------------------
# layer_norm
# --------------------------------------------------------------------------------------------------

LAYER_NORM_FORBIDDEN = NORMALIZATION_BUILTINS

#: The case with a mean of 100 loses a few float32 digits in any two-pass computation: slightly
#: looser than the defaults in float32 (a one-pass variance is still off by 1e-3 there).
LAYER_NORM_TOLERANCES = {**DEFAULT_TOLERANCES, torch.float32: Tolerance(atol=5e-5, rtol=1e-4)}


def layer_norm_cases() -> list[Case]:
    """Shapes of 1 to 4 dimensions, eps given, tiny values, zero variances, float32, float64, bfloat16.

    So that each mistake fails first where its hint is told apart from the others, whatever the run's
    seed: the first vector has a variance of 4 exactly (eps outside the root or left out change nothing
    there; they fail on the tiny values), and the bfloat16 values are around 64, where statistics
    computed in bfloat16 are off by far more than the tolerance.
    """
    g = generator_for("layer_norm")

    def affine(d, dtype=torch.float32):
        return random_normal(g, d, dtype=dtype), random_normal(g, d, dtype=dtype)

    spread = random_normal(g, 4, dtype=torch.float64)
    spread = ((spread - spread.mean()) / spread.std(correction=0) * 2.0 + 1.0).float()  # variance 4, whatever the draw
    constant_row = random_normal(g, 3, 6, scale=2.0)
    constant_row[1] = 0.75  # variance 0
    return [
        Case("x of shape (4,), float32, no weight or bias", (spread,)),
        Case("x of shape (2, 5, 16), float32, weight and bias of shape (16,)",
             (random_normal(g, 2, 5, 16, scale=3.0, shift=1.0), *affine(16))),
        Case("x of shape (3, 8), float64 (compared at float64 precision), weight of shape (8,), bias=None",
             (random_normal(g, 3, 8, scale=2.0, dtype=torch.float64), random_normal(g, 8, dtype=torch.float64))),
        Case("x of shape (2, 3, 4, 33), float32, weight and bias, eps=1e-3, standard deviation 0.1",
             (random_normal(g, 2, 3, 4, 33, scale=0.1), *affine(33)), {"eps": 1e-3}),
        Case("x of shape (3, 12), float32, tiny values (standard deviation 1e-3): eps matters",
             (random_normal(g, 3, 12, scale=1e-3),)),
        Case("x of shape (3, 6), float32, row 1 is constant (variance 0)", (constant_row, *affine(6))),
        Case("x of shape (4, 1): a single feature, d = 1", (random_normal(g, 4, 1), *affine(1))),
        Case("x of shape (1, 1, 8): a batch of one sequence of one token", (random_normal(g, 1, 1, 8), *affine(8))),
        Case("x of shape (4, 16), float32, values around 100 (mean 100, standard deviation 1)",
             (random_normal(g, 4, 16, shift=100.0), *affine(16))),
        Case("x of shape (4, 64), bfloat16, values around 64 (mean 64, standard deviation 1), "
             "weight and bias in bfloat16",
             (random_normal(g, 4, 64, shift=64.0, dtype=torch.bfloat16), *affine(64, torch.bfloat16))),
    ]


def _layer_norm_variant(*, correction=0, eps_inside=True, use_eps=True, fixed_eps=None, dim=-1, variance_dim=None,
                        center=True, affine="gamma_beta", divide_by="std", one_pass=False,
                        compute="promote", cast_back=True):
    """A wrong layer normalization: one of the typical mistakes, chosen by the arguments."""

    def layer_norm(x, weight=None, bias=None, eps=1e-5):
        eps = eps if fixed_eps is None else fixed_eps
        dtype = {"promote": compute_dtype(x), "float32": torch.float32, "input": x.dtype}[compute]
        h = x.to(dtype)
        dims = tuple(range(h.dim())) if dim is None else (dim,)
        mean = h.mean(dim=dims, keepdim=True)
        if one_pass:
            variance = (h * h).mean(dim=dims, keepdim=True) - mean * mean
        elif correction:
            variance = h.var(dim=dims, keepdim=True, correction=correction)
        elif variance_dim is not None:
            variance = (h - mean).pow(2).mean(dim=variance_dim, keepdim=True)
        else:
            variance = (h - mean).pow(2).mean(dim=dims, keepdim=True)
        centered = h - mean if center else h
        if not center:
            variance = (h * h).mean(dim=dims, keepdim=True)
        if divide_by == "variance":
            out = centered / (variance + eps)
        elif not use_eps:
            out = centered / torch.sqrt(variance)
        elif eps_inside:
            out = centered / torch.sqrt(variance + eps)
        else:
            out = centered / (torch.sqrt(variance) + eps)
        weight = None if weight is None else weight.to(dtype)
        bias = None if bias is None else bias.to(dtype)
        if affine == "gamma_beta":
            out = out * weight if weight is not None else out
            out = out + bias if bias is not None else out
        elif affine == "beta_gamma":
            out = out + bias if bias is not None else out
            out = out * weight if weight is not None else out
        elif affine == "together" and weight is not None:
            out = out * weight + bias  # TypeError when bias is None
        return out.to(x.dtype) if cast_back else out

    return layer_norm


LAYER_NORM_MISTAKES = (
    Mistake(_layer_norm_variant(correction=1),
            "use the biased variance, sigma^2 = mean((x - mu)^2), which divides by d: torch.var and "
            "Tensor.var divide by d - 1 unless you pass correction=0 (or unbiased=False)."),
    Mistake(_layer_norm_variant(fixed_eps=1e-5), "use the `eps` argument, not a fixed 1e-5."),
    Mistake(_layer_norm_variant(use_eps=False),
            "add eps to the variance before the square root: a constant vector (or d = 1) has "
            "variance 0, and 0 / sqrt(0) is NaN."),
    Mistake(_layer_norm_variant(eps_inside=False),
            "eps goes inside the square root: (x - mu) / sqrt(sigma^2 + eps), not "
            "(x - mu) / (sqrt(sigma^2) + eps). The two differ when the variance is small."),
    Mistake(_layer_norm_variant(divide_by="variance"),
            "divide by the standard deviation sqrt(sigma^2 + eps), not by the variance."),
    Mistake(_layer_norm_variant(center=False),
            "subtract the mean mu before dividing: without centring this is RMS normalization."),
    Mistake(_layer_norm_variant(dim=0),
            "normalize each vector over its features, the last dimension (dim=-1), not over the "
            "batch (dim 0): that would be batch normalization."),
    Mistake(_layer_norm_variant(dim=None),
            "compute a mean and a variance for each vector (over the last dimension, keepdim=True), "
            "not one for the whole tensor."),
    Mistake(_layer_norm_variant(variance_dim=0),
            "take the variance over the same axis as the mean, the last one (dim=-1, keepdim=True): yours "
            "is over dim 0, across the vectors of the batch."),
    Mistake(_layer_norm_variant(affine="none"),
            "apply the gain and the shift when they are given: gamma * x_hat + beta, with "
            "gamma = weight and beta = bias."),
    Mistake(_layer_norm_variant(affine="beta_gamma"),
            "scale first, then shift: gamma * x_hat + beta, not (x_hat + beta) * gamma."),
    Mistake(_layer_norm_variant(affine="together"),
            "weight and bias may each be None: apply the gain only when weight is given and the "
            "shift only when bias is given."),
    Mistake(_layer_norm_variant(one_pass=True),
            "compute the variance as mean((x - mu)^2), from the centred values: mean(x^2) - mu^2 "
            "subtracts two large, nearly equal numbers when the mean is large and loses the digits "
            "of the variance (catastrophic cancellation)."),
    Mistake(_layer_norm_variant(compute="input"),
            "compute the mean and the variance in float32 for bfloat16 and float16 inputs (x.float()), "
            "then cast the result back to x.dtype: bfloat16 keeps 8 significant bits (2 to 3 digits), "
            "too few for x - mu when the mean is large."),
    Mistake(_layer_norm_variant(cast_back=False),
            "return a tensor of the input's dtype: cast the result back with .to(x.dtype)."),
    Mistake(_layer_norm_variant(compute="float32"),
            "compute in float32 only for half-precision inputs: a float64 input is computed (and "
            "returned) in float64, e.g. with dtype = torch.promote_types(x.dtype, torch.float32)."),
)


LAYER_NORM = Exercise("layer_norm", reference.layer_norm, layer_norm_cases, mistakes=LAYER_NORM_MISTAKES,
                      forbidden=LAYER_NORM_FORBIDDEN, tolerance=LAYER_NORM_TOLERANCES,
                      summary="""
                      Compare ``layer_norm(x, weight=None, bias=None, eps=1e-5)`` with :func:`bertlab.norm.layer_norm`.

                      Cases: 1 to 4 dimensions; with and without weight and bias (and weight alone); eps given; standard
                      deviations of 1e-3 and 0.1 (eps matters), a constant row and d = 1 (variance 0), a single token, a
                      mean of 100 (cancellation), float32, float64 and bfloat16 (a mean of 64: statistics in float32,
                      result in bfloat16). Tolerance: float32 atol 5e-5, rtol 1e-4; otherwise the defaults (bfloat16:
                      2e-2). Forbidden: every normalization built into PyTorch (``F.layer_norm``, ``F.rms_norm``, group,
                      batch and instance norm, ``F.normalize``, their modules and ``torch.ops``) or Hugging Face, and
                      the references; ``mean``, ``var`` and ``sqrt`` are allowed.
                      """)


# --------------------------------------------------------------------------------------------------
# rms_norm
# --------------------------------------------------------------------------------------------------

RMS_NORM_FORBIDDEN = NORMALIZATION_BUILTINS


def rms_norm_cases() -> list[Case]:
    """Shapes of 1 to 4 dimensions, non-zero means, eps given, tiny values, an all-zero row, float32,
    float64, bfloat16.

    So that each mistake fails with its hint whatever the run's seed: with eps=1e-3 the values are of
    size 0.03 (a mean square near 1e-3, where leaving eps out and a fixed eps of 1e-6 differ by more than
    the tolerance), and the float64 case has 32 features, enough for a computation in float32 to show.
    """
    g = generator_for("rms_norm")
    zero_row = random_normal(g, 3, 6, scale=2.0)
    zero_row[2] = 0.0
    return [
        Case("x of shape (4,), float32, no weight", (random_normal(g, 4, scale=2.0, shift=1.0),)),
        Case("x of shape (2, 5, 16), float32, mean about 2, weight of shape (16,)",
             (random_normal(g, 2, 5, 16, scale=1.5, shift=2.0), random_normal(g, 16))),
        Case("x of shape (4, 32), float64 (compared at float64 precision), weight of shape (32,)",
             (random_normal(g, 4, 32, scale=2.0, shift=-1.0, dtype=torch.float64),
              random_normal(g, 32, dtype=torch.float64))),
        Case("x of shape (2, 3, 4, 33), float32, weight, eps=1e-3, values of size about 0.03",
             (random_normal(g, 2, 3, 4, 33, scale=0.03), random_normal(g, 33)), {"eps": 1e-3}),
        Case("x of shape (3, 12), float32, tiny values (about 1e-3): eps matters",
             (random_normal(g, 3, 12, scale=1e-3),)),
        Case("x of shape (3, 6), float32, row 2 is all zeros", (zero_row, random_normal(g, 6))),
        Case("x of shape (4, 1): a single feature, d = 1", (random_normal(g, 4, 1), random_normal(g, 1))),
        Case("x of shape (1, 1, 8): a batch of one sequence of one token",
             (random_normal(g, 1, 1, 8), random_normal(g, 8))),
        Case("x of shape (4, 64), bfloat16, weight in bfloat16",
             (random_normal(g, 4, 64, shift=1.0, dtype=torch.bfloat16), random_normal(g, 64, dtype=torch.bfloat16))),
    ]


def _rms_norm_variant(*, center=False, correction=None, eps_inside=True, use_eps=True, fixed_eps=None,
                      reduce="mean", dim=-1, use_weight=True, compute="promote", cast_back=True):
    """A wrong RMS normalization: one of the typical mistakes, chosen by the arguments."""

    def rms_norm(x, weight=None, eps=1e-6):
        eps = eps if fixed_eps is None else fixed_eps
        dtype = {"promote": compute_dtype(x), "float32": torch.float32}[compute]
        h = x.to(dtype)
        dims = tuple(range(h.dim())) if dim is None else (dim,)
        if center:
            h = h - h.mean(dim=dims, keepdim=True)
        if correction is not None:
            square = h.var(dim=dims, keepdim=True, correction=correction)
        elif reduce == "mean":
            square = h.pow(2).mean(dim=dims, keepdim=True)
        else:
            square = h.pow(2).sum(dim=dims, keepdim=True)
        if not use_eps:
            out = h / torch.sqrt(square)
        elif eps_inside:
            out = h / torch.sqrt(square + eps)
        else:
            out = h / (torch.sqrt(square) + eps)
        if use_weight and weight is not None:
            out = out * weight.to(dtype)
        return out.to(x.dtype) if cast_back else out

    return rms_norm


RMS_NORM_MISTAKES = (
    Mistake(_rms_norm_variant(center=True),
            "RMSNorm does not subtract the mean: divide x itself by sqrt(mean(x^2) + eps). "
            "Centring is what it leaves out of layer normalization."),
    Mistake(_rms_norm_variant(correction=1),
            "divide by the root mean square sqrt(mean(x^2) + eps), not by the standard deviation "
            "(x.std() subtracts the mean and divides by d - 1)."),
    Mistake(_rms_norm_variant(fixed_eps=1e-6), "use the `eps` argument, not a fixed 1e-6."),
    Mistake(_rms_norm_variant(use_eps=False),
            "add eps to the mean square before the square root: an all-zero vector has RMS 0, and "
            "0 / 0 is NaN."),
    Mistake(_rms_norm_variant(eps_inside=False),
            "eps goes inside the square root: x / sqrt(mean(x^2) + eps), not x / (sqrt(mean(x^2)) + eps)."),
    Mistake(_rms_norm_variant(reduce="sum"),
            "take the mean of the squares (divide by d), not their sum: x / ||x|| is sqrt(d) times "
            "too small."),
    Mistake(_rms_norm_variant(dim=0),
            "normalize each vector over its features, the last dimension (dim=-1), not over the "
            "batch (dim 0)."),
    Mistake(_rms_norm_variant(dim=None),
            "compute one root mean square per vector (over the last dimension, keepdim=True), not one "
            "for the whole tensor."),
    Mistake(_rms_norm_variant(use_weight=False), "multiply by the gain gamma (`weight`) when it is given."),
    Mistake(_rms_norm_variant(cast_back=False),
            "return a tensor of the input's dtype: cast the result back with .to(x.dtype)."),
    Mistake(_rms_norm_variant(compute="float32"),
            "compute in float32 only for half-precision inputs: a float64 input is computed (and "
            "returned) in float64, e.g. with dtype = torch.promote_types(x.dtype, torch.float32)."),
)


RMS_NORM = Exercise("rms_norm", reference.rms_norm, rms_norm_cases, mistakes=RMS_NORM_MISTAKES,
                    forbidden=RMS_NORM_FORBIDDEN,
                    summary="""
                    Compare ``rms_norm(x, weight=None, eps=1e-6)`` with :func:`bertlab.norm.rms_norm`.

                    Cases: 1 to 4 dimensions; inputs with a non-zero mean; with and without weight; eps given; values of
                    about 1e-3 and 0.03 (eps matters); an all-zero row; d = 1; a single token; float32, float64 and
                    bfloat16. Tolerance: the framework's defaults (float32: atol 1e-5, rtol 1e-4; bfloat16: 2e-2).
                    Forbidden: the same normalization built-ins as for ``layer_norm``, and the references; ``mean``,
                    ``sqrt``, ``rsqrt`` and ``torch.linalg.vector_norm`` are allowed.
                    """)


# --------------------------------------------------------------------------------------------------
# post_norm_residual and pre_norm_residual
# --------------------------------------------------------------------------------------------------


def _random_parameters(module: nn.Module, generator: torch.Generator, dtype=torch.float32) -> nn.Module:
    """``module`` in ``dtype``, eval mode, its parameters redrawn: matrices from N(0, 1 / fan_in), a
    norm's gain from N(1, 0.25), biases from N(0, 0.25)."""
    module = module.to(dtype)
    with torch.no_grad():
        for parameter in module.parameters():
            fan_in = parameter.shape[-1] if parameter.dim() > 1 else 1
            scale = fan_in**-0.5 if parameter.dim() > 1 else 0.5
            shift = 1.0 if parameter.dim() == 1 and parameter is getattr(module, "weight", None) else 0.0
            parameter.copy_(random_normal(generator, *parameter.shape, scale=scale, shift=shift, dtype=dtype))
    return module.eval()


def _residual_cases(name: str) -> list[Case]:
    """The cases of the residual exercise ``name``, drawn from its own generator: nn.Linear and
    bertlab's FeedForward as sublayers, norms with random weights and plain functions, float32 and
    float64, one token, inputs of standard deviation 100."""
    g = generator_for(name)

    def case(description, shape, sublayer, norm, dtype=torch.float32, scale=1.0, shift=0.0):
        x = random_normal(g, *shape, scale=scale, shift=shift, dtype=dtype)
        return Case(description, (x, sublayer, norm))

    def linear(d, dtype=torch.float32):
        return _random_parameters(nn.Linear(d, d), g, dtype)

    def layer_norm(d, dtype=torch.float32):
        return _random_parameters(nn.LayerNorm(d), g, dtype)

    return [
        case("x (2, 4, 8), sublayer = nn.Linear(8, 8), norm = nn.LayerNorm(8) with random weight and bias",
             (2, 4, 8), linear(8), layer_norm(8), scale=2.0, shift=0.5),
        case("x (5, 16), sublayer = bertlab.transformer.FeedForward(16, 64), norm = nn.RMSNorm(16) with "
             "a random weight", (5, 16), _random_parameters(FeedForward(16, 64), g),
             _random_parameters(nn.RMSNorm(16), g), scale=3.0),
        case("x (3, 4), sublayer = lambda h: 2 * h, norm = lambda h: h + 1 (checkable by hand)", (3, 4),
             Written(lambda h: 2 * h, "lambda h: 2 * h"), Written(lambda h: h + 1, "lambda h: h + 1")),
        case("x (2, 3, 8), float64, sublayer = nn.Linear(8, 8), norm = nn.LayerNorm(8), both in float64",
             (2, 3, 8), linear(8, torch.float64), layer_norm(8, torch.float64), dtype=torch.float64, scale=2.0),
        case("x (1, 1, 8): one token, nn.Linear(8, 8), nn.LayerNorm(8)", (1, 1, 8), linear(8), layer_norm(8)),
        case("x (2, 5, 8) of large scale (standard deviation 100), nn.Linear(8, 8), nn.LayerNorm(8)",
             (2, 5, 8), linear(8), layer_norm(8), scale=100.0),
    ]


def pre_norm_residual_cases() -> list[Case]:
    return _residual_cases("pre_norm_residual")


def post_norm_residual_cases() -> list[Case]:
    return _residual_cases("post_norm_residual")


def _pre_norm_of_sum(x, sublayer, norm):
    return norm(x + sublayer(x))


def _pre_norm_of_output(x, sublayer, norm):
    return x + norm(sublayer(x))


def _pre_norm_normalized_residual(x, sublayer, norm):
    h = norm(x)
    return h + sublayer(h)


def _pre_norm_without_residual(x, sublayer, norm):
    return sublayer(norm(x))


def _pre_norm_normalized_twice(x, sublayer, norm):
    return norm(x + sublayer(norm(x)))


def _pre_norm_without_norm(x, sublayer, norm):
    return x + sublayer(x)


PRE_NORM_RESIDUAL_FORBIDDEN = (reference.pre_norm_residual,)

PRE_NORM_RESIDUAL_MISTAKES = (
    Mistake(_pre_norm_of_sum,
            "that is post-norm, Norm(x + Sublayer(x)). Pre-norm normalizes the sublayer's input and "
            "leaves the sum alone: y = x + Sublayer(Norm(x))."),
    Mistake(_pre_norm_of_output,
            "normalize the input of the sublayer, not its output: y = x + Sublayer(Norm(x))."),
    Mistake(_pre_norm_normalized_residual,
            "the residual path carries x itself, not Norm(x): add Sublayer(Norm(x)) to the "
            "un-normalized x."),
    Mistake(_pre_norm_normalized_twice,
            "do not normalize the sum: in pre-norm the residual stream x + Sublayer(Norm(x)) stays "
            "un-normalized (a pre-norm stack applies one final norm after its last layer)."),
    Mistake(_pre_norm_without_residual, "add the residual connection: y = x + Sublayer(Norm(x))."),
    Mistake(_pre_norm_without_norm, "apply `norm` to the sublayer's input: y = x + Sublayer(Norm(x))."),
)


PRE_NORM_RESIDUAL = Exercise("pre_norm_residual", reference.pre_norm_residual, pre_norm_residual_cases,
                             mistakes=PRE_NORM_RESIDUAL_MISTAKES, forbidden=PRE_NORM_RESIDUAL_FORBIDDEN,
                             summary="""
                             Compare ``pre_norm_residual(x, sublayer, norm)`` with
                             :func:`bertlab.norm.pre_norm_residual`.

                             Cases: nn.Linear and bertlab's FeedForward as sublayers; nn.LayerNorm, nn.RMSNorm (random
                             weights) and plain functions as norms; float32 and float64; one token; inputs of standard
                             deviation 100. Tolerance: the framework's defaults. Forbidden: the reference.
                             """)


def _post_norm_as_pre_norm(x, sublayer, norm):
    return x + sublayer(norm(x))


def _post_norm_of_input(x, sublayer, norm):
    return norm(x) + sublayer(x)


def _post_norm_of_output(x, sublayer, norm):
    return x + norm(sublayer(x))


def _post_norm_without_residual(x, sublayer, norm):
    return norm(sublayer(x))


def _post_norm_without_norm(x, sublayer, norm):
    return x + sublayer(x)


POST_NORM_RESIDUAL_FORBIDDEN = (reference.post_norm_residual,)

POST_NORM_RESIDUAL_MISTAKES = (
    Mistake(_post_norm_as_pre_norm,
            "that is pre-norm, x + Sublayer(Norm(x)). Post-norm applies the sublayer to x and "
            "normalizes the sum: y = Norm(x + Sublayer(x))."),
    Mistake(_post_norm_of_input, "normalize the sum x + Sublayer(x), not x alone: y = Norm(x + Sublayer(x))."),
    Mistake(_post_norm_of_output,
            "normalize after the residual addition, the whole sum: y = Norm(x + Sublayer(x)), not "
            "x + Norm(Sublayer(x))."),
    Mistake(_post_norm_without_residual, "add x before normalizing: y = Norm(x + Sublayer(x))."),
    Mistake(_post_norm_without_norm, "apply `norm` to the sum: y = Norm(x + Sublayer(x))."),
)


POST_NORM_RESIDUAL = Exercise("post_norm_residual", reference.post_norm_residual, post_norm_residual_cases,
                              mistakes=POST_NORM_RESIDUAL_MISTAKES, forbidden=POST_NORM_RESIDUAL_FORBIDDEN,
                              summary="""
                              Compare ``post_norm_residual(x, sublayer, norm)`` with
                              :func:`bertlab.norm.post_norm_residual`.

                              Cases and tolerance as for :func:`check_pre_norm_residual`. Forbidden: the reference.
                              """)


#: The chapter whose exercises this module checks, and their records, in the order of the chapter.
CHAPTER = "04_normalization"


__getattr__ = check_functions(globals())  # check_<name> for each record above
