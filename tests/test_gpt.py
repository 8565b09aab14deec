"""Tests of bertlab.gpt against Hugging Face ``transformers`` GPT-2 (tiny random models, no downloads)."""

import dataclasses
import json
import math

import pytest
import torch
from safetensors.torch import load_file as load_safetensors
from torch import nn

from bertlab import cli
from bertlab.bert import BertConfig, BertForPreTraining
from bertlab.course_model import COURSE_BERT_FOLDER
from bertlab.data import pretraining_corpus
from bertlab.efficient import kv_cache_bytes
from bertlab.gpt import (
    GPTConfig,
    GPTLMHeadModel,
    KVCache,
    apply_temperature,
    attend_with_cache,
    causal_lm_loss,
    count_gpt_parameters,
    filter_logits,
    generate,
    next_token,
    next_token_nll,
    perplexity,
    top_k_filter,
    top_p_filter,
)
from bertlab.pretraining import PackedSegments, PretrainingDataset, PretrainingRecipe, load_metrics, pretrain
from bertlab.pretraining_data import CausalLMDataset
from bertlab.tokenization import BertTokenizer, train_wordpiece_vocab
from bertlab.utils import cpu_computes_bfloat16
from tests.course_gpt_helpers import export_small_course_gpt
from tests.script_helpers import benchmark_script
from tests.conftest import run_cli

transformers = pytest.importorskip("transformers")
from transformers.generation.logits_process import (  # noqa: E402
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: a second thread only adds contention

TINY = dict(vocab_size=99, n_positions=32, n_embd=32, n_layer=2, n_head=4, n_inner=37, bos_token_id=1,
            eos_token_id=2)
ATOL = 1e-5


@torch.no_grad()
def perturb(model: nn.Module) -> nn.Module:
    """Move every parameter off its initial value (biases 0, LayerNorm 1/0), so that a parameter
    mapped to the wrong place, or not transposed, changes the outputs."""
    for parameter in model.parameters():
        parameter.add_(0.1 * torch.randn_like(parameter))
    return model


@pytest.fixture
def hf_model(tmp_path):
    """A random Hugging Face GPT2LMHeadModel, saved by its own ``save_pretrained`` into tmp_path / "hf"."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(**TINY, attn_implementation="eager")
    model = perturb(transformers.GPT2LMHeadModel(config)).eval()
    model.save_pretrained(tmp_path / "hf")
    return model


@pytest.fixture
def model():
    torch.manual_seed(0)
    return perturb(GPTLMHeadModel(GPTConfig(**TINY))).eval()


@pytest.fixture
def input_ids():
    return torch.randint(0, TINY["vocab_size"], (3, 11), generator=torch.Generator().manual_seed(1))


# --------------------------------------------------------------------------------------------------
# Configuration and size
# --------------------------------------------------------------------------------------------------


def test_config_round_trips_through_hugging_face():
    ours = GPTConfig(**TINY, activation_function="gelu_tanh")
    theirs = transformers.GPT2Config(**ours.to_dict())
    assert theirs.activation_function == "gelu_new" and theirs.n_inner == 37
    assert GPTConfig.from_dict(theirs.to_dict()) == ours
    assert GPTConfig.from_dict(transformers.GPT2Config().to_dict()) == GPTConfig()


@pytest.mark.parametrize("option", [{"scale_attn_weights": False}, {"scale_attn_by_inverse_layer_idx": True},
                                    {"add_cross_attention": True}, {"tie_word_embeddings": False}])
def test_config_refuses_options_it_does_not_implement(option):
    with pytest.raises(ValueError, match=next(iter(option))):
        GPTConfig.from_dict({**TINY, **option})


@pytest.mark.parametrize("fields, match", [
    (dict(n_embd=30, n_head=4), "divisible"), (dict(n_layer=0), "n_layer"), (dict(eos_token_id=99), "eos_token_id"),
    (dict(attn_pdrop=1.0), "attn_pdrop"), (dict(activation_function="tanh"), "activation"),
])
def test_config_rejects_bad_values(fields, match):
    with pytest.raises(ValueError, match=match):
        GPTConfig(**{**TINY, **fields})


def test_count_parameters_matches_the_models(model):
    config = model.config
    assert count_gpt_parameters(config) == sum(parameter.numel() for parameter in model.parameters())
    hf_model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**TINY))
    assert count_gpt_parameters(config) == hf_model.num_parameters()
    assert count_gpt_parameters(GPTConfig()) == 124_439_808  # GPT-2 small


def test_course_gpt_is_the_course_berts_size_class():
    config = GPTConfig.preset("course")
    assert (config.n_layer, config.n_embd, config.n_head, config.inner_size) == (4, 256, 4, 1024)
    assert count_gpt_parameters(config) == 5_387_776
    assert sum(parameter.numel() for parameter in GPTLMHeadModel(config).parameters()) == 5_387_776
    course_bert = BertForPreTraining(BertConfig.load(COURSE_BERT_FOLDER))
    bert_parameters = sum(parameter.numel() for parameter in course_bert.parameters())
    assert bert_parameters == 5_529_090
    assert abs(5_387_776 / bert_parameters - 1) <= 0.10
    tokenizer = BertTokenizer(COURSE_BERT_FOLDER / "vocab.txt")
    assert config.vocab_size == tokenizer.vocab_size == course_bert.config.vocab_size
    assert config.n_positions == course_bert.config.max_position_embeddings
    assert tokenizer.convert_ids_to_tokens([config.bos_token_id, config.eos_token_id, config.pad_token_id]) == [
        "[CLS]", "[SEP]", "[PAD]"]


def test_preset_rejects_unknown_names_and_fields():
    with pytest.raises(ValueError, match="unknown GPT preset"):
        GPTConfig.preset("huge")
    with pytest.raises(ValueError, match="hidden_size"):
        GPTConfig.preset("course", hidden_size=64)
    assert GPTConfig.preset("gpt2") == GPTConfig()


# --------------------------------------------------------------------------------------------------
# Hugging Face parity, both ways
# --------------------------------------------------------------------------------------------------


def test_hugging_face_checkpoint_loads_with_equal_logits(hf_model, tmp_path, input_ids):
    ours = GPTLMHeadModel.from_pretrained(tmp_path / "hf")
    assert not ours.training
    with torch.no_grad():
        torch.testing.assert_close(ours(input_ids).logits, hf_model(input_ids).logits, atol=ATOL, rtol=0)
        assert ours(input_ids, labels=input_ids).loss.item() == pytest.approx(
            hf_model(input_ids, labels=input_ids).loss.item(), abs=ATOL)


def test_saved_folder_loads_in_hugging_face_with_equal_logits(model, tmp_path, input_ids):
    model.save_pretrained(tmp_path / "ours")
    config = json.loads((tmp_path / "ours" / "config.json").read_text())
    assert config["model_type"] == "gpt2" and config["architectures"] == ["GPT2LMHeadModel"]
    theirs = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "ours", attn_implementation="eager").eval()
    with torch.no_grad():
        torch.testing.assert_close(theirs(input_ids).logits, model(input_ids).logits, atol=ATOL, rtol=0)
    hf_state = theirs.state_dict()
    for name, tensor in model.state_dict().items():  # the same names; Conv1D weights transposed
        conv1d = name.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight"))
        torch.testing.assert_close(tensor, hf_state[name].t() if conv1d else hf_state[name], atol=0, rtol=0)
    assert theirs.lm_head.weight.data_ptr() == theirs.transformer.wte.weight.data_ptr()


def test_padding_mask_matches_hugging_face_on_real_tokens(hf_model, tmp_path, input_ids):
    ours = GPTLMHeadModel.from_pretrained(tmp_path / "hf")
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 6:] = 0
    attention_mask[2, 9:] = 0
    with torch.no_grad():
        got = ours(input_ids, attention_mask=attention_mask).logits
        expected = hf_model(input_ids, attention_mask=attention_mask).logits
    real = attention_mask.bool()
    torch.testing.assert_close(got[real], expected[real], atol=ATOL, rtol=0)


def test_openai_style_checkpoint_names_load(hf_model, model, input_ids):
    """OpenAI's released GPT-2 has no ``transformer.`` prefix and stores the causal mask as ``attn.bias``."""
    state = {name.removeprefix("transformer."): tensor for name, tensor in hf_model.state_dict().items()}
    for layer in range(TINY["n_layer"]):
        state[f"h.{layer}.attn.bias"] = torch.ones(1, 1, 32, 32).tril()
    model.load_hf_state_dict(state)
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids).logits, hf_model(input_ids).logits, atol=ATOL, rtol=0)


