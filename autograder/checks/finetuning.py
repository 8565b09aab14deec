"""Checks of chapter 08 (fine-tuning), called by the hidden tests of ``chapters/08_finetuning``.

Four exercises, graded against the reference package:

- the class ``BertForSequenceClassification(config, num_labels=2)`` against
  :class:`bertlab.bert.BertForSequenceClassification`: the student's module gets the reference's
  (random) weights and must give its logits and loss, in eval mode, and in training mode apply the
  dropout to the pooled vector before the classifier;
- ``freeze_layers(model, num_trainable_layers)`` against :func:`bertlab.finetuning.freeze_layers`:
  the same parameters trainable (``requires_grad``), whatever the model's flags were before;
- ``param_groups(model, encoder_lr, head_lr, weight_decay, layer_decay=1.0)`` against
  :func:`bertlab.finetuning.param_groups`: every trainable parameter in exactly one group, frozen ones
  in none, and each parameter with the reference's learning rate and weight decay (the grouping itself
  may differ);
- ``train_epoch(model, batches, loss_fn, optimizer, scheduler, device, *, max_grad_norm=1.0)`` against
  :func:`bertlab.finetuning.train_epoch`: the returned mean loss of an epoch of several steps, which
  depends on every update (zero_grad, backward, clipping, the optimizer's and the scheduler's steps,
  training mode), must be the reference's.

How they see the student's objects. When a class's notebooks are graded, the student's code runs in a
sandboxed process (``autograder/verdict.py``): a model passed to the student's function is a *copy*
there, and only what the function returns comes back (tensors and numbers by value, other objects as
handles). So the checks read what the function returns, never the grader's own copy of an argument:
the model ``freeze_layers`` returns is asked for its trainable parameters by a function of this module
that runs where the model is (``model.apply(record_trainable_parameters)``); ``param_groups``'s tensors
are matched to the model's parameters by value (every parameter holds distinct random numbers); and
``train_epoch`` is judged by its mean loss, with the dropout masks seeded per batch by the loss
function (:func:`seeded_classification_loss`), so that the student's run and the reference's draw the
same masks in any process.

Each ``check_<name>`` draws its inputs from a generator seeded by the exercise's name, names the
typical mistakes it recognises, and forbids the reference (and the library code that does the
exercise's job). ``forbid=False`` lifts that rule (the tests use it to run a check on the reference).
"""

import copy
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from autograder.checks.framework import (
    Case,
    CheckFailed,
    Exercise,
    Mistake,
    Tolerance,
    check_functions,
    describe_difference,
    fail,
    generator_for,
    hint_of_first,
    random_choice,
    random_integer,
    run_student,
)
from autograder.checks.modules import DropoutHints, build_with_reference_weights, check_dropout, tiny_bert_config
from autograder.checks.portable import seeded_classification_loss
import bertlab.norm
from bertlab import bert as bert_reference
from bertlab import finetuning as reference
from bertlab.bert import BertConfig, BertForSequenceClassification

CPU = torch.device("cpu")


NORM_TYPES = (nn.LayerNorm, bertlab.norm.LayerNorm)


def _norm_gains(model: nn.Module) -> set[int]:
    """The ids of the LayerNorm weights (gains) of ``model``."""
    return {id(module.weight) for module in model.modules() if isinstance(module, NORM_TYPES)}


@torch.no_grad()
def _randomize(model: nn.Module, generator: torch.Generator, scale: float = 0.2) -> nn.Module:
    """Fill every parameter with distinct random numbers (LayerNorm gains around 1), so that outputs
    are far from 0 and a parameter can be recognised by its values alone."""
    gains = _norm_gains(model)
    for parameter in model.parameters():
        noise = torch.randn(parameter.shape, generator=generator)
        parameter.copy_(1.0 + scale * noise if id(parameter) in gains else scale * noise)
    return model


def _classifier(config: BertConfig, generator: torch.Generator, num_labels: int = 2) -> BertForSequenceClassification:
    """The reference classifier with random weights, in training mode."""
    return _randomize(BertForSequenceClassification(config, num_labels), generator)


def _part(name: str) -> str:
    """The part of a BERT classifier a parameter belongs to: 'the embeddings', 'encoder layer 2', ..."""
    parts = name.split(".")
    if "embeddings" in parts:
        return "the embeddings"
    if "layers" in parts:
        return f"encoder layer {parts[parts.index('layers') + 1]}"
    if "pooler" in parts:
        return "the pooler"
    if parts[0] == "classifier":
        return "the classifier"
    return name


def _parts(names) -> str:
    """The parts that ``names`` cover, in model order, e.g. 'the embeddings, encoder layer 0'."""
    order = {"the embeddings": (0, 0), "the pooler": (2, 0), "the classifier": (3, 0)}

    def key(part):
        return order.get(part, (1, int(part.rsplit(" ", 1)[-1]) if part.startswith("encoder layer") else 0))

    return ", ".join(sorted({_part(name) for name in names}, key=key))


# --------------------------------------------------------------------------------------------------
# BertForSequenceClassification
# --------------------------------------------------------------------------------------------------

HEAD_FORBIDDEN = (
    bert_reference.BertForSequenceClassification.__init__,
    bert_reference.BertForSequenceClassification.forward,
    "transformers.models.bert.modeling_bert.BertForSequenceClassification.__init__",
    "transformers.models.bert.modeling_bert.BertForSequenceClassification.forward",
)

#: (description, config, num_labels passed to the constructor: None for the default 2).
HEAD_CONFIGS = (
    ("hidden_size=16, 2 layers, hidden_dropout_prob=0.1, num_labels left at its default (2)",
     tiny_bert_config(2, hidden_dropout_prob=0.1), None),
    ("hidden_size=12, 1 layer, 3 heads, num_labels=3", tiny_bert_config(1, hidden_size=12, num_attention_heads=3,
                                                               intermediate_size=24), 3),
)
#: Training mode: num_labels = hidden_size and W = I, so that the logits show the dropout's work.
DROPOUT_CONFIG = tiny_bert_config(1, hidden_dropout_prob=0.25)


@dataclass(frozen=True)
class _Inputs:
    description: str
    kwargs: dict


def _head_inputs(config: BertConfig, num_labels: int, generator: torch.Generator) -> list[_Inputs]:
    def ids(batch, length):
        return torch.randint(0, config.vocab_size, (batch, length), generator=generator)

    def labels(batch):
        return torch.randint(0, num_labels, (batch,), generator=generator)

    padded_mask = torch.ones(3, 6, dtype=torch.long)
    padded_mask[1, 4:] = 0
    padded_mask[2, 2:] = 0
    types = torch.tensor([[0, 0, 0, 1, 1], [0, 0, 1, 1, 1]])
    return [
        _Inputs("input_ids (4, 7) and labels (4,), no token_type_ids or attention_mask",
                {"input_ids": ids(4, 7), "labels": labels(4)}),
        _Inputs("input_ids (2, 5) of sentence pairs with token_type_ids, labels (2,)",
                {"input_ids": ids(2, 5), "token_type_ids": types, "labels": labels(2)}),
        _Inputs("input_ids (3, 6) padded (attention_mask with zeros), labels (3,)",
                {"input_ids": ids(3, 6), "attention_mask": padded_mask, "labels": labels(3)}),
        _Inputs("input_ids (1, 1): one token, labels (1,)", {"input_ids": ids(1, 1), "labels": labels(1)}),
        _Inputs("input_ids (3, 4) without labels (the loss must be None)", {"input_ids": ids(3, 4)}),
    ]


