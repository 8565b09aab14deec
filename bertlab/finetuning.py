"""Fine-tuning BERT for sentence classification, the task type that the other task types share, and a
bag-of-words baseline (chapter 08).

BERT (Devlin et al., 2019) fine-tunes *all* its weights on the task: a linear classifier reads the
pooled [CLS] vector, p(y | x) = softmax(W h_[CLS] + b), and the whole network minimises the
cross-entropy -log p(y | x) with AdamW, a linear warm-up and decay of the learning rate, gradient
clipping, 2 to 4 epochs and a learning rate of 2e-5 to 5e-5. This module implements that recipe, and two
common options on top of it: freezing the lower layers (:func:`freeze_layers`, to save time and memory)
and layer-wise learning-rate decay (:func:`param_groups`, Howard and Ruder, 2018; Sun et al., 2019).

A task type is data: a :class:`TaskType` record says how a task's examples become batches, what the
model minimises and how it is scored. :func:`finetune_task`, :func:`task_evaluation` (its scores, its score
on each example and its predictions, from one forward pass; :func:`evaluate_task` and
:func:`task_example_scores` are views of it) and :func:`choose_learning_rate` read it; :data:`SENTENCES`,
single-sentence classification, is the record of this chapter (:func:`finetune` and :func:`evaluate` are
its), and ``bertlab.task_finetuning`` declares the three others (pairs, tagging, spans) and ``TASKS``.

The helpers work for the two families of models of the course (:class:`ModelFamily`, :data:`FAMILIES`,
the one place that knows them): a BERT, a :class:`~bertlab.bert.BertModel` (``embeddings``, ``encoder``,
``pooler``) on its own or as the ``.bert`` backbone of a task model such as
:class:`~bertlab.bert.BertForSequenceClassification` (``.bert`` and ``.classifier``); and a GPT, a
:class:`~bertlab.gpt.GPTModel` (``wte``, ``wpe``, ``h``, ``ln_f``) on its own or as the ``.transformer``
of :class:`~bertlab.gpt.GPTForSequenceClassification` (``.transformer`` and ``.score``), which
fine-tunes on the task types whose BERT is a sequence classifier (sentences, pairs).
"""

import contextlib
import dataclasses
import enum
import functools
import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from bertlab.bert import (
    BertConfig,
    BertForSequenceClassification,
    BertModel,
    BertPreTrainedModel,
    checkpoint_files,
    config_values,
)
from bertlab.data import DatasetSplits, load_sentiment
from bertlab.gpt import GPTConfig, GPTForSequenceClassification, GPTModel
from bertlab.optimization import get_linear_schedule
from bertlab.tokenization import BasicTokenizer, BertTokenizer
from bertlab.utils import (
    autocast,
    check_precision,
    grad_scaler,
    recipe_from_keywords,
    resolve_device,
    seed_everything,
)

Example = tuple[str, int]  # (text, label)
Batch = dict[str, torch.Tensor]
MODEL_INPUTS = ("input_ids", "token_type_ids", "attention_mask")
PROGRESS_EVERY = 20  # batches between two updates of the loss shown by the progress bar
SENTENCE_MAX_LENGTH = 128  # tokens of a single sentence, where no length is given
EVALUATION_BATCH_SIZE = 64  # examples in a batch of evaluation


class Progress(enum.Enum):
    """What a training run shows as it goes (``progress=``): ``True`` is ``BARS``, ``False`` ``NONE``."""

    NONE = "none"  # nothing
    EPOCHS = "epochs"  # one line per epoch: its training loss and development metrics
    BARS = "bars"  # the epoch lines, and a progress bar over each epoch's batches

    @classmethod
    def of(cls, progress: "bool | Progress") -> "Progress":
        return progress if isinstance(progress, cls) else cls.BARS if progress else cls.NONE


# --------------------------------------------------------------------------------------------------
# The parts of a model: the families of BERT and GPT


@dataclasses.dataclass(frozen=True)
class ModelParts:
    """The parts of a model's backbone that fine-tuning treats apart, bottom to top: the ``embeddings``
    (the modules below the first layer), the ``layers`` (bottom first) and the ``stack`` that holds the
    layers and whatever follows them (a final LayerNorm), named ``stack_name``."""

    embeddings: tuple[nn.Module, ...]
    layers: nn.ModuleList
    stack: nn.Module
    stack_name: str


@dataclasses.dataclass(frozen=True)
class ModelFamily:
    """A family of models that fine-tuning knows: where a model of it keeps its backbone and the parts
    of the backbone, its config, and its model for each of BERT's task types.

    - ``name``, ``model_type``: as errors say it, and as config.json's ``model_type`` says it.
    - ``config_class``, ``backbone_class``: its config and its backbone (the model without a head).
    - ``backbone_attribute``: where a model with a head holds its backbone.
    - ``embeddings``, ``layers``, ``stack``: the backbone's submodules of :class:`ModelParts`, by name
      (``stack`` "" is the backbone itself).
    - ``task_models``: its class for each of BERT's task models (a task type's ``model_class``) it has;
      None: BERT's own, every task type.
    """

    name: str
    model_type: str
    config_class: type
    backbone_class: type[nn.Module]
    backbone_attribute: str
    embeddings: tuple[str, ...]
    layers: str
    stack: str
    task_models: dict[type, type] | None

    def backbone_of(self, model: nn.Module) -> nn.Module | None:
        """The backbone of ``model``: the model itself, or its ``backbone_attribute``; None if it has none."""
        if isinstance(model, self.backbone_class):
            return model
        backbone = getattr(model, self.backbone_attribute, None)
        return backbone if isinstance(backbone, self.backbone_class) else None

    def parts(self, backbone: nn.Module) -> ModelParts:
        """The :class:`ModelParts` of a backbone of this family."""
        return ModelParts(tuple(backbone.get_submodule(name) for name in self.embeddings),
                          backbone.get_submodule(self.layers), backbone.get_submodule(self.stack),
                          self.stack or self.backbone_attribute)

    def model_class(self, task: "TaskType") -> type:
        """This family's model for ``task``: the counterpart of ``task.model_class``.

        Raises:
            ValueError: when the family has none (a GPT has no head on every token, for tagging and spans).
        """
        if self.task_models is None:
            return task.model_class
        if task.model_class not in self.task_models:
            has = " or ".join(bert.__name__ for bert in self.task_models)
            raise ValueError(f"bertlab has no {self.name} for the {task.name} task: a {self.name} fine-tunes where "
                             f"BERT's model is a {has}, one label per text; the {task.name} task's is a "
                             f"{task.model_class.__name__}")
        return self.task_models[task.model_class]


BERT_FAMILY = ModelFamily(name="BERT", model_type="bert", config_class=BertConfig, backbone_class=BertModel,
                          backbone_attribute="bert", embeddings=("embeddings",), layers="encoder.layers",
                          stack="encoder", task_models=None)
GPT_FAMILY = ModelFamily(name="GPT", model_type="gpt2", config_class=GPTConfig, backbone_class=GPTModel,
                         backbone_attribute="transformer", embeddings=("wte", "wpe"), layers="h", stack="",
                         task_models={BertForSequenceClassification: GPTForSequenceClassification})
#: The families of models that fine-tuning knows, by the ``model_type`` of their config.json.
FAMILIES = {family.model_type: family for family in (BERT_FAMILY, GPT_FAMILY)}


