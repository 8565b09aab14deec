"""Tests of bertlab.bert against Hugging Face ``transformers`` BERT (tiny random models, no downloads)."""

import json
from operator import attrgetter, itemgetter

import pytest
import torch
from torch import nn

from bertlab.bert import (
    PRESETS,
    BertConfig,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
    count_parameters,
    hf_parameter_name,
    load_hf_state_dict,
)
from bertlab.positional import sinusoidal_positional_encoding
from bertlab.utils import autocast

transformers = pytest.importorskip("transformers")

TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
            max_position_embeddings=64, type_vocab_size=2)
ATOL = 1e-5


def hf_config(**overrides):
    return transformers.BertConfig(**{**TINY, **overrides}, attn_implementation="eager")


@torch.no_grad()
def perturb(model: nn.Module) -> nn.Module:
    """Move every parameter off its initial value (biases 0, LayerNorm 1/0), so that a parameter
    mapped to the wrong place changes the outputs."""
    for parameter in model.parameters():
        parameter.add_(0.1 * torch.randn_like(parameter))
    return model


def save_hf(model_class, folder, **overrides):
    """A random Hugging Face model of ``model_class``, saved with its ``save_pretrained``, in eval mode."""
    model = perturb(model_class(hf_config(**overrides))).eval()
    model.save_pretrained(folder)
    return model


@pytest.fixture
def batch():
    """Three sequences of length 10 with padding (attention_mask 0) and both segment ids."""
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(1, TINY["vocab_size"], (3, 10), generator=generator)
    token_type_ids = torch.zeros(3, 10, dtype=torch.long)
    token_type_ids[:, 5:] = 1
    attention_mask = torch.ones(3, 10, dtype=torch.long)
    attention_mask[1, 7:] = 0
    attention_mask[2, 4:] = 0
    input_ids[attention_mask == 0] = 0
    return dict(input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask)


def assert_close(actual, expected):
    torch.testing.assert_close(actual, expected, atol=ATOL, rtol=0)


# --------------------------------------------------------------------------------------------------
# Configuration and parameter counts


def test_presets_have_the_published_shapes():
    for name, (layers, hidden, heads) in PRESETS.items():
        config = BertConfig.preset(name)
        assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == (layers, hidden, heads)
        assert config.intermediate_size == 4 * hidden
    assert BertConfig.preset("mini", vocab_size=1000).vocab_size == 1000
    assert BertConfig() == BertConfig.preset("base")  # the defaults are BERT-base


def test_config_errors_are_clear():
    with pytest.raises(ValueError, match="tiny.*mini.*small.*medium.*base.*large"):
        BertConfig.preset("huge")
    with pytest.raises(ValueError, match="unknown BertConfig field"):
        BertConfig.preset("tiny", hidden_units=3)
    with pytest.raises(ValueError, match=r"hidden_size \(100\) must be divisible by num_attention_heads \(3\)"):
        BertConfig(hidden_size=100, num_attention_heads=3)
    with pytest.raises(ValueError, match="position_embedding_type"):
        BertConfig(position_embedding_type="relative_key")
    with pytest.raises(ValueError, match="hidden_act"):
        BertConfig(hidden_act="tanh")
    with pytest.raises(ValueError, match="vocab_size"):
        BertConfig(vocab_size=0)


def test_config_json_round_trip_with_hugging_face(tmp_path):
    config = BertConfig.preset("tiny", vocab_size=500, hidden_act="gelu_tanh")
    config.save(tmp_path / "ours")
    assert BertConfig.load(tmp_path / "ours") == config
    theirs = transformers.BertConfig.from_pretrained(tmp_path / "ours")
    assert (theirs.hidden_size, theirs.num_hidden_layers, theirs.vocab_size) == (128, 2, 500)
    assert theirs.hidden_act == "gelu_pytorch_tanh"
    # and back: a Hugging Face config.json (with keys we do not use and "absolute" positions)
    hf_config(hidden_act="gelu_new").save_pretrained(tmp_path / "theirs")
    values = json.loads((tmp_path / "theirs" / "config.json").read_text())
    values["position_embedding_type"] = "absolute"
    loaded = BertConfig.from_dict(values)
    assert loaded == BertConfig(**TINY, hidden_act="gelu_tanh", position_embedding_type="learned")
    with pytest.raises(FileNotFoundError, match="config.json"):
        BertConfig.load(tmp_path / "nowhere")


