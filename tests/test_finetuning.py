"""Tests for bertlab.finetuning: freezing, parameter groups, metrics, fine-tuning and the baseline."""

import json
import math
import re

import pytest
import torch
import torch.nn.functional as F

from bertlab.bert import BertConfig, BertForSequenceClassification, BertModel
from bertlab.data import synthetic_sentiment
from bertlab.finetuning import (
    FineTuningRecipe,
    BagOfWordsClassifier,
    SentimentBatches,
    classification_loss,
    classification_metrics,
    confusion_matrix,
    evaluate,
    finetune,
    fit,
    freeze_layers,
    labelled_batches,
    macro_f1,
    make_optimizer,
    param_groups,
    predict,
    texts_and_labels,
    train_bag_of_words,
)
from bertlab import finetuning
from bertlab.tokenization import BertTokenizer, train_wordpiece_vocab
from bertlab.utils import autocast_dtype, cpu_computes_bfloat16

NUM_LAYERS = 4


@pytest.fixture(scope="module")
def examples():
    """The synthetic set without its contrast sentences ("x, but y"): a tiny BERT trained from scratch
    learns word polarity and negation from these in seconds, the contrast would take much longer."""
    return [example for example in synthetic_sentiment(num_examples=1000, seed=0) if " but " not in example[0]]


@pytest.fixture(scope="module")
def tokenizer(examples):
    return BertTokenizer(train_wordpiece_vocab([text for text, _ in examples], vocab_size=300))


def tiny_config(tokenizer, num_layers=NUM_LAYERS):
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


@pytest.fixture
def model(tokenizer):
    return BertForSequenceClassification(tiny_config(tokenizer), num_labels=2)


def layer_of(name):
    """The encoder layer index in a parameter name, or None."""
    parts = name.split(".")
    return int(parts[parts.index("layers") + 1]) if "layers" in parts else None


# --------------------------------------------------------------------------------------------------
# freeze_layers


@pytest.mark.parametrize("num_trainable", [0, 1, NUM_LAYERS])
def test_freeze_layers_freezes_embeddings_and_lower_layers(model, tokenizer, num_trainable):
    assert freeze_layers(model, num_trainable) is model
    for name, parameter in model.named_parameters():
        frozen = name.startswith("bert.embeddings.") or (
            layer_of(name) is not None and layer_of(name) < NUM_LAYERS - num_trainable
        )
        assert parameter.requires_grad == (not frozen), name

    batch = tokenizer.batch_encode(["a good film", "not bad at all"], return_tensors="pt")
    model(**batch, labels=torch.tensor([1, 1])).loss.backward()
    for name, parameter in model.named_parameters():
        assert (parameter.grad is None) == (not parameter.requires_grad), name


def test_freeze_layers_can_be_called_again(model):
    freeze_layers(model, 0)
    freeze_layers(model, NUM_LAYERS)
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable == {name for name, _ in model.named_parameters() if not name.startswith("bert.embeddings.")}


@pytest.mark.parametrize("bad", [-1, NUM_LAYERS + 1, 1.5, True])
def test_freeze_layers_rejects_bad_counts(model, bad):
    with pytest.raises(ValueError, match="num_trainable_layers"):
        freeze_layers(model, bad)


def test_freeze_layers_rejects_a_model_without_bert(model):
    with pytest.raises(TypeError, match="BertModel"):
        freeze_layers(torch.nn.Linear(2, 2), 1)


# --------------------------------------------------------------------------------------------------
# param_groups


def no_decay_names(model):
    """Biases and normalization weights, found by name and module type (not by tensor rank)."""
    names = set()
    for module_name, module in model.named_modules():
        for parameter_name, _ in module.named_parameters(recurse=False):
            full_name = f"{module_name}.{parameter_name}" if module_name else parameter_name
            if parameter_name == "bias" or "Norm" in type(module).__name__:
                names.add(full_name)
    return names


