"""BERT: the encoder, its pretraining heads and a sentence classifier (chapter 06).

BERT (Devlin et al., 2019) is a stack of post-norm Transformer encoder layers (Vaswani et al., 2017)
over the sum of three embeddings, read out by task heads:

    h_0 = Dropout(LayerNorm(E_token[x_i] + E_segment[s_i] + E_position[i]))
    h_l = EncoderLayer_l(h_{l-1}),  l = 1 .. L       (post-norm, exact GELU, padding keys masked)
    pooled = tanh(W_p h_L[CLS] + b_p)                (the pooler, read by NSP and classifiers)

Released BERT checkpoints learn their position embeddings; ``position_embedding_type="sinusoidal"``
swaps in the fixed sinusoids of the original Transformer for comparison. The layers are the course's
own (:class:`~bertlab.transformer.EncoderLayer` with :class:`~bertlab.attention.MultiHeadAttention`,
which calls ``F.scaled_dot_product_attention`` unless attention weights are asked for).

Weights are interchangeable with Hugging Face ``transformers``: :func:`load_hf_state_dict` and
``from_pretrained`` read a BERT checkpoint folder (such as bert-base-uncased), ``save_pretrained``
writes one that ``transformers`` reads back.

Shapes: B batch, N sequence length, H hidden size (d_model), V vocabulary size.
"""

import dataclasses
import json
import re
import warnings
from functools import partial
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from bertlab.attention import padding_mask
from bertlab.norm import LayerNorm
from bertlab.positional import LearnedPositionalEmbedding, sinusoidal_positional_encoding
from bertlab.transformer import ACTIVATIONS, EncoderLayer
from bertlab.utils import check_preset

IGNORE_INDEX = -100  # label of the positions a loss skips (masked language modelling, tagging), as in Hugging Face
CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
PYTORCH_FILE = "pytorch_model.bin"

# --------------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------------

# name: (layers L, hidden size H, attention heads A), from Turc et al. (2019) and Devlin et al. (2019)
PRESETS = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "medium": (8, 512, 8),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}
POSITION_EMBEDDING_TYPES = ("learned", "sinusoidal")
POOLINGS = ("cls", "mean")  # the text vectors BertForSequenceClassification can classify
# Hugging Face's names of the activations and position embeddings -> the course's
HF_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "swish": "silu"}
HF_POSITION_EMBEDDING_TYPES = {"absolute": "learned"}


@dataclasses.dataclass
class BertConfig:
    """The hyperparameters of a BERT model, with the field names of BERT's (and Hugging Face's)
    ``config.json``. The defaults are BERT-base (uncased); see :meth:`preset` for the other sizes.

    ``hidden_act`` is one of :data:`bertlab.transformer.ACTIVATIONS` ("gelu" is the exact erf GELU
    of BERT); ``position_embedding_type`` is "learned" (BERT) or "sinusoidal" (a fixed table);
    ``classifier_pooling``, the text vector ``BertForSequenceClassification`` classifies, "cls" (BERT's
    pooled [CLS]) or "mean" (the mean of the final hidden states over the real tokens), is bertlab's
    own field: Hugging Face's class ignores it and always reads the pooled [CLS].
    """

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int | None = 0
    position_embedding_type: str = "learned"
    initializer_range: float = 0.02
    classifier_pooling: str = "cls"

    def __post_init__(self):
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "max_position_embeddings", "type_vocab_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"BertConfig.{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads != 0:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by num_attention_heads "
                f"({self.num_attention_heads}): each head gets hidden_size / num_attention_heads features"
            )
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"BertConfig.{name} must be in [0, 1), got {getattr(self, name)!r}")
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(
                f"unknown hidden_act {self.hidden_act!r}; expected one of {', '.join(map(repr, ACTIVATIONS))}"
            )
        if self.position_embedding_type not in POSITION_EMBEDDING_TYPES:
            raise ValueError(
                f"unknown position_embedding_type {self.position_embedding_type!r}; expected one of "
                f"{', '.join(map(repr, POSITION_EMBEDDING_TYPES))}"
            )
        if self.classifier_pooling not in POOLINGS:
            raise ValueError(f"unknown classifier_pooling {self.classifier_pooling!r}; expected one of "
                             f"{', '.join(map(repr, POOLINGS))}")
        if self.pad_token_id is not None and not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(f"pad_token_id ({self.pad_token_id}) must be in [0, vocab_size={self.vocab_size})")
        if not self.layer_norm_eps > 0 or not self.initializer_range > 0:
            raise ValueError("layer_norm_eps and initializer_range must be > 0")

    @classmethod
    def preset(cls, name: str, **overrides) -> "BertConfig":
        """The configuration of a standard BERT size, intermediate size 4H, with fields overridden.

        tiny, mini, small, medium are the compact BERTs of Turc et al. (2019) (L/H/A = 2/128/2,
        4/256/4, 4/512/8, 8/512/8); base and large are Devlin et al.'s (12/768/12, 24/1024/16).
        Example: ``BertConfig.preset("mini", vocab_size=8000)``.
        """
        check_preset(cls, PRESETS, name, overrides, "BERT")
        layers, hidden, heads = PRESETS[name]
        sizes = dict(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                     intermediate_size=4 * hidden)
        return cls(**{**sizes, **overrides})

    def to_dict(self) -> dict:
        """The fields as a dict in Hugging Face's ``config.json`` layout (``model_type`` "bert",
        activations and learned positions under Hugging Face's names)."""
        fields = dataclasses.asdict(self)
        to_hf = {ours: theirs for theirs, ours in HF_POSITION_EMBEDDING_TYPES.items()}
        fields["position_embedding_type"] = to_hf.get(self.position_embedding_type, self.position_embedding_type)
        fields["hidden_act"] = "gelu_pytorch_tanh" if self.hidden_act == "gelu_tanh" else self.hidden_act
        return {"model_type": "bert", **fields}

    @classmethod
    def from_dict(cls, values: dict) -> "BertConfig":
        """Read a dict such as a Hugging Face BERT ``config.json``; keys that are not fields are ignored."""
        names = {field.name for field in dataclasses.fields(cls)}
        fields = {key: value for key, value in values.items() if key in names}
        if "hidden_act" in fields:
            fields["hidden_act"] = HF_ACTIVATIONS.get(fields["hidden_act"], fields["hidden_act"])
        if "position_embedding_type" in fields:
            kind = fields["position_embedding_type"]
            fields["position_embedding_type"] = HF_POSITION_EMBEDDING_TYPES.get(kind, kind)
        return cls(**fields)

    def save(self, folder: str | Path) -> Path:
        """Write ``folder/config.json``; return its path."""
        path = Path(folder) / CONFIG_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        return path

    @classmethod
    def load(cls, folder: str | Path) -> "BertConfig":
        """Read ``folder/config.json`` (ours or a Hugging Face BERT's)."""
        path = Path(folder) / CONFIG_FILE
        if not path.is_file():
            raise FileNotFoundError(f"no {CONFIG_FILE} in {Path(folder)}")
        return cls.from_dict(json.loads(path.read_text()))