@pytest.mark.parametrize("name", ["tiny", "mini", "small", "medium"])
def test_count_parameters_equals_the_built_model(name):
    config = BertConfig.preset(name)
    model = BertModel(config)
    assert count_parameters(config) == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", list(PRESETS))
def test_count_parameters_equals_hugging_face_and_published_sizes(name):
    published = {"tiny": 4.4, "mini": 11.2, "small": 28.8, "medium": 41.4, "base": 109.5, "large": 335.1}  # millions
    config = BertConfig.preset(name)
    with torch.device("meta"):
        ours = BertModel(config)
        theirs = transformers.BertModel(transformers.BertConfig(**config.to_dict()))
    count = count_parameters(config)
    assert count == sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())
    assert round(count / 1e6, 1) == published[name]


def test_count_parameters_without_pooler_and_with_sinusoids():
    sinusoidal = BertConfig(**TINY, position_embedding_type="sinusoidal")
    for config, pooler in [(BertConfig(**TINY), False), (sinusoidal, True)]:
        model = BertModel(config, add_pooling_layer=pooler)
        assert count_parameters(config, pooler=pooler) == sum(p.numel() for p in model.parameters())
    assert count_parameters(BertConfig(**TINY)) - count_parameters(BertConfig(**TINY), pooler=False) == 32 * 32 + 32


# --------------------------------------------------------------------------------------------------
# Same outputs as Hugging Face on the same weights


@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_new"])
def test_bert_model_matches_hugging_face(tmp_path, batch, hidden_act):
    theirs = save_hf(transformers.BertModel, tmp_path, hidden_act=hidden_act)
    ours = BertModel.from_pretrained(tmp_path)
    assert not ours.training
    with torch.no_grad():
        expected = theirs(**batch)
        sequence_output, pooled_output = ours(**batch)
    assert_close(sequence_output, expected.last_hidden_state)
    assert_close(pooled_output, expected.pooler_output)


def test_attention_weights_match_hugging_face(tmp_path, batch):
    theirs = save_hf(transformers.BertModel, tmp_path)
    ours = BertModel.from_pretrained(tmp_path)
    with torch.no_grad():
        expected = theirs(**batch, output_attentions=True)
        sequence_output, _, attentions = ours(**batch, output_attentions=True)
    assert len(attentions) == TINY["num_hidden_layers"]
    for weights, expected_weights in zip(attentions, expected.attentions):
        assert weights.shape == (3, TINY["num_attention_heads"], 10, 10)
        assert_close(weights, expected_weights)
    assert_close(sequence_output, expected.last_hidden_state)
    assert torch.all(attentions[0][2, :, :, 4:] == 0)  # padding keys get no weight


def test_pretraining_model_and_losses_match_hugging_face(tmp_path, batch):
    theirs = save_hf(transformers.BertForPreTraining, tmp_path)
    ours = BertForPreTraining.from_pretrained(tmp_path)
    mlm_labels = torch.full_like(batch["input_ids"], -100)
    mlm_labels[:, 1:6:2] = batch["input_ids"][:, 1:6:2]
    nsp_labels = torch.tensor([0, 1, 1])
    with torch.no_grad():
        expected = theirs(**batch, labels=mlm_labels, next_sentence_label=nsp_labels)
        output = ours(**batch, mlm_labels=mlm_labels, nsp_labels=nsp_labels)
        mlm_only = ours(**batch, mlm_labels=mlm_labels)
        expected_mlm = transformers.BertForMaskedLM.from_pretrained(tmp_path, attn_implementation="eager").eval()(
            **batch, labels=mlm_labels
        )
        no_labels = ours(**batch)
    assert_close(output.mlm_logits, expected.prediction_logits)
    assert_close(output.nsp_logits, expected.seq_relationship_logits)
    assert_close(output.loss, expected.loss)
    assert_close(mlm_only.loss, expected_mlm.loss)
    assert mlm_only.nsp_loss is None and torch.equal(mlm_only.loss, mlm_only.mlm_loss)
    assert no_labels.loss is None and no_labels.mlm_loss is None

    # The MLM head at the labelled positions only (BERT's masked_lm_positions): the same loss.
    with torch.no_grad():
        labelled_only = ours(**batch, mlm_labels=mlm_labels, nsp_labels=nsp_labels, predict_labelled_only=True)
    chosen = mlm_labels != -100
    assert labelled_only.mlm_logits.shape == (int(chosen.sum()), TINY["vocab_size"])
    assert_close(labelled_only.mlm_logits, expected.prediction_logits[chosen])
    assert torch.equal(labelled_only.mlm_targets, mlm_labels[chosen])
    assert_close(labelled_only.loss, expected.loss)
    with pytest.raises(ValueError, match="predict_labelled_only needs mlm_labels"):
        ours(**batch, predict_labelled_only=True)


