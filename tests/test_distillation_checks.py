"""Mutation tests of chapter 09's checks (autograder/checks/distillation.py).

For every exercise: the check accepts the solution of the solution notebook, other correct
implementations and (with the forbid-rule lifted) the reference; it rejects a catalogue of typical
wrong implementations, written the way students write them, each with the hint that explains it; and
calling the reference fails with "implement this yourself", however it was captured. The checks also
run once through the grader's sandbox, where the student's functions and models live in another process.
"""

import copy
import dataclasses
import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import bertlab.distillation
from autograder.checks import distillation as checks
from autograder.checks.framework import CheckFailed
from bertlab.distillation import distillation_loss as captured_distillation_loss
from bertlab.distillation import init_student_from_teacher as captured_init_student
from bertlab.finetuning import bert_backbone, encoder_layers
from checks_helpers import MutationTests, run_in_grader, run_solution_cells, solution_cells

SOLUTION = Path(__file__).resolve().parents[1] / "solutions" / "09_distillation" / "09_distillation.ipynb"
EXERCISES = ["softmax_with_temperature", "distillation_loss", "init_student_from_teacher"]
REFERENCES = {
    "softmax_with_temperature": checks.reference_softmax_with_temperature,  # the exercise forbids nothing
    "distillation_loss": bertlab.distillation.distillation_loss,
    "init_student_from_teacher": bertlab.distillation.init_student_from_teacher,
}


@pytest.fixture(scope="module")
def solution_namespace():
    """The functions defined by the solution cells of the solution notebook, executed together."""
    return run_solution_cells(SOLUTION, {"torch": torch, "F": F, "nn": nn, "math": math, "copy": copy,
                                         "dataclasses": dataclasses, "bert_backbone": bert_backbone,
                                         "encoder_layers": encoder_layers})


# --------------------------------------------------------------------------------------------------
# softmax_with_temperature: typical wrong implementations
# --------------------------------------------------------------------------------------------------


def tempered_multiplied(logits, temperature=1.0):
    return torch.softmax(logits * temperature, dim=-1)


def tempered_after_the_softmax(logits, temperature=1.0):
    return torch.softmax(logits, dim=-1) / temperature


def tempered_power(logits, temperature=1.0):
    return F.softmax(logits, dim=-1).pow(1 / temperature)


def tempered_naive_exp(logits, temperature=1.0):
    e = (logits / temperature).exp()
    return e / e.sum(dim=-1, keepdim=True)


def tempered_over_the_batch(logits, temperature=1.0):
    return torch.softmax(logits / temperature, dim=0)


def tempered_log_probabilities(logits, temperature=1.0):
    return F.log_softmax(logits / temperature, dim=-1)


# --------------------------------------------------------------------------------------------------
# distillation_loss: typical wrong implementations
# --------------------------------------------------------------------------------------------------


def loss_kl_student_first(student_logits, teacher_logits, labels=None, alpha=0.5, temperature=2.0):
    T = temperature
    soft = F.kl_div(F.log_softmax(teacher_logits.detach() / T, -1), F.softmax(student_logits / T, -1),
                    reduction="batchmean") * T * T
    return soft if labels is None else alpha * F.cross_entropy(student_logits, labels) + (1 - alpha) * soft


def loss_probabilities_into_kl_div(student_logits, teacher_logits, labels=None, alpha=0.5, temperature=2.0):
    T = temperature
    soft = F.kl_div(F.softmax(student_logits / T, -1), F.softmax(teacher_logits / T, -1), reduction="batchmean") * T**2
    return soft if labels is None else alpha * F.cross_entropy(student_logits, labels) + (1 - alpha) * soft


def loss_without_t_squared(student_logits, teacher_logits, labels=None, alpha=0.5, temperature=2.0):
    T = temperature
    soft = F.kl_div(F.log_softmax(student_logits / T, -1), F.softmax(teacher_logits / T, -1), reduction="batchmean")
    return soft if labels is None else alpha * F.cross_entropy(student_logits, labels) + (1 - alpha) * soft


def loss_temperature_on_the_student_only(student_logits, teacher_logits, labels=None, alpha=0.5, temperature=2.0):
    T = temperature
    soft = F.kl_div(F.log_softmax(student_logits / T, -1), F.softmax(teacher_logits, -1), reduction="batchmean") * T**2
    return soft if labels is None else alpha * F.cross_entropy(student_logits, labels) + (1 - alpha) * soft