@dataclass(frozen=True)
class HeadCase:
    """A configuration (num_labels None: the constructor's default, 2), the reference classifier with
    random weights in eval mode, and the batches it classifies."""

    description: str
    config: BertConfig
    num_labels: int | None
    reference: nn.Module
    inputs: list[_Inputs]


def bert_for_sequence_classification_cases() -> list[HeadCase]:
    """The configurations of HEAD_CONFIGS with random weights, each with random batches: no token types nor
    mask, sentence pairs, padding, one token, no labels."""
    generator = generator_for("BertForSequenceClassification")
    cases = []
    for description, config, num_labels in HEAD_CONFIGS:
        labels = 2 if num_labels is None else num_labels
        reference_model = _classifier(config, generator, labels).eval()
        inputs = _head_inputs(config, labels, generator)
        cases.append(HeadCase(description, config, num_labels, reference_model, inputs))
    return cases


@dataclass(frozen=True)
class HeadDropoutCase:
    """The training-mode test: a reference classifier whose weight is the identity (num_labels =
    hidden_size) and whose bias is ``bias``, and the input_ids of the batch."""

    description: str
    reference: nn.Module
    bias: torch.Tensor
    input_ids: torch.Tensor


def bert_for_sequence_classification_dropout_case() -> HeadDropoutCase:
    """DROPOUT_CONFIG with random weights but the classifier's (W = I, a random bias b far from 0, so that a
    dropped entry reads as b), and a batch (16, 5)."""
    generator = generator_for("BertForSequenceClassification dropout")
    config = DROPOUT_CONFIG
    H, p = config.hidden_size, config.hidden_dropout_prob
    reference_model = _classifier(config, generator, num_labels=H).eval()
    bias = 0.5 + torch.rand(H, generator=generator)
    with torch.no_grad():
        reference_model.classifier.weight.copy_(torch.eye(H))
        reference_model.classifier.bias.copy_(bias)
    description = (f"hidden_size={H}, hidden_dropout_prob={p}, num_labels={H} with the classifier's weight set to "
                   f"the identity; in training mode (model.train(), with model.bert.eval() so that only the head's "
                   f"dropout acts)")
    input_ids = torch.randint(0, config.vocab_size, (16, 5), generator=generator)
    return HeadDropoutCase(description, reference_model, bias, input_ids)


def _head_features(reference_model: nn.Module, kwargs: dict):
    """(sequence_output, pooled_output) of the reference's backbone, in eval mode."""
    inputs = {name: value for name, value in kwargs.items() if name != "labels"}
    return reference_model.bert(inputs.pop("input_ids"), inputs.get("token_type_ids"), inputs.get("attention_mask"))


def _head_variant(*, features: str = "pooled", softmax: bool = False):
    """Logits computed from the wrong features: f(reference_model, kwargs) -> logits."""

    def logits(reference_model, kwargs):
        sequence_output, pooled_output = _head_features(reference_model, kwargs)
        if features == "pooled":
            vectors = pooled_output
        elif features == "cls":
            vectors = sequence_output[:, 0]
        elif features == "mean":
            vectors = sequence_output.mean(dim=1)
        else:  # every token
            vectors = sequence_output
        output = reference_model.classifier(vectors)
        return output.softmax(dim=-1) if softmax else output

    return logits


HEAD_LOGITS_MISTAKES = (
    Mistake(_head_variant(features="cls"),
     "classify the POOLED output, pooled = tanh(W_p h_[CLS] + b_p) (the second output of self.bert), not "
     "the raw [CLS] vector sequence_output[:, 0]: BERT's classifier reads the pooler."),
    Mistake(_head_variant(features="mean"),
     "classify the pooled [CLS] vector (the second output of self.bert), not the mean of the token vectors."),
    Mistake(_head_variant(features="tokens"),
     "classify one vector per sequence, the pooled [CLS] vector: the logits have shape (B, num_labels), "
     "not one row per token."),
    Mistake(_head_variant(softmax=True),
     "return the logits W Dropout(pooled) + b, not probabilities: no softmax in the model (the "
     "cross-entropy applies its own log-softmax)."),
)


def _loss_variant(kind: str):
    def loss(logits, labels):
        if kind == "softmax":
            return F.cross_entropy(logits.softmax(dim=-1), labels)
        if kind == "sum":
            return F.cross_entropy(logits, labels, reduction="sum")
        if kind == "nll":
            return F.nll_loss(logits, labels)
        return F.binary_cross_entropy_with_logits(logits, F.one_hot(labels, logits.shape[-1]).to(logits.dtype))

    return loss


HEAD_LOSS_MISTAKES = (
    Mistake(_loss_variant("softmax"),
     "the cross-entropy takes the logits: F.cross_entropy(logits, labels) applies the log-softmax itself; "
     "a softmax before it squashes the loss."),
    Mistake(_loss_variant("sum"),
     "the loss is the MEAN cross-entropy over the batch (F.cross_entropy's default), not the sum."),
    Mistake(_loss_variant("nll"),
     "F.nll_loss expects log-probabilities: use F.cross_entropy(logits, labels), which takes the logits."),
    Mistake(_loss_variant("bce"),
     "the loss of a classifier with num_labels classes is the cross-entropy of the softmax, "
     "F.cross_entropy(logits, labels), not a binary cross-entropy per class."),
)

HEAD_OUTPUT_HINT = ("return bertlab.bert.SequenceClassifierOutput(loss=loss, logits=logits): an object with the "
                    "attributes .loss and .logits, as the reference returns.")


HEAD_NAMING_HINT = ("name the submodules bert (a bertlab.bert.BertModel(config)), dropout (nn.Dropout) and "
                    "classifier (nn.Linear(hidden_size, num_labels)), as the exercise says.")


def _build_head(student_cls, config: BertConfig, num_labels: int | None, description: str, forbidden,
                reference_model: nn.Module):
    """The student's module, built and loaded with the reference's weights; its context string."""
    context = (f"BertForSequenceClassification({'config' if num_labels is None else f'config, {num_labels}'}) "
               f"with {description}")
    args = (config,) if num_labels is None else (config, num_labels)
    module = build_with_reference_weights(student_cls, args, {}, reference_model, check="BertForSequenceClassification",
                                          context=context, naming_hint=HEAD_NAMING_HINT, forbidden=forbidden)
    return module, context


def _output_fields(output, context: str):
    """(loss, logits) of the student's output object."""
    try:
        return output.loss, output.logits
    except AttributeError:
        fail("BertForSequenceClassification", context,
             f"your forward returned {type(output).__name__ if not hasattr(output, '_number') else 'an object'} "
             "without the attributes .loss and .logits.", HEAD_OUTPUT_HINT)


