"""Mutation tests of chapter 08's checks (autograder/checks/finetuning.py).

For every exercise: the check accepts the solution of the solution notebook, other correct
implementations and (with the forbid-rule lifted) the reference; it rejects a catalogue of typical
wrong implementations, written the way students write them, each with the hint that explains it; and
calling the reference fails with "implement this yourself", however it was captured. The checks also
run once through the grader's sandbox, where the student's code lives in another process and a model
passed to it is a copy.
"""

import inspect
import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import bertlab.bert
import bertlab.finetuning
import bertlab.pretraining
from autograder.checks import finetuning as checks
from autograder.checks.framework import CheckFailed
from bertlab.finetuning import freeze_layers as captured_freeze_layers
from bertlab.finetuning import param_groups as captured_param_groups
from checks_helpers import MutationTests, run_in_grader, run_solution_cells, solution_cells

SOLUTION = Path(__file__).resolve().parents[1] / "solutions" / "08_finetuning" / "08_finetuning.ipynb"
EXERCISES = ["BertForSequenceClassification", "train_epoch", "freeze_layers", "param_groups"]
def float32_train_epoch(*args, **kwargs):
    """bertlab's train_epoch in float32, as the exercise's loop computes ("auto" is bfloat16 on a CPU that
    computes it natively, and its losses then differ from the exercise's beyond the check's tolerance)."""
    return bertlab.finetuning.train_epoch(*args, **kwargs, precision="float32")


REFERENCES = {
    "BertForSequenceClassification": bertlab.bert.BertForSequenceClassification,
    "train_epoch": float32_train_epoch,
    "freeze_layers": bertlab.finetuning.freeze_layers,
    "param_groups": bertlab.finetuning.param_groups,
}


@pytest.fixture(scope="module")
def solution_namespace():
    """The functions and classes defined by the solution cells of the solution notebook."""
    return run_solution_cells(SOLUTION, {"torch": torch, "nn": nn, "F": F, "math": math, "bertlab": bertlab})


# --------------------------------------------------------------------------------------------------
# BertForSequenceClassification: typical wrong implementations
# --------------------------------------------------------------------------------------------------


class Head(nn.Module):
    """A correct head whose pieces the mutants below change one at a time."""

    def __init__(self, config, num_labels=2):
        super().__init__()
        self.bert = bertlab.bert.BertModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, num_labels)

    def features(self, input_ids, token_type_ids, attention_mask):
        return self.bert(input_ids, token_type_ids, attention_mask)[1]

    def logits(self, features):
        return self.classifier(self.dropout(features))

    def loss(self, logits, labels):
        return F.cross_entropy(logits, labels)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, labels=None):
        logits = self.logits(self.features(input_ids, token_type_ids, attention_mask))
        loss = None if labels is None else self.loss(logits, labels)
        return bertlab.bert.SequenceClassifierOutput(loss=loss, logits=logits)


class HeadOnRawCls(Head):
    def features(self, input_ids, token_type_ids, attention_mask):
        return self.bert(input_ids, token_type_ids, attention_mask)[0][:, 0]


class HeadMeanOfTokens(Head):
    def features(self, input_ids, token_type_ids, attention_mask):
        return self.bert(input_ids, token_type_ids, attention_mask)[0].mean(dim=1)


class HeadWithoutDropout(Head):
    def logits(self, features):
        return self.classifier(features)


class HeadDropoutAfterClassifier(Head):
    def logits(self, features):
        return self.dropout(self.classifier(features))


class HeadFixedDropout(Head):
    def __init__(self, config, num_labels=2):
        super().__init__(config, num_labels)
        self.dropout = nn.Dropout(0.5)


class HeadDropoutAlsoInEval(Head):
    def logits(self, features):
        return self.classifier(F.dropout(features, self.dropout.p))


class HeadReturnsProbabilities(Head):
    def logits(self, features):
        return torch.softmax(self.classifier(self.dropout(features)), dim=-1)