def test_sequence_classification_matches_hugging_face(tmp_path, batch):
    theirs = save_hf(transformers.BertForSequenceClassification, tmp_path, num_labels=3)
    ours = BertForSequenceClassification.from_pretrained(tmp_path)
    assert ours.num_labels == 3
    labels = torch.tensor([0, 2, 1])
    with torch.no_grad():
        expected = theirs(**batch, labels=labels)
        output = ours(**batch, labels=labels)
    assert_close(output.logits, expected.logits)
    assert_close(output.loss, expected.loss)
    assert ours(**batch).loss is None


def test_token_classification_matches_hugging_face(tmp_path, batch):
    """A label per token; the loss skips the positions labelled -100 (later pieces of a word, specials)."""
    theirs = save_hf(transformers.BertForTokenClassification, tmp_path, num_labels=5)
    ours = BertForTokenClassification.from_pretrained(tmp_path)
    assert ours.num_labels == 5 and ours.bert.pooler is None
    labels = torch.randint(0, 5, batch["input_ids"].shape, generator=torch.Generator().manual_seed(2))
    labels[:, 0] = -100
    labels[batch["attention_mask"] == 0] = -100
    with torch.no_grad():
        expected = theirs(**batch, labels=labels)
        output = ours(**batch, labels=labels)
    assert output.logits.shape == (3, 10, 5)
    assert_close(output.logits, expected.logits)
    assert_close(output.loss, expected.loss)
    with pytest.raises(ValueError, match=r"labels must have the shape of input_ids, \(3, 10\), got \(3,\)"):
        ours(**batch, labels=labels[:, 0])


def test_question_answering_matches_hugging_face(tmp_path, batch):
    """Start and end logits per token; the loss averages the two cross-entropies, and a position past the
    sequence (here 12 of 10) is ignored, as in Hugging Face."""
    theirs = save_hf(transformers.BertForQuestionAnswering, tmp_path)
    ours = BertForQuestionAnswering.from_pretrained(tmp_path)
    positions = {"start_positions": torch.tensor([3, 0, 12]), "end_positions": torch.tensor([5, 0, 2])}
    with torch.no_grad():
        expected = theirs(**batch, **positions)
        output = ours(**batch, **positions)
    assert_close(output.start_logits, expected.start_logits)
    assert_close(output.end_logits, expected.end_logits)
    assert_close(output.loss, expected.loss)
    assert ours(**batch).loss is None
    with pytest.raises(ValueError, match="both start_positions and end_positions"):
        ours(**batch, start_positions=positions["start_positions"])


def test_mean_pooling_classifies_the_mean_of_the_real_tokens(tmp_path, batch):
    """With classifier_pooling "mean", v = (1/n) sum_i h_L[i] over the n real tokens: Hugging Face's encoder
    gives h_L; the classifier's own weights give the logits. Padding changes nothing."""
    config = BertConfig(**TINY, classifier_pooling="mean")
    ours = perturb(BertForSequenceClassification(config)).eval()
    ours.save_pretrained(tmp_path)
    encoder = transformers.BertModel.from_pretrained(tmp_path, attn_implementation="eager").eval()
    with torch.no_grad():
        hidden = encoder(**batch).last_hidden_state  # (B, N, H)
        real = batch["attention_mask"].unsqueeze(-1).float()  # (B, N, 1)
        expected = ours.classifier((hidden * real).sum(1) / real.sum(1))
        assert_close(ours(**batch).logits, expected)
        padded = {name: torch.cat([tensor, torch.zeros_like(tensor[:, :3])], dim=1) for name, tensor in batch.items()}
        assert_close(ours(**padded).logits, expected)
    reloaded = BertForSequenceClassification.from_pretrained(tmp_path)
    assert reloaded.config.classifier_pooling == "mean"
    with pytest.raises(ValueError, match="unknown classifier_pooling 'max'"):
        BertConfig(**TINY, classifier_pooling="max")


