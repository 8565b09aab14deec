"""Checks of chapter 03 (positional encodings), called by the hidden tests of ``chapters/03_positional``.

Each ``check_<name>(student_fn)`` compares the student's function with ``bertlab.positional.<name>``
on inputs drawn from a generator seeded by the exercise's name, lists the typical mistakes it can
recognise, and the built-ins (the reference, and the Hugging Face functions that do the same job)
the student's code may not call. ``forbid=False`` lifts that rule (the tests use it to run a check
on the reference itself).
"""

import math

import torch

from autograder.checks.framework import (
    Case,
    DEFAULT_TOLERANCES,
    Exercise,
    Mistake,
    Tolerance,
    check_functions,
    generator_for,
    random_integer,
    random_normal,
)
from bertlab import positional as reference


def _frequencies(dim: int, base: float, dtype=torch.float32, exponent_scale: float = 2.0, start: int = 0):
    """theta_i = base^(-exponent_scale * i / dim) for pairs i = 0 .. ceil(dim/2) - 1: the frequencies
    of the sinusoids and of RoPE (exponent_scale = 2), or a wrong variant of them."""
    pairs = torch.arange(start, start + (dim + 1) // 2, dtype=dtype)
    return base ** (-exponent_scale * pairs / dim)


# --------------------------------------------------------------------------------------------------
# sinusoidal_positional_encoding
# --------------------------------------------------------------------------------------------------

SINUSOIDAL_FORBIDDEN = (
    reference.sinusoidal_positional_encoding,
    reference._inverse_frequencies,
    "transformers.models.distilbert.modeling_distilbert.create_sinusoidal_embeddings",
    "transformers.models.distilbert.modeling_distilbert._create_sinusoidal_embeddings",
    "transformers.models.xlm.modeling_xlm.create_sinusoidal_embeddings",
    "transformers.models.flaubert.modeling_flaubert.create_sinusoidal_embeddings",
    "transformers.models.gptj.modeling_gptj.create_sinusoidal_positions",
    "transformers.models.marian.modeling_marian.MarianSinusoidalPositionalEmbedding.create_weight",
    "transformers.models.roformer.modeling_roformer.RoFormerSinusoidalPositionalEmbedding.create_weight",
)

#: Angles p * theta_i of positions up to 511 are rounded differently by equally correct float32
#: computations of theta_i (base ** -x, exp(-x log base), float64 then cast): up to about 1e-4.
SINUSOIDAL_TOLERANCES = {**DEFAULT_TOLERANCES, torch.float32: Tolerance(atol=2e-4, rtol=1e-4)}


def sinusoidal_positional_encoding_cases() -> list[Case]:
    """A few positions of width 4 with a given base, one position, many positions (up to 512), widths up
    to 4,096, an odd width; the sizes and the base are drawn.

    The first case keeps the angles small (under about 1,000 radians), where equally correct float32
    computations agree to 1e-4: a wrong encoding fails there with its hint.
    """
    g = generator_for("sinusoidal_positional_encoding")

    def even(low, high):
        return 2 * random_integer(g, low // 2, high // 2)

    def case(num_positions, d_model, note="", **kwargs):
        extra = "".join(f", {name}={value!r}" for name, value in kwargs.items())
        return Case(f"num_positions={num_positions}, d_model={d_model}{extra}{note}", (num_positions, d_model), kwargs)

    longest = random_integer(g, 400, 512)
    return [
        case(random_integer(g, 2, 8), 4, base=float(random_integer(g, 100, 5000))),
        case(1, even(2, 4096), ": a single position"),
        case(random_integer(g, 10, 100), even(4, 64)),
        case(random_integer(g, 30, 200), even(8, 64)),
        case(random_integer(g, 100, 300), even(32, 128)),
        case(longest, even(16, 64), f" (positions up to {longest - 1})"),
        case(random_integer(g, 2, 64), 2 * random_integer(g, 1, 31) + 1, " (odd: the last feature is a sine)"),
    ]


def _sinusoids(num_positions, d_model, base=10000.0, *, exponent_scale=2.0, first_position=0,
               swap=False, halves=False, multiply=False, dtype=torch.float32):
    """The encoding with one of the typical mistakes, chosen by the keyword arguments."""
    positions = torch.arange(first_position, first_position + num_positions, dtype=torch.float64)
    theta = _frequencies(d_model, base, torch.float64, exponent_scale)
    theta = 1.0 / theta if multiply else theta
    angles = positions[:, None] * theta  # (P, ceil(d/2))
    first, second = (torch.cos, torch.sin) if swap else (torch.sin, torch.cos)
    if halves:
        encoding = torch.cat([first(angles), second(angles)], dim=-1)[:, :d_model]
    else:
        encoding = torch.zeros(num_positions, d_model, dtype=torch.float64)
        encoding[:, 0::2] = first(angles)
        encoding[:, 1::2] = second(angles[:, : d_model // 2])
    return encoding.to(dtype)


def _sinusoids_odd_width_error(num_positions, d_model, base=10000.0):
    angles = torch.arange(num_positions, dtype=torch.float32)[:, None] * _frequencies(d_model, base)
    encoding = torch.zeros(num_positions, d_model)
    encoding[:, 0::2] = torch.sin(angles)
    encoding[:, 1::2] = torch.cos(angles)  # fails when d_model is odd
    return encoding


SINUSOIDAL_MISTAKES = (
    Mistake(lambda p, d, base=10000.0: _sinusoids(p, d, base, swap=True),
            "sine and cosine are swapped: PE[p, 2i] = sin(p theta_i) (even features) and "
            "PE[p, 2i + 1] = cos(p theta_i) (odd features)."),
    Mistake(lambda p, d, base=10000.0: _sinusoids(p, d, base, halves=True),
            "you put all the sines first and all the cosines after them; they are interleaved: sine in "
            "feature 2i and cosine in feature 2i + 1 (assign to encoding[:, 0::2] and encoding[:, 1::2])."),
    Mistake(lambda p, d, base=10000.0: _sinusoids(p, d, base, exponent_scale=1.0),
            "the exponent is 2i / d_model, where i is the index of the (sin, cos) pair: theta_i = "
            "base^(-2i / d_model), i.e. base ** (-torch.arange(0, d_model, 2) / d_model). Yours is half of it."),
    Mistake(lambda p, d, base=10000.0: _sinusoids(p, d, base, exponent_scale=4.0),
            "the exponent is 2i / d_model with i the pair index, so the exponents are 0, 2/d, 4/d, ... "
            "(torch.arange(0, d_model, 2) / d_model); you doubled them."),
    Mistake(lambda p, d, base=10000.0: _sinusoids(p, d, base, multiply=True),
            "the frequencies decrease along the features: the angle is p / base^(2i / d_model), "
            "not p * base^(2i / d_model)."),
    Mistake(lambda p, d, base=10000.0: _sinusoids(p, d, base, first_position=1),
            "positions start at 0: the first row is PE[0] = [0, 1, 0, 1, ...] (use torch.arange(num_positions))."),
    Mistake(lambda p, d, base=10000.0: _sinusoids(p, d),
            "use the `base` argument in theta_i = base^(-2i / d_model); 10000 is only its default."),
    Mistake(lambda p, d, base=10000.0: _sinusoids(p, d, base, dtype=torch.float64),
            "return a float32 tensor, like torch.zeros(num_positions, d_model)."),
    Mistake(lambda p, d, base=10000.0: _sinusoids(p, d, base).T,
            "the positions are the rows and the features the columns: return shape (num_positions, "
            "d_model), PE[p, i]; yours is transposed."),
    Mistake(_sinusoids_odd_width_error,
            "with an odd d_model there are (d_model + 1) // 2 sines but only d_model // 2 cosines: the "
            "last feature is a sine, so use angles[:, : d_model // 2] for the cosines."),
)


SINUSOIDAL_POSITIONAL_ENCODING = Exercise("sinusoidal_positional_encoding", reference.sinusoidal_positional_encoding,
                                          sinusoidal_positional_encoding_cases, mistakes=SINUSOIDAL_MISTAKES,
                                          forbidden=SINUSOIDAL_FORBIDDEN, tolerance=SINUSOIDAL_TOLERANCES,
                                          summary="""
                                          Compare ``sinusoidal_positional_encoding(num_positions, d_model,
                                          base=10000.0)`` with the reference.

                                          Cases: 1 to 512 positions, d_model from 2 to 4096, an odd d_model, a base from
                                          100 to 5000; the sizes and the base are drawn. Tolerance: float32 atol 2e-4,
                                          rtol 1e-4 (angles of positions up to 511 round differently in float32).
                                          Forbidden: the reference (and its frequency helper) and Hugging Face's
                                          sinusoid tables.
                                          """)


# --------------------------------------------------------------------------------------------------
# relative_position_bucket
# --------------------------------------------------------------------------------------------------

_T5_BUCKET_FUNCTIONS = (
    "t5.modeling_t5.T5Attention",
    "mt5.modeling_mt5.MT5Attention",
    "umt5.modeling_umt5.UMT5Attention",
    "longt5.modeling_longt5.LongT5Attention",
    "longt5.modeling_longt5.LongT5LocalAttention",
    "longt5.modeling_longt5.LongT5TransientGlobalAttention",
    "switch_transformers.modeling_switch_transformers.SwitchTransformersAttention",
    "pop2piano.modeling_pop2piano.Pop2PianoAttention",
    "udop.modeling_udop.UdopAttention",
    "pix2struct.modeling_pix2struct.Pix2StructTextAttention",
)

RELATIVE_POSITION_BUCKET_FORBIDDEN = (
    reference.relative_position_bucket,
    *(f"transformers.models.{name}._relative_position_bucket" for name in _T5_BUCKET_FUNCTIONS),
)


def relative_position_bucket_cases() -> list[Case]:
    """Relative positions near 0 (in the exact buckets), ranges beyond max_distance (up to about +-2500),
    key - query tables, both directions, other numbers of buckets and distances, an int32 input; the
    positions, the shapes, the numbers of buckets and the distances are drawn.

    The first cases stay within the exact buckets, where the mistakes of the logarithmic buckets (the
    scale, the rounding) cannot be mistaken for one another; the later ones reach the log buckets."""
    g = generator_for("relative_position_bucket")

    def around_zero(low, high):  # low .. high steps before and after 0
        return torch.arange(-random_integer(g, low, high), random_integer(g, low, high) + 1)

    def key_minus_query(n, m):
        return torch.arange(m)[None, :] - torch.arange(n)[:, None]  # (N, M)

    def span(positions):
        return f"{int(positions.min())} .. {int(positions.max())}"

    near = torch.randint(-7, 8, (random_integer(g, 10, 16),), generator=g)  # the exact buckets, both directions
    near[random_integer(g, 0, len(near) - 1)] = 0
    far, farthest = around_zero(200, 400), around_zero(1500, 2500)
    rows = random_integer(g, 2, 4)
    shifted = around_zero(100, 400)[None, :] + torch.arange(rows)[:, None]  # (rows, K)
    square = random_integer(g, 13, 600)  # distances of 12 and more: a wrong log scale and rounding differ there
    few, many = random_integer(g, 3, 8), random_integer(g, 20, 60)
    small_buckets, small_distance = 2 * random_integer(g, 3, 8), random_integer(g, 18, 60)
    table_buckets, table_distance = 2 * random_integer(g, 2, 6), random_integer(g, 30, 80)
    many_buckets, long_distance = 2 * random_integer(g, 24, 48), random_integer(g, 200, 400)
    offsets_shape = (random_integer(g, 2, 3), random_integer(g, 2, 4), random_integer(g, 5, 9))
    random_offsets = torch.randint(-1000, 1001, offsets_shape, generator=g, dtype=torch.int32)
    return [
        Case(f"{len(near)} relative positions between -7 and 7 (0 among them), bidirectional, 32 buckets, "
             "max_distance 128", (near,)),
        Case(f"the same {len(near)} relative positions, bidirectional=False", (near, False)),
        Case(f"key - query for {square} queries and {square} keys, shape ({square}, {square}), bidirectional",
             (key_minus_query(square, square),)),
        Case(f"relative_position = {span(far)}, bidirectional (beyond max_distance 128)", (far,)),
        Case(f"relative_position = {span(far)}, bidirectional=False", (far,), {"bidirectional": False}),
        Case(f"shape {tuple(shifted.shape)}, num_buckets={small_buckets}, max_distance={small_distance}, bidirectional",
             (shifted, True, small_buckets, small_distance)),
        Case(f"shape {tuple(shifted.shape)}, num_buckets={small_buckets}, max_distance={small_distance}, "
             "bidirectional=False", (shifted, False, small_buckets, small_distance)),
        Case(f"key - query for {few} queries and {many} keys, num_buckets={table_buckets}, "
             f"max_distance={table_distance}", (key_minus_query(few, many),),
             {"num_buckets": table_buckets, "max_distance": table_distance}),
        Case(f"relative_position = {span(farthest)}, num_buckets={many_buckets}, max_distance={long_distance}, "
             "bidirectional=False", (farthest,),
             {"bidirectional": False, "num_buckets": many_buckets, "max_distance": long_distance}),
        Case(f"random relative positions of shape {offsets_shape}, int32", (random_offsets,)),
    ]


def _buckets(relative_position, bidirectional=True, num_buckets=32, max_distance=128, *, sign=1,
             zero_in_upper_half=False, halve=True, absolute_when_causal=False, clamp=True,
             divide_by_exact=True, log_buckets_scale=None, rounding="floor", as_float=False):
    """T5's buckets with one of the typical mistakes, chosen by the keyword arguments."""
    relative_position = sign * relative_position.long()
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        if halve:
            num_buckets //= 2
        upper = relative_position >= 0 if zero_in_upper_half else relative_position > 0
        buckets += upper.long() * num_buckets
        distance = relative_position.abs()
    elif absolute_when_causal:
        distance = relative_position.abs()
    else:
        distance = (-relative_position).clamp(min=0)
    max_exact = num_buckets // 2
    scale = num_buckets - max_exact if log_buckets_scale is None else log_buckets_scale(num_buckets)
    safe = distance.clamp(min=max_exact).double()
    if divide_by_exact:
        log_ratio = torch.log(safe / max_exact) / math.log(max_distance / max_exact)
    else:
        log_ratio = torch.log(safe) / math.log(max_distance)
    scaled = log_ratio * scale
    scaled = scaled.round() if rounding == "round" else scaled.floor()
    large = max_exact + scaled.long()
    if clamp:
        large = large.clamp(max=num_buckets - 1)
    result = buckets + torch.where(distance < max_exact, distance, large)
    return result.float() if as_float else result


def _bucket_mistake(**variant):
    def wrong(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
        return _buckets(relative_position, bidirectional, num_buckets, max_distance, **variant)

    return wrong


RELATIVE_POSITION_BUCKET_MISTAKES = (
    Mistake(_bucket_mistake(sign=-1),
            "the sign of the relative position is flipped: relative_position = key index - query index, "
            "so a key after the query has relative_position > 0. Bidirectional: those keys use the upper "
            "half of the buckets; unidirectional: they all go to bucket 0, and a key d steps before the "
            "query has distance d = -relative_position."),
    Mistake(_bucket_mistake(zero_in_upper_half=True),
            "relative_position 0 (the query's own position) belongs to the lower half: add the offset "
            "num_buckets // 2 only where relative_position > 0, not >= 0."),
    Mistake(_bucket_mistake(halve=False),
            "when bidirectional, each direction gets half of the buckets: halve num_buckets first, and use "
            "the halved value both as the offset of the upper half and to split exact and log buckets."),
    Mistake(_bucket_mistake(absolute_when_causal=True),
            "unidirectional (a causal decoder): keys after the query never matter, so every relative "
            "position > 0 maps to bucket 0; the distance is max(-relative_position, 0), not |relative_position|."),
    Mistake(_bucket_mistake(clamp=False),
            "distances beyond max_distance must all share the last bucket: clamp the log buckets to at "
            "most num_buckets - 1 (of the half, when bidirectional); your buckets run past the table."),
    Mistake(_bucket_mistake(divide_by_exact=False),
            "the log buckets spread the distances from max_exact to max_distance: use "
            "log(distance / max_exact) / log(max_distance / max_exact), not log(distance) / log(max_distance)."),
    Mistake(_bucket_mistake(log_buckets_scale=lambda num_buckets: num_buckets),
            "only num_buckets - max_exact buckets are logarithmic (the first max_exact are exact): multiply "
            "the log ratio by num_buckets - max_exact."),
    Mistake(_bucket_mistake(rounding="round"),
            "round the log bucket down (truncate with .long() or floor), as T5 does, not to the nearest integer."),
    Mistake(_bucket_mistake(as_float=True),
            "return integer buckets (int64, e.g. with .long()): they index a table of embeddings."),
)


RELATIVE_POSITION_BUCKET = Exercise("relative_position_bucket", reference.relative_position_bucket,
                                    relative_position_bucket_cases, mistakes=RELATIVE_POSITION_BUCKET_MISTAKES,
                                    forbidden=RELATIVE_POSITION_BUCKET_FORBIDDEN,
                                    summary="""
                                    Compare ``relative_position_bucket(relative_position, bidirectional=True,
                                    num_buckets=32, max_distance=128)`` with the reference (identical to Hugging Face's
                                    T5).

                                    Cases: relative positions up to about +-2500 in shapes (K,), (N, M), (R, K), (B, H,
                                    K); both directions; 4 to 96 buckets; max_distance from 18 to 400; an int32 input
                                    (int64 out); the ranges, shapes, numbers of buckets and distances are drawn. Exact
                                    comparison. Forbidden: the reference and every ``_relative_position_bucket`` of
                                    Hugging Face.
                                    """)


# --------------------------------------------------------------------------------------------------
# alibi_slopes and alibi_bias
# --------------------------------------------------------------------------------------------------

_HUGGING_FACE_ALIBI = (
    "transformers.models.bloom.modeling_bloom._get_alibi_slopes",
    "transformers.models.bloom.modeling_bloom.build_alibi_tensor",
    "transformers.models.bloom.modeling_bloom.BloomModel.build_alibi_tensor",
    "transformers.models.falcon.modeling_falcon.build_alibi_tensor",
    "transformers.models.mpt.modeling_mpt.build_mpt_alibi_tensor",
    "transformers.models.mpt.modeling_mpt.MptModel.build_mpt_alibi_tensor",
)

ALIBI_SLOPES_FORBIDDEN = (reference.alibi_slopes, reference._geometric_slopes, *_HUGGING_FACE_ALIBI)


def _not_power_of_two(generator: torch.Generator, low: int, high: int) -> int:
    """A number of heads from ``low`` (at least 3) to ``high`` + 1 that is not a power of two."""
    heads = random_integer(generator, low, high)
    return heads + 1 if heads & (heads - 1) == 0 else heads


def alibi_slopes_cases() -> list[Case]:
    """A power of two (1 to 65,536 heads) and numbers of heads that are not (from 3 to 20,000, one with
    the device given); the numbers are drawn, from wide ranges, so that two runs rarely share a case."""
    g = generator_for("alibi_slopes")
    power = 2 ** random_integer(g, 0, 16)  # one of 17: the one case two runs may well share
    others = [_not_power_of_two(g, 3, 20000) for _ in range(6)]
    on_cpu = _not_power_of_two(g, 3, 20000)
    return [
        Case(f"num_heads={power} (a power of two)", (power,)),
        *(Case(f"num_heads={heads} (not a power of two)", (heads,)) for heads in others),
        Case(f"num_heads={on_cpu}, device='cpu'", (on_cpu,), {"device": "cpu"}),
    ]


def _geometric(count, *, first=1, sign=1.0):
    heads = torch.arange(first, first + count, dtype=torch.float64)
    return sign * 2.0 ** (-8.0 * heads / count)


def _slopes(num_heads, *, device=None, extra="every_other", first=1, sign=1.0, order="paper",
            dtype=torch.float32):
    """ALiBi slopes with one of the typical mistakes, chosen by the keyword arguments."""
    power = 2 ** math.floor(math.log2(num_heads))
    if extra == "geometric_all":
        slopes = _geometric(num_heads, first=first, sign=sign)
    else:
        slopes = _geometric(power, first=first, sign=sign)
        if power < num_heads:
            double = _geometric(2 * power, first=first, sign=sign)
            chosen = {"every_other": double[0::2], "odd": double[1::2], "first": double}[extra]
            slopes = torch.cat([slopes, chosen[: num_heads - power]])
    if order == "sorted":
        slopes = slopes.sort(descending=True).values
    return slopes.to(dtype=dtype, device=device)


def _slopes_mistake(**variant):
    def wrong(num_heads, *, device=None):
        return _slopes(num_heads, device=device, **variant)

    return wrong


_GEOMETRIC_ALL_HINT = (
    "2^(-8h/H) is the rule for H a power of two only. Otherwise take the slopes of the closest power "
    "of two C below H, then append the first H - C of every other slope of the 2C heads "
    "(slopes(2C)[0::2]), as in the paper's code."
)

ALIBI_SLOPES_MISTAKES = (
    Mistake(_slopes_mistake(sign=-1.0),
            "the slopes m_h are positive (1/2, 1/4, ... for 8 heads); the minus sign belongs to the bias "
            "-m_h (i - j)."),
    Mistake(_slopes_mistake(first=0), "heads are numbered h = 1 .. H: the first slope is 2^(-8/H), not 1."),
    Mistake(_slopes_mistake(extra="geometric_all"), _GEOMETRIC_ALL_HINT),
    Mistake(_slopes_mistake(extra="first"),
            "the extra H - C slopes are every other slope of the 2C heads, starting with the first "
            "(slopes(2C)[0::2][: H - C]), not the first H - C slopes of the 2C heads."),
    Mistake(_slopes_mistake(extra="odd"),
            "the extra slopes are slopes(2C)[0::2] (which fall between the C slopes); slopes(2C)[1::2] "
            "are the C slopes again."),
    Mistake(_slopes_mistake(order="sorted"),
            "keep the paper's order: the C slopes of the power of two first, then the extra ones (do not sort)."),
    Mistake(_slopes_mistake(dtype=torch.float64), "return a float32 tensor."),
)


ALIBI_SLOPES = Exercise("alibi_slopes", reference.alibi_slopes, alibi_slopes_cases, mistakes=ALIBI_SLOPES_MISTAKES,
                        forbidden=ALIBI_SLOPES_FORBIDDEN,
                        summary="""
                        Compare ``alibi_slopes(num_heads, *, device=None)`` with the reference.

                        Cases: a power of two (1 to 65,536 heads), and 7 numbers of heads that are not (3 to 20,000);
                        the numbers are drawn. Tolerance: the defaults (float32 atol 1e-5, rtol 1e-4). Forbidden: the
                        reference and the ALiBi code of Bloom, Falcon, MPT.
                        """)


ALIBI_BIAS_FORBIDDEN = (reference.alibi_bias, *_HUGGING_FACE_ALIBI)


def alibi_bias_cases() -> list[Case]:
    """Causal and not, m = n, m > n, m < n, powers of two and other numbers of heads, one query and one
    key, the device given; the numbers of heads, queries and keys are drawn."""
    g = generator_for("alibi_bias")

    def heads(low=2, high=64):
        return random_integer(g, low, high)

    def length(low=3, high=96):
        return random_integer(g, low, high)

    causal, symmetric = (heads(), length()), (heads(), length())
    wide_n = length(2, 64)
    wide = (2 ** random_integer(g, 1, 6), wide_n, wide_n + random_integer(g, 1, 64))
    tall_m = length(1, 64)
    tall = (heads(), tall_m + random_integer(g, 1, 64), tall_m)
    uneven = (_not_power_of_two(g, 3, 64), length(2, 96))
    uneven_symmetric = (heads(3, 64), length(2, 96))
    single = heads(1, 4096)
    on_cpu = (heads(1, 64), length(2, 96))
    return [
        Case("num_heads={}, n={} (causal)".format(*causal), causal),
        Case("num_heads={}, n={}, causal=False".format(*symmetric), symmetric, {"causal": False}),
        Case("num_heads={}, n={}, m={} (causal, more keys than queries)".format(*wide), wide),
        Case("num_heads={}, n={}, m={}, causal=False (fewer keys than queries)".format(*tall), (*tall, False)),
        Case("num_heads={}, n={} (causal; {} is not a power of two)".format(*uneven, uneven[0]), uneven),
        Case("num_heads={}, n={}, causal=False".format(*uneven_symmetric), uneven_symmetric, {"causal": False}),
        Case(f"num_heads={single}, n=1: one query, one key", (single, 1)),
        Case("num_heads={}, n={}, device='cpu'".format(*on_cpu), on_cpu, {"device": "cpu"}),
    ]


def _alibi(num_heads, n, m=None, causal=True, *, device=None, sign=-1.0, future="zero", distance="query_minus_key",
           square=False, heads_last=False, slopes=None):
    """An ALiBi bias with one of the typical mistakes, chosen by the keyword arguments."""
    m = n if m is None or square else m
    slopes = reference.alibi_slopes(num_heads, device=device) if slopes is None else slopes(num_heads)
    i = torch.arange(n, device=device)[:, None]
    j = torch.arange(m, device=device)[None, :]
    if distance == "key_index":  # Bloom's form: slope * j
        bias = slopes[:, None, None] * j.expand(n, m)
        return bias.permute(1, 2, 0) if heads_last else bias
    offset = (i - j) if distance == "query_minus_key" else (j - i)
    if causal and future == "zero":
        offset = offset.clamp(min=0)
    elif not causal or future == "absolute":
        offset = offset.abs()
    bias = sign * slopes[:, None, None] * offset  # (H, N, M)
    if causal and future == "-inf":
        bias = bias.masked_fill(j > i, float("-inf"))
    return bias.permute(1, 2, 0) if heads_last else bias


def _alibi_mistake(**variant):
    def wrong(num_heads, n, m=None, causal=True, *, device=None):
        return _alibi(num_heads, n, m, causal, device=device, **variant)

    return wrong


ALIBI_BIAS_MISTAKES = (
    Mistake(_alibi_mistake(sign=1.0),
            "the bias is a penalty: -m_h * (i - j) is negative for keys before the query (distant keys get "
            "less attention), not +m_h * (i - j)."),
    Mistake(_alibi_mistake(future="linear"),
            "causal: keys after the query (j > i) get 0. Your -m_h * (i - j) is positive there, which "
            "rewards the future; clamp the distance i - j at 0."),
    Mistake(_alibi_mistake(future="-inf"),
            "ALiBi itself masks nothing: give keys after the query a bias of 0 and let the causal mask "
            "remove them (-inf in a bias makes bias + mask NaN-prone and hides the mask's job)."),
    Mistake(_alibi_mistake(future="absolute"),
            "causal: keys after the query (j > i) get 0, not -m_h * |i - j|; the |i - j| form is for "
            "causal=False."),
    Mistake(_alibi_mistake(distance="key_minus_query"),
            "the distance of key j before query i is i - j: bias[h, i, j] = -m_h * (i - j) for j <= i "
            "(you used j - i)."),
    Mistake(_alibi_mistake(distance="key_index"),
            "Bloom adds m_h * j, which differs from -m_h * (i - j) by a constant in each row (the same "
            "softmax), but this exercise asks for bias[h, i, j] = -m_h * (i - j) itself."),
    Mistake(_alibi_mistake(square=True),
            "the bias has shape (H, n, m): use m keys when m is given (it defaults to n)."),
    Mistake(_alibi_mistake(heads_last=True), "the heads come first: the bias has shape (H, n, m), not (n, m, H)."),
    Mistake(_alibi_mistake(slopes=lambda h: _geometric(h).float()), _GEOMETRIC_ALL_HINT + " (Use your alibi_slopes.)"),
    Mistake(lambda num_heads, n, m=None, causal=True, *, device=None: _alibi(num_heads, n, m, True, device=device),
            "with causal=False the bias is symmetric: -m_h * |i - j| for keys on both sides of the query."),
)


ALIBI_BIAS = Exercise("alibi_bias", reference.alibi_bias, alibi_bias_cases, mistakes=ALIBI_BIAS_MISTAKES,
                      forbidden=ALIBI_BIAS_FORBIDDEN, dependencies={"alibi_slopes": reference.alibi_slopes},
                      summary="""
                      Compare ``alibi_bias(num_heads, n, m=None, causal=True, *, device=None)`` with the reference.

                      The student's function runs with the reference ``alibi_slopes`` in place of theirs, so a wrong
                      slope costs points only once. Cases: causal and not, m = n, m > n, m < n, 1 to 4,096 heads (powers
                      of two and not), n = 1; the sizes are drawn. Tolerance: the defaults. Forbidden: the reference and
                      the ALiBi code of Bloom, Falcon and MPT (the reference ``alibi_slopes`` is allowed).
                      """)


# --------------------------------------------------------------------------------------------------
# apply_rope
# --------------------------------------------------------------------------------------------------

APPLY_ROPE_FORBIDDEN = (
    reference.apply_rope,
    reference.rope_matrix,
    reference._rotate_pairs,
    reference._inverse_frequencies,
    "transformers.models.llama.modeling_llama.apply_rotary_pos_emb",
    "transformers.models.llama.modeling_llama.rotate_half",
    "transformers.models.llama.modeling_llama.LlamaRotaryEmbedding.forward",
    "transformers.models.gpt_neox.modeling_gpt_neox.apply_rotary_pos_emb",
    "transformers.models.gpt_neox.modeling_gpt_neox.rotate_half",
    "transformers.models.gptj.modeling_gptj.apply_rotary_pos_emb",
    "transformers.models.gptj.modeling_gptj.rotate_every_two",
    "transformers.models.roformer.modeling_roformer.RoFormerSelfAttention.apply_rotary_position_embeddings",
)

#: Angles m * theta_i of positions up to about 100 round differently in equally correct float32
#: computations: up to about 1e-4 in the output.
APPLY_ROPE_TOLERANCES = {**DEFAULT_TOLERANCES, torch.float32: Tolerance(atol=2e-4, rtol=1e-4)}


def apply_rope_cases() -> list[Case]:
    g = generator_for("apply_rope")
    return [
        Case("x of shape (3, 4), default positions 0, 1, 2", (random_normal(g, 3, 4),)),
        Case("x of shape (1, 2): one vector, one pair of features", (random_normal(g, 1, 2),)),
        Case("x of shape (2, 3, 10, 16) (batch, heads, N, D), default positions", (random_normal(g, 2, 3, 10, 16),)),
        Case("x of shape (2, 5, 8), positions [3, 0, 7, 100, 41]",
             (random_normal(g, 2, 5, 8), torch.tensor([3, 0, 7, 100, 41]))),
        Case("x of shape (2, 2, 6, 8), positions of shape (2, 1, 6): another offset per sequence",
             (random_normal(g, 2, 2, 6, 8), torch.stack([torch.arange(6), torch.arange(20, 26)])[:, None, :])),
        Case("x of shape (4, 12), float positions 0, 0.5, 1, 1.5 (position interpolation)",
             (random_normal(g, 4, 12), torch.arange(4) * 0.5)),
        Case("x of shape (3, 7, 32), base=500000.0", (random_normal(g, 3, 7, 32),), {"base": 500000.0}),
        Case("x of shape (2, 9, 16), float64, positions 0 .. 992 in steps of 124",
             (random_normal(g, 2, 9, 16, dtype=torch.float64), torch.arange(0, 1000, 124))),
        Case("x of shape (2, 64, 8), bfloat16, positions 1984 .. 2047",
             (random_normal(g, 2, 64, 8, dtype=torch.bfloat16), torch.arange(1984, 2048))),
    ]


def _rope(x, positions=None, base=10000.0, *, layout="interleaved", sign=1.0, first_position=0,
          exponent_scale=2.0, ignore_positions=False, compute_dtype="promote", position_axis=-2):
    """Rotary embeddings with one of the typical mistakes, chosen by the keyword arguments."""
    seq_len, head_dim = x.shape[position_axis], x.shape[-1]
    if positions is None or ignore_positions:
        positions = torch.arange(first_position, first_position + seq_len)
    dtype = {"promote": torch.promote_types(x.dtype, torch.float32), "input": x.dtype,
             "float32": torch.float32}[compute_dtype]
    theta = _frequencies(head_dim, base, dtype, exponent_scale)
    angles = sign * positions.to(dtype)[..., None] * theta  # (..., N, D/2)
    cos, sin = torch.cos(angles), torch.sin(angles)
    x = x.to(dtype)
    if layout == "rotate_half":
        first, second = x[..., : head_dim // 2], x[..., head_dim // 2 :]
    else:
        first, second = x[..., 0::2], x[..., 1::2]
    rotated_first, rotated_second = first * cos - second * sin, first * sin + second * cos
    if layout == "interleaved":
        rotated = torch.stack([rotated_first, rotated_second], dim=-1).flatten(-2)
    else:  # rotate_half, or interleaved pairs written back as two halves
        rotated = torch.cat([rotated_first, rotated_second], dim=-1)
    return rotated  # in the computation's dtype


def _rope_mistake(keep_float32=False, **variant):
    def wrong(x, positions=None, base=10000.0):
        rotated = _rope(x, positions, base, **variant)
        return rotated if keep_float32 else rotated.to(x.dtype)

    return wrong


APPLY_ROPE_MISTAKES = (
    Mistake(_rope_mistake(layout="rotate_half"),
            "you rotated the pairs (i, i + D/2), the rotate-half layout of GPT-NeoX and Llama; this exercise "
            "uses RoFormer's interleaved pairs (2i, 2i + 1): x[..., 0::2] and x[..., 1::2]."),
    Mistake(_rope_mistake(layout="halves"),
            "put each rotated pair back in place: features 2i and 2i + 1 of the output, e.g. "
            "torch.stack([even, odd], dim=-1).flatten(-2), not torch.cat([even, odd], dim=-1)."),
    Mistake(_rope_mistake(sign=-1.0),
            "you rotated by -m theta_i: R_m maps (x_2i, x_2i+1) to (x_2i cos - x_2i+1 sin, "
            "x_2i sin + x_2i+1 cos), with the angle m theta_i."),
    Mistake(_rope_mistake(position_axis=0),
            "the positions run along the second-to-last axis of x (..., N, D): N = x.shape[-2], not "
            "x.shape[0], which is the batch when x has batch or head axes."),
    Mistake(_rope_mistake(first_position=1),
            "the default positions are 0 .. N - 1 (torch.arange(N)): the first vector is not rotated."),
    Mistake(_rope_mistake(ignore_positions=True),
            "use the `positions` argument when it is given; only its default is 0 .. N - 1."),
    Mistake(_rope_mistake(exponent_scale=1.0),
            "theta_i = base^(-2i / D) with i the index of the pair: base ** (-torch.arange(0, D, 2) / D). "
            "Your exponent is half of it."),
    Mistake(_rope_mistake(exponent_scale=4.0),
            "theta_i = base^(-2i / D) with i the index of the pair (exponents 0, 2/D, 4/D, ...); you doubled it."),
    Mistake(lambda x, positions=None, base=10000.0: _rope_mistake()(x, positions),
            "use the `base` argument in theta_i = base^(-2i / D); 10000 is only its default."),
    Mistake(_rope_mistake(keep_float32=True),
            "return a tensor of x's dtype (compute in float32 if you like, then .to(x.dtype))."),
    Mistake(_rope_mistake(compute_dtype="input"),
            "compute the angles in float32 (at least) even for half-precision x: in bfloat16, m * theta_i "
            "for positions near 2000 is off by whole radians."),
    Mistake(_rope_mistake(compute_dtype="float32"),
            "for float64 x compute the angles in float64 too: float32 angles of large positions are "
            "rounded far beyond float64's precision."),
)


APPLY_ROPE = Exercise("apply_rope", reference.apply_rope, apply_rope_cases, mistakes=APPLY_ROPE_MISTAKES,
                      forbidden=APPLY_ROPE_FORBIDDEN, tolerance=APPLY_ROPE_TOLERANCES,
                      summary="""
                      Compare ``apply_rope(x, positions=None, base=10000.0)`` with the reference (interleaved pairs).

                      Cases: x of 2 to 4 dimensions, D from 2 to 32, default, integer, broadcast (B, 1, N) and float
                      positions, base 500000, float64 with positions up to 992, bfloat16 with positions near 2000.
                      Tolerance: float32 atol 2e-4, rtol 1e-4; otherwise the defaults (bfloat16 2e-2). Forbidden: the
                      reference (and its helpers ``rope_matrix``, ``_rotate_pairs``) and the rotary functions of Hugging
                      Face's Llama, GPT-NeoX, GPT-J and RoFormer.
                      """)


#: The chapter whose exercises this module checks, and their records, in the order of the chapter.
CHAPTER = "03_positional"


__getattr__ = check_functions(globals())  # check_<name> for each record above