def count_parameters(config: BertConfig, pooler: bool = True) -> int:
    """The number of parameters of ``BertModel(config)``, in closed form.

    With V vocab_size, P max_position_embeddings, T type_vocab_size, H hidden_size,
    I intermediate_size and L num_hidden_layers:

        embeddings  = (V + P + T) H + 2H           (P H only for learned positions; 2H: LayerNorm)
        per layer   = 4 (H^2 + H)                  (query, key, value, output projections)
                    + (H I + I) + (I H + H)        (feed-forward network)
                    + 2 * 2H                       (two LayerNorms)
        pooler      = H^2 + H

        total = embeddings + L * per layer + pooler   (pooler only when ``pooler``)

    BERT-base (V = 30,522, P = 512, T = 2, H = 768, I = 3072, L = 12) has 109,482,240.
    """
    V, P, T = config.vocab_size, config.max_position_embeddings, config.type_vocab_size
    H, I, L = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    positions = P if config.position_embedding_type == "learned" else 0
    embeddings = (V + positions + T) * H + 2 * H
    per_layer = 4 * (H * H + H) + (H * I + I) + (I * H + H) + 2 * 2 * H
    return embeddings + L * per_layer + (H * H + H if pooler else 0)


# --------------------------------------------------------------------------------------------------
# The encoder
# --------------------------------------------------------------------------------------------------


@torch.no_grad()
def init_bert_weights(module: nn.Module, std: float = 0.02) -> None:
    """BERT's initialization of one module (use with ``model.apply``): linear and embedding weights
    from N(0, std^2) (std = ``initializer_range``), biases 0, LayerNorm gain 1 and shift 0, and the
    padding token's embedding row 0."""
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, std=std)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, (nn.Embedding, LearnedPositionalEmbedding)):
        nn.init.normal_(module.weight, std=std)
        if getattr(module, "padding_idx", None) is not None:
            module.weight[module.padding_idx].zero_()
    elif isinstance(module, LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


def check_index_range(name: str, ids: torch.Tensor, size: int, size_name: str) -> None:
    """Raise a ValueError unless every entry of the integer tensor ``ids`` is in [0, size).

    The range is checked for CPU tensors only: on an accelerator, reading the values back would make
    the host wait for the device at every forward pass. (Ids from the tokenizer are in range by
    construction; an out-of-range id on a GPU stops the embedding lookup with a device-side assert.)
    """
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise ValueError(f"{name} must be an integer tensor, got dtype {ids.dtype}")
    if ids.numel() == 0 or ids.device.type != "cpu":
        return
    lowest, highest = torch.stack(torch.aminmax(ids)).tolist()
    if lowest < 0 or highest >= size:
        raise ValueError(f"{name} must be in [0, {size_name}={size}), got values from {lowest} to {highest}")


class BertEmbeddings(nn.Module):
    """h_0 = Dropout(LayerNorm(E_token[x_i] + E_segment[s_i] + E_position[i])), (B, N) -> (B, N, H).

    ``position_embeddings`` is a :class:`~bertlab.positional.LearnedPositionalEmbedding` (BERT), or,
    for "sinusoidal", the fixed table of :func:`~bertlab.positional.sinusoidal_positional_encoding`
    is kept in the buffer ``position_encoding`` (not a parameter, not saved).
    """

    def __init__(self, config: BertConfig):
        super().__init__()
        H = config.hidden_size
        self.word_embeddings = nn.Embedding(config.vocab_size, H, padding_idx=config.pad_token_id)
        if config.position_embedding_type == "learned":
            self.position_embeddings = LearnedPositionalEmbedding(config.max_position_embeddings, H)
        else:
            table = sinusoidal_positional_encoding(config.max_position_embeddings, H)  # (P, H)
            self.register_buffer("position_encoding", table, persistent=False)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, H)
        self.norm = LayerNorm(H, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        """input_ids, token_type_ids (B, N) -> (B, N, H)."""
        length = input_ids.shape[1]
        if hasattr(self, "position_embeddings"):
            positions = self.position_embeddings(length)  # (N, H)
        else:
            positions = self.position_encoding[:length]  # (N, H)
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids) + positions
        return self.dropout(self.norm(x))


