"""GPT: a decoder-only Transformer language model, its KV cache and its samplers (chapter 11).

GPT-2 (Radford et al., 2019) is a stack of pre-norm Transformer blocks with causal self-attention over
the sum of token and learned position embeddings, read out by the token embeddings themselves:

    h_0 = Dropout(E_token[x_i] + E_position[i])
    h_l = h'_l + MLP(LayerNorm(h'_l)),  h'_l = h_{l-1} + CausalSelfAttention(LayerNorm(h_{l-1}))
    logits_i = LayerNorm(h_L[i]) E_token^T                 (tied input and output embeddings)
    p(x_{i+1} | x_1 .. x_i) = softmax(logits_i)

Position i attends to positions j <= i only, so the logits at i predict token i + 1, and a text is
generated one token at a time. The keys and values of the tokens already seen never change: a
:class:`KVCache` keeps them, and each new token costs one position instead of the whole prefix.

:class:`GPTForSequenceClassification` fine-tunes the decoder to classify a whole text from the state of
its last token (Radford et al., 2018) or the mean of its states, in ``bertlab.finetuning``'s path as BERT.

Weights are interchangeable with Hugging Face ``transformers``: the parameter names are those of
``GPT2LMHeadModel`` and ``GPT2ForSequenceClassification`` (``transformer.h.0.attn.c_attn.weight``,
``score.weight``, ...), and ``from_pretrained`` and ``save_pretrained`` read and write their checkpoint
folders. GPT-2's projections are ``Conv1D`` modules whose weight is (in, out), the transpose of
``nn.Linear``'s (out, in): they are transposed on the way in and on the way out.

Shapes: B batch, N new positions, M = cached + new positions, C width (n_embd), H heads,
D = C / H head size, V vocabulary size.
"""

import dataclasses
import re
import warnings
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from bertlab.attention import fused_attention, padding_mask
from bertlab.bert import (
    HF_ACTIVATIONS,
    IGNORE_INDEX,
    LoadResult,
    SequenceClassifierOutput,
    check_index_range,
    check_num_labels,
    checkpoint_files,
    classifier_output,
    init_bert_weights,
    label_config,
    mean_over_tokens,
    num_labels_from_config,
    read_config_file,
    read_weights,
    write_checkpoint,
)
from bertlab.norm import LayerNorm, pre_norm_residual
from bertlab.positional import LearnedPositionalEmbedding
from bertlab.transformer import ACTIVATIONS
from bertlab.utils import check_preset

# --------------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------------

# name: (layers L, width C, heads H, and other fields). GPT-2's four sizes (Radford et al., 2019), and
# the course GPT: the course BERT's size class (4/256/4, within 2% of its parameters) and vocabulary,
# [CLS] as the start and [SEP] as the end of a text.
PRESETS = {
    "gpt2": (12, 768, 12, {}),
    "gpt2-medium": (24, 1024, 16, {}),
    "gpt2-large": (36, 1280, 20, {}),
    "gpt2-xl": (48, 1600, 25, {}),
    "course": (4, 256, 4, dict(vocab_size=8192, n_positions=512, bos_token_id=2, eos_token_id=3, pad_token_id=0)),
}
# The text vectors GPTForSequenceClassification can classify: the last token's state, the mean of the states.
POOLINGS = ("last", "mean")
# Options of Hugging Face's GPT2Config that change the function computed, and the only value this
# module implements: a config.json with another value is refused rather than loaded into wrong logits.
_HF_FIXED_OPTIONS = {
    "scale_attn_weights": True,
    "scale_attn_by_inverse_layer_idx": False,
    "add_cross_attention": False,
    "tie_word_embeddings": True,
}


