"""Checks of chapter 01 (attention), called by the hidden tests of ``chapters/01_attention``.

Each ``check_<name>(student_fn)`` compares the student's function with ``bertlab.attention.<name>``
on inputs drawn from a generator seeded by the exercise's name, lists the typical mistakes it can
recognise, and the built-ins the student's code may not call. ``forbid=False`` lifts that rule (the
tests use it to run a check on the reference itself).
"""

import math

import torch
import torch.nn.functional as F

from autograder.checks.framework import (
    Case,
    Exercise,
    Mistake,
    Symptom,
    check_functions,
    generator_for,
    normalized_along_another_axis,
    random_integer,
    random_normal,
)
from autograder.checks.shared_attention import ATTENTION_FORBIDDEN, ATTENTION_TOLERANCES
from bertlab import attention as reference

NEG_INF = float("-inf")


# --------------------------------------------------------------------------------------------------
# softmax
# --------------------------------------------------------------------------------------------------

SOFTMAX_FORBIDDEN = (
    reference.softmax,
    torch.softmax,
    torch._softmax,
    torch._safe_softmax,
    torch.log_softmax,
    torch.Tensor.softmax,
    torch.Tensor.log_softmax,
    F.softmax,
    F.log_softmax,
    F.gumbel_softmax,
    torch.special.softmax,
    torch.special.log_softmax,
    torch.ops.aten._softmax,
    torch.ops.aten._log_softmax,
    torch.ops.aten._safe_softmax,
)


def softmax_cases() -> list[Case]:
    g = generator_for("softmax")
    masked = random_normal(g, 3, 6, scale=3.0)
    masked[0] = NEG_INF  # a fully masked row
    masked[1, ::2] = NEG_INF
    huge = random_normal(g, 2, 3, 8, scale=3000.0)
    huge[1] -= 6000.0  # far below the rest: a global maximum underflows this row
    return [
        Case("x of shape (5,), float32", (random_normal(g, 5, scale=3.0),)),
        Case("x of shape (3, 7), float64", (random_normal(g, 3, 7, scale=3.0, dtype=torch.float64),)),
        Case("x of shape (2, 4, 6), float32, dim=1", (random_normal(g, 2, 4, 6, scale=3.0),), {"dim": 1}),
        Case("x of shape (4, 5), float32, dim=0", (random_normal(g, 4, 5, scale=3.0),), {"dim": 0}),
        Case("x of shape (2, 3, 5), float32, dim=-2", (random_normal(g, 2, 3, 5, scale=3.0),), {"dim": -2}),
        Case("x of shape (2, 3, 8), float32, logits of size about 1e4", (huge,)),
        Case("x of shape (3, 6) with -inf entries; row 0 is entirely -inf (fully masked)", (masked,)),
        Case("x of shape (4, 1): one element along dim", (random_normal(g, 4, 1),)),
        Case("x of shape (4, 9), bfloat16", (random_normal(g, 4, 9, scale=3.0, dtype=torch.bfloat16),)),
    ]


def _softmax_without_masked_rows(x, dim=-1):
    shifted = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return shifted / shifted.sum(dim=dim, keepdim=True)


def _softmax_without_max(x, dim=-1):
    exponentials = torch.exp(x)
    return exponentials / exponentials.sum(dim=dim, keepdim=True)


def _softmax_global_max(x, dim=-1):
    exponentials = torch.exp(x - x.max())
    return exponentials / exponentials.sum(dim=dim, keepdim=True)


def _softmax_last_axis(x, dim=-1):
    return reference.softmax(x, dim=-1)


def _softmax_first_axis(x, dim=-1):
    return reference.softmax(x, dim=0)


def _softmax_max_along_first_axis(x, dim=-1):
    row_max = x.amax(dim=0, keepdim=True)
    exponentials = torch.exp(x - row_max.masked_fill(row_max == NEG_INF, 0.0))
    return exponentials / exponentials.sum(dim=dim, keepdim=True)