def loss_default_reduction(student_logits, teacher_logits, labels=None, alpha=0.5, temperature=2.0):
    T = temperature
    soft = nn.KLDivLoss()(F.log_softmax(student_logits / T, -1), F.softmax(teacher_logits / T, -1)) * T**2
    return soft if labels is None else alpha * F.cross_entropy(student_logits, labels) + (1 - alpha) * soft


def loss_alpha_swapped(student_logits, teacher_logits, labels=None, alpha=0.5, temperature=2.0):
    T = temperature
    soft = F.kl_div(F.log_softmax(student_logits / T, -1), F.softmax(teacher_logits / T, -1),
                    reduction="batchmean") * T**2
    return soft if labels is None else (1 - alpha) * F.cross_entropy(student_logits, labels) + alpha * soft


def loss_alpha_without_labels(student_logits, teacher_logits, labels=None, alpha=0.5, temperature=2.0):
    T = temperature
    soft = F.kl_div(F.log_softmax(student_logits / T, -1), F.softmax(teacher_logits / T, -1),
                    reduction="batchmean") * T**2
    hard = F.cross_entropy(student_logits, labels) if labels is not None else 0.0
    return alpha * hard + (1 - alpha) * soft


def loss_log_of_softmax(student_logits, teacher_logits, labels=None, alpha=0.5, temperature=2.0):
    T = temperature
    p, q = torch.softmax(teacher_logits / T, -1), torch.softmax(student_logits / T, -1)
    soft = (p * (p.log() - q.log())).sum(-1).mean() * T**2
    return soft if labels is None else alpha * F.cross_entropy(student_logits, labels) + (1 - alpha) * soft


def loss_soft_cross_entropy(student_logits, teacher_logits, labels=None, alpha=0.5, temperature=2.0):
    T = temperature
    p = F.softmax(teacher_logits / T, dim=-1)
    soft = -(p * F.log_softmax(student_logits / T, dim=-1)).sum(dim=-1).mean() * T**2
    return soft if labels is None else alpha * F.cross_entropy(student_logits, labels) + (1 - alpha) * soft


def loss_hard_term_at_temperature(student_logits, teacher_logits, labels=None, alpha=0.5, temperature=2.0):
    T = temperature
    log_q = F.log_softmax(student_logits / T, -1)
    soft = F.kl_div(log_q, F.softmax(teacher_logits / T, -1), reduction="batchmean") * T**2
    return soft if labels is None else alpha * F.nll_loss(log_q, labels) + (1 - alpha) * soft


def loss_teacher_softened_only(student_logits, teacher_logits, labels=None, alpha=0.5, temperature=2.0):
    T = temperature
    soft = F.kl_div(F.log_softmax(student_logits, -1), F.softmax(teacher_logits / T, -1), reduction="batchmean") * T**2
    return soft if labels is None else alpha * F.cross_entropy(student_logits, labels) + (1 - alpha) * soft


def loss_teacher_not_detached(student_logits, teacher_logits, labels=None, alpha=0.5, temperature=2.0):
    T = temperature
    p = F.softmax(teacher_logits / T, dim=-1)  # the teacher's logits still carry gradients
    soft = F.kl_div(F.log_softmax(student_logits / T, dim=-1), p, reduction="batchmean") * T**2
    return soft if labels is None else alpha * F.cross_entropy(student_logits, labels) + (1 - alpha) * soft


def loss_as_a_number(student_logits, teacher_logits, labels=None, alpha=0.5, temperature=2.0):
    T = temperature
    p = F.softmax(teacher_logits.detach() / T, dim=-1)
    soft = F.kl_div(F.log_softmax(student_logits / T, dim=-1), p, reduction="batchmean") * T**2
    loss = soft if labels is None else alpha * F.cross_entropy(student_logits, labels) + (1 - alpha) * soft
    return torch.tensor(loss.item())  # the right value, but no gradient reaches the student


