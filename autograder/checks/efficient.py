"""Checks of chapter 05 (efficient attention), called by the hidden tests of ``chapters/05_efficient_attention``.

Each ``check_<name>(student_fn)`` compares the student's function with ``bertlab`` on inputs drawn
from a generator seeded by the exercise's name, lists the typical mistakes it can recognise, and the
built-ins the student's code may not call. ``flash_attention`` is compared with PyTorch's
``F.scaled_dot_product_attention`` (an independent implementation), and the checks of
``flash_attention`` and ``linear_attention`` also watch every tensor the student's code allocates on
a long sequence: neither may build an (N, M) matrix. ``forbid=False`` lifts the forbidden-call rule
(the tests use it to run a check on the reference itself).

The checks run PyTorch on one CPU thread: their tensors are small, and on a busy machine (a class
graded in parallel) a pool of threads only adds waiting; FlashAttention's loop over tiles runs
about ten times slower with two contended threads than with one.
"""

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from autograder.checks.framework import (
    Case,
    CheckFailed,
    Exercise,
    Mistake,
    Tolerance,
    check_functions,
    failure_message,
    generator_for,
    random_choice,
    random_integer,
    random_normal,
    run_student,
)
from autograder.checks.shared_attention import ATTENTION_FORBIDDEN, ATTENTION_TOLERANCES
from bertlab import attention as attention_reference
from bertlab import efficient as reference

NEG_INF = float("-inf")
_EXACT = Tolerance(atol=0.0, rtol=0.0)


def _qkv(generator, q_shape, k_shape, value_size, dtype=torch.float32, scale=1.0):
    """Random queries (q_shape), keys (k_shape) and values (k_shape[:-1] + (value_size,))."""
    q = random_normal(generator, *q_shape, scale=scale, dtype=dtype)
    k = random_normal(generator, *k_shape, scale=scale, dtype=dtype)
    v = random_normal(generator, *k_shape[:-1], value_size, dtype=dtype)
    return q, k, v


# --------------------------------------------------------------------------------------------------
# Largest allocation: does the student's code build an (N, M) matrix?
# --------------------------------------------------------------------------------------------------


class _LargestAllocation(TorchDispatchMode):
    """Records the largest tensor an operation returns in new memory (views of the inputs excluded)."""

    def __init__(self, inputs):
        super().__init__()
        self.inputs = {t.untyped_storage().data_ptr() for t in inputs if isinstance(t, torch.Tensor)}
        self.numel = 0
        self.shape = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, (tuple, list)) else (out,):
            if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.strided:
                continue
            storage = tensor.untyped_storage()
            numel = storage.nbytes() // tensor.element_size()
            if storage.data_ptr() not in self.inputs and numel > self.numel:
                self.numel, self.shape = numel, tuple(tensor.shape)
        return out


def _check_no_large_matrix(student_fn, case: Case, limit: int, *, check: str, forbidden, advice: str) -> None:
    """Run ``student_fn`` on ``case`` and fail when one of its tensors holds more than ``limit`` numbers."""
    trackers = []

    def tracked(*args, **kwargs):  # receives the copies of the case's tensors that run_student makes
        trackers.append(_LargestAllocation(args + tuple(kwargs.values())))
        with trackers[-1]:
            return student_fn(*args, **kwargs)

    context = f"the memory test ({case.description})"
    run_student(tracked, case, check=check, forbidden=forbidden, context=context)
    [tracker] = trackers
    if tracker.numel > limit:
        difference = (f"Your function allocated a tensor of shape {tracker.shape} ({tracker.numel:,} numbers); "
                      f"at most {limit:,} are needed here.")
        raise CheckFailed(failure_message(check, context, difference, advice))


def _no_large_matrix(memory_cases: Callable[[], list[tuple[Case, int]]], advice: str):
    """The memory test, run after an exercise's cases: on each of ``memory_cases`` (a case and its limit), no
    tensor the student's code allocates may hold more numbers than the limit; ``advice`` is the hint."""

    def memory_test(exercise: Exercise, student_fn, forbidden) -> str:
        for case, limit in memory_cases():
            _check_no_large_matrix(student_fn, case, limit, check=exercise.name, forbidden=forbidden, advice=advice)
        return ", and no (N, M) matrix was built"

    return memory_test

# --------------------------------------------------------------------------------------------------
# sliding_window_mask
# --------------------------------------------------------------------------------------------------

SLIDING_WINDOW_MASK_FORBIDDEN = (
    reference.sliding_window_mask,
    reference.longformer_mask,
    "transformers.masking_utils.sliding_window_overlay",
    "transformers.masking_utils.sliding_window_causal_mask_function",
    "transformers.masking_utils.sliding_window_bidirectional_overlay",
    "transformers.masking_utils.sliding_window_bidirectional_mask_function",
)