@dataclasses.dataclass(frozen=True)
class GPTConfig:
    """The hyperparameters of a GPT-2 model, with the field names of Hugging Face's ``GPT2Config``
    (and its ``config.json``). The defaults are GPT-2 small (124M); see :meth:`preset`. Frozen: a model
    keeps the config it was built with; ``dataclasses.replace(config, n_layer=2)`` makes another.

    ``n_inner`` is the feed-forward width (None: 4 n_embd); ``activation_function`` is one of
    :data:`bertlab.transformer.ACTIVATIONS` ("gelu_tanh" is GPT-2's "gelu_new"); ``resid_pdrop``,
    ``embd_pdrop`` and ``attn_pdrop`` are the dropout after each residual branch, on the embeddings and
    on the attention weights. ``classifier_pooling``, the text vector :class:`GPTForSequenceClassification`
    classifies, "last" (the state of the last token that is not ``pad_token_id``, as Hugging Face's
    ``GPT2ForSequenceClassification``) or "mean" (the mean of the final states over the real tokens), is
    bertlab's own field: Hugging Face's class ignores it and always reads the last token.
    """

    vocab_size: int = 50257
    n_positions: int = 1024
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    n_inner: int | None = None
    activation_function: str = "gelu_tanh"
    resid_pdrop: float = 0.1
    embd_pdrop: float = 0.1
    attn_pdrop: float = 0.1
    layer_norm_epsilon: float = 1e-5
    initializer_range: float = 0.02
    bos_token_id: int | None = 50256
    eos_token_id: int | None = 50256
    pad_token_id: int | None = None
    classifier_pooling: str = "last"

    def __post_init__(self):
        for name in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "n_inner"):
            value = getattr(self, name)
            if value is None and name == "n_inner":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"GPTConfig.{name} must be a positive integer, got {value!r}")
        if self.n_embd % self.n_head != 0:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head}): "
                             f"each head gets n_embd / n_head features")
        for name in ("resid_pdrop", "embd_pdrop", "attn_pdrop"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"GPTConfig.{name} must be in [0, 1), got {getattr(self, name)!r}")
        if self.activation_function not in ACTIVATIONS:
            raise ValueError(f"unknown activation_function {self.activation_function!r}; expected one of "
                             f"{', '.join(map(repr, ACTIVATIONS))}")
        for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or not 0 <= value < self.vocab_size):
                raise ValueError(f"GPTConfig.{name} must be None or in [0, vocab_size={self.vocab_size}), "
                                 f"got {value!r}")
        if not self.layer_norm_epsilon > 0 or not self.initializer_range > 0:
            raise ValueError("layer_norm_epsilon and initializer_range must be > 0")
        if self.classifier_pooling not in POOLINGS:
            raise ValueError(f"unknown classifier_pooling {self.classifier_pooling!r}; expected one of "
                             f"{', '.join(map(repr, POOLINGS))}")

    @property
    def inner_size(self) -> int:
        """The feed-forward width I: ``n_inner``, or 4 C."""
        return 4 * self.n_embd if self.n_inner is None else self.n_inner

    @property
    def max_position_embeddings(self) -> int:
        """``n_positions`` under BERT's name, as Hugging Face's ``GPT2Config`` aliases it (read by
        :func:`bertlab.pretraining.pretrain`)."""
        return self.n_positions

    @property
    def hidden_size(self) -> int:
        """``n_embd`` under BERT's name, as Hugging Face's ``GPT2Config`` aliases it."""
        return self.n_embd

    @property
    def num_hidden_layers(self) -> int:
        """``n_layer`` under BERT's name, as Hugging Face's ``GPT2Config`` aliases it."""
        return self.n_layer

    @classmethod
    def preset(cls, name: str, **overrides) -> "GPTConfig":
        """The configuration of a named size, with fields overridden: GPT-2's "gpt2", "gpt2-medium",
        "gpt2-large", "gpt2-xl" (L/C/H = 12/768/12, 24/1024/16, 36/1280/20, 48/1600/25), or "course"
        (4/256/4 over the course BERT's 8,192-token vocabulary and 512 positions).
        Example: ``GPTConfig.preset("course", n_layer=2)``."""
        check_preset(cls, PRESETS, name, overrides, "GPT")
        layers, width, heads, fields = PRESETS[name]
        return cls(**{"n_layer": layers, "n_embd": width, "n_head": heads, **fields, **overrides})

    def to_dict(self) -> dict:
        """The fields as a dict in Hugging Face's ``config.json`` layout (``model_type`` "gpt2", the
        activation under Hugging Face's name)."""
        fields = dataclasses.asdict(self)
        if self.activation_function == "gelu_tanh":
            fields["activation_function"] = "gelu_new"
        return {"model_type": "gpt2", **fields}

    @classmethod
    def from_dict(cls, values: dict) -> "GPTConfig":
        """Read a dict such as a Hugging Face GPT-2 ``config.json``; keys that are not fields are ignored.

        Raises:
            ValueError: for an option of Hugging Face's GPT-2 that this model does not implement
                (unscaled or layer-scaled attention, cross-attention, untied output embeddings).
        """
        for key, supported in _HF_FIXED_OPTIONS.items():
            if values.get(key, supported) != supported:
                raise ValueError(f"config {key}={values[key]!r} is not supported: bertlab's GPT has {key}={supported}")
        names = {field.name for field in dataclasses.fields(cls)}
        fields = {key: value for key, value in values.items() if key in names}
        if "activation_function" in fields:
            fields["activation_function"] = HF_ACTIVATIONS.get(fields["activation_function"],
                                                               fields["activation_function"])
        return cls(**fields)


