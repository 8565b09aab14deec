"""Mutation tests of chapter 03's checks (autograder/checks/positional.py).

For every exercise: the check accepts the solution of the solution notebook, other correct
implementations and (with the forbid-rule lifted) the reference; it rejects a catalogue of typical
wrong implementations, each with the hint that explains it; and calling the reference or a Hugging
Face function that does the exercise's job fails with "implement this yourself" (the Hugging Face
functions are imported here, before any check runs, so they are caught as captured references).
"""

import math
import re
import sys
from pathlib import Path

import pytest
import torch
from transformers.models.bloom.modeling_bloom import build_alibi_tensor
from transformers.models.distilbert.modeling_distilbert import create_sinusoidal_embeddings
from transformers.models.gptj.modeling_gptj import rotate_every_two
from transformers.models.llama.modeling_llama import rotate_half
from transformers.models.t5.modeling_t5 import T5Attention

import bertlab.positional
from autograder.checks import positional as checks
from autograder.checks.framework import CheckFailed
from bertlab.positional import apply_rope as captured_apply_rope
from bertlab.positional import relative_position_bucket as captured_bucket
from checks_helpers import MutationTests, run_solution_cells

SOLUTION = Path(__file__).resolve().parents[1] / "solutions" / "03_positional" / "03_positional.ipynb"
EXERCISES = ["sinusoidal_positional_encoding", "relative_position_bucket", "alibi_slopes", "alibi_bias", "apply_rope"]


@pytest.fixture(scope="module")
def solution_namespace():
    """The functions defined by the solution cells of the solution notebook, executed together."""
    return run_solution_cells(SOLUTION, {"torch": torch, "math": math})


# --------------------------------------------------------------------------------------------------
# Typical wrong implementations, as students write them, and the hint each must get
# --------------------------------------------------------------------------------------------------


def _angles(num_positions, d_model, base=10000.0, exponents=None, first=0):
    """Positions (P, 1) times frequencies: the part most sinusoid mutants share."""
    exponents = torch.arange(0, d_model, 2) / d_model if exponents is None else exponents
    return torch.arange(first, first + num_positions).float()[:, None] / base**exponents