def _softmax_unnormalized(x, dim=-1):
    row_max = x.amax(dim=dim, keepdim=True)
    return torch.exp(x - row_max.masked_fill(row_max == NEG_INF, 0.0))


def _softmax_whole_tensor(x, dim=-1):
    exponentials = torch.exp(x - x.max())
    return exponentials / exponentials.sum()


SOFTMAX_MISTAKES = (
    Mistake(
        _softmax_without_masked_rows,
        "a row that is entirely -inf (every key masked) must give zeros, not NaN: its maximum is -inf "
        "and -inf - (-inf) is NaN. Replace a -inf maximum by 0 before subtracting it, and do not "
        "divide by a zero sum.",
    ),
    Mistake(
        _softmax_without_max,
        "exp overflows to inf for large logits (inf / inf = NaN). Subtract the maximum along `dim` "
        "before exp: softmax(x - c) = softmax(x) for any constant c.",
    ),
    Mistake(
        _softmax_global_max,
        "subtract the maximum along `dim` (x.amax(dim=dim, keepdim=True)), not the maximum of the "
        "whole tensor: a row far below the global maximum underflows to 0 / 0.",
    ),
    Mistake(
        _softmax_last_axis,
        "your values sum to 1 along the last axis, but they must sum to 1 along `dim`: pass `dim` "
        "to the maximum and to the sum.",
    ),
    Mistake(
        _softmax_first_axis,
        "your values sum to 1 along axis 0, but they must sum to 1 along `dim`.",
    ),
    Mistake(
        _softmax_max_along_first_axis,
        "subtract the maximum along `dim` (x.amax(dim=dim, keepdim=True)), not along axis 0: the "
        "number subtracted must be the same for every element of a slice along `dim`.",
    ),
    Symptom(
        lambda probabilities, case: normalized_along_another_axis(probabilities, case.kwargs.get("dim", -1)),
        "your values sum to 1 along another axis than `dim`: take the maximum and the sum along `dim` "
        "(x.amax(dim=dim, keepdim=True), .sum(dim=dim, keepdim=True)).",
    ),
    Mistake(
        _softmax_unnormalized,
        "divide the exponentials by their sum along `dim` (keepdim=True) so that they sum to 1.",
    ),
    Mistake(
        _softmax_whole_tensor,
        "normalize each slice along `dim` separately: divide by the sum along `dim` (keepdim=True), "
        "not by the sum of the whole tensor.",
    ),
)


SOFTMAX = Exercise("softmax", reference.softmax, softmax_cases, mistakes=SOFTMAX_MISTAKES, forbidden=SOFTMAX_FORBIDDEN,
                   summary="""
                   Compare ``softmax(x, dim=-1)`` with :func:`bertlab.attention.softmax`.

                   Cases: 1 to 3 dimensions, dim = -1, 0, 1, -2; float32, float64, bfloat16; logits of 1e4; rows with
                   -inf entries and a fully -inf row (zeros expected); a single element along ``dim``. Tolerance: the
                   framework's defaults (float32: atol 1e-5, rtol 1e-4; bfloat16: 2e-2). Forbidden: every softmax and
                   log-softmax built into PyTorch, and the reference.
                   """)


# --------------------------------------------------------------------------------------------------
# additive_score
# --------------------------------------------------------------------------------------------------

ADDITIVE_SCORE_FORBIDDEN = (reference.additive_score,)