def model_family(source: nn.Module | BertConfig | GPTConfig | str | Path) -> ModelFamily:
    """The family (:data:`FAMILIES`) of a model, of a config, or of a checkpoint folder (by its
    config.json's ``model_type``; a config.json without one, as Google's BERT wrote them, is a BERT's).

    Raises:
        TypeError: for a model or config of neither family.
        FileNotFoundError: for a folder that is not a checkpoint folder.
        ValueError: for a folder whose ``model_type`` is of neither family.
    """
    if isinstance(source, (str, Path)):
        config_file, _ = checkpoint_files(Path(source), " or ".join(family.name for family in FAMILIES.values()))
        model_type = config_values(config_file).get("model_type", BERT_FAMILY.model_type)
        if model_type not in FAMILIES:
            raise ValueError(f"{config_file} describes a {model_type!r} model; bertlab fine-tunes "
                             f"{', '.join(f'{family.name} ({name!r})' for name, family in FAMILIES.items())}")
        return FAMILIES[model_type]
    for family in FAMILIES.values():
        if isinstance(source, family.config_class) or family.backbone_of(source) is not None:
            return family
    raise TypeError("expected a BERT (a BertModel, or a model with one in `.bert`) or a GPT (a GPTModel, or a model "
                    f"with one in `.transformer`), or their config, got {type(source).__name__}")


def model_backbone(model: nn.Module) -> nn.Module:
    """The backbone inside ``model``, the model without its head: a :class:`BertModel` (the model itself,
    or its ``.bert``) or a :class:`~bertlab.gpt.GPTModel` (the model itself, or its ``.transformer``)."""
    return model_family(model).backbone_of(model)


def model_parts(model: nn.Module) -> ModelParts:
    """The :class:`ModelParts` of ``model``'s backbone: BERT's ``embeddings``, ``encoder.layers`` and
    ``encoder``; GPT's ``wte`` and ``wpe``, ``h`` and the decoder itself (its ``ln_f``)."""
    return model_family(model).parts(model_backbone(model))


def bert_backbone(model: nn.Module) -> BertModel:
    """The :class:`BertModel` inside ``model``: the model itself, or its ``.bert`` attribute."""
    found = BERT_FAMILY.backbone_of(model)
    if found is None:
        raise TypeError(
            f"expected a BertModel or a model with a BertModel in `.bert`, got {type(model).__name__}"
        )
    return found


def encoder_layers(model: nn.Module) -> nn.ModuleList:
    """The layers of a BERT's encoder or a GPT's decoder (bottom first), as the ``nn.ModuleList`` that
    holds them."""
    return model_parts(model).layers


# --------------------------------------------------------------------------------------------------
# Which weights train, and how fast


def freeze_layers(model: nn.Module, num_trainable_layers: int) -> nn.Module:
    """Freeze the embeddings and the lower encoder layers; return ``model``.

    With L encoder layers, layers L - num_trainable_layers ... L - 1 (the top ones), the pooler, the
    classifier and any other head stay trainable (``requires_grad=True``); the embeddings and layers
    0 ... L - num_trainable_layers - 1 are frozen (``requires_grad=False``), so they get no gradient and
    no optimizer state. A GPT's are its blocks ``h`` and its embeddings ``wte`` and ``wpe``
    (:func:`model_parts`); its final ``ln_f`` stays trainable, as a pre-norm encoder's final norm.
    ``num_trainable_layers=0`` trains the head only ("feature extraction");
    ``num_trainable_layers=L`` trains every layer and freezes only the embeddings. The call sets the
    flag of *every* parameter, so calling it again with another number changes the split.

    The original BERT fine-tunes all weights, embeddings included (Devlin et al., 2019): that is the
    method, and what :func:`finetune` does when this function is not called. Freezing is an option
    that trades some accuracy for speed and memory, since the frozen layers need no backward pass.

    Raises:
        ValueError: if ``num_trainable_layers`` is not an integer in [0, L].
    """
    parts = model_parts(model)
    layers = parts.layers
    num_layers = len(layers)
    if isinstance(num_trainable_layers, bool) or not isinstance(num_trainable_layers, int):
        raise ValueError(f"num_trainable_layers must be an int, got {num_trainable_layers!r}")
    if not 0 <= num_trainable_layers <= num_layers:
        raise ValueError(
            f"num_trainable_layers must be between 0 and the number of encoder layers ({num_layers}), "
            f"got {num_trainable_layers}"
        )
    model.requires_grad_(True)  # pooler, classifier and any other head
    for embeddings in parts.embeddings:
        embeddings.requires_grad_(False)
    for layer in layers[: num_layers - num_trainable_layers]:
        layer.requires_grad_(False)
    return model


def param_groups(
    model: nn.Module,
    encoder_lr: float,
    head_lr: float,
    weight_decay: float,
    layer_decay: float = 1.0,
) -> list[dict]:
    """AdamW parameter groups with layer-wise learning rates.

    With L encoder layers numbered 0 (bottom) ... L - 1 (top) and decay factor xi = ``layer_decay``:

        lr(layer l)    = encoder_lr * xi^(L - 1 - l)
        lr(embeddings) = encoder_lr * xi^L
        lr(head)       = head_lr        (the pooler, the classifier and anything else outside the encoder)

    so with xi < 1 the lower, more general layers move less (layer-wise learning-rate decay: Howard and
    Ruder, 2018; Sun et al., 2019, who use xi = 0.95). xi = 1 gives every encoder weight ``encoder_lr``.
    An encoder parameter outside the layers (a pre-norm encoder's final norm) gets ``encoder_lr``. A GPT's
    layers are its blocks ``h``, its embeddings ``wte`` and ``wpe``, its final ``ln_f`` gets ``encoder_lr``
    and its head is ``score`` (:func:`model_parts`).

    Matrices (embeddings and linear weights, ``p.dim() >= 2``) get ``weight_decay``; biases and
    LayerNorm weights (``p.dim() < 2``) get none, as in BERT's optimizer (the rule of
    :func:`bertlab.optimization.weight_decay_groups`). Frozen parameters
    (``requires_grad=False``) are left out. Every trainable parameter is in exactly one group; each group
    has ``params``, ``lr``, ``weight_decay`` and a ``name`` such as ``"layer.3"`` or ``"head/no_decay"``
    (the parameters after the layers: ``"encoder"`` for a BERT, ``"transformer"`` for a GPT).

    Raises:
        ValueError: for a negative learning rate or weight decay, or ``layer_decay <= 0``.
    """
    for name, value in (("encoder_lr", encoder_lr), ("head_lr", head_lr), ("weight_decay", weight_decay)):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    if layer_decay <= 0:
        raise ValueError(f"layer_decay must be > 0, got {layer_decay}")

    structure = model_parts(model)
    num_layers = len(structure.layers)
    parts: list[tuple[str, list[nn.Parameter], float]] = [
        ("embeddings", [p for module in structure.embeddings for p in module.parameters()],
         encoder_lr * layer_decay**num_layers)
    ]
    parts += [
        (f"layer.{index}", list(layer.parameters()), encoder_lr * layer_decay ** (num_layers - 1 - index))
        for index, layer in enumerate(structure.layers)
    ]
    parts.append((structure.stack_name, list(structure.stack.parameters()), encoder_lr))  # a final norm, if any
    parts.append(("head", list(model.parameters()), head_lr))  # what is left: pooler, classifier, other heads

    groups, taken = [], set()
    for part_name, part_params, lr in parts:
        params = [p for p in part_params if p.requires_grad and id(p) not in taken]
        taken.update(id(p) for p in params)
        decayed = [p for p in params if p.dim() >= 2]
        not_decayed = [p for p in params if p.dim() < 2]
        if decayed:
            groups.append({"name": part_name, "params": decayed, "lr": lr, "weight_decay": weight_decay})
        if not_decayed:
            groups.append({"name": f"{part_name}/no_decay", "params": not_decayed, "lr": lr, "weight_decay": 0.0})
    return groups


# --------------------------------------------------------------------------------------------------
# Batches


def texts_and_labels(examples: Sequence[Example], what: str = "examples") -> tuple[list[str], list[int]]:
    """Split a list of (text, label) pairs into texts and labels, with a clear error for bad items."""
    if len(examples) == 0:
        raise ValueError(f"{what} is empty")
    texts, labels = [], []
    for index, example in enumerate(examples):
        if (
            not isinstance(example, (tuple, list))
            or len(example) != 2
            or not isinstance(example[0], str)
            or isinstance(example[1], bool)
            or not isinstance(example[1], int)
        ):
            raise ValueError(f"{what}[{index}] must be a (text, label) pair with an int label, got {example!r}")
        texts.append(example[0])
        labels.append(example[1])
    return texts, labels