def test_param_groups_cover_each_parameter_once_with_the_right_rates(model):
    encoder_lr, head_lr, decay, xi = 1e-4, 1e-3, 0.01, 0.5
    groups = param_groups(model, encoder_lr, head_lr, decay, layer_decay=xi)
    ids = [id(p) for group in groups for p in group["params"]]
    assert len(ids) == len(set(ids))
    names = {id(p): name for name, p in model.named_parameters()}
    assert set(ids) == set(names)

    without_decay = no_decay_names(model)
    assert without_decay  # the model has biases and LayerNorms
    for group in groups:
        for parameter in group["params"]:
            name = names[id(parameter)]
            if name.startswith("bert.embeddings."):
                expected_lr = encoder_lr * xi**NUM_LAYERS
            elif layer_of(name) is not None:
                expected_lr = encoder_lr * xi ** (NUM_LAYERS - 1 - layer_of(name))
            else:
                assert name.startswith(("bert.pooler.", "classifier.")), name
                expected_lr = head_lr
            assert group["lr"] == pytest.approx(expected_lr), name
            assert group["weight_decay"] == (0.0 if name in without_decay else decay), name


def test_param_groups_leave_out_frozen_parameters(model):
    freeze_layers(model, 1)
    grouped = {id(p) for group in param_groups(model, 1e-4, 1e-4, 0.01) for p in group["params"]}
    assert grouped == {id(p) for p in model.parameters() if p.requires_grad}
    top_layer = {id(p) for p in model.bert.encoder.layers[-1].parameters()}
    assert top_layer <= grouped


def test_param_groups_work_with_a_bare_bert_model(tokenizer):
    bert = BertModel(tiny_config(tokenizer))
    groups = param_groups(bert, 1e-4, 1e-3, 0.01)
    assert sum(len(g["params"]) for g in groups) == len(list(bert.parameters()))
    torch.optim.AdamW(groups)  # accepted as they are


@pytest.mark.parametrize(
    "arguments, message",
    [
        ((-1e-4, 1e-4, 0.0, 1.0), "encoder_lr"),
        ((1e-4, 1e-4, -0.1, 1.0), "weight_decay"),
        ((1e-4, 1e-4, 0.0, 0.0), "layer_decay"),
    ],
)
def test_param_groups_reject_bad_values(model, arguments, message):
    with pytest.raises(ValueError, match=message):
        param_groups(model, *arguments)


# --------------------------------------------------------------------------------------------------
# Batches and metrics


def test_sentiment_batches_cover_every_example_once_and_trim_padding(examples, tokenizer):
    texts, labels = texts_and_labels(examples[:50])
    batches = SentimentBatches(texts, tokenizer, labels, batch_size=8, shuffle=True, seed=3)
    again = SentimentBatches(texts, tokenizer, labels, batch_size=8, shuffle=True, seed=3)
    assert len(batches) == math.ceil(50 / 8)
    first = [batch["index"] for batch in batches]
    second = [batch["index"] for batch in again]
    assert all(torch.equal(a, b) for a, b in zip(first, second))  # seeded
    assert sorted(torch.cat(first).tolist()) == list(range(50))
    for batch in batches:
        assert batch["attention_mask"].sum(dim=1).max() == batch["input_ids"].shape[1]
        assert torch.equal(batch["labels"], torch.tensor(labels)[batch["index"]])


@pytest.mark.parametrize("bad", [[("text", "positive")], [("text",)], ["text"], []])
def test_split_examples_rejects_malformed_examples(bad):
    with pytest.raises(ValueError, match="examples"):
        texts_and_labels(bad)