def test_loading_reports_what_does_not_fit(hf_model, model, tmp_path):
    state = hf_model.state_dict()
    with pytest.raises(ValueError, match="missing keys.*transformer.ln_f.weight"):
        model.load_hf_state_dict({key: value for key, value in state.items() if key != "transformer.ln_f.weight"})
    with pytest.raises(ValueError, match="unexpected keys.*score.weight"):
        model.load_hf_state_dict({**state, "score.weight": torch.zeros(2, 32)})
    with pytest.raises(ValueError, match="transformer.wpe.weight has shape"):
        model.load_hf_state_dict({**state, "transformer.wpe.weight": torch.zeros(16, 32)})
    config = tmp_path / "hf" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "model_type": "bert"}))
    with pytest.raises(ValueError, match="not a GPT-2"):
        GPTLMHeadModel.from_pretrained(tmp_path / "hf")
    with pytest.raises(FileNotFoundError, match="is not a GPT-2 checkpoint folder"):
        GPTLMHeadModel.from_pretrained(tmp_path / "missing")


# --------------------------------------------------------------------------------------------------
# Causal attention and the shifted loss
# --------------------------------------------------------------------------------------------------


def test_a_position_never_sees_the_future(model, input_ids):
    changed = input_ids.clone()
    changed[:, 6:] = (changed[:, 6:] + 1) % TINY["vocab_size"]
    with torch.no_grad():
        before, after = model(input_ids).logits, model(changed).logits
    torch.testing.assert_close(before[:, :6], after[:, :6], atol=0, rtol=0)
    assert not torch.allclose(before[:, 6:], after[:, 6:])


def test_causal_loss_is_the_shifted_mean_over_labelled_positions(hf_model, input_ids):
    logits = torch.randn(3, 11, TINY["vocab_size"], generator=torch.Generator().manual_seed(2))
    labels = input_ids.clone()
    labels[0, 4] = labels[2, 7:] = -100
    terms = [-logits[b, i].log_softmax(-1)[labels[b, i + 1]] for b in range(3) for i in range(10)
             if labels[b, i + 1] != -100]
    assert len(terms) == 30 - 1 - 4
    expected = torch.stack(terms).mean()
    torch.testing.assert_close(causal_lm_loss(logits, labels), expected)
    hf_loss = hf_model.loss_function(logits, labels, TINY["vocab_size"])
    torch.testing.assert_close(causal_lm_loss(logits, labels), hf_loss)
    with pytest.raises(ValueError, match="shape of input_ids"):
        causal_lm_loss(logits, labels[:, 1:])


