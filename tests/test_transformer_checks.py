"""Mutation tests of chapter 02's checks (autograder/checks/transformer.py).

For every exercise (a module class): the check accepts the solution of the solution notebook, another
correct implementation and (with the forbid-rule lifted) the reference; it rejects a catalogue of
typical wrong implementations, each with the hint that explains it; it names the parameters a module
lacks; it runs the student's class with the reference versions of the earlier exercises; and using a
built-in or the reference fails with "implement this yourself", however it is reached.
"""

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.functional import scaled_dot_product_attention as captured_sdpa

import bertlab.attention
import bertlab.norm
import bertlab.transformer
from autograder.checks import transformer as checks
from autograder.checks.framework import CheckFailed, generator_for, with_dependencies
from bertlab.attention import softmax as reference_softmax
from checks_helpers import MutationTests, run_in_grader, run_solution_cells, solution_cells

SOLUTION = Path(__file__).resolve().parents[1] / "solutions" / "02_transformer" / "02_transformer.ipynb"
EXERCISES = ["MultiHeadAttention", "FeedForward", "EncoderLayer"]
REFERENCES = {
    "MultiHeadAttention": bertlab.attention.MultiHeadAttention,
    "FeedForward": bertlab.transformer.FeedForward,
    "EncoderLayer": bertlab.transformer.EncoderLayer,
}
NEG_INF = float("-inf")


@pytest.fixture(scope="module")
def solution_namespace():
    """The classes defined by the solution cells of the solution notebook, executed together."""
    namespace = {"torch": torch, "math": math, "nn": nn, "F": F,
                 "scaled_dot_product_attention": bertlab.attention.scaled_dot_product_attention}
    return run_solution_cells(SOLUTION, namespace)


def scaled_dot_product_attention(q, k, v, mask=None):
    """What the students' modules below call; under the check the reference replaces it."""
    raise AssertionError("dependency isolation failed: the student's scaled_dot_product_attention was called")


# --------------------------------------------------------------------------------------------------
# MultiHeadAttention: a correct student module, and typical wrong ones
# --------------------------------------------------------------------------------------------------


class Attention(nn.Module):
    """A correct multi-head attention, written differently from the solution (view, permute, helpers)."""

    def __init__(self, d_model, num_heads):
        super().__init__()
        assert d_model % num_heads == 0
        self.h, self.d_k = num_heads, d_model // num_heads
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(d_model, d_model) for _ in range(4))

    def split(self, t):
        b, length, _ = t.size()
        return t.view(b, length, self.h, self.d_k).permute(0, 2, 1, 3)

    def merge(self, t):
        b, _, length, _ = t.size()
        return t.permute(0, 2, 1, 3).contiguous().view(b, length, self.h * self.d_k)

    def attend(self, q, k, v, mask):
        return scaled_dot_product_attention(q, k, v, mask)[0]

    def forward(self, x, context=None, mask=None):
        kv = x if context is None else context
        q, k, v = self.split(self.q_proj(x)), self.split(self.k_proj(kv)), self.split(self.v_proj(kv))
        return self.out_proj(self.merge(self.attend(q, k, v, mask)))


class AttentionInlineSoftmax(Attention):
    """Correct too: the attention written out, with torch.softmax and the NaN of empty rows zeroed."""

    def attend(self, q, k, v, mask):
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask.logical_not(), NEG_INF)
        return torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v


class AttentionViewWithoutTranspose(Attention):
    def split(self, t):
        return t.view(t.shape[0], self.h, t.shape[1], self.d_k)


class AttentionMergeWithoutTranspose(Attention):
    def merge(self, t):
        return t.reshape(t.shape[0], t.shape[2], -1)


class AttentionMergeWithView(Attention):
    def merge(self, t):
        return t.transpose(1, 2).view(t.shape[0], t.shape[2], -1)


class AttentionWithoutOutputProjection(Attention):
    def forward(self, x, context=None, mask=None):
        kv = x if context is None else context
        q, k, v = self.split(self.q_proj(x)), self.split(self.k_proj(kv)), self.split(self.v_proj(kv))
        return self.merge(self.attend(q, k, v, mask))


class AttentionScaledByModelWidth(Attention):
    def attend(self, q, k, v, mask):
        d_model = self.h * self.d_k
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(d_model)
        if mask is not None:
            scores = scores.masked_fill(~mask, NEG_INF)
        return reference_softmax(scores) @ v


