"""Chapter 11's cells that show the course GPT and its records, run before either ships and as they will
run the day both do.

Shipped: the course GPT is the folder ``tools/course_gpt.py export`` makes from two steps of pretraining on
a small aclImdb, and the records are those the tool and ``benchmarks/bert_vs_gpt.py --quick`` write,
their numbers replaced by made-up ones (every replaced key must be in the writer's record: the layout is
the writer's), which the printed tables must hold. Nothing shipped: each cell prints its one-line reason.
"""

import contextlib
import io
import json
import math
import re

import nbformat
import pytest
import torch

import bertlab.course_model
import bertlab.recorded
from tests.conftest import REPO_ROOT
from tests.course_gpt_helpers import export_small_course_gpt, small_bert_vs_gpt

pytestmark = pytest.mark.usefixtures("one_thread")

CHAPTER = REPO_ROOT / "chapters" / "11_gpt" / "11_gpt.ipynb"
SHOWING = ["course-gpt-perplexity", "course-gpt-masked-words", "course-gpt-decoding", "bert-vs-gpt"]
RULES = ["greedy", "sampling, T = 1.0", "sampling, T = 0.7", "top-k, k = 40", "top-p, p = 0.9"]


def run_cells(cell_ids: list[str]) -> dict[str, str]:
    """What each of the released chapter's cells ``cell_ids`` prints, run in order after its setup cell, in
    this process (so that a test's monkeypatching holds)."""
    cells = {cell.get("id"): cell.source for cell in nbformat.read(CHAPTER, as_version=4).cells}
    namespace, printed = {}, {}
    try:
        exec(cells["setup"], namespace)
        for cell_id in cell_ids:
            with contextlib.redirect_stdout(io.StringIO()) as output:
                exec(cells[cell_id], namespace)
            printed[cell_id] = output.getvalue()
    finally:
        torch.set_printoptions(profile="default")  # the setup cell's
    return printed


def replace_numbers(entry: dict, **values) -> None:
    """Give the keys of a writer's record made-up values; a key the writer did not write fails."""
    missing = set(values) - set(entry)
    assert not missing, f"the record has no {sorted(missing)}: its layout changed"
    entry.update(values)


def made_up_course_gpt_record(record: dict) -> dict:
    held_out = record["held_out"]
    replace_numbers(held_out, held_out_reviews=2000, ln_vocab_size=math.log(8192))
    replace_numbers(held_out["model"], loss=4.123, perplexity=61.75, accuracy=0.2468, predicted_tokens=512345)
    baselines = held_out["baselines"]
    replace_numbers(baselines["add_k_unigram"], k=0.1, loss=6.111, perplexity=450.5, accuracy=0.0611)
    replace_numbers(baselines["add_k_bigram"], k=0.01, loss=5.222, perplexity=185.3, accuracy=0.1422)
    replace_numbers(baselines["kneser_ney_bigram"], discount=0.777, loss=4.888, perplexity=132.7, accuracy=0.1711)
    masked = held_out["masked_words"]
    replace_numbers(masked, bert_training_tokens=371_916_800)
    replace_numbers(masked["bert"], loss=2.345, accuracy=0.5432, predicted_tokens=76543)
    replace_numbers(masked["gpt"], loss=3.456, accuracy=0.4321, predicted_tokens=76543)
    replace_numbers(record["pretraining"]["settings"], max_steps=11350, batch_size=256, seq_len=128)
    return record