class BertPooler(nn.Module):
    """pooled = tanh(W_p h[CLS] + b_p): the final hidden state of the first token, (B, N, H) -> (B, H)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden_states[:, 0]))


class BertEncoder(nn.Module):
    """L post-norm encoder layers (the course's :class:`~bertlab.transformer.EncoderLayer`)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.layers = nn.ModuleList(
            EncoderLayer(
                config.hidden_size,
                config.num_attention_heads,
                config.intermediate_size,
                dropout=config.hidden_dropout_prob,
                activation=config.hidden_act,
                norm_first=False,
                eps=config.layer_norm_eps,
                attention_dropout=config.attention_probs_dropout_prob,
                ffn_dropout=0.0,  # BERT has no dropout between the two feed-forward matrices
            )
            for _ in range(config.num_hidden_layers)
        )

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, output_attentions: bool = False
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """x (B, N, H), mask (B, 1, 1, N) or None -> (B, N, H), and the layers' attention weights
        (each (B, heads, N, N)) when ``output_attentions``, else an empty tuple."""
        attentions = []
        for layer in self.layers:
            if output_attentions:
                x, weights = layer(x, mask=mask, need_weights=True)
                attentions.append(weights)
            else:
                x = layer(x, mask=mask)
        return x, tuple(attentions)


# --------------------------------------------------------------------------------------------------
# Loading and saving Hugging Face checkpoints
# --------------------------------------------------------------------------------------------------

# (our parameter name, Hugging Face's), as regular expressions applied in order to a name
_HF_NAME_RULES = [
    (r"embeddings\.norm\.", "embeddings.LayerNorm."),
    (r"encoder\.layers\.(\d+)\.self_attn\.q_proj\.", r"encoder.layer.\1.attention.self.query."),
    (r"encoder\.layers\.(\d+)\.self_attn\.k_proj\.", r"encoder.layer.\1.attention.self.key."),
    (r"encoder\.layers\.(\d+)\.self_attn\.v_proj\.", r"encoder.layer.\1.attention.self.value."),
    (r"encoder\.layers\.(\d+)\.self_attn\.out_proj\.", r"encoder.layer.\1.attention.output.dense."),
    (r"encoder\.layers\.(\d+)\.norm1\.", r"encoder.layer.\1.attention.output.LayerNorm."),
    (r"encoder\.layers\.(\d+)\.ffn\.linear1\.", r"encoder.layer.\1.intermediate.dense."),
    (r"encoder\.layers\.(\d+)\.ffn\.linear2\.", r"encoder.layer.\1.output.dense."),
    (r"encoder\.layers\.(\d+)\.norm2\.", r"encoder.layer.\1.output.LayerNorm."),
    (r"^mlm_head\.dense\.", "cls.predictions.transform.dense."),
    (r"^mlm_head\.norm\.", "cls.predictions.transform.LayerNorm."),
    (r"^mlm_head\.decoder\.bias$", "cls.predictions.bias"),
    (r"^mlm_head\.decoder\.weight$", "cls.predictions.decoder.weight"),
    (r"^nsp_head\.", "cls.seq_relationship."),
]
# Checkpoint entries that are not parameters: old checkpoints saved these constant buffers.
_HF_BUFFERS = re.compile(r"(^|\.)embeddings\.(position_ids|token_type_ids)$")
# Checkpoint entries that repeat a parameter: Hugging Face ties the decoder to the word embeddings
# and the decoder bias to ``cls.predictions.bias``.
_HF_TIED = {"cls.predictions.decoder.weight": None, "cls.predictions.decoder.bias": "cls.predictions.bias"}
_BACKBONE_PREFIXES = ("embeddings.", "encoder.", "pooler.")


def hf_parameter_name(name: str) -> str:
    """Our parameter name -> Hugging Face's, e.g. ``encoder.layers.0.self_attn.q_proj.weight`` ->
    ``encoder.layer.0.attention.self.query.weight`` (a ``bert.`` prefix is kept as is)."""
    for pattern, replacement in _HF_NAME_RULES:
        name = re.sub(pattern, replacement, name)
    return name


class LoadResult(NamedTuple):
    """Hugging Face parameter names the model has but the checkpoint lacks, and the reverse."""

    missing_keys: list[str]
    unexpected_keys: list[str]


def _normalize_hf_key(key: str, with_bert_prefix: bool) -> str:
    """Old TensorFlow-port names (LayerNorm.gamma/beta) -> weight/bias; add or strip ``bert.`` so the
    key matches a model that has (task models) or has not (``BertModel``) the prefix."""
    key = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", key)
    key = re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", key)
    if with_bert_prefix and key.startswith(_BACKBONE_PREFIXES):
        return "bert." + key
    if not with_bert_prefix and key.startswith("bert."):
        return key[len("bert."):]
    return key