class AttentionIgnoringMask(Attention):
    def attend(self, q, k, v, mask):
        return scaled_dot_product_attention(q, k, v)[0]


class AttentionIgnoringContext(Attention):
    def forward(self, x, context=None, mask=None):
        return super().forward(x, None, mask)


class AttentionNanOnEmptyRows(AttentionInlineSoftmax):
    def attend(self, q, k, v, mask):
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(~mask, NEG_INF)
        return torch.softmax(scores, dim=-1) @ v


class AttentionOneBigHead(Attention):
    def split(self, t):
        return t.unsqueeze(1)

    def merge(self, t):
        return t.squeeze(1)


class AttentionWithoutBiases(Attention):
    def __init__(self, d_model, num_heads):
        super().__init__(d_model, num_heads)
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (
            nn.Linear(d_model, d_model, bias=False) for _ in range(4))


class AttentionWithoutOutputLayer(Attention):
    def __init__(self, d_model, num_heads):
        super().__init__(d_model, num_heads)
        del self.out_proj

    def forward(self, x, context=None, mask=None):
        kv = x if context is None else context
        q, k, v = self.split(self.q_proj(x)), self.split(self.k_proj(kv)), self.split(self.v_proj(kv))
        return self.merge(self.attend(q, k, v, mask))


# --------------------------------------------------------------------------------------------------
# FeedForward
# --------------------------------------------------------------------------------------------------


class FFN(nn.Module):
    """A correct feed-forward network, with F.dropout and functional activations."""

    def __init__(self, d_model, d_ff, activation="relu", dropout=0.0):
        super().__init__()
        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.activation, self.p = activation, dropout

    def act(self, x):
        return F.relu(x) if self.activation == "relu" else F.gelu(x)

    def drop(self, x):
        return F.dropout(x, self.p, training=self.training)

    def forward(self, x):
        return self.linear2(self.drop(self.act(self.linear1(x))))


class FFNActivationAfterOutput(FFN):
    def forward(self, x):
        return self.act(self.linear2(self.drop(self.linear1(x))))


class FFNActivationOnInput(FFN):
    def forward(self, x):
        return self.linear2(self.linear1(self.act(x)))


class FFNWithoutActivation(FFN):
    def forward(self, x):
        return self.linear2(self.drop(self.linear1(x)))


class FFNDropoutAlwaysOn(FFN):
    def drop(self, x):
        return F.dropout(x, self.p)


class FFNTanhGelu(FFN):
    def act(self, x):
        return F.relu(x) if self.activation == "relu" else F.gelu(x, approximate="tanh")


class FFNAlwaysRelu(FFN):
    def act(self, x):
        return torch.relu(x)


class FFNNamedLayers(nn.Module):
    def __init__(self, d_model, d_ff, activation="relu", dropout=0.0):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model))

    def forward(self, x):
        return self.net(x)


# --------------------------------------------------------------------------------------------------
# EncoderLayer
# --------------------------------------------------------------------------------------------------


class MultiHeadAttention(nn.Module):
    """The broken attention the students' layers build on; under the check the reference replaces it."""

    def __init__(self, d_model, num_heads):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, x, context=None, mask=None):
        raise AssertionError("dependency isolation failed: the student's MultiHeadAttention was called")


class FeedForward(FFN):
    """The broken feed-forward network the students' layers build on."""

    def forward(self, x):
        raise AssertionError("dependency isolation failed: the student's FeedForward was called")


