"""The steps that make a course model, shared by ``tools/course_bert.py`` and ``tools/course_gpt.py``.

Both models are pretrained on the same packed segments of IMDB reviews (``pack``), by ``bertlab
pretrain`` with arguments that each tool declares (``pretrain``), with learning rates compared side by
side (``sweep``) on held-out reviews (``score``, ``record``), and shipped in ``bertlab/`` with a model
card (``export``). What differs between them (the arguments, the held-out scores, the export and its card)
is one :class:`CourseModel` record per tool; :func:`main` gives each tool the same commands.
"""

import argparse
import dataclasses
import json
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import torch
from torch import nn

from bertlab import cli
from bertlab.course_model import COURSE_BERT_FOLDER, EVALUATION_SEED, HELD_OUT_REVIEWS
from bertlab.data import imdb_documents
from bertlab.pretraining import METRICS_FILE, PackedSegments, PretrainingRecipe, load_metrics
from bertlab.tokenization import BertTokenizer

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKED_FILE = REPO_ROOT / "runs" / "imdb-train-128.npz"
COMMAND_FILE = "command.json"  # the bertlab arguments of a run, written by pretrain, read by export
HELD_OUT_FILE = "held_out.json"  # a finished run's held-out scores, written by score, read by record
SEQ_LEN = 128
LOG_EVERY = 50
CALIBRATION_STEPS = 150  # three log lines: the first holds the start-up, the two others time the steps


@dataclasses.dataclass(frozen=True)
class CourseModel:
    """What one course model's tool declares; :func:`main` runs the shared steps with it.

    Fields:
        name: the model's name in messages ("BERT").
        tool: the tool's script, which ``sweep`` runs once per learning rate.
        work_name: the default folder of its runs under ``runs/`` ("course-bert").
        objective_arguments: the ``bertlab pretrain`` arguments that make the model and its objective;
            :func:`pretrain_arguments` adds those both models share.
        batch_size, steps, learning_rate: the shipped run's (``pretrain --batch-size``, ``--steps``, ``--lr``).
        train_metrics: the names of the training loss and accuracy in ``metrics.jsonl`` ("mlm_loss",
            "mlm_accuracy"; "loss", "accuracy"), which ``record`` reports at the run's end.
        load: a finished run's folder -> its model, in eval mode.
        held_out_scores: (model, tokenizer, data_root, seq_len) -> the held-out scores that choose among
            the runs of a sweep, a dict written to ``held_out.json``.
        export: (args, history, recipe) -> exit status: writes what the package ships, with the model card.
        sweep_record: the default file of ``record``.
        export_options: adds the options of this model's ``export`` to its parser (None: none but the shared).
    """

    name: str
    tool: Path
    work_name: str
    objective_arguments: tuple[str, ...]
    batch_size: int
    steps: int
    learning_rate: float
    train_metrics: tuple[str, str]
    load: Callable[[Path], nn.Module]
    held_out_scores: Callable[[nn.Module, BertTokenizer, Path, int], dict]
    export: Callable[[argparse.Namespace, list[dict], PretrainingRecipe], int]
    sweep_record: Path
    export_options: Callable[[argparse.ArgumentParser], None] | None = None

    @property
    def command(self) -> str:
        return f"python {self.tool.relative_to(REPO_ROOT)}"


def training_tokens(recipe: PretrainingRecipe) -> int:
    """The token positions a run trained on: steps x segments per step x segment length."""
    return recipe.max_steps * recipe.batch_size * recipe.seq_len


def pretrain_arguments(model: CourseModel, batch_size: int) -> list[str]:
    """The ``bertlab pretrain`` arguments of a run of ``model``, less the data, steps, learning rate, output
    folder and device: the model's objective, then what both course models share: segments of ``SEQ_LEN``
    tokens, batches of ``batch_size``, no dropout, seed 0, a log line every ``LOG_EVERY`` steps and a
    checkpoint every 500."""
    return [*model.objective_arguments, "--seq-len", str(SEQ_LEN), "--batch-size", str(batch_size), "--dropout",
            "0", "--seed", "0", "--log-every", str(LOG_EVERY), "--checkpoint-every", "500", "--no-progress"]


def pack(model: CourseModel, args: argparse.Namespace) -> int:
    """Tokenize the 75,000 training reviews with the course's vocabulary into full-sentence segments."""
    start = time.perf_counter()
    documents = imdb_documents(args.data_root)
    packed = PackedSegments.pack(BertTokenizer(COURSE_BERT_FOLDER / "vocab.txt"), documents, SEQ_LEN)
    args.packed.parent.mkdir(parents=True, exist_ok=True)
    packed.save(args.packed)
    print(f"wrote {args.packed}: {len(documents)} reviews, {len(packed)} segments, {len(packed.ids)} tokens "
          f"({args.packed.stat().st_size / 1e6:.1f} MB, {time.perf_counter() - start:.0f} s)")
    return 0