def _compare_head(exercise: Exercise, module, reference_model, inputs: _Inputs, context: str, forbidden) -> None:
    check = exercise.name
    case = Case(inputs.description, (), inputs.kwargs)
    try:
        output = run_student(module, case, check=check, forbidden=forbidden, context=context)
    except CheckFailed as failure:
        if "labels" not in inputs.kwargs and failure.__cause__ is not None:
            raise CheckFailed(f"{failure}\n  Hint: without labels there is no loss: compute it only when labels is "
                              "given, and return loss=None otherwise.") from failure.__cause__
        raise
    loss, logits = _output_fields(output, context)
    with torch.no_grad():
        expected = reference_model(**inputs.kwargs)
        difference = describe_difference(logits, expected.logits, exercise.tolerance, "logits")
        if difference is not None:
            again = _output_fields(run_student(module, case, check=check, forbidden=forbidden, context=context),
                                   context)[1]
            if isinstance(logits, torch.Tensor) and describe_difference(again, logits) is not None:
                fail(check, context, difference + " Called again on the same inputs, it returned other logits.",
                     "in eval mode (model.eval()) the dropout must do nothing: use nn.Dropout, or "
                     "F.dropout(x, p, training=self.training).")
            if isinstance(logits, torch.Tensor) and logits.shape == expected.logits.shape:
                hint = hint_of_first(exercise.mistakes["logits"], lambda mistake: describe_difference(
                    logits, mistake.implementation(reference_model, inputs.kwargs)) is None)
            else:
                hint = hint_of_first(exercise.mistakes["logits"], lambda mistake: isinstance(logits, torch.Tensor) and (
                    logits.shape == mistake.implementation(reference_model, inputs.kwargs).shape))
            fail(check, context, difference, hint)
        if "labels" not in inputs.kwargs:
            if loss is not None:
                fail(check, context, f"you returned a loss ({type(loss).__name__}) although no labels were given.",
                     "without labels, return loss=None (the model is then used for predictions only).")
            return
        if loss is None:
            fail(check, context, "you returned loss=None although labels were given.",
                 "with labels, the loss is the mean cross-entropy F.cross_entropy(logits, labels).")
        difference = describe_difference(loss, expected.loss, exercise.tolerance, "loss")
        if difference is not None:
            hint = None
            if isinstance(loss, torch.Tensor) and loss.shape == expected.loss.shape:
                hint = hint_of_first(exercise.mistakes["loss"], lambda mistake: describe_difference(
                    loss, mistake.implementation(expected.logits, inputs.kwargs["labels"])) is None)
            if hint is None and isinstance(loss, torch.Tensor) and loss.dim() > 0:
                hint = "the loss is one number, the mean cross-entropy over the batch: reduce it to a scalar."
            fail(check, context, difference, hint)


HEAD_DROPOUT_HINTS = DropoutHints(
    nothing_dropped="apply self.dropout = nn.Dropout(config.hidden_dropout_prob) to the pooled vector before the "
                    "classifier; it acts in training mode only.",
    no_zeros="logits = self.classifier(self.dropout(pooled_output)).",
    not_scaled="use nn.Dropout (or F.dropout), which scales the kept entries by 1 / (1 - p).",
    kept_differ="logits = self.classifier(self.dropout(pooled_output)), with the pooled output of self.bert.",
    wrong_share="drop with probability config.hidden_dropout_prob, as BERT does.",
)


def _fail_on_another_probability(kept: torch.Tensor, kept_pooled: torch.Tensor, *, p: float, context: str) -> None:
    """Fail when the kept entries are the pooled ones scaled by the 1 / (1 - q) of another probability q."""
    scale = float((kept * kept_pooled).sum() / kept_pooled.square().sum())  # least squares: kept = scale * pooled
    if scale > 1 and describe_difference(kept, scale * kept_pooled) is None:
        fail("BertForSequenceClassification", context,
             f"the entries you kept are scaled by {scale:.4g}, the 1 / (1 - q) of a dropout with q = "
             f"{1 - 1 / scale:.3g}, where p = {p} gives {1 / (1 - p):.4g}.",
             f"drop with probability config.hidden_dropout_prob (here p = {p}): "
             "nn.Dropout(config.hidden_dropout_prob), not a fixed probability.")


def _check_head_dropout(student_cls, case: HeadDropoutCase, forbidden) -> None:
    """In training mode, with W = I and a random bias b: logits - b must be a dropout of the pooled
    vector (:func:`check_dropout`)."""
    check = "BertForSequenceClassification"
    config, reference_model, bias, input_ids = DROPOUT_CONFIG, case.reference, case.bias, case.input_ids
    H, p = config.hidden_size, config.hidden_dropout_prob
    module, context = _build_head(student_cls, config, H, case.description, forbidden, reference_model)
    module.train()
    module.bert.eval()
    output = run_student(module, Case(context, (), {"input_ids": input_ids}), check=check, forbidden=forbidden,
                         context=context)
    module.eval()
    _, logits = _output_fields(output, context)
    with torch.no_grad():
        pooled = reference_model.bert(input_ids)[1]
    if not isinstance(logits, torch.Tensor) or logits.shape != pooled.shape:
        fail(check, context, describe_difference(logits, pooled, name="logits") or "wrong logits")
    shifted = logits - bias
    if (logits == 0).any() and not (shifted == 0).any():
        fail(check, context, "in training mode some logits are exactly 0, where a dropped entry should give the "
                             "bias b (W 0 + b).",
             "apply the dropout to the pooled vector, BEFORE the classifier: logits = W Dropout(pooled) + b, not "
             "Dropout(W pooled + b).")
    check_dropout(shifted, pooled, p, check=check, context=context, hints=HEAD_DROPOUT_HINTS,
                  on_kept_differ=partial(_fail_on_another_probability, p=p, context=context))


#: The last case of the check: the dropout test, whose model is drawn when it runs, after the configurations'
#: tests (building it draws from torch's global generator, which a student's dropout draws from too).
DROPOUT_TEST = Case("the dropout in training mode")


def _head_cases() -> list[HeadCase | Case]:
    """The cases of the check: the configurations, then the dropout test."""
    return [*bert_for_sequence_classification_cases(), DROPOUT_TEST]


def _compare_head_case(exercise: Exercise, student_cls, case: HeadCase | Case, context: str, forbidden) -> int:
    """One configuration: the student's module, built with the reference's weights, against the reference on
    each batch in eval mode; returns the number of batches. Then the dropout test, in training mode."""
    if case is DROPOUT_TEST:
        _check_head_dropout(student_cls, bert_for_sequence_classification_dropout_case(), forbidden)
        return 1
    module, built = _build_head(student_cls, case.config, case.num_labels, case.description, forbidden,
                                case.reference)
    module.eval()
    for inputs in case.inputs:
        _compare_head(exercise, module, case.reference, inputs, f"{inputs.description}; {built}", forbidden)
    return len(case.inputs)


BERT_FOR_SEQUENCE_CLASSIFICATION = Exercise("BertForSequenceClassification", BertForSequenceClassification, _head_cases,
                                            mistakes={"logits": HEAD_LOGITS_MISTAKES, "loss": HEAD_LOSS_MISTAKES},
                                            forbidden=HEAD_FORBIDDEN, naming_hint=HEAD_NAMING_HINT,
                                            compare=_compare_head_case,
                                            summary="""
                                            Compare the class ``BertForSequenceClassification(config, num_labels=2)``
                                            with the reference's.

                                            For two configurations (the default num_labels; 3 labels and 3 heads) the
                                            student's module is built, must have the reference's parameter names and
                                            shapes (bert.*, classifier.weight, classifier.bias), gets the reference's
                                            random weights and, in eval mode, must return an object whose .logits and
                                            .loss equal the reference's: without token_type_ids and attention_mask, for
                                            pairs, padded sequences, one token, and without labels (loss None). In
                                            training mode, with the classifier's weight set to the identity, every logit
                                            minus the bias must be 0 (dropped) or pooled / (1 - p), about a fraction p =
                                            hidden_dropout_prob of them 0. Tolerance: the framework's defaults (float32:
                                            atol 1e-5, rtol 1e-4). Forbidden: the reference's and Hugging Face's
                                            BertForSequenceClassification (bertlab.bert.BertModel is the backbone to
                                            use).
                                            """)


