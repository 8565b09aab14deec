"""Checks of chapter 02 (the Transformer block), called by the hidden tests of ``chapters/02_transformer``.

The exercises are ``nn.Module`` classes: ``MultiHeadAttention``, ``FeedForward`` and ``EncoderLayer``.
Each ``check_<name>(student_class)`` builds the reference module of ``bertlab`` with random weights
drawn from a generator seeded by the exercise's name, builds the student's module with the same
constructor arguments, loads the reference's ``state_dict()`` into it with ``load_state_dict``, calls
both on the same inputs and compares the outputs. The student's module is only constructed, given
weights with ``load_state_dict``, switched to evaluation mode with ``eval()`` where the case has
dropout, called, and asked for its ``state_dict()``: nothing else of it is read or assigned.

Earlier exercises are replaced by their references (the student's ``EncoderLayer`` runs with the
reference ``MultiHeadAttention`` and ``FeedForward``; the student's ``MultiHeadAttention`` with the
reference ``scaled_dot_product_attention`` of chapter 01), so one mistake is not punished twice.
``forbid=False`` lifts the forbidden-call rule (the tests use it to run a check on the reference).
"""

import math
from functools import partial

import torch
from torch import nn

from autograder.checks.framework import Case, Exercise, Mistake, check_functions, generator_for, random_normal
from autograder.checks.modules import MODULE_TOLERANCES, ModuleCase, compare_module, constructor_call, random_state
from autograder.checks.shared_attention import ATTENTION_FORBIDDEN
from bertlab import attention as reference_attention
from bertlab import norm as reference_norm
from bertlab import transformer as reference

NEG_INF = float("-inf")


# --------------------------------------------------------------------------------------------------
# MultiHeadAttention
# --------------------------------------------------------------------------------------------------

MULTI_HEAD_ATTENTION_FORBIDDEN = (
    *(f for f in ATTENTION_FORBIDDEN if f is not reference_attention.scaled_dot_product_attention),
    torch._native_multi_head_attention,
    "transformers.models.bert.modeling_bert.BertSelfAttention.forward",
    "transformers.models.bert.modeling_bert.BertAttention.forward",
)

MULTI_HEAD_ATTENTION_NAMING = (
    "name the four projections q_proj, k_proj, v_proj and out_proj, each an nn.Linear(d_model, d_model) "
    "with a bias, and give the module no other parameters."
)


def multi_head_attention_cases() -> list[ModuleCase]:
    g = generator_for("MultiHeadAttention")

    def case(description, d_model, num_heads, x_shape, context_shape=None, mask=None, dtype=torch.float32):
        kwargs = {}
        if context_shape is not None:
            kwargs["context"] = random_normal(g, *context_shape, dtype=dtype)
        if mask is not None:
            kwargs["mask"] = mask
        forward = Case(description, (random_normal(g, *x_shape, dtype=dtype),), kwargs)
        weights = random_state(reference_attention.MultiHeadAttention(d_model, num_heads), g, dtype)
        return ModuleCase(f"MultiHeadAttention({d_model}, {num_heads}), {description}", (d_model, num_heads),
                          forward, weights, dtype=dtype)

    lengths = torch.tensor([6, 4, 2])
    padding = reference_attention.padding_mask(torch.arange(6) < lengths[:, None])  # (3, 1, 1, 6)
    context_padding = reference_attention.padding_mask(torch.arange(7) < torch.tensor([7, 5])[:, None])
    per_head = torch.rand((2, 4, 5, 5), generator=g) < 0.6
    per_head[..., 0] = True  # every query sees at least one key
    no_key = torch.rand((4, 4), generator=g) < 0.7
    no_key[:, 1] = True
    no_key[2] = False  # query 2 may attend to no key
    return [
        case("self-attention on x (2, 5, 8), no mask", 8, 2, (2, 5, 8)),
        case("self-attention on x (2, 4, 12), causal mask (4, 4)", 12, 3, (2, 4, 12),
             mask=reference_attention.causal_mask(4)),
        case("cross-attention: x (2, 3, 8) attends over context (2, 7, 8), no mask", 8, 2, (2, 3, 8), (2, 7, 8)),
        case("self-attention on x (3, 6, 16), padding mask (3, 1, 1, 6) for lengths 6, 4, 2", 16, 4, (3, 6, 16),
             mask=padding),
        case("cross-attention: x (2, 3, 8) over context (2, 7, 8), padding mask (2, 1, 1, 7) for lengths 7, 5",
             8, 2, (2, 3, 8), (2, 7, 8), mask=context_padding),
        case("self-attention on x (2, 5, 16), a different random mask per head (2, 4, 5, 5)", 16, 4, (2, 5, 16),
             mask=per_head),
        case("a single head: x (2, 4, 6)", 6, 1, (2, 4, 6)),
        case("heads of size 1: x (2, 3, 8)", 8, 8, (2, 3, 8)),
        case("one position: x (1, 1, 8)", 8, 2, (1, 1, 8)),
        case("mask (4, 4) in which query 2 may attend to no key: x (2, 4, 8)", 8, 2, (2, 4, 8), mask=no_key),
        case("x (2, 5, 16), float64 weights and inputs", 16, 4, (2, 5, 16), dtype=torch.float64),
    ]


