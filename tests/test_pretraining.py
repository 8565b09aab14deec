"""Tests for bertlab.pretraining: masking, NSP pairs, datasets, optimisation, the training loop, resuming, DDP.

``bertlab.pretraining`` gathers the names of the modules that hold the code (``pretraining_data``,
``optimization``, ``pretraining_loop``, ``pretraining_evaluation``, ``course_model``).
"""

import dataclasses
import hashlib
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
import transformers
from transformers import BertTokenizer as HFBertTokenizer
from transformers import BertTokenizerFast as HFBertTokenizerFast
from transformers import DataCollatorForLanguageModeling, get_linear_schedule_with_warmup

from bertlab import cli, pretraining, pretraining_loop
from bertlab.course_model import COURSE_BERT_FOLDER
from bertlab.bert import BertConfig, BertForPreTraining
from bertlab.data import pretraining_corpus
from bertlab.gpt import GPTConfig, GPTLMHeadModel, causal_lm_loss
from bertlab.ngram import AddKUnigram, KneserNeyBigram, NGramCounts
from bertlab.pretraining import (
    IGNORE_INDEX,
    IS_NEXT,
    NOT_NEXT,
    MaskedLMScores,
    PackedSegments,
    PretrainingDataset,
    PretrainingRecipe,
    causal_masked_lm,
    course_bert,
    course_bert_folder,
    course_bert_token_counts,
    evaluate_causal_lm,
    evaluate_masked_lm,
    get_linear_schedule,
    load_metrics,
    make_nsp_examples,
    mask_tokens,
    pack_full_sentences,
    plot_metrics,
    pretrain,
    token_frequencies,
    unigram_masked_lm,
    weight_decay_groups,
)
from bertlab.tokenization import BertTokenizer, train_wordpiece_vocab
from bertlab.recorded import RecordedResultsUnavailable
from bertlab.utils import cpu_computes_bfloat16, grad_scaler
from tests.conftest import free_port
from tests.script_helpers import tool_module

REPO_ROOT = Path(__file__).resolve().parents[1]
VOCAB_SIZE = 1000


# ---------------------------------------------------------------------------------------------- the names

#: Every public name of ``bertlab.pretraining`` when it was one file, before it was split by job, and
#: ``PackedSegments`` and the causal evaluation (``CausalLMScores``, ``evaluate_causal_lm``,
#: ``causal_masked_lm``) added since.
PUBLIC_NAMES = [
    "CHECKPOINT_FILE", "COURSE_BERT_FOLDER", "CausalLMScores", "IGNORE_INDEX", "IS_NEXT", "MASKING_KINDS",
    "METRICS_FILE", "MaskedLMScores", "NOT_NEXT", "PLOT_FILE", "PackedSegments", "PretrainingDataset",
    "PretrainingRecipe", "SETTINGS_FILE", "TOKEN_COUNTS_FILE",
    "causal_masked_lm", "course_bert", "course_bert_folder", "course_bert_sha256", "course_bert_token_counts",
    "evaluate_causal_lm", "evaluate_masked_lm",
    "get_linear_schedule", "load_metrics", "make_nsp_examples", "mask_tokens", "pack_full_sentences",
    "plot_metrics", "pretrain", "read_course_bert_results", "token_frequencies", "unigram_masked_lm",
    "weight_decay_groups",
]


@pytest.mark.parametrize("name", PUBLIC_NAMES)
def test_every_public_name_is_still_importable_from_bertlab_pretraining(name):
    namespace = {}
    exec(f"from bertlab.pretraining import {name}", namespace)
    assert namespace[name] is getattr(pretraining, name)
    assert name in pretraining.__all__


def test_bertlab_pretraining_exports_exactly_its_public_names():
    assert sorted(pretraining.__all__) == sorted(PUBLIC_NAMES)


# ---------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def corpus():
    """A slice of the offline pretraining corpus (documents of sentences)."""
    documents = [document for document in pretraining_corpus() if len(document) >= 5]
    return documents[:16]


@pytest.fixture(scope="module")
def tokenizer(corpus):
    vocab = train_wordpiece_vocab([sentence for document in corpus for sentence in document], vocab_size=VOCAB_SIZE)
    return BertTokenizer(vocab)


@pytest.fixture(scope="module")
def hf_tokenizer(tokenizer, tmp_path_factory):
    """Hugging Face's BertTokenizer on the same vocabulary (read from a local folder)."""
    folder = tmp_path_factory.mktemp("hf_vocab")
    tokenizer.save_vocabulary(folder)
    return HFBertTokenizer.from_pretrained(folder)


def tiny_config(vocab_size: int, dropout: float = 0.1) -> BertConfig:
    return BertConfig.preset("tiny", vocab_size=vocab_size, hidden_size=64, num_attention_heads=2,
                             intermediate_size=256, max_position_embeddings=64, hidden_dropout_prob=dropout,
                             attention_probs_dropout_prob=dropout)


def tiny_model(tokenizer, seed: int = 0) -> BertForPreTraining:
    torch.manual_seed(seed)
    return BertForPreTraining(tiny_config(tokenizer.vocab_size))