def sliding_window_mask_cases() -> list[Case]:
    """Bidirectional windows of even and odd size and of size 1, causal windows, windows longer than the
    sequence, one position, the device given. The sizes are drawn; a sequence is longer than its window
    (but where the window is meant to be longer), so that the keys at the window's edge exist."""
    g = generator_for("sliding_window_mask")

    def case(n, window, note="", **kwargs):
        options = "".join(f", {name}={value!r}" for name, value in kwargs.items())
        return Case(f"n={n}, window={window}{options}{note}", (n, window), kwargs)

    def longer_than(window, low=2):
        return window + random_integer(g, low, 200)

    even, odd = 2 * random_integer(g, 1, 30), 2 * random_integer(g, 1, 30) + 1
    explicit, causal, causal_again, on_cpu = (random_integer(g, low, 60) for low in (2, 3, 2, 2))
    short, short_causal = random_integer(g, 2, 40), random_integer(g, 2, 40)
    return [
        case(longer_than(even), even, f" (bidirectional: {even // 2} keys on each side)"),
        case(longer_than(odd), odd, " (bidirectional)"),
        case(random_integer(g, 2, 1000), 1, " (each position sees only itself)"),
        case(longer_than(explicit), explicit, causal=False),
        case(longer_than(causal), causal, f" (itself and the {causal - 1} keys before it)", causal=True),
        case(longer_than(causal_again, 1), causal_again, causal=True),
        case(short, 2 * short + random_integer(g, 0, 200), " (a window longer than the sequence)"),
        case(short_causal, short_causal + random_integer(g, 1, 200), causal=True),
        case(1, random_integer(g, 1, 5000)),
        case(longer_than(on_cpu), on_cpu, causal=True, device="cpu"),
    ]


def _window_variant(condition):
    """A sliding-window mask built from ``condition(distance, window, causal)``, distance = i - j."""

    def sliding_window_mask(n, window, causal=False, device=None):
        positions = torch.arange(n, device=device)
        distance = positions[:, None] - positions[None, :]
        return condition(distance, window, causal)

    return sliding_window_mask


def _correct_window(distance, window, causal):
    return (distance >= 0) & (distance < window) if causal else distance.abs() <= window // 2


def _bidirectional_variant(condition):
    return _window_variant(lambda d, w, causal: _correct_window(d, w, True) if causal else condition(d, w))


def _causal_variant(condition):
    return _window_variant(lambda d, w, causal: condition(d, w) if causal else _correct_window(d, w, False))