def _wrong_multi_head_attention(module, x, context=None, mask=None, *, split="transpose", merge="transpose",
                                output_projection=True, scale="head", use_mask=True, use_context=True,
                                nan_rows=False, return_weights=False):
    """A wrong multi-head attention with the weights of ``module``: one mistake, chosen by the options."""
    num_heads, d_model = module.num_heads, module.d_model
    head_dim = d_model // num_heads
    context = x if context is None or not use_context else context

    def heads(t):  # (B, L, d_model) -> (B, H, L, D)
        batch, length, _ = t.shape
        if split == "view":  # no transpose: mixes positions and features
            return t.reshape(batch, num_heads, length, head_dim)
        if split == "interleaved":  # head h takes every H-th feature
            return t.reshape(batch, length, head_dim, num_heads).permute(0, 3, 1, 2)
        if split == "none":  # one head of size d_model
            return t.unsqueeze(1)
        return t.reshape(batch, length, num_heads, head_dim).transpose(1, 2)

    q, k, v = heads(module.q_proj(x)), heads(module.k_proj(context)), heads(module.v_proj(context))
    divisor = math.sqrt(d_model) if scale == "model" else 1.0 if scale == "none" else math.sqrt(q.shape[-1])
    scores = q @ k.transpose(-2, -1) / divisor
    if mask is not None and use_mask:
        scores = scores.masked_fill(~mask, NEG_INF)
    weights = torch.softmax(scores, dim=-1) if nan_rows else reference_attention.softmax(scores, dim=-1)
    output = weights @ v  # (B, H, N, D)
    batch, _, length, _ = output.shape
    if merge == "no_transpose":
        output = output.reshape(batch, length, d_model)
    elif merge == "view":
        output = output.transpose(1, 2).view(batch, length, d_model)  # raises: not contiguous
    else:
        output = output.transpose(1, 2).reshape(batch, length, d_model)
    output = module.out_proj(output) if output_projection else output
    return (output, weights) if return_weights else output