def test_next_token_nll_gives_the_causal_loss_and_perplexity_equals_torchmetrics(input_ids):
    from torchmetrics.text import Perplexity

    logits = torch.randn(3, 11, TINY["vocab_size"], generator=torch.Generator().manual_seed(3))
    labels = input_ids.clone()
    labels[1, 3] = labels[2, 8:] = -100
    nll, counted = next_token_nll(logits, labels)
    assert nll.shape == counted.shape == (3, 10) and counted.sum() == 30 - 1 - 3
    assert (nll[~counted] == 0).all()
    torch.testing.assert_close(nll[counted].mean(), causal_lm_loss(logits, labels))
    metric = Perplexity(ignore_index=-100)  # predictions at i, targets at i + 1: shifted by hand here
    metric.update(logits[:, :-1], labels[:, 1:])
    torch.testing.assert_close(perplexity(nll, counted), metric.compute())
    assert perplexity(nll, counted) != nll.sum().exp()  # the summed loss is another number


def test_perplexity_of_a_uniform_guess_is_the_vocabulary_size_and_bad_masks_are_refused():
    nll = torch.full((2, 5), math.log(50.0))
    torch.testing.assert_close(perplexity(nll), torch.tensor(50.0))
    with pytest.raises(ValueError, match="shape of nll"):
        perplexity(nll, torch.ones(5, dtype=torch.bool))
    with pytest.raises(ValueError, match="no tokens"):
        perplexity(nll, torch.zeros(2, 5, dtype=torch.bool))


# --------------------------------------------------------------------------------------------------
# The KV cache
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("past", [0, 1, 5, 9])
def test_a_cached_step_is_the_last_rows_of_causal_attention_over_the_whole_sequence(past):
    """PyTorch's causal attention over all 9 positions, its last 9 - past rows: what attend_with_cache
    computes from the first ``past`` keys and values cached."""
    generator = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(2, 3, 9, 4, generator=generator) for _ in range(3))  # (B, H, N, D)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)[..., past:, :]
    output, keys, values = attend_with_cache(q[..., past:, :], k[..., past:, :], v[..., past:, :], k[..., :past, :],
                                             v[..., :past, :])
    torch.testing.assert_close(output, expected)
    assert torch.equal(keys, k) and torch.equal(values, v)


def test_a_cached_step_combines_its_mask_with_the_causal_one():
    generator = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, 2, 6, 4, generator=generator) for _ in range(3))
    real = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])  # (B, M): sequence 1 padded after 4 tokens
    allowed = torch.ones(6, 6, dtype=torch.bool).tril() & real[:, None, None, :]  # (B, 1, N, M)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)[..., 4:, :]
    output, _, _ = attend_with_cache(q[..., 4:, :], k[..., 4:, :], v[..., 4:, :], k[..., :4, :], v[..., :4, :],
                                     real[:, None, None, :])
    torch.testing.assert_close(output, expected)
    with pytest.raises(ValueError, match=r"cache_k \(2, 4, 4\) and cache_v \(2, 4, 4\) must be \(B, H, P, D\)"):
        attend_with_cache(q, k, v, k[0, :, :4], v[0, :, :4])


def test_the_model_attends_through_attend_with_cache(model, input_ids, monkeypatch):
    """Every layer's attention is the function of the exercise, with and without a cache."""
    import bertlab.gpt

    calls = []

    def counted(*args, **kwargs):
        calls.append(args[3].shape[-2])  # P, the cached positions
        return attend_with_cache(*args, **kwargs)

    monkeypatch.setattr(bertlab.gpt, "attend_with_cache", counted)
    cache = KVCache()
    with torch.no_grad():
        model(input_ids)
        model(input_ids[:, :7], cache=cache)
        model(input_ids[:, 7:8], cache=cache)
    assert calls == [0] * TINY["n_layer"] * 2 + [7] * TINY["n_layer"]


@pytest.mark.parametrize("chunks", [(4, 1, 1, 1, 1, 1, 1, 1), (1,) * 11, (5, 3, 1, 2)])
def test_cached_logits_equal_a_full_recompute(model, input_ids, chunks):
    cache = KVCache()
    with torch.no_grad():
        full = model(input_ids).logits  # (B, N, V)
        start = 0
        for size in chunks:
            step = model(input_ids[:, start:start + size], cache=cache)
            assert step.cache is cache and cache.length == start + size
            torch.testing.assert_close(step.logits, full[:, start:start + size], atol=ATOL, rtol=0)
            start += size


def test_cache_shapes_and_size_agree_with_chapter_05(model, input_ids):
    cache = KVCache()
    with torch.no_grad():
        model(input_ids[:, :7], cache=cache)
        model(input_ids[:, 7:8], cache=cache)
    B, H, L, D = 3, TINY["n_head"], TINY["n_layer"], TINY["n_embd"] // TINY["n_head"]
    assert len(cache.keys) == len(cache.values) == L
    assert all(tensor.shape == (B, H, 8, D) for tensor in (*cache.keys, *cache.values))
    assert cache.nbytes == kv_cache_bytes(B, 8, L, H, D, bytes_per_value=4) == 2 * 3 * 8 * 2 * 4 * 8 * 4
    half = KVCache()
    with torch.no_grad():
        model.to(torch.bfloat16)(input_ids, cache=half)
    assert half.nbytes == kv_cache_bytes(B, 11, L, H, D, bytes_per_value=2)