def load_hf_state_dict(model: nn.Module, state_dict: dict[str, torch.Tensor], strict: bool = True) -> LoadResult:
    """Copy a Hugging Face BERT state dict into ``model`` (a :class:`BertModel`, :class:`BertForPreTraining`
    or :class:`BertForSequenceClassification`), renaming the parameters.

    Accepts the names of Hugging Face's ``BertModel``, ``BertForPreTraining``, ``BertForMaskedLM`` and
    ``BertForSequenceClassification``, with or without the ``bert.`` prefix, and the old ``gamma`` /
    ``beta`` LayerNorm names. The tied decoder weight (``cls.predictions.decoder.weight``) and constant
    buffers (``position_ids``) are accepted and skipped.

    Returns:
        a :class:`LoadResult` of missing and unexpected keys, in Hugging Face's names.

    Raises:
        ValueError: when a tensor's shape does not fit (naming it), or, with ``strict``, when keys are
            missing or unexpected (listing them); nothing is copied then.
    """
    with_prefix = not isinstance(model, BertModel)
    own_state = model.state_dict()
    tied = "mlm_head.decoder.weight"  # the word embeddings under a second name
    ours_by_hf = {hf_parameter_name(name): name for name in own_state if name != tied}
    incoming, unexpected = {}, []
    for key, tensor in state_dict.items():
        key = _normalize_hf_key(key, with_prefix)
        if _HF_BUFFERS.search(key):
            continue
        if key in _HF_TIED and hasattr(model, "mlm_head"):
            alias = _HF_TIED[key]
            if alias is None or alias in state_dict:  # a second copy of a tensor loaded under its own name
                continue
            key = alias
        if key in ours_by_hf:
            incoming[key] = tensor
        else:
            unexpected.append(key)
    missing = [key for key in ours_by_hf if key not in incoming]
    for key, tensor in incoming.items():
        expected = own_state[ours_by_hf[key]].shape
        if tensor.shape != expected:
            raise ValueError(
                f"checkpoint tensor {key} has shape {tuple(tensor.shape)}, but the model expects "
                f"{tuple(expected)}: does config.json match the weights?"
            )
    if strict and (missing or unexpected):
        raise ValueError(
            f"the state dict does not fit {type(model).__name__}: missing keys {missing}, "
            f"unexpected keys {unexpected}"
        )
    model.load_state_dict({ours_by_hf[key]: tensor for key, tensor in incoming.items()}, strict=False)
    return LoadResult(missing, unexpected)


def checkpoint_files(folder: Path, kind: str = "BERT") -> tuple[Path, Path]:
    """config.json and the weights file (model.safetensors, else pytorch_model.bin) of a checkpoint folder
    of a ``kind`` model (named in the error)."""
    config_file = folder / CONFIG_FILE
    weights = [folder / name for name in (SAFETENSORS_FILE, PYTORCH_FILE) if (folder / name).is_file()]
    if not folder.is_dir() or not config_file.is_file() or not weights:
        found = sorted(path.name for path in folder.iterdir()) if folder.is_dir() else "the folder does not exist"
        raise FileNotFoundError(
            f"{folder} is not a {kind} checkpoint folder: expected {CONFIG_FILE} and {SAFETENSORS_FILE} "
            f"or {PYTORCH_FILE}; found: {found}"
        )
    return config_file, weights[0]