def multi_head_attention_mistakes(module) -> list[Mistake]:
    wrong = partial(_wrong_multi_head_attention, module)
    return [
        Mistake(partial(wrong, split="view"),
                "split the heads with a reshape to (B, L, H, D) followed by transpose(1, 2) to (B, H, L, D); "
                "a reshape (or view) straight to (B, H, L, D) mixes positions and features."),
        Mistake(partial(wrong, merge="no_transpose"),
                "to concatenate the heads, transpose (B, H, N, D) back to (B, N, H, D) before the reshape to "
                "(B, N, d_model); a reshape straight from (B, H, N, D) mixes positions and heads."),
        Mistake(partial(wrong, split="view", merge="no_transpose"),
                "split the heads with reshape to (B, L, H, D) then transpose(1, 2), and concatenate them with "
                "transpose(1, 2) then reshape to (B, N, d_model): reshaping without the transposes mixes "
                "positions and features."),
        Mistake(partial(wrong, merge="view"),
                "after transpose(1, 2) the tensor is not contiguous, so `.view` fails: use `.reshape` (or "
                "`.contiguous().view`)."),
        Mistake(partial(wrong, split="interleaved"),
                "head h takes the contiguous features h*D ... (h+1)*D - 1 of each projection: reshape "
                "(B, L, d_model) to (B, L, H, D), not to (B, L, D, H)."),
        Mistake(partial(wrong, output_projection=False),
                "apply the output projection W^O (out_proj) to the concatenated heads."),
        Mistake(partial(wrong, split="none"),
                "split the projections into num_heads heads of size D = d_model // num_heads and attend in "
                "each head separately; your module computes a single head of size d_model."),
        Mistake(partial(wrong, scale="model"),
                "scale the scores by 1/sqrt(d_k) with d_k = D = d_model // num_heads, the size of one head, "
                "not by 1/sqrt(d_model). (scaled_dot_product_attention does it right when given the heads.)"),
        Mistake(partial(wrong, scale="none"), "scale the scores by 1/sqrt(d_k), d_k = d_model // num_heads."),
        Mistake(partial(wrong, use_context=False),
                "in cross-attention the keys and values come from `context`: k = k_proj(context), "
                "v = v_proj(context); only the queries come from x."),
        Mistake(partial(wrong, nan_rows=True),
                "a query with no key to attend to (its row of the mask is all False) must get zero weights and "
                "a zero head output, not NaN: torch.softmax of a row of -inf is NaN. Call "
                "scaled_dot_product_attention (chapter 01), which returns zeros there."),
        Mistake(partial(wrong, use_mask=False),
                "pass the mask on to the attention of the heads: scores where the mask is False get -inf."),
        Mistake(partial(wrong, return_weights=True), "return only the output (B, N, d_model), not the weights too."),
    ]


MULTI_HEAD_ATTENTION = Exercise(
    "MultiHeadAttention", reference_attention.MultiHeadAttention, multi_head_attention_cases,
    mistakes=multi_head_attention_mistakes, forbidden=MULTI_HEAD_ATTENTION_FORBIDDEN,
    dependencies={"softmax": reference_attention.softmax,
                  "scaled_dot_product_attention": reference_attention.scaled_dot_product_attention},
    naming_hint=MULTI_HEAD_ATTENTION_NAMING, parameter_names=("x", "context", "mask"), tolerance=MODULE_TOLERANCES,
    compare=compare_module,
    summary="""
    Compare ``MultiHeadAttention(d_model, num_heads)`` and its ``forward(x, context=None, mask=None)`` with
    :class:`bertlab.attention.MultiHeadAttention` holding the same weights.

    The student's class runs with the reference ``scaled_dot_product_attention`` and ``softmax`` in place of theirs.
    Cases: self- and cross-attention (N != M), causal, padding and per-head masks, a query with no key to attend to, one
    head, heads of size 1, one position, float64. Tolerance: float32 atol 2e-5, rtol 2e-4; float64 the framework's
    default. Forbidden: ``F.scaled_dot_product_attention``, ``nn.MultiheadAttention``,
    ``F.multi_head_attention_forward`` and every other built-in attention, and the reference module.
    """,
)


# --------------------------------------------------------------------------------------------------
# FeedForward
# --------------------------------------------------------------------------------------------------