@pytest.mark.parametrize(
    "our_class, our_output, hf_class, their_output",
    [
        (BertModel, itemgetter(0), "BertModel", "last_hidden_state"),
        (BertForPreTraining, attrgetter("mlm_logits"), "BertForPreTraining", "prediction_logits"),
        (BertForSequenceClassification, attrgetter("logits"), "BertForSequenceClassification", "logits"),
        (BertForTokenClassification, attrgetter("logits"), "BertForTokenClassification", "logits"),
        (BertForQuestionAnswering, attrgetter("start_logits"), "BertForQuestionAnswering", "start_logits"),
        (BertForQuestionAnswering, attrgetter("end_logits"), "BertForQuestionAnswering", "end_logits"),
    ],
)
def test_save_pretrained_is_read_by_hugging_face(tmp_path, batch, our_class, our_output, hf_class, their_output):
    ours = perturb(our_class(BertConfig(**TINY))).eval()
    ours.save_pretrained(tmp_path)
    theirs, info = getattr(transformers, hf_class).from_pretrained(
        tmp_path, attn_implementation="eager", output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    reloaded = our_class.from_pretrained(tmp_path)
    with torch.no_grad():
        output = our_output(ours(**batch))
        assert_close(output, getattr(theirs.eval()(**batch), their_output))
        assert torch.equal(our_output(reloaded(**batch)), output)


def test_pytorch_bin_old_names_and_missing_prefix(tmp_path, batch):
    """An old-style checkpoint: pytorch_model.bin, LayerNorm gamma/beta, no ``bert.`` prefix,
    buffers, and the decoder weight stored a second time."""
    theirs = save_hf(transformers.BertModel, tmp_path / "hf")
    state_dict = {
        key.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): value
        for key, value in theirs.state_dict().items()
    }
    state_dict["embeddings.position_ids"] = torch.arange(TINY["max_position_embeddings"])[None]
    folder = tmp_path / "old"
    folder.mkdir()
    torch.save(state_dict, folder / "pytorch_model.bin")
    (folder / "config.json").write_text((tmp_path / "hf" / "config.json").read_text())
    with torch.no_grad():
        expected = theirs(**batch).last_hidden_state
        assert_close(BertModel.from_pretrained(folder)(**batch)[0], expected)
        # the same weights into a task model (keys gain the ``bert.`` prefix); its heads are new
        with pytest.warns(UserWarning, match="classifier.weight"):
            classifier = BertForSequenceClassification.from_pretrained(folder)
        assert_close(classifier.bert(**batch)[0], expected)


def test_load_hf_state_dict_reports_missing_and_unexpected_keys(tmp_path):
    theirs = perturb(transformers.BertForPreTraining(hf_config()))
    state_dict = dict(theirs.state_dict())
    del state_dict["cls.seq_relationship.weight"]
    state_dict["cls.extra.weight"] = torch.zeros(3)
    model = BertForPreTraining(BertConfig(**TINY))
    word_embeddings = state_dict["bert.embeddings.word_embeddings.weight"]
    with pytest.raises(ValueError, match=r"missing keys \['cls.seq_relationship.weight'\].*cls.extra.weight"):
        load_hf_state_dict(model, state_dict)
    assert not torch.equal(model.bert.embeddings.word_embeddings.weight, word_embeddings)  # nothing copied
    missing, unexpected = load_hf_state_dict(model, state_dict, strict=False)
    assert (missing, unexpected) == (["cls.seq_relationship.weight"], ["cls.extra.weight"])
    assert torch.equal(model.bert.embeddings.word_embeddings.weight, word_embeddings)
    assert torch.equal(model.mlm_head.decoder.bias, state_dict["cls.predictions.bias"])
    state_dict["bert.pooler.dense.weight"] = torch.zeros(5, 5)
    with pytest.raises(ValueError, match=r"bert.pooler.dense.weight has shape \(5, 5\).*\(32, 32\)"):
        load_hf_state_dict(model, state_dict, strict=False)


def test_hf_parameter_names():
    assert hf_parameter_name("encoder.layers.3.ffn.linear1.weight") == "encoder.layer.3.intermediate.dense.weight"
    expected = "bert.encoder.layer.0.attention.output.LayerNorm.bias"
    assert hf_parameter_name("bert.encoder.layers.0.norm1.bias") == expected
    assert hf_parameter_name("mlm_head.decoder.bias") == "cls.predictions.bias"
    our_names = {hf_parameter_name(name) for name in BertForPreTraining(BertConfig(**TINY)).state_dict()}
    their_names = set(transformers.BertForPreTraining(hf_config()).state_dict())
    assert our_names == their_names - {"cls.predictions.decoder.bias"}  # Hugging Face's alias of cls.predictions.bias


