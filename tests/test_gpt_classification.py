"""Tests of bertlab.gpt's GPTForSequenceClassification against Hugging Face ``transformers``'
GPT2ForSequenceClassification, and of the GPT in the fine-tuning path (bertlab.finetuning, bertlab finetune).

The independent implementations: Hugging Face's classifier and decoder (tiny random models, no
downloads), and hand computations written here (the last token of each row, the mean of the states).
"""

import dataclasses
import json

import pytest
import torch
from torch import nn

from bertlab import finetuning
from bertlab.course_model import COURSE_BERT_FOLDER
from bertlab.finetuning import (
    ExampleScores,
    FineTuningRecipe,
    SentimentBatches,
    choose_learning_rate,
    evaluate_task,
    finetune_task,
    freeze_layers,
    model_family,
    param_groups,
    task_example_scores,
    task_model,
)
from bertlab.gpt import GPTConfig, GPTForSequenceClassification, GPTLMHeadModel, last_token_positions
from bertlab.task_data import SentencePair
from bertlab.task_finetuning import PAIRS, SPANS, TAGGING, LabelVocabulary
from bertlab.tokenization import BertTokenizer
from tests.conftest import run_cli
from tests.course_gpt_helpers import small_bert_vs_gpt

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: a second thread only adds contention

PAD, SEP = 0, 3  # the course vocabulary's [PAD] and [SEP]
TINY = dict(vocab_size=99, n_positions=32, n_embd=32, n_layer=2, n_head=4, n_inner=37, bos_token_id=2,
            eos_token_id=SEP, pad_token_id=PAD)
ATOL = 1e-5
NUM_LAYERS = TINY["n_layer"]
REVIEWS = [("a wonderful , moving film .", 1), ("dull and far too long .", 0), ("the cast is superb .", 1),
           ("a tedious mess .", 0), ("great fun from start to end", 1), ("it is boring", 0)]


@torch.no_grad()
def perturb(model: nn.Module) -> nn.Module:
    """Move every parameter off its initial value, so that a parameter mapped to the wrong place changes
    the outputs."""
    for parameter in model.parameters():
        parameter.add_(0.1 * torch.randn_like(parameter))
    return model