class HeadLossOnProbabilities(Head):
    def loss(self, logits, labels):
        return F.cross_entropy(torch.softmax(logits, dim=-1), labels)


class HeadSummedLoss(Head):
    def loss(self, logits, labels):
        return F.cross_entropy(logits, labels, reduction="sum")


class HeadLossWithoutLabels(Head):
    def forward(self, input_ids, token_type_ids=None, attention_mask=None, labels=None):
        logits = self.logits(self.features(input_ids, token_type_ids, attention_mask))
        return bertlab.bert.SequenceClassifierOutput(loss=F.cross_entropy(logits, labels), logits=logits)


class HeadReturnsTuple(Head):
    def forward(self, input_ids, token_type_ids=None, attention_mask=None, labels=None):
        output = super().forward(input_ids, token_type_ids, attention_mask, labels)
        return output.loss, output.logits


class HeadWithOtherNames(nn.Module):
    def __init__(self, config, num_labels=2):
        super().__init__()
        self.encoder = bertlab.bert.BertModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.out = nn.Linear(config.hidden_size, num_labels)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, labels=None):
        logits = self.out(self.dropout(self.encoder(input_ids, token_type_ids, attention_mask)[1]))
        loss = None if labels is None else F.cross_entropy(logits, labels)
        return bertlab.bert.SequenceClassifierOutput(loss=loss, logits=logits)


class HeadSubclassingTheReference(bertlab.bert.BertForSequenceClassification):
    pass


class HeadWithManualCrossEntropy(Head):
    """Correct: the cross-entropy written out."""

    def loss(self, logits, labels):
        return -torch.log_softmax(logits, dim=-1).gather(1, labels[:, None]).mean()


class HeadWithFunctionalDropout(Head):
    """Correct: F.dropout with the module's training flag."""

    def logits(self, features):
        return self.classifier(F.dropout(features, self.dropout.p, training=self.training))


# --------------------------------------------------------------------------------------------------
# freeze_layers
# --------------------------------------------------------------------------------------------------


def freeze_the_top(model, num_trainable_layers):
    model.requires_grad_(True)
    model.bert.embeddings.requires_grad_(False)
    layers = list(model.bert.encoder.layers)
    for layer in layers[::-1][: len(layers) - num_trainable_layers]:  # from the top down
        layer.requires_grad_(False)
    return model


def freeze_without_embeddings(model, num_trainable_layers):
    model.requires_grad_(True)
    layers = model.bert.encoder.layers
    for layer in layers[: len(layers) - num_trainable_layers]:
        for parameter in layer.parameters():
            parameter.requires_grad = False
    return model


def freeze_bert_then_unfreeze_layers(model, num_trainable_layers):
    for parameter in model.parameters():
        parameter.requires_grad = False
    layers = model.bert.encoder.layers
    for layer in layers[len(layers) - num_trainable_layers:]:
        layer.requires_grad_(True)
    return model


def freeze_with_negative_slice(model, num_trainable_layers):
    model.requires_grad_(False)
    for layer in model.bert.encoder.layers[-num_trainable_layers:]:
        layer.requires_grad_(True)
    model.bert.pooler.requires_grad_(True)
    model.classifier.requires_grad_(True)
    return model


def freeze_one_too_many(model, num_trainable_layers):
    model.requires_grad_(True)
    model.bert.embeddings.requires_grad_(False)
    layers = model.bert.encoder.layers
    for layer in layers[: len(layers) - num_trainable_layers + 1]:
        layer.requires_grad_(False)
    return model


def freeze_only_setting_false(model, num_trainable_layers):
    model.bert.embeddings.requires_grad_(False)
    layers = model.bert.encoder.layers
    for layer in layers[: len(layers) - num_trainable_layers]:
        layer.requires_grad_(False)
    return model