FEED_FORWARD_FORBIDDEN = (
    reference.FeedForward.forward,
    nn.TransformerEncoderLayer._ff_block,
    nn.TransformerDecoderLayer._ff_block,
    "transformers.models.bert.modeling_bert.BertIntermediate.forward",
)

FEED_FORWARD_NAMING = (
    "name the two layers linear1 = nn.Linear(d_model, d_ff) and linear2 = nn.Linear(d_ff, d_model), both "
    "with a bias; the activation and the dropout have no parameters."
)


def feed_forward_cases() -> list[ModuleCase]:
    g = generator_for("FeedForward")

    def case(description, init_args, x_shape, init_kwargs=None, dtype=torch.float32, evaluate=False):
        init_kwargs = init_kwargs or {}
        call = constructor_call("FeedForward", init_args, init_kwargs)
        forward = Case(description, (random_normal(g, *x_shape, dtype=dtype),))
        weights = random_state(reference.FeedForward(*init_args, **init_kwargs), g, dtype)
        return ModuleCase(f"{call}{', eval mode' if evaluate else ''}, {description}", init_args, forward, weights,
                          init_kwargs, dtype, evaluate)

    return [
        case("x (2, 5, 8)", (8, 32), (2, 5, 8)),
        case("x (2, 4, 8)", (8, 16, "gelu"), (2, 4, 8)),
        case("x (3, 16) without a batch dimension", (16, 64), (3, 16), {"activation": "gelu"}),
        case("x (2, 4, 8)", (8, 16), (2, 4, 8), {"dropout": 0.5}, evaluate=True),
        case("x (2, 3, 4, 8)", (8, 24, "gelu", 0.1), (2, 3, 4, 8), evaluate=True),
        case("one position: x (1, 1, 4)", (4, 4), (1, 1, 4)),
        case("x (2, 3, 8), float64", (8, 16, "gelu"), (2, 3, 8), dtype=torch.float64),
    ]


def _wrong_feed_forward(module, x, *, activation_at="middle", activation=None):
    """A wrong feed-forward network with the weights of ``module``."""
    act = module.activation if activation is None else activation
    if activation_at == "input":
        return module.linear2(module.linear1(act(x)))
    hidden = module.linear1(x)
    if activation_at in ("middle", "both"):
        hidden = act(hidden)
    output = module.linear2(hidden)
    return act(output) if activation_at in ("output", "both") else output


def feed_forward_mistakes(module) -> list[Mistake]:
    wrong = partial(_wrong_feed_forward, module)
    return [
        Mistake(partial(wrong, activation_at="output"),
                "apply the activation between the two linear layers (to x W_1 + b_1), not after the second one."),
        Mistake(partial(wrong, activation_at="both"),
                "apply the activation once, between the two linear layers; the output of the second linear "
                "layer is not passed through it."),
        Mistake(partial(wrong, activation_at="input"),
                "apply the activation to the hidden layer, x W_1 + b_1, not to the input x."),
        Mistake(partial(wrong, activation_at="none"), "apply the activation between the two linear layers."),
        Mistake(partial(wrong, activation=nn.GELU(approximate="tanh")),
                "activation='gelu' is the exact GELU, x * Phi(x) with the erf (nn.GELU() or F.gelu(x)), not "
                "its tanh approximation."),
        Mistake(partial(wrong, activation=nn.ReLU()),
                "use the `activation` argument: 'gelu' selects the GELU, 'relu' the ReLU."),
        Mistake(partial(wrong, activation=nn.GELU()),
                "use the `activation` argument: 'relu' (the default) selects the ReLU, 'gelu' the GELU."),
    ]