def test_confusion_matrix_and_macro_f1_by_hand():
    labels = torch.tensor([0, 0, 0, 0, 1, 1, 1, 2, 2, 2])
    predictions = torch.tensor([0, 0, 1, 2, 1, 1, 0, 2, 1, 1])
    expected_matrix = torch.tensor([[2, 1, 1], [1, 2, 0], [0, 2, 1]])
    assert torch.equal(confusion_matrix(predictions, labels, 3), expected_matrix)
    # class 0: TP 2, FP 1, FN 2 -> 4/7; class 1: TP 2, FP 3, FN 1 -> 4/8; class 2: TP 1, FP 1, FN 2 -> 2/5
    assert macro_f1(predictions, labels) == pytest.approx((4 / 7 + 4 / 8 + 2 / 5) / 3)


def test_macro_f1_ignores_classes_that_never_occur():
    labels, predictions = torch.tensor([0, 0, 1, 1]), torch.tensor([0, 1, 1, 1])
    # class 0: F1 = 2/3; class 1: F1 = 4/5; class 2 occurs nowhere and does not count
    assert macro_f1(predictions, labels, num_classes=3) == pytest.approx((2 / 3 + 4 / 5) / 2)


def test_macro_f1_matches_scikit_learn():
    metrics = pytest.importorskip("sklearn.metrics")
    generator = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 4, (200,), generator=generator)
    guesses = torch.randint(0, 4, (200,), generator=generator)
    predictions = torch.where(torch.rand(200, generator=generator) < 0.6, labels, guesses)
    assert macro_f1(predictions, labels) == pytest.approx(metrics.f1_score(labels, predictions, average="macro"))


def test_classification_metrics_by_hand():
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [3.0, 1.0], [0.5, 0.0]])
    labels = torch.tensor([0, 1, 1, 1])
    metrics = classification_metrics(logits, labels)
    assert metrics["accuracy"] == pytest.approx(0.5)
    # class 0: TP 1, FP 2, FN 0 -> 1/2; class 1: TP 1, FP 0, FN 2 -> 1/2
    assert metrics["macro_f1"] == pytest.approx(0.5)
    log_p = [
        2 - math.log(math.exp(2) + 1),
        1 - math.log(1 + math.e),
        1 - math.log(math.exp(3) + math.e),
        -math.log(math.exp(0.5) + 1),
    ]
    assert metrics["loss"] == pytest.approx(-sum(log_p) / 4)


def test_evaluate_and_predict_match_one_example_at_a_time(model, tokenizer, examples):
    """Batching with padding must not change anything: compare with unpadded single examples."""
    model.eval()
    subset = examples[:20]
    with torch.no_grad():
        logits = torch.cat([model(**tokenizer.batch_encode([text], return_tensors="pt")).logits for text, _ in subset])
    labels = torch.tensor([label for _, label in subset])
    metrics = evaluate(model, tokenizer, subset, batch_size=8)
    assert metrics["accuracy"] == pytest.approx(float((logits.argmax(-1) == labels).double().mean()))
    assert metrics["loss"] == pytest.approx(float(F.cross_entropy(logits, labels)), rel=1e-5)
    assert metrics["macro_f1"] == pytest.approx(macro_f1(logits.argmax(-1), labels, num_classes=2))
    assert torch.equal(predict(model, tokenizer, [text for text, _ in subset], batch_size=8), logits.argmax(-1))


# --------------------------------------------------------------------------------------------------
# Fine-tuning and the baseline


def test_finetune_learns_the_synthetic_task(tokenizer, examples, device, tmp_path):
    train, dev = examples[:400], examples[400:]
    torch.manual_seed(0)
    model = BertForSequenceClassification(tiny_config(tokenizer, num_layers=2), num_labels=2)
    before = evaluate(model, tokenizer, dev)["accuracy"]
    recipe = FineTuningRecipe(epochs=4, batch_size=16, encoder_lr=3e-3, seed=0)
    history = finetune(model, tokenizer, train, dev, recipe, device=device, progress=False, output_dir=tmp_path)
    assert [record["epoch"] for record in history] == [1, 2, 3, 4]
    assert set(history[0]) == {"epoch", "train_loss", "dev_accuracy", "dev_macro_f1", "dev_loss"}
    assert history[-1]["train_loss"] < history[0]["train_loss"] - 0.15
    assert history[-1]["dev_accuracy"] > max(0.7, before + 0.15)
    assert history[-1]["dev_accuracy"] == pytest.approx(evaluate(model, tokenizer, dev)["accuracy"])

    assert json.loads((tmp_path / "history.json").read_text()) == history
    reloaded = BertForSequenceClassification.from_pretrained(tmp_path).to(device)
    assert evaluate(reloaded, tokenizer, dev) == pytest.approx(evaluate(model, tokenizer, dev))


