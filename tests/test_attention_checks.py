"""Mutation tests of chapter 01's checks (autograder/checks/attention.py) and of the shared framework.

For every exercise: the check accepts the solution of the solution notebook, other correct
implementations and (with the forbid-rule lifted) the reference; it rejects a catalogue of typical
wrong implementations, each with the hint that explains it; and calling a forbidden built-in or the
reference fails with "implement this yourself", however the function was captured.
"""

import math
import re
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.nn.functional import scaled_dot_product_attention as captured_sdpa
from torch.nn.functional import softmax as captured_softmax

import bertlab.attention
from autograder.checks import attention as checks
from autograder.checks.framework import (
    Case,
    CheckFailed,
    Tolerance,
    allowed,
    check_against_reference,
    describe_difference,
    forbidden_calls,
    with_dependencies,
)
from bertlab.attention import softmax as captured_reference_softmax
from checks_helpers import MutationTests, run_solution_cells

SOLUTION = Path(__file__).resolve().parents[1] / "solutions" / "01_attention" / "01_attention.ipynb"
EXERCISES = ["softmax", "additive_score", "scaled_dot_product_attention", "causal_mask", "padding_mask"]
NEG_INF = float("-inf")


@pytest.fixture(scope="module")
def solution_namespace():
    """The functions defined by the solution cells of the solution notebook, executed together."""
    return run_solution_cells(SOLUTION, {"torch": torch, "math": math})


# --------------------------------------------------------------------------------------------------
# Typical wrong implementations, as students write them, and the hint each must get
# --------------------------------------------------------------------------------------------------


def softmax_without_max(x, dim=-1):
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def softmax_nan_on_masked_rows(x, dim=-1):
    e = torch.exp(x - x.max(dim=dim, keepdim=True).values)
    return e / e.sum(dim=dim, keepdim=True)


def softmax_last_axis(x, dim=-1):
    e = torch.exp(x - x.max(dim=-1, keepdim=True).values.clamp_min(-1e30))
    return e / e.sum(dim=-1, keepdim=True).clamp_min(1e-30)


def softmax_global_max(x, dim=-1):
    e = torch.exp(x - x.max())
    return e / e.sum(dim=dim, keepdim=True)


def softmax_unnormalized(x, dim=-1):
    row_max = x.amax(dim=dim, keepdim=True)
    return torch.exp(x - torch.where(row_max == NEG_INF, 0.0, row_max))


def softmax_without_keepdim(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True).nan_to_num(neginf=0.0))
    return e / e.sum(dim=dim)


def softmax_in_place(x, dim=-1):
    x -= x.amax(dim=dim, keepdim=True).nan_to_num(neginf=0.0)
    e = x.exp_()
    return e / e.sum(dim=dim, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)


def additive_without_tanh(q, k, w_q, w_k, v):
    return ((q @ w_q.T)[..., :, None, :] + (k @ w_k.T)[..., None, :, :]) @ v


def additive_tanh_each(q, k, w_q, w_k, v):
    return (torch.tanh(q @ w_q.T)[..., :, None, :] + torch.tanh(k @ w_k.T)[..., None, :, :]) @ v


def additive_untransposed(q, k, w_q, w_k, v):
    return torch.tanh(torch.matmul(q, w_q)[..., :, None, :] + torch.matmul(k, w_k)[..., None, :, :]) @ v


def additive_keys_first(q, k, w_q, w_k, v):
    hidden = torch.tanh((q @ w_q.T).unsqueeze(-3) + (k @ w_k.T).unsqueeze(-2))  # (..., M, N, A)
    return torch.einsum("...mna,a->...mn", hidden, v)


def additive_sum_instead_of_v(q, k, w_q, w_k, v):
    return torch.tanh((q @ w_q.T).unsqueeze(-2) + (k @ w_k.T).unsqueeze(-3)).sum(dim=-1)


def attention(q, k, v, mask=None, *, scale=None, dim=-1, fill=NEG_INF, invert=False, after=False, swap=False,
              use_torch_softmax=False):
    """A student's attention with one mistake switched on by the keyword arguments."""
    scores = q @ k.transpose(-2, -1) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale(q, k))
    if mask is not None and invert:
        mask = ~mask
    if mask is not None and not after:
        scores = scores.masked_fill(~mask, fill)
    weights = torch.softmax(scores, dim=dim) if use_torch_softmax else softmax(scores, dim=dim)
    if mask is not None and after:
        weights = weights * mask
    return (weights, weights @ v) if swap else (weights @ v, weights)


