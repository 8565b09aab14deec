"""Tests for bertlab.distillation: the loss, the student's initialisation, distill and compare_models."""

import json
import math
import random
import types

import pytest
import torch
import torch.nn.functional as F

from bertlab.bert import BertConfig, BertForSequenceClassification, BertModel, count_parameters
from bertlab.data import synthetic_sentiment
from bertlab.distillation import (
    DistillationRecipe,
    ModelComparison,
    compare_models,
    distill,
    distillation_loss,
    init_student_from_teacher,
)
from bertlab.finetuning import FineTuningRecipe, evaluate, finetune, predict
from bertlab.tokenization import BertTokenizer, train_wordpiece_vocab
from device_helpers import DeviceAudit


@pytest.fixture(scope="module")
def examples():
    """The synthetic set without its contrast sentences, which a tiny model learns in seconds."""
    return [example for example in synthetic_sentiment(num_examples=1000, seed=0) if " but " not in example[0]]


@pytest.fixture(scope="module")
def tokenizer(examples):
    return BertTokenizer(train_wordpiece_vocab([text for text, _ in examples], vocab_size=300))


def tiny_config(tokenizer, num_layers=4):
    return BertConfig(
        vocab_size=len(tokenizer.vocab),
        hidden_size=64,
        num_hidden_layers=num_layers,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )


@pytest.fixture(scope="module")
def trained_teacher(tokenizer, examples):
    """A 4-layer classifier fine-tuned on the synthetic set: a teacher with something to teach."""
    torch.manual_seed(0)
    teacher = BertForSequenceClassification(tiny_config(tokenizer), num_labels=2)
    recipe = FineTuningRecipe(epochs=5, batch_size=16, encoder_lr=3e-3)
    finetune(teacher, tokenizer, examples[:400], recipe=recipe, device="cpu", progress=False)
    return teacher.eval()


