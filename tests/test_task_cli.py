"""Tests of ``bertlab finetune --task pairs|tagging|spans`` end to end, on tiny dataset files written here."""

import gzip
import json
import shutil

import pytest
import torch

from bertlab.bert import (
    BertConfig,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from bertlab.cli import main
from bertlab.course_model import COURSE_BERT_FOLDER
from bertlab.task_data import UPOS_TAGS
from tests.conftest import REPO_ROOT, run_cli

pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB = REPO_ROOT / "bertlab" / "course_bert" / "vocab.txt"
SMALL = ["--epochs", "1", "--batch-size", "4", "--no-progress", "--device", "cpu"]
SPANS = ["--seq-len", "48", "--stride", "8"]

CONLLU = """# sent_id = {name}-1
1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_
2\tdog\tdog\tNOUN\tNN\t_\t3\tnsubj\t_\t_
3\tbarks\tbark\tVERB\tVBZ\t_\t0\troot\t_\t_
4\t.\t.\tPUNCT\t.\t_\t3\tpunct\t_\t_

1\tShe\tshe\tPRON\tPRP\t_\t2\tnsubj\t_\t_
2\treads\tread\tVERB\tVBZ\t_\t0\troot\t_\t_
3\tslowly\tslowly\tADV\tRB\t_\t2\tadvmod\t_\t_

"""


def write_snli(folder, name, pairs):
    lines = [json.dumps({"gold_label": label, "sentence1": premise, "sentence2": hypothesis, "pairID": str(index)})
             for index, (premise, hypothesis, label) in enumerate(pairs)]
    (folder / name).write_text("\n".join(lines) + "\n")


def write_squad(path, num_articles):
    articles = []
    for article in range(num_articles):
        context = f"Team {article} won the cup in London. The final was played in May."
        qas = [{"id": f"{article}-{number}", "question": question,
                "answers": [{"text": answer, "answer_start": context.index(answer)}]}
               for number, (question, answer) in enumerate([("Who won the cup?", f"Team {article}"),
                                                            ("Where was it won?", "London")])]
        articles.append({"title": f"Article {article}", "paragraphs": [{"context": context, "qas": qas}]})
    path.write_text(json.dumps({"data": articles, "version": "1.1"}))


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    """The three datasets' folders, as their authors publish them, with a handful of examples each."""
    root = tmp_path_factory.mktemp("datasets")
    snli = root / "snli_1.0"
    snli.mkdir()
    premises = ["A man plays a guitar.", "Two dogs run in the snow.", "A woman reads a book.", "Kids swim.",
                "A chef cooks.", "A cat sleeps on a sofa.", "People dance at a party.", "A boy rides a bike."]
    hypotheses = [("Someone makes music.", "entailment"), ("Nobody is there.", "contradiction"),
                  ("It is sunny.", "neutral")]
    write_snli(snli, "snli_1.0_dev.jsonl", [(premise, hypothesis, label) for premise in premises
                                            for hypothesis, label in hypotheses] + [("A b.", "C d.", "-")])
    write_snli(snli, "snli_1.0_test.jsonl", [(premises[0], hypothesis, label) for hypothesis, label in hypotheses])
    ewt = root / "UD_English-EWT"
    ewt.mkdir()
    for split in ("train", "dev"):
        (ewt / f"en_ewt-ud-{split}.conllu").write_text(CONLLU.format(name=split))
    with gzip.open(ewt / "en_ewt-ud-test.conllu.gz", "wt", encoding="utf-8") as file:  # compressed, as shipped
        file.write(CONLLU.format(name="test"))
    (root / "squad-v1.1").mkdir()
    write_squad(root / "squad-v1.1" / "dev-v1.1.json", num_articles=10)  # 8 train, 1 dev, 1 test
    return root


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    """A tiny 'pretrained' BERT with the course's vocabulary, as bertlab pretrain writes one."""
    folder = tmp_path_factory.mktemp("pretrained")
    config = BertConfig(vocab_size=8192, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(0)
    BertForPreTraining(config).save_pretrained(folder)
    shutil.copy(VOCAB, folder / "vocab.txt")
    return folder


@pytest.mark.parametrize("task, extra, model_class, dev_keys", [
    ("pairs", [], BertForSequenceClassification, {"dev_accuracy", "dev_macro_f1", "dev_loss"}),
    ("tagging", [], BertForTokenClassification, {"dev_accuracy"}),
    ("spans", SPANS, BertForQuestionAnswering, {"dev_exact_match", "dev_f1"}),
])
def test_finetune_a_task_from_a_pretrained_folder(capsys, data_root, model_folder, tmp_path, task, extra, model_class,
                                                  dev_keys):
    status, out, err = run_cli(capsys, "finetune", "--task", task, "--model", model_folder, "--data-root", data_root,
                           *SMALL, *extra, "--output", tmp_path)
    assert status == 0, err
    assert "test_" in out and "newly initialized" in out  # the head of a pretrained BERT is new: a note says so
    assert "note: learning rate 5e-05, the default for a pretrained --model" in out  # not the course's BERT
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["task"] == task and results["settings"]["task"] == task and len(results["history"]) == 1
    assert set(results["history"][0]) == {"epoch", "train_loss", *dev_keys}
    assert {f"dev_{name}" for name in results["test"]} == dev_keys
    assert results["lr"] == 5e-5
    assert results["max_length"] == (48 if task == "spans" else 64)  # the task's 128 cut to the model's 64 positions
    for name in ("config.json", "model.safetensors", "vocab.txt", "history.json"):
        assert (tmp_path / name).is_file(), name
    reloaded = model_class.from_pretrained(tmp_path)
    assert getattr(reloaded, "num_labels", None) == (None if results["labels"] is None else len(results["labels"]))


def test_the_splits_and_their_cuts(capsys, data_root, model_folder, tmp_path):
    status, out, err = run_cli(capsys, "finetune", "--task", "pairs", "--model", model_folder, "--data-root", data_root,
                           *SMALL, "--output", tmp_path)
    assert status == 0, err
    assert "21 train, 3 dev, 3 test" in out  # 8 premises of 3 pairs: 7 to train, 1 to dev; the "-" pair dropped
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["labels"] == ["entailment", "neutral", "contradiction"] and results["dataset"] == "snli"
    status, out, err = run_cli(capsys, "finetune", "--task", "spans", "--model", model_folder, "--data-root", data_root,
                           *SMALL, *SPANS, "--max-train-examples", "5", "--max-eval-examples", "1",
                           "--output", tmp_path / "cut")
    assert status == 0, err
    assert "5 train, 1 dev, 1 test" in out


def test_tagging_labels_come_from_the_whole_training_split_and_a_random_model_learns_its_vocabulary(
        capsys, data_root, tmp_path):
    status, out, err = run_cli(capsys, "finetune", "--task", "tagging", "--preset", "tiny", "--vocab-size", "60",
                           "--data-root", data_root, "--max-train-examples", "1", *SMALL, "--output", tmp_path)
    assert status == 0, err
    assert "randomly initialised" in out and "1 train, 2 dev, 2 test" in out
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["labels"] == sorted({"DET", "NOUN", "VERB", "PUNCT", "PRON", "ADV"})  # also sentence 2's tags
    assert set(results["labels"]) <= set(UPOS_TAGS)
    assert len((tmp_path / "vocab.txt").read_text().split()) <= 60


def test_words_cut_off_by_the_sequence_length_are_noted(capsys, data_root, model_folder, tmp_path):
    status, out, err = run_cli(capsys, "finetune", "--task", "tagging", "--model", model_folder,
                               "--data-root", data_root, *SMALL, "--seq-len", "4", "--output", tmp_path)
    assert status == 0, err
    # sentence 1 keeps 2 of its 4 words, sentence 2 2 of its 3: 3 of 7 words are cut in each split
    assert "note: 3 of the 7 words of test have no word piece within max_length=4" in out


@pytest.mark.parametrize("task, file", [("pairs", "snli_1.0_dev.jsonl"), ("tagging", "en_ewt-ud-train.conllu"),
                                        ("spans", "dev-v1.1.json")])
def test_a_missing_dataset_is_one_line_that_names_the_folder_and_the_file(capsys, tmp_path, model_folder, task, file):
    status, _, err = run_cli(capsys, "finetune", "--task", task, "--model", model_folder, "--data-root", tmp_path,
                             *SMALL)
    assert status == 1 and err.count("\n") == 1 and "Traceback" not in err
    assert f"the data folder {tmp_path}: expected {file} (or {file}.gz)" in err


@pytest.mark.parametrize("argv, status, message", [
    (["--task", "pairs", "--dataset", "mr"], 2, "--dataset names a sentiment dataset, for --task sentence"),
    (["--task", "tagging", "--download"], 2, "--download fetches the sentiment datasets only"),
    (["--task", "nli"], 2, "invalid choice: 'nli'"),
    (["--task", "spans", "--model", "{tmp}/nowhere"], 1, "is not a BERT checkpoint folder"),
    (["--task", "spans", "--model", "{model}", "--seq-len", "32", "--stride", "28"], 2,
     "--stride 28 does not fit windows of 32 tokens (--seq-len): a window holds at most 28 context pieces"),
    (["--task", "spans", "--model", "{model}", "--seq-len", "32", "--stride", "25"], 1,
     "leaves 24 for the context, which must exceed stride=25"),  # fits the window, not after this question
    (["--task", "tagging", "--model", "{model}", "--seq-len", "65"], 2,
     "--seq-len 65 exceeds the model's 64 positions"),
    (["--task", "tagging", "--model", "{model}", "--freeze", "3"], 1, "the model has only 2 encoder layers"),
])
def test_bad_input_gives_one_line(capsys, tmp_path, data_root, model_folder, argv, status, message):
    argv = [arg.replace("{tmp}", str(tmp_path)).replace("{model}", str(model_folder)) for arg in argv]
    code, _, err = run_cli(capsys, "finetune", *argv, "--data-root", data_root, *SMALL, "--output", tmp_path / "out")
    assert code == status and err.count("\n") == 1 and "Traceback" not in err
    assert message in err


def test_a_seed_makes_a_run_from_a_pretrained_folder_reproducible(capsys, data_root, model_folder, tmp_path):
    """The new head of a pretrained BERT is drawn from the seed, not from whatever the process drew before."""
    histories = []
    for run in ("first", "second"):
        torch.manual_seed(len(run))  # another state of the global generator, as in another process
        status, _, err = run_cli(capsys, "finetune", "--task", "tagging", "--model", model_folder, "--data-root",
                                 data_root, *SMALL, "--epochs", "2", "--seed", "7", "--output", tmp_path / run)
        assert status == 0, err
        histories.append(json.loads((tmp_path / run / "results.json").read_text())["history"])
    assert histories[0] == histories[1]  # every loss and score, exactly


def test_the_default_stride_fits_every_window(capsys, data_root, model_folder, tmp_path):
    # "Who won the cup?" leaves 16 of 24 tokens for the context: the default stride is 6, a quarter of the window
    status, _, err = run_cli(capsys, "finetune", "--task", "spans", "--model", model_folder, "--data-root", data_root,
                             *SMALL, "--seq-len", "24", "--output", tmp_path)
    assert status == 0, err
    assert json.loads((tmp_path / "results.json").read_text())["settings"]["stride"] is None


@pytest.mark.parametrize("task, baseline", [("tagging", "most frequent tag of each word"), ("spans", "sliding window")])
def test_the_course_bert_gets_the_course_choices_and_the_scores_print_in_percent_beside_the_baseline(
        capsys, data_root, tmp_path, task, baseline):
    status, out, err = run_cli(capsys, "finetune", "--task", task, "--model", COURSE_BERT_FOLDER, "--data-root",
                               data_root, *SMALL, "--output", tmp_path)
    assert status == 0, err
    results = json.loads((tmp_path / "results.json").read_text())
    assert (results["lr"], results["max_length"]) == (1e-3, 128)  # not 5e-5, nor windows of 384 with stride 128
    assert f"learning rate: 0.001, the course's choice for its BERT on --task {task}" in out
    assert list(results["baselines"]) == [baseline]
    scale = 100 if task == "tagging" else 1  # accuracy is a fraction, SQuAD's scores are in percent: both print in %
    for name, value in results["test"].items():
        assert (f"test_{name} {scale * value:.2f}% "
                f"({baseline}: {scale * results['baselines'][baseline]['scores'][name]:.2f}%)"
                in out.splitlines()), out


def test_a_tag_of_the_test_split_unseen_in_training_is_named(capsys, tmp_path, data_root, model_folder):
    root = tmp_path / "data"
    shutil.copytree(data_root / "UD_English-EWT", root / "UD_English-EWT")
    (root / "UD_English-EWT" / "en_ewt-ud-test.conllu.gz").unlink()
    (root / "UD_English-EWT" / "en_ewt-ud-test.conllu").write_text("1\tWow\twow\tINTJ\tUH\t_\t0\troot\t_\t_\n")
    code, _, err = run_cli(capsys, "finetune", "--task", "tagging", "--model", model_folder, "--data-root", root,
                           *SMALL, "--output", tmp_path / "out")
    assert code == 1 and err.count("\n") == 1
    assert "test[0]: the label 'INTJ' is not one of the 6 labels of the training split" in err


def test_help_lists_the_task_options(capsys):
    status, out, _ = run_cli(capsys, "finetune", "--help")
    assert status == 0
    assert all(option in out for option in ("--task", "pairs", "tagging", "spans", "--stride", "--max-eval-examples"))


def test_no_progress_keeps_the_line_of_each_epoch(capsys, data_root, model_folder, tmp_path):
    status, out, err = run_cli(capsys, "finetune", "--task", "pairs", "--model", model_folder, "--data-root", data_root,
                               *SMALL, "--epochs", "2", "--output", tmp_path)
    assert status == 0, err
    epochs = [line for line in out.splitlines() if line.startswith("epoch ")]
    assert len(epochs) == 2 and all("train_loss" in line and "dev_accuracy" in line for line in epochs), out


def test_a_wrong_model_folder_is_told_before_the_dataset_loads(capsys, tmp_path):
    """No dataset here at all: the folder's error comes first, not the data's."""
    status, out, err = run_cli(capsys, "finetune", "--task", "tagging", "--model", tmp_path / "nowhere",
                               "--data-root", tmp_path, *SMALL)
    assert status == 1 and "is not a BERT checkpoint folder" in err and "dataset:" not in out, err


@pytest.mark.parametrize("data_root, said", [
    (None, "Or pass --data-root."),
    ("{tmp}/absent", "--data-root {tmp}/absent does not exist."),
    ("{tmp}", "--data-root {tmp} lacks it."),
])
def test_missing_data_says_what_to_do_about_the_data_root_given(capsys, tmp_path, model_folder, monkeypatch, data_root,
                                                               said):
    monkeypatch.setenv("BERTLAB_DATA", str(tmp_path / "empty"))  # the default folder, when none is given
    root = [] if data_root is None else ["--data-root", data_root.replace("{tmp}", str(tmp_path))]
    status, _, err = run_cli(capsys, "finetune", "--task", "pairs", "--model", model_folder, *root, *SMALL)
    assert status == 1 and err.count("\n") == 1, err
    assert err.rstrip("\n").endswith(said.replace("{tmp}", str(tmp_path))), err
