"""Tests for the ``bertlab`` command line: each subcommand end to end on tiny settings, and its errors."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bertlab.bert import BertConfig, BertForPreTraining, BertForSequenceClassification
from bertlab import cli
from bertlab.cli import CommandLineError, main
from bertlab.course_model import COURSE_BERT_FOLDER, course_bert_sha256
from bertlab.data import pretraining_corpus
from bertlab.pretraining import PackedSegments, load_metrics
from bertlab.tokenization import BertTokenizer, train_wordpiece_vocab
from bertlab.utils import seed_everything
from tests.conftest import REPO_ROOT, free_port, run_cli

pytestmark = pytest.mark.usefixtures("one_thread")

# Small enough for seconds on a 2-core CPU, and pinned to it (a GPU would be picked by default).
PRETRAIN = ["pretrain", "--preset", "tiny", "--steps", "4", "--batch-size", "8", "--seq-len", "32",
            "--vocab-size", "300", "--log-every", "2", "--no-progress", "--device", "cpu"]
SYNTHETIC = ["--dataset", "synthetic", "--max-train-examples", "64", "--epochs", "1", "--batch-size", "16",
             "--seq-len", "32", "--no-progress", "--device", "cpu"]


def encoder_state(model) -> dict[str, torch.Tensor]:
    return {name: tensor for name, tensor in model.bert.state_dict().items() if not name.startswith("pooler.")}


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    """Folders of a tiny pretrain -> finetune -> distill chain, made once through ``main``."""
    root = tmp_path_factory.mktemp("cli")
    folders = {name: root / name for name in ("pretrain", "finetune", "distill")}
    assert main([*PRETRAIN, "--masking", "static", "--no-nsp", "--lr", "5e-4", "--dropout", "0",
                 "--output", str(folders["pretrain"])]) == 0
    # a learning rate of ~0 keeps the weights where they started: they show what was loaded
    assert main(["finetune", "--model", str(folders["pretrain"]), *SYNTHETIC, "--lr", "1e-12",
                 "--output", str(folders["finetune"])]) == 0
    assert main(["distill", "--teacher", str(folders["finetune"]), *SYNTHETIC, "--layers", "1", "--lr", "1e-12",
                 "--repeats", "1", "--output", str(folders["distill"])]) == 0
    return folders


def subprocess_environment() -> dict[str, str]:
    """This environment, with the repository first on the path and no torchrun variables."""
    environment = {name: value for name, value in os.environ.items() if name not in ("RANK", "WORLD_SIZE")}
    environment["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])
    return environment


def test_python_m_bertlab_help_lists_the_commands():
    result = subprocess.run([sys.executable, "-m", "bertlab", "--help"], capture_output=True, text=True,
                            timeout=120, env=subprocess_environment())
    assert result.returncode == 0, result.stderr
    assert all(command in result.stdout for command in ("pretrain", "finetune", "distill", "generate"))


@pytest.mark.parametrize("command, options", [
    ("pretrain", ["--preset", "--device", "--output", "--steps", "--masking", "--no-nsp", "--seed"]),
    ("finetune", ["--model", "--dataset", "--data-root", "--freeze", "--epochs", "--lr", "--seq-len"]),
    ("distill", ["--teacher", "--layers", "--alpha", "--temperature", "--device", "--output"]),
])
def test_each_command_has_help(capsys, command, options):
    status, out, _ = run_cli(capsys, command, "--help")
    assert status == 0
    assert all(option in out for option in options)


def test_pretrain_resumes_with_the_vocabulary_of_the_run(tmp_path, capsys, monkeypatch):
    """A resumed run reads the run's vocab.txt (written before training) instead of learning it again."""
    arguments = [*PRETRAIN, "--no-nsp", "--output", tmp_path]
    status, _, _ = run_cli(capsys, *arguments)
    assert status == 0
    vocab = (tmp_path / "vocab.txt").read_text()

    def no_learning(*args):
        raise AssertionError("the vocabulary was learned again")

    monkeypatch.setattr(cli, "learn_tokenizer", no_learning)
    status, out, _ = run_cli(capsys, *arguments)  # the run is finished: it resumes at its last step
    assert status == 0 and "resuming with the run's vocabulary" in out
    assert (tmp_path / "vocab.txt").read_text() == vocab


