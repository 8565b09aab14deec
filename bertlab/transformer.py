"""The Transformer block: feed-forward network, encoder and decoder layers and stacks (chapter 02).

Vaswani et al. (2017), "Attention Is All You Need". Each layer wraps its sublayers (self-attention,
cross-attention, feed-forward) in a residual connection with a normalization, either after the sum
(post-norm, the original Transformer and BERT: x <- Norm(x + Sublayer(x))) or before the sublayer
(pre-norm, Xiong et al., 2020: x <- x + Sublayer(Norm(x))). The layout of the layers, their submodule
names and the places of dropout follow ``nn.TransformerEncoderLayer`` and ``nn.TransformerDecoderLayer``,
so their weights copy in and give the same outputs.

Shapes: B batch, N target (or encoder) length, M source length, d_model model width.
"""

import math
from functools import partial

import torch
from torch import nn

from bertlab.attention import MultiHeadAttention, causal_mask, padding_mask
from bertlab.norm import build_norm, post_norm_residual, pre_norm_residual
from bertlab.positional import sinusoidal_positional_encoding

ACTIVATIONS = {
    "relu": nn.ReLU,  # max(0, x), the original Transformer
    "gelu": nn.GELU,  # exact x * Phi(x) with the erf, as BERT (and Hugging Face's "gelu")
    "gelu_tanh": partial(nn.GELU, approximate="tanh"),  # the tanh approximation (GPT-2's "gelu_new")
    "silu": nn.SiLU,  # x * sigmoid(x)
}


class FeedForward(nn.Module):
    """Position-wise feed-forward network: FFN(x) = act(x W_1 + b_1) W_2 + b_2.

    Applied to each position separately: (..., d_model) -> (..., d_ff) -> (..., d_model).

    Args:
        d_model: model width.
        d_ff: hidden width (4 * d_model in the original Transformer and BERT).
        activation: one of "relu", "gelu" (exact, erf), "gelu_tanh", "silu".
        dropout: dropout after the activation, as in ``nn.TransformerEncoderLayer``.
    """

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu", dropout: float = 0.0):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; expected one of {', '.join(map(repr, ACTIVATIONS))}")
        self.linear1 = nn.Linear(d_model, d_ff)
        self.activation = ACTIVATIONS[activation]()
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d_model) -> (..., d_model)."""
        return self.linear2(self.dropout(self.activation(self.linear1(x))))


class EncoderLayer(nn.Module):
    """One encoder layer: self-attention, then the feed-forward network, each in a residual block.

    Post-norm (``norm_first=False``):  x <- Norm_1(x + Dropout(SelfAttention(x)));
                                       x <- Norm_2(x + Dropout(FFN(x))).
    Pre-norm (``norm_first=True``):    x <- x + Dropout(SelfAttention(Norm_1(x)));
                                       x <- x + Dropout(FFN(Norm_2(x))).

    Args:
        d_model: model width.
        num_heads: attention heads; must divide ``d_model``.
        d_ff: hidden width of the feed-forward network.
        dropout: dropout on each sublayer's output and inside the feed-forward network.
        activation: feed-forward activation, see :class:`FeedForward`.
        norm_first: pre-norm when True, post-norm (original Transformer, BERT) when False.
        norm: "layernorm" or "rmsnorm".
        eps: the norms' epsilon.
        attention_dropout: dropout on the attention weights; defaults to ``dropout``
            (BERT has separate hidden and attention dropout probabilities).
        ffn_dropout: dropout between the two feed-forward matrices; defaults to ``dropout``
            (as ``nn.TransformerEncoderLayer``; BERT has none there and passes 0.0).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        activation: str = "relu",
        norm_first: bool = False,
        norm: str = "layernorm",
        eps: float = 1e-5,
        attention_dropout: float | None = None,
        ffn_dropout: float | None = None,
    ):
        super().__init__()
        attention_dropout = dropout if attention_dropout is None else attention_dropout
        ffn_dropout = dropout if ffn_dropout is None else ffn_dropout
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=attention_dropout)
        self.ffn = FeedForward(d_model, d_ff, activation, ffn_dropout)
        self.norm1 = build_norm(norm, d_model, eps)
        self.norm2 = build_norm(norm, d_model, eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.norm_first = norm_first
        self.residual = pre_norm_residual if norm_first else post_norm_residual

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, need_weights: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """x (B, N, d_model) -> (B, N, d_model), and the attention weights (B, H, N, N) when
        ``need_weights``. ``mask``: bool, broadcastable to (B, H, N, N), True = may attend."""
        weights = None

        def self_attention(h: torch.Tensor) -> torch.Tensor:
            nonlocal weights
            attended = self.self_attn(h, mask=mask, need_weights=need_weights)
            if need_weights:
                attended, weights = attended
            return self.dropout1(attended)

        x = self.residual(x, self_attention, self.norm1)
        x = self.residual(x, lambda h: self.dropout2(self.ffn(h)), self.norm2)
        return (x, weights) if need_weights else x


class DecoderLayer(nn.Module):
    """One decoder layer: masked self-attention, cross-attention over the encoder output (memory),
    then the feed-forward network, each in a residual block (post- or pre-norm, as in
    :class:`EncoderLayer`). Same arguments as :class:`EncoderLayer`."""

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        activation: str = "relu",
        norm_first: bool = False,
        norm: str = "layernorm",
        eps: float = 1e-5,
        attention_dropout: float | None = None,
    ):
        super().__init__()
        attention_dropout = dropout if attention_dropout is None else attention_dropout
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=attention_dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout=attention_dropout)
        self.ffn = FeedForward(d_model, d_ff, activation, dropout)
        self.norm1 = build_norm(norm, d_model, eps)
        self.norm2 = build_norm(norm, d_model, eps)
        self.norm3 = build_norm(norm, d_model, eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)
        self.norm_first = norm_first
        self.residual = pre_norm_residual if norm_first else post_norm_residual

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        self_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x (B, N, d_model), memory (B, M, d_model) -> (B, N, d_model).

        ``self_mask``: bool, broadcastable to (B, H, N, N), e.g. a :func:`causal_mask`;
        ``memory_mask``: bool, broadcastable to (B, H, N, M), e.g. a source :func:`padding_mask`.
        """
        x = self.residual(x, lambda h: self.dropout1(self.self_attn(h, mask=self_mask)), self.norm1)
        x = self.residual(
            x, lambda h: self.dropout2(self.cross_attn(h, context=memory, mask=memory_mask)), self.norm2
        )
        return self.residual(x, lambda h: self.dropout3(self.ffn(h)), self.norm3)


class Encoder(nn.Module):
    """A stack of ``num_layers`` :class:`EncoderLayer`, plus a final norm when pre-norm (the residual
    stream of a pre-norm stack is otherwise never normalized). Arguments as for :class:`EncoderLayer`."""

    def __init__(
        self,
        num_layers: int,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        activation: str = "relu",
        norm_first: bool = False,
        norm: str = "layernorm",
        eps: float = 1e-5,
        attention_dropout: float | None = None,
    ):
        super().__init__()
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, num_heads, d_ff, dropout, activation, norm_first, norm, eps, attention_dropout)
            for _ in range(num_layers)
        )
        self.norm = build_norm(norm, d_model, eps) if norm_first else None

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, N, d_model) -> (B, N, d_model); ``mask`` as for :meth:`EncoderLayer.forward`."""
        for layer in self.layers:
            x = layer(x, mask=mask)
        return x if self.norm is None else self.norm(x)