def freeze_counting_frozen_layers(model, num_trainable_layers):
    model.requires_grad_(True)
    model.bert.embeddings.requires_grad_(False)
    for layer in model.bert.encoder.layers[:num_trainable_layers]:
        layer.requires_grad_(False)
    return model


def freeze_without_return(model, num_trainable_layers):
    model.requires_grad_(True)
    model.bert.embeddings.requires_grad_(False)
    layers = model.bert.encoder.layers
    for layer in layers[: len(layers) - num_trainable_layers]:
        layer.requires_grad_(False)


def freeze_returning_the_backbone(model, num_trainable_layers):
    return freeze_counting_frozen_layers(model, len(model.bert.encoder.layers) - num_trainable_layers).bert


def freeze_by_names(model, num_trainable_layers):
    """Correct: decided from each parameter's name."""
    num_layers = len(model.bert.encoder.layers)
    for name, parameter in model.named_parameters():
        parts = name.split(".")
        below = "layers" in parts and int(parts[parts.index("layers") + 1]) < num_layers - num_trainable_layers
        parameter.requires_grad = not (name.startswith("bert.embeddings.") or below)
    return model


def freeze_with_captured_reference(model, num_trainable_layers):
    return captured_freeze_layers(model, num_trainable_layers)


# --------------------------------------------------------------------------------------------------
# param_groups
# --------------------------------------------------------------------------------------------------


def encoder_parts(model, encoder_lr, layer_decay):
    layers = model.bert.encoder.layers
    L = len(layers)
    return [(model.bert.embeddings, encoder_lr * layer_decay**L)] + [
        (layer, encoder_lr * layer_decay ** (L - 1 - index)) for index, layer in enumerate(layers)]


def split_by_decay(params, lr, weight_decay, no_decay=lambda name, p: p.dim() < 2):
    params = [(name, p) for name, p in params if p.requires_grad]
    groups = []
    for decayed in (True, False):
        chosen = [p for name, p in params if no_decay(name, p) != decayed]
        if chosen:
            groups.append({"params": chosen, "lr": lr, "weight_decay": weight_decay if decayed else 0.0})
    return groups


def groups_with(model, encoder_lr, head_lr, weight_decay, layer_decay, *, parts=None, head=None,
                no_decay=lambda name, p: p.dim() < 2):
    parts = encoder_parts(model, encoder_lr, layer_decay) if parts is None else parts
    if head is None:
        encoder_ids = {id(p) for module, _ in parts for p in module.parameters()}
        head = [(name, p) for name, p in model.named_parameters() if id(p) not in encoder_ids]
    groups = []
    for module, lr in parts:
        groups += split_by_decay(module.named_parameters(), lr, weight_decay, no_decay)
    return groups + split_by_decay(head, head_lr, weight_decay, no_decay)


def groups_with_duplicates(model, encoder_lr, head_lr, weight_decay, layer_decay=1.0):
    return groups_with(model, encoder_lr, head_lr, weight_decay, layer_decay, head=list(model.named_parameters()))


def groups_decaying_layer_norms(model, encoder_lr, head_lr, weight_decay, layer_decay=1.0):
    return groups_with(model, encoder_lr, head_lr, weight_decay, layer_decay,
                       no_decay=lambda name, p: "bias" in name or "LayerNorm.weight" in name)


def groups_swapping_rates(model, encoder_lr, head_lr, weight_decay, layer_decay=1.0):
    return groups_with(model, head_lr, encoder_lr, weight_decay, layer_decay)