def made_up_bert_vs_gpt_record(record: dict) -> dict:
    replace_numbers(record["dataset"], train=8530, dev=1066, test=1066)
    bert, gpt = record["models"]["course BERT"], record["models"]["course GPT"]
    replace_numbers(bert, pooling="cls", learning_rate=3e-4, mean=0.8123, std=0.0064, by_seed=[0.8078, 0.8168])
    replace_numbers(gpt, pooling="last", learning_rate=1e-3, mean=0.7654, std=0.0071, by_seed=[0.7604, 0.7704])
    for model, accuracies in ((bert, {"mean": 0.801, "cls": 0.805}), (gpt, {"last": 0.778, "mean": 0.771})):
        for pooling, accuracy in accuracies.items():
            replace_numbers(model["dev_search"][pooling], dev_accuracy=accuracy)
    replace_numbers(record["bert_over_gpt"], difference=4.69, low=2.51, high=6.87, examples=1066, mcnemar_p=0.0012,
                    significant=True, reverse_significant=False)
    return record


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """A course repository whose benchmarks/results/ holds the two records, and the course GPT's folder."""
    folder = tmp_path_factory.mktemp("shipped")
    with pytest.MonkeyPatch.context() as monkeypatch:
        exported = export_small_course_gpt(folder / "course-gpt", monkeypatch)
    results = folder / "course" / "benchmarks" / "results"
    results.mkdir(parents=True)
    record = made_up_course_gpt_record(json.loads(exported.record.read_text()))
    (results / "course-gpt.json").write_text(json.dumps(record))
    comparison = small_bert_vs_gpt(folder / "mr", results / "bert-vs-gpt-cpu.json")
    assert comparison.script.main(comparison.arguments) == 0
    record = made_up_bert_vs_gpt_record(json.loads(comparison.out.read_text()))
    assert record["course_gpt_sha256"] == bertlab.course_model.weights_sha256(comparison.gpt_folder)
    # the comparison stands for one made with the GPT shipped here (its own tiny GPT is quicker to fine-tune)
    record["course_gpt_sha256"] = bertlab.course_model.weights_sha256(exported.package)
    comparison.out.write_text(json.dumps(record))
    return folder / "course", exported.package


def test_the_cells_print_the_records_tables_and_the_course_gpt_s_samples(shipped, monkeypatch):
    repository, package = shipped
    monkeypatch.chdir(repository)  # the records are read from the course repository that holds the folder
    monkeypatch.setattr(bertlab.course_model, "COURSE_GPT_FOLDER", package)
    printed = run_cells(SHOWING)

    perplexity = printed["course-gpt-perplexity"].splitlines()
    date = json.loads((repository / "benchmarks" / "results" / "course-gpt.json").read_text())["date"]
    assert perplexity[0] == (f"recorded by python tools/course_gpt.py export --data-root DIR on {date[:10]}: 2,000 "
                             "held-out test reviews, 512,345 predicted tokens")
    rows = {line[:32].strip(): line[32:].split() for line in perplexity[2:-1]}
    assert rows == {"uniform over the vocabulary": ["9.011", "8192.0", "0.000"],
                    "add-k unigram, k = 0.1": ["6.111", "450.5", "0.061"],
                    "add-k bigram, k = 0.01": ["5.222", "185.3", "0.142"],
                    "Kneser-Ney bigram, D = 0.777": ["4.888", "132.7", "0.171"],
                    "the course GPT": ["4.123", "61.8", "0.247"]}
    assert perplexity[-1] == (f"the course GPT minus the Kneser-Ney bigram: -0.765 nats per token; the GPT's "
                              f"perplexity is {math.exp(4.123 - 4.888):.3f} times the bigram's")

    masked = printed["course-gpt-masked-words"].splitlines()
    assert masked[0] == ("the words the course BERT's card masks: 76,543 tokens; trained on 372M token positions "
                         f"(the BERT, bertlab/course_bert) and {11350 * 256 * 128 / 1e6:,.0f}M (the GPT)")
    assert masked[2].split()[-2:] == ["2.345", "0.543"] and masked[2].startswith("the course BERT, both sides")
    assert masked[3].split()[-2:] == ["3.456", "0.432"] and masked[3].startswith("the course GPT, the left side only")

    comparison = printed["bert-vs-gpt"]
    assert "MR: 8,530 training, 1,066 development and 1,066 test sentences; seeds [0, 1]" in comparison
    assert re.search(r"course BERT +cls +0.0003 +81.2 ± 0.6 +80.8, 81.7 +mean 80.1, cls 80.5\n", comparison)
    assert re.search(r"course GPT +last +0.001 +76.5 ± 0.7 +76.0, 77.0 +last 77.8, mean 77.1\n", comparison)
    assert ("BERT - GPT, in points: difference +4.7, 95% interval [+2.5, +6.9] (paired bootstrap over 1,066 test "
            "examples, 10,000 resamples); exact McNemar p = 0.0012 (McNemar's p: the largest over the seeds)\n"
            in comparison)
    assert comparison.endswith("BERT above GPT: significant at 95%\nGPT above BERT: not significant at 95%\n")

    decoding = printed["course-gpt-decoding"]
    for rule in RULES:
        block = decoding.split(f"{rule}:\n")[1]
        prompts = block.splitlines()[:3]
        assert [line.split(" | ")[0] for line in prompts] == ["  this movie was", "  the acting in this film",
                                                              "  i would not recommend"], block
        distinct = re.match(r"  12 samples, \d+ tokens: distinct-1 (\d\.\d{3}), distinct-2 (\d\.\d{3})$",
                            block.splitlines()[3])
        assert distinct, block
        if rule == "greedy":  # the same continuation 4 times: each n-gram at least 4 times
            assert float(distinct[1]) <= 0.25 and float(distinct[2]) <= 0.25