class Decoder(nn.Module):
    """A stack of ``num_layers`` :class:`DecoderLayer`, plus a final norm when pre-norm.
    Arguments as for :class:`EncoderLayer`."""

    def __init__(
        self,
        num_layers: int,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        activation: str = "relu",
        norm_first: bool = False,
        norm: str = "layernorm",
        eps: float = 1e-5,
        attention_dropout: float | None = None,
    ):
        super().__init__()
        self.layers = nn.ModuleList(
            DecoderLayer(d_model, num_heads, d_ff, dropout, activation, norm_first, norm, eps, attention_dropout)
            for _ in range(num_layers)
        )
        self.norm = build_norm(norm, d_model, eps) if norm_first else None

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        self_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x (B, N, d_model), memory (B, M, d_model) -> (B, N, d_model); masks as for
        :meth:`DecoderLayer.forward`."""
        for layer in self.layers:
            x = layer(x, memory, self_mask=self_mask, memory_mask=memory_mask)
        return x if self.norm is None else self.norm(x)


class Transformer(nn.Module):
    """The encoder-decoder Transformer of Vaswani et al. (2017), for sequence-to-sequence tasks.

    Tokens are embedded, scaled by sqrt(d_model) and added to sinusoidal position encodings:
    h_0 = sqrt(d_model) * E[token] + PE[position], then dropout. The encoder reads the source; the
    decoder reads the target shifted right (starting with a BOS token) under a causal mask, attends
    over the encoder output, and a final linear layer gives logits over the target vocabulary.
    Source padding tokens (``pad_id``) are masked as keys; the target is right-padded, so the causal
    mask already keeps real target positions from seeing its padding. Weights are initialized as in
    ``nn.Transformer`` (Xavier uniform for every matrix).

    Args:
        src_vocab_size: size of the source vocabulary.
        tgt_vocab_size: size of the target vocabulary.
        d_model: model width (512 in the paper's base model).
        num_heads: attention heads per layer (8).
        num_encoder_layers: encoder layers (6).
        num_decoder_layers: decoder layers (6).
        d_ff: feed-forward hidden width (2048).
        dropout: dropout on embeddings, sublayer outputs and attention weights (0.1).
        activation: feed-forward activation, see :class:`FeedForward`.
        norm_first: pre-norm when True, post-norm (the paper) when False.
        norm: "layernorm" or "rmsnorm".
        eps: the norms' epsilon.
        max_positions: longest source or target sequence the position table covers.
        pad_id: the padding token id, in both vocabularies.
    """

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        d_model: int = 512,
        num_heads: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        d_ff: int = 2048,
        dropout: float = 0.1,
        activation: str = "relu",
        norm_first: bool = False,
        norm: str = "layernorm",
        eps: float = 1e-5,
        max_positions: int = 512,
        pad_id: int = 0,
    ):
        super().__init__()
        self.d_model = d_model
        self.pad_id = pad_id
        self.src_embed = nn.Embedding(src_vocab_size, d_model)
        self.tgt_embed = nn.Embedding(tgt_vocab_size, d_model)
        self.register_buffer(
            "positions", sinusoidal_positional_encoding(max_positions, d_model), persistent=False
        )  # (P, d_model)
        self.dropout = nn.Dropout(dropout)
        stack_args = (d_model, num_heads, d_ff, dropout, activation, norm_first, norm, eps)
        self.encoder = Encoder(num_encoder_layers, *stack_args)
        self.decoder = Decoder(num_decoder_layers, *stack_args)
        self.output_proj = nn.Linear(d_model, tgt_vocab_size)
        for parameter in self.parameters():
            if parameter.dim() > 1:
                nn.init.xavier_uniform_(parameter)

    def _embed(self, embedding: nn.Embedding, tokens: torch.Tensor) -> torch.Tensor:
        """(B, L) token ids -> (B, L, d_model): sqrt(d_model) * E[token] + PE[position], dropout."""
        if tokens.dim() != 2 or tokens.shape[1] > len(self.positions):
            raise ValueError(
                f"tokens must be (B, L) with L <= max_positions={len(self.positions)}, got shape {tuple(tokens.shape)}"
            )
        length = tokens.shape[1]
        return self.dropout(embedding(tokens) * math.sqrt(self.d_model) + self.positions[:length])

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """src (B, M) token ids -> memory (B, M, d_model) and the source padding mask (B, 1, 1, M)."""
        src_mask = padding_mask(src != self.pad_id)
        return self.encoder(self._embed(self.src_embed, src), mask=src_mask), src_mask

    def decode(self, tgt: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """tgt (B, N) decoder input ids, memory (B, M, d_model) -> logits (B, N, tgt_vocab_size)."""
        self_mask = causal_mask(tgt.shape[1], device=tgt.device)  # (N, N); it also hides right padding
        hidden = self.decoder(self._embed(self.tgt_embed, tgt), memory, self_mask=self_mask, memory_mask=src_mask)
        return self.output_proj(hidden)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: src (B, M) and the shifted-right target tgt (B, N) -> logits (B, N, V).

        Logits at position i predict target token i + 1 from tokens 0..i and the whole source.
        """
        memory, src_mask = self.encode(src)
        return self.decode(tgt, memory, src_mask)

    @torch.no_grad()
    def generate(
        self, src: torch.Tensor, max_new_tokens: int, bos_id: int, eos_id: int | None = None
    ) -> torch.Tensor:
        """Greedy decoding: start from BOS and append the most likely next token, one at a time.

        The decoder is re-run over the whole prefix at each step (no key/value cache), which is fine
        for the short sequences of the course. Call ``model.eval()`` first to switch dropout off.

        Args:
            src: (B, M) source token ids.
            max_new_tokens: the most tokens to generate after BOS.
            bos_id: the token that starts every target.
            eos_id: if given, a sequence stops at its first ``eos_id`` (later positions are
                ``pad_id``) and decoding stops once every sequence has stopped.

        Returns:
            (B, 1 + L) token ids starting with BOS, L <= ``max_new_tokens``.
        """
        memory, src_mask = self.encode(src)
        tokens = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
        finished = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        for _ in range(max_new_tokens):
            next_token = self.decode(tokens, memory, src_mask)[:, -1].argmax(dim=-1)  # (B,)
            if eos_id is not None:
                next_token = next_token.masked_fill(finished, self.pad_id)
                finished = finished | (next_token == eos_id)
            tokens = torch.cat([tokens, next_token[:, None]], dim=1)
            if eos_id is not None and finished.all():
                break
        return tokens