def test_cache_with_padding_equals_a_full_recompute(model, input_ids):
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 8:] = 0
    cache = KVCache()
    with torch.no_grad():
        full = model(input_ids, attention_mask=attention_mask).logits
        prefix = model(input_ids[:, :6], attention_mask=attention_mask[:, :6], cache=cache).logits
        rest = model(input_ids[:, 6:], attention_mask=attention_mask, cache=cache).logits
    real = attention_mask.bool()
    torch.testing.assert_close(torch.cat([prefix, rest], dim=1)[real], full[real], atol=ATOL, rtol=0)


def test_cached_decoding_equals_a_full_recompute_on_device(model, input_ids, device):
    model, input_ids = model.to(device), input_ids.to(device)
    with torch.no_grad():
        full = model(input_ids).logits  # (B, N, V)
        cache = KVCache()
        steps = [model(input_ids[:, :4], cache=cache).logits] + [
            model(input_ids[:, i:i + 1], cache=cache).logits for i in range(4, input_ids.shape[1])]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=ATOL, rtol=0)
    assert cache.keys[0].device.type == device.type


def test_cache_misuse_is_reported(model, input_ids):
    cache = KVCache()
    with torch.no_grad():
        model(input_ids, cache=cache)
        with pytest.raises(ValueError, match="cache holds 3 sequences"):
            model(input_ids[:2, :1], cache=cache)
        with pytest.raises(ValueError, match="exceed n_positions=32"):
            model(torch.zeros(3, 22, dtype=torch.long), cache=cache)
        with pytest.raises(ValueError, match="cover the cached and new positions"):
            model(input_ids[:, :1], attention_mask=torch.ones(3, 1), cache=cache)


# --------------------------------------------------------------------------------------------------
# Sampling
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def logits():
    """Random logits (B, V) with a tie, so that top-k's rule for ties is tested."""
    values = 3 * torch.randn(6, 50, generator=torch.Generator().manual_seed(3))
    values[0, 1] = values[0, 0]
    return values


def assert_same_distribution(got: torch.Tensor, expected: torch.Tensor) -> None:
    assert torch.equal(torch.isinf(got), torch.isinf(expected))  # the same tokens kept
    torch.testing.assert_close(got.softmax(-1), expected.softmax(-1))


@pytest.mark.parametrize("temperature", [0.3, 1.0, 2.5])
def test_temperature_equals_hugging_face(logits, temperature):
    assert_same_distribution(apply_temperature(logits, temperature), TemperatureLogitsWarper(temperature)(None, logits))


@pytest.mark.parametrize("k", [1, 2, 5, 49, 50, 80])
def test_top_k_equals_hugging_face(logits, k):
    assert_same_distribution(top_k_filter(logits, k), TopKLogitsWarper(k)(None, logits))


@pytest.mark.parametrize("p", [0.01, 0.3, 0.5, 0.9, 0.99, 1.0])
def test_top_p_equals_hugging_face(logits, p):
    assert_same_distribution(top_p_filter(logits, p), TopPLogitsWarper(p)(None, logits))


@pytest.mark.parametrize("row, p", [([2.0, 1.0, 1.0, 1.0, 1.0, 0.0], 0.6), ([1.0, 1.0, 1.0, 1.0], 0.5),
                                    ([1.0, 1.0, 1.0, 1.0], 0.6), ([3.0, 1.0, 1.0, 0.0], 0.9)])
def test_top_p_splits_tied_tokens_at_the_edge_as_hugging_face(row, p):
    """Tokens of equal probability on both sides of the nucleus's edge: the same ones are kept."""
    logits = torch.tensor([row])
    assert torch.equal(top_p_filter(logits, p), TopPLogitsWarper(p)(None, logits))


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.7, 0.9])
def test_top_p_equals_hugging_face_on_logits_full_of_ties(p):
    logits = torch.randint(0, 4, (64, 12), generator=torch.Generator().manual_seed(4)).float()  # (B, V)
    assert torch.equal(top_p_filter(logits, p), TopPLogitsWarper(p)(None, logits))


@pytest.mark.parametrize("temperature, k, p", [(0.7, 10, 0.9), (1.5, 3, 0.5), (1.0, 50, 0.8)])
def test_combined_filters_equal_hugging_face(logits, temperature, k, p):
    warpers = LogitsProcessorList([TemperatureLogitsWarper(temperature), TopKLogitsWarper(k), TopPLogitsWarper(p)])
    assert_same_distribution(filter_logits(logits, temperature, k, p), warpers(None, logits))


@pytest.mark.parametrize("p, kept", [(0.5, 1), (0.6, 2), (0.75, 2), (0.76, 3), (1.0, 4)])
def test_top_p_keeps_the_token_that_crosses_p(p, kept):
    logits = torch.tensor([0.5, 0.25, 0.125, 0.125]).log()  # exact binary probabilities
    assert torch.isfinite(top_p_filter(logits, p)).sum().item() == kept