def test_pretrain_writes_the_model_metrics_and_plot_with_the_given_settings(pipeline):
    folder = pipeline["pretrain"]
    for name in ("config.json", "model.safetensors", "vocab.txt", "metrics.jsonl", "loss_curve.png", "checkpoint.pt"):
        assert (folder / name).is_file(), name
    config = BertConfig.load(folder)
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == (2, 128, 2)  # tiny
    assert config.vocab_size == BertTokenizer(folder / "vocab.txt").vocab_size <= 300
    assert config.hidden_dropout_prob == config.attention_probs_dropout_prob == 0.0  # --dropout 0
    settings = json.loads((folder / "pretraining_args.json").read_text())
    assert {name: settings[name] for name in ("max_steps", "batch_size", "seq_len", "lr", "masking", "nsp")} == \
        {"max_steps": 4, "batch_size": 8, "seq_len": 32, "lr": 5e-4, "masking": "static", "nsp": False}
    assert [record["step"] for record in load_metrics(folder / "metrics.jsonl")] == [2, 4]


def test_pretrain_passes_the_precision_and_compile_choices(tmp_path, monkeypatch, capsys):
    seen = {}
    monkeypatch.setattr(cli, "pretrain", lambda *args, **kwargs: seen.update(kwargs) or [])
    assert main([*PRETRAIN, "--precision", "bfloat16", "--compile", "--output", str(tmp_path / "run")]) == 0
    assert (seen["precision"], seen["compile_model"]) == ("bfloat16", True)
    assert main([*PRETRAIN, "--output", str(tmp_path / "default")]) == 0
    assert (seen["precision"], seen["compile_model"]) == ("auto", False)
    capsys.readouterr()
    assert main([*PRETRAIN, "--precision", "bf16", "--output", str(tmp_path / "bad")]) == 2
    assert "invalid choice: 'bf16'" in capsys.readouterr().err


def test_pretrain_reads_packed_segments_and_their_vocabulary(tmp_path, capsys):
    documents = [document for document in pretraining_corpus() if len(document) >= 5][:8]
    tokenizer = BertTokenizer(train_wordpiece_vocab([s for document in documents for s in document], 300))
    PackedSegments.pack(tokenizer, documents, seq_len=32).save(tmp_path / "segments.npz")
    packed = ["pretrain", "--preset", "tiny", "--steps", "2", "--batch-size", "4", "--seq-len", "32", "--no-progress",
              "--device", "cpu", "--packed", tmp_path / "segments.npz"]
    status, out, _ = run_cli(capsys, *packed, "--no-nsp", "--output", tmp_path / "run")
    assert status == 0 and "packed segments" in out
    assert BertTokenizer(tmp_path / "run" / "vocab.txt").vocab == tokenizer.vocab
    for extra, message in [([], "--packed needs --no-nsp"),
                           (["--no-nsp", "--vocab", tmp_path / "run" / "vocab.txt"], "drop --vocab"),
                           (["--no-nsp", "--seq-len", "64"], "segments for --seq-len 32, not 64")]:
        status, _, err = run_cli(capsys, *packed, *extra, "--output", tmp_path / "refused")
        assert status == 2 and message in err and "Traceback" not in err
    (tmp_path / "foreign.npz").write_text("text")
    status, _, err = run_cli(capsys, *packed[:-1], tmp_path / "foreign.npz", "--no-nsp",
                             "--output", tmp_path / "refused")
    assert status == 1 and "not a file of packed segments" in err