def pretrain(model: CourseModel, args: argparse.Namespace) -> int:
    argv = [*pretrain_arguments(model, args.batch_size), "--packed", str(args.packed), "--steps", str(args.steps),
            "--lr", f"{args.lr:g}", "--output", str(args.work), "--device", args.device]
    print("bertlab " + " ".join(argv), flush=True)
    status = cli.main(argv)
    if status == 0:  # the command of a run that exists, for export's model card
        (args.work / COMMAND_FILE).write_text(json.dumps(argv) + "\n")
    return status


def run_side_by_side(model: CourseModel, args: argparse.Namespace, folder: Path, steps: int) -> list[Path]:
    """``pretrain`` once per learning rate, the processes side by side; the run folders, in --lrs order."""
    runs = [folder / f"lr-{lr:g}" for lr in args.lrs]
    processes = [subprocess.Popen([sys.executable, str(model.tool), "pretrain", "--packed", str(args.packed),
                                   "--work", str(run), "--lr", f"{lr:g}", "--steps", str(steps),
                                   "--batch-size", str(args.batch_size), "--device", args.device])
                 for lr, run in zip(args.lrs, runs)]
    failed = [str(run) for run, process in zip(runs, processes) if process.wait() != 0]
    if failed:
        sys.exit(f"sweep: the runs in {', '.join(failed)} failed (their output is above)")
    return runs


def calibrate(model: CourseModel, args: argparse.Namespace) -> list[float]:
    """Steps per second of each run of ``--lrs`` side by side, over ``CALIBRATION_STEPS`` steps (the first
    log line, which holds the start-up, left out)."""
    rates = []
    for run in run_side_by_side(model, args, args.work / "calibration", CALIBRATION_STEPS):
        records = load_metrics(run / METRICS_FILE)
        rates.append((records[-1]["step"] - records[0]["step"]) / sum(record["seconds"] for record in records[1:]))
    return rates