def softmax(x, dim=-1):
    """What the student's attention calls; under the check the reference softmax replaces it."""
    raise AssertionError("dependency isolation failed: the student's softmax was called")


def attention_unscaled(q, k, v, mask=None):
    return attention(q, k, v, mask, scale=lambda q, k: 1.0)


def attention_divided_by_d(q, k, v, mask=None):
    return attention(q, k, v, mask, scale=lambda q, k: 1.0 / q.size(-1))


def attention_scaled_by_keys(q, k, v, mask=None):
    return attention(q, k, v, mask, scale=lambda q, k: 1.0 / math.sqrt(k.size(-2)))


def attention_over_queries(q, k, v, mask=None):
    return attention(q, k, v, mask, dim=-2)


def attention_inverted_mask(q, k, v, mask=None):
    return attention(q, k, v, mask, invert=True)


def attention_mask_after_softmax(q, k, v, mask=None):
    return attention(q, k, v, mask, after=True)


def attention_nan_rows(q, k, v, mask=None):
    return attention(q, k, v, mask, use_torch_softmax=True)


def attention_finite_fill(q, k, v, mask=None):
    return attention(q, k, v, mask, fill=-1e9)


def attention_swapped(q, k, v, mask=None):
    return attention(q, k, v, mask, swap=True)


def causal_upper(n, m=None, device=None):
    return torch.triu(torch.ones(n, m or n, dtype=torch.bool, device=device))


def causal_strict(n, m=None, device=None):
    m = m or n
    return torch.arange(m, device=device)[None, :] < torch.arange(n, device=device)[:, None]


def causal_bottom_right(n, m=None, device=None):
    m = n if m is None else m
    return torch.arange(m, device=device)[None, :] <= torch.arange(n, device=device)[:, None] + (m - n)


def causal_float(n, m=None, device=None):
    return torch.tril(torch.ones(n, m or n, device=device))


def causal_square(n, m=None, device=None):
    return torch.tril(torch.ones(n, n, device=device)).bool()


def causal_additive(n, m=None, device=None):
    m = m or n
    return torch.triu(torch.full((n, m), NEG_INF, device=device), diagonal=1)


def padding_no_axes(attention_mask):
    return attention_mask == 1


def padding_query_axis(attention_mask):
    return attention_mask.bool().unsqueeze(1).unsqueeze(-1)


def padding_inverted(attention_mask):
    return (attention_mask == 0).unsqueeze(1).unsqueeze(1)


def padding_not_bool(attention_mask):
    return attention_mask.unsqueeze(1).unsqueeze(2)


def padding_one_axis(attention_mask):
    return attention_mask.bool().unsqueeze(1)


MUTANTS = {
    "softmax": [
        (softmax_without_max, "exp overflows"),
        (softmax_nan_on_masked_rows, "entirely -inf (every key masked) must give zeros"),
        (softmax_last_axis, "sum to 1 along the last axis"),
        (softmax_global_max, "not the maximum of the whole tensor"),
        (softmax_unnormalized, "divide the exponentials by their sum"),
        (softmax_without_keepdim, "raised RuntimeError"),
        (softmax_in_place, "changed its input `x` in place"),
    ],
    "additive_score": [
        (additive_without_tanh, "apply tanh"),
        (additive_tanh_each, "add the two projections first"),
        (additive_untransposed, "q @ w_q.T"),
        (additive_keys_first, "shape (..., N, M), not (..., M, N)"),
        (additive_sum_instead_of_v, "dot product of tanh(...) with v"),
    ],
    "scaled_dot_product_attention": [
        (attention_unscaled, "divide the scores by sqrt(d_k), where d_k"),
        (attention_divided_by_d, "not by d_k"),
        (attention_scaled_by_keys, "not the number of keys"),
        (attention_over_queries, "normalize over the keys"),
        (attention_inverted_mask, "True in the mask means 'may attend'"),
        (attention_mask_after_softmax, "before the softmax"),
        (attention_nan_rows, "not NaN"),
        (attention_finite_fill, "spreads its weight uniformly"),
        (attention_swapped, "return (output, weights), in this order"),
    ],
    "causal_mask": [
        (causal_upper, "see the future"),
        (causal_strict, "keep the diagonal"),
        (causal_bottom_right, "align the mask top-left"),
        (causal_float, "return a bool tensor"),
        (causal_square, "use m when it is given"),
        (causal_additive, "not an additive mask"),
    ],
    "padding_mask": [
        (padding_no_axes, "add two axes for the heads and the queries"),
        (padding_one_axis, "add two axes, not one"),
        (padding_query_axis, "not (B, 1, M, 1)"),
        (padding_inverted, "1 marks a real token"),
        (padding_not_bool, "convert to bool"),
    ],
}