def random_batch(rows: int, length: int, vocab_size: int, seed: int = 0):
    """(rows, length) ids in [5, vocab_size) framed by [CLS] (2) ... [SEP] (3) and padded ([PAD] = 0) at
    random lengths; returns (input_ids, special_tokens_mask)."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, vocab_size, (rows, length), generator=generator)
    lengths = torch.randint(length // 2, length + 1, (rows,), generator=generator)
    positions = torch.arange(length)
    input_ids[:, 0] = 2
    input_ids[positions == (lengths[:, None] - 1)] = 3
    input_ids[positions >= lengths[:, None]] = 0
    return input_ids, torch.isin(input_ids, torch.tensor([0, 2, 3]))


def masking_shares(input_ids, masked, labels, special, mask_token_id):
    """Observed shares: chosen among eligible positions, and [MASK] / unchanged / other among chosen."""
    chosen = labels != IGNORE_INDEX
    return {"chosen": chosen.sum().item() / (~special).sum().item(),
            "mask": (masked[chosen] == mask_token_id).float().mean().item(),
            "unchanged": (masked[chosen] == input_ids[chosen]).float().mean().item(),
            "other": ((masked[chosen] != mask_token_id) & (masked[chosen] != input_ids[chosen])).float().mean().item()}


def expected_shares(vocab_size, p=0.15, mask=0.8, random_share=0.1):
    # a random replacement is [MASK] or the original token itself with probability 1/V each
    return {"chosen": p, "mask": mask + random_share / vocab_size,
            "unchanged": 1 - mask - random_share + random_share / vocab_size,
            "other": random_share * (1 - 2 / vocab_size)}


def five_sigma(share: float, count: int) -> float:
    return 5 * math.sqrt(share * (1 - share) / count)


# ---------------------------------------------------------------------------------------------- masking


def test_mask_tokens_has_berts_proportions_over_many_tokens():
    vocab_size = 30522
    input_ids, special = random_batch(2048, 256, vocab_size)
    generator = torch.Generator().manual_seed(0)
    masked, labels = mask_tokens(input_ids, mask_token_id=4, vocab_size=vocab_size, special_tokens_mask=special,
                                 generator=generator)
    observed = masking_shares(input_ids, masked, labels, special, mask_token_id=4)
    eligible, chosen = (~special).sum().item(), (labels != IGNORE_INDEX).sum().item()
    for name, share in expected_shares(vocab_size).items():
        count = eligible if name == "chosen" else chosen
        assert abs(observed[name] - share) < five_sigma(share, count), (name, observed[name], share)
    # random replacements are uniform over the vocabulary: mean (V - 1) / 2, spanning it
    replaced = masked[(labels != IGNORE_INDEX) & (masked != 4) & (masked != input_ids)].double()
    assert abs(replaced.mean().item() - (vocab_size - 1) / 2) < 5 * vocab_size / math.sqrt(12 * len(replaced))
    assert replaced.min() < 0.01 * vocab_size and replaced.max() > 0.99 * vocab_size


def test_mask_tokens_matches_hugging_face_collator_statistically(hf_tokenizer):
    vocab_size = len(hf_tokenizer)
    input_ids, special = random_batch(1024, 256, vocab_size, seed=1)
    ours = mask_tokens(input_ids, mask_token_id=hf_tokenizer.mask_token_id, vocab_size=vocab_size,
                       special_tokens_mask=special, generator=torch.Generator().manual_seed(1))
    collator = DataCollatorForLanguageModeling(hf_tokenizer, mlm_probability=0.15)
    collator.generator = torch.Generator().manual_seed(2)
    theirs = collator.torch_mask_tokens(input_ids.clone(), special_tokens_mask=special)
    observed_ours = masking_shares(input_ids, *ours, special, hf_tokenizer.mask_token_id)
    observed_theirs = masking_shares(input_ids, *theirs, special, hf_tokenizer.mask_token_id)
    count = (~special).sum().item() * 0.15
    for name, share in expected_shares(vocab_size).items():
        tolerance = 2 * five_sigma(share, (~special).sum().item() if name == "chosen" else count)
        assert abs(observed_ours[name] - observed_theirs[name]) < tolerance, (name, observed_ours, observed_theirs)
    for masked, labels in (ours, theirs):  # the same contract: specials never chosen, labels = originals
        assert (labels[special] == IGNORE_INDEX).all() and (masked[special] == input_ids[special]).all()
        chosen = labels != IGNORE_INDEX
        assert torch.equal(labels[chosen], input_ids[chosen])


def test_mask_tokens_contract():
    input_ids, special = random_batch(64, 32, 500, seed=3)
    original = input_ids.clone()
    masked, labels = mask_tokens(input_ids, mask_token_id=4, vocab_size=500, special_tokens_mask=special,
                                 generator=torch.Generator().manual_seed(0))
    assert torch.equal(input_ids, original)  # the input is not modified
    chosen = labels != IGNORE_INDEX
    assert torch.equal(labels[chosen], input_ids[chosen])
    assert not (chosen & special).any()
    assert not ((masked != input_ids) & ~chosen).any()  # only chosen positions change
    # every eligible position chosen, all of them [MASK]ed; specials untouched
    masked, labels = mask_tokens(input_ids, mask_token_id=4, vocab_size=500, special_tokens_mask=special,
                                 mlm_probability=1.0, mask_replace_prob=1.0, random_replace_prob=0.0)
    assert (masked[~special] == 4).all() and torch.equal(masked[special], input_ids[special])
    assert torch.equal(labels[~special], input_ids[~special]) and (labels[special] == IGNORE_INDEX).all()
    # all chosen but all kept: the input comes back, the labels still ask for every token
    masked, labels = mask_tokens(input_ids, mask_token_id=4, vocab_size=500, mlm_probability=1.0,
                                 mask_replace_prob=0.0, random_replace_prob=0.0)
    assert torch.equal(masked, input_ids) and torch.equal(labels, input_ids)


def test_mask_tokens_is_reproducible_with_a_generator():
    input_ids, special = random_batch(8, 64, 500)

    def draw(seed):
        return mask_tokens(input_ids, mask_token_id=4, vocab_size=500, special_tokens_mask=special,
                           generator=torch.Generator().manual_seed(seed))

    assert all(torch.equal(a, b) for a, b in zip(draw(0), draw(0)))
    assert not torch.equal(draw(0)[1], draw(1)[1])


def test_mask_tokens_on_device(device):
    input_ids, special = random_batch(4, 16, 100)
    masked, labels = mask_tokens(input_ids.to(device), mask_token_id=4, vocab_size=100,
                                 special_tokens_mask=special.to(device), mlm_probability=0.5)
    assert masked.device.type == labels.device.type == device.type
    assert not (labels.cpu()[special] != IGNORE_INDEX).any()


@pytest.mark.parametrize("kwargs, message", [
    ({"mlm_probability": 1.5}, "mlm_probability"),
    ({"mlm_probability": -0.1}, "mlm_probability"),
    ({"mask_replace_prob": 1.2}, "mask_replace_prob"),
    ({"mask_replace_prob": 0.9, "random_replace_prob": 0.2}, "at most 1"),
    ({"mask_token_id": 500}, "mask_token_id"),
    ({"special_tokens_mask": torch.zeros(3, 3, dtype=torch.bool)}, "special_tokens_mask has shape"),
])
def test_mask_tokens_rejects_bad_arguments(kwargs, message):
    arguments = {"mask_token_id": 4, "vocab_size": 500, **kwargs}
    with pytest.raises(ValueError, match=message):
        mask_tokens(torch.randint(5, 500, (2, 8)), **arguments)
    with pytest.raises(TypeError, match="integer tensor"):
        mask_tokens(torch.rand(2, 8), mask_token_id=4, vocab_size=500)


# ---------------------------------------------------------------------------------------------- NSP pairs


def synthetic_documents(count=12, sentences=25):
    return [[f"document {d} sentence {s}" for s in range(sentences)] for d in range(count)]


def test_make_nsp_examples_pairs_true_next_and_other_document_sentences():
    documents = synthetic_documents()
    where = {sentence: (d, s) for d, document in enumerate(documents) for s, sentence in enumerate(document)}
    examples = make_nsp_examples(documents, seed=0)
    assert len(examples) == sum(len(document) - 1 for document in documents)
    for sentence_a, sentence_b, label in examples:
        (doc_a, index_a), (doc_b, index_b) = where[sentence_a], where[sentence_b]
        if label == IS_NEXT:
            assert (doc_b, index_b) == (doc_a, index_a + 1)
        else:
            assert label == NOT_NEXT and doc_b != doc_a
    not_next = sum(label for _, _, label in examples) / len(examples)
    assert abs(not_next - 0.5) < five_sigma(0.5, len(examples))
    assert make_nsp_examples(documents, seed=0) == examples
    assert make_nsp_examples(documents, seed=1) != examples


@pytest.mark.parametrize("documents, error, message", [
    ([["only", "one", "document"]], ValueError, "at least 2"),
    ([["a", "b"], []], ValueError, "at least 2"),
    ([["one sentence"], ["another"]], ValueError, "two consecutive"),
    (["a sentence", "another"], TypeError, "list of sentences"),
    ("some text", TypeError, "list of documents"),
    ([["a", 3], ["b", "c"]], TypeError, r"documents\[0\]\[1\]"),
])
def test_make_nsp_examples_rejects_bad_documents(documents, error, message):
    with pytest.raises(error, match=message):
        make_nsp_examples(documents)


# ---------------------------------------------------------------------------------------------- datasets


def test_nsp_dataset_matches_hugging_face_pair_encoding(tokenizer, hf_tokenizer, corpus):
    seq_len = 32
    dataset = PretrainingDataset(tokenizer, corpus[:6], seq_len=seq_len, nsp=True, seed=0)
    pairs = make_nsp_examples(corpus[:6], seed=0)
    assert len(dataset) == len(pairs)
    truncated = 0
    for item, (sentence_a, sentence_b, label) in zip(dataset, pairs):
        expected = hf_tokenizer(sentence_a, sentence_b, max_length=seq_len, truncation=True)
        assert item["input_ids"].tolist() == expected["input_ids"]  # [CLS] A [SEP] B [SEP], truncated
        assert item["token_type_ids"].tolist() == expected["token_type_ids"]
        assert item["nsp_labels"].item() == label
        truncated += len(item["input_ids"]) == seq_len
    assert truncated > 0  # the truncation path was exercised


def test_collate_pads_and_masks_batches(tokenizer, corpus):
    dataset = PretrainingDataset(tokenizer, corpus[:4], seq_len=48, nsp=True, seed=0)
    items = [dataset[i] for i in range(8)]
    batch = dataset.collate(items, generator=torch.Generator().manual_seed(0))
    lengths = [len(item["input_ids"]) for item in items]
    assert batch["input_ids"].shape == batch["mlm_labels"].shape == (8, max(lengths))
    assert batch["attention_mask"].dtype == torch.bool
    assert batch["attention_mask"].sum(1).tolist() == lengths
    assert torch.equal(batch["nsp_labels"], torch.stack([item["nsp_labels"] for item in items]))
    chosen = batch["mlm_labels"] != IGNORE_INDEX
    assert chosen.any() and not (chosen & ~batch["attention_mask"]).any()  # padding is never predicted
    for row, item in enumerate(items):
        n = len(item["input_ids"])
        chosen_here, original = chosen[row, :n], item["input_ids"]
        assert torch.equal(batch["mlm_labels"][row, :n][chosen_here], original[chosen_here])
        assert torch.equal(batch["input_ids"][row, :n][~chosen_here], original[~chosen_here])
        special = torch.isin(original, torch.tensor([tokenizer.cls_token_id, tokenizer.sep_token_id]))
        assert not chosen_here[special].any()


def test_static_masks_are_fixed_and_dynamic_masks_change(tokenizer, corpus):
    static = PretrainingDataset(tokenizer, corpus[:4], seq_len=48, masking="static", static_mask_copies=2, seed=0)
    dynamic = PretrainingDataset(tokenizer, corpus[:4], seq_len=48, masking="dynamic", seed=0)
    count = len(dynamic)
    assert len(static) == 2 * count
    items = [static[i] for i in range(16)]
    first = static.collate(items, generator=torch.Generator().manual_seed(0))
    second = static.collate(items, generator=torch.Generator().manual_seed(1))
    assert all(torch.equal(first[key], second[key]) for key in first)
    # the two copies of an example hold the same tokens under different masks
    assert torch.equal(static[0]["input_ids"], static[count]["input_ids"])
    assert not torch.equal(static[0]["mlm_labels"], static[count]["mlm_labels"]) or \
        not torch.equal(static[1]["mlm_labels"], static[count + 1]["mlm_labels"])
    items = [dynamic[i] for i in range(16)]
    first = dynamic.collate(items, generator=torch.Generator().manual_seed(0))
    second = dynamic.collate(items, generator=torch.Generator().manual_seed(1))
    assert not torch.equal(first["mlm_labels"], second["mlm_labels"])


def test_full_sentence_segments_are_contiguous_and_greedy(tokenizer, corpus):
    seq_len, documents = 64, corpus[:5]
    budget, sep = seq_len - 2, tokenizer.sep_token_id
    sentences = [(number, tokenizer.convert_tokens_to_ids(tokenizer.tokenize(sentence))[:budget])
                 for number, document in enumerate(documents) for sentence in document]
    segments = pack_full_sentences(tokenizer, documents, seq_len)
    # walk the sentences in order: every segment is whole consecutive sentences, with one [SEP]
    # between two documents, and the sentence after a segment would not have fitted in it (greedy)
    position = 0
    for segment in segments:
        rebuilt, previous_document = [], None
        while position < len(sentences):
            document, ids = sentences[position]
            separator = [sep] if rebuilt and document != previous_document else []
            if len(rebuilt) + len(separator) + len(ids) > budget:
                break
            rebuilt += separator + ids
            previous_document, position = document, position + 1
        assert segment == rebuilt
        assert 0 < len(segment) <= budget
    assert position == len(sentences)  # the whole text, nothing more
    assert len(segments) < len(sentences)  # sentences were packed together
    dataset = PretrainingDataset(tokenizer, documents, seq_len=seq_len, nsp=False, seed=0)
    batch = dataset.collate([dataset[i] for i in range(4)])
    assert "nsp_labels" not in batch and not batch["token_type_ids"].any()
    assert (batch["mlm_labels"][:, 0] == IGNORE_INDEX).all()
    assert dataset[0]["input_ids"].tolist() == [tokenizer.cls_token_id, *segments[0], sep]


def test_packed_segments_are_the_full_sentence_segments_and_survive_a_file(tokenizer, corpus, tmp_path):
    packed = PackedSegments.pack(tokenizer, corpus, seq_len=32)
    assert packed.segments() == pack_full_sentences(tokenizer, corpus, 32)
    assert packed.ids.dtype == np.uint16  # 1,000 tokens fit in 16 bits
    packed.save(tmp_path / "segments.npz")
    loaded = PackedSegments.load(tmp_path / "segments.npz")
    assert loaded.segments() == packed.segments() and loaded.seq_len == 32
    assert loaded.tokenizer().vocab == tokenizer.vocab
    assert loaded.tokenizer().do_lower_case == tokenizer.do_lower_case
    from_text = PretrainingDataset(tokenizer, corpus, seq_len=32, nsp=False)
    from_file = PretrainingDataset(loaded.tokenizer(), loaded, seq_len=32, nsp=False)
    assert len(from_file) == len(from_text)
    assert all(torch.equal(a["input_ids"], b["input_ids"]) for a, b in zip(from_file.examples, from_text.examples))


def test_pretraining_on_packed_segments_is_pretraining_on_their_text(tokenizer, corpus, tmp_path):
    recipe = PretrainingRecipe(max_steps=3, batch_size=4, seq_len=32, nsp=False, log_every=1)
    options = dict(progress=False, device="cpu")
    from_text = pretrain(tiny_model(tokenizer), tokenizer, corpus[:4], recipe, output_dir=tmp_path / "text", **options)
    packed = PackedSegments.pack(tokenizer, corpus[:4], seq_len=32)
    from_file = pretrain(tiny_model(tokenizer), packed.tokenizer(), packed, recipe, output_dir=tmp_path / "file",
                         **options)
    assert [record["loss"] for record in from_file] == [record["loss"] for record in from_text]


def test_packed_segments_refuse_what_does_not_fit(tokenizer, corpus, tmp_path):
    packed = PackedSegments.pack(tokenizer, corpus[:2], seq_len=32)
    with pytest.raises(ValueError, match="packed for seq_len 32, not 64"):
        PretrainingDataset(tokenizer, packed, seq_len=64, nsp=False)
    with pytest.raises(ValueError, match="no sentence pairs"):
        PretrainingDataset(tokenizer, packed, seq_len=32, nsp=True)
    other = BertTokenizer(list(reversed(tokenizer.ids_to_tokens)))
    with pytest.raises(ValueError, match="another vocabulary"):
        PretrainingDataset(other, packed, seq_len=32, nsp=False)
    (tmp_path / "foreign.npz").write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match=r"foreign\.npz is not a file of packed segments"):
        PackedSegments.load(tmp_path / "foreign.npz")
    with pytest.raises(FileNotFoundError, match="missing.npz does not exist"):
        PackedSegments.load(tmp_path / "missing.npz")
    damaged = dataclasses.replace(packed, offsets=packed.offsets + 1)
    damaged.save(tmp_path / "damaged.npz")
    with pytest.raises(ValueError, match="damaged: its offsets"):
        PackedSegments.load(tmp_path / "damaged.npz")


def test_dataset_rejects_bad_arguments(tokenizer, corpus):
    with pytest.raises(ValueError, match="masking"):
        PretrainingDataset(tokenizer, corpus[:2], masking="sometimes")
    with pytest.raises(ValueError, match="seq_len"):
        PretrainingDataset(tokenizer, corpus[:2], seq_len=2)


# ---------------------------------------------------------------------------------------------- optimisation


def test_linear_schedule_matches_hugging_face():
    def learning_rates(make_schedule):
        optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.5)
        schedule = make_schedule(optimizer)
        rates = []
        for _ in range(40):
            rates.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            schedule.step()
        return rates

    ours = learning_rates(lambda optimizer: get_linear_schedule(optimizer, 7, 30))
    theirs = learning_rates(lambda optimizer: get_linear_schedule_with_warmup(optimizer, 7, 30))
    assert ours == pytest.approx(theirs, abs=1e-12)
    assert max(ours) == pytest.approx(0.5) and ours[0] == 0.0 and ours[-1] == 0.0
    with pytest.raises(ValueError, match="warmup_steps"):
        get_linear_schedule(torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1), 40, 30)


def test_weight_decay_groups_exclude_biases_and_layer_norms(tokenizer):
    model = tiny_model(tokenizer)
    decay, no_decay = weight_decay_groups(model, 0.01)
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    expected_no_decay = {id(parameter) for name, parameter in model.named_parameters() if name.endswith("bias")}
    for module in model.modules():
        if isinstance(module, nn.LayerNorm) or "LayerNorm" in type(module).__name__:
            expected_no_decay |= {id(parameter) for parameter in module.parameters(recurse=False)}
    assert {id(parameter) for parameter in no_decay["params"]} == expected_no_decay
    everything = decay["params"] + no_decay["params"]
    assert len({id(parameter) for parameter in everything}) == len(everything) == len(list(model.parameters()))


# ---------------------------------------------------------------------------------------------- training


@pytest.mark.slow
def test_pretraining_lowers_the_mlm_loss_and_writes_its_outputs(tokenizer, corpus, tmp_path):
    model = tiny_model(tokenizer)
    steps = 80
    recipe = PretrainingRecipe(max_steps=steps, batch_size=16, seq_len=64, lr=2e-3, warmup_steps=10, log_every=1,
                               checkpoint_every=1000)
    history = pretrain(model, tokenizer, corpus, recipe, output_dir=tmp_path, progress=False, device="cpu")
    initial, final = history[0]["mlm_loss"], sum(r["mlm_loss"] for r in history[-10:]) / 10
    assert abs(initial - math.log(tokenizer.vocab_size)) < 0.3  # starts at chance, ln V
    assert final < initial - 1.0, (initial, final)  # perplexity divided by e and more
    assert sum(r["mlm_accuracy"] for r in history[-10:]) / 10 > 20 / tokenizer.vocab_size  # chance is 1 / V
    assert [record["step"] for record in history] == list(range(1, steps + 1))
    assert load_metrics(tmp_path / "metrics.jsonl") == history
    fields = {"step", "loss", "mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy", "lr", "tokens_per_second",
              "seconds"}
    assert fields <= set(history[0])
    assert history[0]["loss"] == pytest.approx(history[0]["mlm_loss"] + history[0]["nsp_loss"])
    assert (tmp_path / "loss_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "checkpoint.pt").is_file()
    reloaded = BertForPreTraining.from_pretrained(tmp_path)
    state = model.state_dict()
    assert all(torch.equal(tensor, state[name]) for name, tensor in reloaded.state_dict().items())
    assert BertTokenizer(tmp_path / "vocab.txt").tokenize(corpus[0][0]) == tokenizer.tokenize(corpus[0][0])


@pytest.mark.parametrize("masking, nsp", [("dynamic", True), ("static", False)])
def test_resuming_gives_exactly_the_uninterrupted_run(tokenizer, corpus, tmp_path, masking, nsp):
    recipe = PretrainingRecipe(max_steps=6, batch_size=4, seq_len=32, grad_accum_steps=2, masking=masking, nsp=nsp,
                               log_every=1, checkpoint_every=3, seed=3)
    arguments = dict(progress=False, device="cpu")
    documents = corpus[:3]
    straight = tiny_model(tokenizer)
    straight_history = pretrain(straight, tokenizer, documents, recipe, output_dir=tmp_path / "straight", **arguments)

    first_half = pretrain(tiny_model(tokenizer), tokenizer, documents, recipe, output_dir=tmp_path / "split",
                          stop_at_step=3, **arguments)
    assert [record["step"] for record in first_half] == [1, 2, 3]
    restarted = tiny_model(tokenizer, seed=1)  # a new process: other initial weights, other random state
    torch.manual_seed(123)
    resumed_history = pretrain(restarted, tokenizer, documents, recipe, output_dir=tmp_path / "split", **arguments)

    def losses(history):
        return [(r["step"], r["loss"], r["mlm_loss"], r["nsp_loss"], r["mlm_accuracy"], r["lr"]) for r in history]

    assert losses(resumed_history) == losses(straight_history)
    assert losses(load_metrics(tmp_path / "split" / "metrics.jsonl")) == losses(straight_history)
    straight_state = straight.state_dict()
    assert all(torch.equal(tensor, straight_state[name]) for name, tensor in restarted.state_dict().items())


def test_resuming_with_other_settings_is_refused(tokenizer, corpus, tmp_path):
    recipe = PretrainingRecipe(max_steps=2, batch_size=4, seq_len=32, log_every=1)
    arguments = dict(progress=False, device="cpu")
    pretrain(tiny_model(tokenizer), tokenizer, corpus[:3], recipe, output_dir=tmp_path, **arguments)
    larger = dataclasses.replace(recipe, batch_size=8)
    with pytest.raises(ValueError, match=r"other settings \(batch_size 4 -> 8\)"):
        pretrain(tiny_model(tokenizer), tokenizer, corpus[:3], larger, output_dir=tmp_path, **arguments)
    # when to log and to checkpoint are not settings of the run: a resumed call may change them
    pretrain(tiny_model(tokenizer), tokenizer, corpus[:3], dataclasses.replace(recipe, log_every=2,
             checkpoint_every=5), output_dir=tmp_path, **arguments)
    history = pretrain(tiny_model(tokenizer), tokenizer, corpus[:3], larger, output_dir=tmp_path, resume=False,
                       **arguments)
    assert [record["step"] for record in history] == [1, 2]



def test_the_recipe_is_what_the_run_writes_and_reads_back(tokenizer, corpus, tmp_path):
    recipe = PretrainingRecipe(max_steps=2, batch_size=4, seq_len=32, lr=5e-4, nsp=False, log_every=1, seed=2)
    pretrain(tiny_model(tokenizer), tokenizer, corpus[:3], recipe, output_dir=tmp_path, progress=False, device="cpu")
    # the keys a masked run has always written (earlier releases' checkpoints resume), warm-up resolved
    written = json.loads((tmp_path / "pretraining_args.json").read_text())
    assert set(written) == {"max_steps", "batch_size", "seq_len", "lr", "weight_decay", "warmup_steps",
                            "grad_accum_steps", "max_grad_norm", "masking", "nsp", "mlm_probability",
                            "static_mask_copies", "seed", "world_size"}
    assert written["warmup_steps"] == 0 and written["lr"] == 5e-4 and written["nsp"] is False
    read = PretrainingRecipe.read(tmp_path)
    assert read == dataclasses.replace(recipe, warmup_steps=0, log_every=PretrainingRecipe(1).log_every)
    with pytest.raises(FileNotFoundError, match=r"missing/pretraining_args\.json does not exist"):
        PretrainingRecipe.read(tmp_path / "missing")


def test_settings_passed_as_keywords_still_run_the_same_recipe_with_a_warning(tokenizer, corpus, tmp_path):
    recipe = PretrainingRecipe(max_steps=2, batch_size=4, seq_len=32, log_every=1)
    arguments = dict(progress=False, device="cpu")
    expected = pretrain(tiny_model(tokenizer), tokenizer, corpus[:3], recipe, output_dir=tmp_path / "recipe",
                        **arguments)
    with pytest.warns(DeprecationWarning, match=r"pass PretrainingRecipe\(max_steps=\.\.\., batch_size"):
        history = pretrain(tiny_model(tokenizer), tokenizer, corpus[:3], output_dir=tmp_path / "keywords",
                           max_steps=2, batch_size=4, seq_len=32, log_every=1, **arguments)
    assert [record["loss"] for record in history] == [record["loss"] for record in expected]
    with pytest.raises(TypeError, match="got a recipe and settings as keywords \\(lr\\)"):
        pretrain(tiny_model(tokenizer), tokenizer, corpus[:3], recipe, output_dir=tmp_path, lr=1e-4, **arguments)
    with pytest.raises(TypeError, match="unexpected keyword arguments: learning_rate"):
        pretrain(tiny_model(tokenizer), tokenizer, corpus[:3], output_dir=tmp_path, learning_rate=1e-4, **arguments)
    with pytest.raises(TypeError, match=r"pretrain\(\) needs a recipe"):
        pretrain(tiny_model(tokenizer), tokenizer, corpus[:3], output_dir=tmp_path, **arguments)


@pytest.mark.parametrize("settings, message", [
    (dict(max_steps=0), "max_steps must be a positive integer, got 0"),
    (dict(max_steps=10, warmup_steps=11), "warmup_steps must be between 0 and max_steps = 10, got 11"),
    (dict(max_steps=10, masking="sometimes"), "masking must be one of dynamic, static, got 'sometimes'"),
    (dict(max_steps=10, mlm_probability=1.5), "mlm_probability must be between 0 and 1, got 1.5"),
    (dict(max_steps=10, lr=0.0), "lr must be positive, got 0.0"),
    (dict(max_steps=10, log_every=True), "log_every must be a positive integer, got True"),
])
def test_a_recipe_names_the_setting_it_refuses(settings, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        PretrainingRecipe(**settings)

def test_pretrain_rejects_bad_arguments(tokenizer, corpus, tmp_path):
    model = tiny_model(tokenizer)
    too_long, two_steps = PretrainingRecipe(max_steps=2, seq_len=128), PretrainingRecipe(max_steps=2)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        pretrain(model, tokenizer, corpus[:3], too_long, output_dir=tmp_path, device="cpu")
    with pytest.raises(ValueError, match="stop_at_step"):
        pretrain(model, tokenizer, corpus[:3], two_steps, output_dir=tmp_path, stop_at_step=5, device="cpu")
    with pytest.raises(ValueError, match="batch_size"):
        PretrainingRecipe(max_steps=2, batch_size=0)
    too_large = PretrainingRecipe(max_steps=2, batch_size=4096, seq_len=32)
    with pytest.raises(ValueError, match="fewer than one batch"):
        pretrain(model, tokenizer, corpus[:2], too_large, output_dir=tmp_path, device="cpu")
    with pytest.raises(FileNotFoundError, match="metrics log"):
        plot_metrics(tmp_path / "missing.jsonl", tmp_path / "plot.png")


@pytest.mark.parametrize("precision, compile_model", [
    ("bfloat16", False), pytest.param("float32", True, marks=pytest.mark.slow), ("auto", False)])
def test_pretrain_in_another_precision_or_compiled_follows_the_float32_run(tokenizer, corpus, tmp_path, precision,
                                                                          compile_model):
    """The same steps from the same weights and data: the loss curve agrees with float32's to within
    what bfloat16 rounding moves it (compiled float32: to float32 rounding). "auto" on the CPU is
    bfloat16 where the CPU computes it natively, else float32."""
    recipe = PretrainingRecipe(max_steps=4, batch_size=4, seq_len=32, nsp=False, log_every=1, seed=0)
    arguments = dict(progress=False, device="cpu")

    def model():  # no dropout: a compiled model draws its dropout masks from another generator
        torch.manual_seed(0)
        return BertForPreTraining(tiny_config(tokenizer.vocab_size, dropout=0.0))

    reference = pretrain(model(), tokenizer, corpus[:3], recipe, output_dir=tmp_path / "float32",
                         precision="float32", **arguments)
    other = pretrain(model(), tokenizer, corpus[:3], recipe, output_dir=tmp_path / "other", precision=precision,
                     compile_model=compile_model, **arguments)
    in_bfloat16 = precision == "bfloat16" or (precision == "auto" and cpu_computes_bfloat16())
    tolerance = 5e-2 if in_bfloat16 else 1e-4
    assert [r["loss"] for r in other] == pytest.approx([r["loss"] for r in reference], abs=tolerance)
    if in_bfloat16:  # autocast did compute in bfloat16: the curves are not identical
        assert [r["loss"] for r in other] != [r["loss"] for r in reference]


def test_pretrain_names_an_unknown_precision(tokenizer, corpus, tmp_path):
    recipe = PretrainingRecipe(max_steps=2, seq_len=32)
    with pytest.raises(ValueError, match="precision must be one of auto, float32, bfloat16, float16, got 'bf16'"):
        pretrain(tiny_model(tokenizer), tokenizer, corpus[:3], recipe, output_dir=tmp_path, device="cpu",
                 precision="bf16")


def test_pretrain_runs_on_device(tokenizer, corpus, tmp_path, device):
    model = tiny_model(tokenizer)
    recipe = PretrainingRecipe(max_steps=3, batch_size=8, seq_len=32, log_every=1)
    history = pretrain(model, tokenizer, corpus[:3], recipe, output_dir=tmp_path, device=device, progress=False)
    assert all(math.isfinite(record["loss"]) for record in history)
    assert next(model.parameters()).device.type == device.type


def test_micro_batches_without_chosen_tokens_add_no_mlm_loss(tokenizer, corpus, tmp_path):
    # Segments of at most 6 maskable tokens, one per micro-batch: about 0.85^6 = 38% choose no token, where
    # the mean cross-entropy is 0/0 = NaN; such a micro-batch must add no MLM loss and no gradient.
    model = tiny_model(tokenizer)
    recipe = PretrainingRecipe(max_steps=12, batch_size=1, seq_len=8, nsp=False, log_every=1, seed=1)
    history = pretrain(model, tokenizer, corpus[:2], recipe, output_dir=tmp_path / "short", progress=False,
                       device="cpu")
    empty = [record for record in history if record["mlm_loss"] is None]
    assert empty and len(empty) < len(history)  # both kinds of micro-batch occurred
    assert all(record["loss"] == 0.0 and record["mlm_accuracy"] == 0.0 for record in empty)
    assert all(math.isfinite(record["mlm_loss"]) for record in history if record["mlm_loss"] is not None)
    assert all(torch.isfinite(parameter).all() for parameter in model.parameters())

    # No token ever chosen: training is NSP alone, and the MLM-only weights are not trained.
    model = tiny_model(tokenizer)
    mlm_only = {name: tensor.clone() for name, tensor in model.state_dict().items()  # decoder.weight: the embeddings
                if name.startswith("mlm_head.") and name != "mlm_head.decoder.weight"}
    assert mlm_only
    recipe = PretrainingRecipe(max_steps=3, batch_size=4, seq_len=32, mlm_probability=0.0, weight_decay=0.0,
                               log_every=1)
    history = pretrain(model, tokenizer, corpus[:3], recipe, output_dir=tmp_path / "nsp", progress=False, device="cpu")
    assert all(record["mlm_loss"] is None and math.isfinite(record["nsp_loss"]) for record in history)
    assert all(record["loss"] == record["nsp_loss"] for record in history)
    state = model.state_dict()
    assert all(torch.equal(state[name], tensor) for name, tensor in mlm_only.items())
    assert all(torch.isfinite(parameter).all() for parameter in model.parameters())


def test_a_checkpoint_loads_for_a_process_on_another_device(tokenizer, corpus, tmp_path):
    """Regression: the checkpoint was read onto the process's device, which put the saved random states
    on the GPU, where ``torch.set_rng_state`` refuses them (TypeError: RNG state must be a
    torch.ByteTensor), and AdamW's step counts with them. On ``meta`` the same TypeError was raised."""
    recipe = PretrainingRecipe(max_steps=2, batch_size=4, seq_len=32, log_every=1)
    pretrain(tiny_model(tokenizer), tokenizer, corpus[:3], recipe, output_dir=tmp_path, progress=False, device="cpu")
    saved = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    with torch.device("meta"):
        model = BertForPreTraining(tiny_config(tokenizer.vocab_size))
    optimizer = torch.optim.AdamW(weight_decay_groups(model, 0.01), lr=1e-3)
    scheduler = get_linear_schedule(optimizer, 0, 2)
    torch.manual_seed(99)
    process = pretraining_loop._Process(rank=0, world_size=1, device=torch.device("meta"), started_group=False)
    step = pretraining_loop._load_checkpoint(tmp_path / "checkpoint.pt", model, optimizer, scheduler,
                                             grad_scaler(process.device), saved["settings"], process)
    assert step == 2
    assert torch.equal(torch.get_rng_state(), saved["rng_states"][0]["torch"])
    states = list(optimizer.state.values())
    assert states and all(state["exp_avg"].device.type == "meta" for state in states)
    assert all(state["step"].device.type == "cpu" for state in states)  # as in a run that never stopped