def sinusoids_swapped(num_positions, d_model, base=10000.0):
    angles = _angles(num_positions, d_model, base)
    pe = torch.zeros(num_positions, d_model)
    pe[:, 0::2] = torch.cos(angles)
    pe[:, 1::2] = torch.sin(angles[:, : d_model // 2])
    return pe


def sinusoids_concatenated(num_positions, d_model, base=10000.0):
    angles = _angles(num_positions, d_model, base)
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)[:, :d_model]


def sinusoids_exponent_halved(num_positions, d_model, base=10000.0):
    angles = _angles(num_positions, d_model, base, exponents=torch.arange((d_model + 1) // 2) / d_model)
    pe = torch.zeros(num_positions, d_model)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angles), torch.cos(angles[:, : d_model // 2])
    return pe


def sinusoids_exponent_doubled(num_positions, d_model, base=10000.0):
    angles = _angles(num_positions, d_model, base, exponents=2 * torch.arange(0, d_model, 2) / d_model)
    pe = torch.zeros(num_positions, d_model)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angles), torch.cos(angles[:, : d_model // 2])
    return pe


def sinusoids_multiplied(num_positions, d_model, base=10000.0):
    angles = torch.arange(num_positions).float()[:, None] * base ** (torch.arange(0, d_model, 2) / d_model)
    pe = torch.zeros(num_positions, d_model)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angles), torch.cos(angles[:, : d_model // 2])
    return pe


def sinusoids_from_one(num_positions, d_model, base=10000.0):
    angles = _angles(num_positions, d_model, base, first=1)
    pe = torch.zeros(num_positions, d_model)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angles), torch.cos(angles[:, : d_model // 2])
    return pe


def sinusoids_fixed_base(num_positions, d_model, base=10000.0):
    angles = _angles(num_positions, d_model)
    pe = torch.zeros(num_positions, d_model)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angles), torch.cos(angles[:, : d_model // 2])
    return pe


def sinusoids_float64(num_positions, d_model, base=10000.0):
    angles = torch.arange(num_positions, dtype=torch.float64)[:, None] / base ** (torch.arange(0, d_model, 2) / d_model)
    pe = torch.zeros(num_positions, d_model, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angles), torch.cos(angles[:, : d_model // 2])
    return pe


def sinusoids_even_width_only(num_positions, d_model, base=10000.0):
    angles = _angles(num_positions, d_model, base)
    pe = torch.zeros(num_positions, d_model)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe


def _t5_buckets(relative_position, bidirectional, num_buckets, max_distance, *, upper=lambda r: r > 0,
                halve=True, causal_distance=lambda r: (-r).clamp(min=0), log_of=lambda d, e: d / e,
                log_max=lambda m, e: m / e, scale=lambda n, e: n - e, to_bucket=lambda v: v.long(), clamp=True):
    """A student's T5 buckets; the keyword arguments swap in one wrong piece."""
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        if halve:
            num_buckets //= 2
        buckets = buckets + upper(relative_position).long() * num_buckets
        distance = relative_position.abs()
    else:
        distance = causal_distance(relative_position)
    exact = num_buckets // 2
    ratio = torch.log(log_of(distance.clamp(min=exact).float(), exact)) / math.log(log_max(max_distance, exact))
    large = exact + to_bucket(ratio * scale(num_buckets, exact))
    if clamp:
        large = torch.minimum(large, torch.full_like(large, num_buckets - 1))
    return buckets + torch.where(distance < exact, distance, large)


def buckets_query_minus_key(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    return _t5_buckets(-relative_position.long(), bidirectional, num_buckets, max_distance)


def buckets_zero_in_upper_half(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    return _t5_buckets(relative_position.long(), bidirectional, num_buckets, max_distance, upper=lambda r: r >= 0)


def buckets_not_halved(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    return _t5_buckets(relative_position.long(), bidirectional, num_buckets, max_distance, halve=False)


def buckets_causal_absolute(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    return _t5_buckets(relative_position.long(), bidirectional, num_buckets, max_distance,
                       causal_distance=lambda r: r.abs())


def buckets_unclamped(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    return _t5_buckets(relative_position.long(), bidirectional, num_buckets, max_distance, clamp=False)


def buckets_log_without_ratio(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    return _t5_buckets(relative_position.long(), bidirectional, num_buckets, max_distance,
                       log_of=lambda d, e: d, log_max=lambda m, e: m)


def buckets_rounded(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    return _t5_buckets(relative_position.long(), bidirectional, num_buckets, max_distance,
                       to_bucket=lambda v: torch.round(v).long())


def buckets_float(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    return _t5_buckets(relative_position.long(), bidirectional, num_buckets, max_distance).float()


def slopes_geometric_for_every_count(num_heads, *, device=None):
    return 2.0 ** (-8.0 * torch.arange(1, num_heads + 1, device=device) / num_heads)


def slopes_from_zero(num_heads, *, device=None):
    power = 2 ** int(math.log2(num_heads))
    slopes = [2 ** (-8 * h / power) for h in range(power)]
    slopes += [2 ** (-8 * h / (2 * power)) for h in range(0, 2 * power, 2)][: num_heads - power]
    return torch.tensor(slopes, device=device)


def slopes_negative(num_heads, *, device=None):
    power = 2 ** int(math.log2(num_heads))
    slopes = [-(2 ** (-8 * h / power)) for h in range(1, power + 1)]
    slopes += [-(2 ** (-8 * h / (2 * power))) for h in range(1, 2 * power + 1, 2)][: num_heads - power]
    return torch.tensor(slopes, device=device)


def slopes_first_of_double(num_heads, *, device=None):
    power = 2 ** int(math.log2(num_heads))
    slopes = [2 ** (-8 * h / power) for h in range(1, power + 1)]
    slopes += [2 ** (-8 * h / (2 * power)) for h in range(1, 2 * power + 1)][: num_heads - power]
    return torch.tensor(slopes, device=device)


def slopes_sorted(num_heads, *, device=None):
    power = 2 ** int(math.log2(num_heads))
    slopes = [2 ** (-8 * h / power) for h in range(1, power + 1)]
    slopes += [2 ** (-8 * h / (2 * power)) for h in range(1, 2 * power + 1, 2)][: num_heads - power]
    return torch.tensor(sorted(slopes, reverse=True), device=device)


def slopes_float64(num_heads, *, device=None):
    power = 2 ** int(math.log2(num_heads))
    slopes = [2 ** (-8 * h / power) for h in range(1, power + 1)]
    slopes += [2 ** (-8 * h / (2 * power)) for h in range(1, 2 * power + 1, 2)][: num_heads - power]
    return torch.tensor(slopes, dtype=torch.float64, device=device)


def alibi_slopes(num_heads, *, device=None):
    """What the students' biases call; under the check the reference slopes replace it."""
    raise AssertionError("dependency isolation failed: the student's alibi_slopes was called")


def _offsets(n, m, device):
    return torch.arange(n, device=device)[:, None] - torch.arange(m, device=device)[None, :]  # i - j


def bias_rewarding_distance(num_heads, n, m=None, causal=True, *, device=None):
    offsets = _offsets(n, m or n, device)
    offsets = offsets.clamp(min=0) if causal else offsets.abs()
    return alibi_slopes(num_heads, device=device).view(-1, 1, 1) * offsets


def bias_without_clamp(num_heads, n, m=None, causal=True, *, device=None):
    offsets = _offsets(n, m or n, device)
    return -alibi_slopes(num_heads, device=device).view(-1, 1, 1) * (offsets if causal else offsets.abs())


def bias_masking_future(num_heads, n, m=None, causal=True, *, device=None):
    offsets = _offsets(n, m or n, device)
    bias = -alibi_slopes(num_heads, device=device).view(-1, 1, 1) * offsets.abs()
    return bias.masked_fill(offsets < 0, float("-inf")) if causal else bias


def bias_key_minus_query(num_heads, n, m=None, causal=True, *, device=None):
    offsets = -_offsets(n, m or n, device)  # j - i
    offsets = offsets.clamp(min=0) if causal else offsets.abs()
    return -alibi_slopes(num_heads, device=device).view(-1, 1, 1) * offsets


def bias_square(num_heads, n, m=None, causal=True, *, device=None):
    offsets = _offsets(n, n, device)
    offsets = offsets.clamp(min=0) if causal else offsets.abs()
    return -alibi_slopes(num_heads, device=device).view(-1, 1, 1) * offsets


def bias_heads_last(num_heads, n, m=None, causal=True, *, device=None):
    offsets = _offsets(n, m or n, device)
    offsets = offsets.clamp(min=0) if causal else offsets.abs()
    return -offsets[..., None] * alibi_slopes(num_heads, device=device)


def bias_always_causal(num_heads, n, m=None, causal=True, *, device=None):
    return -alibi_slopes(num_heads, device=device).view(-1, 1, 1) * _offsets(n, m or n, device).clamp(min=0)


def bias_like_bloom(num_heads, n, m=None, causal=True, *, device=None):
    keys = torch.arange(m or n, device=device).expand(n, -1)
    return alibi_slopes(num_heads, device=device).view(-1, 1, 1) * keys


def _rope(x, positions=None, base=10000.0, *, pairs="interleaved", sign=1, first=0, exponent=2,
          use_positions=True, dtype=None, use_base=True, cast_back=True):
    """A student's RoPE; the keyword arguments swap in one wrong piece."""
    n, d = x.shape[-2:]
    if positions is None or not use_positions:
        positions = torch.arange(first, first + n)
    dtype = dtype or (torch.float64 if x.dtype == torch.float64 else torch.float32)
    theta = (base if use_base else 10000.0) ** (-exponent * torch.arange(d // 2, dtype=dtype) / d)
    angle = sign * positions.to(dtype).unsqueeze(-1) * theta
    if pairs == "rotate_half":
        a, b = x[..., : d // 2].to(dtype), x[..., d // 2 :].to(dtype)
    else:
        a, b = x[..., ::2].to(dtype), x[..., 1::2].to(dtype)
    a, b = a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()
    out = torch.stack((a, b), -1).flatten(-2) if pairs == "interleaved" else torch.cat((a, b), -1)
    return out.to(x.dtype) if cast_back else out


def rope_rotate_half(x, positions=None, base=10000.0):
    return _rope(x, positions, base, pairs="rotate_half")


def rope_halves_out(x, positions=None, base=10000.0):
    return _rope(x, positions, base, pairs="halves")


def rope_negative_angle(x, positions=None, base=10000.0):
    return _rope(x, positions, base, sign=-1)


def rope_positions_from_one(x, positions=None, base=10000.0):
    return _rope(x, positions, base, first=1)


def rope_ignoring_positions(x, positions=None, base=10000.0):
    return _rope(x, positions, base, use_positions=False)


def rope_exponent_halved(x, positions=None, base=10000.0):
    return _rope(x, positions, base, exponent=1)


def rope_fixed_base(x, positions=None, base=10000.0):
    return _rope(x, positions, base, use_base=False)


def rope_float32_output(x, positions=None, base=10000.0):
    return _rope(x, positions, base, cast_back=False)


def rope_angles_in_input_dtype(x, positions=None, base=10000.0):
    return _rope(x, positions, base, dtype=x.dtype)


def rope_float32_angles_for_float64(x, positions=None, base=10000.0):
    return _rope(x, positions, base, dtype=torch.float32)


MUTANTS = {
    "sinusoidal_positional_encoding": [
        (sinusoids_swapped, "sine and cosine are swapped"),
        (sinusoids_concatenated, "they are interleaved"),
        (sinusoids_exponent_halved, "Yours is half of it"),
        (sinusoids_exponent_doubled, "you doubled them"),
        (sinusoids_multiplied, "not p * base^(2i / d_model)"),
        (sinusoids_from_one, "positions start at 0"),
        (sinusoids_fixed_base, "use the `base` argument"),
        (sinusoids_float64, "return a float32 tensor"),
        (sinusoids_even_width_only, "with an odd d_model"),
    ],
    "relative_position_bucket": [
        (buckets_query_minus_key, "the sign of the relative position is flipped"),
        (buckets_zero_in_upper_half, "belongs to the lower half"),
        (buckets_not_halved, "each direction gets half of the buckets"),
        (buckets_causal_absolute, "every relative position > 0 maps to bucket 0"),
        (buckets_unclamped, "must all share the last bucket"),
        (buckets_log_without_ratio, "log(distance / max_exact)"),
        (buckets_rounded, "round the log bucket down"),
        (buckets_float, "return integer buckets"),
    ],
    "alibi_slopes": [
        (slopes_geometric_for_every_count, "is the rule for H a power of two only"),
        (slopes_from_zero, "heads are numbered h = 1 .. H"),
        (slopes_negative, "the slopes m_h are positive"),
        (slopes_first_of_double, "not the first H - C slopes"),
        (slopes_sorted, "do not sort"),
        (slopes_float64, "return a float32 tensor"),
    ],
    "alibi_bias": [
        (bias_rewarding_distance, "the bias is a penalty"),
        (bias_without_clamp, "which rewards the future"),
        (bias_masking_future, "ALiBi itself masks nothing"),
        (bias_key_minus_query, "(you used j - i)"),
        (bias_square, "use m keys when m is given"),
        (bias_heads_last, "the heads come first"),
        (bias_always_causal, "with causal=False the bias is symmetric"),
        (bias_like_bloom, "Bloom adds m_h * j"),
    ],
    "apply_rope": [
        (rope_rotate_half, "the rotate-half layout of GPT-NeoX and Llama"),
        (rope_halves_out, "put each rotated pair back in place"),
        (rope_negative_angle, "you rotated by -m theta_i"),
        (rope_positions_from_one, "the default positions are 0 .. N - 1"),
        (rope_ignoring_positions, "use the `positions` argument"),
        (rope_exponent_halved, "Your exponent is half of it"),
        (rope_fixed_base, "use the `base` argument"),
        (rope_float32_output, "return a tensor of x's dtype"),
        (rope_angles_in_input_dtype, "compute the angles in float32"),
        (rope_float32_angles_for_float64, "for float64 x compute the angles in float64"),
    ],
}


# --------------------------------------------------------------------------------------------------
# Correct implementations written differently from the solution: the checks must accept them.
# --------------------------------------------------------------------------------------------------


def sinusoids_like_the_pytorch_tutorial(num_positions, d_model, base=10000.0):
    position = torch.arange(num_positions).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(base) / d_model))
    pe = torch.zeros(num_positions, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term[: d_model // 2])
    return pe


def sinusoids_in_float64(num_positions, d_model, base=10000.0):
    features = torch.arange(d_model, dtype=torch.float64)
    angles = torch.arange(num_positions, dtype=torch.float64)[:, None] / base ** (2 * (features // 2) / d_model)
    return torch.where(features % 2 == 0, torch.sin(angles), torch.cos(angles)).float()


def buckets_in_float64(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    r = relative_position.to(torch.int64)
    n = num_buckets // 2 if bidirectional else num_buckets
    offset = torch.where(r > 0, n, 0) if bidirectional else torch.zeros_like(r)
    distance = r.abs() if bidirectional else torch.clamp(-r, min=0)
    exact = n // 2
    log_bucket = exact + (torch.log(distance.double() / exact) / math.log(max_distance / exact) * (n - exact)).floor()
    log_bucket = log_bucket.nan_to_num(0).clamp(max=n - 1).long()  # log(0) only where distance < exact
    return offset + torch.where(distance < exact, distance, log_bucket)


def slopes_like_the_paper(num_heads, *, device=None):
    def power_of_two(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    def slopes(n):
        if math.log2(n).is_integer():
            return power_of_two(n)
        closest = 2 ** math.floor(math.log2(n))
        return power_of_two(closest) + slopes(2 * closest)[0::2][: n - closest]

    return torch.tensor(slopes(num_heads), dtype=torch.float32, device=device)


def bias_with_abs_and_tril(num_heads, n, m=None, causal=True, *, device=None):
    m = n if m is None else m
    distance = (torch.arange(n, device=device)[:, None] - torch.arange(m, device=device)).abs().float()
    if causal:
        distance = distance.tril()  # keys after the query: 0
    return -alibi_slopes(num_heads, device=device)[:, None, None] * distance


def rope_with_complex_numbers(x, positions=None, base=10000.0):
    *_, n, d = x.shape
    real_dtype = torch.promote_types(x.dtype, torch.float32)
    positions = torch.arange(n) if positions is None else positions
    theta = 1.0 / base ** (torch.arange(0, d, 2, dtype=real_dtype) / d)
    angles = positions.to(real_dtype)[..., None] * theta
    pairs = torch.view_as_complex(x.to(real_dtype).reshape(*x.shape[:-1], d // 2, 2).contiguous())
    rotated = torch.view_as_real(pairs * torch.polar(torch.ones_like(angles), angles))
    return rotated.reshape(x.shape).to(x.dtype)


def rope_through_rotate_half(x, positions=None, base=10000.0):
    """The rotate-half formula x cos + rotate(x) sin on interleaved pairs (GPT-J's rotate_every_two)."""
    n, d = x.shape[-2:]
    real_dtype = torch.promote_types(x.dtype, torch.float32)
    positions = torch.arange(n) if positions is None else positions
    angles = positions.to(real_dtype)[..., None] * base ** (-torch.arange(0, d, 2, dtype=real_dtype) / d)
    cos, sin = angles.cos().repeat_interleave(2, -1), angles.sin().repeat_interleave(2, -1)
    y = x.to(real_dtype)
    rotated = torch.stack((-y[..., 1::2], y[..., ::2]), dim=-1).flatten(-2)
    return (y * cos + rotated * sin).to(x.dtype)


ALTERNATIVES = {
    "sinusoidal_positional_encoding": [sinusoids_like_the_pytorch_tutorial, sinusoids_in_float64],
    "relative_position_bucket": [buckets_in_float64],
    "alibi_slopes": [slopes_like_the_paper],
    "alibi_bias": [bias_with_abs_and_tril],  # calls `alibi_slopes`, replaced by the reference
    "apply_rope": [rope_with_complex_numbers, rope_through_rotate_half],
}


# --------------------------------------------------------------------------------------------------
# The checks accept what is right and reject what is wrong, with its hint
# --------------------------------------------------------------------------------------------------


def test_small_inputs_are_shown_so_the_student_can_rerun_the_case():
    with pytest.raises(CheckFailed) as failure:
        checks.check_relative_position_bucket(buckets_query_minus_key)
    message = str(failure.value)
    assert "test case 1 of 10" in message
    first = checks.relative_position_bucket_cases()[0].args[0]
    shown = re.search(r"Inputs:\n    relative_position = tensor\(\[([-\d, ]+)\]\)", message)
    assert shown and [int(value) for value in shown.group(1).split(",")] == first.tolist(), message


def test_a_wrong_alibi_slopes_is_not_punished_twice():
    """The student's bias calls a broken `alibi_slopes` (this module's); the check substitutes the
    reference, and the bias passes."""
    with pytest.raises(AssertionError, match="dependency isolation failed"):
        bias_with_abs_and_tril(2, 3)
    checks.check_alibi_bias(bias_with_abs_and_tril)


# --------------------------------------------------------------------------------------------------
# "Implement this yourself"
# --------------------------------------------------------------------------------------------------


def buckets_with_captured_reference(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    return captured_bucket(relative_position, bidirectional, num_buckets, max_distance)


def buckets_from_t5(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    return T5Attention._relative_position_bucket(relative_position, bidirectional, num_buckets, max_distance)


def buckets_hiding_the_call(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    try:
        return bertlab.positional.relative_position_bucket(relative_position, bidirectional, num_buckets, max_distance)
    except Exception:  # the check's exception is swallowed, but the call was recorded
        return buckets_in_float64(relative_position, bidirectional, num_buckets, max_distance)


def sinusoids_from_the_frequency_helper(num_positions, d_model, base=10000.0):
    angles = (torch.arange(num_positions).float()[:, None]
              * bertlab.positional._inverse_frequencies(d_model, base, torch.float32))
    pe = torch.zeros(num_positions, d_model)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angles), torch.cos(angles[:, : d_model // 2])
    return pe


def sinusoids_from_distilbert(num_positions, d_model, base=10000.0):
    out = torch.empty(num_positions, d_model)
    create_sinusoidal_embeddings(num_positions, d_model, out)
    return out


def slopes_from_bloom(num_heads, *, device=None):
    return build_alibi_tensor(torch.ones(1, 2), num_heads, torch.float32)[:, 0, 1]


def bias_from_the_reference(num_heads, n, m=None, causal=True, *, device=None):
    return bertlab.positional.alibi_bias(num_heads, n, m, causal, device=device)


def rope_with_captured_reference(x, positions=None, base=10000.0):
    return captured_apply_rope(x, positions, base)


def rope_with_rotation_matrices(x, positions=None, base=10000.0):
    positions = torch.arange(x.shape[-2]) if positions is None else positions
    matrices = torch.stack([bertlab.positional.rope_matrix(p, x.shape[-1], base) for p in positions.tolist()])
    return (matrices @ x.unsqueeze(-1)).squeeze(-1)


def rope_from_llama(x, positions=None, base=10000.0):
    return x + 0 * rotate_half(x)


def rope_from_gptj(x, positions=None, base=10000.0):
    return x + 0 * rotate_every_two(x.reshape(1, 1, -1, x.shape[-1])).reshape(x.shape)


class TestPositionalChecks(MutationTests):
    """The shared mutation tests (tests/checks_helpers.py) of this chapter's checks."""

    checks = checks
    references = {name: getattr(bertlab.positional, name) for name in EXERCISES}
    mutants = MUTANTS
    alternatives = ALTERNATIVES
    cheats = [
        ("relative_position_bucket", buckets_with_captured_reference, "bertlab.positional.relative_position_bucket"),
        ("relative_position_bucket", buckets_from_t5,
         "transformers.models.t5.modeling_t5.T5Attention._relative_position_bucket"),
        ("relative_position_bucket", buckets_hiding_the_call, "bertlab.positional.relative_position_bucket"),
        ("sinusoidal_positional_encoding", sinusoids_from_the_frequency_helper,
         "bertlab.positional._inverse_frequencies"),
        ("sinusoidal_positional_encoding", sinusoids_from_distilbert,
         "modeling_distilbert.create_sinusoidal_embeddings"),
        ("alibi_slopes", slopes_from_bloom, "transformers.models.bloom.modeling_bloom.build_alibi_tensor"),
        ("alibi_bias", bias_from_the_reference, "bertlab.positional.alibi_bias"),
        ("apply_rope", rope_with_captured_reference, "bertlab.positional.apply_rope"),
        ("apply_rope", rope_with_rotation_matrices, "bertlab.positional.rope_matrix"),
        ("apply_rope", rope_from_llama, "transformers.models.llama.modeling_llama.rotate_half"),
        ("apply_rope", rope_from_gptj, "transformers.models.gptj.modeling_gptj.rotate_every_two"),
    ]


def test_alibi_bias_may_use_the_reference_slopes():
    """The slopes are the previous exercise: calling the reference for them is allowed."""

    def bias(num_heads, n, m=None, causal=True, *, device=None):
        slopes = bertlab.positional.alibi_slopes(num_heads, device=device)
        distance = torch.arange(n, device=device)[:, None] - torch.arange(n if m is None else m, device=device)
        return -slopes[:, None, None] * (distance.clamp(min=0) if causal else distance.abs())

    checks.check_alibi_bias(bias)


def test_profile_hook_is_restored_after_a_check():
    before = sys.getprofile()
    with pytest.raises(CheckFailed):
        checks.check_apply_rope(rope_with_captured_reference)
    assert sys.getprofile() is before