def test_finetune_computes_in_the_precision_it_is_given(tokenizer, examples, monkeypatch):
    """finetune passes its precision to every forward pass, training and evaluation; bfloat16 learns as
    float32 does, and "auto" on a CPU is bfloat16 exactly where the CPU computes it natively."""
    seen = []
    original = finetuning.autocast

    def recording_autocast(device, enabled=True, precision="auto"):
        seen.append(autocast_dtype(device, precision))
        return original(device, enabled, precision)

    monkeypatch.setattr(finetuning, "autocast", recording_autocast)
    histories = {}
    for precision in ("float32", "bfloat16", "auto"):
        seen.clear()
        torch.manual_seed(0)
        model = BertForSequenceClassification(tiny_config(tokenizer, num_layers=1), num_labels=2)
        recipe = FineTuningRecipe(epochs=2, batch_size=16, encoder_lr=3e-3, seed=0)
        histories[precision] = finetune(model, tokenizer, examples[:96], examples[400:464], recipe, device="cpu",
                                        progress=False, precision=precision)
        expected = {"float32": None, "bfloat16": torch.bfloat16,
                    "auto": torch.bfloat16 if cpu_computes_bfloat16() else None}[precision]
        assert seen and set(seen) == {expected}, precision
    float32, bfloat16 = (histories[name][-1]["train_loss"] for name in ("float32", "bfloat16"))
    assert float32 != bfloat16 and abs(float32 - bfloat16) < 0.05
    with pytest.raises(ValueError, match="precision must be one of auto, float32, bfloat16, float16"):
        finetune(model, tokenizer, examples[:16], device="cpu", progress=False, precision="half")


def test_fit_runs_one_train_epoch_per_epoch_and_records_the_dev_metrics(model, tokenizer, examples, tmp_path):
    """The epoch loop that finetune and distill share: a step per batch, the dev metrics after each epoch."""
    batches = labelled_batches(examples[:24], tokenizer, batch_size=8, shuffle=True)
    optimizer, scheduler = make_optimizer(model, num_steps=2 * len(batches), encoder_lr=1e-3, head_lr=1e-3,
                                          weight_decay=0.0, layer_decay=1.0, warmup_ratio=0.0)
    evaluated = []

    def dev_metrics(trained):
        evaluated.append(trained)
        return {"score": float(len(evaluated))}

    history = fit(model, batches, classification_loss, optimizer, scheduler, torch.device("cpu"), epochs=2,
                  dev_metrics=dev_metrics, progress=False, output_dir=tmp_path)
    assert [record["epoch"] for record in history] == [1, 2] and evaluated == [model, model]
    assert [set(record) for record in history] == [{"epoch", "train_loss", "dev_score"}] * 2
    assert [record["dev_score"] for record in history] == [1.0, 2.0]
    assert scheduler.last_epoch == 2 * len(batches)  # one scheduler step per batch
    assert json.loads((tmp_path / "history.json").read_text()) == history


def test_finetune_is_seeded(tokenizer, examples):
    histories = []
    for _ in range(2):
        torch.manual_seed(123)  # same initial weights
        model = BertForSequenceClassification(tiny_config(tokenizer, num_layers=1), num_labels=2)
        recipe = FineTuningRecipe(epochs=1, batch_size=16)
        history = finetune(model, tokenizer, examples[:64], recipe=recipe, device="cpu", progress=False)
        histories.append(history)
    assert histories[0] == histories[1]