def additive_score_cases() -> list[Case]:
    g = generator_for("additive_score")

    def case(description, q_shape, k_shape, hidden, dtype=torch.float32, scale=1.0):
        q = random_normal(g, *q_shape, scale=scale, dtype=dtype)
        k = random_normal(g, *k_shape, scale=scale, dtype=dtype)
        w_q = random_normal(g, hidden, q_shape[-1], scale=hidden**-0.5, dtype=dtype)
        w_k = random_normal(g, hidden, k_shape[-1], scale=hidden**-0.5, dtype=dtype)
        v = random_normal(g, hidden, dtype=dtype)
        return Case(description, (q, k, w_q, w_k, v))

    return [
        case("q (4, 4), k (4, 4), w_q and w_k (4, 4), v (4,), float32", (4, 4), (4, 4), 4),
        case("q (3, 5), k (6, 2), w_q (7, 5), w_k (7, 2), v (7,), float32", (3, 5), (6, 2), 7),
        case("q (2, 3, 4), k (2, 5, 4), hidden size A = 6, float32", (2, 3, 4), (2, 5, 4), 6),
        case("q (1, 5), k (1, 3): one query and one key, A = 3, float32", (1, 5), (1, 3), 3),
        case("q (2, 2, 3, 5), k (2, 2, 6, 5), A = 8, float64", (2, 2, 3, 5), (2, 2, 6, 5), 8, torch.float64),
        case("q (3, 4), k (5, 4), A = 4, large inputs (tanh saturates)", (3, 4), (5, 4), 4, scale=30.0),
    ]


def _additive_without_tanh(q, k, w_q, w_k, v):
    return ((q @ w_q.T).unsqueeze(-2) + (k @ w_k.T).unsqueeze(-3)) @ v


def _additive_tanh_each(q, k, w_q, w_k, v):
    return (torch.tanh(q @ w_q.T).unsqueeze(-2) + torch.tanh(k @ w_k.T).unsqueeze(-3)) @ v


def _additive_untransposed_weights(q, k, w_q, w_k, v):
    return torch.tanh((q @ w_q).unsqueeze(-2) + (k @ w_k).unsqueeze(-3)) @ v


def _additive_transposed_scores(q, k, w_q, w_k, v):
    return reference.additive_score(q, k, w_q, w_k, v).transpose(-2, -1)


def _additive_without_v(q, k, w_q, w_k, v):
    return torch.tanh((q @ w_q.T).unsqueeze(-2) + (k @ w_k.T).unsqueeze(-3)).sum(-1)


ADDITIVE_SCORE_MISTAKES = (
    Mistake(_additive_without_tanh, "apply tanh to W_q q_i + W_k k_j before the product with v."),
    Mistake(
        _additive_tanh_each,
        "add the two projections first, then apply tanh: v^T tanh(W_q q_i + W_k k_j), not "
        "v^T (tanh(W_q q_i) + tanh(W_k k_j)).",
    ),
    Mistake(
        _additive_untransposed_weights,
        "w_q has shape (A, Dq), so W_q q_i for every row of q is q @ w_q.T (and k @ w_k.T), not q @ w_q.",
    ),
    Mistake(
        _additive_transposed_scores,
        "scores[..., i, j] compares query i with key j: the result has shape (..., N, M), not (..., M, N).",
    ),
    Mistake(_additive_without_v, "take the dot product of tanh(...) with v (the last step, `@ v`), not a plain sum."),
)


ADDITIVE_SCORE = Exercise("additive_score", reference.additive_score, additive_score_cases,
                          mistakes=ADDITIVE_SCORE_MISTAKES, forbidden=ADDITIVE_SCORE_FORBIDDEN,
                          summary="""
                          Compare ``additive_score(q, k, w_q, w_k, v)`` with :func:`bertlab.attention.additive_score`.

                          Cases: with and without batch dimensions, Dq != Dk, square weights, N = M = 1, float64,
                          saturated tanh. Tolerance: the framework's defaults. Forbidden: the reference.
                          """)


# --------------------------------------------------------------------------------------------------
# scaled_dot_product_attention
# --------------------------------------------------------------------------------------------------