# --------------------------------------------------------------------------------------------------
# freeze_layers
# --------------------------------------------------------------------------------------------------

FREEZE_FORBIDDEN = (reference.freeze_layers,)

@dataclass(frozen=True)
class FreezeCase:
    """A classifier with random weights, its requires_grad flags set as the description says, and the
    number of layers to train."""

    description: str
    model: nn.Module
    num_trainable_layers: int


def freeze_layers_cases() -> list[FreezeCase]:
    """Models of 1 to 6 encoder layers training some of their layers, none, all; models that arrive
    entirely frozen, or frozen by an earlier freeze_layers(model, 1); the numbers of layers are drawn.

    In the first case the layers that train are at least two more, or two fewer, than those frozen: so
    that counting the frozen layers instead of the trained ones gives a split of its own, neither the
    right one nor that of an off-by-one, and the hint names the mistake.
    """
    g = generator_for("freeze_layers")

    def case(num_layers, num_trainable_layers, note="", before="trainable"):
        model = _set_flags(_classifier(tiny_bert_config(num_layers), g), before)
        layers = f"{num_layers} encoder layer{'s' if num_layers > 1 else ''}"
        return FreezeCase(f"{layers}, num_trainable_layers={num_trainable_layers}{note}", model, num_trainable_layers)

    first = random_integer(g, 4, 6)
    trained = random_choice(g, [k for k in range(1, first) if abs(first - 2 * k) >= 2])
    everything, nothing, some, all_frozen, refrozen = (random_integer(g, low, 6) for low in (2, 2, 3, 2, 3))
    return [
        case(first, trained),
        case(nothing, 0, " (only the head trains)"),
        case(everything, everything, " (every layer trains)"),
        case(some, random_integer(g, 1, some - 1)),
        case(all_frozen, random_integer(g, 1, all_frozen - 1), ", on a model whose parameters were ALL frozen before "
             "the call", "frozen"),
        case(refrozen, random_integer(g, 2, refrozen - 1), ", on a model frozen before by freeze_layers(model, 1)",
             "one"),
        case(1, 1),
    ]


def record_trainable_parameters(module: nn.Module) -> None:
    """Store on ``module`` the names of its parameters, and of those with requires_grad=True.

    Passed to ``model.apply``, it runs wherever the model is (in the student's process when a class's
    notebooks are graded), so the check learns the flags from the model the student's code returned.
    """
    module.graded_parameter_names = [name for name, _ in module.named_parameters()]
    module.graded_trainable_names = [name for name, p in module.named_parameters() if p.requires_grad]


def trainable_names(model) -> tuple[list[str], list[str]]:
    """(all parameter names, trainable parameter names) of ``model``, read where the model is."""
    model.apply(record_trainable_parameters)
    return list(model.graded_parameter_names), list(model.graded_trainable_names)


def _set_flags(model: nn.Module, state: str) -> nn.Module:
    if state == "frozen":
        model.requires_grad_(False)
    elif state == "one":
        reference.freeze_layers(model, 1)
    return model


def _freeze_variant(*, top: bool = False, embeddings: bool = True, head: str = "train", offset: int = 0,
                    negative_slice: bool = False, reset: bool = True, counts_frozen: bool = False):
    """freeze_layers with one of the typical mistakes."""

    def freeze_layers(model, num_trainable_layers):
        layers = model.bert.encoder.layers
        L, k = len(layers), num_trainable_layers
        if reset:
            model.requires_grad_(True)
        if embeddings:
            model.bert.embeddings.requires_grad_(False)
        if negative_slice:
            for layer in layers:
                layer.requires_grad_(False)
            for layer in layers[-k:]:
                layer.requires_grad_(True)
        elif top:
            for layer in layers[k:]:
                layer.requires_grad_(False)
        elif counts_frozen:
            for layer in layers[:k]:
                layer.requires_grad_(False)
        else:
            for layer in layers[: max(0, L - k - offset)]:
                layer.requires_grad_(False)
        if head in ("frozen", "pooler"):
            model.bert.pooler.requires_grad_(False)
        if head == "frozen":
            model.classifier.requires_grad_(False)
        return model

    return freeze_layers


FREEZE_MISTAKES = (
    Mistake(_freeze_variant(top=True),
     "freeze the BOTTOM layers and train the TOP ones: with L layers, layers L - num_trainable_layers ... L - 1 "
     "train (they are the most task-specific), layers 0 ... L - num_trainable_layers - 1 are frozen."),
    Mistake(_freeze_variant(negative_slice=True),
     "with num_trainable_layers = 0, layers[-0:] is the WHOLE list (-0 is 0): slice with "
     "layers[:L - num_trainable_layers] for the frozen ones instead."),
    Mistake(_freeze_variant(counts_frozen=True),
     "num_trainable_layers counts the layers that TRAIN (the top ones); the other L - num_trainable_layers "
     "layers, at the bottom, are frozen."),
    Mistake(_freeze_variant(embeddings=False),
     "freeze the embeddings too (model.bert.embeddings): they are the bottom of the network."),
    Mistake(_freeze_variant(head="frozen"),
     "the head trains: leave requires_grad=True on model.bert.pooler and model.classifier (the classifier is "
     "new, random, and must learn the task)."),
    Mistake(_freeze_variant(head="pooler"),
     "the pooler (model.bert.pooler) belongs to the head: it trains, whatever num_trainable_layers is."),
    Mistake(_freeze_variant(offset=1),
     "off by one: exactly num_trainable_layers layers train, here one more than asked."),
    Mistake(_freeze_variant(offset=-1),
     "off by one: exactly num_trainable_layers layers train, here one fewer than asked."),
    Mistake(_freeze_variant(reset=False),
     "set requires_grad on EVERY parameter: True on what trains, False on what is frozen. A model that "
     "arrives (partly) frozen must come out with exactly the asked split, e.g. start with "
     "model.requires_grad_(True)."),
)


def _describe_split(trainable: set[str], expected: set[str]) -> str:
    lines = []
    should_freeze = sorted(trainable - expected)
    should_train = sorted(expected - trainable)
    if should_freeze:
        lines.append(f"trainable, but should be frozen: {_parts(should_freeze)} ({len(should_freeze)} parameters)")
    if should_train:
        lines.append(f"frozen, but should train: {_parts(should_train)} ({len(should_train)} parameters)")
    return "; ".join(lines)