def config_values(config_file: Path) -> dict:
    """The values of a Hugging Face ``config.json``; a ValueError naming the file if it is not JSON."""
    try:
        return json.loads(config_file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{config_file} is not a JSON configuration ({error})") from None


def read_config_file(config_file: Path, model_type: str, kind: str) -> dict:
    """The values of a Hugging Face ``config.json``, which must describe a ``model_type`` model (a ``kind``,
    named in the error)."""
    values = config_values(config_file)
    if values.get("model_type", model_type) != model_type:
        raise ValueError(f"{config_file} describes a {values['model_type']!r} model, not a {kind}")
    return values


def write_checkpoint(folder: str | Path, config: dict, tensors: dict[str, torch.Tensor]) -> Path:
    """Write ``config.json`` and ``model.safetensors`` (the tensors, copied to the CPU) into ``folder``, as
    Hugging Face's ``save_pretrained`` does; return the folder."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    tensors = {name: tensor.detach().cpu().contiguous() for name, tensor in tensors.items()}
    save_file(tensors, folder / SAFETENSORS_FILE, metadata={"format": "pt"})
    return folder


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a weights file, on the CPU; a ValueError naming the file if it cannot be read."""
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(path)
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # safetensors, pickle, zip and torch each raise their own kinds
        raise ValueError(f"{path} is not a readable weights file ({error}): it may be truncated or corrupt; "
                         f"save or download it again") from None


class BertPreTrainedModel(nn.Module):
    """Shared by the BERT models: reading and writing Hugging Face checkpoint folders.

    Subclasses set ``hf_architecture`` (the name of the matching ``transformers`` class) and
    ``head_prefixes`` (Hugging Face names of the weights that a checkpoint of another task may lack:
    they are then newly initialized, with a warning).
    """

    hf_architecture = ""
    head_prefixes: tuple[str, ...] = ()

    def __init__(self, config: BertConfig):
        super().__init__()
        if not isinstance(config, BertConfig):
            raise TypeError(f"config must be a BertConfig, got {type(config).__name__}")
        self.config = config

    @classmethod
    def _init_kwargs_from_json(cls, values: dict) -> dict:
        """Constructor arguments beyond the config that a Hugging Face config.json holds."""
        return {}

    @classmethod
    def from_pretrained(cls, path: str | Path, **kwargs) -> "BertPreTrainedModel":
        """Build the model from a Hugging Face BERT checkpoint folder and load its weights.

        The folder holds ``config.json`` and ``model.safetensors`` (or ``pytorch_model.bin``), as
        written by ``save_pretrained`` here or in ``transformers``; ``vocab.txt`` is read by the
        tokenizer. Weights of this model's head that the checkpoint lacks (say, the classifier of a
        model pretrained without it) are initialized as BERT does, with a warning; checkpoint weights
        this model does not use are skipped, with a warning. The model is returned in eval mode.
        ``kwargs`` go to the constructor (e.g. ``num_labels``).

        Raises:
            FileNotFoundError: naming the folder and the expected files.
            ValueError: when config.json is not a BERT's, encoder weights are missing or a shape does
                not fit the config.
        """
        folder = Path(path)
        config_file, weights_file = checkpoint_files(folder)
        values = read_config_file(config_file, "bert", "BERT")
        model = cls(BertConfig.from_dict(values), **{**cls._init_kwargs_from_json(values), **kwargs})
        missing, unexpected = load_hf_state_dict(model, read_weights(weights_file), strict=False)
        not_heads = [key for key in missing if not key.startswith(cls.head_prefixes)]
        if not_heads:
            raise ValueError(f"{weights_file} lacks weights of the BERT encoder: {not_heads}")
        if missing:
            warnings.warn(f"{weights_file} has no {missing}: newly initialized, train them before use")
        if unexpected:
            warnings.warn(f"{weights_file}: skipped weights that {cls.__name__} does not use: {unexpected}")
        return model.eval()

    def _hf_config_dict(self) -> dict:
        """config.json content: the config, plus what ``transformers`` needs to rebuild the class."""
        return {"architectures": [self.hf_architecture], **self.config.to_dict()}

    def save_pretrained(self, folder: str | Path) -> Path:
        """Write ``config.json`` and ``model.safetensors`` with Hugging Face's parameter names, so that
        both ``from_pretrained`` here and ``transformers`` read the folder back; return the folder.

        Hugging Face BERT has no sinusoidal positions: such a model's folder loads back only here.
        """
        tensors = {
            hf_parameter_name(name): tensor
            for name, tensor in self.state_dict().items()
            if name != "mlm_head.decoder.weight"  # tied to the word embeddings: stored once
        }
        return write_checkpoint(folder, self._hf_config_dict(), tensors)


class BertModel(BertPreTrainedModel):
    """The BERT encoder: embeddings, L post-norm encoder layers and the tanh pooler over [CLS].

    Submodules: ``embeddings`` (:class:`BertEmbeddings`), ``encoder`` (``encoder.layers``, a list
    of :class:`~bertlab.transformer.EncoderLayer`) and ``pooler`` (None without ``add_pooling_layer``).
    """

    hf_architecture = "BertModel"
    head_prefixes = ("pooler.",)

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True):
        super().__init__(config)
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None
        self.apply(partial(init_bert_weights, std=config.initializer_range))

    def _check_inputs(self, input_ids, token_type_ids, attention_mask) -> None:
        """Raise a ValueError naming the problem unless the inputs fit each other and the config."""
        if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.shape[1] == 0:
            shape = tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__
            raise ValueError(f"input_ids must be a (B, N) tensor of token ids with N >= 1, got {shape}")
        length, limit = input_ids.shape[1], self.config.max_position_embeddings
        if length > limit:
            raise ValueError(f"input of {length} tokens is longer than max_position_embeddings={limit}")
        for name, tensor in (("token_type_ids", token_type_ids), ("attention_mask", attention_mask)):
            if tensor is not None and tensor.shape != input_ids.shape:
                raise ValueError(
                    f"{name} has shape {tuple(tensor.shape)}, but input_ids has shape {tuple(input_ids.shape)}"
                )
        check_index_range("input_ids", input_ids, self.config.vocab_size, "vocab_size")
        if token_type_ids is not None:
            check_index_range("token_type_ids", token_type_ids, self.config.type_vocab_size, "type_vocab_size")

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        output_attentions: bool = False,
    ) -> tuple:
        """Encode a batch of token sequences.

        Args:
            input_ids: (B, N) token ids, N <= max_position_embeddings.
            token_type_ids: (B, N) segment ids (0 for sentence A, 1 for B); None = all 0.
            attention_mask: (B, N), 1 (or True) for tokens and 0 for padding, which no token
                attends to; None = no padding.
            output_attentions: also return every layer's attention weights, computed step by step
                (the fused kernel is used otherwise).

        Returns:
            ``(sequence_output, pooled_output)``: (B, N, H) and (B, H) (None without a pooler), and,
            when ``output_attentions``, a third element: a tuple of L tensors (B, heads, N, N).
        """
        self._check_inputs(input_ids, token_type_ids, attention_mask)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        mask = None if attention_mask is None else padding_mask(attention_mask)  # (B, 1, 1, N)
        hidden = self.embeddings(input_ids, token_type_ids)  # (B, N, H)
        sequence_output, attentions = self.encoder(hidden, mask, output_attentions)
        pooled_output = self.pooler(sequence_output) if self.pooler is not None else None  # (B, H)
        if output_attentions:
            return sequence_output, pooled_output, attentions
        return sequence_output, pooled_output