def test_pretrain_without_masked_tokens_reports_no_mlm_loss_and_finishes(capsys, tmp_path):
    status, out, err = run_cli(capsys, *PRETRAIN, "--mlm-probability", "0", "--output", tmp_path / "run")
    assert status == 0, err
    assert "MLM loss" not in out and "wrote the model" in out
    assert all(record["mlm_loss"] is None for record in load_metrics(tmp_path / "run" / "metrics.jsonl"))


def test_finetune_starts_from_the_pretrained_encoder(pipeline):
    pretrained = BertForPreTraining.from_pretrained(pipeline["pretrain"])
    fine_tuned = BertForSequenceClassification.from_pretrained(pipeline["finetune"])
    for name, tensor in encoder_state(pretrained).items():
        torch.testing.assert_close(encoder_state(fine_tuned)[name], tensor, msg=name)
    assert (pipeline["finetune"] / "vocab.txt").read_text() == (pipeline["pretrain"] / "vocab.txt").read_text()
    results = json.loads((pipeline["finetune"] / "results.json").read_text())
    assert results["dataset"] == "synthetic" and len(results["history"]) == 1
    assert 0 <= results["test"]["accuracy"] <= 1
    assert results["settings"]["max_train_examples"] == 64


def test_distill_keeps_the_chosen_teacher_layers_and_compares_the_models(pipeline):
    teacher = BertForSequenceClassification.from_pretrained(pipeline["finetune"])
    student = BertForSequenceClassification.from_pretrained(pipeline["distill"])
    assert student.config.num_hidden_layers == 1
    for name, tensor in student.bert.encoder.layers[0].state_dict().items():  # student layer 0 = teacher layer 1
        torch.testing.assert_close(tensor, teacher.bert.encoder.layers[1].state_dict()[name], msg=name)
    results = json.loads((pipeline["distill"] / "results.json").read_text())
    assert [row["name"] for row in results["comparison"]] == ["teacher", "student"]
    assert results["comparison"][1]["parameters"] < results["comparison"][0]["parameters"]
    assert "| student |" in (pipeline["distill"] / "comparison.md").read_text()


def test_finetune_from_random_weights_is_seeded_and_freezes_layers(tmp_path, capsys):
    status, out, err = run_cli(capsys, "finetune", "--preset", "tiny", "--vocab-size", "200", "--freeze", "2",
                           "--seed", "3", *SYNTHETIC, "--output", tmp_path)
    assert status == 0, err
    assert "randomly initialised" in out and "test_accuracy" in out
    saved = BertForSequenceClassification.from_pretrained(tmp_path)
    seed_everything(3)
    initial = BertForSequenceClassification(BertConfig.preset("tiny", vocab_size=saved.config.vocab_size))
    for name, tensor in encoder_state(initial).items():  # embeddings and both layers frozen: unchanged
        torch.testing.assert_close(encoder_state(saved)[name], tensor, msg=name)
    assert not torch.equal(saved.classifier.weight, initial.classifier.weight)


def test_a_seed_makes_finetuning_a_pretrained_folder_reproducible(pipeline, tmp_path, capsys):
    """The new classifier of a pretrained BERT is drawn from the seed, not from whatever the process drew before."""
    histories = []
    for run in ("first", "second"):
        torch.manual_seed(len(run))  # another state of the global generator, as in another process
        status, out, err = run_cli(capsys, "finetune", "--model", pipeline["pretrain"], *SYNTHETIC, "--lr", "1e-3",
                                   "--output", tmp_path / run)
        assert status == 0, err
        results = json.loads((tmp_path / run / "results.json").read_text())
        histories.append(results["history"])
    assert histories[0] == histories[1]  # every loss and score, exactly
    # the summary: each score in percent beside the majority class's, the loss as it is
    majority, bag_of_words = results["baselines"]["majority class"], results["baselines"]["bag of words"]
    assert (f"test_accuracy {100 * results['test']['accuracy']:.2f}% "
            f"(majority class: {100 * majority['scores']['accuracy']:.2f}%; "
            f"bag of words: {100 * bag_of_words['scores']['accuracy']:.2f}%)") in out.splitlines()
    assert f"test_loss {results['test']['loss']:.4f}" in out.splitlines()