def test_with_nothing_shipped_each_cell_says_why_in_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no course repository above
    monkeypatch.setattr(bertlab.recorded, "packaged_results", lambda: tmp_path / "no-copies")
    monkeypatch.setattr(bertlab.course_model, "COURSE_GPT_FOLDER", tmp_path / "course_gpt")
    printed = run_cells(SHOWING)
    nowhere = "No recorded results here: benchmarks/results/{} is neither in a course repository above this folder "
    reasons = {"course-gpt-perplexity": (nowhere.format("course-gpt.json"), ": the course GPT's held-out scores "
                                         "are skipped (python tools/course_gpt.py export records them)"),
               "course-gpt-masked-words": (nowhere.format("course-gpt.json"), ": the masked words are skipped "
                                           "(python tools/course_gpt.py export records them)"),
               "course-gpt-decoding": (f"the course's GPT is missing from {tmp_path / 'course_gpt'}: ",
                                       "make it with tools/course_gpt.py: the samples are skipped"),
               "bert-vs-gpt": (nowhere.format("bert-vs-gpt-cpu.json"), ": the comparison is skipped (python "
                               "benchmarks/bert_vs_gpt.py records it)")}
    for cell_id, (start, end) in reasons.items():
        assert printed[cell_id].count("\n") == 1, printed[cell_id]
        assert printed[cell_id].startswith(start) and printed[cell_id].endswith(f"{end}\n"), printed[cell_id]


def test_a_record_of_another_gpt_is_not_shown_as_the_installed_one_s(shipped, tmp_path, monkeypatch):
    repository, package = shipped
    other = tmp_path / "course_gpt"  # the same GPT with one weight changed: another release
    other.mkdir()
    for file in package.iterdir():
        (other / file.name).write_bytes(file.read_bytes())
    weights = other / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + bytes([weights.read_bytes()[-1] ^ 1]))
    monkeypatch.chdir(repository)
    monkeypatch.setattr(bertlab.course_model, "COURSE_GPT_FOLDER", other)
    printed = run_cells(["course-gpt-perplexity", "bert-vs-gpt"])
    for cell_id, record, command in (
            ("course-gpt-perplexity", "course-gpt.json", "python tools/course_gpt.py export --data-root DIR"),
            ("bert-vs-gpt", "bert-vs-gpt-cpu.json", "python benchmarks/bert_vs_gpt.py")):
        assert printed[cell_id].count("\n") == 1, printed[cell_id]
        assert printed[cell_id].startswith(f"benchmarks/results/{record} was recorded with other weights of the "
                                           f"course's GPT than the ones installed here: run {command}")