# --------------------------------------------------------------------------------------------------
# Heads: pretraining (MLM and NSP) and sequence classification
# --------------------------------------------------------------------------------------------------


class BertMLMHead(nn.Module):
    """Masked-language-model head: logits = LayerNorm(act(h W + b)) E^T + b_out, (B, N, H) -> (B, N, V).

    The decoder's weight is the word-embedding matrix E itself (tied, as in BERT; Press and Wolf,
    2017), with its own output bias b_out (``decoder.bias``).
    """

    def __init__(self, config: BertConfig, word_embeddings: nn.Embedding):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = ACTIVATIONS[config.hidden_act]()
        self.norm = LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)
        self.decoder.weight = word_embeddings.weight  # tied: one tensor, two names
        init_bert_weights(self.dense, config.initializer_range)
        nn.init.zeros_(self.decoder.bias)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.norm(self.activation(self.dense(hidden_states))))


@dataclasses.dataclass
class BertPreTrainingOutput:
    """Output of :class:`BertForPreTraining`: loss = mlm_loss (+ nsp_loss when NSP labels are given);
    the losses are None without labels. mlm_logits (B, N, V), or (M, V) at the M labelled positions
    with ``predict_labelled_only``, whose labels are then ``mlm_targets`` (M,); nsp_logits (B, 2)."""

    loss: torch.Tensor | None
    mlm_loss: torch.Tensor | None
    nsp_loss: torch.Tensor | None
    mlm_logits: torch.Tensor
    nsp_logits: torch.Tensor
    mlm_targets: torch.Tensor | None = None


@dataclasses.dataclass
class SequenceClassifierOutput:
    """Output of a sequence classifier (:class:`BertForSequenceClassification`,
    :class:`bertlab.gpt.GPTForSequenceClassification`): the cross-entropy ``loss`` (None without labels)
    and the ``logits`` (B, num_labels)."""

    loss: torch.Tensor | None
    logits: torch.Tensor


def classifier_output(logits: torch.Tensor, labels: torch.Tensor | None) -> SequenceClassifierOutput:
    """The output of a sequence classifier: its logits (B, num_labels) and, with labels (B,) class indices,
    the mean cross-entropy loss = -(1 / B) sum_b log softmax(logits_b)[y_b]."""
    loss = None
    if labels is not None:
        if labels.shape != logits.shape[:1]:
            raise ValueError(f"labels must have shape ({logits.shape[0]},), got {tuple(labels.shape)}")
        loss = F.cross_entropy(logits, labels)
    return SequenceClassifierOutput(loss, logits)


class BertForPreTraining(BertPreTrainedModel):
    """BERT with its two pretraining heads (Devlin et al., 2019).

    MLM: ``mlm_head`` predicts the masked tokens from the sequence output (decoder tied to the word
    embeddings). NSP: ``nsp_head`` (a linear layer on the pooled [CLS]) predicts whether sentence B
    followed sentence A (label 0, IsNext) or not (1, NotNext). Training with MLM only (RoBERTa,
    Liu et al., 2019) just leaves out ``nsp_labels``.
    """

    hf_architecture = "BertForPreTraining"
    head_prefixes = ("bert.pooler.", "cls.")

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.bert = BertModel(config)
        self.mlm_head = BertMLMHead(config, self.bert.embeddings.word_embeddings)
        self.nsp_head = nn.Linear(config.hidden_size, 2)
        init_bert_weights(self.nsp_head, config.initializer_range)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        mlm_labels: torch.Tensor | None = None,
        nsp_labels: torch.Tensor | None = None,
        predict_labelled_only: bool = False,
    ) -> BertPreTrainingOutput:
        """Inputs as for :meth:`BertModel.forward`; ``mlm_labels`` (B, N) hold the original token at
        the predicted positions and -100 elsewhere, ``nsp_labels`` (B,) hold 0 (IsNext) or 1 (NotNext).

        mlm_loss = mean over labelled positions of -log p(label), nsp_loss = mean over the batch of
        -log p(nsp label), loss = mlm_loss + nsp_loss, or the one of them whose labels are given.

        ``predict_labelled_only``: apply the MLM head only where ``mlm_labels`` is not -100, as BERT's
        own pretraining code does (it gathers the ``masked_lm_positions``): ``mlm_logits`` is then
        (M, V) for the M labelled positions in row-major order, and the V-way output layer costs 15%
        of what it costs at every position. The losses are the same.
        """
        if mlm_labels is not None and mlm_labels.shape != input_ids.shape:
            raise ValueError(
                f"mlm_labels has shape {tuple(mlm_labels.shape)}, but input_ids has shape {tuple(input_ids.shape)}"
            )
        if predict_labelled_only:
            if mlm_labels is None:
                raise ValueError("predict_labelled_only needs mlm_labels: they say which positions to predict")
            # Found before the encoder runs, so the host waits for the labels only, not for the encoder.
            positions = (mlm_labels.flatten() != IGNORE_INDEX).nonzero().squeeze(1)  # (M,) in [0, B * N)
        sequence_output, pooled_output = self.bert(input_ids, token_type_ids, attention_mask)
        mlm_targets = None
        if predict_labelled_only:
            mlm_logits = self.mlm_head(sequence_output.flatten(0, 1)[positions])  # (M, V)
            mlm_targets = mlm_labels.flatten()[positions]  # (M,)
        else:
            mlm_logits = self.mlm_head(sequence_output)  # (B, N, V)
        nsp_logits = self.nsp_head(pooled_output)  # (B, 2)
        mlm_loss = nsp_loss = None
        if mlm_labels is not None:
            targets = mlm_labels if mlm_targets is None else mlm_targets
            mlm_loss = F.cross_entropy(mlm_logits.flatten(0, -2), targets.flatten(), ignore_index=IGNORE_INDEX)
        if nsp_labels is not None:
            if nsp_labels.shape != input_ids.shape[:1]:
                raise ValueError(f"nsp_labels must have shape ({input_ids.shape[0]},), got {tuple(nsp_labels.shape)}")
            nsp_loss = F.cross_entropy(nsp_logits, nsp_labels)
        losses = [value for value in (mlm_loss, nsp_loss) if value is not None]
        loss = sum(losses[1:], losses[0]) if losses else None
        return BertPreTrainingOutput(loss, mlm_loss, nsp_loss, mlm_logits, nsp_logits, mlm_targets)