def _compare_freeze(exercise: Exercise, student_fn, case: FreezeCase, context: str, forbidden) -> None:
    """One case: the parameters the student's function leaves trainable must be the reference's."""
    check = exercise.name
    description, model, k = case.description, case.model, case.num_trainable_layers
    fresh = copy.deepcopy(model)  # for the reference and the mistakes
    all_names = [name for name, _ in model.named_parameters()]
    returned = run_student(student_fn, Case(description, (model, k)), check=check, forbidden=forbidden,
                           parameter_names=exercise.parameter_names, context=context)
    if returned is None:
        fail(check, context, "your function returned None.",
             "return the model (as the reference does, so that calls can be chained: "
             "model = freeze_layers(model, 2)).")
    try:
        names, trainable = trainable_names(returned)
    except Exception as error:
        fail(check, context, f"what you returned is not a model ({type(error).__name__}: {error}).",
             "return the model you were given.")
    if names != all_names:
        fail(check, context, "the model you returned does not have the parameters of the model you were given.",
             "return the whole model you were given (not model.bert, not a copy of a part).")
    expected = {name for name, p in exercise.reference(copy.deepcopy(fresh), k).named_parameters() if p.requires_grad}
    if set(trainable) != expected:

        def freezes_the_same(mistake: Mistake) -> bool:
            mistaken = copy.deepcopy(fresh)
            try:
                mistake.implementation(mistaken, k)
            except Exception:
                return False
            return {name for name, p in mistaken.named_parameters() if p.requires_grad} == set(trainable)

        hint = hint_of_first(exercise.mistakes, freezes_the_same)
        fail(check, context, _describe_split(set(trainable), expected), hint)


FREEZE_LAYERS = Exercise("freeze_layers", reference.freeze_layers, freeze_layers_cases, mistakes=FREEZE_MISTAKES,
                         forbidden=FREEZE_FORBIDDEN, parameter_names=("model", "num_trainable_layers"),
                         compare=_compare_freeze,
                         summary="""
                         Compare ``freeze_layers(model, num_trainable_layers)`` with
                         :func:`bertlab.finetuning.freeze_layers`.

                         Cases: BertForSequenceClassification models with 1 to 6 encoder layers; num_trainable_layers 0,
                         some, and L; models that arrive trainable, entirely frozen, or frozen by an earlier
                         freeze_layers(model, 1) call; the numbers of layers are drawn. The function must return the
                         model, whose trainable parameters (requires_grad) must be exactly the reference's: the top
                         num_trainable_layers layers, the pooler and the classifier. Forbidden: the reference.
                         """)


# --------------------------------------------------------------------------------------------------
# param_groups
# --------------------------------------------------------------------------------------------------

PARAM_GROUPS_FORBIDDEN = (reference.param_groups, reference.make_optimizer,
                          "bertlab.optimization.weight_decay_groups")

@dataclass(frozen=True)
class ParamGroupsCase:
    """A classifier with random weights (some of them frozen, where the description says so) and the
    arguments of the call: (encoder_lr, head_lr, weight_decay) and the keyword arguments."""

    description: str
    model: nn.Module
    rates: tuple[float, float, float]
    kwargs: dict


def _rate(generator: torch.Generator, low_exponent: int, high_exponent: int) -> float:
    """A learning rate of two significant digits, from 1e``low_exponent`` to 9.9e``high_exponent``."""
    return float(f"{random_integer(generator, 10, 99)}e{random_integer(generator, low_exponent, high_exponent) - 1}")


def param_groups_cases() -> list[ParamGroupsCase]:
    """Equal and different rates for encoder and head, layer_decay left at 1 and given, models partly
    frozen and training only their head, one layer with no weight decay; the numbers of layers, the
    rates, the weight decays and the layer decays are drawn (the encoder's rate below 1e-4, the head's
    above: never equal where they are meant to differ)."""
    g = generator_for("param_groups")

    def weight_decay():
        return random_integer(g, 1, 20) / 100

    def layer_decay():
        return random_integer(g, 30, 95) / 100

    def case(num_layers, rates, kwargs, frozen=None, note=""):
        model = _classifier(tiny_bert_config(num_layers), g)
        if frozen is not None:
            reference.freeze_layers(model, frozen)
        layers = f"{num_layers} encoder layer{'s' if num_layers > 1 else ''}{note}"
        arguments = ", ".join(f"{name}={value!r}" for name, value in
                              [*zip(("encoder_lr", "head_lr", "weight_decay"), rates), *kwargs.items()])
        default = "" if "layer_decay" in kwargs else ", layer_decay left at its default 1.0"
        return ParamGroupsCase(f"{layers}; {arguments}{default}", model, rates, kwargs)

    same = _rate(g, -4, -3)
    partly = random_integer(g, 3, 6)
    kept = random_integer(g, 1, partly - 1)
    return [
        case(random_integer(g, 2, 4), (same, same, weight_decay()), {}),
        case(random_integer(g, 2, 5), (_rate(g, -6, -5), _rate(g, -4, -3), weight_decay()),
             {"layer_decay": layer_decay()}),
        case(partly, (_rate(g, -6, -5), _rate(g, -4, -3), weight_decay()), {"layer_decay": layer_decay()}, kept,
             f", the embeddings and layers 0 to {partly - kept - 1} frozen by freeze_layers(model, {kept})"),
        case(1, (_rate(g, -6, -5), _rate(g, -4, -3), 0.0), {"layer_decay": layer_decay()}),
        case(random_integer(g, 2, 5), (_rate(g, -6, -5), _rate(g, -4, -3), weight_decay()),
             {"layer_decay": layer_decay()}, 0, ", only the head trains (freeze_layers(model, 0))"),
    ]


#: Learning rates and weight decays are products of a few floats: they may differ in the last bits.
RATE_TOLERANCE = Tolerance(atol=0.0, rtol=1e-6)


def _groups_by_name(model: nn.Module, groups) -> dict[str, tuple[float, float]]:
    """name -> (lr, weight_decay) for groups that hold the model's own parameter objects."""
    names = {id(p): name for name, p in model.named_parameters()}
    return {names[id(p)]: (float(group["lr"]), float(group["weight_decay"]))
            for group in groups for p in group["params"]}


def _param_groups_variant(*, decay_norms: bool = False, decay: str = "matrices", swap: bool = False,
                          exponent: str = "top", embeddings: str = "decayed", pooler: str = "head"):
    """param_groups with one of the typical mistakes (groups of the model's parameter objects)."""

    def param_groups(model, encoder_lr, head_lr, weight_decay, layer_decay=1.0):
        if swap:
            encoder_lr, head_lr = head_lr, encoder_lr
        layers = model.bert.encoder.layers
        L = len(layers)

        def layer_lr(index):
            power = {"top": L - 1 - index, "bottom": index, "shifted": L - index, "none": 0}[exponent]
            return encoder_lr * layer_decay**power

        embeddings_lr = {"decayed": encoder_lr * layer_decay**L, "encoder": encoder_lr,
                         "like_layer_0": layer_lr(0)}[embeddings]
        parts = [(model.bert.embeddings, embeddings_lr if exponent != "none" else encoder_lr)]
        parts += [(layer, layer_lr(index)) for index, layer in enumerate(layers)]
        parts.append((model.bert.pooler, head_lr if pooler == "head" else encoder_lr))
        parts.append((model.classifier, head_lr))
        gains = _norm_gains(model)
        groups = []
        for module, lr in parts:
            for p in module.parameters():
                if not p.requires_grad:
                    continue
                if decay == "all":
                    decayed = True
                elif decay == "none":
                    decayed = False
                elif decay == "inverted":
                    decayed = p.dim() < 2
                elif decay_norms:  # every weight decayed, only the biases spared
                    decayed = p.dim() >= 2 or id(p) in gains
                else:
                    decayed = p.dim() >= 2
                groups.append({"params": [p], "lr": lr, "weight_decay": weight_decay if decayed else 0.0})
        return groups

    return param_groups