@dataclasses.dataclass(frozen=True)
class LabelVocabulary:
    """The names of a task's labels: label id i is ``names[i]``."""

    names: tuple[str, ...]
    id_of: dict[str, int] = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self):
        names = tuple(self.names)
        if len(set(names)) != len(names):
            raise ValueError(f"the label names must be distinct, got {list(names)}")
        if len(names) < 2:
            raise ValueError(f"a classifier needs at least 2 labels, got {list(names)}")
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "id_of", {name: index for index, name in enumerate(names)})

    def __len__(self) -> int:
        return len(self.names)

    def ids(self, names: Sequence[str], where: str) -> list[int]:
        """The ids of ``names``; a name outside the vocabulary is a ``ValueError`` that names ``where``
        it was found (a tag of a dev sentence never seen in training)."""
        try:
            return [self.id_of[name] for name in names]
        except KeyError as error:
            raise ValueError(f"{where}: the label {error.args[0]!r} is not one of the {len(self)} labels of the "
                             f"training split ({', '.join(self.names)})") from None


def check_label_ids(ids: Sequence[int], labels: LabelVocabulary, what: str) -> None:
    """Each of ``ids`` must be a label id of ``labels``, 0 .. len(labels) - 1; else a ``ValueError`` naming
    ``what[i]``, the example that has another."""
    for index, label in enumerate(ids):
        if not 0 <= label < len(labels):
            raise ValueError(f"{what}[{index}] has the label {label}, not one of the ids 0 .. {len(labels) - 1} "
                             f"of {', '.join(labels.names)}")


class PaddedBatches:
    """Encoded examples, served in batches cut to their longest sequence (dynamic padding).

    ``tensors`` maps names to tensors whose first dimension indexes the examples: per-token values
    (num_examples, N), padded to a common length N, and per-example values (num_examples,). A batch of
    examples I is a dict with every tensor's rows I, each per-token one cut to the batch's longest
    sequence n = max_{i in I} sum_t attention_mask[i, t], so (B, n) or (B,), and ``index`` (B,), the
    positions I of the examples. With ``shuffle=True`` each pass draws a new order from a generator
    seeded with ``seed``, so a run is reproducible.
    """

    def __init__(self, tensors: dict[str, torch.Tensor], *, batch_size: int = 32, shuffle: bool = False, seed: int = 0):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if "attention_mask" not in tensors:
            raise ValueError(f"tensors needs an attention_mask (num_examples, N); got {sorted(tensors)}")
        num_examples, length = tensors["attention_mask"].shape
        for name, values in tensors.items():
            if values.shape not in ((num_examples,), (num_examples, length)):
                raise ValueError(f"{name} has shape {tuple(values.shape)}: expected ({num_examples},) or "
                                 f"({num_examples}, {length}), as the attention_mask")
        self.tensors = dict(tensors)
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.generator = torch.Generator().manual_seed(seed)

    @property
    def num_examples(self) -> int:
        return len(self.tensors["attention_mask"])

    def __len__(self) -> int:
        return math.ceil(self.num_examples / self.batch_size)

    def __iter__(self) -> Iterator[Batch]:
        num_examples = self.num_examples
        order = torch.randperm(num_examples, generator=self.generator) if self.shuffle else torch.arange(num_examples)
        for index in order.split(self.batch_size):
            length = int(self.tensors["attention_mask"][index].sum(dim=1).max())
            batch = {name: values[index, :length] if values.dim() == 2 else values[index]
                     for name, values in self.tensors.items()}
            batch["index"] = index
            yield batch


class SentimentBatches(PaddedBatches):
    """Tokenized texts, or pairs of texts (and labels), served in batches of tensors.

    The texts are tokenized once, at construction, to at most ``max_length`` tokens: [CLS] text [SEP],
    or with ``text_pairs`` [CLS] text [SEP] pair [SEP] (token types 0 then 1), the longer of the two
    trimmed first. Each batch is then cut to the length of its longest sequence (dynamic padding). A
    batch is a dict with ``input_ids``, ``token_type_ids``, ``attention_mask`` (B, N), ``labels`` (B,)
    when labels were given, and ``index`` (B,), the position of each example in ``texts``. With
    ``shuffle=True`` each pass draws a new order from a generator seeded with ``seed``, so a run is
    reproducible.
    """

    def __init__(
        self,
        texts: Sequence[str],
        tokenizer,
        labels: Sequence[int] | None = None,
        *,
        text_pairs: Sequence[str] | None = None,
        batch_size: int = 32,
        max_length: int = SENTENCE_MAX_LENGTH,
        shuffle: bool = False,
        seed: int = 0,
    ):
        if labels is not None and len(labels) != len(texts):
            raise ValueError(f"got {len(texts)} texts but {len(labels)} labels")
        encoded = tokenizer.batch_encode(
            list(texts), None if text_pairs is None else list(text_pairs),
            max_length=max_length, padding=True, truncation=True, return_tensors="pt",
        )
        self.encoded = {name: encoded[name] for name in MODEL_INPUTS}  # each (num_texts, N)
        self.labels = None if labels is None else torch.tensor(list(labels), dtype=torch.long)
        tensors = self.encoded if self.labels is None else {**self.encoded, "labels": self.labels}
        super().__init__(tensors, batch_size=batch_size, shuffle=shuffle, seed=seed)


def labelled_batches(
    examples: Sequence[Example], tokenizer, labels: LabelVocabulary | None = None, *, batch_size: int = 64,
    what: str = "examples", **options
) -> SentimentBatches:
    """:class:`SentimentBatches` over (text, label) pairs; ``options`` go to its constructor. With
    ``labels`` (the label names), each label must be one of their ids.

    Raises:
        ValueError: naming ``what[i]``, an example that is not a (text, int) pair or whose label is
            not an id of ``labels``.
    """
    texts, ids = texts_and_labels(examples, what)
    if labels is not None:
        check_label_ids(ids, labels, what)
    return SentimentBatches(texts, tokenizer, ids, batch_size=batch_size, **options)


def model_inputs(batch: Batch, device: torch.device) -> dict[str, torch.Tensor]:
    """The model's keyword arguments (input ids, segments, mask) from ``batch``, moved to ``device``."""
    return {name: batch[name].to(device) for name in MODEL_INPUTS}


def batch_to_device(batch: Batch, device: torch.device) -> Batch:
    """``batch`` with its model inputs and labels on ``device``; ``index`` stays on the CPU, where the
    logits that it orders are collected (:func:`compute_logits`)."""
    return {name: tensor if name == "index" else tensor.to(device) for name, tensor in batch.items()}


def model_device(model: nn.Module) -> torch.device:
    """The device that holds ``model``'s parameters."""
    return next(model.parameters()).device


# --------------------------------------------------------------------------------------------------
# Inference and metrics


@contextlib.contextmanager
def evaluation_mode(model: nn.Module) -> Iterator[nn.Module]:
    """``model`` in eval mode (no dropout) for the block, its training mode restored afterwards."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


@torch.inference_mode()
def compute_logits(model: nn.Module, batches: Iterable[Batch], device: torch.device | None = None,
                   precision: str = "auto") -> torch.Tensor:
    """The model's logits (num_texts, C) in eval mode, as float32 on the CPU, in the order of the texts
    (whether or not ``batches`` shuffles), the forward pass in ``autocast(device, precision=precision)``.
    The model's training mode is restored afterwards."""
    device = model_device(model) if device is None else device
    indices, logits = [], []
    with evaluation_mode(model):
        for batch in batches:
            with autocast(device, precision=precision):
                logits.append(model(**model_inputs(batch, device)).logits.float().cpu())
            indices.append(batch["index"].cpu())  # the logits are on the CPU
    logits = torch.cat(logits)
    return logits[torch.cat(indices).argsort()]  # back to the order of the texts