def scaled_dot_product_attention_cases() -> list[Case]:
    g = generator_for("scaled_dot_product_attention")

    def qkv(q_shape, k_shape, value_size, dtype=torch.float32, scale=1.0):
        q = random_normal(g, *q_shape, scale=scale, dtype=dtype)
        k = random_normal(g, *k_shape, scale=scale, dtype=dtype)
        v = random_normal(g, *k_shape[:-1], value_size, dtype=dtype)
        return q, k, v

    random_mask = torch.rand((2, 1, 5, 6), generator=g) < 0.7
    random_mask[..., 0] = True  # every query sees at least one key here
    lengths = torch.tensor([5, 3])
    padding = (torch.arange(5) < lengths[:, None])[:, None, None, :]  # (2, 1, 1, 5)
    fully_masked = torch.rand((3, 4), generator=g) < 0.6
    fully_masked[0, 1] = True
    fully_masked[1] = False  # query 1 may attend to nothing
    fully_masked[2, 3] = True
    return [
        Case("q (4, 8), k (6, 8), v (6, 5), no mask, float32", qkv((4, 8), (6, 8), 5)),
        Case("q (2, 3, 5, 16), k (2, 3, 7, 16), v (2, 3, 7, 4), no mask, float64",
             qkv((2, 3, 5, 16), (2, 3, 7, 16), 4, torch.float64)),
        Case("q (2, 2, 5, 8), k (2, 2, 6, 8), v (2, 2, 6, 3), random mask (2, 1, 5, 6)",
             qkv((2, 2, 5, 8), (2, 2, 6, 8), 3), {"mask": random_mask}),
        Case("q (6, 4), k (6, 4), v (6, 4), causal mask (6, 6)", qkv((6, 4), (6, 4), 4),
             {"mask": reference.causal_mask(6)}),
        Case("q (2, 2, 3, 6), k (2, 2, 5, 6), v (2, 2, 5, 6), padding mask (2, 1, 1, 5), lengths 5 and 3",
             qkv((2, 2, 3, 6), (2, 2, 5, 6), 6), {"mask": padding}),
        Case("q (3, 8), k (4, 8), v (4, 3), mask (3, 4) in which query 1 may attend to no key",
             qkv((3, 8), (4, 8), 3), {"mask": fully_masked}),
        Case("q (1, 1, 8), k (1, 1, 8), v (1, 1, 8): one query, one key", qkv((1, 1, 8), (1, 1, 8), 8)),
        Case("q (3, 8), k (5, 8), v (5, 2), float32, scores of about 300 (large logits)",
             qkv((3, 8), (5, 8), 2, scale=12.0)),
        Case("q (2, 4, 8), k (2, 6, 8), v (2, 6, 8), bfloat16", qkv((2, 4, 8), (2, 6, 8), 8, torch.bfloat16)),
    ]


def _attention_variant(scale="sqrt_d", dim=-1, invert_mask=False, masked_value=NEG_INF,
                       mask_after_softmax=False, swap_outputs=False, softmax=reference.softmax,
                       transposed=lambda k: k.transpose(-2, -1)):
    """A wrong scaled dot-product attention: one of the typical mistakes, chosen by the arguments.

    It normalizes with ``softmax``: the reference by default, as the check runs the student's
    function (zeros for a query whose keys are all masked), or ``torch.softmax`` (NaN there).
    """

    def attention(q, k, v, mask=None):
        scores = q @ transposed(k)
        divisor = {"sqrt_d": math.sqrt(q.shape[-1]), "none": 1.0, "d": q.shape[-1],
                   "sqrt_m": math.sqrt(k.shape[-2])}[scale]
        scores = scores / divisor
        if mask is not None and invert_mask:
            mask = ~mask
        if mask is not None and not mask_after_softmax:
            scores = scores.masked_fill(~mask, masked_value)
        weights = softmax(scores, dim=dim)
        if mask is not None and mask_after_softmax:
            weights = weights * mask
        output = weights @ v
        return (weights, output) if swap_outputs else (output, weights)

    return attention