def test_from_pretrained_errors_name_the_folder_and_files(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nowhere.*config.json.*model.safetensors.*pytorch_model.bin"):
        BertModel.from_pretrained(tmp_path / "nowhere")
    BertConfig(**TINY).save(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"found: \['config.json'\]"):
        BertModel.from_pretrained(tmp_path)
    # weights of another shape than config.json says
    BertModel(BertConfig(**{**TINY, "hidden_size": 16})).save_pretrained(tmp_path / "other")
    BertConfig(**TINY).save(tmp_path / "other")
    with pytest.raises(ValueError, match="does config.json match the weights"):
        BertModel.from_pretrained(tmp_path / "other")
    values = json.loads((tmp_path / "other" / "config.json").read_text())
    (tmp_path / "other" / "config.json").write_text(json.dumps({**values, "model_type": "roberta"}))
    with pytest.raises(ValueError, match="'roberta' model, not a BERT"):
        BertModel.from_pretrained(tmp_path / "other")
    # corrupt files: errors that name them
    BertModel(BertConfig(**TINY)).save_pretrained(tmp_path / "corrupt")
    weights = tmp_path / "corrupt" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(ValueError, match=r"model\.safetensors is not a readable weights file"):
        BertModel.from_pretrained(tmp_path / "corrupt")
    (tmp_path / "corrupt" / "config.json").write_bytes(b"\xff{")
    with pytest.raises(ValueError, match=r"config\.json is not a JSON configuration"):
        BertModel.from_pretrained(tmp_path / "corrupt")


# --------------------------------------------------------------------------------------------------
# The model's own properties


def test_decoder_is_tied_to_the_word_embeddings(tmp_path, batch):
    model = BertForPreTraining(BertConfig(**TINY))
    embeddings = model.bert.embeddings.word_embeddings.weight
    assert model.mlm_head.decoder.weight is embeddings
    assert model.mlm_head.decoder.bias is not None and model.mlm_head.decoder.bias.shape == (TINY["vocab_size"],)
    # one tensor: a training step moves both, and the count has it once
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    model(**batch, mlm_labels=batch["input_ids"]).loss.backward()
    before = embeddings.detach().clone()
    optimizer.step()
    assert not torch.equal(before, embeddings) and model.mlm_head.decoder.weight is embeddings
    assert sum(p.numel() for p in model.parameters()) == count_parameters(model.config) + (
        32 * 32 + 32 + 2 * 32 + TINY["vocab_size"] + 32 * 2 + 2  # MLM transform, LayerNorm, bias; NSP
    )
    model.save_pretrained(tmp_path)
    reloaded = BertForPreTraining.from_pretrained(tmp_path)
    assert reloaded.mlm_head.decoder.weight is reloaded.bert.embeddings.word_embeddings.weight
    assert torch.equal(reloaded.mlm_head.decoder.weight, embeddings)


def test_initialization_follows_bert():
    config = BertConfig(**{**TINY, "vocab_size": 2000}, initializer_range=0.05)
    model = BertForSequenceClassification(config)
    word = model.bert.embeddings.word_embeddings.weight
    assert torch.all(word[config.pad_token_id] == 0)
    assert abs(word[1:].std().item() - 0.05) < 0.005
    layer = model.bert.encoder.layers[0]
    assert abs(layer.ffn.linear1.weight.std().item() - 0.05) < 0.005
    assert abs(model.classifier.weight.std().item() - 0.05) < 0.02
    for name, parameter in model.named_parameters():
        if name.endswith("bias"):
            assert torch.all(parameter == 0), name
    assert torch.all(layer.norm1.weight == 1) and torch.all(model.bert.embeddings.norm.weight == 1)


def test_dropout_only_in_training(batch):
    model = BertForSequenceClassification(BertConfig(**TINY, hidden_dropout_prob=0.3, attention_probs_dropout_prob=0.3))
    model.train()
    assert not torch.equal(model(**batch).logits, model(**batch).logits)
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(**batch).logits, model(**batch).logits)


def test_padding_does_not_change_the_real_tokens(batch):
    model = BertModel(BertConfig(**TINY)).eval()
    with torch.no_grad():
        padded, pooled = model(**batch)
        alone, pooled_alone = model(batch["input_ids"][2:, :4], batch["token_type_ids"][2:, :4])
    assert_close(padded[2, :4], alone[0])
    assert_close(pooled[2], pooled_alone[0])