def predict(
    model: nn.Module,
    tokenizer,
    texts: Sequence[str],
    batch_size: int = 64,
    max_length: int = SENTENCE_MAX_LENGTH,
    device: str | torch.device | None = None,
    precision: str = "auto",
) -> torch.Tensor:
    """Predicted labels y = argmax_c p(c | x), a (len(texts),) long tensor on the CPU.

    ``device`` None keeps the model where it is; otherwise the model is moved there. ``precision``:
    the forward pass's, as in ``bertlab.utils.autocast``.
    """
    device = evaluation_device(model, device)
    model.to(device)
    batches = SentimentBatches(texts, tokenizer, batch_size=batch_size, max_length=max_length)
    return compute_logits(model, batches, device, precision).argmax(dim=-1)


def confusion_matrix(predictions: torch.Tensor, labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Counts M (num_classes, num_classes) with M[i, j] = #examples of true class i predicted as j."""
    if predictions.shape != labels.shape or predictions.dim() != 1:
        raise ValueError(
            f"predictions {tuple(predictions.shape)} and labels {tuple(labels.shape)} must be 1-D of equal length"
        )
    pairs = labels.long() * num_classes + predictions.long()
    return torch.bincount(pairs, minlength=num_classes * num_classes).reshape(num_classes, num_classes)


def macro_f1(predictions: torch.Tensor, labels: torch.Tensor, num_classes: int | None = None) -> float:
    """Macro-averaged F1 score.

    For each class c: F1_c = 2 TP_c / (2 TP_c + FP_c + FN_c), the harmonic mean of precision and recall;
    macro-F1 is their plain mean over the classes that occur in ``labels`` or ``predictions`` (as
    scikit-learn's ``f1_score(average="macro")``), so a rare class weighs as much as a frequent one.
    """
    if num_classes is None:
        num_classes = int(max(predictions.max(), labels.max())) + 1
    matrix = confusion_matrix(predictions, labels, num_classes).double()
    true_positives = matrix.diagonal()
    false_positives = matrix.sum(dim=0) - true_positives
    false_negatives = matrix.sum(dim=1) - true_positives
    present = (matrix.sum(dim=0) + matrix.sum(dim=1)) > 0
    f1 = 2 * true_positives / (2 * true_positives + false_positives + false_negatives).clamp(min=1)
    return float(f1[present].mean())


def prediction_metrics(predictions: torch.Tensor, labels: torch.Tensor, num_classes: int) -> dict[str, float]:
    """``accuracy`` = mean_i [y_hat_i = y_i] and ``macro_f1`` (:func:`macro_f1`) of predicted labels
    (B,) against labels (B,): the scores of a model and of a baseline that predicts labels directly."""
    return {
        "accuracy": float((predictions == labels).double().mean()),
        "macro_f1": macro_f1(predictions, labels, num_classes=num_classes),
    }


def classification_metrics(logits: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """``accuracy``, ``macro_f1`` and the mean cross-entropy ``loss`` of logits (B, C) against labels (B,)."""
    return {
        **prediction_metrics(logits.argmax(dim=-1), labels, num_classes=logits.shape[-1]),
        "loss": float(F.cross_entropy(logits.float(), labels)),
    }


def evaluation_device(model: nn.Module, device: str | torch.device | None) -> torch.device:
    """Where to evaluate ``model``: ``device``, or with None the device that holds the model."""
    return model_device(model) if device is None else resolve_device(device)


# --------------------------------------------------------------------------------------------------
# Training


def classification_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    """The mean cross-entropy -log p(y | x) of a sequence classifier over ``batch`` (a dict from
    :class:`SentimentBatches`, moved to the model's device): the loss :func:`finetune` minimises. A
    token classifier given per-token labels (B, N) returns its own loss the same way, the mean over
    the labelled positions."""
    device = model_device(model)
    return model(**model_inputs(batch, device), labels=batch["labels"].to(device)).loss


def train_epoch(
    model: nn.Module,
    batches: PaddedBatches,
    loss_fn: Callable[[nn.Module, Batch], torch.Tensor],
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    device: torch.device,
    *,
    max_grad_norm: float = 1.0,
    progress: bool | Progress = True,
    description: str = "train",
    precision: str = "auto",
) -> float:
    """One pass over ``batches``: loss_fn(model, batch), backward, clip, step; return the mean loss.

    The forward pass runs under ``autocast(device, precision=precision)`` ("auto": bf16, or fp16 with a
    gradient scaler, on CUDA; bf16 on a CPU that computes it natively; else float32); the gradient
    norm is clipped to ``max_grad_norm`` and the learning
    rate follows ``scheduler`` (one step per batch). The mean is over examples, each batch's loss
    weighted by its number of examples. The losses are summed on the device, so the host waits for the
    device only every ``PROGRESS_EVERY`` batches, to show the loss, and at the end.
    """
    model.train()
    scaler = grad_scaler(device, precision)
    parameters = [p for p in model.parameters() if p.requires_grad]
    total_loss, num_examples = torch.zeros((), device=device), 0
    bars = Progress.of(progress) == Progress.BARS
    bar = tqdm(batches, desc=description, disable=not bars, leave=False)
    for step, batch in enumerate(bar, start=1):
        with autocast(device, precision=precision):
            loss = loss_fn(model, batch)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)  # clip the true gradients
        torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm)
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        batch_size = len(batch["index"])
        total_loss += loss.detach().float() * batch_size
        num_examples += batch_size
        if bars and step % PROGRESS_EVERY == 0:
            bar.set_postfix(loss=f"{float(loss):.4f}")
    return float(total_loss) / num_examples


def fit(
    model: nn.Module,
    batches: PaddedBatches,
    loss_fn: Callable[[nn.Module, Batch], torch.Tensor],
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    device: torch.device,
    *,
    epochs: int,
    dev_metrics: Callable[[nn.Module], dict[str, float]] | None = None,
    max_grad_norm: float = 1.0,
    progress: bool | Progress = True,
    description: str = "epoch",
    output_dir: str | Path | None = None,
    precision: str = "auto",
) -> list[dict[str, float]]:
    """The epoch loop of :func:`finetune` and :func:`bertlab.distillation.distill`; return the history.

    Epoch e = 1 ... ``epochs`` is one :func:`train_epoch` over ``batches`` with ``loss_fn`` (the
    cross-entropy to fine-tune, the distillation loss to distil), then ``dev_metrics(model)`` when
    given. Its record is ``{"epoch": e, "train_loss": ..., "dev_<name>": ...}``, one ``dev_`` entry per
    metric, printed as one line unless ``progress`` is ``Progress.NONE`` (or False). With ``output_dir``
    the trained model and ``history.json`` are written there at the end (:func:`save_run`).
    """
    history = []
    for epoch in range(1, epochs + 1):
        train_loss = train_epoch(
            model, batches, loss_fn, optimizer, scheduler, device,
            max_grad_norm=max_grad_norm, progress=progress, description=f"{description} {epoch}/{epochs}",
            precision=precision,
        )
        record = {"epoch": epoch, "train_loss": train_loss}
        if dev_metrics is not None:
            record.update({f"dev_{name}": value for name, value in dev_metrics(model).items()})
        history.append(record)
        if Progress.of(progress) != Progress.NONE:
            tqdm.write(format_record(record))
    if output_dir is not None:
        save_run(model, history, output_dir)
    return history