def groups_with_frozen_parameters(model, encoder_lr, head_lr, weight_decay, layer_decay=1.0):
    groups = []
    for module, lr in encoder_parts(model, encoder_lr, layer_decay):
        groups.append({"params": [p for p in module.parameters() if p.dim() >= 2], "lr": lr,
                       "weight_decay": weight_decay})
        groups.append({"params": [p for p in module.parameters() if p.dim() < 2], "lr": lr, "weight_decay": 0.0})
    head = [p for name, p in model.named_parameters() if name.startswith(("bert.pooler", "classifier"))]
    groups.append({"params": [p for p in head if p.dim() >= 2], "lr": head_lr, "weight_decay": weight_decay})
    groups.append({"params": [p for p in head if p.dim() < 2], "lr": head_lr, "weight_decay": 0.0})
    return [group for group in groups if group["params"]]


def groups_bottom_layer_fastest(model, encoder_lr, head_lr, weight_decay, layer_decay=1.0):
    layers = model.bert.encoder.layers
    parts = [(model.bert.embeddings, encoder_lr)] + [
        (layer, encoder_lr * layer_decay**index) for index, layer in enumerate(layers)]
    return groups_with(model, encoder_lr, head_lr, weight_decay, layer_decay, parts=parts)


def groups_exponent_off_by_one(model, encoder_lr, head_lr, weight_decay, layer_decay=1.0):
    layers = model.bert.encoder.layers
    L = len(layers)
    parts = [(model.bert.embeddings, encoder_lr * layer_decay**L)] + [
        (layer, encoder_lr * layer_decay ** (L - index)) for index, layer in enumerate(layers)]
    return groups_with(model, encoder_lr, head_lr, weight_decay, layer_decay, parts=parts)


def groups_pooler_in_the_encoder(model, encoder_lr, head_lr, weight_decay, layer_decay=1.0):
    parts = encoder_parts(model, encoder_lr, layer_decay) + [(model.bert.pooler, encoder_lr)]
    return groups_with(model, encoder_lr, head_lr, weight_decay, layer_decay, parts=parts)


def groups_decaying_everything(model, encoder_lr, head_lr, weight_decay, layer_decay=1.0):
    return groups_with(model, encoder_lr, head_lr, weight_decay, layer_decay, no_decay=lambda name, p: False)


def groups_without_weight_decay_key(model, encoder_lr, head_lr, weight_decay, layer_decay=1.0):
    groups = groups_with(model, encoder_lr, head_lr, weight_decay, layer_decay)
    return [{"params": group["params"], "lr": group["lr"]} for group in groups]


def groups_one_per_parameter(model, encoder_lr, head_lr, weight_decay, layer_decay=1.0):
    """Correct: one group per parameter, decided from its name."""
    L = len(model.bert.encoder.layers)
    groups = []
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        parts = name.split(".")
        if name.startswith("bert.embeddings."):
            lr = encoder_lr * layer_decay**L
        elif "layers" in parts:
            lr = encoder_lr * layer_decay ** (L - 1 - int(parts[parts.index("layers") + 1]))
        else:
            lr = head_lr
        groups.append({"params": [parameter], "lr": lr, "weight_decay": weight_decay if parameter.ndim > 1 else 0.0})
    return groups


def groups_with_captured_reference(model, encoder_lr, head_lr, weight_decay, layer_decay=1.0):
    return captured_param_groups(model, encoder_lr, head_lr, weight_decay, layer_decay)


def groups_with_the_pretraining_rule(model, encoder_lr, head_lr, weight_decay, layer_decay=1.0):
    """The decay split of bertlab's pretraining (``bertlab.pretraining.weight_decay_groups``, defined in
    ``bertlab.optimization``), with one rate."""
    return [{**group, "lr": encoder_lr} for group in bertlab.pretraining.weight_decay_groups(model, weight_decay)]


# --------------------------------------------------------------------------------------------------
# train_epoch
# --------------------------------------------------------------------------------------------------


