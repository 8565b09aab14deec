"""Checks of chapter 09 (knowledge distillation), called by the hidden tests of ``chapters/09_distillation``.

Three exercises, graded against the reference package:

- ``softmax_with_temperature(logits, temperature=1.0)``: the soft targets softmax(z / T) over the last
  dimension, against :func:`bertlab.attention.softmax` of ``logits / temperature``;
- ``distillation_loss(student_logits, teacher_logits, labels=None, alpha=0.5, temperature=2.0)``
  against :func:`bertlab.distillation.distillation_loss`;
- ``init_student_from_teacher(teacher, layer_ids=None)`` against
  :func:`bertlab.distillation.init_student_from_teacher`: the check builds small teachers, calls the
  student's function, and inspects only what a model shows from the outside (its ``state_dict()``,
  its ``config``, its output, and whether changing its weights changes its teacher's), so that it
  grades the same way when the student's model lives in the grader's sandboxed process.

Each ``check_<name>`` draws its cases from a generator seeded by the exercise's name, names the
typical mistakes it recognises, and forbids the reference. ``forbid=False`` lifts that rule (the tests
use it to run a check on the reference).
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from autograder.checks.framework import (
    Case,
    CheckFailed,
    DEFAULT_TOLERANCES,
    Exercise,
    Mistake,
    Symptom,
    Tolerance,
    call_and_backward,
    check_functions,
    describe_difference,
    fail,
    failure_message,
    forbidden_calls,
    generator_for,
    normalized_along_another_axis,
    random_normal,
    run_student,
)
from bertlab import attention as attention_reference
from bertlab import distillation as reference
from bertlab.bert import BertConfig, BertForSequenceClassification, BertModel


def _labels(generator: torch.Generator, batch: int, num_classes: int) -> torch.Tensor:
    return torch.randint(0, num_classes, (batch,), generator=generator)


# --------------------------------------------------------------------------------------------------
# softmax_with_temperature
# --------------------------------------------------------------------------------------------------


def reference_softmax_with_temperature(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """softmax(z / T) over the last dimension, with the course's softmax (:func:`bertlab.attention.softmax`)."""
    return attention_reference.softmax(logits / temperature, dim=-1)


def softmax_with_temperature_cases() -> list[Case]:
    g = generator_for("softmax_with_temperature")
    return [
        Case("logits of shape (5,), temperature not given (T = 1)", (random_normal(g, 5, scale=2.0),)),
        Case("logits (4, 3), temperature=2.0", (random_normal(g, 4, 3, scale=2.0),), {"temperature": 2.0}),
        Case("logits (3, 6), temperature=5.0, passed by position", (random_normal(g, 3, 6, scale=3.0), 5.0)),
        Case("logits (2, 3, 4), temperature=0.5 (T < 1 sharpens)",
             (random_normal(g, 2, 3, 4, scale=2.0),), {"temperature": 0.5}),
        Case("logits (3, 10), temperature=100.0 (almost uniform)",
             (random_normal(g, 3, 10, scale=3.0),), {"temperature": 100.0}),
        Case("logits (1, 2), float64, temperature=3.0", (random_normal(g, 1, 2, scale=2.0, dtype=torch.float64),),
             {"temperature": 3.0}),
        Case("logits (4, 5) of size about 20, temperature=0.1 (z / T of about 200: exp overflows)",
             (random_normal(g, 4, 5, scale=20.0),), {"temperature": 0.1}),
        Case("logits (2, 7), bfloat16, temperature=2.0", (random_normal(g, 2, 7, scale=2.0, dtype=torch.bfloat16),),
             {"temperature": 2.0}),
    ]


def _tempered_multiplied(logits, temperature=1.0):
    return reference_softmax_with_temperature(logits * temperature)


def _tempered_after_softmax(logits, temperature=1.0):
    return reference_softmax_with_temperature(logits) / temperature


def _tempered_power_unnormalized(logits, temperature=1.0):
    return reference_softmax_with_temperature(logits) ** (1 / temperature)


def _tempered_first_axis(logits, temperature=1.0):
    return attention_reference.softmax(logits / temperature, dim=0)


def _tempered_log_probabilities(logits, temperature=1.0):
    return torch.log_softmax((logits / temperature).float(), dim=-1).to(logits.dtype)


def _tempered_without_max(logits, temperature=1.0):
    exponentials = torch.exp(logits / temperature)
    return exponentials / exponentials.sum(dim=-1, keepdim=True)