def make_optimizer(
    model: nn.Module,
    *,
    num_steps: int,
    encoder_lr: float,
    head_lr: float,
    weight_decay: float,
    layer_decay: float,
    warmup_ratio: float,
) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW over :func:`param_groups` and a linear warm-up (``warmup_ratio`` of the steps) and decay."""
    if not 0 <= warmup_ratio <= 1:
        raise ValueError(f"warmup_ratio must be in [0, 1], got {warmup_ratio}")
    groups = param_groups(model, encoder_lr, head_lr, weight_decay, layer_decay)
    if not groups:
        raise ValueError("the model has no trainable parameters")
    optimizer = torch.optim.AdamW(groups, lr=encoder_lr)
    return optimizer, get_linear_schedule(optimizer, round(warmup_ratio * num_steps), num_steps)


@dataclasses.dataclass(frozen=True)
class FineTuningRecipe:
    """The settings of a fine-tuning run, with BERT's defaults (Devlin et al., 2019, appendix A.3: 2 to 4
    epochs, batches of 16 or 32, learning rates of 2e-5 to 5e-5 for a pretrained model).

    ``epochs`` passes over the training examples in shuffled batches of ``batch_size`` (``seed`` fixes
    the order, the new weights and dropout), each example cut to ``max_length`` tokens (None: the
    task's length, 128 for single sentences). AdamW (:func:`param_groups`: weight_decay on the weight
    matrices; the encoder's layer l of L at encoder_lr * layer_decay^(L - l), the rest at head_lr, which
    None makes encoder_lr), a learning rate that rises linearly over warmup_ratio of the steps and falls
    linearly to 0, the gradient's norm clipped to max_grad_norm. :func:`finetune`,
    ``bertlab.task_finetuning.finetune_task`` and ``bertlab.distillation.distill`` run one.
    """

    epochs: int = 3
    batch_size: int = 32
    encoder_lr: float = 5e-5
    head_lr: float | None = None
    weight_decay: float = 0.01
    layer_decay: float = 1.0
    warmup_ratio: float = 0.1
    max_grad_norm: float = 1.0
    max_length: int | None = None
    seed: int = 0

    def __post_init__(self):
        for name in ("epochs", "batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.max_length is not None and (not isinstance(self.max_length, int) or self.max_length < 1):
            raise ValueError(f"max_length must be a positive integer (or None for the task's), got {self.max_length!r}")
        if not 0 <= self.warmup_ratio <= 1:
            raise ValueError(f"warmup_ratio must be in [0, 1], got {self.warmup_ratio}")
        for name in ("encoder_lr", "head_lr"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be positive, got {value!r}")

    def optimizer(self, model: nn.Module,
                  num_steps: int) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
        """AdamW and its schedule for ``num_steps`` steps of ``model`` (:func:`make_optimizer`)."""
        return make_optimizer(model, num_steps=num_steps, encoder_lr=self.encoder_lr,
                              head_lr=self.encoder_lr if self.head_lr is None else self.head_lr,
                              weight_decay=self.weight_decay, layer_decay=self.layer_decay,
                              warmup_ratio=self.warmup_ratio)

    def length(self, default: int) -> int:
        """The tokens an example is cut to: max_length, or the task's ``default`` when it is None."""
        return default if self.max_length is None else self.max_length


#: The recipe of a call that passes none: BERT's defaults.
DEFAULT_RECIPE = FineTuningRecipe()


def finetune_batches(
    model: nn.Module,
    batches: PaddedBatches,
    loss_fn: Callable[[nn.Module, Batch], torch.Tensor],
    dev_batches: PaddedBatches | None = None,
    metrics_fn: Callable[[nn.Module, PaddedBatches, torch.device, str], dict[str, float]] | None = None,
    recipe: FineTuningRecipe | None = None,
    *,
    device: str | torch.device | None = None,
    progress: bool | Progress = True,
    output_dir: str | Path | None = None,
    precision: str = "auto",
    description: str = "epoch",
    **recipe_keywords,
) -> list[dict[str, float]]:
    """BERT's fine-tuning recipe on any batches and loss; return the history of :func:`fit`.

    Minimises ``loss_fn(model, batch)`` over ``batches`` for ``recipe.epochs`` epochs with AdamW
    (:func:`param_groups`: ``encoder_lr`` for the encoder, ``head_lr`` for the rest, default
    ``encoder_lr``), a linear warm-up over ``warmup_ratio`` of the steps then linear decay to zero, and
    gradient clipping (:class:`FineTuningRecipe`, BERT's defaults when None; the batches are built
    already, so its batch_size and max_length are the caller's to apply); after each epoch,
    ``metrics_fn(model, dev_batches, device, precision)`` gives the ``dev_`` entries of the history.
    :func:`finetune` calls it for sentence classification, ``bertlab.task_finetuning.finetune_task``
    for the other task types, ``bertlab.distillation.distill`` with the distillation loss.

    The model is seeded with the recipe's seed, moved to ``device`` (None: CUDA when available) and
    trained and evaluated in ``precision`` (``bertlab.utils.autocast``), the progress bar named
    ``description``. With ``output_dir`` the final model (``save_pretrained``) and ``history.json`` are
    written there. The recipe's fields passed as keywords (earlier releases' API) still work, with a
    deprecation warning.
    """
    recipe = recipe_from_keywords(FineTuningRecipe, recipe, recipe_keywords, "finetune_batches", DEFAULT_RECIPE)
    if (dev_batches is None) != (metrics_fn is None):
        raise ValueError("give both dev_batches and metrics_fn, or neither")
    check_precision(precision)
    device = resolve_device(device)
    seed_everything(recipe.seed)
    model.to(device)
    optimizer, scheduler = recipe.optimizer(model, recipe.epochs * len(batches))

    def dev_metrics(model: nn.Module) -> dict[str, float]:
        return metrics_fn(model, dev_batches, device, precision)

    return fit(
        model, batches, loss_fn, optimizer, scheduler, device,
        epochs=recipe.epochs, dev_metrics=None if dev_batches is None else dev_metrics,
        max_grad_norm=recipe.max_grad_norm, progress=progress, description=description, output_dir=output_dir,
        precision=precision,
    )


# --------------------------------------------------------------------------------------------------
# A task type, as data: single sentences here, pairs, tagging and spans in bertlab.task_finetuning


@dataclasses.dataclass(frozen=True)
class ExampleScores:
    """A model's result on each evaluated example, in the examples' order: ``scores[i]`` out of
    ``weights[i]``, so that its score on the examples is sum_i scores_i / sum_i weights_i (1 per example
    when ``weights`` is None). Sentences and pairs: 1 or 0, the label right or wrong; tagging: the words of sentence i
    tagged right, out of its words; spans: question i's F1 in [0, 1]."""

    scores: list[float]
    weights: list[float] | None = None


@dataclasses.dataclass(frozen=True)
class TaskEvaluation:
    """A model evaluated on a task's examples, all from one forward pass over them (a task type's
    ``evaluate``, :func:`task_evaluation`): ``scores``, those of :func:`evaluate_task` (accuracy, macro-F1
    and loss of sentences and pairs, word accuracy of tagging, exact match and F1 in percent of spans);
    ``example_scores``, the task's metric on each example (:func:`task_example_scores`); ``predictions``,
    what the model predicts for each example: the label ids (num_examples,) of sentences and pairs, the
    tag of each word of each sentence (None: a word without a piece), the answer to each question by its
    id (spans)."""

    scores: dict[str, float]
    example_scores: ExampleScores
    predictions: torch.Tensor | list[list[str | None]] | dict[str, str]


def label_evaluation(model: nn.Module, batches: SentimentBatches, device: torch.device,
                     precision: str = "auto") -> TaskEvaluation:
    """A sequence classifier on labelled ``batches`` (sentences and pairs), the forward pass on ``device``
    in ``precision``: the predicted labels y_hat_i = argmax_c logits[i, c], their
    :func:`classification_metrics` (accuracy, macro-F1 and the mean cross-entropy of the logits), and the
    score of each example, [y_hat_i = y_i] (1 right, 0 wrong)."""
    logits = compute_logits(model, batches, device, precision)  # (num_examples, C), on the CPU
    predictions, labels = logits.argmax(dim=-1), batches.labels.cpu()  # (num_examples,) each
    return TaskEvaluation(classification_metrics(logits, labels), ExampleScores((predictions == labels).int().tolist()),
                          predictions)