def sweep(model: CourseModel, args: argparse.Namespace) -> int:
    """The runs of ``--lrs`` side by side, each for ``--steps`` steps or for as many as fit in ``--seconds``.

    With ``--seconds`` a calibration of every run side by side measures the steps per second first. With
    both, the runs keep ``--steps`` (the budget of the model they are compared with); when they would not
    finish side by side in the time left, only the first learning rate runs, alone.
    """
    start = time.perf_counter()
    rates = None
    if args.seconds is not None:
        rates = calibrate(model, args)
        seconds_left = args.seconds - (time.perf_counter() - start)
        if args.steps is None:
            args.steps = max(LOG_EVERY, int(min(rates) * seconds_left) // LOG_EVERY * LOG_EVERY)
            print(f"sweep: {min(rates):.1f} steps/s side by side, {args.steps} steps in the {seconds_left:.0f} s left",
                  flush=True)
        elif len(args.lrs) > 1 and args.steps / min(rates) > seconds_left:
            print(f"sweep: {args.steps} steps at {min(rates):.1f} steps/s side by side would take "
                  f"{args.steps / min(rates):.0f} s, more than the {seconds_left:.0f} s left: only --lr "
                  f"{args.lrs[0]:g} runs", flush=True)
            args.lrs = args.lrs[:1]
    runs = run_side_by_side(model, args, args.work, args.steps)
    (args.work / "sweep.json").write_text(json.dumps({
        "lrs": args.lrs, "seconds": args.seconds, "steps_per_second_side_by_side": rates, "steps": args.steps,
        "device": (torch.cuda.get_device_name() if torch.cuda.is_available()
                   else platform.processor() or platform.machine()),
        "runs": [str(run) for run in runs], "wall_seconds": time.perf_counter() - start,
    }, indent=2) + "\n")
    return 0


def placeholders(command: list[str]) -> list[str]:
    """The command with the paths of one machine (after --packed and --output) as FILE and DIR."""
    names = {"--packed": "FILE", "--output": "DIR"}
    return [names.get(previous, argument) for previous, argument in zip(["", *command], command)]


def finished_run(model: CourseModel, work: Path) -> tuple[list[dict], PretrainingRecipe]:
    """The metrics log and recipe of the finished run in ``work``; exits with a message otherwise."""
    history = load_metrics(work / METRICS_FILE)
    recipe = PretrainingRecipe.read(work)
    if not history or history[-1]["step"] != recipe.max_steps:
        sys.exit(f"{work} holds no finished run (last logged step {history[-1]['step'] if history else None} "
                 f"of {recipe.max_steps}): run '{model.command} pretrain' until it ends")
    return history, recipe


def score(model: CourseModel, args: argparse.Namespace) -> int:
    _, recipe = finished_run(model, args.work)
    scores = model.held_out_scores(model.load(args.work), BertTokenizer(args.work / "vocab.txt"), args.data_root,
                                   recipe.seq_len)
    (args.work / HELD_OUT_FILE).write_text(json.dumps(scores, indent=2) + "\n")
    print(f"{args.work}: held-out {scores}")
    return 0


def record(model: CourseModel, args: argparse.Namespace) -> int:
    """The candidates of a sweep, side by side: each run's command, training time and losses and its held-out
    scores (``score``'s ``held_out.json``), with the sweep's calibration, into ``--out``."""
    runs = []
    for work in args.work:
        history, recipe = finished_run(model, work)
        held_out = work / HELD_OUT_FILE
        if not held_out.is_file():
            sys.exit(f"{work} has no {HELD_OUT_FILE}: run '{model.command} score --work {work}' first")
        runs.append({"folder": work.name, "command": placeholders(json.loads((work / COMMAND_FILE).read_text())),
                     "settings": recipe.settings(), "training_seconds": sum(entry["seconds"] for entry in history),
                     **{f"final_train_{name}": history[-1][name] for name in model.train_metrics},
                     "held_out": json.loads(held_out.read_text())})
    # the sweep's record: in the folder of its runs, or copied into each run (tools/course_model_gpu.sh)
    sweeps = [json.loads((folder / "sweep.json").read_text()) for work in args.work for folder in (work, work.parent)
              if (folder / "sweep.json").is_file()]
    args.out.write_text(json.dumps({
        "command": f"{model.command} record --work " + " ".join(str(work) for work in args.work),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "sweep": sweeps[0] if sweeps else None, "runs": runs,
        "held_out_reviews": 2 * HELD_OUT_REVIEWS, "evaluation_seed": EVALUATION_SEED,
    }, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


def export(model: CourseModel, args: argparse.Namespace) -> int:
    history, recipe = finished_run(model, args.work)
    return model.export(args, history, recipe)


def training_machine(args: argparse.Namespace) -> str:
    """The hardware to name in a model card: ``--machine``, or this CPU."""
    return args.machine or f"{platform.machine()} CPU, {torch.get_num_threads()} threads, PyTorch {torch.__version__}"


STEPS = {"pack": pack, "pretrain": pretrain, "sweep": sweep, "score": score, "record": record, "export": export}


def main(model: CourseModel, argv: list[str] | None = None, description: str | None = None) -> int:
    """The tool's command line: ``pack``, ``pretrain``, ``sweep``, ``score``, ``record``, ``export``."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    steps = parser.add_subparsers(dest="step", required=True)
    pack_parser = steps.add_parser("pack", help="tokenize the training reviews into packed segments")
    pretrain_parser = steps.add_parser("pretrain", help="pretrain on the packed segments (re-run to resume)")
    sweep_parser = steps.add_parser("sweep", help="pretrain with several learning rates side by side")
    score_parser = steps.add_parser("score", help="a finished run's scores on held-out reviews")
    record_parser = steps.add_parser("record", help="the scored runs of a sweep, side by side, in one JSON file")
    export_parser = steps.add_parser("export", help="score a finished run and write what the package ships")
    for step in (pack_parser, score_parser, export_parser):
        step.add_argument("--data-root", type=Path, required=True, help="folder holding aclImdb/")
    for step in (pack_parser, pretrain_parser, sweep_parser):
        step.add_argument("--packed", type=Path, default=PACKED_FILE,
                          help=f"the packed segments (default: {PACKED_FILE.relative_to(REPO_ROOT)})")
    for step in (pretrain_parser, sweep_parser):
        step.add_argument("--device", default="auto", help="auto, cpu or cuda (default: auto)")
        step.add_argument("--batch-size", type=int, default=model.batch_size,
                          help=f"segments per step (default: {model.batch_size}, the shipped run's)")
    for step, folder in [(pretrain_parser, model.work_name), (sweep_parser, f"{model.work_name}-sweep"),
                         (score_parser, model.work_name), (export_parser, model.work_name)]:
        step.add_argument("--work", type=Path, default=REPO_ROOT / "runs" / folder,
                          help=f"the run's folder: checkpoint, metrics, final weights (default: runs/{folder})")
    pretrain_parser.add_argument("--lr", type=float, default=model.learning_rate,
                                 help=f"default: {model.learning_rate:g}")
    pretrain_parser.add_argument("--steps", type=int, default=model.steps, help=f"default: {model.steps}")
    record_parser.add_argument("--work", type=Path, nargs="+", required=True, help="the scored run folders")
    record_parser.add_argument("--out", type=Path, default=model.sweep_record,
                               help=f"default: {model.sweep_record.relative_to(REPO_ROOT)}")
    sweep_parser.add_argument("--lrs", type=float, nargs="+", required=True, help="the learning rates to compare")
    sweep_parser.add_argument("--seconds", type=float, help="wall-clock budget of the sweep, calibration included")
    sweep_parser.add_argument("--steps", type=int, help="the number of steps of every run (with --seconds: only "
                              "the first of --lrs runs when the others would not fit)")
    export_parser.add_argument("--machine", help="the hardware to name in the model card (default: this CPU)")
    if model.export_options is not None:
        model.export_options(export_parser)
    args = parser.parse_args(argv)
    if args.step == "sweep" and args.seconds is None and args.steps is None:
        parser.error("sweep needs --seconds, --steps or both")
    return STEPS[args.step](model, args)