FEED_FORWARD = Exercise("FeedForward", reference.FeedForward, feed_forward_cases, mistakes=feed_forward_mistakes,
                        forbidden=FEED_FORWARD_FORBIDDEN, naming_hint=FEED_FORWARD_NAMING, parameter_names=("x",),
                        tolerance=MODULE_TOLERANCES, compare=compare_module,
                        summary="""
                        Compare ``FeedForward(d_model, d_ff, activation="relu", dropout=0.0)`` and its ``forward(x)``
                        with :class:`bertlab.transformer.FeedForward` holding the same weights.

                        Cases: ReLU and GELU; inputs with 1 to 3 leading dimensions; dropout 0.5 and 0.1 in evaluation
                        mode (must be off); one position; float64. Tolerance: float32 atol 2e-5, rtol 2e-4; float64 the
                        framework's default. Forbidden: the reference and the feed-forward blocks of
                        ``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer``.
                        """)


# --------------------------------------------------------------------------------------------------
# EncoderLayer
# --------------------------------------------------------------------------------------------------

ENCODER_LAYER_FORBIDDEN = (
    reference.EncoderLayer.forward,
    reference.Encoder.forward,
    reference_norm.post_norm_residual,
    reference_norm.pre_norm_residual,
    nn.TransformerEncoderLayer.forward,
    nn.TransformerEncoder.forward,
    torch._transformer_encoder_layer_fwd,
    "bertlab.bert.BertEncoder.forward",
    "transformers.models.bert.modeling_bert.BertLayer.forward",
)

ENCODER_LAYER_NAMING = (
    "name the sublayers self_attn = MultiHeadAttention(d_model, num_heads), ffn = FeedForward(d_model, "
    "d_ff, dropout=dropout), and the two norms norm1 and norm2 = nn.LayerNorm(d_model) (dropout modules "
    "have no parameters)."
)


def encoder_layer_cases() -> list[ModuleCase]:
    g = generator_for("EncoderLayer")

    def case(description, init_args, x_shape, mask=None, dtype=torch.float32, evaluate=False):
        forward = Case(description, (random_normal(g, *x_shape, dtype=dtype),), {} if mask is None else {"mask": mask})
        weights = random_state(reference.EncoderLayer(*init_args), g, dtype)
        call = constructor_call("EncoderLayer", init_args, {})
        return ModuleCase(f"{call}{', eval mode' if evaluate else ''}, {description}", init_args, forward, weights,
                          dtype=dtype, evaluate=evaluate)

    padding = reference_attention.padding_mask(torch.arange(6) < torch.tensor([6, 3])[:, None])  # (2, 1, 1, 6)
    return [
        case("x (2, 5, 16), no mask", (16, 4, 32), (2, 5, 16)),
        case("x (2, 5, 16), causal mask (5, 5)", (16, 4, 32), (2, 5, 16), reference_attention.causal_mask(5)),
        case("x (2, 6, 8), padding mask (2, 1, 1, 6) for lengths 6 and 3", (8, 2, 16), (2, 6, 8), padding),
        case("x (2, 6, 16), padding mask (2, 1, 1, 6)", (16, 4, 32, 0.3), (2, 6, 16), padding, evaluate=True),
        case("one position: x (1, 1, 8)", (8, 2, 8), (1, 1, 8)),
        case("x (2, 4, 16), float64", (16, 4, 32), (2, 4, 16), dtype=torch.float64),
    ]


def _wrong_encoder_layer(layer, x, mask=None, *, order="post", attention_residual=True, ffn_residual=True,
                         use_mask=True, second_norm="norm2", ffn_input="attention", norms=True,
                         mask_as_context=False):
    """A wrong encoder layer with the weights of ``layer`` (evaluation mode: no dropout)."""
    if mask_as_context:  # self_attn(x, mask): the mask goes in as the context, and the mask is None
        hidden = layer.norm1(x + layer.self_attn(x, mask))
        return layer.norm2(hidden + layer.ffn(hidden))
    norm1 = layer.norm1 if norms else nn.Identity()
    norm2 = {"norm2": layer.norm2, "norm1": layer.norm1}[second_norm] if norms else nn.Identity()
    mask = mask if use_mask else None
    if order == "pre":
        x = x + layer.self_attn(norm1(x), mask=mask)
        return x + layer.ffn(norm2(x))
    if order == "residual_after_norm":
        x = x + norm1(layer.self_attn(x, mask=mask))
        return x + norm2(layer.ffn(x))
    attended = layer.self_attn(x, mask=mask)
    hidden = norm1(x + attended if attention_residual else attended)
    fed = layer.ffn(hidden if ffn_input == "attention" else x)
    return norm2(hidden + fed if ffn_residual else fed)