# Correct implementations written differently from the solution: the checks must accept them.
ALTERNATIVES = {
    "softmax": [lambda x, dim=-1: torch.exp(x - x.amax(dim, keepdim=True).nan_to_num(neginf=0.0)).div(
        torch.exp(x - x.amax(dim, keepdim=True).nan_to_num(neginf=0.0)).sum(dim, keepdim=True).clamp_min(1e-38))],
    "causal_mask": [lambda n, m=None, device=None: torch.arange(n if m is None else m, device=device)[None, :]
                    <= torch.arange(n, device=device)[:, None]],
    "padding_mask": [lambda attention_mask: (attention_mask != 0)[:, None, None, :],
                     lambda attention_mask: attention_mask.unsqueeze(1).unsqueeze(2).to(torch.bool)],
    "scaled_dot_product_attention": [attention],  # calls `softmax`, replaced by the reference
}


def test_failure_message_says_what_where_and_by_how_much():
    with pytest.raises(CheckFailed) as failure:
        checks.check_softmax(softmax_last_axis)
    message = str(failure.value)
    assert "test case 3 of 9 (x of shape (2, 4, 6), float32, dim=1)" in message
    assert re.search(r"the largest difference is [\d.e-]+ at index \(\d, \d, \d\): you returned [\d.e-]+, expected",
                     message)
    assert "tolerance atol=1e-05, rtol=0.0001" in message


def test_small_inputs_are_shown_so_the_student_can_rerun_the_case():
    n = checks.causal_mask_cases()[0].args[0]  # the first visible case: n queries, m left out
    with pytest.raises(CheckFailed, match=rf"Inputs:\n    n = {n}$") as failure:
        checks.check_causal_mask(causal_upper)
    assert "first at index (0, 1): you returned True, expected False" in str(failure.value)


# --------------------------------------------------------------------------------------------------
# "Implement this yourself"
# --------------------------------------------------------------------------------------------------


def softmax_with_captured_functional(x, dim=-1):
    return captured_softmax(x, dim=dim)


def softmax_with_tensor_method(x, dim=-1):
    return x.softmax(dim)


def softmax_with_aten(x, dim=-1):
    return torch.ops.aten._softmax.default(x, dim, False)


def softmax_with_module(x, dim=-1):
    return torch.nn.Softmax(dim=dim)(x)


def softmax_with_captured_reference(x, dim=-1):
    return captured_reference_softmax(x, dim)


def softmax_with_default_argument(x, dim=-1, implementation=bertlab.attention.softmax):
    return implementation(x, dim)


def softmax_hiding_the_call(x, dim=-1):
    try:
        return F.softmax(x, dim=dim)
    except Exception:  # the check's exception is swallowed, but the call was recorded
        return softmax_nan_on_masked_rows(x, dim).nan_to_num(0.0)


def softmax_via_log_softmax(x, dim=-1):
    return torch.log_softmax(x, dim=dim).exp()


def attention_with_captured_sdpa(q, k, v, mask=None):
    return captured_sdpa(q, k, v, attn_mask=mask), None


def attention_with_multihead_module(q, k, v, mask=None):
    module = torch.nn.MultiheadAttention(q.shape[-1], 1, bias=False, batch_first=True)
    return module(q, k, v, need_weights=False)[0], None


def attention_with_reference_module(q, k, v, mask=None):
    return bertlab.attention.fused_attention(q, k, v, mask, None, 0.0), None


def causal_mask_with_transformer_helper(n, m=None, device=None):
    return torch.nn.Transformer.generate_square_subsequent_mask(n, device=device) == 0