@dataclasses.dataclass(frozen=True)
class BaselineResult:
    """A simple baseline's result on the test examples, scored as the model is: ``scores`` has some of the
    model's score names, in the same units; ``example_scores`` its score on each test example (the paired
    tests read them); ``details`` what else it reports (a setting it chose on dev, say)."""

    scores: dict[str, float]
    example_scores: ExampleScores
    details: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class TaskType:
    """A task type of BERT (Devlin et al., 2019, figure 4), all that fine-tuning, evaluating and
    comparing it needs: a record, read by :func:`finetune_task`, :func:`evaluate_task`, ``bertlab finetune``
    and the benchmarks. ``bertlab.task_finetuning.TASKS`` holds the four.

    - ``model_class``: the BERT with the task's head (a GPT's is :meth:`ModelFamily.model_class`'s).
    - ``labels``: the label names from the training examples (None: the examples carry label ids and
      the model says how many, sentences; or the task has no labels, spans).
    - ``batches(examples, tokenizer, labels, *, max_length, batch_size, shuffle, seed, what)``: the
      examples encoded, a :class:`~bertlab.finetuning.PaddedBatches`.
    - ``loss(model, batch)``: what training minimises.
    - ``evaluate(model, batches, device, precision)``: the evaluation, from one forward pass over
      ``batches``, a :class:`TaskEvaluation`: its scores, ``metric`` on each example (an
      :class:`ExampleScores`) and the model's predictions.
    - ``metric``: the score (a key of the evaluation's ``scores``, higher is better) that chooses a learning
      rate.
    - ``texts(examples)``: their text, to learn a vocabulary from.
    - ``max_length``: the default number of tokens of an encoded example.
    - ``dataset``: the name of its dataset, as results show it.
    - ``load_splits(root, seed=seed)``: its dataset's train, dev and test splits from the data folder
      ``root`` (None: ``$BERTLAB_DATA``), a ``DatasetSplits`` (``SentimentSplits``, ``bertlab.task_data.TaskSplits``).
    - ``baselines(train, dev, test)``: its simple baselines, trained on ``train`` (a setting chosen on
      ``dev``) and scored on ``test``: a dict from a baseline's name to its :class:`BaselineResult`.
    """

    name: str
    model_class: type[BertPreTrainedModel]
    labels: Callable[[Sequence], LabelVocabulary] | None
    batches: Callable[..., PaddedBatches]
    loss: Callable[[nn.Module, Batch], torch.Tensor]
    evaluate: Callable[[nn.Module, PaddedBatches, torch.device, str], TaskEvaluation]
    metric: str
    texts: Callable[[Sequence], list[str]]
    max_length: int
    dataset: str
    load_splits: Callable[..., DatasetSplits]
    baselines: Callable[[Sequence, Sequence, Sequence], dict[str, BaselineResult]]


def task_model_class(task: TaskType, source: nn.Module | BertConfig | GPTConfig | str | Path) -> type[nn.Module]:
    """The class of the task's model in the family of ``source`` (a model, a config or a checkpoint folder,
    :func:`model_family`): ``task.model_class`` for a BERT, :class:`~bertlab.gpt.GPTForSequenceClassification`
    for a GPT on the task types whose BERT is a sequence classifier.

    Raises:
        ValueError: when the family has no model for the task (a GPT for tagging or spans).
    """
    return model_family(source).model_class(task)


def task_model(task: TaskType, source: BertConfig | GPTConfig | str | Path,
               labels: LabelVocabulary | None) -> nn.Module:
    """The task's model (:func:`task_model_class`, a BERT or a GPT as ``source`` is): randomly initialised
    from a config, or with the weights of a checkpoint folder (``from_pretrained``: the head a pretrained
    model lacks is initialised, with a warning), scoring ``len(labels)`` labels when the task has labels."""
    options = {} if labels is None else {"num_labels": len(labels)}
    model_class = task_model_class(task, source)
    if isinstance(source, (str, Path)):
        return model_class.from_pretrained(source, **options)
    return model_class(source, **options)


def check_labels(task: TaskType, model: nn.Module, labels: LabelVocabulary | None) -> None:
    """``labels`` must be given exactly when the task has labels, and be as many as the model scores."""
    if task.labels is None:
        if labels is not None:
            raise ValueError(f"the {task.name} task has no label names: labels must be None")
        return
    if labels is None:
        raise ValueError(f"the {task.name} task needs labels=task.labels(train), the label names of the training "
                         "split")
    if getattr(model, "num_labels", None) != len(labels):
        raise ValueError(f"the model scores {getattr(model, 'num_labels', None)} labels but there are {len(labels)} "
                         f"({', '.join(labels.names)}): build it with task_model(task, ..., labels)")


def finetune_task(
    task: TaskType,
    model: nn.Module,
    tokenizer: BertTokenizer,
    train: Sequence,
    dev: Sequence | None = None,
    recipe: FineTuningRecipe | None = None,
    *,
    labels: LabelVocabulary | None = None,
    device: str | torch.device | None = None,
    progress: bool | Progress = True,
    output_dir: str | Path | None = None,
    precision: str = "auto",
    **recipe_keywords,
) -> list[dict[str, float]]:
    """Fine-tune ``model`` on the ``train`` examples of ``task`` as BERT does; return the history.

    Minimises ``task.loss`` over ``task.batches(train, ...)`` (shuffled with the recipe's seed) with the
    ``recipe`` of :func:`bertlab.finetuning.finetune` (:class:`~bertlab.finetuning.FineTuningRecipe`;
    None: BERT's defaults): AdamW with ``encoder_lr`` for the encoder and ``head_lr`` (default
    ``encoder_lr``) for the head, optional layer-wise decay, a linear warm-up over ``warmup_ratio`` of
    the steps then linear decay, gradient clipping, in ``precision`` on ``device`` (None: CUDA when
    available). The recipe's ``max_length`` None takes the task's (128 tokens, 384 for spans). With
    ``output_dir`` the final model and ``history.json`` are saved.

    Returns:
        One dict per epoch: ``epoch``, ``train_loss`` and, with ``dev``, ``dev_<name>`` for each score
        of ``task.evaluate``: ``dev_accuracy``, ``dev_macro_f1``, ``dev_loss`` (sentences, pairs),
        ``dev_accuracy`` (tagging, per word), ``dev_exact_match``, ``dev_f1`` (spans, in percent).
    """
    recipe = recipe_from_keywords(FineTuningRecipe, recipe, recipe_keywords, "finetune_task", DEFAULT_RECIPE)
    check_labels(task, model, labels)
    max_length = recipe.length(task.max_length)
    batches = task.batches(train, tokenizer, labels, max_length=max_length, batch_size=recipe.batch_size,
                           shuffle=True, seed=recipe.seed, what="train")
    dev_batches = None if dev is None else task.batches(dev, tokenizer, labels, max_length=max_length,
                                                         batch_size=EVALUATION_BATCH_SIZE, what="dev")

    def dev_scores(model: nn.Module, evaluated: PaddedBatches, device: torch.device,
                   precision: str) -> dict[str, float]:
        return task.evaluate(model, evaluated, device, precision).scores

    return finetune_batches(model, batches, task.loss, dev_batches, None if dev is None else dev_scores, recipe,
                            device=device, progress=progress, output_dir=output_dir, precision=precision)


def evaluation_batches(
    task: TaskType,
    model: nn.Module,
    tokenizer: BertTokenizer,
    examples: Sequence,
    *,
    labels: LabelVocabulary | None = None,
    batch_size: int = EVALUATION_BATCH_SIZE,
    max_length: int | None = None,
    device: str | torch.device | None = None,
    what: str = "examples",
) -> tuple[PaddedBatches, torch.device]:
    """``examples`` encoded for evaluating ``model`` on ``task`` (``task.batches``, ``max_length`` None:
    the task's), and the device to evaluate on (None: the one that holds the model), the model moved
    there: what :func:`task_evaluation` evaluates.

    ``labels``: the label names of the training split (a tag of ``examples`` outside them is an error
    that names the example, ``what[i]``).
    """
    check_labels(task, model, labels)
    device = evaluation_device(model, device)
    model.to(device)
    max_length = task.max_length if max_length is None else max_length
    return task.batches(examples, tokenizer, labels, max_length=max_length, batch_size=batch_size, what=what), device