def count_gpt_parameters(config: GPTConfig) -> int:
    """The number of parameters of ``GPTLMHeadModel(config)``, in closed form (named apart from
    :func:`bertlab.bert.count_parameters`, chapter 06's exercise, which the grader finds by name).

    With V vocab_size, P n_positions, C n_embd, I the feed-forward width and L n_layer:

        embeddings  = (V + P) C                        (the output layer is E_token itself: no extra)
        per layer   = (3 C^2 + 3 C) + (C^2 + C)        (c_attn: queries, keys, values; c_proj)
                    + (C I + I) + (I C + C)            (c_fc, c_proj of the MLP)
                    + 2 * 2C                           (ln_1, ln_2)
        total = embeddings + L * per layer + 2C        (2C: the final ln_f)

    GPT-2 small (V = 50,257, P = 1,024, C = 768, I = 3,072, L = 12) has 124,439,808.
    """
    V, P, C = config.vocab_size, config.n_positions, config.n_embd
    I, L = config.inner_size, config.n_layer
    per_layer = (3 * C * C + 3 * C) + (C * C + C) + (C * I + I) + (I * C + C) + 2 * 2 * C
    return (V + P) * C + L * per_layer + 2 * C


# --------------------------------------------------------------------------------------------------
# The KV cache
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class KVCache:
    """The keys and values of the positions decoded so far, one pair of tensors per layer.

    A forward pass given a cache attends over the cached keys and values and its own
    (:func:`attend_with_cache`), and keeps the extended ones; its positions start at :attr:`length`.
    Start with ``KVCache()``, pass the prompt once, then one token at a time.

    Size: 2 (keys, values) * B * M * L * H * D values, as chapter 05's
    :func:`~bertlab.efficient.kv_cache_bytes` counts; :attr:`nbytes` measures it.
    """

    keys: list[torch.Tensor] = dataclasses.field(default_factory=list)  # per layer, (B, H, M, D)
    values: list[torch.Tensor] = dataclasses.field(default_factory=list)  # per layer, (B, H, M, D)

    @property
    def length(self) -> int:
        """M, the number of cached positions (0 for an empty cache)."""
        return self.keys[0].shape[-2] if self.keys else 0

    @property
    def batch_size(self) -> int | None:
        """B, or None for an empty cache."""
        return self.keys[0].shape[0] if self.keys else None

    @property
    def nbytes(self) -> int:
        """Bytes held by the cached keys and values."""
        return sum(tensor.numel() * tensor.element_size() for tensor in (*self.keys, *self.values))

    def past(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The cached keys and values of ``layer``, (B, H, M, D) each; before the layer's first step, empty
        ones (M = 0) of the shape, dtype and device of its new keys and values k, v (B, H, N, D)."""
        if layer < len(self.keys):
            return self.keys[layer], self.values[layer]
        return k[..., :0, :], v[..., :0, :]

    def store(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Keep the extended keys and values (B, H, M, D) of ``layer`` (its first step appends the layer)."""
        if layer == len(self.keys):
            self.keys.append(keys)
            self.values.append(values)
        else:
            self.keys[layer], self.values[layer] = keys, values


def attend_with_cache(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cache_k: torch.Tensor,
    cache_v: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Causal attention of N new positions over P cached ones and themselves: one step of cached decoding.

        K = [cache_k; k],  V = [cache_v; v]                    (appended along the positions, dim -2)
        output_i = softmax(q_i K^T / sqrt(D), masked to keys j <= P + i) V

    New position i is absolute position P + i, so it sees every cached key and the new keys up to
    itself (a causal mask aligned bottom-right: ``tril(diagonal=P)``); with N = 1 it sees every key.
    ``mask`` (bool, True = may attend, broadcastable to (B, H, N, P + N), e.g. a padding mask) is
    combined with the causal one; ``dropout_p`` drops attention weights (training only).

    q, k, v (B, H, N, D); cache_k, cache_v (B, H, P, D), P >= 0 -> output (B, H, N, D) and the
    extended keys and values (B, H, P + N, D) each, to be cached for the next step.
    """
    expected = (*k.shape[:-2], cache_k.shape[-2])  # (B, H, P)
    if cache_k.shape[:-1] != expected or cache_v.shape[:-1] != expected or (cache_k.shape[-1], cache_v.shape[-1]) != (
            k.shape[-1], v.shape[-1]):
        raise ValueError(f"cache_k {tuple(cache_k.shape)} and cache_v {tuple(cache_v.shape)} must be (B, H, P, D) "
                         f"with the B, H and D of the new keys {tuple(k.shape)} and values {tuple(v.shape)}")
    keys = torch.cat([cache_k, k], dim=-2)  # (B, H, P + N, D)
    values = torch.cat([cache_v, v], dim=-2)  # (B, H, P + N, D)
    past, length = cache_k.shape[-2], q.shape[-2]
    causal = torch.ones(length, past + length, dtype=torch.bool, device=q.device).tril(diagonal=past)  # (N, P + N)
    if mask is not None:
        causal = causal & mask.to(q.device)  # (B, H or 1, N, P + N)
    return fused_attention(q, keys, values, causal, None, dropout_p), keys, values


# --------------------------------------------------------------------------------------------------
# The decoder
# --------------------------------------------------------------------------------------------------


@torch.no_grad()
def init_gpt_weights(model: nn.Module, config: GPTConfig) -> None:
    """GPT-2's initialization: BERT's (:func:`~bertlab.bert.init_bert_weights`: weights from
    N(0, std^2), std = ``initializer_range``, biases 0, LayerNorm 1 and 0), except the output
    projections of the residual branches (``c_proj``), drawn with std / sqrt(2 L) so that the 2 L
    branches added to the residual stream keep its variance in check (Radford et al., 2019, section 2.3)."""
    std = config.initializer_range
    model.apply(partial(init_bert_weights, std=std))
    for name, parameter in model.named_parameters():
        if name.endswith("c_proj.weight"):
            nn.init.normal_(parameter, std=std / (2 * config.n_layer) ** 0.5)


class GPTAttention(nn.Module):
    """Causal multi-head self-attention, one fused projection for queries, keys and values:

        [Q K V] = x W_attn + b_attn                                  (c_attn: C -> 3C)
        head_h  = softmax(Q_h K_h^T / sqrt(D), masked to keys j <= i) V_h
        output  = Dropout(Concat(head_1, ..., head_H) W_proj + b_proj)     (c_proj: C -> C)

    K and V are the cached keys and values followed by the new ones (:func:`attend_with_cache`; none
    without a :class:`KVCache`).
    """

    def __init__(self, config: GPTConfig, layer_idx: int):
        super().__init__()
        C = config.n_embd
        self.layer_idx = layer_idx
        self.num_heads = config.n_head
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.attn_dropout = config.attn_pdrop
        self.resid_dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, cache: KVCache | None = None) -> torch.Tensor:
        """x (B, N, C), mask None or bool broadcastable to (B, H, N, M), True = may attend (padding: the
        causal mask is :func:`attend_with_cache`'s) -> (B, N, C)."""
        q, k, v = (t.unflatten(-1, (self.num_heads, -1)).transpose(1, 2)  # (B, H, N, D) each
                   for t in self.c_attn(x).chunk(3, dim=-1))
        past_k, past_v = (k[..., :0, :], v[..., :0, :]) if cache is None else cache.past(self.layer_idx, k, v)
        # dropout_p is passed while training only: attend_with_cache(q, k, v, cache_k, cache_v, mask) is an exercise
        dropout = {"dropout_p": self.attn_dropout} if self.training else {}
        heads, k, v = attend_with_cache(q, k, v, past_k, past_v, mask, **dropout)  # (B, H, N, D), (B, H, M, D) x 2
        if cache is not None:
            cache.store(self.layer_idx, k, v)
        return self.resid_dropout(self.c_proj(heads.transpose(1, 2).flatten(-2)))  # (B, N, C)


class GPTMLP(nn.Module):
    """MLP(x) = Dropout(act(x W_fc + b_fc) W_proj + b_proj), (..., C) -> (..., I) -> (..., C)."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, config.inner_size)
        self.act = ACTIVATIONS[config.activation_function]()
        self.c_proj = nn.Linear(config.inner_size, config.n_embd)
        self.dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class GPTBlock(nn.Module):
    """One pre-norm block: x <- x + Attention(LayerNorm_1(x)); x <- x + MLP(LayerNorm_2(x))."""

    def __init__(self, config: GPTConfig, layer_idx: int):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.attn = GPTAttention(config, layer_idx)
        self.ln_2 = LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.mlp = GPTMLP(config)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, cache: KVCache | None = None) -> torch.Tensor:
        """x (B, N, C) -> (B, N, C)."""
        x = pre_norm_residual(x, partial(self.attn, mask=mask, cache=cache), self.ln_1)
        return pre_norm_residual(x, self.mlp, self.ln_2)


class GPTModel(nn.Module):
    """The GPT-2 decoder: token and position embeddings (``wte``, ``wpe``), the blocks ``h`` and the
    final LayerNorm ``ln_f`` (pre-norm blocks leave the residual stream unnormalized)."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = LearnedPositionalEmbedding(config.n_positions, config.n_embd)
        self.drop = nn.Dropout(config.embd_pdrop)
        self.h = nn.ModuleList(GPTBlock(config, index) for index in range(config.n_layer))
        self.ln_f = LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)

    def _check_inputs(self, input_ids, attention_mask, cache: KVCache | None) -> None:
        """Raise a ValueError naming the problem unless the inputs fit each other, the cache and the config."""
        if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.shape[1] == 0:
            shape = tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__
            raise ValueError(f"input_ids must be a (B, N) tensor of token ids with N >= 1, got {shape}")
        past = 0 if cache is None else cache.length
        if past + input_ids.shape[1] > self.config.n_positions:
            raise ValueError(f"{past} cached and {input_ids.shape[1]} new positions exceed "
                             f"n_positions={self.config.n_positions}")
        if cache is not None and cache.batch_size not in (None, input_ids.shape[0]):
            raise ValueError(f"the cache holds {cache.batch_size} sequences, input_ids {input_ids.shape[0]}")
        expected = (input_ids.shape[0], past + input_ids.shape[1])
        if attention_mask is not None and tuple(attention_mask.shape) != expected:
            raise ValueError(f"attention_mask must cover the cached and new positions, {expected}, "
                             f"got {tuple(attention_mask.shape)}")
        check_index_range("input_ids", input_ids, self.config.vocab_size, "vocab_size")

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        """The final hidden states (B, N, C) of input_ids (B, N).

        Args:
            input_ids: (B, N) token ids; with a cache, the N positions after the cached ones.
            attention_mask: (B, M), 1 (or True) for tokens and 0 for padding, over the cached and
                the new positions; None = no padding. Positions count from 0 whatever the padding.
            cache: a :class:`KVCache`, extended in place, or None.
        """
        self._check_inputs(input_ids, attention_mask, cache)
        past, length = (0 if cache is None else cache.length), input_ids.shape[1]
        mask = None if attention_mask is None else padding_mask(attention_mask)  # (B, 1, 1, M); the causal
        # mask, new position i (absolute past + i) seeing keys j <= past + i, is attend_with_cache's
        x = self.drop(self.wte(input_ids) + self.wpe(past + length)[past:])  # (B, N, C)
        for block in self.h:
            x = block(x, mask, cache)
        return self.ln_f(x)


# --------------------------------------------------------------------------------------------------
# The language model and its loss
# --------------------------------------------------------------------------------------------------


def causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The causal language-modelling loss: the logits at position i predict the label at i + 1.

        L = -(1 / |P|) sum_{(b, i) in P} log softmax(logits_{b,i})[y_{b,i+1}],
        P = {(b, i) : i < N - 1, y_{b,i+1} != -100}

    logits (B, N, V), labels (B, N): the input ids themselves (the shift happens here, as in Hugging
    Face), -100 where nothing is predicted (padding). The softmax is computed in float32.
    """
    _check_labels(logits, labels)
    shifted_logits = logits[:, :-1].flatten(0, 1).float()  # (B (N - 1), V)
    shifted_labels = labels[:, 1:].flatten()  # (B (N - 1),)
    return F.cross_entropy(shifted_logits, shifted_labels, ignore_index=IGNORE_INDEX)


def _check_labels(logits: torch.Tensor, labels: torch.Tensor) -> None:
    if labels.shape != logits.shape[:2]:
        raise ValueError(f"labels must have the shape of input_ids, {tuple(logits.shape[:2])}, "
                         f"got {tuple(labels.shape)}")


def next_token_nll(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The negative log-likelihood of each next token, and which ones are predicted.

        nll_{b,i} = -log softmax(logits_{b,i})[y_{b,i+1}],   counted_{b,i} = (y_{b,i+1} != -100)

    logits (B, N, V), labels (B, N) as for :func:`causal_lm_loss` -> nll (B, N - 1) in nats, float32,
    0 where not counted, and counted (B, N - 1), boolean. ``nll[counted].mean()`` is the causal loss.
    """
    _check_labels(logits, labels)
    shifted_labels = labels[:, 1:]  # (B, N - 1)
    counted = shifted_labels != IGNORE_INDEX  # (B, N - 1)
    log_probs = logits[:, :-1].float().log_softmax(dim=-1)  # (B, N - 1, V)
    nll = -log_probs.gather(-1, shifted_labels.clamp(min=0)[..., None]).squeeze(-1)  # (B, N - 1)
    return nll.masked_fill(~counted, 0.0), counted


def perplexity(nll: torch.Tensor, counted: torch.Tensor | None = None) -> torch.Tensor:
    """Perplexity: e to the mean negative log-likelihood per predicted token,

        PPL = exp( (1 / |P|) sum_{t in P} -log p(x_t | x_<t) )

    over the tokens P where ``counted`` is True (all of them when None); nll (...) in nats, counted (...)
    boolean of the same shape -> a scalar. The mean is over all the tokens of a text or corpus at once: the
    mean of per-batch perplexities, or e to the summed loss, is another number. A uniform guess over V
    tokens has perplexity V, a perfect predictor 1.
    """
    if counted is None:
        counted = torch.ones_like(nll, dtype=torch.bool)
    if counted.shape != nll.shape:
        raise ValueError(f"counted must have the shape of nll, {tuple(nll.shape)}, got {tuple(counted.shape)}")
    if not counted.any():
        raise ValueError("perplexity of no tokens: counted holds no True")
    return nll.float()[counted].mean().exp()


@dataclasses.dataclass
class CausalLMOutput:
    """Output of :class:`GPTLMHeadModel`: the :func:`causal_lm_loss` (None without labels), the
    ``logits`` (B, N, V) and the ``cache`` passed in (extended), or None."""

    loss: torch.Tensor | None
    logits: torch.Tensor
    cache: KVCache | None = None


# Hugging Face checkpoint entries that are not parameters: old GPT-2 checkpoints saved the causal mask.
_HF_BUFFERS = re.compile(r"\.attn\.(bias|masked_bias)$")
# GPT-2's Conv1D weights, stored (in, out): the transpose of nn.Linear's (out, in).
_HF_CONV1D = re.compile(r"\.(c_attn|c_proj|c_fc)\.weight$")
_TIED = "lm_head.weight"  # the token embeddings under a second name


class GPTPreTrainedModel(nn.Module):
    """Shared by the GPT models: reading and writing Hugging Face GPT-2 checkpoint folders, with the
    names of Hugging Face's classes (the decoder under ``transformer.``, the head beside it).

    Subclasses set ``hf_architecture`` (the name of the matching ``transformers`` class) and
    ``head_prefixes`` (the names of the head's weights, which a checkpoint of another head lacks: they
    are then newly initialised, with a warning).
    """

    hf_architecture = ""
    head_prefixes: tuple[str, ...] = ()

    def __init__(self, config: GPTConfig):
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise TypeError(f"config must be a GPTConfig, got {type(config).__name__}")
        self.config = config

    @classmethod
    def _init_kwargs_from_json(cls, values: dict) -> dict:
        """Constructor arguments beyond the config that a Hugging Face config.json holds."""
        return {}

    def _hf_config_dict(self) -> dict:
        """config.json content: the config, plus what ``transformers`` needs to rebuild the class."""
        return {"architectures": [self.hf_architecture], **self.config.to_dict()}

    def load_hf_state_dict(self, state_dict: dict[str, torch.Tensor]) -> LoadResult:
        """Copy a Hugging Face GPT-2 state dict in, transposing the Conv1D weights.

        Accepts the names of ``GPT2LMHeadModel``, ``GPT2ForSequenceClassification`` and ``GPT2Model``
        (without ``transformer.``, as in OpenAI's released checkpoints); the causal-mask buffers of old
        checkpoints and the tied ``lm_head.weight`` are skipped. The head's weights (``head_prefixes``)
        may be missing: they keep their initial values and are returned as missing keys.

        Raises:
            ValueError: when weights of the decoder are missing, keys are unexpected, or a shape does not
                fit the config (naming them); nothing is copied then.
        """
        own = self.state_dict()
        top_level = {name.split(".", 1)[0] for name in own} | {_TIED.split(".", 1)[0]}  # transformer, the head
        incoming, unexpected = {}, []
        for key, tensor in state_dict.items():
            key = key if key.split(".", 1)[0] in top_level else "transformer." + key
            if _HF_BUFFERS.search(key) or key == _TIED:
                continue
            if key not in own:
                unexpected.append(key)
                continue
            tensor = tensor.t() if _HF_CONV1D.search(key) else tensor
            if tensor.shape != own[key].shape:
                raise ValueError(f"checkpoint tensor {key} has shape {tuple(tensor.shape)}, but the model "
                                 f"expects {tuple(own[key].shape)}: does config.json match the weights?")
            incoming[key] = tensor
        missing = [key for key in own if key != _TIED and key not in incoming]
        not_head = [key for key in missing if not key.startswith(self.head_prefixes)]
        if not_head or unexpected:
            raise ValueError(f"the state dict does not fit {type(self).__name__}: missing keys {not_head}, "
                             f"unexpected keys {unexpected}")
        self.load_state_dict(incoming, strict=False)
        return LoadResult(missing, unexpected)

    @classmethod
    def from_pretrained(cls, path: str | Path, **kwargs) -> "GPTPreTrainedModel":
        """The model of a Hugging Face GPT-2 checkpoint folder (``config.json`` and ``model.safetensors``
        or ``pytorch_model.bin``, as ``save_pretrained`` here or in ``transformers`` writes), in eval mode.
        Head weights the checkpoint lacks (the classifier of a pretrained language model) are newly
        initialised, with a warning. ``kwargs`` go to the constructor (``num_labels``), over config.json's.

        Raises:
            FileNotFoundError: naming the folder and the expected files.
            ValueError: when config.json is not a GPT-2's or the weights do not fit it.
        """
        config_file, weights_file = checkpoint_files(Path(path), "GPT-2")
        values = read_config_file(config_file, "gpt2", "GPT-2")
        model = cls(GPTConfig.from_dict(values), **{**cls._init_kwargs_from_json(values), **kwargs})
        missing, _ = model.load_hf_state_dict(read_weights(weights_file))
        if missing:
            warnings.warn(f"{weights_file} has no {missing}: newly initialized, train them before use")
        return model.eval()

    def save_pretrained(self, folder: str | Path) -> Path:
        """Write ``config.json`` and ``model.safetensors`` in Hugging Face's GPT-2 layout (Conv1D weights
        transposed, a tied output layer stored once), readable by ``from_pretrained`` here and by the
        ``transformers`` class ``hf_architecture``; return the folder."""
        tensors = {name: tensor.t() if _HF_CONV1D.search(name) else tensor
                   for name, tensor in self.state_dict().items() if name != _TIED}
        return write_checkpoint(folder, self._hf_config_dict(), tensors)


class GPTLMHeadModel(GPTPreTrainedModel):
    """GPT-2 with its language-modelling head: logits = ln_f(h_L) E_token^T, the output layer tied
    to the token embeddings (Press and Wolf, 2017). Parameter names and ``config.json`` are those of
    Hugging Face's ``GPT2LMHeadModel``."""

    hf_architecture = "GPT2LMHeadModel"

    def __init__(self, config: GPTConfig):
        super().__init__(config)
        self.transformer = GPTModel(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied: one tensor, two names
        init_gpt_weights(self, config)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        cache: KVCache | None = None,
    ) -> CausalLMOutput:
        """Inputs as for :meth:`GPTModel.forward`; ``labels`` (B, N) for :func:`causal_lm_loss`."""
        logits = self.lm_head(self.transformer(input_ids, attention_mask, cache))  # (B, N, V)
        loss = None if labels is None else causal_lm_loss(logits, labels)
        return CausalLMOutput(loss, logits, cache)


# --------------------------------------------------------------------------------------------------
# Classification of a whole text
# --------------------------------------------------------------------------------------------------


def last_token_positions(input_ids: torch.Tensor, pad_token_id: int | None) -> torch.Tensor:
    """The position of the last token of each row that is not padding, as Hugging Face's
    ``GPT2ForSequenceClassification`` finds it:

        last_b = argmax_i  i * [x_{b,i} != pad_token_id],    input_ids (B, N) -> (B,)

    the rightmost token that is not ``pad_token_id``, whether the rows are padded on the right or on
    the left (and N - 1 for a row without padding); 0 for a row of padding alone. Without a
    ``pad_token_id`` a single row's last position is N - 1, and a batch of several rows is refused, as
    Hugging Face refuses it.
    """
    batch_size, length = input_ids.shape
    if pad_token_id is None:
        if batch_size != 1:
            raise ValueError(f"a batch of {batch_size} rows needs the config's pad_token_id to find the last token of "
                             "each row (as Hugging Face's GPT2ForSequenceClassification does); the config has none")
        return torch.full((1,), length - 1, dtype=torch.long, device=input_ids.device)
    positions = torch.arange(length, device=input_ids.device)  # (N,)
    return (positions * (input_ids != pad_token_id)).argmax(dim=-1)  # (B,)


class GPTForSequenceClassification(GPTPreTrainedModel):
    """GPT-2 with a classifier on a vector v of the whole text: logits = W_score v, (B, num_labels), a linear
    layer without bias (``score``), as Hugging Face's ``GPT2ForSequenceClassification``.

    ``config.classifier_pooling`` chooses v among the final states h_L = ln_f(...):

    - "last": the state of the last token, v = h_L[last], the one position whose causal attention saw the
      whole text; GPT fine-tunes a linear layer on it (Radford et al., 2018, section 3.2). ``last`` is the
      rightmost token that is not ``pad_token_id`` (:func:`last_token_positions`, Hugging Face's rule):
      with the course's tokenizer, the [SEP] that ends each text.
    - "mean": the mean of the final states over the n real tokens, v = (1/n) sum_i h_L[i]
      (``attention_mask``), as ``BertForSequenceClassification``'s "mean"; under causal attention the
      state at i has seen the first i + 1 tokens only.

    There is no dropout before the classifier (Hugging Face's has none), and all weights train.
    ``num_labels`` goes to and comes from config.json's ``id2label``, as in Hugging Face: ``transformers``
    reads the folders ``save_pretrained`` writes, and ``from_pretrained`` reads a classifier's folder, of
    either, or a language model's (:class:`GPTLMHeadModel`), whose classifier is then newly initialised,
    with a warning.
    """

    hf_architecture = "GPT2ForSequenceClassification"
    head_prefixes = ("score.",)

    def __init__(self, config: GPTConfig, num_labels: int = 2):
        super().__init__(config)
        self.num_labels = check_num_labels(num_labels)
        self.transformer = GPTModel(config)
        self.score = nn.Linear(config.n_embd, num_labels, bias=False)
        init_gpt_weights(self, config)

    @classmethod
    def _init_kwargs_from_json(cls, values: dict) -> dict:
        return num_labels_from_config(values)

    def _hf_config_dict(self) -> dict:
        return {**super()._hf_config_dict(), **label_config(self.num_labels)}

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> SequenceClassifierOutput:
        """Inputs as for :meth:`GPTModel.forward`; ``labels`` (B,) class indices in [0, num_labels). The
        loss is the mean cross-entropy.

        ``token_type_ids`` (B, N), which the fine-tuning batches carry for BERT, are accepted and ignored:
        GPT has no segment embeddings, and a sentence pair is one text with [SEP] between its sentences,
        as GPT fine-tunes entailment on the premise and the hypothesis with a delimiter between them
        (Radford et al., 2018, section 3.3). Hugging Face's ``GPT2Model`` instead adds wte[token_type_ids]
        when it is given some: compare the two without them.
        """
        hidden_states = self.transformer(input_ids, attention_mask)  # (B, N, C)
        if self.config.classifier_pooling == "mean":
            pooled = mean_over_tokens(hidden_states, attention_mask)  # (B, C)
        else:
            last = last_token_positions(input_ids, self.config.pad_token_id)  # (B,)
            pooled = hidden_states[torch.arange(len(last), device=last.device), last]  # (B, C)
        return classifier_output(self.score(pooled), labels)  # logits (B, num_labels)


# --------------------------------------------------------------------------------------------------
# Sampling and generation
# --------------------------------------------------------------------------------------------------


def apply_temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """logits / T, (..., V): T < 1 sharpens softmax(logits / T) towards the argmax, T > 1 flattens it."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r} (greedy decoding is do_sample=False)")
    return logits / temperature


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the k largest logits of each row, -inf elsewhere (Fan et al., 2018), (..., V) -> (..., V).

    A token tied with the k-th largest logit is kept too, as in Hugging Face's ``TopKLogitsWarper``.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"top_k must be a positive integer, got {k!r}")
    kth_largest = logits.topk(min(k, logits.shape[-1]), dim=-1).values[..., -1:]  # (..., 1)
    return logits.masked_fill(logits < kth_largest, float("-inf"))


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Nucleus filtering (Holtzman et al., 2020): keep the smallest set of most probable tokens whose
    probability reaches p, -inf elsewhere, (..., V) -> (..., V).

    Equivalently, drop the least probable tokens as long as together they hold at most 1 - p: in order of
    increasing probability p_(1) <= p_(2) <= ... <= p_(V), token (r) is dropped when
    sum_{s <= r} p_(s) <= 1 - p. So the token that crosses p is kept, and so is the most probable token;
    p = 1 keeps every token of nonzero probability. Tied tokens are ordered by id (a stable sort): of two
    tied tokens at the edge of the nucleus, the one with the lower id is dropped. The same tokens as
    Hugging Face's ``TopPLogitsWarper``, ties included.
    """
    if not 0 < p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {p!r}")
    sorted_logits, order = logits.sort(dim=-1, stable=True)  # (..., V) each, increasing
    tail = sorted_logits.float().softmax(dim=-1).cumsum(dim=-1) <= 1 - p  # (..., V): the least probable
    tail[..., -1] = False  # the most probable token always stays
    remove = torch.zeros_like(tail).scatter(-1, order, tail)  # (..., V), back in vocabulary order
    return logits.masked_fill(remove, float("-inf"))


def filter_logits(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                  top_p: float | None = None) -> torch.Tensor:
    """Temperature, then top-k, then top-p (the order of Hugging Face's ``generate``), (..., V) -> (..., V).
    None leaves a filter out."""
    logits = apply_temperature(logits, temperature)
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    return logits


def next_token(logits: torch.Tensor, do_sample: bool = False, temperature: float = 1.0, top_k: int | None = None,
               top_p: float | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """The next token of each row of logits (B, V) -> (B,): the argmax (greedy), or with ``do_sample``
    a draw from softmax(:func:`filter_logits`), from ``generator`` (seeded for repeatable samples)."""
    if not do_sample:
        return logits.argmax(dim=-1)
    probs = filter_logits(logits, temperature, top_k, top_p).float().softmax(dim=-1)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.no_grad()
def generate(
    model: GPTLMHeadModel,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    *,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    eos_token_id: int | None = None,
    use_cache: bool = True,
) -> torch.Tensor:
    """Continue each prompt of input_ids (B, N) by up to ``max_new_tokens`` tokens -> (B, N + new).

    Each step picks :func:`next_token` from the logits of the last position. With ``use_cache`` the
    prompt passes through the model once and then each new token alone, its keys and values appended to
    a :class:`KVCache`; without it every step recomputes the whole sequence (the same tokens, slower).
    A row that produced ``eos_token_id`` continues with it, and generation stops once every row has.
    Put the model in eval mode first: dropout would otherwise perturb the logits.
    """
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
    if input_ids.shape[-1] + max_new_tokens - 1 > model.config.n_positions:
        raise ValueError(f"a prompt of {input_ids.shape[-1]} tokens and {max_new_tokens} new ones exceed "
                         f"n_positions={model.config.n_positions}")
    cache = KVCache() if use_cache else None
    tokens, step_input = input_ids, input_ids  # (B, N)
    finished = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)  # (B,)
    for _ in range(max_new_tokens):
        logits = model(step_input, cache=cache).logits[:, -1]  # (B, V)
        token = next_token(logits, do_sample, temperature, top_k, top_p, generator)  # (B,)
        if eos_token_id is not None:
            token = token.masked_fill(finished, eos_token_id)
            finished |= token == eos_token_id
        tokens = torch.cat([tokens, token[:, None]], dim=1)  # (B, N + t)
        if eos_token_id is not None and finished.all():
            break
        step_input = token[:, None] if use_cache else tokens
    return tokens
