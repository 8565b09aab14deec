"""Knowledge distillation of a fine-tuned BERT into a shallower, faster student (chapter 09).

A student learns from the teacher's whole output distribution, softened by a temperature T, and not
only from the labels (Hinton et al., 2015). DistilBERT (Sanh et al., 2019) halves BERT's depth, starts
the student from one teacher layer out of two, and keeps 97% of its GLUE score while running 60% faster.
This module has the loss, the initialisation, the training (on the epoch loop of fine-tuning,
:func:`bertlab.finetuning.finetune_batches`, with the distillation loss) and the comparison table.
"""

import copy
import dataclasses
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from bertlab.finetuning import (
    SENTENCE_MAX_LENGTH,
    Batch,
    Example,
    FineTuningRecipe,
    Progress,
    batch_to_device,
    bert_backbone,
    classification_metrics,
    compute_logits,
    encoder_layers,
    finetune_batches,
    labelled_batches,
    model_device,
    model_inputs,
)
from bertlab.utils import check_precision, compute_dtype, recipe_from_keywords, resolve_device


def distillation_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    labels: torch.Tensor | None = None,
    alpha: float = 0.5,
    temperature: float = 2.0,
) -> torch.Tensor:
    """Hinton et al.'s (2015) distillation loss, a scalar.

        L = alpha * CE(s, y) + (1 - alpha) * T^2 * KL(softmax(t / T) || softmax(s / T))

    with s the student's and t the teacher's logits, y the labels and T the temperature. The KL term
    is summed over the classes and averaged over the examples (``reduction="batchmean"``), as
    ``F.kl_div(F.log_softmax(s / T, -1), F.softmax(t / T, -1), reduction="batchmean")``. Its gradient
    with respect to s is (softmax(s / T) - softmax(t / T)) / T per example, so the factor T^2 keeps the
    soft term's gradients about the same size whatever T (Hinton et al., 2015, section 2).

    With ``labels=None`` there is no hard term and the result is the soft term alone,
    T^2 * KL(...), whatever ``alpha``. The teacher's logits are detached: no gradient flows into the
    teacher. The loss is computed in float32 (float64 for float64 logits).

    Args:
        student_logits: (..., C) logits s, e.g. (B, C).
        teacher_logits: (..., C) logits t, the same shape.
        labels: (...) class indices y, e.g. (B,); -100 marks a position without label.
        alpha: weight of the hard (label) term, in [0, 1].
        temperature: T > 0.
    """
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(
            f"student_logits {tuple(student_logits.shape)} and teacher_logits "
            f"{tuple(teacher_logits.shape)} must have the same shape (..., C)"
        )
    if student_logits.dim() < 1:
        raise ValueError("student_logits must have a class dimension, shape (..., C)")
    if labels is not None and labels.shape != student_logits.shape[:-1]:
        raise ValueError(
            f"labels {tuple(labels.shape)} must have the shape of the logits without the class "
            f"dimension, {tuple(student_logits.shape[:-1])}"
        )
    check_distillation_options(alpha, temperature)

    num_classes, dtype = student_logits.shape[-1], compute_dtype(student_logits)
    student = student_logits.to(dtype).reshape(-1, num_classes) / temperature  # (B, C)
    teacher = teacher_logits.detach().to(dtype).reshape(-1, num_classes) / temperature  # (B, C)
    soft = F.kl_div(
        F.log_softmax(student, dim=-1), F.log_softmax(teacher, dim=-1), reduction="batchmean", log_target=True
    ) * temperature**2
    if labels is None:
        return soft
    hard = F.cross_entropy(student_logits.to(dtype).reshape(-1, num_classes), labels.reshape(-1))
    return alpha * hard + (1 - alpha) * soft


def check_distillation_options(alpha: float, temperature: float) -> None:
    """Raise a ValueError unless 0 <= alpha <= 1 and temperature > 0."""
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")


def init_student_from_teacher(teacher: nn.Module, layer_ids: Sequence[int] | None = None) -> nn.Module:
    """A shallower copy of ``teacher`` that keeps the encoder layers ``layer_ids``.

    The student has the teacher's class and config, except ``num_hidden_layers = len(layer_ids)``. Its
    embeddings, pooler, classifier (or other heads) and student layer k = teacher layer layer_ids[k] are
    copies of the teacher's weights: training one does not change the other. The default keeps every
    other layer, 0, 2, 4, ..., as DistilBERT does (Sanh et al., 2019). Works for a
    :class:`~bertlab.bert.BertModel` and for a model with a ``.bert`` backbone.

    Raises:
        ValueError: unless ``layer_ids`` is a non-empty, strictly increasing list of layer indices.
    """
    num_layers = len(encoder_layers(teacher))
    layer_ids = list(range(0, num_layers, 2)) if layer_ids is None else list(layer_ids)
    check_layer_ids(layer_ids, num_layers)

    student = copy.deepcopy(teacher)  # same class, config and heads; shares no tensor with the teacher
    kept = [encoder_layers(student)[index] for index in layer_ids]
    bert_backbone(student).encoder.layers = nn.ModuleList(kept)
    old_config = bert_backbone(student).config
    new_config = dataclasses.replace(old_config, num_hidden_layers=len(layer_ids))
    for module in student.modules():
        if getattr(module, "config", None) is old_config:
            module.config = new_config
    return student