def test_filters_reject_bad_settings(logits):
    for call, match in [(lambda: apply_temperature(logits, 0.0), "temperature"),
                        (lambda: top_k_filter(logits, 0), "top_k"),
                        (lambda: top_p_filter(logits, 0.0), "top_p"), (lambda: top_p_filter(logits, 1.5), "top_p")]:
        with pytest.raises(ValueError, match=match):
            call()


def test_next_token_greedy_and_seeded_sampling(logits):
    assert torch.equal(next_token(logits), logits.argmax(-1))
    assert torch.equal(next_token(logits[1:], do_sample=True, top_k=1), logits[1:].argmax(-1))

    def draw(seed):
        return next_token(logits, do_sample=True, top_p=0.9, generator=torch.Generator().manual_seed(seed))

    assert torch.equal(draw(0), draw(0))
    samples = torch.stack([draw(seed) for seed in range(50)])  # (50, B)
    allowed = torch.isfinite(top_p_filter(logits, 0.9))  # (B, V)
    assert allowed.gather(1, samples.T).all()
    assert len(set(samples[:, 1].tolist())) > 1


# --------------------------------------------------------------------------------------------------
# Generation
# --------------------------------------------------------------------------------------------------


def test_greedy_generation_equals_hugging_face(hf_model, tmp_path, input_ids):
    ours = GPTLMHeadModel.from_pretrained(tmp_path / "hf")
    prompt = input_ids[:, :5]
    expected = hf_model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=12, do_sample=False,
                                 eos_token_id=None, pad_token_id=0)
    torch.testing.assert_close(generate(ours, prompt, 12), expected, atol=0, rtol=0)


@pytest.mark.parametrize("options", [dict(), dict(do_sample=True, temperature=0.8, top_k=20, top_p=0.9)])
def test_cached_generation_equals_recomputing(model, input_ids, options):
    def run(use_cache):
        return generate(model, input_ids[:, :4], 20, use_cache=use_cache, generator=torch.Generator().manual_seed(5),
                        **options)

    tokens = run(True)
    assert tokens.shape == (3, 24) and torch.equal(tokens[:, :4], input_ids[:, :4])
    assert torch.equal(tokens, run(False))


def test_generation_stops_at_the_end_of_text(model, input_ids):
    prompt = input_ids[:, :4]
    free = generate(model, prompt, 10)
    eos = free[0, 6].item()  # the third token row 0 generates, made the end of text
    tokens = generate(model, prompt, 10, eos_token_id=eos)
    assert tokens[0, 6] == eos and (tokens[0, 6:] == eos).all()
    ended = (tokens[:, 4:] == eos).any(dim=1)
    assert tokens.shape[1] == 14 or ended.all()
    for row in range(3):  # up to its end of text, each row is the free continuation
        stop = (tokens[row, 4:] == eos).nonzero()
        end = 4 + (stop[0].item() + 1 if len(stop) else 10)
        assert torch.equal(tokens[row, :end], free[row, :end])


def test_generation_checks_its_length(model, input_ids):
    with pytest.raises(ValueError, match="exceed n_positions=32"):
        generate(model, input_ids, 23)
    assert generate(model, input_ids, 22).shape == (3, 33)
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(model, input_ids, 0)


# --------------------------------------------------------------------------------------------------
# bertlab generate
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def gpt_folder(tmp_path):
    """A random course-vocabulary GPT, saved with the course BERT's vocab.txt and tokenizer_config.json."""
    torch.manual_seed(0)
    config = GPTConfig.preset("course", n_layer=1, n_embd=16, n_head=2, n_positions=64)
    folder = GPTLMHeadModel(config).save_pretrained(tmp_path / "gpt")
    for name in ("vocab.txt", "tokenizer_config.json"):
        (folder / name).write_bytes((COURSE_BERT_FOLDER / name).read_bytes())
    return folder