def task_evaluation(task: TaskType, model: nn.Module, tokenizer: BertTokenizer, examples: Sequence, *,
                    precision: str = "auto", **options) -> TaskEvaluation:
    """``model`` evaluated on ``examples`` of ``task`` (``task.evaluate``), one forward pass over them: its
    scores (:func:`evaluate_task`), its score on each example (:func:`task_example_scores`) and its
    predictions, a :class:`TaskEvaluation`.

    ``options``: those of :func:`evaluation_batches` (``labels``, ``batch_size``, ``max_length``,
    ``device``, ``what``); ``precision`` is the forward pass's, as in ``bertlab.utils.autocast``.
    """
    batches, device = evaluation_batches(task, model, tokenizer, examples, **options)
    return task.evaluate(model, batches, device, precision)


def evaluate_task(task: TaskType, model: nn.Module, tokenizer: BertTokenizer, examples: Sequence, *,
                  precision: str = "auto", **options) -> dict[str, float]:
    """The scores of ``model`` on ``examples`` of ``task`` (:func:`task_evaluation`'s, the same
    ``precision`` and ``options``): accuracy, macro-F1 and loss (sentences, pairs), word accuracy
    (tagging), exact match and F1 in percent (spans)."""
    return task_evaluation(task, model, tokenizer, examples, precision=precision, **options).scores


def task_example_scores(task: TaskType, model: nn.Module, tokenizer: BertTokenizer, examples: Sequence, *,
                        precision: str = "auto", **options) -> ExampleScores:
    """``task.metric`` of ``model`` on each of ``examples`` (:class:`ExampleScores`, :func:`task_evaluation`'s,
    the same ``precision`` and ``options``): their mean, weighted, is :func:`evaluate_task`'s score."""
    return task_evaluation(task, model, tokenizer, examples, precision=precision, **options).example_scores


def finetune(model: nn.Module, tokenizer, train: Sequence[Example], dev: Sequence[Example] | None = None,
             recipe: FineTuningRecipe | None = None, **options) -> list[dict[str, float]]:
    """Fine-tune a sequence classifier on (text, label) pairs, as BERT does; return the history:
    :func:`finetune_task` of the sentence task, :data:`SENTENCES` (``options`` are its keywords).

    Minimises the mean cross-entropy -log p(y | x) over ``train`` with the ``recipe``
    (:class:`FineTuningRecipe`; None: BERT's defaults): AdamW (:func:`param_groups`: ``encoder_lr`` for
    the encoder, ``head_lr`` for pooler and classifier, default ``encoder_lr``), a linear warm-up over
    ``warmup_ratio`` of the steps then linear decay to zero, and gradient clipping; texts cut to
    max_length tokens (None: 128). Devlin et al. (2019) recommend 2 to 4 epochs, batch 16 or 32 and a
    learning rate of 2e-5 to 5e-5 for a pretrained model; a model trained from scratch needs a larger
    rate (about 1e-3 for a tiny one).
    All trainable weights are updated (call :func:`freeze_layers` first to freeze some).

    The model is moved to ``device`` (None: CUDA when available) and trained in ``precision``
    (``bertlab.utils.autocast``; "auto": bf16 on CUDA, or fp16 with a gradient scaler where bf16 is not
    native, and bf16 on a CPU that computes it natively; else float32), evaluated in it too.
    With ``output_dir`` the final model (``save_pretrained``) and ``history.json`` are written there.

    Returns:
        One dict per epoch: ``epoch``, ``train_loss`` and, with ``dev``, ``dev_accuracy``,
        ``dev_macro_f1`` and ``dev_loss``.
    """
    return finetune_task(SENTENCES, model, tokenizer, train, dev, recipe, **options)


def evaluate(model: nn.Module, tokenizer, examples: Sequence[Example], **options) -> dict[str, float]:
    """Accuracy, macro-F1 and mean cross-entropy loss of ``model`` on (text, label) ``examples``:
    :func:`evaluate_task` of :data:`SENTENCES` (``options``: its ``batch_size``, ``max_length``,
    ``device``, ``precision``).

    ``device`` None keeps the model where it is; otherwise the model is moved there. ``precision``:
    the forward pass's, as in ``bertlab.utils.autocast``.
    """
    return evaluate_task(SENTENCES, model, tokenizer, examples, **options)


@dataclasses.dataclass
class TunedRun:
    """The run of a learning-rate search that scored best on the dev set.

    ``model`` is that run's model; ``learning_rate`` its rate; ``dev`` its dev metrics; ``metric`` the
    one the search maximised (a key of ``dev``); ``dev_score_by_learning_rate`` every rate tried and
    its dev score on that metric.
    """

    model: nn.Module
    learning_rate: float
    dev: dict[str, float]
    metric: str
    dev_score_by_learning_rate: dict[float, float]

    @property
    def dev_accuracy_by_learning_rate(self) -> dict[float, float]:
        """The dev accuracy of every rate tried, for a search on accuracy (chapters 08 and 09)."""
        if self.metric != "accuracy":
            raise AttributeError(f"this search maximised {self.metric}, not accuracy: read dev_score_by_learning_rate")
        return self.dev_score_by_learning_rate


def choose_learning_rate(
    train_with: Callable[[float], nn.Module],
    learning_rates: Sequence[float],
    tokenizer: BertTokenizer,
    dev: Sequence,
    *,
    task: TaskType | None = None,
    labels: LabelVocabulary | None = None,
    max_length: int | None = None,
    precision: str = "auto",
) -> TunedRun:
    """Train one model per learning rate with ``train_with(lr)`` and keep the one best on ``dev``.

    Each model is scored by :func:`evaluate_task` of ``task`` (None: :data:`SENTENCES`) on ``dev``,
    its ``task.metric`` (accuracy for sentences, pairs and tagging, F1 for spans), ``labels`` the task's
    label names; the rate with the highest score wins. The fair protocol for comparing training methods:
    every method gets the same data and the same number of steps, and its own learning rate, chosen on
    the development set from the same grid, never on the test set. Ties go to the first rate of
    ``learning_rates``.
    """
    if not learning_rates:
        raise ValueError("learning_rates is empty: give at least one rate to try")
    task = SENTENCES if task is None else task
    best, scores = None, {}
    for lr in learning_rates:
        model = train_with(lr)
        metrics = evaluate_task(task, model, tokenizer, dev, labels=labels, max_length=max_length, precision=precision,
                                what="dev")
        scores[lr] = metrics[task.metric]
        if best is None or metrics[task.metric] > best.dev[task.metric]:
            best = TunedRun(model, lr, metrics, task.metric, scores)  # scores fills up as the search goes on
    return best


#: bertlab's scores by name: those computed as fractions (accuracy, macro-F1) and those computed in percent,
#: as SQuAD's official script reports them (exact match and F1 of ``bertlab.tasks.squad_scores``).
FRACTION_SCORES = frozenset({"accuracy", "macro_f1"})
PERCENT_SCORES = frozenset({"exact_match", "f1"})


def format_value(name: str, value: float | int) -> str:
    """The entry ``name`` of a record (``epoch``, ``train_loss``, ``dev_accuracy``, ``test_exact_match``) as
    printed: a score in percent, with its sign, whichever unit it was computed in (an accuracy of 0.8125 and an
    exact match of 81.25 are both ``81.25%``); another number as it is, a float to 4 decimals."""
    score = name.split("_", 1)[1] if name.startswith(("train_", "dev_", "test_")) else name
    if score in FRACTION_SCORES:
        return f"{100 * value:.2f}%"
    if score in PERCENT_SCORES:
        return f"{value:.2f}%"
    return f"{value:.4f}" if isinstance(value, float) else f"{value}"


def format_record(record: dict[str, float]) -> str:
    """One line for an epoch's record, every score in percent: ``epoch 2, train_loss 0.4312, dev_accuracy 81.25%``."""
    return ", ".join(f"{name} {format_value(name, value)}" for name, value in record.items())