class Layer(nn.Module):
    """A correct encoder layer, written differently from the solution (a residual helper)."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.ffn = FeedForward(d_model, d_ff, "relu", dropout)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout1, self.dropout2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def block(self, x, sublayer, dropout, norm):
        return norm(x + dropout(sublayer(x)))

    def forward(self, x, mask=None):
        x = self.block(x, lambda h: self.self_attn(h, mask=mask), self.dropout1, self.norm1)
        return self.block(x, self.ffn, self.dropout2, self.norm2)


class LayerPreNorm(Layer):
    def forward(self, x, mask=None):
        x = x + self.dropout1(self.self_attn(self.norm1(x), mask=mask))
        return x + self.dropout2(self.ffn(self.norm2(x)))


class LayerWithoutAttentionResidual(Layer):
    def forward(self, x, mask=None):
        h = self.norm1(self.dropout1(self.self_attn(x, mask=mask)))
        return self.norm2(h + self.dropout2(self.ffn(h)))


class LayerWithoutFeedForwardResidual(Layer):
    def forward(self, x, mask=None):
        h = self.norm1(x + self.dropout1(self.self_attn(x, mask=mask)))
        return self.norm2(self.dropout2(self.ffn(h)))


class LayerResidualAfterNorm(Layer):
    def forward(self, x, mask=None):
        h = x + self.norm1(self.dropout1(self.self_attn(x, mask=mask)))
        return h + self.norm2(self.dropout2(self.ffn(h)))


class LayerIgnoringMask(Layer):
    def forward(self, x, mask=None):
        return super().forward(x)


class LayerDropoutAlwaysOn(Layer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.p = dropout

    def forward(self, x, mask=None):
        h = self.norm1(x + F.dropout(self.self_attn(x, mask=mask), self.p))
        return self.norm2(h + F.dropout(self.ffn(h), self.p))


class LayerOneNormTwice(Layer):
    def forward(self, x, mask=None):
        h = self.norm1(x + self.dropout1(self.self_attn(x, mask=mask)))
        return self.norm1(h + self.dropout2(self.ffn(h)))


class LayerFeedForwardOnInput(Layer):
    def forward(self, x, mask=None):
        h = self.norm1(x + self.dropout1(self.self_attn(x, mask=mask)))
        return self.norm2(h + self.dropout2(self.ffn(x)))


class LayerMaskAsContext(Layer):
    def forward(self, x, mask=None):
        h = self.norm1(x + self.dropout1(self.self_attn(x, mask)))
        return self.norm2(h + self.dropout2(self.ffn(h)))


class LayerWithTorchNames(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__()
        self.attention = MultiHeadAttention(d_model, num_heads)
        self.ffn = FeedForward(d_model, d_ff, dropout=dropout)
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, x, mask=None):
        x = self.ln1(x + self.attention(x, mask=mask))
        return self.ln2(x + self.ffn(x))


MUTANTS = {
    "MultiHeadAttention": [
        (AttentionViewWithoutTranspose, "a reshape (or view) straight to (B, H, L, D)"),
        (AttentionMergeWithoutTranspose, "transpose (B, H, N, D) back to (B, N, H, D) before the reshape"),
        (AttentionMergeWithView, "`.view` fails: use `.reshape`"),
        (AttentionWithoutOutputProjection, "apply the output projection W^O"),
        (AttentionScaledByModelWidth, "not by 1/sqrt(d_model)"),
        (AttentionIgnoringMask, "pass the mask on"),
        (AttentionIgnoringContext, "the keys and values come from `context`"),
        (AttentionNanOnEmptyRows, "a query with no key to attend to"),
        (AttentionOneBigHead, "a single head of size d_model"),
        (AttentionWithoutBiases, "missing k_proj.bias (8,), out_proj.bias (8,), q_proj.bias (8,), v_proj.bias (8,)"),
        (AttentionWithoutOutputLayer, "missing out_proj.bias (8,), out_proj.weight (8, 8)"),
    ],
    "FeedForward": [
        (FFNActivationAfterOutput, "not after the second one"),
        (FFNActivationOnInput, "not to the input x"),
        (FFNWithoutActivation, "apply the activation between the two linear layers."),
        (FFNDropoutAlwaysOn, "different output each time it is called in evaluation mode"),
        (FFNTanhGelu, "not its tanh approximation"),
        (FFNAlwaysRelu, "'gelu' selects the GELU"),
        (FFNNamedLayers, "unexpected net.* (4 tensors)"),
    ],
    "EncoderLayer": [
        (LayerPreNorm, "your layer normalizes the sublayers' inputs (pre-norm)"),
        (LayerWithoutAttentionResidual, "add the residual around the attention"),
        (LayerWithoutFeedForwardResidual, "add the residual around the feed-forward network"),
        (LayerResidualAfterNorm, "add the residual before the norm"),
        (LayerIgnoringMask, "pass the mask to the self-attention"),
        (LayerMaskAsContext, "the second positional argument of MultiHeadAttention.forward is the context"),
        (LayerDropoutAlwaysOn, "different output each time it is called in evaluation mode"),
        (LayerOneNormTwice, "each sublayer has its own norm"),
        (LayerFeedForwardOnInput, "not the layer's input x"),
        (LayerWithTorchNames, "name the sublayers self_attn"),
    ],
}

ALTERNATIVES = {"MultiHeadAttention": [Attention, AttentionInlineSoftmax], "FeedForward": [FFN],
                "EncoderLayer": [Layer]}


def test_failure_message_says_which_module_and_case():
    with pytest.raises(CheckFailed) as failure:
        checks.check_MultiHeadAttention(AttentionIgnoringMask)
    message = str(failure.value)
    case = "MultiHeadAttention(12, 3), self-attention on x (2, 4, 12), causal mask (4, 4)"
    assert f"test case 2 of 11 ({case})" in message
    assert "the largest difference is" in message and "tolerance atol=2e-05, rtol=0.0002" in message


def test_constructor_errors_name_the_call():
    class Broken(Attention):
        def __init__(self, d_model, num_heads):
            super().__init__(d_model, num_heads)
            self.scale = 1 / math.sqrt(d_model // (num_heads - num_heads))

    with pytest.raises(CheckFailed, match=r"MultiHeadAttention\(8, 2\) raised ZeroDivisionError"):
        checks.check_MultiHeadAttention(Broken)


def test_a_class_that_is_not_a_module_is_rejected():
    class NotAModule:
        def __init__(self, d_model, d_ff, activation="relu", dropout=0.0):
            pass

    with pytest.raises(CheckFailed, match=r"FeedForward\(8, 32\) returned a NotAModule, expected a torch.nn.Module"):
        checks.check_FeedForward(NotAModule)


# --------------------------------------------------------------------------------------------------
# "Implement this yourself"
# --------------------------------------------------------------------------------------------------


class AttentionWithCapturedSdpa(Attention):
    def attend(self, q, k, v, mask):
        return captured_sdpa(q, k, v, attn_mask=mask)


class AttentionWithTorchModule(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(d_model, d_model) for _ in range(4))
        self.num_heads = num_heads

    def forward(self, x, context=None, mask=None):
        kv = x if context is None else context
        d_model = x.shape[-1]
        output, _ = F.multi_head_attention_forward(
            x.transpose(0, 1), kv.transpose(0, 1), kv.transpose(0, 1), d_model, self.num_heads, None, None, None,
            None, False, 0.0, self.out_proj.weight, self.out_proj.bias, use_separate_proj_weight=True,
            q_proj_weight=self.q_proj.weight, k_proj_weight=self.k_proj.weight, v_proj_weight=self.v_proj.weight,
            need_weights=False)
        return output.transpose(0, 1)


class AttentionSubclassingTheReference(bertlab.attention.MultiHeadAttention):
    pass


class AttentionHidingTheCall(Attention):
    def attend(self, q, k, v, mask):
        try:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        except Exception:  # the check's exception is swallowed, but the call was recorded
            return AttentionInlineSoftmax.attend(self, q, k, v, mask)


class FFNCallingTheReference(FFN):
    def forward(self, x):
        return bertlab.transformer.FeedForward.forward(self, x)


class LayerWithTorchLayer(Layer):
    def forward(self, x, mask=None):
        torch_layer = nn.TransformerEncoderLayer(x.shape[-1], 1, 4, dropout=0.0, batch_first=True)
        return torch_layer(x)


class LayerWithResidualHelper(Layer):
    def forward(self, x, mask=None):
        x = bertlab.norm.post_norm_residual(x, lambda h: self.self_attn(h, mask=mask), self.norm1)
        return bertlab.norm.post_norm_residual(x, self.ffn, self.norm2)


class TestTransformerChecks(MutationTests):
    """The shared mutation tests (tests/checks_helpers.py) of this chapter's checks."""

    checks = checks
    references = REFERENCES
    mutants = MUTANTS
    alternatives = ALTERNATIVES
    cheats = [
        ("MultiHeadAttention", AttentionWithCapturedSdpa, "torch.nn.functional.scaled_dot_product_attention"),
        ("MultiHeadAttention", AttentionWithTorchModule, "torch.nn.functional.multi_head_attention_forward"),
        ("MultiHeadAttention", AttentionSubclassingTheReference, "bertlab.attention.MultiHeadAttention.forward"),
        ("MultiHeadAttention", AttentionHidingTheCall, "torch.nn.functional.scaled_dot_product_attention"),
        ("FeedForward", FFNCallingTheReference, "bertlab.transformer.FeedForward.forward"),
        ("EncoderLayer", LayerWithTorchLayer, "torch.nn.modules.transformer.TransformerEncoderLayer.forward"),
        ("EncoderLayer", LayerWithResidualHelper, "bertlab.norm.post_norm_residual"),
    ]