def test_generate_command_prints_seeded_continuations(gpt_folder, capsys):
    from bertlab.cli import main

    arguments = ["generate", "--model", str(gpt_folder), "--prompt", "This movie was", "--max-new-tokens", "8",
                 "--num-samples", "3", "--top-k", "50", "--top-p", "0.9", "--temperature", "0.8", "--device", "cpu"]
    assert main([*arguments, "--seed", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and all(line.startswith("this movie was") for line in lines)
    assert main([*arguments, "--seed", "1"]) == 0
    assert capsys.readouterr().out.splitlines() == lines
    assert main(["generate", "--model", str(gpt_folder), "--greedy", "--max-new-tokens", "5", "--device", "cpu"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1


def test_generate_command_reports_a_folder_without_a_vocabulary(gpt_folder, capsys):
    from bertlab.cli import main

    (gpt_folder / "vocab.txt").unlink()
    assert main(["generate", "--model", str(gpt_folder), "--device", "cpu"]) == 1
    assert "no vocab.txt" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------
# Pretraining with the causal objective: bertlab.pretraining.pretrain and bertlab pretrain
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus():
    """A slice of the offline pretraining corpus (documents of sentences)."""
    return [document for document in pretraining_corpus() if len(document) >= 5][:8]


@pytest.fixture(scope="module")
def tokenizer(corpus):
    return BertTokenizer(train_wordpiece_vocab([sentence for document in corpus for sentence in document], 400))


def small_gpt(tokenizer, seed: int = 0, dropout: float = 0.1) -> GPTLMHeadModel:
    torch.manual_seed(seed)
    return GPTLMHeadModel(GPTConfig.preset(
        "course", vocab_size=tokenizer.vocab_size, n_layer=2, n_embd=32, n_head=2, n_positions=64,
        bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id, pad_token_id=tokenizer.pad_token_id,
        resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout))


def test_causal_examples_are_the_full_sentence_segments_unmasked(tokenizer, corpus):
    causal = CausalLMDataset(tokenizer, corpus, seq_len=32)
    masked = PretrainingDataset(tokenizer, corpus, seq_len=32, nsp=False)
    assert len(causal) == len(masked)
    assert all(torch.equal(causal[i]["input_ids"], masked[i]["input_ids"]) for i in range(len(causal)))
    items = [causal[i] for i in range(4)]
    batch = causal.collate(items)
    assert set(batch) == {"input_ids", "labels"}
    for row, item in enumerate(items):
        length = len(item["input_ids"])
        assert torch.equal(batch["input_ids"][row, :length], item["input_ids"])
        assert torch.equal(batch["labels"][row, :length], item["input_ids"])
        assert (batch["input_ids"][row, length:] == tokenizer.pad_token_id).all()
        assert (batch["labels"][row, length:] == -100).all()


def test_causal_pretraining_lowers_the_loss_and_writes_a_folder_that_hugging_face_reads(tokenizer, corpus,
                                                                                        tmp_path):
    model = small_gpt(tokenizer)
    steps = 40
    recipe = PretrainingRecipe(max_steps=steps, batch_size=8, seq_len=32, lr=3e-3, warmup_steps=4, log_every=1,
                               objective="causal")
    history = pretrain(model, tokenizer, corpus, recipe, output_dir=tmp_path, progress=False, device="cpu")
    initial, final = history[0]["loss"], sum(record["loss"] for record in history[-5:]) / 5
    assert abs(initial - math.log(tokenizer.vocab_size)) < 0.3  # starts at chance, ln V
    assert final < initial - 0.5, (initial, final)  # perplexity down by 40% and more
    assert sum(record["accuracy"] for record in history[-5:]) / 5 > 10 / tokenizer.vocab_size  # chance is 1 / V
    assert set(history[0]) == {"step", "epoch", "loss", "accuracy", "lr", "tokens_per_second", "seconds"}
    assert [record["step"] for record in history] == list(range(1, steps + 1))
    assert load_metrics(tmp_path / "metrics.jsonl") == history
    settings = json.loads((tmp_path / "pretraining_args.json").read_text())
    assert settings["objective"] == "causal" and not {"masking", "nsp", "mlm_probability"} & set(settings)
    assert (tmp_path / "loss_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "checkpoint.pt").is_file()
    reloaded = GPTLMHeadModel.from_pretrained(tmp_path)
    state = model.state_dict()
    assert all(torch.equal(tensor, state[name]) for name, tensor in reloaded.state_dict().items())
    input_ids = torch.randint(0, tokenizer.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    hf_logits = transformers.GPT2LMHeadModel.from_pretrained(tmp_path).eval()(input_ids).logits
    torch.testing.assert_close(reloaded(input_ids).logits, hf_logits, atol=ATOL, rtol=ATOL)
    assert BertTokenizer(tmp_path / "vocab.txt").tokenize(corpus[0][0]) == tokenizer.tokenize(corpus[0][0])


def test_causal_pretraining_resumes_exactly(tokenizer, corpus, tmp_path):
    recipe = PretrainingRecipe(max_steps=6, batch_size=4, seq_len=32, grad_accum_steps=2, log_every=1,
                               checkpoint_every=3, seed=3, objective="causal")
    arguments = dict(progress=False, device="cpu")
    straight = small_gpt(tokenizer)
    straight_history = pretrain(straight, tokenizer, corpus[:3], recipe, output_dir=tmp_path / "straight", **arguments)
    first_half = pretrain(small_gpt(tokenizer), tokenizer, corpus[:3], recipe, output_dir=tmp_path / "split",
                          stop_at_step=3, **arguments)
    assert [record["step"] for record in first_half] == [1, 2, 3]
    restarted = small_gpt(tokenizer, seed=1)  # a new process: other initial weights, other random state
    torch.manual_seed(123)
    resumed_history = pretrain(restarted, tokenizer, corpus[:3], recipe, output_dir=tmp_path / "split", **arguments)

    def losses(history):
        return [(record["step"], record["loss"], record["accuracy"], record["lr"]) for record in history]

    assert losses(resumed_history) == losses(straight_history)
    straight_state = straight.state_dict()
    assert all(torch.equal(tensor, straight_state[name]) for name, tensor in restarted.state_dict().items())


def test_an_objective_must_fit_the_model_and_the_checkpoint(tokenizer, corpus, tmp_path):
    masked = PretrainingRecipe(max_steps=2, batch_size=4, seq_len=32)
    causal, without_nsp = dataclasses.replace(masked, objective="causal"), dataclasses.replace(masked, nsp=False)
    arguments = dict(progress=False, device="cpu")
    bert = BertForPreTraining(BertConfig.preset("tiny", vocab_size=tokenizer.vocab_size, max_position_embeddings=64))
    with pytest.raises(ValueError, match="a BertForPreTraining does not learn the causal objective"):
        pretrain(bert, tokenizer, corpus[:3], causal, output_dir=tmp_path, **arguments)
    with pytest.raises(ValueError, match="a GPTLMHeadModel does not learn the masked objective"):
        pretrain(small_gpt(tokenizer), tokenizer, corpus[:3], masked, output_dir=tmp_path, **arguments)
    with pytest.raises(ValueError, match="objective must be one of masked, causal, got 'both'"):
        dataclasses.replace(masked, objective="both")
    with pytest.raises(ValueError, match="nsp, mlm_probability: settings of the masked objective"):
        dataclasses.replace(without_nsp, objective="causal", mlm_probability=0.3)
    # a run of one objective does not resume from the checkpoint of the other
    pretrain(small_gpt(tokenizer), tokenizer, corpus[:3], causal, output_dir=tmp_path / "gpt", **arguments)
    with pytest.raises(ValueError, match=r"other settings \(masking None -> 'dynamic'"):
        pretrain(bert, tokenizer, corpus[:3], without_nsp, output_dir=tmp_path / "gpt", **arguments)
    pretrain(bert, tokenizer, corpus[:3], without_nsp, output_dir=tmp_path / "bert", **arguments)
    with pytest.raises(ValueError, match=r"other settings \(objective None -> 'causal'\)"):
        pretrain(small_gpt(tokenizer), tokenizer, corpus[:3], causal, output_dir=tmp_path / "bert", **arguments)


def test_causal_pretraining_in_bfloat16_follows_the_float32_run(tokenizer, corpus, tmp_path):
    """The same steps from the same weights and data (no dropout): the losses agree with float32's to
    within what bfloat16 rounding moves them, and differ from them (autocast computed in bfloat16)."""
    recipe = PretrainingRecipe(max_steps=4, batch_size=4, seq_len=32, log_every=1, seed=0, objective="causal")
    arguments = dict(progress=False, device="cpu")
    reference = pretrain(small_gpt(tokenizer, dropout=0.0), tokenizer, corpus[:3], recipe,
                         output_dir=tmp_path / "float32", precision="float32", **arguments)
    other = pretrain(small_gpt(tokenizer, dropout=0.0), tokenizer, corpus[:3], recipe,
                     output_dir=tmp_path / "bfloat16", precision="bfloat16", **arguments)
    assert [r["loss"] for r in other] == pytest.approx([r["loss"] for r in reference], abs=5e-2)
    assert [r["loss"] for r in other] != [r["loss"] for r in reference]
    auto = pretrain(small_gpt(tokenizer, dropout=0.0), tokenizer, corpus[:3], recipe, output_dir=tmp_path / "auto",
                    **arguments)  # "auto" on the CPU: bfloat16 where it computes it natively
    expected = other if cpu_computes_bfloat16() else reference
    assert [r["loss"] for r in auto] == [r["loss"] for r in expected]


def test_causal_pretraining_runs_on_device(tokenizer, corpus, tmp_path, device):
    model = small_gpt(tokenizer)
    recipe = PretrainingRecipe(max_steps=3, batch_size=8, seq_len=32, log_every=1, objective="causal")
    history = pretrain(model, tokenizer, corpus[:3], recipe, output_dir=tmp_path, device=device, progress=False)
    assert all(math.isfinite(record["loss"]) for record in history)
    assert next(model.parameters()).device.type == device.type
    prompt = torch.tensor([[tokenizer.cls_token_id]], device=device)
    assert generate(model.eval(), prompt, 5, do_sample=True, top_p=0.9,
                    generator=torch.Generator(device).manual_seed(0)).device.type == device.type


@pytest.fixture
def packed(tokenizer, corpus, tmp_path) -> str:
    """The corpus packed for --seq-len 32, in a file."""
    path = tmp_path / "segments.npz"
    PackedSegments.pack(tokenizer, corpus, 32).save(path)
    return str(path)


PRETRAIN_GPT = ["pretrain", "--objective", "causal", "--steps", "4", "--batch-size", "8", "--seq-len", "32",
                "--log-every", "2", "--no-progress", "--device", "cpu"]


def test_pretrain_command_trains_a_gpt_that_the_generate_command_continues(packed, tokenizer, tmp_path, capsys):
    folder = tmp_path / "gpt"
    status, out, _ = run_cli(capsys, *PRETRAIN_GPT, "--packed", packed, "--output", folder)  # no --no-nsp needed
    assert status == 0
    model = GPTLMHeadModel.from_pretrained(folder)
    config = model.config
    assert f"model: GPT-course, {count_gpt_parameters(config) / 1e6:.1f}M parameters" in out
    assert "next-token loss" in out and "next-token accuracy" in out
    assert (config.n_layer, config.n_embd, config.n_head, config.n_positions) == (4, 256, 4, 512)
    assert (config.vocab_size, config.bos_token_id, config.eos_token_id) == (
        tokenizer.vocab_size, tokenizer.cls_token_id, tokenizer.sep_token_id)
    assert [record["step"] for record in load_metrics(folder / "metrics.jsonl")] == [2, 4]

    status, out, _ = run_cli(capsys, "generate", "--model", folder, "--prompt", "the value", "--greedy",
                             "--max-new-tokens", "6", "--device", "cpu")
    assert status == 0
    prompt = [tokenizer.cls_token_id, *tokenizer.convert_tokens_to_ids(tokenizer.tokenize("the value"))]
    expected = generate(model, torch.tensor([prompt]), 6, eos_token_id=tokenizer.sep_token_id)[0]
    assert out.splitlines() == [tokenizer.decode(expected)]



@pytest.mark.parametrize("precision, dtype", [("float32", None), ("bfloat16", torch.bfloat16)])
def test_generate_command_runs_the_model_in_the_precision_asked_for(tokenizer, tmp_path, capsys, monkeypatch,
                                                                    precision, dtype):
    small_gpt(tokenizer).save_pretrained(tmp_path)
    tokenizer.save_vocabulary(tmp_path)
    seen = []

    def spy(model, *args, **kwargs):
        seen.append(torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None)
        return generate(model, *args, **kwargs)

    monkeypatch.setattr(cli, "generate", spy)
    status, out, _ = run_cli(capsys, "generate", "--model", tmp_path, "--max-new-tokens", "3", "--device", "cpu",
                             "--precision", precision)
    assert status == 0 and len(out.splitlines()) == 1 and seen == [dtype]

def test_pretrain_command_sizes_each_objective_with_its_own_presets(packed, tmp_path, capsys, monkeypatch):
    models = []
    monkeypatch.setattr(cli, "pretrain", lambda model, tokenizer, documents, recipe, **options:
                        models.append((model, recipe)) or [])
    arguments = ["--packed", packed, "--seq-len", "32", "--output", tmp_path / "run", "--device", "cpu"]
    assert run_cli(capsys, "pretrain", "--no-nsp", *arguments)[0] == 0  # BERT-mini, as ever
    assert run_cli(capsys, "pretrain", "--objective", "causal", *arguments)[0] == 0  # the course GPT
    (bert, bert_recipe), (gpt, gpt_recipe) = models
    assert isinstance(bert, BertForPreTraining)
    assert bert.config.num_hidden_layers == 4 and bert.config.hidden_size == 256
    assert bert_recipe.objective == "masked" and gpt_recipe.objective == "causal" and bert_recipe.seq_len == 32
    assert isinstance(gpt, GPTLMHeadModel) and (gpt.config.n_layer, gpt.config.n_embd) == (4, 256)
    for objective, preset in [("causal", "mini"), ("masked", "course")]:
        status, _, err = run_cli(capsys, "pretrain", "--objective", objective, "--preset", preset, "--no-nsp",
                                 *arguments)
        assert status == 2 and f"--preset {preset} is not a size of the model of --objective {objective}" in err
    assert len(models) == 2



# --------------------------------------------------------------------------------------------------
# The benchmark of generation with and without the cache (benchmarks/generation.py)
# --------------------------------------------------------------------------------------------------


def test_the_generation_benchmark_times_both_ways_on_the_same_tokens(tmp_path, capsys):
    generation = benchmark_script("generation")
    out = tmp_path / "generation.json"
    assert generation.main(["--device", "cpu", "--preset", "course", "--new-tokens", "3", "--prompt-tokens", "2",
                            "--repeats", "2", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["same_tokens"] and result["new_tokens"] == 3
    assert set(result["seconds"]) == set(generation.WAYS) and all(len(v) == 2 for v in result["seconds"].values())
    assert len(result["paired_ratios_recompute_over_cached"]) == 2
    assert "recomputing / cached" in capsys.readouterr().out
    # more tokens than the 512 positions: a clear error
    assert generation.main(["--device", "cpu", "--new-tokens", "600"]) == 2
    assert "exceed the 512 positions" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------
# The tool that makes the course GPT (tools/course_gpt.py)
# --------------------------------------------------------------------------------------------------


def test_the_course_gpt_tool_packs_pretrains_and_exports_a_model_hugging_face_reads(tmp_path, monkeypatch):
    exported = export_small_course_gpt(tmp_path, monkeypatch)
    course_gpt, work, package = exported.tool, exported.work, exported.package

    record = json.loads(exported.record.read_text())["held_out"]
    baselines = record["baselines"]
    assert set(baselines) == {"add_k_unigram", "add_k_bigram", "kneser_ney_bigram"}
    for name in ("add_k_unigram", "add_k_bigram"):  # k chosen on the dev reviews: the lowest dev loss
        losses = baselines[name]["dev_loss_by_k"]
        assert float(baselines[name]["k"]) == float(min(losses, key=losses.get))
    predicted = {scores["predicted_tokens"] for scores in (record["model"], *baselines.values())}
    assert len(predicted) == 1  # every model scored on the same tokens
    assert record["masked_words"]["bert"]["predicted_tokens"] == record["masked_words"]["gpt"]["predicted_tokens"]

    hf = transformers.GPT2LMHeadModel.from_pretrained(package)  # Hugging Face reads the folder as it is
    ours = GPTLMHeadModel.from_pretrained(package)
    ids = torch.tensor([[2, 150, 151, 152, 3]])
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, ours(ids).logits, atol=1e-5, rtol=1e-5)
    assert hf.config.resid_pdrop == course_gpt.FINETUNING_DROPOUT
    weights = load_safetensors(package / "model.safetensors")
    assert {tensor.dtype for tensor in weights.values()} == {torch.float16}
    card = (package / "README.md").read_text()
    command = " ".join(course_gpt.placeholders(json.loads((work / "command.json").read_text())))
    assert f"    bertlab {command}\n" in card and "--objective causal" in command
    assert f"| this model | {record['model']['loss']:.3f} |" in card


def test_a_missing_course_gpt_names_its_folder_and_the_tool_that_makes_it(tmp_path, monkeypatch):
    import bertlab.course_model

    monkeypatch.setattr(bertlab.course_model, "COURSE_GPT_FOLDER", tmp_path / "course_gpt")
    with pytest.raises(FileNotFoundError, match=r"course_gpt: reinstall bertlab, or make it with tools/course_gpt.py"):
        bertlab.course_model.course_gpt()