def _tempered_whole_tensor(logits, temperature=1.0):
    exponentials = torch.exp(logits / temperature - (logits / temperature).max())
    return exponentials / exponentials.sum()


SOFTMAX_WITH_TEMPERATURE_MISTAKES = (
    Mistake(_tempered_multiplied, "divide the logits by the temperature, softmax(z / T), do not multiply them: a "
                                  "temperature above 1 must make the distribution softer (flatter), not sharper."),
    Mistake(_tempered_after_softmax, "apply the temperature to the logits, before the softmax: softmax(z / T). "
                                     "Dividing the probabilities by T afterwards makes them sum to 1 / T."),
    Mistake(_tempered_power_unnormalized, "p ** (1 / T) has the right shape of softmax(z / T) but does not sum to "
                                          "1: normalise it, or simply compute softmax(z / T)."),
    Mistake(_tempered_first_axis, "the classes are the last dimension: normalise along dim=-1, so that every row "
                                  "of probabilities sums to 1."),
    Symptom(lambda probabilities, case: normalized_along_another_axis(probabilities, -1),
            "your probabilities sum to 1 along another axis than the classes: take the maximum and the sum "
            "over the last dimension (dim=-1, keepdim=True), so that every row sums to 1."),
    Mistake(_tempered_log_probabilities, "return probabilities (softmax), not log-probabilities (log_softmax)."),
    Mistake(_tempered_without_max, "exp(z / T) overflows to inf when z / T is large (a small temperature), and "
                                   "inf / inf is NaN: subtract the maximum of each row first (or use torch.softmax)."),
    Mistake(_tempered_whole_tensor, "normalise each row (each example) separately: divide by the sum over the last "
                                    "dimension (keepdim=True), not by the sum of the whole tensor."),
)


SOFTMAX_WITH_TEMPERATURE = Exercise("softmax_with_temperature", reference_softmax_with_temperature,
                                    softmax_with_temperature_cases, mistakes=SOFTMAX_WITH_TEMPERATURE_MISTAKES,
                                    summary="""
                                    Compare ``softmax_with_temperature(logits, temperature=1.0)`` with softmax(logits /
                                    T, dim=-1) computed by :func:`bertlab.attention.softmax`.

                                    Cases: 1 to 3 dimensions; T = 1 (default), 0.1, 0.5, 2, 3, 5, 100; float32, float64,
                                    bfloat16; z / T of about 200 (a naive exp overflows). Tolerance: the framework's
                                    defaults. Forbidden: nothing (PyTorch's softmax is allowed: the exercise is the
                                    temperature); ``forbid`` is accepted for a uniform interface.
                                    """)


# --------------------------------------------------------------------------------------------------
# distillation_loss
# --------------------------------------------------------------------------------------------------

DISTILLATION_LOSS_FORBIDDEN = (reference.distillation_loss,)

#: The loss sums a KL divergence over classes and averages over examples in float32: its value may
#: differ from the reference's in the last bits of float32 (a few 1e-7 relative, more for T = 20).
DISTILLATION_LOSS_TOLERANCES = {**DEFAULT_TOLERANCES, torch.float32: Tolerance(atol=2e-5, rtol=2e-4)}


