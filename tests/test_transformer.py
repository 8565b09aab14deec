"""Tests for bertlab.transformer, against nn.TransformerEncoderLayer / DecoderLayer and on a toy task."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bertlab.attention import MultiHeadAttention, causal_mask, padding_mask
from bertlab.norm import LayerNorm, RMSNorm
from bertlab.transformer import Decoder, DecoderLayer, Encoder, EncoderLayer, FeedForward, Transformer
from bertlab.utils import seed_everything

D_MODEL, HEADS, D_FF = 16, 4, 32


def copy_attention(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    """nn.MultiheadAttention keeps q, k, v stacked in one in_proj; ours has three nn.Linear."""
    with torch.no_grad():
        for proj, weight, bias in zip(
            (ours.q_proj, ours.k_proj, ours.v_proj), theirs.in_proj_weight.chunk(3), theirs.in_proj_bias.chunk(3)
        ):
            proj.weight.copy_(weight)
            proj.bias.copy_(bias)
        ours.out_proj.load_state_dict(theirs.out_proj.state_dict())


def copy_layer(ours: EncoderLayer | DecoderLayer, theirs: nn.TransformerEncoderLayer | nn.TransformerDecoderLayer):
    copy_attention(ours.self_attn, theirs.self_attn)
    if isinstance(ours, DecoderLayer):
        copy_attention(ours.cross_attn, theirs.multihead_attn)
        ours.norm3.load_state_dict(theirs.norm3.state_dict())
    ours.ffn.linear1.load_state_dict(theirs.linear1.state_dict())
    ours.ffn.linear2.load_state_dict(theirs.linear2.state_dict())
    ours.norm1.load_state_dict(theirs.norm1.state_dict())
    ours.norm2.load_state_dict(theirs.norm2.state_dict())


def torch_layer_kwargs(norm_first, activation):
    return dict(
        d_model=D_MODEL, nhead=HEADS, dim_feedforward=D_FF, dropout=0.1, activation=activation,
        batch_first=True, norm_first=norm_first,
    )


def our_layer_kwargs(norm_first, activation):
    return dict(d_model=D_MODEL, num_heads=HEADS, d_ff=D_FF, dropout=0.1, activation=activation, norm_first=norm_first)


# --------------------------------------------------------------------------------------------------
# FeedForward
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "activation, function",
    [
        ("relu", F.relu),
        ("gelu", lambda x: x * 0.5 * (1 + torch.erf(x / 2**0.5))),
        ("gelu_tanh", lambda x: 0.5 * x * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (x + 0.044715 * x**3)))),
        ("silu", lambda x: x * torch.sigmoid(x)),
    ],
)
def test_feed_forward_is_linear_activation_linear(activation, function):
    ffn = FeedForward(D_MODEL, D_FF, activation=activation)
    x = torch.randn(2, 5, D_MODEL)
    expected = function(x @ ffn.linear1.weight.T + ffn.linear1.bias) @ ffn.linear2.weight.T + ffn.linear2.bias
    torch.testing.assert_close(ffn(x), expected)


def test_unknown_activation_lists_the_valid_names():
    with pytest.raises(ValueError, match="'swish'.*'relu', 'gelu', 'gelu_tanh', 'silu'"):
        FeedForward(D_MODEL, D_FF, activation="swish")


# --------------------------------------------------------------------------------------------------
# layers and stacks against torch
# --------------------------------------------------------------------------------------------------


LAYER_CASES = pytest.mark.parametrize(
    "norm_first, activation",
    [(False, "relu"), (True, "relu"), (False, "gelu"), (True, "gelu")],
    ids=["post-norm", "pre-norm", "post-norm-gelu", "pre-norm-gelu"],
)


@LAYER_CASES
def test_encoder_layer_matches_torch(device, norm_first, activation):
    theirs = nn.TransformerEncoderLayer(**torch_layer_kwargs(norm_first, activation), device=device).eval()
    ours = EncoderLayer(**our_layer_kwargs(norm_first, activation)).to(device).eval()
    copy_layer(ours, theirs)
    x = torch.randn(2, 6, D_MODEL, device=device)
    attention_mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]], device=device)
    expected = theirs(x, src_key_padding_mask=attention_mask == 0)  # torch: True = padding
    torch.testing.assert_close(ours(x, mask=padding_mask(attention_mask)), expected)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_rmsnorm_encoder_layer_matches_torch_with_rmsnorm(norm_first):
    theirs = nn.TransformerEncoderLayer(**torch_layer_kwargs(norm_first, "relu"), layer_norm_eps=1e-6)
    theirs.norm1, theirs.norm2 = nn.RMSNorm(D_MODEL, eps=1e-6), nn.RMSNorm(D_MODEL, eps=1e-6)
    nn.init.normal_(theirs.norm1.weight)
    theirs.eval()
    torch.backends.mha.set_fastpath_enabled(False)  # its fused path assumes LayerNorm
    try:
        ours = EncoderLayer(**our_layer_kwargs(norm_first, "relu"), norm="rmsnorm", eps=1e-6).eval()
        assert isinstance(ours.norm1, RMSNorm)
        copy_layer(ours, theirs)
        x = torch.randn(2, 6, D_MODEL)
        torch.testing.assert_close(ours(x, mask=causal_mask(6)), theirs(x, src_mask=~causal_mask(6)))
    finally:
        torch.backends.mha.set_fastpath_enabled(True)


@LAYER_CASES
def test_decoder_layer_matches_torch(norm_first, activation):
    theirs = nn.TransformerDecoderLayer(**torch_layer_kwargs(norm_first, activation)).eval()
    ours = DecoderLayer(**our_layer_kwargs(norm_first, activation)).eval()
    copy_layer(ours, theirs)
    x, memory = torch.randn(2, 5, D_MODEL), torch.randn(2, 7, D_MODEL)
    memory_attention = torch.tensor([[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0, 0]])
    expected = theirs(x, memory, tgt_mask=~causal_mask(5), memory_key_padding_mask=memory_attention == 0)
    result = ours(x, memory, self_mask=causal_mask(5), memory_mask=padding_mask(memory_attention))
    torch.testing.assert_close(result, expected)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_encoder_and_decoder_stacks_match_torch(norm_first):
    kwargs = torch_layer_kwargs(norm_first, "gelu")
    final_norm = nn.LayerNorm(D_MODEL) if norm_first else None
    their_encoder = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(**kwargs), 2, norm=final_norm, enable_nested_tensor=False
    ).eval()
    their_decoder = nn.TransformerDecoder(
        nn.TransformerDecoderLayer(**kwargs), 2, norm=nn.LayerNorm(D_MODEL) if norm_first else None
    ).eval()
    our_encoder = Encoder(2, D_MODEL, HEADS, D_FF, 0.1, "gelu", norm_first).eval()
    our_decoder = Decoder(2, D_MODEL, HEADS, D_FF, 0.1, "gelu", norm_first).eval()
    for ours, theirs in ((our_encoder, their_encoder), (our_decoder, their_decoder)):
        assert len(ours.layers) == 2 and (ours.norm is not None) == norm_first
        for our_layer, their_layer in zip(ours.layers, theirs.layers):
            nn.init.normal_(their_layer.norm1.weight)  # non-trivial norm weights to copy
            copy_layer(our_layer, their_layer)
        if norm_first:
            nn.init.normal_(theirs.norm.bias)
            ours.norm.load_state_dict(theirs.norm.state_dict())

    src, tgt = torch.randn(2, 7, D_MODEL), torch.randn(2, 5, D_MODEL)
    memory = our_encoder(src)
    torch.testing.assert_close(memory, their_encoder(src))
    torch.testing.assert_close(
        our_decoder(tgt, memory, self_mask=causal_mask(5)), their_decoder(tgt, memory, tgt_mask=~causal_mask(5))
    )


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_encoder_layer_returns_its_attention_weights(norm_first):
    layer = EncoderLayer(D_MODEL, HEADS, D_FF, norm_first=norm_first).eval()
    x, mask = torch.randn(2, 6, D_MODEL), causal_mask(6)
    output, weights = layer(x, mask=mask, need_weights=True)
    torch.testing.assert_close(output, layer(x, mask=mask))
    attention_input = layer.norm1(x) if norm_first else x
    torch.testing.assert_close(weights, layer.self_attn(attention_input, mask=mask, need_weights=True)[1])
    assert weights.shape == (2, HEADS, 6, 6)


def test_layers_use_the_requested_norm_and_dropouts():
    layer = DecoderLayer(D_MODEL, HEADS, D_FF, dropout=0.1, norm="rmsnorm", eps=1e-6, attention_dropout=0.3)
    assert all(isinstance(norm, RMSNorm) and norm.eps == 1e-6 for norm in (layer.norm1, layer.norm2, layer.norm3))
    assert layer.self_attn.dropout == layer.cross_attn.dropout == 0.3
    assert layer.ffn.dropout.p == 0.1
    encoder_layer = EncoderLayer(D_MODEL, HEADS, D_FF, dropout=0.2)
    assert isinstance(encoder_layer.norm1, LayerNorm) and encoder_layer.self_attn.dropout == 0.2
    with pytest.raises(ValueError, match="batchnorm"):
        EncoderLayer(D_MODEL, HEADS, D_FF, norm="batchnorm")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_encoder_layer_in_half_precision_on_cpu(dtype):
    layer = EncoderLayer(D_MODEL, HEADS, D_FF, activation="gelu").eval()
    x = torch.randn(2, 6, D_MODEL)
    expected = layer(x, mask=causal_mask(6))
    result = layer.to(dtype)(x.to(dtype), mask=causal_mask(6))
    assert result.dtype == dtype
    torch.testing.assert_close(result.float(), expected, atol=5e-2, rtol=5e-2)


# --------------------------------------------------------------------------------------------------
# the encoder-decoder Transformer
# --------------------------------------------------------------------------------------------------


def tiny_transformer(**kwargs):
    return Transformer(11, 13, d_model=D_MODEL, num_heads=HEADS, num_encoder_layers=2, num_decoder_layers=2,
                       d_ff=D_FF, max_positions=16, **kwargs)


def test_transformer_masks_the_future_and_the_padding(device):
    model = tiny_transformer().to(device).eval()
    src = torch.tensor([[5, 6, 7, 0], [3, 4, 0, 0]], device=device)
    tgt = torch.tensor([[1, 8, 9, 10], [1, 4, 3, 0]], device=device)
    logits = model(src, tgt)
    assert logits.shape == (2, 4, 13)
    # The future does not leak: changing the last target token leaves earlier logits unchanged.
    changed = tgt.clone()
    changed[:, -1] = 12
    torch.testing.assert_close(model(src, changed)[:, :-1], logits[:, :-1])
    # Padding is ignored: more padding on the source or the target changes nothing.
    padded_src = torch.cat([src, torch.zeros(2, 3, dtype=torch.long, device=device)], dim=1)
    torch.testing.assert_close(model(padded_src, tgt), logits)
    padded_tgt = torch.cat([tgt, torch.zeros(2, 2, dtype=torch.long, device=device)], dim=1)
    torch.testing.assert_close(model(src, padded_tgt)[:, :4], logits)


def test_transformer_gradients_reach_every_parameter():
    model = tiny_transformer(norm_first=True, norm="rmsnorm")
    src, tgt = torch.randint(1, 11, (2, 5)), torch.randint(1, 13, (2, 4))
    model(src, tgt).sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_transformer_bad_input_raises_value_errors():
    model = tiny_transformer()
    with pytest.raises(ValueError, match=r"max_positions=16.*\(1, 17\)"):
        model(torch.ones(1, 17, dtype=torch.long), torch.ones(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\(B, L\).*\(5,\)"):
        model(torch.ones(5, dtype=torch.long), torch.ones(1, 3, dtype=torch.long))


PAD, BOS, EOS, FIRST_DIGIT, VOCAB, MAX_LEN = 0, 1, 2, 3, 13, 8


def reversal_batch(size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Digit strings of length 3..8 (padded) and their reversals as BOS + reversed + EOS (padded)."""
    src = torch.full((size, MAX_LEN), PAD)
    tgt = torch.full((size, MAX_LEN + 2), PAD)
    for i, length in enumerate(torch.randint(3, MAX_LEN + 1, (size,), generator=generator).tolist()):
        digits = torch.randint(FIRST_DIGIT, VOCAB, (length,), generator=generator)
        src[i, :length] = digits
        tgt[i, 0], tgt[i, 1 : length + 1], tgt[i, length + 1] = BOS, digits.flip(0), EOS
    return src, tgt


@pytest.mark.slow
def test_transformer_learns_to_reverse_sequences(one_thread):
    """About 15 s on one CPU core: 400 Adam steps on random digit strings, then greedy decoding."""
    generator = seed_everything(0)
    model = Transformer(VOCAB, VOCAB, d_model=64, num_heads=4, num_encoder_layers=2, num_decoder_layers=2,
                        d_ff=128, dropout=0.0, max_positions=16, pad_id=PAD)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(400):
        src, tgt = reversal_batch(64, generator)
        logits = model(src, tgt[:, :-1])  # teacher forcing: predict tgt[1:] from tgt[:-1]
        loss = F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    model.eval()
    src, tgt = reversal_batch(200, torch.Generator().manual_seed(1234))  # held-out strings
    generated = model.generate(src, max_new_tokens=MAX_LEN + 1, bos_id=BOS, eos_id=EOS)
    assert generated[:, 0].eq(BOS).all() and generated.shape[1] <= MAX_LEN + 2
    predicted = F.pad(generated, (0, tgt.shape[1] - generated.shape[1]), value=PAD)
    accuracy = predicted.eq(tgt).all(dim=1).float().mean().item()
    assert accuracy > 0.9, f"exact-match accuracy {accuracy:.3f}"