PARAM_GROUPS_TOP_FASTEST_HINT = (
    "the TOP layer learns fastest: lr(layer l) = encoder_lr * layer_decay ** (L - 1 - l), so layer L - 1 gets "
    "encoder_lr and the lower layers less (the embeddings least, encoder_lr * layer_decay ** L), not the other "
    "way round.")
PARAM_GROUPS_MISTAKES = (
    Mistake(_param_groups_variant(swap=True),
     "encoder_lr and head_lr are swapped: the encoder (embeddings and layers) gets encoder_lr (times the "
     "layer decay), the head (pooler and classifier) gets head_lr."),
    Mistake(_param_groups_variant(decay_norms=True),
     "no weight decay on the LayerNorm weights either (BERT excludes biases and LayerNorm parameters): in "
     "bertlab they are named norm, norm1 and norm2, not LayerNorm as in Hugging Face, so decide by the shape: "
     "decay exactly the parameters with p.dim() >= 2."),
    Mistake(_param_groups_variant(decay="all"),
     "no weight decay on biases and LayerNorm weights (the 1-D parameters): weight_decay only for "
     "p.dim() >= 2, 0.0 for the others."),
    Mistake(_param_groups_variant(decay="none"),
     "the weight matrices and embedding tables (p.dim() >= 2) get weight_decay; only biases and LayerNorm "
     "weights get 0.0."),
    Mistake(_param_groups_variant(decay="inverted"),
     "weight decay the other way round: the matrices (p.dim() >= 2) get weight_decay, the 1-D parameters 0.0."),
    Mistake(_param_groups_variant(exponent="bottom"), PARAM_GROUPS_TOP_FASTEST_HINT),
    Mistake(_param_groups_variant(exponent="bottom", embeddings="encoder"), PARAM_GROUPS_TOP_FASTEST_HINT),
    Mistake(_param_groups_variant(exponent="shifted", embeddings="decayed"),
     "off by one in the exponent: the top layer (l = L - 1) gets encoder_lr itself, "
     "lr(layer l) = encoder_lr * layer_decay ** (L - 1 - l)."),
    Mistake(_param_groups_variant(exponent="none"),
     "apply the layer decay: lr(layer l) = encoder_lr * layer_decay ** (L - 1 - l) and "
     "lr(embeddings) = encoder_lr * layer_decay ** L."),
    Mistake(_param_groups_variant(embeddings="encoder"),
     "the embeddings sit below layer 0: lr(embeddings) = encoder_lr * layer_decay ** L."),
    Mistake(_param_groups_variant(embeddings="like_layer_0"),
     "the embeddings sit one step below layer 0: lr(embeddings) = encoder_lr * layer_decay ** L, not the rate "
     "of layer 0."),
    Mistake(_param_groups_variant(pooler="encoder"),
     "the pooler (model.bert.pooler) belongs to the head: it gets head_lr, like the classifier."),
)


def _read_groups(groups, context: str) -> list[tuple[list[torch.Tensor], object, object]]:
    """[(tensors, lr, weight_decay)] of the student's groups, with clear errors for a wrong form."""
    check = "param_groups"
    if not isinstance(groups, (list, tuple)):
        fail(check, context, f"you returned {type(groups).__name__}, expected a list of dicts.",
             'return a list of dicts such as {"params": [...], "lr": ..., "weight_decay": ...}.')
    read = []
    for index, group in enumerate(groups):
        if not isinstance(group, dict):
            fail(check, context, f"group {index} is {type(group).__name__}, expected a dict.",
                 'each group is a dict {"params": [...], "lr": ..., "weight_decay": ...}.')
        missing = [key for key in ("params", "lr", "weight_decay") if key not in group]
        if missing:
            fail(check, context, f"group {index} has no {', '.join(repr(key) for key in missing)}.",
                 'each group needs "params" (a list of parameters), "lr" and "weight_decay".')
        params = group["params"]
        if isinstance(params, torch.Tensor):
            params = [params]
        try:
            params = list(params)
        except TypeError:
            fail(check, context, f'group {index}: "params" is {type(params).__name__}, expected a list of parameters.')
        if not all(isinstance(p, torch.Tensor) for p in params):
            fail(check, context, f'group {index}: "params" must hold only parameters (tensors).')
        for key in ("lr", "weight_decay"):
            if isinstance(group[key], bool) or not isinstance(group[key], (int, float)):
                fail(check, context, f'group {index}: "{key}" is {type(group[key]).__name__}, expected a number.')
        read.append((params, group["lr"], group["weight_decay"]))
    return read


def _match_parameters(model: nn.Module, read, context: str) -> dict[str, list[tuple[float, float]]]:
    """name -> [(lr, weight_decay) of every group that holds it], matching tensors by their values."""
    by_shape: dict[tuple, list[tuple[str, torch.Tensor]]] = {}
    for name, p in model.named_parameters():
        by_shape.setdefault(tuple(p.shape), []).append((name, p.detach()))
    found: dict[str, list[tuple[float, float]]] = {}
    for index, (params, lr, weight_decay) in enumerate(read):
        for tensor in params:
            candidates = by_shape.get(tuple(tensor.shape), [])
            name = next((name for name, value in candidates
                         if tensor.dtype == value.dtype and torch.equal(tensor.detach(), value)), None)
            if name is None:
                fail("param_groups", context,
                     f"group {index} holds a tensor of shape {tuple(tensor.shape)} that is not one of the model's "
                     "parameters.", "put the model's own parameters in the groups (from model.named_parameters() "
                                     "or module.parameters()), unchanged.")
            found.setdefault(name, []).append((float(lr), float(weight_decay)))
    return found


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= RATE_TOLERANCE.atol + RATE_TOLERANCE.rtol * abs(b)


def _same_rates(actual: dict[str, tuple[float, float]], expected: dict[str, tuple[float, float]]) -> bool:
    return actual.keys() == expected.keys() and all(
        _close(actual[name][0], expected[name][0]) and _close(actual[name][1], expected[name][1]) for name in expected)