def distillation_loss_cases() -> list[Case]:
    g = generator_for("distillation_loss")

    def logits(batch, classes, scale=2.0):
        return random_normal(g, batch, classes, scale=scale), random_normal(g, batch, classes, scale=scale)

    cases = []
    student, teacher = logits(8, 3)
    cases.append(Case("logits (8, 3), labels (8,), alpha and temperature not given (0.5 and 2.0)",
                      (student, teacher, _labels(g, 8, 3))))
    student, teacher = logits(6, 5)
    cases.append(Case("logits (6, 5), labels (6,), alpha=0.3, temperature=4.0",
                      (student, teacher, _labels(g, 6, 5)), {"alpha": 0.3, "temperature": 4.0}))
    student, teacher = logits(5, 4)
    cases.append(Case("logits (5, 4), labels=None (soft term only), temperature=3.0, alpha=0.5 (ignored)",
                      (student, teacher), {"labels": None, "temperature": 3.0}))
    student, teacher = logits(4, 10)
    cases.append(Case("logits (4, 10), labels=None, alpha=0.9 (ignored), temperature=1.0",
                      (student, teacher, None), {"alpha": 0.9, "temperature": 1.0}))
    student, teacher = logits(7, 4)
    cases.append(Case("logits (7, 4), labels (7,), alpha=0.0 (soft term only), temperature=3.0",
                      (student, teacher, _labels(g, 7, 4)), {"alpha": 0.0, "temperature": 3.0}))
    student, teacher = logits(7, 4)
    cases.append(Case("logits (7, 4), labels (7,), alpha=1.0 (hard term only), temperature=3.0",
                      (student, teacher, _labels(g, 7, 4)), {"alpha": 1.0, "temperature": 3.0}))
    student, teacher = logits(1, 3)
    cases.append(Case("logits (1, 3): one example, labels (1,), alpha=0.25, temperature=0.5, by position",
                      (student, teacher, _labels(g, 1, 3), 0.25, 0.5)))
    student, teacher = logits(16, 2, scale=4.0)
    cases.append(Case("logits (16, 2), labels (16,), alpha=0.1, temperature=20.0",
                      (student, teacher, _labels(g, 16, 2)), {"alpha": 0.1, "temperature": 20.0}))
    same = random_normal(g, 6, 4, scale=3.0)
    cases.append(Case("logits (6, 4) with student_logits equal to teacher_logits, labels=None: the loss is 0",
                      (same, same.clone()), {"temperature": 2.0}))
    student, teacher = logits(5, 3, scale=100.0)
    cases.append(Case("logits (5, 3) of size about 100 (a confident teacher), labels (5,), alpha=0.5, temperature=1.0",
                      (student, teacher, _labels(g, 5, 3)), {"alpha": 0.5, "temperature": 1.0}))
    return cases


def _kl(student_log_probabilities, teacher_probabilities, reduction="batchmean"):
    return F.kl_div(student_log_probabilities, teacher_probabilities, reduction=reduction)


def _loss_variant(*, direction="teacher_first", t_power=2, scaled="both", reduction="batchmean",
                  swap_alpha=False, hard_temperature=False, alpha_without_labels=False, soft="kl",
                  log_of_softmax=False, student_axis=-1):
    """A wrong distillation loss: one of the typical mistakes, chosen by the arguments."""

    def loss(student_logits, teacher_logits, labels=None, alpha=0.5, temperature=2.0):
        student, teacher = student_logits.float(), teacher_logits.detach().float()
        student_scaled = student / temperature if scaled in ("both", "student") else student
        teacher_scaled = teacher / temperature if scaled in ("both", "teacher") else teacher
        if log_of_softmax:
            log_q = torch.log(torch.softmax(student_scaled, dim=-1))
            p = torch.softmax(teacher_scaled, dim=-1)
            soft_term = (p * (torch.log(p) - log_q)).sum(-1).mean()
        elif soft == "cross_entropy":  # CE with soft targets: KL plus the teacher's entropy
            soft_term = -(torch.softmax(teacher_scaled, -1) * torch.log_softmax(student_scaled, -1)).sum(-1).mean()
        elif soft == "probabilities_as_input":  # F.kl_div(softmax(s), softmax(t)): input must be log-probabilities
            soft_term = _kl(torch.softmax(student_scaled, -1), torch.softmax(teacher_scaled, -1), reduction)
        elif direction == "teacher_first":
            soft_term = _kl(torch.log_softmax(student_scaled, student_axis), torch.softmax(teacher_scaled, -1),
                            reduction)
        else:  # KL(student || teacher)
            soft_term = _kl(torch.log_softmax(teacher_scaled, -1), torch.softmax(student_scaled, -1), reduction)
        soft_term = soft_term * temperature**t_power
        if labels is None:
            return (1 - alpha) * soft_term if alpha_without_labels else soft_term
        hard_term = F.cross_entropy(student / temperature if hard_temperature else student, labels)
        if swap_alpha:
            return (1 - alpha) * hard_term + alpha * soft_term
        return alpha * hard_term + (1 - alpha) * soft_term

    return loss