def loop(*, train=True, zero_grad=True, clip="before", schedule="after", mean="weighted", as_tensor=False,
         zero_grad_last=False, item_first=False):
    """A training loop with one step changed: the mutants below (named after the change, for the test ids)."""
    changes = {name: value for name, value in locals().items() if value != LOOP_DEFAULTS[name]}

    def train_epoch(model, batches, loss_fn, optimizer, scheduler, device, *, max_grad_norm=1.0):
        if train:
            model.train()
        total, count, losses = 0.0, 0, []
        for batch in batches:
            if schedule == "before":
                scheduler.step()
            if zero_grad and not zero_grad_last:
                optimizer.zero_grad()
            loss = loss_fn(model, batch)
            value = loss.item() if item_first else None
            loss.backward()
            if clip == "before":
                torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], max_grad_norm)
            optimizer.step()
            if clip == "after":
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
            if schedule == "after":
                scheduler.step()
            if zero_grad_last:
                optimizer.zero_grad(set_to_none=True)
            value = loss.item() if value is None else value
            size = batch["labels"].shape[0]
            total, count = total + value * size, count + size
            losses.append(value)
        if mean == "unweighted":
            return sum(losses) / len(losses)
        return torch.tensor(total / count) if as_tensor else total / count

    train_epoch.__name__ = "_".join(["train_epoch", *(f"{name}_{value}" for name, value in changes.items())])
    return train_epoch


LOOP_DEFAULTS = {name: parameter.default for name, parameter in inspect.signature(loop).parameters.items()}


def train_epoch_with_the_reference(model, batches, loss_fn, optimizer, scheduler, device, *, max_grad_norm=1.0):
    return bertlab.finetuning.train_epoch(model, batches, loss_fn, optimizer, scheduler, device,
                                          max_grad_norm=max_grad_norm, progress=False)


def train_epoch_through_fit(model, batches, loss_fn, optimizer, scheduler, device, *, max_grad_norm=1.0):
    history = bertlab.finetuning.fit(model, batches, loss_fn, optimizer, scheduler, device, epochs=1,
                                     max_grad_norm=max_grad_norm, progress=False)
    return history[0]["train_loss"]


def train_epoch_through_finetune(model, batches, loss_fn, optimizer, scheduler, device, *, max_grad_norm=1.0):
    try:
        bertlab.finetuning.finetune(model, None, [("a", 0)], progress=False, device="cpu")
    except Exception:  # the check's exception is swallowed, but the call was recorded
        pass
    return loop()(model, batches, loss_fn, optimizer, scheduler, device, max_grad_norm=max_grad_norm)


MUTANTS = {
    "BertForSequenceClassification": [
        (HeadOnRawCls, "classify the POOLED output"),
        (HeadMeanOfTokens, "not the mean of the token vectors"),
        (HeadWithoutDropout, "nothing was dropped"),
        (HeadDropoutAfterClassifier, "BEFORE the classifier"),
        (HeadFixedDropout, "config.hidden_dropout_prob"),
        (HeadDropoutAlsoInEval, "in eval mode"),
        (HeadReturnsProbabilities, "not probabilities"),
        (HeadLossOnProbabilities, "the cross-entropy takes the logits"),
        (HeadSummedLoss, "MEAN cross-entropy"),
        (HeadLossWithoutLabels, "return loss=None otherwise"),
        (HeadReturnsTuple, "SequenceClassifierOutput"),
        (HeadWithOtherNames, "name the submodules bert"),
    ],
    "freeze_layers": [
        (freeze_the_top, "freeze the BOTTOM layers and train the TOP ones"),
        (freeze_without_embeddings, "freeze the embeddings too"),
        (freeze_bert_then_unfreeze_layers, "the head trains"),
        (freeze_with_negative_slice, "layers[-0:] is the WHOLE list"),
        (freeze_one_too_many, "one fewer than asked"),
        (freeze_only_setting_false, "set requires_grad on EVERY parameter"),
        (freeze_counting_frozen_layers, "counts the layers that TRAIN"),
        (freeze_without_return, "return the model"),
        (freeze_returning_the_backbone, "return the whole model"),
    ],
    "param_groups": [
        (groups_with_duplicates, "more than one group"),
        (groups_decaying_layer_norms, "no weight decay on the LayerNorm weights either"),
        (groups_swapping_rates, "swapped"),
        (groups_with_frozen_parameters, "leave out the frozen parameters"),
        (groups_bottom_layer_fastest, "the TOP layer learns fastest"),
        (groups_exponent_off_by_one, "off by one in the exponent"),
        (groups_pooler_in_the_encoder, "the pooler (model.bert.pooler) belongs to the head"),
        (groups_decaying_everything, "no weight decay on biases and LayerNorm weights"),
        (groups_without_weight_decay_key, "has no 'weight_decay'"),
    ],
    "train_epoch": [
        (loop(train=False), "put the model in training mode"),
        (loop(zero_grad=False), "call optimizer.zero_grad() at every step"),
        (loop(clip="after"), "clip the gradients BEFORE optimizer.step()"),
        (loop(clip="none"), "clip the gradients' global norm"),
        (loop(schedule="before"), "call scheduler.step() AFTER optimizer.step()"),
        (loop(schedule="never"), "after EVERY optimizer.step()"),
        (loop(mean="unweighted"), "mean loss per EXAMPLE"),
        (loop(as_tensor=True), "expected a float"),
    ],
}