def test_a_corrupt_checkpoint_is_named_in_a_clear_error(tokenizer, corpus, tmp_path):
    (tmp_path / "checkpoint.pt").write_bytes(b"not a checkpoint")
    recipe = PretrainingRecipe(max_steps=2, batch_size=4, seq_len=32)
    with pytest.raises(ValueError, match=r"checkpoint\.pt: it is not a readable checkpoint"):
        pretrain(tiny_model(tokenizer), tokenizer, corpus[:3], recipe, output_dir=tmp_path, progress=False,
                 device="cpu")


# ---------------------------------------------------------------------------------------------- evaluation


def test_evaluate_masked_lm_scores_the_fixed_masked_tokens(tokenizer, corpus):
    """Against the cross-entropy of the full (B, N, V) logits at the masked positions, and against
    counting by hand for the unigram predictor."""
    model = tiny_model(tokenizer).eval()
    held_out = corpus[10:13]
    scores = evaluate_masked_lm(model, tokenizer, held_out, seq_len=32, batch_size=8, seed=5)
    assert isinstance(scores, MaskedLMScores) and scores.predicted_tokens > 50
    dataset = PretrainingDataset(tokenizer, held_out, seq_len=32, nsp=False, masking="static", seed=5)
    batch = dataset.collate([dataset[index] for index in range(len(dataset))])
    with torch.no_grad():
        logits = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]).mlm_logits
    chosen = batch["mlm_labels"] != IGNORE_INDEX
    expected = nn.functional.cross_entropy(logits[chosen], batch["mlm_labels"][chosen])
    assert scores.loss == pytest.approx(float(expected), rel=1e-5)
    assert scores.predicted_tokens == int(chosen.sum())
    assert scores.accuracy == pytest.approx(
        float((logits[chosen].argmax(-1) == batch["mlm_labels"][chosen]).double().mean()))
    assert abs(scores.loss - math.log(tokenizer.vocab_size)) < 0.5  # an untrained model: about ln V

    counts = token_frequencies(tokenizer, corpus[:10])
    words = [token for document in corpus[:10] for sentence in document for token in tokenizer.tokenize(sentence)]
    assert counts.sum() == len(words) and counts[tokenizer.convert_tokens_to_ids(words[0])] == words.count(words[0])
    unigram = unigram_masked_lm(counts, tokenizer, held_out, seq_len=32, seed=5)
    targets = batch["mlm_labels"][chosen]
    probabilities = (counts + 1) / (counts + 1).sum()
    assert unigram.loss == pytest.approx(float(-probabilities[targets].log().mean()))
    assert unigram.predicted_tokens == scores.predicted_tokens  # the same positions
    assert unigram.accuracy == pytest.approx(float((targets == counts.argmax()).double().mean()))


