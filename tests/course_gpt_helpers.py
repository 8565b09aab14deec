"""The course GPT's tools run on tiny data: ``tools/course_gpt.py`` (pack, pretrain, export) on a small
aclImdb, and ``benchmarks/bert_vs_gpt.py --quick`` on a small MR with tiny models; what they write has the
layout of the records and the model folder they ship."""

import dataclasses
from pathlib import Path
from types import ModuleType

import pytest
import torch

import bertlab.course_model
from bertlab.bert import BertConfig, BertForPreTraining
from bertlab.course_model import course_bert_folder
from bertlab.gpt import GPTConfig, GPTLMHeadModel
from tests.script_helpers import benchmark_script, tool_module


def write_small_imdb(root: Path, reviews_per_folder: int = 8) -> None:
    """An aclImdb/ in the authors' layout, a few short reviews of common words in each folder."""
    words = ["the film was good", "a bad movie", "i liked the story", "the acting was great",
             "it was a long film", "the end was bad", "a good cast", "not a great movie"]
    for number, folder in enumerate(["train/unsup", "train/pos", "train/neg", "test/pos", "test/neg"]):
        (root / "aclImdb" / folder).mkdir(parents=True)
        for i in range(reviews_per_folder):
            text = f"{words[(i + number) % 8].capitalize()}. {words[(3 * i + 1) % 8].capitalize()} and {words[i % 8]}."
            (root / "aclImdb" / folder / f"{i}_{7 if 'pos' in folder else 2}.txt").write_text(text)


@dataclasses.dataclass(frozen=True)
class ExportedCourseGPT:
    """What ``tools/course_gpt.py`` made in a folder: the tool's module, the run, the shipped folder and
    the record (``benchmarks/results/course-gpt.json`` of a real export)."""

    tool: ModuleType
    work: Path
    package: Path
    record: Path


def export_small_course_gpt(folder: Path, monkeypatch: pytest.MonkeyPatch) -> ExportedCourseGPT:
    """Pack a small aclImdb written in ``folder``, pretrain the shipped recipe for 2 steps of 2 segments,
    and export: scored on 4 held-out reviews of each polarity, with 4 more on which the add-k baselines
    choose k (``monkeypatch`` sets those sizes, and where the tool writes)."""
    course_gpt = tool_module("course_gpt")
    write_small_imdb(folder)
    packed, work = folder / "packed.npz", folder / "run"
    exported = ExportedCourseGPT(course_gpt, work, folder / "course_gpt", folder / "course-gpt.json")
    tool = course_gpt.COURSE_GPT
    assert course_gpt.main(tool, ["pack", "--data-root", str(folder), "--packed", str(packed)]) == 0
    assert course_gpt.main(tool, ["pretrain", "--packed", str(packed), "--work", str(work), "--steps", "2",
                                  "--batch-size", "2", "--device", "cpu"]) == 0
    monkeypatch.setattr(bertlab.course_model, "HELD_OUT_REVIEWS", 4)
    monkeypatch.setattr(course_gpt, "HELD_OUT_REVIEWS", 4)
    monkeypatch.setattr(course_gpt, "DEV_REVIEWS", 4)
    monkeypatch.setattr(course_gpt, "PACKAGE_FOLDER", exported.package)
    monkeypatch.setattr(course_gpt, "RESULTS_FILE", exported.record)
    assert course_gpt.main(tool, ["export", "--data-root", str(folder), "--work", str(work), "--packed",
                                  str(packed)]) == 0
    return exported


@dataclasses.dataclass(frozen=True)
class SmallBertVsGpt:
    """A quick run of ``benchmarks/bert_vs_gpt.py`` made ready in a folder: the script's module, its
    arguments (which write the record to ``out``) and the two model folders they name."""

    script: ModuleType
    arguments: list[str]
    bert_folder: Path
    gpt_folder: Path
    out: Path


def small_bert_vs_gpt(folder: Path, out: Path) -> SmallBertVsGpt:
    """A tiny BERT and a tiny GPT of the course's vocabulary, and 60 MR sentences, in ``folder``, and the
    arguments of a quick run on them."""
    vocab_size = len((course_bert_folder() / "vocab.txt").read_text().splitlines())
    torch.manual_seed(0)
    bert = BertForPreTraining(BertConfig(vocab_size=vocab_size, hidden_size=16, num_hidden_layers=1,
                                         num_attention_heads=2, intermediate_size=32))
    gpt = GPTLMHeadModel(GPTConfig(vocab_size=vocab_size, n_positions=64, n_embd=16, n_layer=1, n_head=2,
                                   bos_token_id=2, eos_token_id=3, pad_token_id=0))
    bert_folder, gpt_folder = bert.save_pretrained(folder / "bert"), gpt.save_pretrained(folder / "gpt")
    mr = folder / "data" / "rt-polarity"
    mr.mkdir(parents=True)
    for polarity, words in (("pos", "a fine good great film"), ("neg", "a dull bad poor film")):
        (mr / f"rt-polarity.{polarity}").write_text(
            "".join(f"{words} number {i} .\n" for i in range(30)), encoding="latin-1")
    arguments = ["--data-root", str(folder / "data"), "--quick", "--device", "cpu", "--no-progress", "--bert",
                 str(bert_folder), "--gpt", str(gpt_folder), "--out", str(out), "--work-dir", str(folder / "work")]
    return SmallBertVsGpt(benchmark_script("bert_vs_gpt"), arguments, bert_folder, gpt_folder, out)