SLIDING_WINDOW_MASK_MISTAKES = (
    Mistake(
        _bidirectional_variant(lambda d, w: d.abs() < w // 2),
        "a bidirectional window of size w lets query i see key j when |i - j| <= w // 2: use <=, "
        "not <, or the keys at distance exactly w // 2 are missing.",
    ),
    Mistake(
        _bidirectional_variant(lambda d, w: d.abs() <= w),
        "the bidirectional window w is split between the two sides: w // 2 keys before and w // 2 "
        "after the query (|i - j| <= w // 2), not w on each side.",
    ),
    Mistake(
        _bidirectional_variant(lambda d, w: d.abs() < w),
        "the bidirectional window w is split between the two sides: |i - j| <= w // 2.",
    ),
    Mistake(
        _bidirectional_variant(lambda d, w: d <= w // 2),
        "the bidirectional window reaches both sides: compare the absolute distance |i - j| with "
        "w // 2 (distance.abs()), otherwise every key far in the past is allowed.",
    ),
    Mistake(
        _window_variant(lambda d, w, causal: (d < w).float() if causal else (d.abs() <= w // 2).float()),
        "return a bool tensor (True = may attend), not floats.",
    ),
    Mistake(
        _window_variant(lambda d, w, causal: (d.abs() <= w // 2).float()),
        "return a bool tensor (True = may attend), not floats.",
    ),
    Mistake(
        _causal_variant(lambda d, w: d < w),
        "with causal=True a query must not see the future: require j <= i (i - j >= 0) as well as "
        "i - j < window.",
    ),
    Mistake(
        _causal_variant(lambda d, w: (d >= 0) & (d <= w)),
        "a causal window of size W holds W keys: the query itself and the W - 1 before it "
        "(0 <= i - j < W), not W + 1.",
    ),
    Mistake(
        _causal_variant(lambda d, w: (d > 0) & (d <= w)),
        "a query sees itself: the causal window is 0 <= i - j < W (the diagonal is True).",
    ),
    Mistake(
        _causal_variant(lambda d, w: (d <= 0) & (d > -w)),
        "the causal window looks back: query i sees keys j <= i (the lower band), not the next ones.",
    ),
    Mistake(
        _causal_variant(lambda d, w: d.abs() <= w // 2),
        "with causal=True the window is one-sided (0 <= i - j < window); your mask ignores `causal`.",
    ),
)


SLIDING_WINDOW_MASK = Exercise("sliding_window_mask", reference.sliding_window_mask, sliding_window_mask_cases,
                               mistakes=SLIDING_WINDOW_MASK_MISTAKES, forbidden=SLIDING_WINDOW_MASK_FORBIDDEN,
                               torch_threads=1,
                               summary="""
                               Compare ``sliding_window_mask(n, window, causal=False, device=None)`` with the reference.

                               Cases: bidirectional windows of odd and even size, window 1, causal windows, windows
                               longer than the sequence, n = 1, device given; the sizes are drawn (n up to 1,000). Exact
                               comparison (bool). Forbidden: the reference (and ``longformer_mask``), Hugging Face's
                               sliding-window mask functions.
                               """)


# --------------------------------------------------------------------------------------------------
# repeat_kv
# --------------------------------------------------------------------------------------------------

REPEAT_KV_FORBIDDEN = (
    attention_reference.repeat_kv,
    reference.grouped_query_attention,
    "transformers.models.llama.modeling_llama.repeat_kv",
    "transformers.models.mistral.modeling_mistral.repeat_kv",
)


def repeat_kv_cases() -> list[Case]:
    g = generator_for("repeat_kv")
    return [
        Case("x (2, 2, 3, 4): 2 key/value heads, n_rep=3", (random_normal(g, 2, 2, 3, 4), 3)),
        Case("x (1, 4, 5, 2), n_rep=2", (random_normal(g, 1, 4, 5, 2), 2)),
        Case("x (2, 1, 3, 4), n_rep=4 (multi-query: one key/value head)", (random_normal(g, 2, 1, 3, 4), 4)),
        Case("x (3, 2, 4) without a batch dim (Hkv, M, D), n_rep=2", (random_normal(g, 3, 2, 4), 2)),
        Case("x (2, 2, 3, 3, 4) with two leading dims, n_rep=2", (random_normal(g, 2, 2, 3, 3, 4), 2)),
        Case("x (2, 3, 3, 4), n_rep=1 (multi-head: nothing to share)", (random_normal(g, 2, 3, 3, 4), 1)),
        Case("x (2, 2, 3, 4), float64, n_rep=2", (random_normal(g, 2, 2, 3, 4, dtype=torch.float64), 2)),
        Case("x (1, 2, 3, 4), bfloat16, n_rep=3", (random_normal(g, 1, 2, 3, 4, dtype=torch.bfloat16), 3)),
    ]


def _repeat_tiled(x, n_rep):
    return torch.cat([x] * n_rep, dim=-3)


def _repeat_interleave_dim1(x, n_rep):
    return x.repeat_interleave(n_rep, dim=1)


def _repeat_interleave_dim0(x, n_rep):
    return x.repeat_interleave(n_rep, dim=0)


def _repeat_unflattened(x, n_rep):
    return x.unsqueeze(-3).expand(*x.shape[:-2], n_rep, *x.shape[-2:])


def _repeat_along_keys(x, n_rep):
    return x.repeat_interleave(n_rep, dim=-2)


REPEAT_KV_MISTAKES = (
    Mistake(
        _repeat_tiled,
        "query head h uses key/value head h // n_rep: each head is repeated n_rep times in a row "
        "(k0, k0, k1, k1, ...: repeat_interleave), not the whole block of heads n_rep times "
        "(k0, k1, k0, k1, ...: repeat or cat, which gives head h the key/value head h % Hkv).",
    ),
    Mistake(
        _repeat_unflattened,
        "merge the group axis with the head axis: the result is (..., Hkv * n_rep, M, D), not "
        "(..., Hkv, n_rep, M, D).",
    ),
    Mistake(
        _repeat_interleave_dim1,
        "the heads are dim -3 of (..., Hkv, M, D), counted from the end: dim=1 is only right for a "
        "4-dim tensor (B, Hkv, M, D). Use dim=-3.",
    ),
    Mistake(
        _repeat_along_keys,
        "repeat the heads (dim -3), not the keys (dim -2): x is (..., Hkv, M, D).",
    ),
    Mistake(
        _repeat_interleave_dim0,
        "repeat the heads (dim -3), not the batch (dim 0).",
    ),
)


REPEAT_KV = Exercise("repeat_kv", attention_reference.repeat_kv, repeat_kv_cases, mistakes=REPEAT_KV_MISTAKES,
                     forbidden=REPEAT_KV_FORBIDDEN,
                     tolerance={dtype: _EXACT for dtype in (torch.float32, torch.float64, torch.bfloat16)},
                     torch_threads=1,
                     summary="""
                     Compare ``repeat_kv(x, n_rep)`` with :func:`bertlab.attention.repeat_kv`.

                     Cases: 1 to 4 key/value heads, n_rep = 1 to 4, 3 to 5 dims, float32, float64 and bfloat16. Exact
                     comparison (a copy of values). Forbidden: the reference, ``grouped_query_attention`` and Hugging
                     Face's ``repeat_kv``.
                     """)


# --------------------------------------------------------------------------------------------------
# kv_cache_bytes
# --------------------------------------------------------------------------------------------------

KV_CACHE_BYTES_FORBIDDEN = (reference.kv_cache_bytes,)


def kv_cache_bytes_cases() -> list[Case]:
    """Published configurations (their layers, key/value heads and head size) with drawn batches and
    lengths, a small float32 cache, an int8 one, the default ``bytes_per_value`` and keyword arguments.

    A batch is never 1 or 2 (except in the first case, of one sequence) and never a number of layers,
    so that forgetting the batch, the 2 (keys and values) or the layers gives three different sizes.
    """
    g = generator_for("kv_cache_bytes")
    llama_length, int8_length = random_integer(g, 1, 32768), random_integer(g, 1, 65536)
    mistral = (random_integer(g, 3, 31), random_integer(g, 1, 8192))
    small = (random_integer(g, 3, 9), random_integer(g, 2, 64), random_integer(g, 10, 24), random_integer(g, 1, 8),
             8 * random_integer(g, 1, 8))
    bert = (random_integer(g, 3, 11), random_integer(g, 1, 512))
    keywords = {"batch": random_integer(g, 3, 9), "seq_len": random_integer(g, 1, 4096),
                "num_layers": random_integer(g, 10, 48), "num_kv_heads": random_integer(g, 1, 16),
                "head_dim": 16 * random_integer(g, 1, 8), "bytes_per_value": random_choice(g, (1, 2, 4))}
    return [
        Case(f"one sequence of Llama 2 70B: batch=1, seq_len={llama_length}, num_layers=80, num_kv_heads=8, "
             "head_dim=128 (bytes_per_value left at its default, 2)", (1, llama_length, 80, 8, 128)),
        Case(f"Mistral 7B: batch={mistral[0]}, seq_len={mistral[1]}, num_layers=32, num_kv_heads=8, head_dim=128, "
             "bytes_per_value=2", (*mistral, 32, 8, 128, 2)),
        Case("batch={}, seq_len={}, num_layers={}, num_kv_heads={}, head_dim={}, bytes_per_value=4 (float32)"
             .format(*small), (*small, 4)),
        Case(f"BERT-base: batch={bert[0]}, seq_len={bert[1]}, num_layers=12, num_kv_heads=12, head_dim=64 "
             "(default bytes_per_value)", (*bert, 12, 12, 64)),
        Case(f"batch=1, seq_len={int8_length}, num_layers=32, num_kv_heads=1, head_dim=128, bytes_per_value=1 (int8)",
             (1, int8_length, 32, 1, 128, 1)),
        Case("all arguments by keyword: " + ", ".join(f"{name}={value}" for name, value in keywords.items()), (),
             keywords),
    ]


def _kv_cache_variant(keys_and_values=2, layers=True, batch_counted=True, default_bytes=2, unit=1):
    """A wrong KV-cache size: one of the typical mistakes, chosen by the arguments."""

    def kv_cache_bytes(batch, seq_len, num_layers, num_kv_heads, head_dim, bytes_per_value=default_bytes):
        size = keys_and_values * seq_len * num_kv_heads * head_dim * bytes_per_value
        size *= num_layers if layers else 1
        size *= batch if batch_counted else 1
        return size * unit

    return kv_cache_bytes


KV_CACHE_BYTES_MISTAKES = (
    Mistake(
        _kv_cache_variant(keys_and_values=1),
        "the cache holds a key AND a value vector for every token, head and layer: multiply by 2.",
    ),
    Mistake(
        _kv_cache_variant(layers=False),
        "every layer has its own keys and values: multiply by num_layers.",
    ),
    Mistake(
        _kv_cache_variant(batch_counted=False),
        "every sequence of the batch has its own cache: multiply by batch.",
    ),
    Mistake(
        _kv_cache_variant(default_bytes=4),
        "bytes_per_value defaults to 2 (float16 or bfloat16), not 4.",
    ),
    Mistake(
        _kv_cache_variant(unit=8),
        "return bytes, not bits: do not multiply by 8.",
    ),
)


KV_CACHE_BYTES = Exercise("kv_cache_bytes", reference.kv_cache_bytes, kv_cache_bytes_cases,
                          mistakes=KV_CACHE_BYTES_MISTAKES, forbidden=KV_CACHE_BYTES_FORBIDDEN,
                          torch_threads=1,
                          summary="""
                          Compare ``kv_cache_bytes(batch, seq_len, num_layers, num_kv_heads, head_dim,
                          bytes_per_value=2)`` with :func:`bertlab.efficient.kv_cache_bytes`.

                          Cases: published configurations (Llama 2 70B, Mistral 7B, BERT-base) with drawn batches and
                          lengths, float32 and int8 values, the default ``bytes_per_value``, keyword arguments. Exact
                          comparison: an int. Forbidden: the reference.
                          """)


# --------------------------------------------------------------------------------------------------
# flash_attention
# --------------------------------------------------------------------------------------------------

FLASH_ATTENTION_FORBIDDEN = (  # what computes attention, and PyTorch's fused kernels on every device
    *ATTENTION_FORBIDDEN,
    reference.flash_attention,
    reference.sliding_window_attention,
    reference.grouped_query_attention,
    torch.ops.aten._scaled_dot_product_flash_attention,
    torch.ops.aten._scaled_dot_product_efficient_attention,
    torch.ops.aten._scaled_dot_product_cudnn_attention,
)


def attention_by_sdpa(q, k, v, mask=None, causal=False, block_size=128):
    """What ``flash_attention`` must return, computed by ``F.scaled_dot_product_attention``.

    ``causal`` is the top-left causal mask, combined with ``mask``; a query that may see no key gets
    zeros; half-precision inputs are computed in float32 and rounded to their dtype at the end.
    """
    if causal:
        allowed = attention_reference.causal_mask(q.shape[-2], k.shape[-2], device=q.device)
        mask = allowed if mask is None else mask & allowed
    compute = torch.promote_types(q.dtype, torch.float32)
    out = attention_reference.fused_attention(q.to(compute), k.to(compute), v.to(compute), mask, None, 0.0)
    return out.to(q.dtype)


def flash_attention_cases() -> list[Case]:
    g = generator_for("flash_attention")
    random_mask = torch.rand((2, 1, 9, 11), generator=g) < 0.6
    random_mask[..., 0] = True  # every query sees a key
    padding = (torch.arange(10) < torch.tensor([10, 4])[:, None])[:, None, None, :]  # (2, 1, 1, 10)
    fully_masked = torch.rand((6, 10), generator=g) < 0.5
    fully_masked[:, 9] = True
    fully_masked[2] = False  # query 2 may attend to no key
    fully_masked[4] = False
    fully_masked[4, 9] = True  # query 4 sees only the last key (the last block)
    with_causal = torch.rand((8, 8), generator=g) < 0.7
    large_logits = _qkv(g, (3, 5, 8), (3, 20, 8), 4, scale=10.0)
    large_logits[0][:, 1] *= 1e-3  # far below the other queries: one maximum for a whole tile underflows it
    return [
        Case("q (6, 8), k (10, 8), v (10, 5), block_size=4, no mask, float32",
             _qkv(g, (6, 8), (10, 8), 5), {"block_size": 4}),
        Case("q (2, 3, 17, 16), k and v (2, 3, 17, 16), block_size=8 (17 is not a multiple of 8)",
             _qkv(g, (2, 3, 17, 16), (2, 3, 17, 16), 16), {"block_size": 8}),
        Case("q (3, 5, 8), k (3, 20, 8), v (3, 20, 4), block_size=4, scores of about 100 (large logits) but "
             "those of query 1, of about 0.1", large_logits, {"block_size": 4}),
        Case("q, k, v (2, 13, 8), causal=True, block_size=4",
             _qkv(g, (2, 13, 8), (2, 13, 8), 8), {"causal": True, "block_size": 4}),
        Case("q (7, 8), k (12, 8), v (12, 3), causal=True (N < M: query i sees keys 0..i), block_size=4",
             _qkv(g, (7, 8), (12, 8), 3), {"causal": True, "block_size": 4}),
        Case("q (12, 8), k (7, 8), v (7, 3), causal=True (N > M), block_size=4",
             _qkv(g, (12, 8), (7, 8), 3), {"causal": True, "block_size": 4}),
        Case("q (2, 2, 9, 8), k (2, 2, 11, 8), v (2, 2, 11, 6), random mask (2, 1, 9, 11), block_size=4",
             _qkv(g, (2, 2, 9, 8), (2, 2, 11, 8), 6), {"mask": random_mask, "block_size": 4}),
        Case("q (2, 2, 5, 8), k and v (2, 2, 10, 8), padding mask (2, 1, 1, 10) of lengths 10 and 4, "
             "block_size=3", _qkv(g, (2, 2, 5, 8), (2, 2, 10, 8), 8), {"mask": padding, "block_size": 3}),
        Case("q (6, 8), k (10, 8), v (10, 4), mask (6, 10) in which query 2 may attend to no key, block_size=4",
             _qkv(g, (6, 8), (10, 8), 4), {"mask": fully_masked, "block_size": 4}),
        Case("q, k, v (2, 8, 8), a random mask (8, 8) and causal=True together, block_size=3",
             _qkv(g, (2, 8, 8), (2, 8, 8), 8), {"mask": with_causal, "causal": True, "block_size": 3}),
        Case("q, k, v (1, 1, 8): one query, one key (default block_size)", _qkv(g, (1, 1, 8), (1, 1, 8), 8)),
        Case("q (2, 40, 8), k (2, 300, 8), v (2, 300, 8), default block_size (128)",
             _qkv(g, (2, 40, 8), (2, 300, 8), 8)),
        Case("q (2, 11, 8), k (2, 14, 8), v (2, 14, 8), float64, causal=True, block_size=5",
             _qkv(g, (2, 11, 8), (2, 14, 8), 8, torch.float64), {"causal": True, "block_size": 5}),
        Case("q, k, v (2, 20, 16), bfloat16, block_size=8",
             _qkv(g, (2, 20, 16), (2, 20, 16), 16, torch.bfloat16), {"block_size": 8}),
    ]


def flash_attention_memory_cases() -> list[tuple[Case, int]]:
    """Long sequences, and the most numbers one tensor of a tiled implementation needs there."""
    g = generator_for("flash_attention memory")
    n, d, block = 512, 16, 64
    q, k, v = _qkv(g, (2, n, d), (2, n, d), d)
    limit = 2 * q.numel()  # the (B, N, D) output and copies of the inputs, or a few tiles
    return [
        (Case(f"q, k, v (2, {n}, {d}), block_size={block}", (q, k, v), {"block_size": block}), limit),
        (Case(f"q, k, v (2, {n}, {d}), causal=True, block_size={block}", (q, k, v),
              {"causal": True, "block_size": block}), limit),
    ]


def _flash_variant(scale=True, rescale_sum=True, rescale_out=True, divide=True, zero_rows=True,
                   causal_alignment="top_left", invert_mask=False, per_row_max=True, ignore_causal=False):
    """A wrong flash attention: one of the typical mistakes, chosen by the arguments.

    It materializes the full (N, M) mask for simplicity: only its outputs are compared.
    """

    def flash_attention(q, k, v, mask=None, causal=False, block_size=128):
        n, m, dtype = q.shape[-2], k.shape[-2], q.dtype
        compute = torch.promote_types(dtype, torch.float32)
        q, k, v = q.to(compute), k.to(compute), v.to(compute)
        if scale:
            q = q / math.sqrt(q.shape[-1])
        allowed = torch.ones(n, m, dtype=torch.bool)
        if causal and not ignore_causal:
            query, key = torch.arange(n)[:, None], torch.arange(m)[None, :]
            offset = m - n if causal_alignment == "bottom_right" else 0
            allowed = key < query + offset if causal_alignment == "strict" else key <= query + offset
        if mask is not None:
            allowed = allowed & (~mask if invert_mask else mask)
        outputs = []
        for q_start in range(0, n, block_size):
            q_rows = slice(q_start, q_start + block_size)
            q_block = q[..., q_rows, :]
            running_max = torch.full(q_block.shape[:-1], NEG_INF, dtype=compute)
            running_sum = torch.zeros(q_block.shape[:-1], dtype=compute)
            running_out = torch.zeros(*q_block.shape[:-1], v.shape[-1], dtype=compute)
            for k_start in range(0, m, block_size):
                k_rows = slice(k_start, k_start + block_size)
                scores = q_block @ k[..., k_rows, :].transpose(-1, -2)
                scores = scores.masked_fill(~allowed[..., q_rows, k_rows], NEG_INF)
                if per_row_max:
                    tile_max = scores.amax(dim=-1)
                else:  # one maximum for the whole tile
                    tile_max = scores.amax(dim=(-2, -1))[..., None].expand_as(running_max)
                new_max = torch.maximum(running_max, tile_max)
                shift = new_max.masked_fill(new_max == NEG_INF, 0.0) if zero_rows else new_max
                weights = torch.exp(scores - shift[..., None])
                correction = torch.exp(running_max - shift)
                running_sum = (correction if rescale_sum else 1.0) * running_sum + weights.sum(-1)
                running_out = (correction[..., None] if rescale_out else 1.0) * running_out
                running_out = running_out + weights @ v[..., k_rows, :]
                running_max = new_max
            if zero_rows:
                running_sum = torch.where(running_sum > 0, running_sum, 1.0)
            outputs.append(running_out / running_sum[..., None] if divide else running_out)
        return torch.cat(outputs, dim=-2).to(dtype)

    return flash_attention


FLASH_ATTENTION_MISTAKES = (
    Mistake(_flash_variant(scale=False),
            "scale the scores by 1 / sqrt(D), D = q.shape[-1], as in scaled dot-product attention."),
    Mistake(_flash_variant(rescale_sum=False, rescale_out=False),
            "when the running maximum grows from m to m', the running sum l and the running output o "
            "were computed with exp(s - m): multiply both by exp(m - m') before adding the new block."),
    Mistake(_flash_variant(rescale_sum=False),
            "when the running maximum grows from m to m', rescale the running sum as well: "
            "l' = exp(m - m') l + sum_j exp(s_j - m')."),
    Mistake(_flash_variant(rescale_out=False),
            "when the running maximum grows from m to m', rescale the running output as well: "
            "o' = exp(m - m') o + sum_j exp(s_j - m') v_j."),
    Mistake(_flash_variant(divide=False),
            "the running output o is unnormalized: divide it by the running sum l at the end (out = o / l)."),
    Mistake(_flash_variant(invert_mask=True),
            "True in the mask means 'may attend': set the scores to -inf where the mask is False."),
    Mistake(_flash_variant(causal_alignment="bottom_right"),
            "align the causal mask top-left: query i sees keys 0..i whatever M is (like is_causal=True "
            "in F.scaled_dot_product_attention)."),
    Mistake(_flash_variant(causal_alignment="strict"),
            "with causal=True a query sees itself: keys j <= i, not j < i."),
    Mistake(_flash_variant(ignore_causal=True),
            "with causal=True, query i may not see the keys j > i: mask them in every tile."),
    Mistake(_flash_variant(zero_rows=False),
            "a query whose keys are all masked must get a zero output, not NaN: while its running "
            "maximum is -inf, subtract 0 instead (exp(-inf - (-inf)) is NaN), and do not divide by a "
            "running sum of 0."),
    Mistake(_flash_variant(per_row_max=False),
            "keep one running maximum per query (the maximum over the keys, dim=-1), not one for the "
            "whole tile: a row far below the tile's maximum underflows to 0 / 0."),
)


FLASH_ATTENTION = Exercise(
    "flash_attention",
    attention_by_sdpa,
    flash_attention_cases,
    mistakes=FLASH_ATTENTION_MISTAKES,
    forbidden=FLASH_ATTENTION_FORBIDDEN,
    tolerance=ATTENTION_TOLERANCES,
    then=(_no_large_matrix(flash_attention_memory_cases,
                           "never build the (N, M) scores or an (N, M) mask, nor a whole row of them: visit the "
                           "keys block by block, with tiles of (block_size, block_size) scores, and carry the "
                           "running maximum, sum and output from one key block to the next."),),
    agreement="agree with F.scaled_dot_product_attention",
    torch_threads=1,
    summary="""
    Compare ``flash_attention(q, k, v, mask=None, causal=False, block_size=128)`` with
    ``F.scaled_dot_product_attention``, and check that no (N, M) matrix is ever allocated.

    Cases: with and without batch and head dims, N != M, lengths that are not multiples of the block, causal with N < M
    and N > M, random, padding and causal masks combined, a fully masked query (zeros expected), N = M = 1, the default
    block size, large logits (one query far below the others), float64 and bfloat16 (expected: computed in float32,
    rounded to bfloat16). Tolerance: float32 atol 2e-5, rtol 2e-4; otherwise the framework's defaults. Memory: on N = M
    = 512 with block_size=64, no tensor the student's code allocates may hold more than 2 N D numbers per batch (a (64,
    512) row of tiles is already too many). Forbidden: every built-in attention (``F.scaled_dot_product_attention`` and
    its ``torch.ops``), ``bertlab.attention.scaled_dot_product_attention`` and the reference.
    """,
)


# --------------------------------------------------------------------------------------------------
# linear_attention
# --------------------------------------------------------------------------------------------------

LINEAR_ATTENTION_FORBIDDEN = (reference.linear_attention,)


def linear_attention_cases() -> list[Case]:
    g = generator_for("linear_attention")
    return [
        Case("q, k (6, 4), v (6, 3), not causal", _qkv(g, (6, 4), (6, 4), 3)),
        Case("q (2, 3, 5, 8), k (2, 3, 9, 8), v (2, 3, 9, 4): more keys than queries",
             _qkv(g, (2, 3, 5, 8), (2, 3, 9, 8), 4)),
        Case("q, k, v (2, 7, 4), causal=True", _qkv(g, (2, 7, 4), (2, 7, 4), 4), {"causal": True}),
        Case("q, k (2, 2, 6, 8), v (2, 2, 6, 3), causal=True", _qkv(g, (2, 2, 6, 8), (2, 2, 6, 8), 3),
             {"causal": True}),
        Case("q, k, v (1, 5): one position, causal=True", _qkv(g, (1, 5), (1, 5), 5), {"causal": True}),
        Case("q, k (3, 9, 4), v (3, 9, 2), inputs of size about 3 (elu saturates), causal=True",
             _qkv(g, (3, 9, 4), (3, 9, 4), 2, scale=3.0), {"causal": True}),
        Case("q, k, v (2, 8, 6), float64, causal=True", _qkv(g, (2, 8, 6), (2, 8, 6), 6, torch.float64),
             {"causal": True}),
        Case("q, k, v (2, 10, 8), bfloat16, not causal", _qkv(g, (2, 10, 8), (2, 10, 8), 8, torch.bfloat16)),
    ]


def linear_attention_memory_cases() -> list[tuple[Case, int]]:
    g = generator_for("linear_attention memory")
    n, d = 1024, 4
    q, k, v = _qkv(g, (n, d), (n, d), d)
    limit = n * n // 8  # the causal states (N, D, Dv) are 16 N here; the (N, N) matrix is N^2
    return [
        (Case(f"q, k, v ({n}, {d}), not causal", (q, k, v)), limit),
        (Case(f"q, k, v ({n}, {d}), causal=True", (q, k, v), {"causal": True}), limit),
    ]


def _linear_variant(feature_map=lambda x: F.elu(x) + 1, scale=False, normalize=True, causal_mode="inclusive",
                    key_sum_axis=-2):
    """A wrong linear attention: one of the typical mistakes, chosen by the arguments."""

    def linear_attention(q, k, v, causal=False):
        dtype = q.dtype
        compute = torch.promote_types(dtype, torch.float32)
        q, k, v = q.to(compute), k.to(compute), v.to(compute)
        if scale:
            q = q / math.sqrt(q.shape[-1])
        phi_q, phi_k = feature_map(q), feature_map(k)
        if causal and causal_mode != "ignored":
            states = torch.cumsum(phi_k[..., :, None] * v[..., None, :], dim=-3)  # (..., N, D, Dv)
            sums = torch.cumsum(phi_k, dim=-2)  # (..., N, D)
            if causal_mode == "exclusive":
                states, sums = states - phi_k[..., :, None] * v[..., None, :], sums - phi_k
            numerator = (phi_q[..., None, :] @ states).squeeze(-2)
            denominator = (phi_q * sums).sum(-1)
        else:
            numerator = phi_q @ (phi_k.transpose(-1, -2) @ v)
            denominator = (phi_q * phi_k.sum(key_sum_axis, keepdim=True)).sum(-1)
        out = numerator / denominator[..., None] if normalize else numerator
        return out.to(dtype)

    return linear_attention


LINEAR_ATTENTION_MISTAKES = (
    Mistake(_linear_variant(feature_map=F.elu),
            "the feature map is phi(x) = elu(x) + 1, which is positive; elu alone can be negative."),
    Mistake(_linear_variant(feature_map=F.relu),
            "the feature map is phi(x) = elu(x) + 1, not relu(x) (which is 0 for negative inputs)."),
    Mistake(_linear_variant(feature_map=torch.exp),
            "the feature map is phi(x) = elu(x) + 1, not exp(x)."),
    Mistake(_linear_variant(scale=True),
            "linear attention has no 1 / sqrt(D) scale: apply phi to the queries and keys as they are."),
    Mistake(_linear_variant(normalize=False),
            "divide by the normalizer phi(q_i)^T sum_j phi(k_j), so that the weights of each query sum to 1."),
    Mistake(_linear_variant(key_sum_axis=-1),
            "the normalizer sums phi(k_j) over the keys j, the positions (dim=-2 of (..., M, D)), giving one "
            "D-vector; yours sums over the features (dim=-1)."),
    Mistake(_linear_variant(causal_mode="ignored"),
            "with causal=True, query i sums over the keys j <= i only: use prefix sums (torch.cumsum "
            "along the positions) of phi(k_j) v_j^T and of phi(k_j)."),
    Mistake(_linear_variant(causal_mode="exclusive"),
            "with causal=True, query i sees itself: the prefix sums run over j <= i (inclusive, as "
            "torch.cumsum gives), not j < i."),
)


LINEAR_ATTENTION = Exercise(
    "linear_attention",
    reference.linear_attention,
    linear_attention_cases,
    mistakes=LINEAR_ATTENTION_MISTAKES,
    forbidden=LINEAR_ATTENTION_FORBIDDEN,
    then=(_no_large_matrix(linear_attention_memory_cases,
                           "never build the (N, M) matrix phi(Q) phi(K)^T: compute phi(K)^T V, a (D, Dv) "
                           "matrix, first (and its prefix sums, (N, D, Dv), when causal), then multiply by phi(Q)."),),
    torch_threads=1,
    summary="""
    Compare ``linear_attention(q, k, v, causal=False)`` with :func:`bertlab.efficient.linear_attention`, and check that
    no (N, M) matrix is ever allocated.

    Cases: with and without batch and head dims, N != M, Dv != D, causal, N = 1, saturating inputs, float64 and
    bfloat16. Tolerance: the framework's defaults. Memory: on N = M = 1024 with D = 4, causal and not, no tensor may
    hold N^2 / 8 numbers (the (N, N) matrix of phi(q_i)^T phi(k_j) would). Forbidden: the reference.
    """,
)


#: The chapter whose exercises this module checks, and their records, in the order of the chapter.
CHAPTER = "05_efficient_attention"


__getattr__ = check_functions(globals())  # check_<name> for each record above