def check_num_labels(num_labels: int) -> int:
    """``num_labels``, which a classifier's head needs to be an integer >= 2; else a ValueError."""
    if isinstance(num_labels, bool) or not isinstance(num_labels, int) or num_labels < 2:
        raise ValueError(f"num_labels must be an integer >= 2, got {num_labels!r}")
    return num_labels


def num_labels_from_config(values: dict) -> dict:
    """``{"num_labels": n}`` as a Hugging Face ``config.json`` says it (its ``id2label``, or ``num_labels``),
    or ``{}`` when it says nothing."""
    if "id2label" in values:
        return {"num_labels": len(values["id2label"])}
    return {"num_labels": values["num_labels"]} if "num_labels" in values else {}


def label_config(num_labels: int) -> dict:
    """The ``id2label`` and ``label2id`` of ``num_labels`` classes, from which Hugging Face reads ``num_labels``."""
    id2label = {str(index): f"LABEL_{index}" for index in range(num_labels)}
    return {"id2label": id2label, "label2id": {label: int(index) for index, label in id2label.items()}}


def mean_over_tokens(hidden_states: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """The mean of the hidden states over the real tokens of each text (Reimers and Gurevych, 2019):

        v = (1 / n) sum_i m_i h_i,   n = sum_i m_i,

    hidden_states (B, N, C), attention_mask (B, N) 1 (or True) for a token and 0 for padding (None: every
    position is a token) -> (B, C). A row without tokens gives 0."""
    real = (torch.ones(hidden_states.shape[:2], dtype=torch.bool, device=hidden_states.device)
            if attention_mask is None else attention_mask.bool()).unsqueeze(-1).to(hidden_states.dtype)  # (B, N, 1)
    return (hidden_states * real).sum(dim=1) / real.sum(dim=1).clamp(min=1)  # (B, C)


class _LabelledModel(BertPreTrainedModel):
    """A BERT whose head scores ``num_labels`` classes; ``num_labels`` goes to and comes from
    ``config.json`` as in Hugging Face (its ``id2label``)."""

    def __init__(self, config: BertConfig, num_labels: int = 2):
        super().__init__(config)
        self.num_labels = check_num_labels(num_labels)

    @classmethod
    def _init_kwargs_from_json(cls, values: dict) -> dict:
        return num_labels_from_config(values)

    def _hf_config_dict(self) -> dict:
        return {**super()._hf_config_dict(), **label_config(self.num_labels)}


class BertForSequenceClassification(_LabelledModel):
    """BERT with a classifier on a vector of the whole text: logits = W Dropout(v) + b, (B, num_labels).

    ``config.classifier_pooling`` chooses v:

    - "cls": BERT's pooled [CLS], v = tanh(W_p h_L[CLS] + b_p) (Devlin et al., 2019), as Hugging Face;
    - "mean": the mean of the final hidden states over the n real tokens, v = (1/n) sum_i h_L[i]
      (Reimers and Gurevych, 2019). A model pretrained without next sentence prediction never trained
      its pooler or its [CLS] summary; every token's vector was trained by masked language modelling.

    A sentence pair is one text, [CLS] A [SEP] B [SEP] with token types 0 and 1 (natural language
    inference, paraphrase). As in BERT's fine-tuning, the dropout probability is ``hidden_dropout_prob``
    and all weights train. ``from_pretrained`` reads ``num_labels`` from Hugging Face's ``id2label``.
    """

    hf_architecture = "BertForSequenceClassification"
    head_prefixes = ("bert.pooler.", "classifier.")

    def __init__(self, config: BertConfig, num_labels: int = 2):
        super().__init__(config, num_labels)
        self.bert = BertModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, num_labels)
        init_bert_weights(self.classifier, config.initializer_range)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> SequenceClassifierOutput:
        """Inputs as for :meth:`BertModel.forward`; ``labels`` (B,) class indices in [0, num_labels).
        The loss is the mean cross-entropy."""
        sequence_output, pooled_output = self.bert(input_ids, token_type_ids, attention_mask)  # (B, N, H), (B, H)
        if self.config.classifier_pooling == "mean":
            pooled_output = mean_over_tokens(sequence_output, attention_mask)  # (B, H)
        logits = self.classifier(self.dropout(pooled_output))  # (B, num_labels)
        return classifier_output(logits, labels)