ALTERNATIVES = {
    "BertForSequenceClassification": [Head, HeadWithManualCrossEntropy, HeadWithFunctionalDropout],
    "freeze_layers": [freeze_by_names],
    "param_groups": [groups_one_per_parameter],
    "train_epoch": [loop(), loop(zero_grad_last=True, item_first=True)],
}


def test_failure_messages_say_which_case_and_which_parts():
    first = checks.freeze_layers_cases()[0]
    num_layers, trained = len(first.model.bert.encoder.layers), first.num_trainable_layers
    with pytest.raises(CheckFailed) as failure:
        checks.check_freeze_layers(freeze_the_top)
    message = str(failure.value)
    assert f"test case 1 of 7 ({num_layers} encoder layers, num_trainable_layers={trained})" in message
    assert "trainable, but should be frozen: encoder layer 0" in message
    should_train = re.search(r"frozen, but should train: ((encoder layer \d, )*encoder layer \d) \(", message)
    assert should_train and should_train.group(1).endswith(f"encoder layer {num_layers - 1}"), message

    with pytest.raises(CheckFailed) as failure:
        checks.check_param_groups(groups_swapping_rates)
    assert re.search(r"you gave lr=[\d.e-]+, weight_decay=[\d.]+, expected lr=[\d.e-]+", str(failure.value))

    with pytest.raises(CheckFailed) as failure:
        checks.check_train_epoch(loop(zero_grad=False))
    assert re.search(r"the mean loss: you returned [\d.]+, expected [\d.]+ \(tolerance atol=1e-06, rtol=1e-05\)",
                     str(failure.value))


def test_mistakes_are_far_from_the_right_answer():
    """In every case, each mistake of train_epoch either gives the right mean loss (it cannot be seen there:
    equal batch sizes hide an unweighted mean, no clipping hides a missing clip) or one at least 5
    tolerances away, so that a right answer computed in another order never gets a mistake's hint; and
    every mistake is seen, by far, in some case."""
    tolerance = checks.TRAIN_EPOCH_TOLERANCE
    largest = {mistake.hint: 0.0 for mistake in checks.TRAIN_EPOCH_MISTAKES}
    for case in checks.train_epoch_cases():
        right = checks._run_training(lambda *args, **kwargs: float32_train_epoch(*args, **kwargs, progress=False), case)
        allowed = tolerance.atol + tolerance.rtol * abs(right)
        for mistake in checks.TRAIN_EPOCH_MISTAKES:
            distance = abs(checks._run_training(mistake.implementation, case) - right) / allowed
            assert distance < 1 or distance > 5, (case.description, mistake.hint, distance)
            largest[mistake.hint] = max(largest[mistake.hint], distance)
    assert all(distance > 100 for distance in largest.values()), largest