class TestAttentionChecks(MutationTests):
    """The shared mutation tests (tests/checks_helpers.py) of this chapter's checks."""

    checks = checks
    references = {name: getattr(bertlab.attention, name) for name in EXERCISES}
    mutants = MUTANTS
    alternatives = ALTERNATIVES
    cheats = [
        ("softmax", softmax_with_captured_functional, "torch.nn.functional.softmax"),
        ("softmax", softmax_with_tensor_method, "torch.Tensor.softmax"),
        ("softmax", softmax_with_aten, "torch.ops.aten._softmax"),
        ("softmax", softmax_with_module, "torch.nn.functional.softmax"),
        ("softmax", softmax_with_captured_reference, "bertlab.attention.softmax"),
        ("softmax", softmax_with_default_argument, "bertlab.attention.softmax"),
        ("softmax", softmax_hiding_the_call, "torch.nn.functional.softmax"),
        ("softmax", softmax_via_log_softmax, "torch.log_softmax"),
        ("scaled_dot_product_attention", attention_with_captured_sdpa,
         "torch.nn.functional.scaled_dot_product_attention"),
        ("scaled_dot_product_attention", attention_with_multihead_module,
         "torch.nn.modules.activation.MultiheadAttention.forward"),
        ("scaled_dot_product_attention", attention_with_reference_module, "bertlab.attention.fused_attention"),
        ("causal_mask", causal_mask_with_transformer_helper, "generate_square_subsequent_mask"),
    ]


def test_attention_may_use_torch_softmax():
    def with_torch_softmax(q, k, v, mask=None):
        scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]))
        if mask is not None:
            scores = scores.masked_fill(~mask, NEG_INF)
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        return weights @ v, weights

    checks.check_scaled_dot_product_attention(with_torch_softmax)


def test_profile_hook_is_restored_after_a_check():
    before = sys.getprofile()
    with pytest.raises(CheckFailed):
        checks.check_softmax(softmax_with_captured_reference)
    assert sys.getprofile() is before


def test_forbidden_names_need_no_import():
    def uses_bertlab_efficient(q, k, v, mask=None):
        from bertlab.efficient import flash_attention

        return flash_attention(q, k, v, mask=mask), None

    with pytest.raises(CheckFailed, match="bertlab.efficient.flash_attention"):
        checks.check_scaled_dot_product_attention(uses_bertlab_efficient)


# --------------------------------------------------------------------------------------------------
# Dependency isolation and the framework's pieces
# --------------------------------------------------------------------------------------------------


def test_a_wrong_softmax_is_not_punished_twice():
    """The student's attention calls a broken `softmax` (this module's); the check substitutes the
    reference, through a helper the student defined, and the attention passes."""
    with pytest.raises(AssertionError, match="dependency isolation failed"):
        attention(torch.ones(1, 2), torch.ones(3, 2), torch.ones(3, 2))
    checks.check_scaled_dot_product_attention(attention_through_helper)


def normalize_scores(scores):
    return softmax(scores, dim=-1)