def _compare_param_groups(exercise: Exercise, student_fn, case: ParamGroupsCase, context: str, forbidden) -> None:
    """One case: every trainable parameter in one group, with the reference's lr and weight_decay."""
    check = exercise.name
    description, model, rates, kwargs = case.description, case.model, case.rates, case.kwargs
    groups = run_student(student_fn, Case(description, (model, *rates), kwargs), check=check, forbidden=forbidden,
                         parameter_names=exercise.parameter_names, context=context)
    found = _match_parameters(model, _read_groups(groups, context), context)
    duplicated = sorted(name for name, where in found.items() if len(where) > 1)
    if duplicated:
        fail(check, context, f"{len(duplicated)} parameters are in more than one group, e.g. {duplicated[0]} "
                              f"({_parts(duplicated)}).",
             "each parameter must be in exactly one group (AdamW refuses a parameter that appears twice). "
             "Typical cause: a group built from model.parameters() or model.bert.parameters(), which also "
             "holds the parameters of the other groups.")
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    frozen_included = sorted(set(found) - trainable)
    if frozen_included:
        fail(check, context, f"{len(frozen_included)} frozen parameters (requires_grad=False) are in the groups: "
                              f"{_parts(frozen_included)}.",
             "leave out the frozen parameters: they get no gradient, and the optimizer need not keep state "
             "for them. Keep only parameters with p.requires_grad.")
    missing = sorted(trainable - set(found))
    if missing:
        fail(check, context, f"{len(missing)} trainable parameters are in no group, e.g. {missing[0]} "
                              f"({_parts(missing)}).", "every parameter with requires_grad=True must be in a group.")
    actual = {name: where[0] for name, where in found.items()}
    expected = _groups_by_name(model, exercise.reference(model, *rates, **kwargs))
    if not _same_rates(actual, expected):
        hint = hint_of_first(exercise.mistakes, lambda mistake: _same_rates(
            actual, _groups_by_name(model, mistake.implementation(model, *rates, **kwargs))))
        wrong = [name for name in expected if not (_close(actual[name][0], expected[name][0])
                                                   and _close(actual[name][1], expected[name][1]))]
        name = wrong[0]
        problem = (f"{len(wrong)} parameters have the wrong lr or weight_decay ({_parts(wrong)}); e.g. {name}: "
                   f"you gave lr={actual[name][0]:.6g}, weight_decay={actual[name][1]:.6g}, expected "
                   f"lr={expected[name][0]:.6g}, weight_decay={expected[name][1]:.6g}.")
        fail(check, context, problem, hint)


PARAM_GROUPS = Exercise("param_groups", reference.param_groups, param_groups_cases, mistakes=PARAM_GROUPS_MISTAKES,
                        forbidden=PARAM_GROUPS_FORBIDDEN,
                        parameter_names=("model", "encoder_lr", "head_lr", "weight_decay"),
                        compare=_compare_param_groups,
                        summary="""
                        Compare ``param_groups(model, encoder_lr, head_lr, weight_decay, layer_decay=1.0)`` with
                        :func:`bertlab.finetuning.param_groups`.

                        Cases: BertForSequenceClassification models with 1 to 6 encoder layers, equal and different
                        learning rates for encoder and head, layer_decay 1 (default) and 0.3 to 0.95, weight decay 0 and
                        0.01 to 0.2, models partly frozen by freeze_layers (some layers, and k = 0); the numbers of
                        layers and the rates are drawn. The result must be a list of dicts with "params", "lr" and
                        "weight_decay"; every trainable parameter in exactly one group, no frozen one in any; each
                        parameter with the reference's lr and weight_decay (relative tolerance 1e-6). The grouping
                        itself is free (one group per parameter is fine). Forbidden: the reference (and bertlab's
                        weight_decay_groups and make_optimizer).
                        """)


# --------------------------------------------------------------------------------------------------
# train_epoch
# --------------------------------------------------------------------------------------------------

TRAIN_EPOCH_FORBIDDEN = (reference.train_epoch, reference.fit, reference.finetune, "bertlab.distillation.distill",
                         "transformers.trainer.Trainer.training_step", "transformers.trainer.Trainer.train")
#: The mean loss of an epoch of a few steps, computed in another order or another process.
TRAIN_EPOCH_TOLERANCE = Tolerance(atol=1e-6, rtol=1e-5)


@dataclass(frozen=True)
class TrainingSetup:
    """How an epoch of a case trains: the optimizer and its rate, the scheduler, the batch sizes, the
    clipping, and how many layers freeze_layers leaves trainable (None: the whole model trains)."""

    description: str
    num_layers: int
    optimizer: str  # "sgd", "momentum" or "adamw"
    lr: float
    scheduler: str  # "step" (halve the rate after every step) or "linear" (warm up from 25%)
    batch_sizes: tuple[int, ...]
    max_grad_norm: float
    frozen: int | None = None


TRAINING_SETUPS = (
    TrainingSetup("SGD (lr 0.5), StepLR halving the rate after every step, 4 batches of 4, 4, 4 and 2 examples, "
                  "max_grad_norm=0.05; the model arrives in eval mode", 2, "sgd", 0.5, "step", (4, 4, 4, 2), 0.05),
    TrainingSetup("AdamW (lr 0.01, weight_decay 0.01), LinearLR warming up from 25% of the rate over 3 steps, "
                  "3 batches of 3 examples, max_grad_norm=1.0; the model arrives in eval mode",
                  1, "adamw", 0.01, "linear", (3, 3, 3), 1.0),
    TrainingSetup("SGD with momentum 0.9 (lr 0.2), StepLR, a model frozen by freeze_layers(model, 1), batches of "
                  "5, 4 and 3 examples, max_grad_norm=0.1; the model arrives in eval mode",
                  2, "momentum", 0.2, "step", (5, 4, 3), 0.1, frozen=1),
    TrainingSetup("one batch of 6 examples, SGD (lr 0.5), StepLR, max_grad_norm=100 (no clipping); the model "
                  "arrives in eval mode", 1, "sgd", 0.5, "step", (6,), 100.0),
)


@dataclass(frozen=True)
class TrainingCase:
    """A setup with its drawn values: the model before the epoch (random weights, in eval mode, frozen as
    the setup says) and the batches."""

    setup: TrainingSetup
    model: nn.Module
    batches: list[dict[str, torch.Tensor]]

    @property
    def description(self) -> str:
        return self.setup.description


def train_epoch_cases() -> list[TrainingCase]:
    """For every setup of TRAINING_SETUPS (dropout 0.2 and 0.1 in the model), a model with random weights
    and batches of random ids, lengths (padding) and labels; each example's index in the epoch is in
    its batch (the loss function seeds the dropout with it)."""
    generator = generator_for("train_epoch")
    cases = []
    for setup in TRAINING_SETUPS:
        config = tiny_bert_config(setup.num_layers, hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.1)
        model = _classifier(config, generator)
        if setup.frozen is not None:
            reference.freeze_layers(model, setup.frozen)
        model.eval()  # as it would be after an evaluation: the loop must switch to training mode
        batches, start = [], 0
        for size in setup.batch_sizes:
            length = 7
            lengths = torch.randint(3, length + 1, (size, 1), generator=generator)
            attention_mask = (torch.arange(length) < lengths).long()
            input_ids = torch.randint(5, config.vocab_size, (size, length), generator=generator) * attention_mask
            labels = torch.randint(0, 2, (size,), generator=generator)
            batches.append({"input_ids": input_ids, "token_type_ids": torch.zeros_like(input_ids),
                            "attention_mask": attention_mask, "labels": labels,
                            "index": torch.arange(start, start + size)})
            start += size
        cases.append(TrainingCase(setup, model, batches))
    return cases


def _training_run(case: TrainingCase):
    """(model, batches, optimizer, scheduler) of a case, fresh copies at every call."""
    setup = case.setup
    model = copy.deepcopy(case.model)
    batches = [{name: tensor.clone() for name, tensor in batch.items()} for batch in case.batches]
    trainable = [p for p in model.parameters() if p.requires_grad]
    if setup.optimizer == "adamw":
        optimizer = torch.optim.AdamW(trainable, lr=setup.lr, weight_decay=0.01)
    else:
        optimizer = torch.optim.SGD(trainable, lr=setup.lr, momentum=0.9 if setup.optimizer == "momentum" else 0.0)
    if setup.scheduler == "step":
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    else:
        scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.25, total_iters=3)
    return model, batches, optimizer, scheduler