def texts_of(lengths: list[int], length: int, left: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids and attention_mask (B, length): row b holds lengths[b] tokens, [CLS] random ids [SEP], and
    padding on the right (or the left)."""
    generator = torch.Generator().manual_seed(len(lengths))
    input_ids = torch.full((len(lengths), length), PAD)
    attention_mask = torch.zeros(len(lengths), length, dtype=torch.long)
    for row, n in enumerate(lengths):
        tokens = torch.cat([torch.tensor([2]), torch.randint(5, TINY["vocab_size"], (n - 2,), generator=generator),
                            torch.tensor([SEP])])
        where = slice(length - n, length) if left else slice(0, n)
        input_ids[row, where], attention_mask[row, where] = tokens, 1
    return input_ids, attention_mask


@pytest.fixture
def hf_classifier(tmp_path):
    """A random Hugging Face GPT2ForSequenceClassification of 3 labels, saved into tmp_path / "hf"."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(**TINY, num_labels=3, attn_implementation="eager")
    model = perturb(transformers.GPT2ForSequenceClassification(config)).eval()
    model.save_pretrained(tmp_path / "hf")
    return model


@pytest.fixture
def classifier():
    torch.manual_seed(0)
    return perturb(GPTForSequenceClassification(GPTConfig(**TINY), num_labels=3)).eval()


# --------------------------------------------------------------------------------------------------
# The last token, and Hugging Face parity both ways
# --------------------------------------------------------------------------------------------------


def test_the_last_token_is_the_rightmost_that_is_not_padding():
    right, _ = texts_of([5, 8, 3], 8)  # row 1 has no padding
    assert last_token_positions(right, PAD).tolist() == [4, 7, 2]
    left, _ = texts_of([5, 8, 3], 8, left=True)
    assert last_token_positions(left, PAD).tolist() == [7, 7, 7]
    assert last_token_positions(torch.full((1, 4), PAD), PAD).tolist() == [0]  # padding alone: position 0
    assert last_token_positions(right[:1], None).tolist() == [7]  # no pad id: one row, its last position
    with pytest.raises(ValueError, match="a batch of 3 rows needs the config's pad_token_id"):
        last_token_positions(right, None)


def test_last_pooling_reads_the_sep_of_each_course_tokenized_text():
    """The course tokenizer pads on the right: the last token that is not [PAD] is each text's [SEP]."""
    tokenizer = BertTokenizer(COURSE_BERT_FOLDER / "vocab.txt")
    batch = next(iter(SentimentBatches([text for text, _ in REVIEWS], tokenizer, batch_size=len(REVIEWS))))
    last = last_token_positions(batch["input_ids"], tokenizer.pad_token_id)
    assert (batch["input_ids"][torch.arange(len(REVIEWS)), last] == tokenizer.sep_token_id).all()
    assert (last == batch["attention_mask"].sum(dim=1) - 1).all()


@pytest.mark.parametrize("left", [False, True], ids=["right padding", "left padding"])
def test_hugging_face_classifier_loads_with_equal_logits_and_loss(hf_classifier, tmp_path, left):
    ours = GPTForSequenceClassification.from_pretrained(tmp_path / "hf")
    assert ours.num_labels == 3 and not ours.training
    input_ids, attention_mask = texts_of([5, 9, 2, 7], 9, left=left)  # row 1 without padding
    labels = torch.tensor([0, 2, 1, 2])
    with torch.no_grad():
        got = ours(input_ids, attention_mask=attention_mask, labels=labels)
        expected = hf_classifier(input_ids, attention_mask=attention_mask, labels=labels)
    torch.testing.assert_close(got.logits, expected.logits, atol=ATOL, rtol=0)
    assert got.loss.item() == pytest.approx(expected.loss.item(), abs=ATOL)


def test_saved_classifier_loads_in_hugging_face_with_equal_logits(classifier, tmp_path):
    classifier.save_pretrained(tmp_path / "ours")
    config = json.loads((tmp_path / "ours" / "config.json").read_text())
    assert config["architectures"] == ["GPT2ForSequenceClassification"] and len(config["id2label"]) == 3
    theirs = transformers.GPT2ForSequenceClassification.from_pretrained(tmp_path / "ours",
                                                                          attn_implementation="eager").eval()
    assert theirs.num_labels == 3 and theirs.config.pad_token_id == PAD and theirs.score.bias is None
    input_ids, attention_mask = texts_of([4, 9, 6], 9)
    with torch.no_grad():
        torch.testing.assert_close(theirs(input_ids, attention_mask=attention_mask).logits,
                                   classifier(input_ids, attention_mask=attention_mask).logits, atol=ATOL, rtol=0)
    reloaded = GPTForSequenceClassification.from_pretrained(tmp_path / "ours")
    for name, tensor in classifier.state_dict().items():
        torch.testing.assert_close(reloaded.state_dict()[name], tensor, atol=0, rtol=0, msg=name)


def test_token_types_are_ignored(classifier):
    """GPT has no segments: the batches' token_type_ids (0s, or 0s then 1s for a pair) change nothing."""
    input_ids, attention_mask = texts_of([6, 9], 9)
    token_type_ids = (torch.arange(9) >= 4).long().expand(2, 9)
    with torch.no_grad():
        torch.testing.assert_close(classifier(input_ids, attention_mask, token_type_ids=token_type_ids).logits,
                                   classifier(input_ids, attention_mask).logits, atol=0, rtol=0)


# --------------------------------------------------------------------------------------------------
# Mean pooling, and the head of a language model's folder
# --------------------------------------------------------------------------------------------------


def test_mean_pooling_is_the_mean_of_the_final_states_over_the_real_tokens(classifier, tmp_path):
    mean = GPTForSequenceClassification(GPTConfig(**TINY, classifier_pooling="mean"), num_labels=3).eval()
    mean.load_state_dict(classifier.state_dict())
    mean.save_pretrained(tmp_path / "mean")
    assert json.loads((tmp_path / "mean" / "config.json").read_text())["classifier_pooling"] == "mean"
    assert GPTForSequenceClassification.from_pretrained(tmp_path / "mean").config.classifier_pooling == "mean"
    # by hand, from Hugging Face's decoder: each row's final states (after ln_f) averaged over its tokens
    decoder = transformers.GPT2Model.from_pretrained(tmp_path / "mean", attn_implementation="eager").eval()
    lengths = [4, 9, 6]
    input_ids, attention_mask = texts_of(lengths, 9)
    with torch.no_grad():
        got = mean(input_ids, attention_mask).logits
        for row, n in enumerate(lengths):
            states = decoder(input_ids[row:row + 1, :n]).last_hidden_state[0]  # (n, C), the row alone
            expected = sum(states[i] for i in range(n)) / n @ mean.score.weight.T
            torch.testing.assert_close(got[row], expected, atol=ATOL, rtol=0)


@pytest.mark.parametrize("pooling", ["last", "mean"])
def test_right_padding_leaves_the_logits_unchanged(classifier, pooling):
    model = GPTForSequenceClassification(GPTConfig(**TINY, classifier_pooling=pooling), num_labels=3).eval()
    model.load_state_dict(classifier.state_dict())
    lengths = [4, 9, 6]
    input_ids, attention_mask = texts_of(lengths, 9)
    with torch.no_grad():
        batched = model(input_ids, attention_mask).logits
        for row, n in enumerate(lengths):
            torch.testing.assert_close(batched[row], model(input_ids[row:row + 1, :n]).logits[0], atol=ATOL, rtol=0)


@pytest.mark.parametrize("writer", ["ours", "transformers"])
def test_a_language_model_folder_gives_a_classifier_with_a_new_head_and_says_so(tmp_path, writer):
    torch.manual_seed(0)
    if writer == "ours":
        language_model = perturb(GPTLMHeadModel(GPTConfig(**TINY)))
    else:
        language_model = perturb(transformers.GPT2LMHeadModel(transformers.GPT2Config(**TINY)))
    language_model.save_pretrained(tmp_path / "lm")
    with pytest.warns(UserWarning, match=r"has no \['score.weight'\]: newly initialized"):
        classifier = GPTForSequenceClassification.from_pretrained(tmp_path / "lm", num_labels=4)
    assert classifier.num_labels == 4 and classifier.score.weight.shape == (4, TINY["n_embd"])
    assert 0 < classifier.score.weight.std() < 0.1  # drawn as GPT-2 draws a linear layer, std 0.02
    decoder = language_model.transformer.state_dict()
    for name, tensor in classifier.transformer.state_dict().items():
        conv1d = writer == "transformers" and name.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight"))
        torch.testing.assert_close(tensor, decoder[name].t() if conv1d else decoder[name], atol=0, rtol=0, msg=name)


def test_loading_refuses_a_decoder_that_is_missing_or_a_config_that_is_not(classifier, hf_classifier):
    state = hf_classifier.state_dict()
    with pytest.raises(ValueError, match=r"missing keys \['transformer.ln_f.weight'\]"):
        classifier.load_hf_state_dict({key: value for key, value in state.items() if key != "transformer.ln_f.weight"})
    with pytest.raises(ValueError, match="unknown classifier_pooling 'max'"):
        GPTConfig(**TINY, classifier_pooling="max")
    with pytest.raises(ValueError, match="num_labels must be an integer >= 2"):
        GPTForSequenceClassification(GPTConfig(**TINY), num_labels=1)


# --------------------------------------------------------------------------------------------------
# The GPT in the fine-tuning path
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer():
    return BertTokenizer(COURSE_BERT_FOLDER / "vocab.txt")


def course_gpt_config(**overrides) -> GPTConfig:
    """A tiny GPT over the course vocabulary, [CLS] its start, [SEP] its end and [PAD] its padding."""
    return GPTConfig.preset("course", n_layer=NUM_LAYERS, n_embd=32, n_head=2, n_positions=64, resid_pdrop=0.0,
                            embd_pdrop=0.0, attn_pdrop=0.0, **overrides)


def test_task_model_builds_the_gpt_of_a_config_or_a_folder_and_refuses_per_token_tasks(tmp_path):
    config = course_gpt_config()
    model = task_model(finetuning.SENTENCES, config, None)
    assert isinstance(model, GPTForSequenceClassification) and model.num_labels == 2
    pairs = task_model(PAIRS, config, LabelVocabulary(("entailment", "neutral", "contradiction")))
    assert isinstance(pairs, GPTForSequenceClassification) and pairs.num_labels == 3
    GPTLMHeadModel(config).save_pretrained(tmp_path / "gpt")
    assert model_family(tmp_path / "gpt").name == "GPT"
    with pytest.warns(UserWarning, match="newly initialized"):
        assert isinstance(task_model(finetuning.SENTENCES, tmp_path / "gpt", None), GPTForSequenceClassification)
    for task in (TAGGING, SPANS):
        message = f"bertlab has no GPT for the {task.name} task.*{task.model_class.__name__}"
        with pytest.raises(ValueError, match=message):
            task_model(task, config, None)


def test_finetune_task_trains_a_gpt_and_evaluates_it(tokenizer, tmp_path):
    torch.manual_seed(0)
    model = task_model(finetuning.SENTENCES, course_gpt_config(), None)
    recipe = FineTuningRecipe(epochs=30, batch_size=len(REVIEWS), encoder_lr=3e-3, warmup_ratio=0.0, seed=0)
    history = finetune_task(finetuning.SENTENCES, model, tokenizer, REVIEWS, REVIEWS, recipe, device="cpu",
                            progress=False, output_dir=tmp_path, precision="float32")
    assert history[-1]["train_loss"] < 0.25 * history[0]["train_loss"]
    assert history[-1]["dev_accuracy"] == 1.0
    scores = evaluate_task(finetuning.SENTENCES, model, tokenizer, REVIEWS, device="cpu", precision="float32")
    assert set(scores) == {"accuracy", "macro_f1", "loss"}
    assert scores == pytest.approx({name[len("dev_"):]: value for name, value in history[-1].items()
                                    if name.startswith("dev_")}, rel=1e-4)
    per_example = task_example_scores(finetuning.SENTENCES, model, tokenizer, REVIEWS, device="cpu",
                                      precision="float32")
    assert per_example == ExampleScores([1] * len(REVIEWS))
    reloaded = GPTForSequenceClassification.from_pretrained(tmp_path)  # finetune_task's output_dir
    assert evaluate_task(finetuning.SENTENCES, reloaded, tokenizer, REVIEWS, device="cpu",
                         precision="float32") == pytest.approx(scores, rel=1e-4)


def test_fine_tuning_a_gpt_runs_on_the_device(tokenizer, device):
    """On CUDA in its "auto" precision (bf16): the dev scores of the last epoch are evaluate_task's."""
    torch.manual_seed(0)
    model = task_model(finetuning.SENTENCES, course_gpt_config(), None)
    recipe = FineTuningRecipe(epochs=2, batch_size=2, max_length=32)
    history = finetune_task(finetuning.SENTENCES, model, tokenizer, REVIEWS, REVIEWS, recipe, device=device,
                            progress=False)
    assert next(model.parameters()).device.type == device.type
    assert evaluate_task(finetuning.SENTENCES, model, tokenizer, REVIEWS, max_length=32) == \
        pytest.approx({name[len("dev_"):]: value for name, value in history[-1].items() if name.startswith("dev_")})


def test_the_scores_of_each_example_of_an_untrained_gpt_make_its_accuracy(tokenizer):
    torch.manual_seed(3)
    model = task_model(finetuning.SENTENCES, course_gpt_config(), None)
    per_example = task_example_scores(finetuning.SENTENCES, model, tokenizer, REVIEWS, batch_size=4, device="cpu",
                                      precision="float32")
    with torch.no_grad():  # by hand: the argmax of each text's logits, alone
        alone = [int(model(**{name: tensor for name, tensor in
                              tokenizer.batch_encode([text], return_tensors="pt").items()
                              if name in ("input_ids", "attention_mask")}).logits.argmax()) == label
                 for text, label in REVIEWS]
    assert per_example.scores == [int(right) for right in alone]
    accuracy = evaluate_task(finetuning.SENTENCES, model, tokenizer, REVIEWS, device="cpu", precision="float32")
    assert accuracy["accuracy"] == pytest.approx(sum(alone) / len(REVIEWS))


def test_a_gpt_fine_tunes_on_sentence_pairs(tokenizer):
    pairs = [SentencePair("A man plays a guitar.", "A man makes music.", 0),
             SentencePair("A man plays a guitar.", "The man is asleep.", 2),
             SentencePair("Two dogs run outside.", "Animals are outside.", 0),
             SentencePair("Two dogs run outside.", "The dogs sleep indoors.", 2)]
    labels = PAIRS.labels(pairs)
    torch.manual_seed(0)
    model = task_model(PAIRS, course_gpt_config(), labels)
    recipe = FineTuningRecipe(epochs=2, batch_size=2, max_length=32)
    history = finetune_task(PAIRS, model, tokenizer, pairs, pairs, recipe, labels=labels, device="cpu",
                            progress=False, precision="float32")
    assert set(history[-1]) == {"epoch", "train_loss", "dev_accuracy", "dev_macro_f1", "dev_loss"}


def test_the_learning_rate_of_a_gpt_is_chosen_on_dev(tokenizer):
    def train_with(lr: float) -> nn.Module:
        torch.manual_seed(0)
        model = task_model(finetuning.SENTENCES, course_gpt_config(), None)
        recipe = FineTuningRecipe(epochs=5, batch_size=len(REVIEWS), encoder_lr=lr, warmup_ratio=0.0)
        finetune_task(finetuning.SENTENCES, model, tokenizer, REVIEWS, recipe=recipe, device="cpu", progress=False,
                      precision="float32")
        return model

    run = choose_learning_rate(train_with, [1e-9, 3e-3], tokenizer, REVIEWS, task=finetuning.SENTENCES,
                               precision="float32")
    assert isinstance(run.model, GPTForSequenceClassification) and run.metric == "accuracy"
    assert set(run.dev_score_by_learning_rate) == {1e-9, 3e-3} and run.learning_rate == 3e-3


# --------------------------------------------------------------------------------------------------
# Which weights train, and how fast
# --------------------------------------------------------------------------------------------------


def block_of(name: str) -> int | None:
    """The block l of ``transformer.h.<l>.…``, else None."""
    parts = name.split(".")
    return int(parts[2]) if parts[:2] == ["transformer", "h"] else None


def test_param_groups_of_a_gpt_cover_each_parameter_once_with_the_documented_rates():
    model = GPTForSequenceClassification(course_gpt_config())
    encoder_lr, head_lr, decay, xi = 1e-4, 1e-3, 0.01, 0.5
    groups = param_groups(model, encoder_lr, head_lr, decay, layer_decay=xi)
    ids = [id(p) for group in groups for p in group["params"]]
    names = {id(p): name for name, p in model.named_parameters()}
    assert len(ids) == len(set(ids)) and set(ids) == set(names)
    for group in groups:
        for parameter in group["params"]:
            name = names[id(parameter)]
            if name.startswith(("transformer.wte.", "transformer.wpe.")):
                expected_lr = encoder_lr * xi**NUM_LAYERS
            elif block_of(name) is not None:
                expected_lr = encoder_lr * xi ** (NUM_LAYERS - 1 - block_of(name))
            elif name.startswith("transformer.ln_f."):
                expected_lr = encoder_lr
            else:
                assert name == "score.weight", name
                expected_lr = head_lr
            assert group["lr"] == pytest.approx(expected_lr), name
            no_decay = name.endswith(".bias") or ".ln_" in name  # biases and LayerNorms, by name
            assert group["weight_decay"] == (0.0 if no_decay else decay), name


def test_freeze_layers_of_a_gpt_freezes_its_embeddings_and_lower_blocks():
    model = freeze_layers(GPTForSequenceClassification(course_gpt_config()), 1)
    for name, parameter in model.named_parameters():
        frozen = name.startswith(("transformer.wte.", "transformer.wpe.", "transformer.h.0."))
        assert parameter.requires_grad != frozen, name
    grouped = {id(p) for group in param_groups(model, 1e-4, 1e-4, 0.01) for p in group["params"]}
    assert grouped == {id(p) for p in model.parameters() if p.requires_grad}


# --------------------------------------------------------------------------------------------------
# bertlab finetune --model GPT_FOLDER
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def gpt_folder(tmp_path):
    """A random tiny course-vocabulary GPT language model, saved with the course BERT's vocabulary."""
    torch.manual_seed(0)
    folder = GPTLMHeadModel(course_gpt_config()).save_pretrained(tmp_path / "gpt")
    for name in ("vocab.txt", "tokenizer_config.json"):
        (folder / name).write_bytes((COURSE_BERT_FOLDER / name).read_bytes())
    return folder


def test_finetune_command_fine_tunes_a_gpt_folder(gpt_folder, tmp_path, capsys):
    status, out, err = run_cli(capsys, "finetune", "--model", gpt_folder, "--dataset", "synthetic",
                               "--max-train-examples", "32", "--max-eval-examples", "32", "--epochs", "1",
                               "--batch-size", "16", "--lr", "1e-3", "--freeze", "1", "--no-progress",
                               "--device", "cpu", "--output", tmp_path / "out")
    assert status == 0, err
    assert "note: " in out and "['score.weight']: newly initialized" in out
    assert f"model: {gpt_folder} ({NUM_LAYERS} layers, hidden size 32)" in out
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["max_length"] == 64 and 0 <= results["test"]["accuracy"] <= 1  # within the GPT's 64 positions
    tuned = GPTForSequenceClassification.from_pretrained(tmp_path / "out")
    pretrained = GPTLMHeadModel.from_pretrained(gpt_folder).transformer.state_dict()
    for name, tensor in tuned.transformer.state_dict().items():  # --freeze 1: embeddings and block 0 unchanged
        frozen = name.startswith(("wte.", "wpe.", "h.0."))
        assert torch.equal(tensor, pretrained[name]) == frozen, name
    assert transformers.GPT2ForSequenceClassification.from_pretrained(tmp_path / "out").num_labels == 2


@pytest.mark.parametrize("task", ["tagging", "spans"])
def test_finetune_command_refuses_a_gpt_for_per_token_tasks(gpt_folder, tmp_path, capsys, task):
    status, _, err = run_cli(capsys, "finetune", "--model", gpt_folder, "--task", task, "--data-root", tmp_path,
                             "--device", "cpu", "--output", tmp_path / "out")
    assert status == 2 and err.count("\n") == 1
    assert f"--model {gpt_folder} is a GPT: bertlab has no GPT for the {task} task" in err


# --------------------------------------------------------------------------------------------------
# The course BERT against the course GPT on MR (benchmarks/bert_vs_gpt.py)
# --------------------------------------------------------------------------------------------------


def test_the_bert_against_gpt_benchmark_chooses_each_model_s_text_vector_and_rate_on_dev(tmp_path, capsys):
    out = tmp_path / "bert-vs-gpt.json"
    small = small_bert_vs_gpt(tmp_path, out)
    bert_vs_gpt, arguments, bert_folder, gpt_folder = small.script, small.arguments, small.bert_folder, small.gpt_folder
    assert bert_vs_gpt.main(arguments) == 0
    record = json.loads(out.read_text())
    for model in bert_vs_gpt.MODELS:
        result = record["models"][model.name]
        searched = result["dev_search"]
        assert set(searched) == set(model.poolings)  # both text vectors tried on dev
        assert result["pooling"] == max(model.poolings, key=lambda name: searched[name]["dev_accuracy"])
        assert len(result["by_seed"]) == 2 and "test_correct_by_seed" not in result  # kept in the stages only
    bert = record["bert_over_gpt"]  # one test, both directions: "GPT above BERT" is its reverse
    assert bert["examples"] == 6 and "gpt_over_bert" not in record
    assert not (bert["significant"] and bert["reverse_significant"])
    assert record["folders"] == {"course BERT": str(bert_folder), "course GPT": str(gpt_folder)}
    assert bert["difference"] == pytest.approx(100 * (record["models"]["course BERT"]["mean"]
                                                     - record["models"]["course GPT"]["mean"]))
    assert "BERT - GPT" in out.with_suffix(".md").read_text()
    stages = json.loads((tmp_path / "work" / "stages.json").read_text())["stages"]
    assert len(stages) == 2 * 2 + 2  # per model: a search per text vector, then the other seeds
    capsys.readouterr()
    assert bert_vs_gpt.main(arguments) == 0
    assert capsys.readouterr().out.count("finished by an earlier run") == 6  # resumed: nothing trained again
    assert json.loads(out.read_text())["models"] == record["models"]