def tiny_gpt(tokenizer, seed: int = 0, dropout: float = 0.1) -> GPTLMHeadModel:
    """A random GPT whose logits are spread wide (initializer_range 0.5), so that no two are so close
    that padding, which changes the float rounding, could change an argmax."""
    torch.manual_seed(seed)
    return GPTLMHeadModel(GPTConfig(vocab_size=tokenizer.vocab_size, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                                    initializer_range=0.5, bos_token_id=tokenizer.cls_token_id,
                                    eos_token_id=tokenizer.sep_token_id, pad_token_id=tokenizer.pad_token_id,
                                    resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout))


def causal_examples(tokenizer, documents, seq_len: int) -> list[torch.Tensor]:
    """[CLS] segment [SEP] for each full-sentence segment, unpadded."""
    return [torch.tensor([tokenizer.cls_token_id, *segment, tokenizer.sep_token_id])
            for segment in pack_full_sentences(tokenizer, documents, seq_len)]


def test_evaluate_causal_lm_is_the_causal_loss_of_every_segment(tokenizer, corpus):
    """Against causal_lm_loss on each segment alone (no padding, no batch), for a GPT in training mode
    (evaluated in eval mode, and left in training mode), and against the count-based model's
    probabilities summed over the same tokens."""
    gpt = tiny_gpt(tokenizer).train()
    held_out = corpus[10:13]
    scores = evaluate_causal_lm(gpt, tokenizer, held_out, seq_len=32, batch_size=3)
    assert gpt.training
    examples = causal_examples(tokenizer, held_out, 32)
    gpt.eval()
    total, correct, predicted = 0.0, 0, 0
    with torch.no_grad():
        for ids in examples:
            logits = gpt(ids[None]).logits  # (1, L, V)
            total += float(causal_lm_loss(logits, ids[None])) * (len(ids) - 1)
            correct += int((logits[0, :-1].argmax(-1) == ids[1:]).sum())
            predicted += len(ids) - 1
    assert scores.predicted_tokens == predicted == sum(len(ids) - 1 for ids in examples)
    assert scores.loss == pytest.approx(total / predicted, rel=1e-5)
    assert scores.perplexity == pytest.approx(math.exp(total / predicted), rel=1e-5)
    assert scores.accuracy == pytest.approx(correct / predicted)
    assert abs(scores.loss - math.log(tokenizer.vocab_size)) < 5  # a random model: in the region of ln V

    train = pack_full_sentences(tokenizer, corpus[:10], 32)
    counts = NGramCounts.fit(train, tokenizer.vocab_size, bos_token_id=tokenizer.cls_token_id,
                             eos_token_id=tokenizer.sep_token_id)
    bigram = KneserNeyBigram(counts)
    ngram = evaluate_causal_lm(bigram, tokenizer, held_out, seq_len=32, batch_size=3)
    assert ngram.predicted_tokens == scores.predicted_tokens  # the same tokens
    log_likelihood = sum(float(bigram.log_prob(ids[:-1], ids[1:]).sum()) for ids in examples)
    assert ngram.loss == pytest.approx(-log_likelihood / predicted, rel=1e-6)
    guesses = [int((bigram.next_token_log_probs(ids[:-1]).argmax(-1) == ids[1:]).sum()) for ids in examples]
    assert ngram.accuracy == pytest.approx(sum(guesses) / predicted)
    assert ngram.loss < math.log(tokenizer.vocab_size)  # the bigram learned something from the training text
    uniform = evaluate_causal_lm(AddKUnigram(torch.zeros(tokenizer.vocab_size)), tokenizer, held_out, seq_len=32)
    assert uniform.perplexity == pytest.approx(tokenizer.vocab_size)