def random_logits(*shape, seed=0, scale=2.0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * scale


# --------------------------------------------------------------------------------------------------
# distillation_loss


def loss_with_explicit_sums(student, teacher, labels, alpha, temperature):
    """The formula written out: alpha * CE + (1 - alpha) * T^2 * (1/B) sum_b sum_c p_bc log(p_bc / q_bc)."""
    batch, classes = student.shape
    total_kl, total_ce = 0.0, 0.0
    for b in range(batch):
        t = [math.exp(teacher[b, c].item() / temperature) for c in range(classes)]
        s = [math.exp(student[b, c].item() / temperature) for c in range(classes)]
        p = [value / sum(t) for value in t]
        q = [value / sum(s) for value in s]
        total_kl += sum(p[c] * math.log(p[c] / q[c]) for c in range(classes))
        if labels is not None:
            exp = [math.exp(student[b, c].item()) for c in range(classes)]
            total_ce += -math.log(exp[labels[b]] / sum(exp))
    soft = temperature**2 * total_kl / batch
    return soft if labels is None else alpha * total_ce / batch + (1 - alpha) * soft


@pytest.mark.parametrize("alpha, temperature", [(0.5, 2.0), (0.0, 1.0), (1.0, 3.0), (0.3, 0.5)])
def test_distillation_loss_matches_the_formula_with_explicit_sums(alpha, temperature):
    student, teacher = random_logits(6, 4, seed=1), random_logits(6, 4, seed=2)
    labels = torch.tensor([0, 1, 2, 3, 1, 0])
    for given in (labels, None):
        expected = loss_with_explicit_sums(student, teacher, given, alpha, temperature)
        loss = distillation_loss(student, teacher, given, alpha, temperature)
        assert loss.item() == pytest.approx(expected, rel=1e-6)


def test_soft_term_matches_torch_kl_div():
    student, teacher, temperature = random_logits(5, 3, seed=3), random_logits(5, 3, seed=4), 4.0
    reference = F.kl_div(
        F.log_softmax(student / temperature, dim=-1), F.softmax(teacher / temperature, dim=-1), reduction="batchmean"
    )
    assert distillation_loss(student, teacher, temperature=temperature).item() == pytest.approx(
        temperature**2 * reference.item(), rel=1e-6
    )


def test_without_labels_alpha_is_ignored():
    student, teacher = random_logits(4, 3, seed=5), random_logits(4, 3, seed=6)
    values = [distillation_loss(student, teacher, None, alpha).item() for alpha in (0.0, 0.5, 1.0)]
    assert values == pytest.approx([values[0]] * 3)


def test_kl_direction_teacher_distribution_first():
    student, teacher = random_logits(4, 5, seed=7), random_logits(4, 5, seed=8)
    forward, backward = distillation_loss(student, teacher), distillation_loss(teacher, student)
    assert not torch.isclose(forward, backward)  # KL is not symmetric: the order matters
    assert forward.item() == pytest.approx(loss_with_explicit_sums(student, teacher, None, 0.5, 2.0), rel=1e-6)


def test_loss_is_zero_when_the_student_copies_the_teacher():
    logits = random_logits(3, 4, seed=9)
    assert distillation_loss(logits.clone(), logits).item() == pytest.approx(0.0, abs=1e-12)


def test_t_squared_keeps_gradients_comparable_across_temperatures():
    """d(T^2 KL)/ds = T (softmax(s/T) - softmax(t/T)) / B, which tends to ((s - mean s) - (t - mean t)) / (C B)."""
    batch, classes = 8, 5
    teacher = random_logits(batch, classes, seed=10)
    student_init = random_logits(batch, classes, seed=11)
    centred_student = student_init - student_init.mean(-1, keepdim=True)
    centred_teacher = teacher - teacher.mean(-1, keepdim=True)
    limit = (centred_student - centred_teacher) / (classes * batch)
    norms = []
    for temperature in (2.0, 4.0, 8.0, 16.0, 100.0):
        student = student_init.clone().requires_grad_()
        distillation_loss(student, teacher, temperature=temperature).backward()
        norms.append(student.grad.norm().item())
        if temperature == 100.0:
            torch.testing.assert_close(student.grad, limit, atol=5e-3, rtol=0)
    assert max(norms) / min(norms) < 1.2  # without the T^2 factor, the ratio would be about 2500
    assert min(norms) > 0.5 * limit.norm().item()


def test_teacher_logits_are_detached():
    student = random_logits(4, 3, seed=12).requires_grad_()
    teacher = random_logits(4, 3, seed=13).requires_grad_()
    distillation_loss(student, teacher, torch.tensor([0, 1, 2, 0])).backward()
    assert student.grad is not None and teacher.grad is None


@pytest.mark.parametrize(
    "student_shape, teacher_shape, labels_shape, options, message",
    [
        ((4, 3), (4, 2), None, {}, "teacher_logits"),
        ((4, 3), (4, 3), (5,), {}, "labels"),
        ((4, 3), (4, 3), None, {"alpha": 1.5}, "alpha"),
        ((4, 3), (4, 3), None, {"temperature": 0.0}, "temperature"),
    ],
)
def test_distillation_loss_rejects_bad_input(student_shape, teacher_shape, labels_shape, options, message):
    labels = None if labels_shape is None else torch.zeros(labels_shape, dtype=torch.long)
    with pytest.raises(ValueError, match=message):
        distillation_loss(torch.zeros(student_shape), torch.zeros(teacher_shape), labels, **options)


# --------------------------------------------------------------------------------------------------
# init_student_from_teacher


def assert_same_weights(student_module, teacher_module):
    student_state, teacher_state = student_module.state_dict(), teacher_module.state_dict()
    assert student_state.keys() == teacher_state.keys()
    for name in student_state:
        assert torch.equal(student_state[name], teacher_state[name]), name
        assert student_state[name].data_ptr() != teacher_state[name].data_ptr(), f"{name} is shared"


@pytest.mark.parametrize("layer_ids, expected", [(None, [0, 2]), ([1, 3], [1, 3]), ([3], [3])])
def test_student_copies_the_chosen_layers(tokenizer, layer_ids, expected):
    teacher = BertForSequenceClassification(tiny_config(tokenizer), num_labels=2)
    student = init_student_from_teacher(teacher, layer_ids)
    assert type(student) is type(teacher)
    assert student.config.num_hidden_layers == len(expected) == len(student.bert.encoder.layers)
    assert student.bert.config.num_hidden_layers == len(expected)
    assert teacher.config.num_hidden_layers == 4 and len(teacher.bert.encoder.layers) == 4
    for student_index, teacher_index in enumerate(expected):
        assert_same_weights(student.bert.encoder.layers[student_index], teacher.bert.encoder.layers[teacher_index])
    for part in ("embeddings", "pooler"):
        assert_same_weights(getattr(student.bert, part), getattr(teacher.bert, part))
    assert_same_weights(student.classifier, teacher.classifier)


def test_student_default_for_an_odd_depth_and_a_bare_bert_model(tokenizer):
    teacher = BertModel(tiny_config(tokenizer, num_layers=3))
    student = init_student_from_teacher(teacher)
    assert isinstance(student, BertModel) and len(student.encoder.layers) == 2
    assert_same_weights(student.encoder.layers[1], teacher.encoder.layers[2])


def test_student_with_every_layer_computes_what_the_teacher_computes(tokenizer, examples):
    teacher = BertForSequenceClassification(tiny_config(tokenizer), num_labels=2).eval()
    student = init_student_from_teacher(teacher, layer_ids=range(4)).eval()
    batch = tokenizer.batch_encode([text for text, _ in examples[:8]], return_tensors="pt")
    with torch.no_grad():
        assert torch.equal(student(**batch).logits, teacher(**batch).logits)


def test_student_is_not_tied_to_the_teacher(tokenizer):
    teacher = BertForSequenceClassification(tiny_config(tokenizer), num_labels=2)
    student = init_student_from_teacher(teacher)
    before = {name: tensor.clone() for name, tensor in student.state_dict().items()}
    with torch.no_grad():
        for parameter in teacher.parameters():
            parameter.add_(1.0)
    for name, tensor in student.state_dict().items():
        assert torch.equal(tensor, before[name]), name


@pytest.mark.parametrize("layer_ids", [[], [4], [-1], [2, 1], [1, 1], [0.5]])
def test_init_student_rejects_bad_layer_ids(tokenizer, layer_ids):
    teacher = BertForSequenceClassification(tiny_config(tokenizer), num_labels=2)
    with pytest.raises(ValueError, match="layer_ids"):
        init_student_from_teacher(teacher, layer_ids)


# --------------------------------------------------------------------------------------------------
# distill and compare_models


def agreement(student, teacher, tokenizer, texts, device):
    """The share of texts where the two models predict the same label, on ``device``: the same device
    and precision as ``distill``'s own measure, so that no argmax flips between the two."""
    same = predict(student, tokenizer, texts, device=device) == predict(teacher, tokenizer, texts, device=device)
    return float(same.double().mean())


def test_distill_teaches_the_student_what_the_teacher_predicts(trained_teacher, tokenizer, examples, device, tmp_path):
    """With alpha = 0 and shuffled labels, the student can only learn from the teacher's soft targets."""
    train, dev = examples[:400], examples[400:]
    rng = random.Random(0)
    shuffled = [(text, rng.randint(0, 1)) for text, _ in train]  # labels carry no information
    torch.manual_seed(1)
    student = BertForSequenceClassification(tiny_config(tokenizer, num_layers=2), num_labels=2)
    dev_texts = [text for text, _ in dev]
    before = agreement(student, trained_teacher, tokenizer, dev_texts, device)
    teacher_state = {name: tensor.cpu().clone() for name, tensor in trained_teacher.state_dict().items()}

    recipe = DistillationRecipe(epochs=3, batch_size=16, encoder_lr=3e-3, alpha=0.0, temperature=2.0, seed=0)
    history = distill(trained_teacher, student, tokenizer, shuffled, dev, recipe, device=device, progress=False,
                      output_dir=tmp_path)
    after = agreement(student, trained_teacher, tokenizer, dev_texts, device)
    trained_teacher.cpu()
    student.cpu()
    assert after > max(0.8, before + 0.2)
    assert history[-1]["dev_agreement"] == pytest.approx(after)
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    assert set(history[0]) == {"epoch", "train_loss", "dev_accuracy", "dev_macro_f1", "dev_loss", "dev_agreement"}
    assert not trained_teacher.training
    for name, tensor in trained_teacher.state_dict().items():
        assert torch.equal(tensor, teacher_state[name]), f"the teacher's {name} changed"
    assert json.loads((tmp_path / "history.json").read_text()) == history


def test_distill_rejects_bad_options():
    with pytest.raises(ValueError, match="temperature"):
        DistillationRecipe(temperature=-1.0)


def test_compare_models_reports_sizes_and_accuracies(trained_teacher, tokenizer, examples):
    student = init_student_from_teacher(trained_teacher)
    test = examples[400:]
    comparison = compare_models(trained_teacher, student, tokenizer, test, batch_size=32, device="cpu", repeats=2)
    assert isinstance(comparison, ModelComparison)
    teacher_row, student_row = comparison.rows
    hidden, labels = trained_teacher.config.hidden_size, 2
    classifier = hidden * labels + labels
    assert teacher_row.parameters == count_parameters(trained_teacher.config) + classifier
    assert student_row.parameters == count_parameters(student.config) + classifier
    assert count_parameters(trained_teacher.config) - count_parameters(student.config) == 2 * sum(
        p.numel() for p in trained_teacher.bert.encoder.layers[0].parameters()
    )
    assert teacher_row.accuracy == pytest.approx(evaluate(trained_teacher, tokenizer, test)["accuracy"])
    assert student_row.accuracy == pytest.approx(evaluate(student, tokenizer, test)["accuracy"])
    assert teacher_row.speedup == 1.0 and teacher_row.percent_of_teacher == pytest.approx(100.0)
    assert student_row.percent_of_teacher == pytest.approx(100 * student_row.accuracy / teacher_row.accuracy)
    assert student_row.speedup == pytest.approx(teacher_row.inference_seconds / student_row.inference_seconds)
    table = comparison.to_markdown()
    assert "| teacher |" in table and "| student |" in table and "% of teacher" in table


class ConstantClassifier(torch.nn.Module):
    """A stand-in classifier whose weights live on ``device`` and whose logits come back on the CPU
    (as they do from a GPU after ``compute_logits``' copy): what ``compare_models`` gets on a GPU."""

    def __init__(self, device):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(2, device=device))

    def forward(self, input_ids, token_type_ids, attention_mask):
        assert input_ids.device == self.weight.device, "the inputs must be on the model's device"
        logits = torch.arange(2 * len(input_ids), dtype=torch.float32).reshape(-1, 2)  # predicts label 1
        return types.SimpleNamespace(logits=logits)