def encoder_layer_mistakes(layer) -> list[Mistake]:
    wrong = partial(_wrong_encoder_layer, layer)
    return [
        Mistake(partial(wrong, order="pre"),
                "this layer is post-norm, as in the original Transformer: normalize after adding the residual, "
                "x = norm1(x + self_attn(x)), then x = norm2(x + ffn(x)); your layer normalizes the sublayers' "
                "inputs (pre-norm)."),
        Mistake(partial(wrong, order="residual_after_norm"),
                "add the residual before the norm: norm1(x + self_attn(x)), not x + norm1(self_attn(x))."),
        Mistake(partial(wrong, attention_residual=False, ffn_residual=False),
                "add the residual connections: each sublayer's input is added to its output before the "
                "norm, norm1(x + self_attn(x)) and norm2(h + ffn(h))."),
        Mistake(partial(wrong, attention_residual=False),
                "add the residual around the attention: norm1(x + self_attn(x)), not norm1(self_attn(x))."),
        Mistake(partial(wrong, ffn_residual=False),
                "add the residual around the feed-forward network: norm2(h + ffn(h)), not norm2(ffn(h))."),
        Mistake(partial(wrong, norms=False), "normalize after each residual sum: norm1(x + ...) and norm2(h + ...)."),
        Mistake(partial(wrong, second_norm="norm1"),
                "each sublayer has its own norm: norm1 after the attention, norm2 after the feed-forward network."),
        Mistake(partial(wrong, ffn_input="input"),
                "the feed-forward network reads the output of the attention block, h = norm1(x + self_attn(x)), "
                "not the layer's input x."),
        Mistake(partial(wrong, mask_as_context=True),
                "call self_attn(x, mask=mask): the second positional argument of MultiHeadAttention.forward is "
                "the context, so self_attn(x, mask) attends over the mask."),
        Mistake(partial(wrong, use_mask=False), "pass the mask to the self-attention: self_attn(x, mask=mask)."),
    ]


ENCODER_LAYER = Exercise(
    "EncoderLayer", reference.EncoderLayer, encoder_layer_cases, mistakes=encoder_layer_mistakes,
    forbidden=ENCODER_LAYER_FORBIDDEN,
    dependencies={"MultiHeadAttention": reference_attention.MultiHeadAttention, "FeedForward": reference.FeedForward},
    naming_hint=ENCODER_LAYER_NAMING, parameter_names=("x", "mask"), tolerance=MODULE_TOLERANCES,
    compare=compare_module,
    summary="""
    Compare ``EncoderLayer(d_model, num_heads, d_ff, dropout=0.0)`` and its ``forward(x, mask=None)`` with the post-norm
    :class:`bertlab.transformer.EncoderLayer` holding the same weights.

    The student's class runs with the reference ``MultiHeadAttention`` and ``FeedForward`` in place of theirs. Cases: no
    mask, causal and padding masks, dropout 0.3 in evaluation mode (must be off), one position, float64; the norms have
    random gains and shifts. Tolerance: float32 atol 2e-5, rtol 2e-4; float64 the framework's default. Forbidden: the
    reference layer and stack, ``bertlab.norm``'s residual helpers and ``nn.TransformerEncoderLayer`` (and its fused
    kernel).
    """,
)


#: The chapter whose exercises this module checks, and their records, in the order of the chapter.
CHAPTER = "02_transformer"


__getattr__ = check_functions(globals())  # check_<name> for each record above