ATTENTION_MISTAKES = (
    Mistake(_attention_variant(scale="none"),
            "divide the scores by sqrt(d_k), where d_k = q.shape[-1] is the size of a query."),
    Mistake(_attention_variant(scale="d"), "divide the scores by sqrt(d_k), not by d_k."),
    Mistake(_attention_variant(scale="sqrt_m"),
            "d_k is the size of each query and key vector (q.shape[-1]), not the number of keys."),
    Mistake(_attention_variant(dim=-2),
            "normalize over the keys (the last axis, dim=-1): each query's weights sum to 1."),
    Mistake(_attention_variant(transposed=lambda k: k.transpose(0, 1)),
            "transpose the last two axes of k, k.transpose(-2, -1): (..., M, D) -> (..., D, M), whatever "
            "the number of batch axes; transpose(0, 1) is right only for a 2-D k."),
    Mistake(_attention_variant(transposed=lambda k: k.permute(*reversed(range(k.dim())))),
            "transpose the last two axes of k, k.transpose(-2, -1): k.T reverses every axis of a "
            "batched k."),
    Symptom(lambda outputs, case: normalized_along_another_axis(outputs[1], -1),
            "your weights sum to 1 along another axis than the keys: normalize over the keys (the last "
            "axis, dim=-1), so that each query's weights sum to 1."),
    Mistake(_attention_variant(invert_mask=True),
            "True in the mask means 'may attend': set the scores to -inf where the mask is False."),
    Mistake(_attention_variant(mask_after_softmax=True),
            "apply the mask to the scores before the softmax (set masked scores to -inf), so the "
            "remaining weights still sum to 1."),
    Mistake(_attention_variant(softmax=torch.softmax),
            "a query whose keys are all masked must get zero weights and a zero output, not NaN: "
            "torch.softmax of a row of -inf is NaN. Use your `softmax` (which returns zeros there)."),
    Mistake(_attention_variant(masked_value=-1e9),
            "a query whose keys are all masked must get zero weights and a zero output: filling "
            "with a large negative number spreads its weight uniformly instead. Fill with -inf and "
            "use your `softmax`."),
    Mistake(_attention_variant(swap_outputs=True), "return (output, weights), in this order."),
)


SCALED_DOT_PRODUCT_ATTENTION = Exercise("scaled_dot_product_attention", reference.scaled_dot_product_attention,
                                        scaled_dot_product_attention_cases, mistakes=ATTENTION_MISTAKES,
                                        forbidden=ATTENTION_FORBIDDEN, dependencies={"softmax": reference.softmax},
                                        tolerance=ATTENTION_TOLERANCES, output_names=("output", "weights"),
                                        summary="""
                                        Compare ``scaled_dot_product_attention(q, k, v, mask=None)`` with the reference.

                                        The student's function runs with the reference ``softmax`` in place of theirs,
                                        so a wrong softmax costs points only once. Cases: with and without batch and
                                        head dimensions, N != M, Dv != D, random, causal and padding masks, a fully
                                        masked query, N = M = 1, large logits, float64 and bfloat16. Tolerance: float32
                                        atol 2e-5, rtol 2e-4; otherwise the defaults. Forbidden:
                                        ``F.scaled_dot_product_attention`` and every other built-in attention, and the
                                        reference; ``torch.softmax`` is allowed.
                                        """)


# --------------------------------------------------------------------------------------------------
# causal_mask and padding_mask
# --------------------------------------------------------------------------------------------------

CAUSAL_MASK_FORBIDDEN = (
    reference.causal_mask,
    torch.nn.Transformer.generate_square_subsequent_mask,
    "bertlab.efficient.sliding_window_mask",
    "transformers.masking_utils.causal_mask_function",
)


def causal_mask_cases() -> list[Case]:
    """Square masks (m left out, and m = n), more and fewer keys than queries, one query, the device given.

    The sizes are drawn, up to 1,000 (a mask of a million booleans is still small), so that two runs
    rarely meet the same case; the single query comes after the case with more keys, where a mask
    aligned bottom-right (which is all True for one query) is told apart from the upper triangle.
    """
    g = generator_for("causal_mask")
    n, square = random_integer(g, 2, 1000), random_integer(g, 2, 1000)
    wide_n = random_integer(g, 2, 100)
    wide_m = wide_n + random_integer(g, 1, 100)
    single_m = random_integer(g, 2, 1000)
    tall_m = random_integer(g, 1, 100)
    tall_n = tall_m + random_integer(g, 1, 100)
    on_cpu = random_integer(g, 2, 1000)
    return [
        Case(f"n={n}", (n,)),
        Case(f"n={square}, m={square}", (square,), {"m": square}),
        Case(f"n={wide_n}, m={wide_m} (more keys than queries)", (wide_n,), {"m": wide_m}),
        Case(f"n=1, m={single_m}: a single query", (1,), {"m": single_m}),
        Case(f"n={tall_n}, m={tall_m} (fewer keys than queries)", (tall_n, tall_m)),
        Case(f"n={on_cpu}, device='cpu'", (on_cpu,), {"device": "cpu"}),
    ]