def test_compare_models_keeps_each_tensor_where_it_is_used(tokenizer, examples):
    """Regression: the batches' ``index`` went to the model's device and then indexed CPU logits,
    which fails on a GPU. On ``meta``, the audit catches the same mix without one."""
    models = ConstantClassifier("meta"), ConstantClassifier("meta")
    with DeviceAudit():
        comparison = compare_models(*models, tokenizer, examples[:40], batch_size=16, device="meta", repeats=1)
    share_positive = sum(label for _, label in examples[:40]) / 40
    assert [row.accuracy for row in comparison.rows] == pytest.approx([share_positive, share_positive])


def test_distillation_settings_as_keywords_and_lr_still_run_the_same_recipe(trained_teacher, tokenizer, examples):
    recipe = DistillationRecipe(epochs=1, batch_size=16, encoder_lr=3e-3, alpha=0.3, temperature=3.0)

    def losses(**arguments):
        student = init_student_from_teacher(trained_teacher, [0])
        history = distill(trained_teacher, student, tokenizer, examples[:32], device="cpu", progress=False,
                          **arguments)
        return [record["train_loss"] for record in history]

    expected = losses(recipe=recipe)
    with pytest.warns(DeprecationWarning, match=r"pass DistillationRecipe\(epochs=\.\.\."):
        assert losses(epochs=1, batch_size=16, lr=3e-3, alpha=0.3, temperature=3.0) == expected
    with pytest.raises(ValueError, match=r"alpha must be in \[0, 1\], got 2"):
        DistillationRecipe(alpha=2)