def attention_through_helper(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    weights = normalize_scores(scores)
    return weights @ v, weights


class StudentModule(torch.nn.Module):
    def __init__(self, dim=-1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return softmax(x, dim=self.dim)

    @staticmethod
    def twice(x):
        return 2 * softmax(x)

    @property
    def uniform(self):
        return softmax(torch.zeros(4))


class StudentSubclass(StudentModule):
    """Inherits `twice` and `uniform`; its methods reach the parent's through zero-argument super()."""

    def __init__(self):
        super().__init__(dim=0)

    def forward(self, x):
        return super().forward(x) + softmax(x, dim=-1)


def test_with_dependencies_rebinds_classes_and_leaves_the_original_alone():
    """A class that calls super().__init__() (every nn.Module does), its subclass, their static
    methods and properties all see the reference; the original classes still call this module's."""
    x = torch.randn(2, 3)
    isolated = with_dependencies(StudentModule, softmax=bertlab.attention.softmax)
    assert issubclass(isolated, StudentModule) and isolated.__qualname__ == "StudentModule"
    torch.testing.assert_close(isolated()(x), bertlab.attention.softmax(x))
    torch.testing.assert_close(isolated.twice(x), 2 * bertlab.attention.softmax(x))
    torch.testing.assert_close(isolated().uniform, torch.full((4,), 0.25))
    isolated_subclass = with_dependencies(StudentSubclass, softmax=bertlab.attention.softmax)
    module = isolated_subclass()
    expected = bertlab.attention.softmax(x, dim=0) + bertlab.attention.softmax(x, dim=-1)
    torch.testing.assert_close(module(x), expected)
    torch.testing.assert_close(module.uniform, torch.full((4,), 0.25))
    torch.testing.assert_close(isolated_subclass.twice(x), 2 * bertlab.attention.softmax(x))
    for original in (StudentModule(), StudentSubclass()):
        with pytest.raises(AssertionError, match="dependency isolation failed"):
            original(x)
    with pytest.raises(AssertionError, match="dependency isolation failed"):
        StudentModule.twice(x)


def test_with_dependencies_returns_a_class_without_own_code_unchanged():
    class OnlyLibraryCode(torch.nn.Linear):
        pass

    assert with_dependencies(OnlyLibraryCode, softmax=bertlab.attention.softmax) is OnlyLibraryCode


def test_allowed_dependencies_may_call_forbidden_functions():
    uses_softmax = allowed(lambda x: F.softmax(x, dim=-1))
    with forbidden_calls([F.softmax]):
        uses_softmax(torch.randn(3))
    with pytest.raises(CheckFailed, match="torch.nn.functional.softmax"), forbidden_calls([F.softmax]):
        F.softmax(torch.randn(3), dim=-1)


@pytest.mark.parametrize(
    "actual, expected, message",
    [
        (torch.zeros(2, 3), torch.zeros(3, 2), "you returned shape (2, 3), expected shape (3, 2)"),
        (torch.zeros(2), torch.zeros(2, dtype=torch.float64),
         "you returned dtype torch.float32, expected torch.float64"),
        (torch.tensor([0.0, math.nan]), torch.tensor([0.0, 0.5]),
         "at index (1,) you returned nan, expected 0.5 (1 NaN"),
        (torch.tensor([1.0, 2.5]), torch.tensor([1.0, 2.0]),
         "1 of 2 values differ; the largest difference is 0.5 at index (1,)"),
        (torch.tensor([True, True]), torch.tensor([True, False]),
         "first at index (1,): you returned True, expected False"),
        ((torch.zeros(1),), (torch.zeros(1), torch.zeros(1)), "expected a tuple (2 values)"),
        ([1.0], torch.zeros(1), "you returned a list, expected a torch.Tensor"),
        (3, 4, "you returned 3, expected 4"),
        (3.0, 4, "you returned a float, expected an int"),
    ],
)
def test_describe_difference(actual, expected, message):
    assert message in describe_difference(actual, expected)


def test_tolerances_are_per_dtype():
    tolerance = {torch.float32: Tolerance(atol=0.1, rtol=0.0)}
    assert describe_difference(torch.tensor([1.05]), torch.tensor([1.0]), tolerance) is None
    assert describe_difference(torch.tensor([1.2]), torch.tensor([1.0]), tolerance) is not None
    assert describe_difference(torch.tensor([1.0 + 1e-6], dtype=torch.float64),
                               torch.tensor([1.0], dtype=torch.float64)) is not None
    assert describe_difference(torch.tensor([math.inf, -math.inf]), torch.tensor([math.inf, -math.inf])) is None


def test_check_against_reference_returns_a_summary():
    cases = [Case("x = 1", (torch.ones(1),)), Case("x = 2", (2 * torch.ones(1),))]
    summary = check_against_reference(lambda x: x * 2, lambda x: x + x, cases, check="double")
    assert summary == "double: all 2 cases agree with the reference"
    with pytest.raises(CheckFailed, match=r"double is not right yet, on test case 2 of 2 \(x = 2\)"):
        check_against_reference(lambda x: x + 1, lambda x: x + x, cases, check="double")


def test_with_dependencies_lets_a_handle_rebind_elsewhere():
    """The grader's handle on a function in the student's process rebinds it there."""

    class Handle:
        def __with_dependencies__(self, **references):
            return ("rebound elsewhere", sorted(references))

    assert with_dependencies(Handle(), softmax=bertlab.attention.softmax) == ("rebound elsewhere", ["softmax"])