def test_evaluate_causal_lm_runs_on_the_models_device(tokenizer, corpus, device):
    held_out = corpus[10:12]
    gpt = tiny_gpt(tokenizer, dropout=0.0).eval()
    counts = NGramCounts.fit(pack_full_sentences(tokenizer, corpus[:10], 32), tokenizer.vocab_size,
                             bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id)
    for model, moved in [(gpt, tiny_gpt(tokenizer, dropout=0.0).to(device)),
                         (KneserNeyBigram(counts), KneserNeyBigram(counts).to(device))]:
        here, there = (evaluate_causal_lm(m, tokenizer, held_out, seq_len=32, batch_size=4) for m in (model, moved))
        assert there.predicted_tokens == here.predicted_tokens
        assert there.loss == pytest.approx(here.loss, rel=1e-4)
        there = causal_masked_lm(moved, tokenizer, held_out, seq_len=32, batch_size=4, seed=3)
        assert there.loss == pytest.approx(causal_masked_lm(model, tokenizer, held_out, seq_len=32, seed=3).loss,
                                           rel=1e-4)


def test_causal_masked_lm_predicts_bert_s_masked_words_from_their_left(tokenizer, corpus):
    """The GPT predicts the positions evaluate_masked_lm masks, from the unmasked tokens on their left:
    against log_softmax of the logits at i - 1 for each masked i, computed segment by segment."""
    gpt = tiny_gpt(tokenizer, dropout=0.0).eval()
    held_out = corpus[10:13]
    bert = evaluate_masked_lm(tiny_model(tokenizer), tokenizer, held_out, seq_len=32, batch_size=8, seed=5)
    scores = causal_masked_lm(gpt, tokenizer, held_out, seq_len=32, batch_size=3, seed=5)
    assert isinstance(scores, MaskedLMScores) and scores.predicted_tokens == bert.predicted_tokens
    dataset = PretrainingDataset(tokenizer, held_out, seq_len=32, nsp=False, masking="static", seed=5)
    total, correct, predicted = 0.0, 0, 0
    with torch.no_grad():
        for example, (masked, labels) in zip(dataset.examples, dataset.static_masks):
            ids = example["input_ids"]  # (L,): the segment unmasked
            log_probs = gpt(ids[None]).logits[0].log_softmax(-1)  # (L, V)
            for i in (labels != IGNORE_INDEX).nonzero().flatten().tolist():
                assert i > 0 and labels[i] == ids[i]
                total -= float(log_probs[i - 1, ids[i]])
                correct += int(log_probs[i - 1].argmax() == ids[i])
                predicted += 1
    assert scores.predicted_tokens == predicted
    assert scores.loss == pytest.approx(total / predicted, rel=1e-5)
    assert scores.accuracy == pytest.approx(correct / predicted)