def _causal_upper(n, m=None, device=None):
    return torch.ones(n, n if m is None else m, dtype=torch.bool, device=device).triu()


def _causal_future(n, m=None, device=None):
    return torch.ones(n, n if m is None else m, dtype=torch.bool, device=device).triu(diagonal=1)


def _causal_strict(n, m=None, device=None):
    return torch.ones(n, n if m is None else m, dtype=torch.bool, device=device).tril(diagonal=-1)


def _causal_bottom_right(n, m=None, device=None):
    m = n if m is None else m
    return torch.ones(n, m, dtype=torch.bool, device=device).tril(diagonal=m - n)


def _causal_float(n, m=None, device=None):
    return torch.ones(n, n if m is None else m, device=device).tril()


def _causal_additive(n, m=None, device=None):
    allowed = torch.ones(n, n if m is None else m, dtype=torch.bool, device=device).tril()
    return torch.zeros(allowed.shape, device=device).masked_fill(~allowed, NEG_INF)


def _causal_square(n, m=None, device=None):
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


CAUSAL_MASK_MISTAKES = (
    Mistake(_causal_upper,
            "True marks the keys a query may see: itself and the past (j <= i), the lower triangle; "
            "your mask lets each position see the future."),
    Mistake(_causal_future,
            "your mask is True above the diagonal (j > i): the future keys, which a query may NOT see "
            "(the convention of nn.Transformer's masks). Here True means 'may attend': the lower "
            "triangle with the diagonal, j <= i (torch.tril)."),
    Mistake(_causal_strict, "a position may attend to itself: keep the diagonal (j <= i, not j < i)."),
    Mistake(_causal_bottom_right,
            "align the mask top-left: query i sees keys 0..i whatever m is, like is_causal=True in "
            "F.scaled_dot_product_attention (torch.tril with the default diagonal)."),
    Mistake(_causal_float, "return a bool tensor (dtype=torch.bool): True = may attend."),
    Mistake(_causal_additive,
            "return a boolean mask (True = may attend), not an additive mask of 0 and -inf."),
    Mistake(_causal_square, "the mask has shape (n, m): use m when it is given (it defaults to n)."),
)


CAUSAL_MASK = Exercise("causal_mask", reference.causal_mask, causal_mask_cases, mistakes=CAUSAL_MASK_MISTAKES,
                       forbidden=CAUSAL_MASK_FORBIDDEN,
                       summary="""
                       Compare ``causal_mask(n, m=None, device=None)`` with :func:`bertlab.attention.causal_mask`.

                       Cases: n from 2 to 1,000 with m left out and m = n, m > n, m < n, a single query (n = 1), the
                       device given; the sizes are drawn. Exact comparison (bool). Forbidden: the reference and
                       ``nn.Transformer.generate_square_subsequent_mask``.
                       """)


PADDING_MASK_FORBIDDEN = (
    reference.padding_mask,
    "transformers.modeling_attn_mask_utils._prepare_4d_attention_mask",
    "transformers.modeling_attn_mask_utils.AttentionMaskConverter._expand_mask",
)