def test_modules_may_use_linear_layers_norms_and_torch_softmax():
    checks.check_MultiHeadAttention(AttentionInlineSoftmax)  # nn.Linear, torch.softmax
    checks.check_EncoderLayer(Layer)  # nn.LayerNorm, and the reference attention inside


# --------------------------------------------------------------------------------------------------
# Dependency isolation
# --------------------------------------------------------------------------------------------------


def test_earlier_exercises_are_replaced_by_the_references():
    """This module's `scaled_dot_product_attention`, `MultiHeadAttention` and `FeedForward` are broken;
    the checks put the references in their place, and the correct modules built on them pass."""
    with pytest.raises(AssertionError, match="dependency isolation failed"):
        Attention(8, 2)(torch.randn(1, 3, 8))
    with pytest.raises(AssertionError, match="dependency isolation failed"):
        Layer(8, 2, 16)(torch.randn(1, 3, 8))
    checks.check_MultiHeadAttention(Attention)
    checks.check_EncoderLayer(Layer)


def test_with_dependencies_rebuilds_modules_that_call_super_and_leaves_the_originals_alone():
    """`Layer.__init__` calls super().__init__() and builds this module's (broken) MultiHeadAttention;
    `LayerIgnoringMask` inherits that __init__ and calls super().forward(x). Rebuilt with the references,
    both construct and run with the reference attention; the original classes are unchanged."""
    references = {"MultiHeadAttention": bertlab.attention.MultiHeadAttention,
                  "FeedForward": bertlab.transformer.FeedForward}
    x = torch.randn(1, 3, 8)
    for student_class in (Layer, LayerIgnoringMask):
        isolated = with_dependencies(student_class, **references)
        assert issubclass(isolated, student_class) and isolated.__name__ == student_class.__name__
        layer = isolated(8, 2, 16)
        assert isinstance(layer.self_attn, bertlab.attention.MultiHeadAttention)
        assert layer(x).shape == (1, 3, 8)
        assert isinstance(student_class(8, 2, 16).self_attn, MultiHeadAttention)  # the original: this module's
        with pytest.raises(AssertionError, match="dependency isolation failed"):
            student_class(8, 2, 16)(x)