def check_layer_ids(layer_ids: Sequence[int], num_layers: int) -> None:
    """Raise a ValueError unless ``layer_ids`` is a non-empty, strictly increasing list in [0, num_layers)."""
    if not layer_ids:
        raise ValueError("layer_ids is empty: the student needs at least one layer")
    for index in layer_ids:
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < num_layers:
            raise ValueError(f"layer_ids must be ints in [0, {num_layers}) (the teacher's layers), got {layer_ids}")
    if any(later <= earlier for earlier, later in zip(layer_ids, layer_ids[1:])):
        raise ValueError(f"layer_ids must be strictly increasing, got {layer_ids}")


def agreement(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> float:
    """The fraction of examples where the student predicts the teacher's class (argmax)."""
    return float((student_logits.argmax(dim=-1) == teacher_logits.argmax(dim=-1)).double().mean())


@dataclasses.dataclass(frozen=True)
class DistillationRecipe(FineTuningRecipe):
    """A fine-tuning recipe (:class:`~bertlab.finetuning.FineTuningRecipe`) with the weight ``alpha`` of
    the labels' cross-entropy and the ``temperature`` T of :func:`distillation_loss` (Hinton et al., 2015;
    DistilBERT, Sanh et al., 2019); texts are cut to 128 tokens where max_length is None."""

    alpha: float = 0.5
    temperature: float = 2.0

    def __post_init__(self):
        super().__post_init__()
        check_distillation_options(self.alpha, self.temperature)


#: The recipe of a call that passes none.
DEFAULT_DISTILLATION_RECIPE = DistillationRecipe()


def distill(
    teacher: nn.Module,
    student: nn.Module,
    tokenizer,
    train: Sequence[Example],
    dev: Sequence[Example] | None = None,
    recipe: DistillationRecipe | None = None,
    *,
    device: str | torch.device | None = None,
    progress: bool | Progress = True,
    output_dir: str | Path | None = None,
    precision: str = "auto",
    **recipe_keywords,
) -> list[dict[str, float]]:
    """Train ``student`` on ``train`` with :func:`distillation_loss` against ``teacher``; return the history.

    The teacher is put in eval mode and run once over ``train`` without gradients (its logits do not
    change from one epoch to the next); the student then minimises
    alpha * CE(s, y) + (1 - alpha) * T^2 * KL(softmax(t / T) || softmax(s / T)) with the ``recipe``
    (:class:`DistillationRecipe`; None: its defaults): AdamW at ``encoder_lr`` (``head_lr`` for the head,
    by default the same), linear warm-up and decay, gradient clipping, texts cut to max_length tokens
    (None: 128), both models' forward passes in ``precision``
    (``bertlab.utils.autocast``: "auto" is bf16 or fp16 on CUDA, bf16 on a CPU that computes it natively,
    else float32). Both models are moved to ``device`` (None: CUDA when available). With ``output_dir``
    the student and ``history.json`` are saved.

    Returns:
        One dict per epoch: ``epoch``, ``train_loss`` and, with ``dev``, the student's ``dev_accuracy``,
        ``dev_macro_f1``, ``dev_loss`` and ``dev_agreement`` (fraction of teacher predictions matched).
    """
    if "lr" in recipe_keywords:  # earlier releases' name of the student's one learning rate
        recipe_keywords["encoder_lr"] = recipe_keywords.pop("lr")
    recipe = recipe_from_keywords(DistillationRecipe, recipe, recipe_keywords, "distill", DEFAULT_DISTILLATION_RECIPE)
    check_precision(precision)
    device = resolve_device(device)
    teacher.to(device).eval()
    max_length = recipe.length(SENTENCE_MAX_LENGTH)
    batches = labelled_batches(train, tokenizer, batch_size=recipe.batch_size, max_length=max_length, shuffle=True,
                               seed=recipe.seed, what="train")
    teacher_logits = compute_logits(teacher, batches, device, precision).to(device)  # (num_train, C), in order
    dev_batches = None if dev is None else labelled_batches(dev, tokenizer, max_length=max_length, what="dev")
    dev_teacher_logits = None if dev is None else compute_logits(teacher, dev_batches, device, precision)

    def loss_fn(student: nn.Module, batch: Batch) -> torch.Tensor:
        student_logits = student(**model_inputs(batch, device)).logits
        return distillation_loss(student_logits, teacher_logits[batch["index"].to(device)], batch["labels"].to(device),
                                 recipe.alpha, recipe.temperature)

    def student_metrics(student: nn.Module, dev_batches, device, precision) -> dict[str, float]:
        student_logits = compute_logits(student, dev_batches, device, precision)
        metrics = classification_metrics(student_logits, dev_batches.labels)
        metrics["agreement"] = agreement(student_logits, dev_teacher_logits)
        return metrics

    return finetune_batches(student, batches, loss_fn, dev_batches, None if dev is None else student_metrics, recipe,
                            device=device, progress=progress, output_dir=output_dir, precision=precision,
                            description="distill")


# --------------------------------------------------------------------------------------------------
# Side-by-side comparison, as in DistilBERT's tables


@dataclasses.dataclass
class ModelRow:
    """One line of the comparison: size, speed and accuracy of a model."""

    name: str
    parameters: int
    inference_seconds: float  # median time of one pass over the examples
    speedup: float  # teacher's time / this model's time
    accuracy: float
    percent_of_teacher: float  # 100 * accuracy / teacher's accuracy


@dataclasses.dataclass
class ModelComparison:
    """Teacher and student side by side (:func:`compare_models`), printable as a Markdown table."""

    rows: list[ModelRow]
    device: str
    num_examples: int
    batch_size: int
    repeats: int

    def to_markdown(self) -> str:
        """The table in the form of DistilBERT's (Sanh et al., 2019, tables 1 and 3)."""
        lines = [
            "| Model | Parameters (millions) | Inference time (s) | Speed-up | Accuracy | % of teacher |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        lines += [
            f"| {row.name} | {row.parameters / 1e6:.2f} | {row.inference_seconds:.3f} | {row.speedup:.2f}x "
            f"| {100 * row.accuracy:.1f} | {row.percent_of_teacher:.1f} |"
            for row in self.rows
        ]
        lines.append(
            f"\nInference: median of {self.repeats} passes over {self.num_examples} examples, batch "
            f"{self.batch_size}, on {self.device}; the two models timed alternately after a warm-up pass."
        )
        return "\n".join(lines)


def compare_models(
    teacher: nn.Module,
    student: nn.Module,
    tokenizer,
    examples: Sequence[Example],
    *,
    batch_size: int = 32,
    max_length: int = 128,
    device: str | torch.device | None = None,
    repeats: int = 5,
    names: tuple[str, str] = ("teacher", "student"),
) -> ModelComparison:
    """Parameters, inference time and accuracy of ``teacher`` and ``student`` on the same examples.

    Both models run in eval mode on the same batches, tokenized once beforehand. After one warm-up pass
    each, they are timed ``repeats`` times each, alternately (teacher first on even rounds, student
    first on odd ones) so that both see the same machine state; the time reported is the median pass.
    Accuracy comes from the same passes. Speed-up = teacher time / model time; % of teacher =
    100 * accuracy / teacher accuracy. ``device`` None keeps the models where the teacher is.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    device = model_device(teacher) if device is None else resolve_device(device)
    models = {names[0]: teacher.to(device), names[1]: student.to(device)}
    batches = labelled_batches(examples, tokenizer, batch_size=batch_size, max_length=max_length)
    device_batches = [batch_to_device(batch, device) for batch in batches]

    times: dict[str, list[float]] = {name: [] for name in models}
    logits = {name: _timed_logits(model, device_batches, device)[1] for name, model in models.items()}  # warm-up
    for round_index in range(repeats):
        order = list(models) if round_index % 2 == 0 else list(reversed(models))
        for name in order:
            seconds, logits[name] = _timed_logits(models[name], device_batches, device)
            times[name].append(seconds)

    teacher_time = statistics.median(times[names[0]])
    teacher_accuracy = classification_metrics(logits[names[0]], batches.labels)["accuracy"]
    rows = []
    for name, model in models.items():
        accuracy = classification_metrics(logits[name], batches.labels)["accuracy"]
        median_time = statistics.median(times[name])
        rows.append(
            ModelRow(
                name=name,
                parameters=sum(p.numel() for p in model.parameters()),
                inference_seconds=median_time,
                speedup=teacher_time / median_time,
                accuracy=accuracy,
                percent_of_teacher=100 * accuracy / teacher_accuracy if teacher_accuracy > 0 else float("nan"),
            )
        )
    return ModelComparison(rows, str(device), len(examples), batch_size, repeats)


def _timed_logits(model: nn.Module, batches: list[Batch], device: torch.device) -> tuple[float, torch.Tensor]:
    """(seconds, logits) of one inference pass over ``batches``, waiting for the GPU to finish."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    logits = compute_logits(model, batches, device)  # ends with a copy to the CPU, which waits
    return time.perf_counter() - start, logits