def test_finetune_trains_only_unfrozen_weights(model, tokenizer, examples):
    freeze_layers(model, 1)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    recipe = FineTuningRecipe(epochs=1, batch_size=16, encoder_lr=1e-3)
    finetune(model, tokenizer, examples[:64], recipe=recipe, device="cpu", progress=False)
    for name, parameter in model.named_parameters():
        assert torch.equal(parameter, before[name]) == (not parameter.requires_grad), name


def word_polarity_examples(subjects):
    """Sentences whose label is the polarity of one word: what a bag of words can learn."""
    positive, negative = ["good", "great", "superb", "fun", "moving"], ["bad", "dull", "awful", "boring", "messy"]
    return [
        (f"{subject} was {word} .", label)
        for subject in subjects
        for words, label in ((positive, 1), (negative, 0))
        for word in words
    ]


def test_bag_of_words_learns_word_polarity_and_drops_unknown_words():
    train = word_polarity_examples(["the film", "the plot", "the cast", "this movie", "the script", "the score"])
    test = word_polarity_examples(["the ending", "the acting"])  # subjects never seen in training
    classifier = train_bag_of_words(train, epochs=20, seed=0)
    assert isinstance(classifier, BagOfWordsClassifier)
    metrics = classifier.evaluate(test)
    assert metrics["accuracy"] == 1.0 and metrics["macro_f1"] == 1.0 and metrics["loss"] < 0.5
    assert classifier.featurize(["qwertyuiop zxcvbnm"])[0].numel() == 0
    assert classifier.predict(["qwertyuiop", "the ending was awful ."]).tolist()[1] == 0


def test_bag_of_words_ignores_word_order():
    """Word order is lost: the features cannot tell where a "not" stands."""
    train = word_polarity_examples(["the film", "the plot"])
    classifier = train_bag_of_words(train, epochs=20, seed=0)
    assert torch.equal(classifier.predict(["the film was not bad ."]), classifier.predict(["the film was bad . not"]))


# ---------------------------------------------------------------------------------------------- the recipe


def test_settings_as_keywords_run_the_same_recipe_with_a_warning(tokenizer, examples):
    recipe = FineTuningRecipe(epochs=1, batch_size=16, encoder_lr=1e-3, max_length=32, seed=2)

    def history(**arguments):
        torch.manual_seed(0)
        model = BertForSequenceClassification(tiny_config(tokenizer, num_layers=1), num_labels=2)
        records = finetune(model, tokenizer, examples[:64], examples[400:432], device="cpu", progress=False,
                           **arguments)
        return [(record["train_loss"], record["dev_loss"]) for record in records]

    expected = history(recipe=recipe)
    with pytest.warns(DeprecationWarning, match=r"pass FineTuningRecipe\(epochs=\.\.\."):
        assert history(epochs=1, batch_size=16, encoder_lr=1e-3, max_length=32, seed=2) == expected
    with pytest.raises(TypeError, match=r"got a recipe and settings as keywords \(seed\)"):
        history(recipe=recipe, seed=3)
    with pytest.raises(TypeError, match="unexpected keyword arguments: learning_rate"):
        history(learning_rate=1e-3)


@pytest.mark.parametrize("settings, message", [
    (dict(epochs=0), "epochs must be a positive integer, got 0"),
    (dict(batch_size=2.5), "batch_size must be a positive integer, got 2.5"),
    (dict(max_length=0), "max_length must be a positive integer (or None for the task's), got 0"),
    (dict(warmup_ratio=1.5), "warmup_ratio must be in [0, 1], got 1.5"),
    (dict(head_lr=-1e-3), "head_lr must be positive, got -0.001"),
])
def test_a_recipe_names_the_setting_it_refuses(settings, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        FineTuningRecipe(**settings)