def test_causal_masked_lm_reads_only_the_left_context(tokenizer):
    """Documents of whole-word tokens, one token a word: changing the last word of the last segment, right
    of every masked position, leaves the scores unchanged; changing the word left of a masked one does
    not (the test can fail)."""
    words = [token for token in tokenizer.ids_to_tokens if token.isalpha() and tokenizer.tokenize(token) == [token]]
    gpt = tiny_gpt(tokenizer, dropout=0.0).eval()

    def documents(last_words: dict[int, str]) -> list[list[str]]:
        sentences = np.random.default_rng(0).choice(words, size=(9, 8)).tolist()  # 3 documents of 3 sentences
        for position, word in last_words.items():
            sentences[-1][position] = word
        return [[" ".join(sentence) for sentence in sentences[start:start + 3]] for start in (0, 3, 6)]

    for seed in range(100):  # a seed whose last segment ends with an unmasked word after a masked one
        dataset = PretrainingDataset(tokenizer, documents({}), seq_len=32, nsp=False, masking="static", seed=seed)
        labels = dataset.static_masks[-1][1]  # (L,): [CLS] ... the last sentence's 8 words, [SEP]
        chosen = (labels != IGNORE_INDEX).tolist()
        last_sentence = range(len(labels) - 9, len(labels) - 1)
        left_of_masked = [i - 1 for i in last_sentence if chosen[i] and i - 1 in last_sentence and not chosen[i - 1]]
        if not chosen[-2] and left_of_masked:
            break
    else:
        pytest.fail("no seed masks the last sentence as the test needs")
    other = next(word for word in words if word != documents({})[-1][-1].split()[-1])
    reference = causal_masked_lm(gpt, tokenizer, documents({}), seq_len=32, seed=seed)
    right = causal_masked_lm(gpt, tokenizer, documents({7: other}), seq_len=32, seed=seed)
    left = causal_masked_lm(gpt, tokenizer, documents({left_of_masked[0] - last_sentence[0]: other}), seq_len=32,
                            seed=seed)
    assert right == reference
    assert left.predicted_tokens == reference.predicted_tokens and left.loss != reference.loss