@pytest.mark.slow
def test_dependencies_are_replaced_in_the_student_process():
    """Through the grader the student's class lives in a sandboxed process, where the check rebuilds it
    (``__with_dependencies__``): the solution's MultiHeadAttention, which calls super().__init__() and a
    broken scaled_dot_product_attention of the notebook, passes with the reference in its place."""
    from autograder.run.sandbox import Limits

    solution = dict(solution_cells(SOLUTION))["MultiHeadAttention"]
    broken = "def scaled_dot_product_attention(q, k, v, mask=None):\n    raise AssertionError('not isolated')"
    test = ("from autograder.checks.transformer import check_MultiHeadAttention\n"
            "print(check_MultiHeadAttention(MultiHeadAttention))")
    steps = [("code", "import torch\nfrom torch import nn"), ("code", broken), ("code", solution),
             ("test", "test_MultiHeadAttention")]
    limits = Limits(cell_timeout=120, notebook_timeout=300)
    outcome = run_in_grader(steps, {"test_MultiHeadAttention": test}, ["MultiHeadAttention"],
                            limits)["test_MultiHeadAttention"]
    assert outcome.status == "passed", outcome
    assert "MultiHeadAttention: all 11 hidden cases agree" in outcome.output


def test_random_weights_are_the_same_at_every_grading_run():
    module = bertlab.transformer.EncoderLayer(8, 2, 16)
    first = checks.random_state(module, generator_for("x"), torch.float32)
    second = checks.random_state(module, generator_for("x"), torch.float32)
    assert first.keys() == module.state_dict().keys()
    assert all(torch.equal(first[key], second[key]) for key in first)
    assert not torch.equal(first["norm1.weight"], torch.ones(8))  # norms get non-trivial gains