def save_run(model: nn.Module, history: list[dict[str, float]], output_dir: str | Path) -> Path:
    """Write the model (``save_pretrained``) and ``history.json`` to ``output_dir``; return the folder."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output_dir)
    (output_dir / "history.json").write_text(json.dumps(history, indent=2) + "\n")
    return output_dir


# --------------------------------------------------------------------------------------------------
# Baseline: logistic regression on a bag of words


class BagOfWordsClassifier(nn.Module):
    """Logistic regression on a bag of words, the baseline BERT is compared with.

    A text x becomes binary features phi(x)_w = 1 if word w of the vocabulary occurs in x (words from
    BERT's :class:`~bertlab.tokenization.BasicTokenizer`: lower-cased, punctuation split off; unknown
    words are dropped), and p(y | x) = softmax(W phi(x) + b). Word order is lost, so "not good" and
    "good, not" look the same: the point of the comparison.
    """

    def __init__(self, vocabulary: Sequence[str], num_labels: int = 2):
        super().__init__()
        self.word_to_index = {word: index for index, word in enumerate(vocabulary)}
        self.basic_tokenizer = BasicTokenizer(do_lower_case=True)
        self.word_weights = nn.EmbeddingBag(len(self.word_to_index), num_labels, mode="sum")  # rows of W^T
        self.bias = nn.Parameter(torch.zeros(num_labels))
        nn.init.zeros_(self.word_weights.weight)

    def featurize(self, texts: Sequence[str]) -> list[torch.Tensor]:
        """The indices of the distinct known words of each text."""
        return self.word_indices([self.basic_tokenizer.tokenize(text) for text in texts])

    def word_indices(self, word_lists: Sequence[Sequence[str]]) -> list[torch.Tensor]:
        """The indices of the distinct known words of each list of words (features already split into
        words, such as those of a sentence pair: ``bertlab.task_baselines.pair_words``)."""
        features = []
        for words in word_lists:
            indices = [self.word_to_index[word] for word in dict.fromkeys(words) if word in self.word_to_index]
            features.append(torch.tensor(indices, dtype=torch.long))
        return features

    def forward(self, features: Sequence[torch.Tensor]) -> torch.Tensor:
        """Logits W phi(x) + b, (B, C), for the word indices of B texts (see :meth:`featurize`)."""
        offsets = torch.tensor([0] + [len(f) for f in features[:-1]]).cumsum(dim=0)
        word_ids = torch.cat(list(features)).to(self.bias.device)
        return self.word_weights(word_ids, offsets.to(self.bias.device)) + self.bias

    @torch.no_grad()
    def predict(self, texts: Sequence[str]) -> torch.Tensor:
        """Predicted labels, a (len(texts),) long tensor."""
        return self(self.featurize(texts)).argmax(dim=-1).cpu()

    @torch.no_grad()
    def evaluate(self, examples: Sequence[Example]) -> dict[str, float]:
        """Accuracy, macro-F1 and mean cross-entropy loss on (text, label) ``examples``."""
        texts, labels = texts_and_labels(examples)
        return classification_metrics(self(self.featurize(texts)).cpu(), torch.tensor(labels))


def train_bag_of_words(train: Sequence[Example], **settings) -> BagOfWordsClassifier:
    """Fit a :class:`BagOfWordsClassifier` on (text, label) pairs; return it (in eval mode).

    The words of each text are BERT's basic tokens (lower-cased, punctuation split off); the rest is
    :func:`fit_bag_of_words`, with its ``settings`` (``num_labels``, ``min_count``, ``epochs``,
    ``batch_size``, ``lr``, ``weight_decay``, ``seed``).
    """
    texts, labels = texts_and_labels(train, "train")
    basic_tokenizer = BasicTokenizer(do_lower_case=True)
    return fit_bag_of_words([basic_tokenizer.tokenize(text) for text in texts], labels, **settings)


def fit_bag_of_words(
    word_lists: Sequence[Sequence[str]],
    labels: Sequence[int],
    *,
    num_labels: int | None = None,
    min_count: int = 1,
    epochs: int = 10,
    batch_size: int = 64,
    lr: float = 0.05,
    weight_decay: float = 1e-4,
    seed: int = 0,
) -> BagOfWordsClassifier:
    """Fit a :class:`BagOfWordsClassifier` on examples given as lists of words, with their labels.

    The vocabulary is every word seen at least ``min_count`` times in ``word_lists``; the weights
    minimise the mean cross-entropy plus the L2 penalty ``weight_decay`` * ||W||^2 / 2 (Adam,
    minibatches of ``batch_size``, ``epochs`` passes in an order seeded with ``seed``).
    """
    if len(word_lists) != len(labels):
        raise ValueError(f"got {len(word_lists)} lists of words but {len(labels)} labels")
    if not word_lists:
        raise ValueError("there is no example to fit")
    generator = seed_everything(seed)
    counts = Counter(word for words in word_lists for word in words)
    vocabulary = sorted(word for word, count in counts.items() if count >= min_count)
    model = BagOfWordsClassifier(vocabulary, num_labels or max(labels) + 1)
    features = model.word_indices(word_lists)
    targets = torch.tensor(list(labels))
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(epochs):
        for index in torch.randperm(len(word_lists), generator=generator).split(batch_size):
            logits = model([features[i] for i in index])
            loss = F.cross_entropy(logits, targets[index]) + weight_decay / 2 * model.word_weights.weight.square().sum()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    return model.eval()


# --------------------------------------------------------------------------------------------------
# The sentence task type


def majority_label(labels: Sequence[int]) -> int:
    """The most frequent label, the majority-class baseline's one answer; a tie goes to the smallest label."""
    if len(labels) == 0:
        raise ValueError("there is no label to count")
    counts = Counter(labels)
    return min(counts, key=lambda label: (-counts[label], label))


def prediction_result(predictions: torch.Tensor, labels: Sequence[int], num_classes: int) -> BaselineResult:
    """A classifier's ``predictions`` (N,) of the test ``labels`` as a baseline's result: accuracy and
    macro-F1 over ``num_classes``, and 1 or 0 on each example."""
    labels = torch.tensor(list(labels))
    return BaselineResult(prediction_metrics(predictions, labels, num_classes),
                          ExampleScores((predictions == labels).int().tolist()))


def sentence_baselines(train: Sequence[Example], dev: Sequence[Example],
                       test: Sequence[Example]) -> dict[str, BaselineResult]:
    """The sentence task's baselines, trained on ``train`` and scored on ``test`` (``dev`` is not needed:
    neither has a setting to choose): the majority class of ``train``, and logistic regression on a bag
    of words (:func:`train_bag_of_words`, its default settings, seed 0)."""
    train_labels, test_labels = texts_and_labels(train, "train")[1], texts_and_labels(test, "test")[1]
    num_classes = max(2, max(train_labels + test_labels) + 1)
    majority = torch.full((len(test),), majority_label(train_labels))
    bag_of_words = train_bag_of_words(train, num_labels=num_classes, seed=0)
    return {"majority class": prediction_result(majority, test_labels, num_classes),
            "bag of words": prediction_result(bag_of_words.predict([text for text, _ in test]), test_labels,
                                              num_classes)}


def example_texts(examples: Sequence[Example]) -> list[str]:
    """The texts of (text, label) pairs (to learn a vocabulary from)."""
    return texts_and_labels(examples)[0]


#: Sentence classification (Devlin et al., 2019, figure 4b): [CLS] sentence [SEP] -> a label read from the
#: pooled [CLS] vector; cross-entropy; accuracy and macro-F1. Its dataset is MR, sentence polarity v1.0
#: (Pang and Lee, 2005), split 80/10/10 (``bertlab.data.load_sentiment``).
SENTENCES = TaskType(
    name="sentence", model_class=BertForSequenceClassification, labels=None, batches=labelled_batches,
    loss=classification_loss, evaluate=label_evaluation, metric="accuracy", texts=example_texts,
    max_length=SENTENCE_MAX_LENGTH, dataset="MR (sentence polarity v1.0)",
    load_splits=functools.partial(load_sentiment, "mr"), baselines=sentence_baselines,
)