def _with_gradients(function: Callable) -> Callable:
    """``function`` called with gradients enabled (``run_student`` disables them)."""

    def call(*args, **kwargs):
        with torch.enable_grad():
            return function(*args, **kwargs)

    return call


def _train_epoch_variant(*, zero_grad: str = "before_backward", clip: str = "before_step",
                         schedule: str = "after_step", train_mode: bool = True, mean: str = "weighted"):
    """train_epoch with one of the typical mistakes."""

    def train_epoch(model, batches, loss_fn, optimizer, scheduler, device, *, max_grad_norm=1.0):
        if train_mode:
            model.train()
        losses, sizes = [], []
        for batch in batches:
            if schedule == "before_step":
                scheduler.step()
            loss = loss_fn(model, batch)
            if zero_grad == "before_backward":
                optimizer.zero_grad()
            loss.backward()
            if zero_grad == "after_backward":
                optimizer.zero_grad()
            if clip == "before_step":
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
            elif clip == "value":
                torch.nn.utils.clip_grad_value_(model.parameters(), max_grad_norm)
            optimizer.step()
            if schedule == "after_step":
                scheduler.step()
            losses.append(loss.item())
            sizes.append(len(batch["index"]))
        if schedule == "per_epoch":
            scheduler.step()
        if mean == "unweighted":
            return sum(losses) / len(losses)
        if mean == "sum":
            return sum(loss * size for loss, size in zip(losses, sizes))
        if mean == "last":
            return losses[-1]
        return sum(loss * size for loss, size in zip(losses, sizes)) / sum(sizes)

    return train_epoch


TRAIN_EPOCH_MISTAKES = (
    Mistake(_train_epoch_variant(train_mode=False),
     "put the model in training mode first (model.train()): it may arrive in eval mode (after an evaluation), "
     "and then the dropout is off."),
    Mistake(_train_epoch_variant(zero_grad="never"),
     "call optimizer.zero_grad() at every step (before loss.backward()): backward ADDS to the .grad of the "
     "previous steps, so without it every step uses the sum of all the gradients so far."),
    # Zeroing between backward and step, and stepping before backward, both step with zero gradients (the
    # model never changes): one hint for both.
    Mistake(_train_epoch_variant(zero_grad="after_backward"),
     "the step must use the gradients that backward has just computed: the order is optimizer.zero_grad(), "
     "loss.backward(), clip, optimizer.step(). A zero_grad() between backward and step erases them, and a step "
     "before backward uses the zeroed ones: either way the model does not change."),
    # Clipping after the step and not clipping give the same updates: one hint for both.
    Mistake(_train_epoch_variant(clip="none"),
     "clip the gradients' global norm to max_grad_norm, and clip the gradients BEFORE optimizer.step() (after "
     "loss.backward()): torch.nn.utils.clip_grad_norm_(trainable parameters, max_grad_norm). Without it, or "
     "after the step, the step uses the unclipped gradients."),
    Mistake(_train_epoch_variant(clip="value"),
     "clip the gradients' global NORM (clip_grad_norm_), not each value (clip_grad_value_)."),
    Mistake(_train_epoch_variant(schedule="before_step"),
     "call scheduler.step() AFTER optimizer.step(): otherwise the first step already uses the second step's "
     "learning rate."),
    Mistake(_train_epoch_variant(schedule="per_epoch"),
     "call scheduler.step() after EVERY optimizer.step() (the schedule counts steps, not epochs)."),
    Mistake(_train_epoch_variant(mean="unweighted"),
     "return the mean loss per EXAMPLE: weight each batch's loss by its number of examples "
     "(len(batch[\"index\"])), since the last batch may be smaller."),
    Mistake(_train_epoch_variant(mean="sum"),
     "return the MEAN loss per example: divide the sum by the number of examples."),
    Mistake(_train_epoch_variant(mean="last"), "return the mean loss over the whole epoch, not the last batch's loss."),
)


def _run_training(function: Callable, case: TrainingCase):
    model, batches, optimizer, scheduler = _training_run(case)
    with torch.enable_grad():
        return function(model, batches, seeded_classification_loss, optimizer, scheduler, CPU,
                        max_grad_norm=case.setup.max_grad_norm)


def _compare_training(exercise: Exercise, student_fn, case: TrainingCase, context: str, forbidden) -> None:
    """One case: an epoch of the student's loop must give the reference's mean loss."""
    check = exercise.name
    model, batches, optimizer, scheduler = _training_run(case)
    arguments = Case(case.description, (model, batches, seeded_classification_loss, optimizer, scheduler, CPU),
                     {"max_grad_norm": case.setup.max_grad_norm})
    actual = run_student(_with_gradients(student_fn), arguments, check=check, forbidden=forbidden,
                         parameter_names=exercise.parameter_names, context=context)
    # float32, as the exercise's loop computes: "auto" would choose bfloat16 on a CPU that has it
    expected = _run_training(lambda *args, **kwargs: exercise.reference(*args, **kwargs, progress=False,
                                                                        precision="float32"), case)
    if isinstance(actual, torch.Tensor) and actual.numel() == 1:
        fail(check, context, f"you returned a tensor ({actual.item():.6g}), expected a float.",
             "return a Python float: accumulate loss.item() (a tensor would also keep the graph alive).")
    difference = describe_difference(actual, expected, exercise.tolerance, "the mean loss")
    if difference is not None:
        hint = None
        if isinstance(actual, (int, float)):
            hint = hint_of_first(exercise.mistakes, lambda mistake: describe_difference(
                actual, _run_training(mistake.implementation, case), exercise.tolerance) is None)
        fail(check, context, difference, hint)


TRAIN_EPOCH = Exercise("train_epoch", reference.train_epoch, train_epoch_cases, mistakes=TRAIN_EPOCH_MISTAKES,
                       forbidden=TRAIN_EPOCH_FORBIDDEN, tolerance=TRAIN_EPOCH_TOLERANCE,
                       parameter_names=("model", "batches", "loss_fn", "optimizer", "scheduler", "device"),
                       compare=_compare_training,
                       summary="""
                       Compare ``train_epoch(model, batches, loss_fn, optimizer, scheduler, device, *,
                       max_grad_norm=1.0)`` with :func:`bertlab.finetuning.train_epoch`.

                       Cases: tiny BertForSequenceClassification models (dropout 0.2) that arrive in eval mode; SGD, SGD
                       with momentum and AdamW; StepLR (the rate halves after every step) and LinearLR (warm-up);
                       batches of equal and unequal sizes, one batch; clipping that acts (max_grad_norm 0.05, 0.1) and
                       that does not (100); a partly frozen model. The loss function seeds the dropout per batch, so the
                       returned mean loss per example, which depends on every earlier update, must equal the reference's
                       (atol 1e-6, rtol 1e-5). Forbidden: the reference's train_epoch and finetune, Hugging Face's
                       Trainer.
                       """)


#: The chapter whose exercises this module checks, and their records, in the order of the chapter.
CHAPTER = "08_finetuning"


__getattr__ = check_functions(globals())  # check_<name> for each record above