DISTILLATION_LOSS_MISTAKES = (
    Mistake(_loss_variant(direction="student_first"),
            "the KL divergence goes the other way: KL(p_teacher || q_student) = sum p log(p / q), with the "
            "teacher's probabilities as the weights. F.kl_div(input, target) computes KL(target || input): pass "
            "the student's log-probabilities as input and the teacher's probabilities as target."),
    Mistake(_loss_variant(soft="probabilities_as_input"),
            "F.kl_div(input, target) expects input to be LOG-probabilities (log_softmax of the student's scaled "
            "logits), and target probabilities (softmax of the teacher's scaled logits)."),
    Mistake(_loss_variant(student_axis=0),
            "take the student's log-probabilities over the classes, the last dimension of (B, C): "
            "log_softmax(student_logits / T, dim=-1), as the teacher's probabilities; yours are over the batch."),
    Mistake(_loss_variant(t_power=0),
            "multiply the soft term by T^2: its gradients shrink as 1 / T^2, and the factor T^2 keeps their size "
            "(and the balance with the hard term) whatever the temperature."),
    Mistake(_loss_variant(scaled="student"),
            "divide the teacher's logits by T too, not only the student's: both distributions must be softened "
            "by the same temperature."),
    Mistake(_loss_variant(scaled="teacher"),
            "divide the student's logits by T too, not only the teacher's: both distributions must be softened "
            "by the same temperature."),
    Mistake(_loss_variant(reduction="mean"),
            "reduction='mean' divides by the number of entries B * C; the KL divergence is a sum over the "
            "classes, averaged over the examples: use reduction='batchmean' (divide the sum by B)."),
    Mistake(_loss_variant(t_power=1), "multiply the soft term by T^2 (temperature ** 2), not by T."),
    Mistake(_loss_variant(reduction="sum"),
            "average the KL divergence over the examples (reduction='batchmean', the sum divided by B), not "
            "summed over the batch."),
    Mistake(_loss_variant(swap_alpha=True),
            "alpha weighs the hard term (the cross-entropy with the labels) and 1 - alpha the soft term: "
            "alpha * CE + (1 - alpha) * T^2 * KL."),
    Mistake(_loss_variant(hard_temperature=True),
            "the hard term is the ordinary cross-entropy of the student's logits with the labels, at "
            "temperature 1: do not divide the logits by T there."),
    Mistake(_loss_variant(alpha_without_labels=True),
            "with labels=None there is no hard term and the loss is the soft term alone, T^2 * KL, whatever "
            "alpha (do not multiply it by 1 - alpha)."),
    Mistake(_loss_variant(soft="cross_entropy"),
            "use the KL divergence, not the cross-entropy with the soft targets: the two differ by the "
            "teacher's entropy, a constant with the same gradient, but the loss must be 0 when the student's "
            "logits equal the teacher's."),
    Mistake(_loss_variant(log_of_softmax=True),
            "log(softmax(x)) gives log(0) = -inf when a probability underflows (confident logits): compute the "
            "log-probabilities with log_softmax, which is exact there."),
)


def distillation_loss_gradient_case() -> Case:
    g = generator_for("distillation_loss gradients")
    return Case("logits (4, 3) with requires_grad=True, labels (4,), alpha=0.5, temperature=2.0, then loss.backward()",
                (random_normal(g, 4, 3, scale=2.0), random_normal(g, 4, 3, scale=2.0), _labels(g, 4, 3)),
                {"alpha": 0.5, "temperature": 2.0})


#: The gradient with respect to the student's logits, (q - p) / T per example, of size about 0.1 / B.
DISTILLATION_GRADIENT_TOLERANCE = Tolerance(atol=1e-6, rtol=1e-4)