def padding_mask_cases() -> list[Case]:
    """Masks of int64, int32, bool and float32 of 2 to 6 sequences of random lengths (with a full and a
    padded one, one of one token, all padded, an empty one) and a batch of one-position sequences; the
    batch sizes, widths and lengths are drawn, and a mask holds at most 24 values, so that a failure
    shows it."""
    g = generator_for("padding_mask")

    def batch_and_width():
        batch = random_integer(g, 2, 6)
        return batch, random_integer(g, 4, 24 // batch)

    def lengths(batch, shortest, longest, **fixed):
        """``batch`` lengths from ``shortest`` to ``longest``, but those of ``fixed``, each given to a
        sequence picked at random."""
        drawn = [random_integer(g, shortest, longest) for _ in range(batch)]
        for position, length in zip(torch.randperm(batch, generator=g).tolist(), fixed.values()):
            drawn[position] = length
        return drawn

    def case(description, lengths, width, dtype):
        attention_mask = (torch.arange(width) < torch.tensor(lengths)[:, None]).to(dtype)
        return Case(f"attention_mask {tuple(attention_mask.shape)}, {description}, lengths {lengths}",
                    (attention_mask,))

    (full_batch, full_width), (varied_batch, varied_width), (single_batch, single_width) = (
        batch_and_width() for _ in range(3))
    (padded_batch, padded_width), (empty_batch, empty_width) = (batch_and_width() for _ in range(2))
    ones = [random_integer(g, 0, 1) for _ in range(random_integer(g, 3, 24))]
    return [
        case("int64, a full and a padded sequence", lengths(full_batch, 1, full_width - 1, full=full_width),
             full_width, torch.int64),
        case("int32", lengths(varied_batch, 1, varied_width), varied_width, torch.int32),
        case("bool, a sequence of one token", lengths(single_batch, 1, single_width, one=1), single_width, torch.bool),
        case("float32, every sequence padded", lengths(padded_batch, 1, padded_width - 1), padded_width, torch.float32),
        case("int64: sequences of one position", ones, 1, torch.int64),
        case("int64, with an empty sequence", lengths(empty_batch, 1, empty_width, empty=0), empty_width, torch.int64),
    ]


def _padding_no_axes(attention_mask):
    return attention_mask.bool()


def _padding_query_axis(attention_mask):
    return attention_mask.bool()[:, None, :, None]


def _padding_last_axes(attention_mask):
    return attention_mask.bool()[:, :, None, None]


def _padding_inverted(attention_mask):
    return (attention_mask == 0)[:, None, None, :]


def _padding_not_bool(attention_mask):
    return attention_mask[:, None, None, :]


def _padding_one_axis(attention_mask):
    return attention_mask.bool()[:, None, :]


PADDING_MASK_MISTAKES = (
    Mistake(_padding_no_axes,
            "add two axes for the heads and the queries: (B, M) -> (B, 1, 1, M), which broadcasts "
            "against scores of shape (B, H, N, M)."),
    Mistake(_padding_one_axis, "add two axes, not one: the result is (B, 1, 1, M)."),
    Mistake(_padding_query_axis,
            "the mask must vary along the keys (the last axis): (B, 1, 1, M), not (B, 1, M, 1)."),
    Mistake(_padding_last_axes, "the keys go on the last axis: (B, 1, 1, M), not (B, M, 1, 1)."),
    Mistake(_padding_inverted,
            "1 marks a real token, which may be attended: the mask is True where attention_mask is 1."),
    Mistake(_padding_not_bool, "convert to bool (True = may attend), whatever the input's dtype."),
)


PADDING_MASK = Exercise("padding_mask", reference.padding_mask, padding_mask_cases, mistakes=PADDING_MASK_MISTAKES,
                        forbidden=PADDING_MASK_FORBIDDEN,
                        summary="""
                        Compare ``padding_mask(attention_mask)`` with :func:`bertlab.attention.padding_mask`.

                        Cases: int64, int32, bool and float inputs; random batch sizes, widths and lengths; a sequence
                        of one token, a batch of one-position sequences, an empty sequence. Exact comparison (bool).
                        Forbidden: the reference and Hugging Face's mask expansion.
                        """)


#: The chapter whose exercises this module checks, and their records, in the order of the chapter.
CHAPTER = "01_attention"


__getattr__ = check_functions(globals())  # check_<name> for each record above