@pytest.mark.parametrize("make, kwargs, error, message", [
    (lambda tokenizer: tiny_model(tokenizer), {}, TypeError,
     r"model must be a bertlab.gpt.GPTLMHeadModel or a count-based model of bertlab.ngram, got BertForPreTraining"),
    (tiny_gpt, {"seq_len": 64}, ValueError, r"seq_len 64 is longer than the model's n_positions=32"),
    (tiny_gpt, {"batch_size": 0}, ValueError, r"batch_size must be a positive integer, got 0"),
])
def test_the_causal_evaluations_name_bad_input(tokenizer, corpus, make, kwargs, error, message):
    for evaluate in (evaluate_causal_lm, causal_masked_lm):
        with pytest.raises(error, match=message):
            evaluate(make(tokenizer), tokenizer, corpus[10:11], **{"seq_len": 32, **kwargs})
    with pytest.raises(ValueError, match="no text"):
        evaluate_causal_lm(tiny_gpt(tokenizer), tokenizer, [[""]], seq_len=32)


# ---------------------------------------------------------------------------------------------- torchrun


DISTRIBUTED_SCRIPT = """
import torch
import torch.distributed as dist
from bertlab.bert import BertConfig, BertForPreTraining
from bertlab.data import pretraining_corpus
from bertlab.pretraining import PretrainingRecipe, pretrain
from bertlab.tokenization import BertTokenizer

dist.init_process_group("gloo")
rank = dist.get_rank()
tokenizer = BertTokenizer({vocab!r})
documents = [document for document in pretraining_corpus() if len(document) >= 5][:4]
for nsp, accumulation in [(True, 2), (False, 1)]:
    torch.manual_seed(rank)  # different initial weights: DDP must broadcast rank 0's
    model = BertForPreTraining(BertConfig(**{config!r}))
    initial = {{name: tensor.clone() for name, tensor in model.state_dict().items()}}
    recipe = PretrainingRecipe(max_steps=3, batch_size=4, seq_len=32, grad_accum_steps=accumulation, nsp=nsp,
                               log_every=1)
    history = pretrain(model, tokenizer, documents, recipe, output_dir={out!r} + f"/nsp{{nsp}}", progress=False,
                       device="cpu")
    torch.save({{"initial": initial, "final": model.state_dict(), "history": history}},
               {out!r} + f"/rank{{rank}}-nsp{{nsp}}.pt")
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_torchrun_two_processes_train_identical_replicas(tokenizer, tmp_path):
    tokenizer.save_vocabulary(tmp_path)
    script = tmp_path / "train.py"
    config = dataclasses.asdict(tiny_config(tokenizer.vocab_size))
    script.write_text(DISTRIBUTED_SCRIPT.format(config=config, vocab=str(tmp_path / "vocab.txt"), out=str(tmp_path)))
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    environment.pop("WORLD_SIZE", None)
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                             "--master_addr", "127.0.0.1", "--master_port", str(free_port()), str(script)],
                            env=environment, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    for nsp in (True, False):
        rank0, rank1 = (torch.load(tmp_path / f"rank{rank}-nsp{nsp}.pt", weights_only=True) for rank in (0, 1))
        assert not all(torch.equal(rank0["initial"][name], rank1["initial"][name]) for name in rank0["initial"])
        assert all(torch.equal(rank0["final"][name], rank1["final"][name]) for name in rank0["final"])
        assert not all(torch.equal(rank0["final"][name], rank0["initial"][name]) for name in rank0["final"])
        # the metrics are averaged over both processes; the speed and time are each one's own
        for record0, record1 in zip(rank0["history"], rank1["history"], strict=True):
            own = {"tokens_per_second": 0, "seconds": 0}
            assert {**record0, **own} == {**record1, **own}
        # only rank 0 writes: one line per logged step
        assert [r["step"] for r in load_metrics(tmp_path / f"nsp{nsp}" / "metrics.jsonl")] == [1, 2, 3]
        assert (rank0["history"][0]["nsp_loss"] is None) == (not nsp)


# ---------------------------------------------------------------------------------------------- the course's BERT


def test_the_course_bert_ships_with_the_package_and_hugging_face_reads_it():
    folder = course_bert_folder()
    assert (folder / "model.safetensors").stat().st_size <= 25e6
    card = (folder / "README.md").read_text()
    assert all(part in card for part in ("Maas", "Large Movie Review", "Held-out", "float16"))
    model, tokenizer = course_bert(device="cpu")
    config = model.config
    assert (config.num_hidden_layers, config.hidden_size, config.vocab_size) == (4, 256, tokenizer.vocab_size)
    assert next(model.parameters()).dtype == torch.float32 and not model.training
    counts = course_bert_token_counts()
    assert counts.shape == (tokenizer.vocab_size,) and counts.sum() > 1e6

    texts = ["This movie was surprisingly good, and the acting was superb!",
             "A dull, predictable plot; I wouldn't watch it again."]
    theirs = HFBertTokenizerFast.from_pretrained(folder)
    assert [theirs.tokenize(text) for text in texts] == [tokenizer.tokenize(text) for text in texts]
    hf_model = transformers.BertForPreTraining.from_pretrained(folder, attn_implementation="eager").eval()
    assert next(hf_model.parameters()).dtype == torch.float32
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        ours = model(**batch).mlm_logits
        expected = hf_model(**batch).prediction_logits
    torch.testing.assert_close(ours, expected, atol=1e-4, rtol=1e-4)


def test_the_weights_sha256_is_computed_by_hashlib_from_the_shipped_file():
    expected = hashlib.sha256((course_bert_folder() / "model.safetensors").read_bytes()).hexdigest()
    assert pretraining.course_bert_sha256() == expected and len(expected) == 64


@pytest.mark.parametrize("sha256, reason", [
    (None, "lacks course_bert_sha256: it was written by an older version of the script"),
    ("0" * 64, "was recorded with other weights of the course's BERT than the ones installed here: run "
               "python benchmarks/bert_results.py --data-root DIR again"),  # the record's own command
])
def test_a_recorded_run_of_other_weights_is_not_shown_as_the_course_berts(tmp_path, sha256, reason):
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    record = {"command": "python benchmarks/bert_results.py --data-root DIR", "classification": {"course_bert": 0.75}}
    (results / "bert-cpu.json").write_text(json.dumps({**record, "course_bert_sha256": sha256} if sha256 else record))
    with pytest.raises(RecordedResultsUnavailable) as unavailable:
        pretraining.read_course_bert_results("bert-cpu.json", {"classification": ["course_bert"]}, start=tmp_path)
    assert reason in str(unavailable.value) and "\n" not in str(unavailable.value)

    (results / "bert-cpu.json").write_text(json.dumps({**record,
                                                       "course_bert_sha256": pretraining.course_bert_sha256()}))
    chapter = tmp_path / "chapters" / "08_finetuning"
    chapter.mkdir(parents=True)
    recorded = pretraining.read_course_bert_results("bert-cpu.json", {"classification": ["course_bert"]}, start=chapter)
    assert recorded["classification"]["course_bert"] == 0.75


def test_the_course_bert_tool_runs_the_command_its_model_card_records(tmp_path, monkeypatch):
    course_bert = tool_module("course_bert")
    ran = []
    monkeypatch.setattr(cli, "main", lambda argv: ran.append(argv) or 0)
    work = tmp_path / "run"
    work.mkdir()
    assert course_bert.main(course_bert.COURSE_BERT, ["pretrain", "--packed", "x.npz", "--work", str(work),
                                                      "--device", "cuda"]) == 0
    command = " ".join(course_bert.placeholders(ran[0]))
    card = (COURSE_BERT_FOLDER / "README.md").read_text()
    assert f"    bertlab {command}\n" in card, command
    assert json.loads((work / "command.json").read_text()) == ran[0]


@pytest.mark.parametrize("rate, expected_lrs", [(100.0, [1e-3, 2e-3]), (1.0, [1e-3])])
def test_a_sweep_keeps_its_steps_and_runs_only_the_first_rate_when_the_others_would_not_fit(
        tmp_path, monkeypatch, rate, expected_lrs):
    course_models = tool_module("course_models")
    course_bert = tool_module("course_bert")
    ran = []
    monkeypatch.setattr(course_models, "calibrate", lambda model, args: [rate, rate])
    monkeypatch.setattr(course_models, "run_side_by_side",
                        lambda model, args, folder, steps: ran.append((list(args.lrs), steps)) or [])
    # 1,000 steps in a budget of 100 s: they fit side by side at 100 steps/s, not at 1 step/s
    assert course_models.main(course_bert.COURSE_BERT, ["sweep", "--lrs", "1e-3", "2e-3", "--steps", "1000",
                                                        "--seconds", "100", "--work", str(tmp_path)]) == 0
    assert ran == [(expected_lrs, 1000)]
    assert json.loads((tmp_path / "sweep.json").read_text())["lrs"] == expected_lrs