def test_sinusoidal_positions_equal_hugging_face_with_the_table_as_weights(tmp_path, batch):
    """A sinusoidal model is a learned model whose position table holds the sinusoids."""
    ours = perturb(BertModel(BertConfig(**TINY, position_embedding_type="sinusoidal"))).eval()
    assert "embeddings.position_encoding" not in ours.state_dict()
    table = sinusoidal_positional_encoding(TINY["max_position_embeddings"], TINY["hidden_size"])
    assert torch.equal(ours.embeddings.position_encoding, table)
    theirs = transformers.BertModel(hf_config()).eval()
    state_dict = {hf_parameter_name(name): value for name, value in ours.state_dict().items()}
    theirs.load_state_dict({**state_dict, "embeddings.position_embeddings.weight": table})
    with torch.no_grad():
        assert_close(ours(**batch)[0], theirs(**batch).last_hidden_state)
    ours.save_pretrained(tmp_path)
    reloaded = BertModel.from_pretrained(tmp_path)
    assert reloaded.config.position_embedding_type == "sinusoidal"
    with torch.no_grad():
        assert torch.equal(reloaded(**batch)[0], ours(**batch)[0])
    # and it trains: gradients reach the embeddings
    ours.train()
    ours(**batch)[1].sum().backward()
    assert ours.embeddings.word_embeddings.weight.grad.abs().sum() > 0


def test_bad_inputs_raise_clear_errors(batch):
    model = BertForPreTraining(BertConfig(**TINY))
    with pytest.raises(ValueError, match="longer than max_position_embeddings=64"):
        model(torch.ones(1, 65, dtype=torch.long))
    with pytest.raises(ValueError, match=r"input_ids must be in \[0, vocab_size=99\), got values from 1 to 99"):
        model(torch.tensor([[1, 99]]))
    with pytest.raises(ValueError, match=r"token_type_ids must be in \[0, type_vocab_size=2\)"):
        model(batch["input_ids"], token_type_ids=torch.full_like(batch["input_ids"], 2))
    with pytest.raises(ValueError, match=r"attention_mask has shape \(3, 9\), but input_ids has shape \(3, 10\)"):
        model(batch["input_ids"], attention_mask=batch["attention_mask"][:, :9])
    with pytest.raises(ValueError, match=r"input_ids must be a \(B, N\) tensor"):
        model(batch["input_ids"][0])
    with pytest.raises(ValueError, match="integer tensor"):
        model(batch["input_ids"].float())
    with pytest.raises(ValueError, match="mlm_labels has shape"):
        model(**batch, mlm_labels=batch["input_ids"][:, :5])
    with pytest.raises(ValueError, match=r"nsp_labels must have shape \(3,\)"):
        model(**batch, nsp_labels=torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="num_labels"):
        BertForSequenceClassification(BertConfig(**TINY), num_labels=1)


def test_gradients_match_hugging_face(tmp_path, batch):
    """Training, not only inference: the same loss gives the same gradients (dropout off)."""
    no_dropout = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    theirs = save_hf(transformers.BertForPreTraining, tmp_path, **no_dropout)
    ours = BertForPreTraining.from_pretrained(tmp_path).train()
    theirs.train()
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    theirs(**batch, labels=labels, next_sentence_label=torch.tensor([0, 1, 0])).loss.backward()
    ours(**batch, mlm_labels=labels, nsp_labels=torch.tensor([0, 1, 0])).loss.backward()
    their_grads = dict(theirs.named_parameters())
    for name, parameter in ours.named_parameters():
        assert_close(parameter.grad, their_grads[hf_parameter_name(name)].grad)


def test_training_steps_lower_the_loss_on_every_device(device, batch):
    """A few AdamW steps on one batch (bf16 autocast on CUDA) fit it: the MLM + NSP loss falls."""
    model = BertForPreTraining(BertConfig(**TINY, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    model.to(device).train()
    inputs = {name: tensor.to(device) for name, tensor in batch.items()}
    mlm_labels = inputs["input_ids"].masked_fill(inputs["attention_mask"] == 0, -100)
    nsp_labels = torch.tensor([0, 1, 0], device=device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(5):
        optimizer.zero_grad()
        with autocast(device):
            loss = model(**inputs, mlm_labels=mlm_labels, nsp_labels=nsp_labels).loss
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0]
    assert model.mlm_head.decoder.weight is model.bert.embeddings.word_embeddings.weight