def _loss_and_gradients(loss_fn, case: Case, forbidden=()
                        ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Call ``loss_fn`` with grad enabled on logits that require grad, then ``backward()``: (loss, the
    gradient of the student's logits, the gradient of the teacher's logits), a gradient None where none came."""
    args, kwargs = case.fresh_arguments()
    student_logits, teacher_logits = args[0].requires_grad_(), args[1].requires_grad_()
    with forbidden_calls(forbidden):
        loss = call_and_backward(loss_fn, *args, **kwargs)
    return loss, student_logits.grad, teacher_logits.grad


def _check_loss_gradients(exercise: Exercise, student_fn, forbidden) -> str:
    """The test after the cases: the loss must be differentiable with respect to the student's logits,
    with the reference's gradient, and not with respect to the teacher's (detached). Where the student's
    function runs in the grader's sandboxed process, :func:`call_and_backward` runs the backward pass there.
    """
    case = distillation_loss_gradient_case()
    context = f"the gradient test case ({case.description})"
    check = exercise.name
    try:
        _, student_gradient, teacher_gradient = _loss_and_gradients(student_fn, case, forbidden)
    except (NotImplementedError, CheckFailed):
        raise
    except Exception as error:
        raise CheckFailed(failure_message(
            check, context, f"loss.backward() on your loss raised {type(error).__name__}: {error}",
            "the loss must stay a differentiable function of the student's logits (the student learns from its "
            "gradient): compute it with tensor operations, without .item(), .detach() of the student's logits, "
            "torch.tensor(...) of a value, or torch.no_grad().")) from error
    if teacher_gradient is not None and bool((teacher_gradient != 0).any()):
        raise CheckFailed(failure_message(
            check, context, "the gradient of your loss reaches the teacher's logits (teacher_logits.grad is not zero).",
            "detach the teacher's logits (teacher_logits.detach()): they are constants of the loss, and backward() "
            "must not send gradients into the teacher."))
    _, expected, _ = _loss_and_gradients(reference.distillation_loss, case)
    difference = describe_difference(student_gradient, expected, DISTILLATION_GRADIENT_TOLERANCE,
                                     "the gradient of your loss with respect to student_logits")
    if difference is not None:
        raise CheckFailed(failure_message(
            check, context, difference,
            "the value of your loss is right but not its gradient: compute it from student_logits with tensor "
            "operations only (no detached or copied intermediate values)."))
    return ", and so does the gradient"


DISTILLATION_LOSS = Exercise("distillation_loss", reference.distillation_loss, distillation_loss_cases,
                             mistakes=DISTILLATION_LOSS_MISTAKES, forbidden=DISTILLATION_LOSS_FORBIDDEN,
                             dependencies={"softmax_with_temperature": reference_softmax_with_temperature},
                             tolerance=DISTILLATION_LOSS_TOLERANCES, then=(_check_loss_gradients,),
                             summary="""
                             Compare ``distillation_loss(student_logits, teacher_logits, labels=None, alpha=0.5,
                             temperature=2.0)`` with :func:`bertlab.distillation.distillation_loss`.

                             Cases: logits (B, C) with B = 1 to 16 and C = 2 to 10 in float32; labels or None (alpha
                             then ignored); alpha 0, 0.1, 0.25, 0.3, 0.5, 0.9, 1; T = 0.5, 1, 2, 3, 4, 20; student equal
                             to teacher (loss 0); confident logits of about 100; the options by keyword and by position.
                             Tolerance: float32 atol 2e-5, rtol 2e-4. Then one gradient test: ``loss.backward()`` must
                             give the reference's gradient with respect to the student's logits (atol 1e-6, rtol 1e-4)
                             and none with respect to the teacher's (detached). Forbidden: the reference (``F.kl_div``,
                             ``F.log_softmax`` and ``F.cross_entropy`` are allowed). The student's
                             ``softmax_with_temperature``, if it calls it, is replaced by the reference.
                             """)


# --------------------------------------------------------------------------------------------------
# init_student_from_teacher
# --------------------------------------------------------------------------------------------------

INIT_STUDENT_FORBIDDEN = (reference.init_student_from_teacher,)
CHECK = "init_student_from_teacher"
VOCAB_SIZE = 40


def _teacher(kind: str, num_layers: int, generator: torch.Generator):
    """A small teacher whose every weight is distinct random numbers (LayerNorms included), so that
    each layer and each part can be recognised by its weights."""
    config = BertConfig(vocab_size=VOCAB_SIZE, hidden_size=16, num_hidden_layers=num_layers, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    model = BertForSequenceClassification(config, num_labels=3) if kind == "classifier" else BertModel(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(random_normal(generator, *parameter.shape, scale=0.5))
    return model.eval()


@dataclass(frozen=True)
class StudentCase:
    """A teacher, the keyword arguments of the call, the teacher layers the student keeps (in order), and
    a padded batch on which the student's output must be the reference student's."""

    description: str
    teacher: nn.Module
    kwargs: dict
    kept_layers: list[int]
    batch: dict[str, torch.Tensor]


def _batch(generator: torch.Generator) -> dict[str, torch.Tensor]:
    """input_ids (3, 9) and an attention_mask of sequences of 9, 6 and 2 tokens."""
    input_ids = torch.randint(0, VOCAB_SIZE, (3, 9), generator=generator)
    attention_mask = (torch.arange(9) < torch.tensor([[9], [6], [2]])).long()
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def init_student_from_teacher_cases() -> list[StudentCase]:
    """Teachers with and without a classifier, of an even and an odd number of layers, layer_ids left out
    (every other layer), given as a list and as a tuple, one layer, every layer; their weights and the
    batches are drawn."""
    g = generator_for(CHECK)
    classifier = "a BertForSequenceClassification teacher"

    def case(description, kind, num_layers, kwargs, kept_layers):
        return StudentCase(description, _teacher(kind, num_layers, g), kwargs, kept_layers, _batch(g))

    return [
        case(f"{classifier} with 6 layers, layer_ids not given (every other layer)", "classifier", 6, {}, [0, 2, 4]),
        case("a BertModel teacher (no classifier) with 4 layers, layer_ids not given", "bare", 4, {}, [0, 2]),
        case(f"{classifier} with 6 layers, layer_ids=[1, 3, 5]", "classifier", 6, {"layer_ids": [1, 3, 5]}, [1, 3, 5]),
        case(f"{classifier} with 5 layers (an odd number), layer_ids not given", "classifier", 5, {}, [0, 2, 4]),
        case(f"{classifier} with 6 layers, layer_ids=(0, 5), a tuple", "classifier", 6, {"layer_ids": (0, 5)}, [0, 5]),
        case("a BertModel teacher with 4 layers, layer_ids=[2]: a one-layer student", "bare", 4, {"layer_ids": [2]},
             [2]),
        case(f"{classifier} with 4 layers, layer_ids=[0, 1, 2, 3]: every layer", "classifier", 4,
             {"layer_ids": [0, 1, 2, 3]}, [0, 1, 2, 3]),
    ]


def _prefix(teacher) -> str:
    """Where the encoder layers are in the state dict: "bert.encoder.layers." or "encoder.layers."."""
    return "bert.encoder.layers." if isinstance(teacher, BertForSequenceClassification) else "encoder.layers."


def _layer_states(state: dict, prefix: str) -> dict[int, dict[str, torch.Tensor]]:
    """{layer index: {name inside the layer: tensor}} of the encoder layers in a state dict."""
    layers: dict[int, dict[str, torch.Tensor]] = {}
    for name, tensor in state.items():
        if name.startswith(prefix):
            index, _, inner = name[len(prefix):].partition(".")
            if index.isdigit():
                layers.setdefault(int(index), {})[inner] = tensor
    return layers


def _same_tensors(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        isinstance(a[name], torch.Tensor) and a[name].shape == b[name].shape and torch.equal(a[name], b[name])
        for name in a)


def _which_teacher_layers(student_layers: dict, teacher_layers: dict) -> list[int | None]:
    """For each student layer (in order), the teacher layer whose weights it holds, or None."""
    found = []
    for index in sorted(student_layers):
        match = [j for j, layer in teacher_layers.items() if _same_tensors(student_layers[index], layer)]
        found.append(match[0] if match else None)
    return found


def _layer_hint(found: list, expected: list[int], num_layers: int, layer_ids_given: bool) -> str:
    every_other = list(range(0, num_layers, 2))
    if None in found:
        return ("a layer of your student holds weights that are no teacher layer's: copy the teacher's layers "
                "(copy.deepcopy of the teacher, then keep the chosen layers) instead of making new ones.")
    if layer_ids_given and found == every_other:
        return "use the layer_ids argument when it is given; every other layer is only the default (layer_ids=None)."
    if found == list(range(num_layers)):
        return ("drop the layers that are not chosen: the student keeps only the layers of layer_ids, e.g. "
                "nn.ModuleList([layers[i] for i in layer_ids]).")
    if found == list(range(len(expected))) and found != expected:
        return ("keep every other layer, 0, 2, 4, ... (range(0, L, 2)), not the first half of the layers: "
                "DistilBERT takes one layer out of two, so that the student spans the teacher's whole depth.")
    if found == list(range(num_layers - len(expected), num_layers)) and found != expected:
        return "keep every other layer, 0, 2, 4, ... (range(0, L, 2)), not the last half of the layers."
    if found == [index + 1 for index in expected]:
        return "layers are numbered from 0: every other layer is 0, 2, 4, ... (range(0, L, 2)), not 1, 3, 5, ..."
    if num_layers % 2 == 1 and found == expected[:-1]:
        return (f"with an odd number of layers, every other layer still starts at 0 and ends at L - 1: "
                f"range(0, L, 2) gives {expected} for L = {num_layers} ((L + 1) // 2 layers, not L // 2).")
    if sorted(found) == sorted(expected):
        return "keep the chosen layers in the teacher's order (student layer k = teacher layer layer_ids[k])."
    return None


def _snapshot(model) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def _state_of_student(student, context: str) -> dict[str, torch.Tensor]:
    if student is None:
        fail(CHECK, context, "your function returned None.", "return the student model.")
    try:
        state = student.state_dict()
    except (AttributeError, TypeError):
        fail(CHECK, context, f"your function returned {type(student).__name__}, not a model (an nn.Module).",
             "return the student model, e.g. a copy of the teacher with fewer layers.")
    if not isinstance(state, dict) or not all(isinstance(value, torch.Tensor) for value in state.values()):
        fail(CHECK, context, "the state_dict() of what you returned is not a dict of tensors.", "return an nn.Module.")
    return state


def _compare_weights(state: dict, expected: dict, teacher_state: dict, prefix: str, expected_ids: list[int],
                     num_layers: int, layer_ids_given: bool, context: str) -> None:
    student_layers = _layer_states(state, prefix)
    teacher_layers = _layer_states(teacher_state, prefix)
    found = _which_teacher_layers(student_layers, teacher_layers)
    if len(found) != len(expected_ids) or found != expected_ids:
        described = ", ".join("a new layer" if index is None else str(index) for index in found)
        fail(CHECK, context, f"your student has {len(found)} encoder layers, copies of the teacher's layers "
                             f"[{described}]; expected {len(expected_ids)}: the teacher's layers {expected_ids}.",
             _layer_hint(found, expected_ids, num_layers, layer_ids_given))
    missing = sorted(set(expected) - set(state))
    extra = sorted(set(state) - set(expected))
    if missing or extra:
        lines = [f"missing: {', '.join(missing[:6])}" + (" ..." if len(missing) > 6 else "")] if missing else []
        lines += [f"not expected: {', '.join(extra[:6])}" + (" ..." if len(extra) > 6 else "")] if extra else []
        fail(CHECK, context, "the names of your student's weights are not those of the teacher's class:\n    "
                       + "\n    ".join(lines),
             "return a model of the teacher's class (a deep copy of the teacher), with only its list of encoder "
             "layers shortened.")
    for name in expected:
        if name.startswith(prefix):
            continue  # the layers were compared above
        if state[name].shape != expected[name].shape or not torch.equal(state[name], expected[name]):
            part = "the embeddings" if "embeddings" in name else "the pooler" if "pooler" in name else "the classifier"
            fail(CHECK, context, f"your student's {name} is not the teacher's.",
                 f"copy {part} of the teacher too: the student starts from ALL the teacher's weights except the "
                 "dropped layers (a copy.deepcopy of the teacher does that).")


def _check_config(student, expected_layers: int, has_backbone: bool, context: str) -> None:
    hint = ("set config.num_hidden_layers to the number of layers kept (e.g. student.config = "
            "dataclasses.replace(teacher.config, num_hidden_layers=len(layer_ids)), for the model and its .bert): "
            "count_parameters, save_pretrained and from_pretrained read it.")
    owners = [("config", student)] + ([("bert.config", None)] if has_backbone else [])
    for name, owner in owners:
        try:
            owner = student.bert if owner is None else owner
            value = owner.config.num_hidden_layers
        except AttributeError:
            fail(CHECK, context, f"your student has no {name}.num_hidden_layers.", hint)
        if value != expected_layers:
            fail(CHECK, context,
                 f"your student's {name}.num_hidden_layers is {value}, but it has {expected_layers} layers.", hint)


def _output(model, inputs):
    with torch.no_grad():
        output = model(**inputs)
    return output if isinstance(output, tuple) else output.logits


def _check_output(student, expected_model, inputs: dict, context: str) -> None:
    try:
        actual = _output(student, inputs)
    except Exception as error:
        fail(CHECK, context, f"running your student on a batch raised {type(error).__name__}: {error}",
             "return a model of the teacher's class, whose encoder holds the kept layers in an nn.ModuleList.")
    difference = describe_difference(actual, _output(expected_model, inputs), DEFAULT_TOLERANCES)
    if difference is not None:
        fail(CHECK, context, f"your student's output on a batch differs from the reference student's: {difference}")


def _check_teacher_unchanged(teacher, before: dict, num_layers: int, context: str, when: str) -> None:
    hint = ("do not modify the teacher: make a copy (copy.deepcopy(teacher)) and shorten the copy; the teacher "
            "must stay as it is, since it still has to teach the student.")
    config_layers = teacher.config.num_hidden_layers
    if config_layers != num_layers:
        fail(CHECK, context,
             f"{when}, the teacher's config.num_hidden_layers is {config_layers} instead of {num_layers}.", hint)
    after = teacher.state_dict()
    if after.keys() != before.keys():
        fail(CHECK, context,
             f"{when}, the teacher's weights are not the same set any more (it lost or gained layers).", hint)
    changed = [name for name in before if not torch.equal(after[name], before[name])]
    if changed:
        fail(CHECK, context, f"{when}, the teacher's {changed[0]} changed.", hint)


def _check_not_shared(student_fn, student, context: str, forbidden) -> None:
    """Make a student of the student, change all its weights, and check that the first student (its
    teacher) did not change: copies, not shared tensors. Works when ``student`` lives in another process."""
    before = _snapshot(student)
    num_layers = student.config.num_hidden_layers
    grandchild = run_student(student_fn, Case(f"{context}, then again with your student as the teacher and "
                                              "layer_ids=[0]", (student,), {"layer_ids": [0]}),
                             check=CHECK, forbidden=forbidden)
    _check_teacher_unchanged(student, before, num_layers, context,
                             "after calling your function with your student as the teacher")
    state = _state_of_student(grandchild, context)
    try:
        grandchild.load_state_dict({name: tensor + 1 if tensor.is_floating_point() else tensor
                                    for name, tensor in state.items()})
    except Exception as error:
        fail(CHECK, context,
             f"loading new weights into a student made by your function raised {type(error).__name__}: {error}")
    after = student.state_dict()
    shared = [name for name in before if not torch.equal(after[name], before[name])]
    if shared:
        fail(CHECK, context, f"changing the weights of the student changed its teacher's too ({shared[0]}"
                       + (f" and {len(shared) - 1} more" if len(shared) > 1 else "") + "): they share tensors.",
             "the student must get COPIES of the teacher's weights (copy.deepcopy(teacher), then keep the chosen "
             "layers of the copy), so that training the student leaves the teacher as it is.")


def _compare_student(exercise: Exercise, student_fn, case: StudentCase, context: str, forbidden) -> None:
    """One case: the student made from the case's teacher, against the reference's (weights, config,
    output), with the teacher unchanged and no tensor shared."""
    description, teacher, kwargs, expected_ids = case.description, case.teacher, case.kwargs, case.kept_layers
    num_layers = teacher.config.num_hidden_layers
    before = _snapshot(teacher)
    student = run_student(student_fn, Case(description, (teacher,), kwargs), check=CHECK, forbidden=forbidden,
                          context=context)
    _check_teacher_unchanged(teacher, before, num_layers, context, "after your function ran")
    state = _state_of_student(student, context)
    expected_model = exercise.reference(teacher, kwargs.get("layer_ids"))
    _compare_weights(state, expected_model.state_dict(), before, _prefix(teacher), expected_ids, num_layers,
                     "layer_ids" in kwargs, context)
    _check_config(student, len(expected_ids), isinstance(teacher, BertForSequenceClassification), context)
    _check_output(student, expected_model, case.batch, context)
    _check_not_shared(student_fn, student, context, forbidden)


INIT_STUDENT_FROM_TEACHER = Exercise(CHECK, reference.init_student_from_teacher, init_student_from_teacher_cases,
                                     forbidden=INIT_STUDENT_FORBIDDEN, compare=_compare_student,
                                     summary="""
                                     Compare ``init_student_from_teacher(teacher, layer_ids=None)`` with
                                     :func:`bertlab.distillation.init_student_from_teacher`.

                                     Teachers: ``BertForSequenceClassification`` with 4, 5 and 6 layers and bare
                                     ``BertModel``s with 4 layers, every weight random (LayerNorms too); layer_ids not
                                     given (0, 2, 4, ...; 0, 2, 4 for 5 layers), [1, 3, 5], (0, 5), [2], every layer.
                                     For each, the student's model must hold exactly the reference student's weights
                                     (names and values: the chosen teacher layers in order, the embeddings, the pooler
                                     and the classifier), have ``config.num_hidden_layers`` (and ``bert.config``'s)
                                     equal to the number of layers kept, give the reference student's output on a padded
                                     batch (tolerance: the framework's defaults), leave the teacher unchanged, and share
                                     no tensor with its teacher (a student made from the student is changed, and the
                                     student must not change). Forbidden: the reference.
                                     """)


#: The chapter whose exercises this module checks, and their records, in the order of the chapter.
CHAPTER = "09_distillation"


__getattr__ = check_functions(globals())  # check_<name> for each record above