def loss_student_detached(student_logits, teacher_logits, labels=None, alpha=0.5, temperature=2.0):
    student_logits, teacher_logits = student_logits.detach().requires_grad_(), teacher_logits.detach()
    T = temperature
    soft = F.kl_div(F.log_softmax(student_logits / T, -1), F.softmax(teacher_logits / T, -1),
                    reduction="batchmean") * T**2
    return soft if labels is None else alpha * F.cross_entropy(student_logits, labels) + (1 - alpha) * soft


# --------------------------------------------------------------------------------------------------
# init_student_from_teacher: typical wrong implementations
# --------------------------------------------------------------------------------------------------


def keep_layers(teacher, layer_ids, *, share=False):
    """A deep copy of the teacher (or the teacher itself with share=True) with the chosen layers."""
    student = teacher if share else copy.deepcopy(teacher)
    layers = encoder_layers(student)
    bert_backbone(student).encoder.layers = nn.ModuleList([layers[i] for i in layer_ids])
    config = dataclasses.replace(bert_backbone(student).config, num_hidden_layers=len(layer_ids))
    student.config = config
    bert_backbone(student).config = config
    return student


def student_first_half(teacher, layer_ids=None):
    num_layers = len(encoder_layers(teacher))
    return keep_layers(teacher, list(range(num_layers // 2)) if layer_ids is None else layer_ids)


def student_odd_layers(teacher, layer_ids=None):
    num_layers = len(encoder_layers(teacher))
    return keep_layers(teacher, list(range(1, num_layers, 2)) if layer_ids is None else layer_ids)


def student_floor_half(teacher, layer_ids=None):
    num_layers = len(encoder_layers(teacher))
    return keep_layers(teacher, [2 * i for i in range(num_layers // 2)] if layer_ids is None else layer_ids)


def student_ignoring_layer_ids(teacher, layer_ids=None):
    return keep_layers(teacher, list(range(0, len(encoder_layers(teacher)), 2)))


def student_sharing_the_layers(teacher, layer_ids=None):
    """Builds a new, smaller model but puts the teacher's own modules into it."""
    backbone = bert_backbone(teacher)
    layer_ids = list(range(0, len(backbone.encoder.layers), 2)) if layer_ids is None else list(layer_ids)
    config = dataclasses.replace(backbone.config, num_hidden_layers=len(layer_ids))
    student = (type(teacher)(config, num_labels=teacher.num_labels) if hasattr(teacher, "bert")
               else type(teacher)(config))
    student.load_state_dict(teacher.state_dict(), strict=False)  # embeddings, pooler, classifier (copied)
    bert_backbone(student).encoder.layers = nn.ModuleList([backbone.encoder.layers[i] for i in layer_ids])  # shared!
    return student


def student_sharing_the_embeddings(teacher, layer_ids=None):
    layer_ids = list(range(0, len(encoder_layers(teacher)), 2)) if layer_ids is None else list(layer_ids)
    student = keep_layers(teacher, layer_ids)
    bert_backbone(student).embeddings = bert_backbone(teacher).embeddings
    return student


def student_pruning_the_teacher(teacher, layer_ids=None):
    layer_ids = list(range(0, len(encoder_layers(teacher)), 2)) if layer_ids is None else list(layer_ids)
    return keep_layers(teacher, layer_ids, share=True)


def student_from_a_shallow_copy(teacher, layer_ids=None):
    layer_ids = list(range(0, len(encoder_layers(teacher)), 2)) if layer_ids is None else list(layer_ids)
    student = copy.copy(teacher)  # the submodules are the teacher's own
    bert_backbone(student).encoder.layers = nn.ModuleList(
        [copy.deepcopy(encoder_layers(teacher)[i]) for i in layer_ids])
    return student


def student_with_new_embeddings(teacher, layer_ids=None):
    """A new model of the smaller size that gets only the layers' weights."""
    backbone = bert_backbone(teacher)
    layer_ids = list(range(0, len(backbone.encoder.layers), 2)) if layer_ids is None else list(layer_ids)
    config = dataclasses.replace(backbone.config, num_hidden_layers=len(layer_ids))
    student = (type(teacher)(config, num_labels=teacher.num_labels) if hasattr(teacher, "bert")
               else type(teacher)(config))
    for new, old in zip(bert_backbone(student).encoder.layers, layer_ids):
        new.load_state_dict(backbone.encoder.layers[old].state_dict())
    return student


def student_with_the_old_config(teacher, layer_ids=None):
    layer_ids = list(range(0, len(encoder_layers(teacher)), 2)) if layer_ids is None else list(layer_ids)
    student = copy.deepcopy(teacher)
    bert_backbone(student).encoder.layers = nn.ModuleList([encoder_layers(student)[i] for i in layer_ids])
    return student


def student_config_of_the_wrapper_only(teacher, layer_ids=None):
    layer_ids = list(range(0, len(encoder_layers(teacher)), 2)) if layer_ids is None else list(layer_ids)
    student = copy.deepcopy(teacher)
    bert_backbone(student).encoder.layers = nn.ModuleList([encoder_layers(student)[i] for i in layer_ids])
    student.config = dataclasses.replace(student.config, num_hidden_layers=len(layer_ids))  # .bert.config is stale
    return student


def student_returning_the_state_dict(teacher, layer_ids=None):
    return keep_layers(teacher, list(range(0, len(encoder_layers(teacher)), 2))).state_dict()


MUTANTS = {
    "softmax_with_temperature": [
        (tempered_multiplied, "do not multiply them"),
        (tempered_after_the_softmax, "before the softmax"),
        (tempered_power, "does not sum to 1"),
        (tempered_naive_exp, "exp(z / T) overflows"),
        (tempered_over_the_batch, "the classes are the last dimension"),
        (tempered_log_probabilities, "not log-probabilities"),
    ],
    "distillation_loss": [
        (loss_kl_student_first, "the KL divergence goes the other way"),
        (loss_probabilities_into_kl_div, "expects input to be LOG-probabilities"),
        (loss_without_t_squared, "multiply the soft term by T^2: its gradients shrink"),
        (loss_temperature_on_the_student_only, "divide the teacher's logits by T too"),
        (loss_default_reduction, "use reduction='batchmean'"),
        (loss_alpha_swapped, "alpha weighs the hard term"),
        (loss_alpha_without_labels, "with labels=None there is no hard term"),
        (loss_soft_cross_entropy, "not the cross-entropy with the soft targets"),
        (loss_hard_term_at_temperature, "at temperature 1"),
        (loss_log_of_softmax, "compute the log-probabilities with log_softmax"),
        (loss_teacher_softened_only, "divide the student's logits by T too"),
        (loss_teacher_not_detached, "detach the teacher's logits"),
        (loss_as_a_number, "must stay a differentiable function of the student's logits"),
        (loss_student_detached, "the value of your loss is right but not its gradient"),
    ],
    "init_student_from_teacher": [
        (student_first_half, "not the first half of the layers"),
        (student_odd_layers, "not 1, 3, 5"),
        (student_floor_half, "with an odd number of layers"),
        (student_ignoring_layer_ids, "use the layer_ids argument"),
        (student_sharing_the_layers, "they share tensors"),
        (student_sharing_the_embeddings, "they share tensors"),
        (student_pruning_the_teacher, "do not modify the teacher"),
        (student_from_a_shallow_copy, "do not modify the teacher"),
        (student_with_new_embeddings, "copy the embeddings of the teacher too"),
        (student_with_the_old_config, "set config.num_hidden_layers"),
        (student_config_of_the_wrapper_only, "bert.config.num_hidden_layers is 6"),
        (student_returning_the_state_dict, "return the student model"),
    ],
}


# Correct implementations written differently from the solution: the checks must accept them.
def softmax_by_hand(logits, temperature=1.0):
    scaled = logits / temperature
    e = torch.exp(scaled - scaled.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


def loss_by_hand(student_logits, teacher_logits, labels=None, alpha=0.5, temperature=2.0):
    """Explicit sums, and a softmax_with_temperature of this module's (replaced by the reference)."""
    T = temperature
    p = softmax_with_temperature(teacher_logits.detach(), T)
    log_q = F.log_softmax(student_logits / T, dim=-1)
    soft = T**2 * (p * (F.log_softmax(teacher_logits.detach() / T, dim=-1) - log_q)).sum(dim=-1).mean()
    if labels is None:
        return soft
    log_probabilities = F.log_softmax(student_logits, dim=-1)
    hard = -log_probabilities.gather(-1, labels[:, None]).squeeze(-1).mean()
    return alpha * hard + (1 - alpha) * soft


def softmax_with_temperature(logits, temperature=1.0):
    raise AssertionError("dependency isolation failed: the check should use the reference softmax_with_temperature")


def student_by_rebuilding(teacher, layer_ids=None):
    """A new model of the teacher's class, loaded with a renamed copy of the teacher's weights."""
    backbone = bert_backbone(teacher)
    num_layers = len(backbone.encoder.layers)
    layer_ids = list(range(0, num_layers, 2)) if layer_ids is None else list(layer_ids)
    config = dataclasses.replace(backbone.config, num_hidden_layers=len(layer_ids))
    student = (type(teacher)(config, num_labels=teacher.num_labels) if hasattr(teacher, "bert")
               else type(teacher)(config))
    prefix = "bert.encoder.layers." if hasattr(teacher, "bert") else "encoder.layers."
    state = {}
    for name, tensor in teacher.state_dict().items():
        if name.startswith(prefix):
            index, rest = name[len(prefix):].split(".", 1)
            if int(index) not in layer_ids:
                continue
            name = f"{prefix}{layer_ids.index(int(index))}.{rest}"
        state[name] = tensor.clone()
    student.load_state_dict(state)
    return student.eval()


ALTERNATIVES = {
    "softmax_with_temperature": [softmax_by_hand,
                                 lambda logits, temperature=1.0: F.softmax(logits.div(temperature),
                                                                           dim=logits.dim() - 1)],
    "distillation_loss": [loss_by_hand],
    "init_student_from_teacher": [student_by_rebuilding],
}


def test_failure_message_says_which_layers_the_student_kept():
    with pytest.raises(CheckFailed) as failure:
        checks.check_init_student_from_teacher(student_first_half)
    message = str(failure.value)
    assert "test case 1 of 7 (a BertForSequenceClassification teacher with 6 layers" in message
    assert "copies of the teacher's layers [0, 1, 2]; expected 3: the teacher's layers [0, 2, 4]" in message


def test_loss_failure_shows_the_inputs_and_the_difference():
    with pytest.raises(CheckFailed) as failure:
        checks.check_distillation_loss(loss_without_t_squared)
    message = str(failure.value)
    assert "test case 1 of 10 (logits (8, 3), labels (8,)" in message
    assert re.search(r"you returned [\d.]+, expected [\d.]+ \(tolerance atol=2e-05, rtol=0.0002\)", message)
    assert "Inputs:" in message and "labels = tensor([" in message


# --------------------------------------------------------------------------------------------------
# "Implement this yourself"
# --------------------------------------------------------------------------------------------------


def loss_with_captured_reference(student_logits, teacher_logits, labels=None, alpha=0.5, temperature=2.0):
    return captured_distillation_loss(student_logits, teacher_logits, labels, alpha, temperature)


def loss_hiding_the_reference(student_logits, teacher_logits, labels=None, alpha=0.5, temperature=2.0):
    try:
        return bertlab.distillation.distillation_loss(student_logits, teacher_logits, labels, alpha, temperature)
    except Exception:  # the check's exception is swallowed, but the call was recorded
        return torch.tensor(0.0)


def student_with_captured_reference(teacher, layer_ids=None):
    return captured_init_student(teacher, layer_ids)


def student_through_the_module(teacher, layer_ids=None):
    from bertlab import distillation

    return distillation.init_student_from_teacher(teacher, layer_ids)


class TestDistillationChecks(MutationTests):
    """The shared mutation tests (tests/checks_helpers.py) of this chapter's checks."""

    checks = checks
    references = REFERENCES
    mutants = MUTANTS
    alternatives = ALTERNATIVES
    reference_calls = {"softmax_with_temperature": None}
    failure_context = r"(the gradient )?test case"  # the gradient case is told apart from the numbered ones
    cheats = [
        ("distillation_loss", loss_with_captured_reference, "bertlab.distillation.distillation_loss"),
        ("distillation_loss", loss_hiding_the_reference, "bertlab.distillation.distillation_loss"),
        ("init_student_from_teacher", student_with_captured_reference,
         "bertlab.distillation.init_student_from_teacher"),
        ("init_student_from_teacher", student_through_the_module, "bertlab.distillation.init_student_from_teacher"),
    ]


def test_pytorch_built_ins_are_allowed_in_the_loss():
    """F.kl_div, F.log_softmax and F.cross_entropy do parts of the job: the exercise is the formula."""

    def with_kl_div_module(student_logits, teacher_logits, labels=None, alpha=0.5, temperature=2.0):
        kl = nn.KLDivLoss(reduction="batchmean", log_target=True)
        soft = kl(F.log_softmax(student_logits / temperature, -1),
                  F.log_softmax(teacher_logits.detach() / temperature, -1))
        soft = soft * temperature**2
        return soft if labels is None else alpha * nn.CrossEntropyLoss()(student_logits, labels) + (1 - alpha) * soft

    checks.check_distillation_loss(with_kl_div_module)


# --------------------------------------------------------------------------------------------------
# Through the grader: the student's functions and models live in a sandboxed process
# --------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_checks_grade_functions_and_models_in_the_student_process():
    from autograder.run.sandbox import Limits

    cells = dict(solution_cells(SOLUTION))
    sharing = '''
import dataclasses
from torch import nn

def init_student_from_teacher(teacher, layer_ids=None):
    bert = teacher.bert if hasattr(teacher, "bert") else teacher
    layer_ids = list(range(0, len(bert.encoder.layers), 2)) if layer_ids is None else list(layer_ids)
    config = dataclasses.replace(bert.config, num_hidden_layers=len(layer_ids))
    student = (type(teacher)(config, num_labels=teacher.num_labels) if hasattr(teacher, "bert")
               else type(teacher)(config))
    student.load_state_dict(teacher.state_dict(), strict=False)
    student_bert = student.bert if hasattr(student, "bert") else student
    student_bert.encoder.layers = nn.ModuleList([bert.encoder.layers[i] for i in layer_ids])  # the teacher's own
    return student
'''
    no_t_squared = cells["distillation_loss"].replace("T**2 * ", "")
    not_detached = cells["distillation_loss"].replace("teacher_logits.detach()", "teacher_logits")
    value_only = cells["distillation_loss"].replace("    return soft", "    return torch.tensor(soft.item())")
    total = "alpha * F.cross_entropy(student_logits, labels) + (1 - alpha) * soft"
    value_only = value_only.replace(f"    return {total}", f"    return torch.tensor(float({total}))")
    assert no_t_squared != cells["distillation_loss"] != not_detached and value_only.count("torch.tensor(") == 2
    tests = {name: f"from autograder.checks.distillation import check_{name}\nprint(check_{name}({name}))"
             for name in EXERCISES}
    setup = ("import copy, dataclasses\nimport torch\nimport torch.nn.functional as F\nfrom torch import nn\n"
             "from bertlab.finetuning import bert_backbone, encoder_layers")  # as the notebook's setup cell
    steps = [("code", setup)]
    steps += [("code", cells[name]) for name in EXERCISES]
    steps += [("test", f"right_{name}") for name in EXERCISES]
    steps += [("code", no_t_squared), ("test", "wrong_loss"), ("code", sharing), ("test", "wrong_student")]
    steps += [("code", not_detached), ("test", "not_detached"), ("code", value_only), ("test", "value_only")]
    sources = {f"right_{name}": tests[name] for name in EXERCISES}
    sources.update(wrong_loss=tests["distillation_loss"], wrong_student=tests["init_student_from_teacher"],
                   not_detached=tests["distillation_loss"], value_only=tests["distillation_loss"])
    limits = Limits(cell_timeout=120, notebook_timeout=400)
    outcomes = run_in_grader(steps, sources, EXERCISES, limits)
    for name in EXERCISES:
        outcome = outcomes[f"right_{name}"]
        assert outcome.status == "passed", outcome
        assert f"{name}: all" in outcome.output
    assert outcomes["wrong_loss"].status == "failed", outcomes["wrong_loss"]
    assert "multiply the soft term by T^2" in outcomes["wrong_loss"].message
    assert "and so does the gradient" in outcomes["right_distillation_loss"].output  # backward() ran there
    assert outcomes["not_detached"].status == "failed", outcomes["not_detached"]
    assert "detach the teacher's logits" in outcomes["not_detached"].message
    assert outcomes["value_only"].status == "failed", outcomes["value_only"]
    assert "loss.backward() on your loss raised" in outcomes["value_only"].message
    assert outcomes["wrong_student"].status == "failed", outcomes["wrong_student"]
    assert "they share tensors" in outcomes["wrong_student"].message