@dataclasses.dataclass
class TokenClassifierOutput:
    """Output of :class:`BertForTokenClassification`: the cross-entropy ``loss`` over the labelled
    positions (None without labels) and the ``logits`` (B, N, num_labels)."""

    loss: torch.Tensor | None
    logits: torch.Tensor


class BertForTokenClassification(_LabelledModel):
    """BERT with a classifier on every token: logits_i = W Dropout(h_L[i]) + b, (B, N, num_labels).

    For tagging (parts of speech, named entities; Devlin et al., 2019, section 4 and figure 4): a word
    cut into several word pieces is labelled on its first piece, and the other pieces, the special
    tokens and the padding carry the label -100, which the loss skips:
    L = -(1/|P|) sum_{i in P} log softmax(logits_i)_{y_i} over the labelled positions P. No pooler, as in
    Hugging Face's class, whose weight names and ``config.json`` this one shares.
    """

    hf_architecture = "BertForTokenClassification"
    head_prefixes = ("classifier.",)

    def __init__(self, config: BertConfig, num_labels: int = 2):
        super().__init__(config, num_labels)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, num_labels)
        init_bert_weights(self.classifier, config.initializer_range)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> TokenClassifierOutput:
        """Inputs as for :meth:`BertModel.forward`; ``labels`` (B, N) class indices, -100 where nothing
        is predicted."""
        sequence_output, _ = self.bert(input_ids, token_type_ids, attention_mask)  # (B, N, H)
        logits = self.classifier(self.dropout(sequence_output))  # (B, N, num_labels)
        loss = None
        if labels is not None:
            if labels.shape != logits.shape[:2]:
                raise ValueError(f"labels must have the shape of input_ids, {tuple(logits.shape[:2])}, "
                                 f"got {tuple(labels.shape)}")
            loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)
        return TokenClassifierOutput(loss, logits)


@dataclasses.dataclass
class QuestionAnsweringOutput:
    """Output of :class:`BertForQuestionAnswering`: the ``loss`` (None without answer positions) and
    the ``start_logits`` and ``end_logits``, each (B, N)."""

    loss: torch.Tensor | None
    start_logits: torch.Tensor
    end_logits: torch.Tensor


class BertForQuestionAnswering(BertPreTrainedModel):
    """BERT for extractive question answering (SQuAD; Devlin et al., 2019, section 4.2).

    The input is [CLS] question [SEP] context [SEP]; two vectors S, E (the rows of ``qa_outputs``, with
    biases) score every token as the answer's start and end: start_logits_i = S . h_L[i] + b_S,
    end_logits_i = E . h_L[i] + b_E, and p(start = i) = softmax(start_logits)_i. Training minimises
    L = (CE(start_logits, s) + CE(end_logits, e)) / 2 for the answer's first and last token positions
    s, e; a window of the context without the answer points both at [CLS] (position 0). Positions
    outside [0, N) are ignored, as in Hugging Face's class, whose weight names this one shares (no pooler).
    """

    hf_architecture = "BertForQuestionAnswering"
    head_prefixes = ("qa_outputs.",)

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        init_bert_weights(self.qa_outputs, config.initializer_range)

    def _hf_config_dict(self) -> dict:  # Hugging Face's class reads its 2 outputs from num_labels
        return {**super()._hf_config_dict(), "num_labels": 2}

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
    ) -> QuestionAnsweringOutput:
        """Inputs as for :meth:`BertModel.forward`; ``start_positions`` and ``end_positions`` (B,) the
        answer's token positions, both given or neither."""
        sequence_output, _ = self.bert(input_ids, token_type_ids, attention_mask)  # (B, N, H)
        start_logits, end_logits = self.qa_outputs(sequence_output).unbind(dim=-1)  # (B, N) each
        loss = None
        if (start_positions is None) != (end_positions is None):
            raise ValueError("give both start_positions and end_positions, or neither")
        if start_positions is not None:
            for name, positions in (("start_positions", start_positions), ("end_positions", end_positions)):
                if positions.shape != start_logits.shape[:1]:
                    raise ValueError(f"{name} must have shape ({start_logits.shape[0]},), got {tuple(positions.shape)}")
            length = start_logits.shape[1]  # positions beyond the sequence are ignored, as in Hugging Face
            loss = (F.cross_entropy(start_logits, start_positions.clamp(0, length), ignore_index=length)
                    + F.cross_entropy(end_logits, end_positions.clamp(0, length), ignore_index=length)) / 2
        return QuestionAnsweringOutput(loss, start_logits.contiguous(), end_logits.contiguous())