def test_the_course_choices_are_the_ones_recorded_for_the_installed_course_bert():
    results = REPO_ROOT / "benchmarks" / "results"
    tasks = json.loads((results / "tasks-cpu.json").read_text())
    sentence = json.loads((results / "bert-cpu.json").read_text())
    assert tasks["course_bert_sha256"] == sentence["course_bert_sha256"] == course_bert_sha256()
    recorded = {"sentence": sentence["classification"]["course_bert"]["learning_rate"],
                **{task: record["course_bert"]["learning_rate"] for task, record in tasks["tasks"].items()}}
    assert cli.COURSE_BERT_LEARNING_RATES == recorded
    assert cli.COURSE_BERT_MAX_LENGTH == tasks["settings"]["max_length"]


def test_the_course_bert_is_known_by_its_folder_or_its_weights(pipeline, tmp_path):
    shutil.copytree(COURSE_BERT_FOLDER, tmp_path / "copy")
    assert cli.is_course_bert(COURSE_BERT_FOLDER) and cli.is_course_bert(tmp_path / "copy")
    assert not cli.is_course_bert(pipeline["pretrain"]) and not cli.is_course_bert(None)


def test_only_rank_0_prints(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RANK", "1")  # as in the second process that torchrun starts
    status, out, err = run_cli(capsys, "finetune", "--preset", "tiny", "--vocab-size", "200", *SYNTHETIC,
                           "--output", tmp_path)
    assert status == 0, err
    assert out == ""


@pytest.mark.parametrize("argv, status, message", [
    (["pretrain", "--preset", "huge"], 2, "invalid choice: 'huge'"),
    (["pretrain", "--steps", "0"], 2, "--steps: must be a positive integer, got '0'"),
    (["pretrain", "--lr", "fast"], 2, "--lr: must be a number, got 'fast'"),
    (["pretrain", "--mlm-probability", "1.5"], 2, "must be a number in [0, 1]"),
    (["pretrain", "--dropout", "1"], 2, "--dropout: must be a number in [0, 1), got '1'"),
    (["pretrain", "--dataset-text", "synthetic"], 2, "--dataset-text needs --no-nsp"),
    (["finetune", "--batch-size", "-4"], 2, "--batch-size: must be a positive integer"),
    (["finetune", "--model", "{tmp}", "--preset", "tiny"], 2, "--preset and --vocab describe"),
    (["distill", "--teacher", "{tmp}", "--layers", "1,0"], 2, "must be increasing layer numbers"),
    (["distill"], 2, "the following arguments are required: --teacher"),
    ([], 2, "the following arguments are required: COMMAND"),
    (["finetune", "--model", "{tmp}/nowhere", "--dataset", "synthetic"], 1, "is not a BERT checkpoint folder"),
    (["finetune", "--dataset", "mr", "--data-root", "{tmp}"], 1, "rt-polarity.pos and rt-polarity.neg"),
    (["finetune", "--dataset", "sst2", "--data-root", "{tmp}"], 1, "train.tsv and dev.tsv"),
    (["finetune", "--dataset", "mr", "--data-root", "{tmp}/file.txt"], 2, "file.txt is a file: pass the folder that"),
    (["pretrain", "--data-root", "{tmp}/file.txt"], 2, "file.txt is a file: pass the folder that holds"),
])
def test_bad_input_gives_one_line_and_no_traceback(tmp_path, capsys, argv, status, message):
    (tmp_path / "file.txt").write_text("not a folder")
    pinned = ["--device", "cpu"] if argv else []  # a command's errors, not the device's
    code, out, err = run_cli(capsys, *[arg.replace("{tmp}", str(tmp_path)) for arg in argv], *pinned)
    assert code == status
    assert err.count("\n") == 1 and err.startswith("bertlab") and "Traceback" not in err
    assert message in err


def test_a_missing_model_folder_is_told_before_the_dataset_is_read(tmp_path, capsys, monkeypatch):
    import bertlab.cli

    def unreachable(*args, **kwargs):
        raise AssertionError("the dataset was read before the model folder was checked")

    monkeypatch.setattr(bertlab.cli, "load_sentiment", unreachable)
    for argv in (["finetune", "--model"], ["distill", "--teacher"]):
        code, _, err = run_cli(capsys, *argv, tmp_path / "nowhere", "--dataset", "mr", "--device", "cpu")
        assert code == 1 and "is not a BERT checkpoint folder" in err and err.count("\n") == 1


def test_runtime_errors_about_model_folders(pipeline, tmp_path, capsys):
    # a pretrained (not fine-tuned) model cannot teach
    code, _, err = run_cli(capsys, "distill", "--teacher", pipeline["pretrain"], *SYNTHETIC, "--output", tmp_path)
    assert code == 1 and err.count("\n") == 1 and "is not a fine-tuned classifier" in err
    # the student's layers must exist in the teacher (2 layers)
    code, _, err = run_cli(capsys, "distill", "--teacher", pipeline["finetune"], "--layers", "0,5", *SYNTHETIC,
                       "--output", tmp_path)
    assert code == 1 and err.count("\n") == 1 and "layer_ids must be ints in [0, 2)" in err
    # more layers to freeze than the model has
    code, _, err = run_cli(capsys, "finetune", "--model", pipeline["finetune"], "--freeze", "3", *SYNTHETIC,
                       "--output", tmp_path)
    assert code == 1 and err.count("\n") == 1 and "only 2 encoder layers" in err
    # a model folder without its vocabulary
    BertForSequenceClassification(BertConfig.preset("tiny", vocab_size=100)).save_pretrained(tmp_path / "no-vocab")
    code, _, err = run_cli(capsys, "finetune", "--model", tmp_path / "no-vocab", *SYNTHETIC, "--output", tmp_path)
    assert code == 1 and err.count("\n") == 1 and "has no vocab.txt" in err


def test_corrupt_model_files_are_named_in_one_line(pipeline, tmp_path, capsys):
    folder = tmp_path / "model"
    shutil.copytree(pipeline["finetune"], folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    code, _, err = run_cli(capsys, "finetune", "--model", folder, *SYNTHETIC, "--output", tmp_path / "out")
    assert code == 1 and err.count("\n") == 1 and f"{weights} is not a readable weights file" in err
    shutil.copy(pipeline["finetune"] / "model.safetensors", weights)
    (folder / "vocab.txt").write_bytes(b"[PAD]\n\xff\xfe\n")
    code, _, err = run_cli(capsys, "finetune", "--model", folder, *SYNTHETIC, "--output", tmp_path / "out")
    assert code == 1 and err.count("\n") == 1 and f"vocabulary file {folder / 'vocab.txt'} is not UTF-8" in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given when CUDA is missing")
def test_cuda_without_a_gpu_is_a_clear_error(tmp_path, capsys):
    code, _, err = run_cli(capsys, *PRETRAIN, "--device", "cuda", "--output", tmp_path)
    assert code == 1 and err.count("\n") == 1 and "CUDA is not available" in err


def test_debug_shows_the_traceback(tmp_path):
    with pytest.raises(CommandLineError, match="rt-polarity") as error:
        main(["finetune", "--dataset", "mr", "--data-root", str(tmp_path), "--debug", "--device", "cpu"])
    assert isinstance(error.value.__cause__, FileNotFoundError)  # the library's error, in the traceback


@pytest.mark.slow
def test_pretrain_under_torchrun_trains_once_and_prints_once(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
         "--master_port", str(free_port()), "-m", "bertlab", *PRETRAIN, "--device", "cpu",
         "--output", str(tmp_path)],
        env=subprocess_environment(), capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.count("MLM loss") == 1 and result.stdout.count("corpus:") == 1
    assert json.loads((tmp_path / "pretraining_args.json").read_text())["world_size"] == 2
    assert [record["step"] for record in load_metrics(tmp_path / "metrics.jsonl")] == [2, 4]