# --------------------------------------------------------------------------------------------------
# "Implement this yourself"
# --------------------------------------------------------------------------------------------------


class TestFinetuningChecks(MutationTests):
    """The shared mutation tests (tests/checks_helpers.py) of this chapter's checks."""

    checks = checks
    references = REFERENCES
    mutants = MUTANTS
    alternatives = ALTERNATIVES
    failure_context = ""  # the classifier's check names its cases by their inputs, not by number
    reference_calls = {"train_epoch": "bertlab.finetuning.train_epoch"}
    cheats = [
        ("BertForSequenceClassification", HeadSubclassingTheReference,
         "bertlab.bert.BertForSequenceClassification.__init__"),
        ("freeze_layers", freeze_with_captured_reference, "bertlab.finetuning.freeze_layers"),
        ("param_groups", groups_with_captured_reference, "bertlab.finetuning.param_groups"),
        ("param_groups", groups_with_the_pretraining_rule, "bertlab.optimization.weight_decay_groups"),
        ("train_epoch", train_epoch_with_the_reference, "bertlab.finetuning.train_epoch"),
        ("train_epoch", train_epoch_through_fit, "bertlab.finetuning.fit"),
        ("train_epoch", train_epoch_through_finetune, "bertlab.finetuning.finetune"),
    ]


# --------------------------------------------------------------------------------------------------
# Through the grader: the student's code lives in a sandboxed process
# --------------------------------------------------------------------------------------------------

WRONG_VERSIONS = {  # a typical mistake in each solution cell, and a word of the hint it must get
    "BertForSequenceClassification": ("self.classifier(self.dropout(pooled_output))",
                                      "self.classifier(pooled_output)", "nothing was dropped"),
    "freeze_layers": ("    model.bert.embeddings.requires_grad_(False)\n", "", "freeze the embeddings too"),
    "param_groups": ("(not_decayed, 0.0)", "(not_decayed, weight_decay)", "no weight decay on biases"),
    "train_epoch": ("        scheduler.step()\n", "", "after EVERY optimizer.step()"),
}


@pytest.mark.slow
def test_checks_grade_code_in_the_student_process():
    """A model passed to the student's function is a copy in another process: the checks must read what
    comes back. The solution passes every test cell; each typical mistake fails with its hint."""
    from autograder.run.sandbox import Limits

    setup = "import torch\nimport torch.nn.functional as F\nfrom torch import nn\nimport bertlab.bert"
    steps, tests = [("code", setup)], {}
    cells = dict(solution_cells(SOLUTION))
    for name in EXERCISES:
        steps += [("code", cells[name]), ("test", f"right_{name}")]
        tests[f"right_{name}"] = f"from autograder.checks.finetuning import check_{name}\nprint(check_{name}({name}))"
    for name, (right, wrong, _) in WRONG_VERSIONS.items():
        assert right in cells[name], name
        compile(cells[name].replace(right, wrong, 1), f"wrong {name}", "exec")  # a mistake, not a syntax error
        steps += [("code", cells[name].replace(right, wrong, 1)), ("test", f"wrong_{name}")]
        tests[f"wrong_{name}"] = tests[f"right_{name}"]
    limits = Limits(cell_timeout=120, notebook_timeout=600)
    outcomes = run_in_grader(steps, tests, EXERCISES, limits)
    for name in EXERCISES:
        outcome = outcomes[f"right_{name}"]
        assert outcome.status == "passed", (name, outcome)
        assert f"{name}: all" in outcome.output
    for name, (_, _, hint) in WRONG_VERSIONS.items():
        outcome = outcomes[f"wrong_{name}"]
        assert outcome.status == "failed", (name, outcome)
        assert hint in outcome.message, (name, outcome.message)
