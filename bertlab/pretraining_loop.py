"""The pretraining loop: ``pretrain``, its checkpoints and its metrics log (chapters 07 and 11).

Each optimizer step minimises L = L_MLM + L_NSP (L_MLM alone without next sentence prediction), or,
for a GPT, the causal language-modelling loss L_LM on the same full-sentence segments, averaged over the
micro-batches of the step, with AdamW, BERT's linear warm-up and decay, gradient clipping and
accumulation, and mixed precision on CUDA; on one device or on several with ``torchrun``
(DistributedDataParallel). The data and the masks of micro-batch m are a function of m, and the
checkpoints hold every random state, so a resumed run ends exactly as an uninterrupted one.
"""

import contextlib
import dataclasses
import json
import math
import os
import random
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler
from tqdm.auto import tqdm

from bertlab.gpt import GPTLMHeadModel
from bertlab.optimization import get_linear_schedule, weight_decay_groups
from bertlab.pretraining_data import (
    IGNORE_INDEX,
    MASKING_KINDS,
    CausalLMDataset,
    PackedSegments,
    PretrainingDataset,
)
from bertlab.utils import autocast, check_precision, grad_scaler, recipe_from_keywords, resolve_device, seed_everything

CHECKPOINT_FILE = "checkpoint.pt"
METRICS_FILE = "metrics.jsonl"
PLOT_FILE = "loss_curve.png"
SETTINGS_FILE = "pretraining_args.json"
#: What a model learns to predict: "masked" tokens from both sides (BERT's MLM, and NSP), or each token
#: from the ones before it ("causal" language modelling, a GPT).
OBJECTIVES = ("masked", "causal")
#: The settings of the masked objective, which a causal run leaves at their defaults.
MASKED_OBJECTIVE_OPTIONS = ("masking", "nsp", "mlm_probability", "static_mask_copies")


# --------------------------------------------------------------------------------------------------
# The recipe: the settings of a run
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PretrainingRecipe:
    """The settings of a pretraining run, with the book's defaults (chapter 07); :func:`pretrain` runs one.

    Each optimizer step sees batch_size * grad_accum_steps examples of up to seq_len tokens per process
    and takes an AdamW step (weight_decay on the weight matrices) at a learning rate that rises linearly
    to lr over warmup_steps (None: max_steps // 10) and falls linearly to 0 at max_steps, after clipping
    the gradient's norm to max_grad_norm (None: no clipping). The objective is "masked" (MLM on
    mlm_probability of the tokens, with masks drawn anew at every pass or once, ``masking``, in
    static_mask_copies copies; with next sentence prediction when ``nsp``) or "causal" (next-token
    prediction, a GPT). ``seed`` fixes the data order, the masks and dropout. A metrics line is written
    every log_every steps and a checkpoint every checkpoint_every steps.

    A checkpoint stores the settings that decide the result (:meth:`settings`; not log_every and
    checkpoint_every, which only say when to write), and a resumed run must have the same.
    """

    max_steps: int
    batch_size: int = 32
    seq_len: int = 128
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_steps: int | None = None
    grad_accum_steps: int = 1
    max_grad_norm: float | None = 1.0
    objective: str = "masked"
    masking: str = "dynamic"
    nsp: bool = True
    mlm_probability: float = 0.15
    static_mask_copies: int = 1
    seed: int = 0
    log_every: int = 10
    checkpoint_every: int = 200

    def __post_init__(self):
        for name in ("max_steps", "batch_size", "seq_len", "grad_accum_steps", "static_mask_copies", "log_every",
                     "checkpoint_every"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.warmup_steps is not None and not 0 <= self.warmup_steps <= self.max_steps:
            raise ValueError(f"warmup_steps must be between 0 and max_steps = {self.max_steps}, "
                             f"got {self.warmup_steps}")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}")
        if self.masking not in MASKING_KINDS:
            raise ValueError(f"masking must be one of {', '.join(MASKING_KINDS)}, got {self.masking!r}")
        if not 0 <= self.mlm_probability <= 1:
            raise ValueError(f"mlm_probability must be between 0 and 1, got {self.mlm_probability!r}")
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr!r}")
        if self.causal:  # nothing is masked: an option of the masked objective would be silently ignored
            defaults = {field.name: field.default for field in dataclasses.fields(self)}
            changed = [name for name in MASKED_OBJECTIVE_OPTIONS if getattr(self, name) != defaults[name]]
            if changed:
                raise ValueError(f"{', '.join(changed)}: settings of the masked objective, "
                                 "which a causal run does not use")

    @property
    def causal(self) -> bool:
        return self.objective == "causal"

    @property
    def warmup(self) -> int:
        """The steps of linear warm-up: warmup_steps, or 10% of max_steps when it is None."""
        return self.max_steps // 10 if self.warmup_steps is None else self.warmup_steps

    def settings(self) -> dict:
        """The settings that decide the run's result, as ``pretraining_args.json`` and the checkpoint hold
        them: the masking options for the masked objective (the keys such a run has always written),
        ``objective`` for the causal one; warmup_steps resolved."""
        objective = ({name: getattr(self, name) for name in MASKED_OBJECTIVE_OPTIONS} if not self.causal
                     else dict(objective=self.objective))
        return dict(max_steps=self.max_steps, batch_size=self.batch_size, seq_len=self.seq_len, lr=self.lr,
                    weight_decay=self.weight_decay, warmup_steps=self.warmup, grad_accum_steps=self.grad_accum_steps,
                    max_grad_norm=self.max_grad_norm, **objective, seed=self.seed)

    @classmethod
    def read(cls, folder: str | Path) -> "PretrainingRecipe":
        """The recipe of the run whose outputs are in ``folder``, from its ``pretraining_args.json``."""
        path = Path(folder) / SETTINGS_FILE
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist: {folder} holds no pretraining run's outputs")
        settings = json.loads(path.read_text())
        names = {field.name for field in dataclasses.fields(cls)}
        return cls(**{name: value for name, value in settings.items() if name in names})


# --------------------------------------------------------------------------------------------------
# Processes: one, or one of several under torchrun
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class _Process:
    """Where this process runs: its rank among world_size processes and its device."""

    rank: int
    world_size: int
    device: torch.device
    started_group: bool  # True when pretrain initialised the process group and must destroy it

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _setup_process(device) -> _Process:
    """One process, or one of the processes ``torchrun`` started (env vars WORLD_SIZE, LOCAL_RANK).

    Under torchrun each process takes the GPU cuda:LOCAL_RANK (NCCL backend) when CUDA is available,
    else the CPU (gloo backend).
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size == 1 and not dist.is_initialized():
        return _Process(0, 1, resolve_device(device), started_group=False)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = resolve_device(device)
    if device.type == "cuda":
        device = torch.device("cuda", local_rank if device.index is None else device.index)
        torch.cuda.set_device(device)
    started_group = not dist.is_initialized()
    if started_group:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return _Process(dist.get_rank(), dist.get_world_size(), device, started_group)


# --------------------------------------------------------------------------------------------------
# The micro-batches of each step
# --------------------------------------------------------------------------------------------------


def _mask_generator(seed: int, rank: int, micro_batch: int) -> torch.Generator:
    """The generator of a micro-batch's dynamic masks: a function of (seed, rank, micro-batch index)."""
    state = np.random.SeedSequence([seed, rank, micro_batch]).generate_state(1, dtype=np.uint64)[0]
    return torch.Generator().manual_seed(int(state))


def _micro_batches(dataset: PretrainingDataset, sampler: DistributedSampler, batch_size: int, start: int,
                   seed: int, rank: int):
    """Yield the micro-batches start, start + 1, ... of this process, forever (epoch after epoch).

    Micro-batch m is a pure function of m: epoch e = m // batches_per_epoch shuffles the examples with
    seed + e (``DistributedSampler``, which gives each process its own share), and the masks come
    from ``_mask_generator(seed, rank, m)``. Resuming at micro-batch m therefore sees exactly the
    data that the uninterrupted run would have seen.
    """
    batches_per_epoch = len(sampler) // batch_size
    index = start
    while True:
        epoch, position = divmod(index, batches_per_epoch)
        sampler.set_epoch(epoch)
        order = list(sampler)
        for position in range(position, batches_per_epoch):
            items = [dataset[i] for i in order[position * batch_size: (position + 1) * batch_size]]
            yield dataset.collate(items, generator=_mask_generator(seed, rank, index))
            index += 1


# --------------------------------------------------------------------------------------------------
# The loss and its metrics
# --------------------------------------------------------------------------------------------------


def _without_empty_mlm_loss(output, batch: dict[str, torch.Tensor]):
    """``output`` whose MLM loss is 0, with zero gradient, when the micro-batch has no chosen token.

    The MLM loss is the mean over the chosen positions M, -(1/|M|) sum_{i in M} log p(x_i); with M empty
    ``F.cross_entropy`` returns 0/0 = NaN (as Hugging Face's models do), and one NaN gradient would turn
    every weight into NaN. Such micro-batches are rare with long sequences but not with short ones: a
    micro-batch of k maskable tokens has none chosen with probability (1 - p)^k, 20% for k = 10 at
    p = 0.15. Then loss = mlm_loss + nsp_loss becomes 0 + nsp_loss (or 0 without NSP): the micro-batch
    contributes no MLM gradient. ``torch.where`` chooses on the device, without a host synchronisation;
    the NaN branch it drops receives a zero gradient, and cross-entropy's backward writes nothing at
    ignored positions, so no NaN reaches the weights.
    """
    chosen = (batch["mlm_labels"] != IGNORE_INDEX).any()
    mlm_loss = torch.where(chosen, output.mlm_loss, torch.zeros_like(output.mlm_loss))
    loss = mlm_loss if output.nsp_loss is None else mlm_loss + output.nsp_loss
    return dataclasses.replace(output, loss=loss, mlm_loss=mlm_loss)


class _WithoutNextSentencePrediction(nn.Module):
    """A ``BertForPreTraining`` whose NSP logits are cut from the graph, for MLM-only training.

    The pooler and the NSP head then receive no gradient; DistributedDataParallel (with
    find_unused_parameters) sees that they cannot be reached from the outputs and does not wait
    for their gradients.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, **batch):
        output = self.model(**batch)
        return dataclasses.replace(output, nsp_logits=output.nsp_logits.detach())


class _MetricsWindow:
    """Sums of the training metrics since the last log line, kept on the device (no sync per step).

    A subclass names its sums (``NAMES``), adds those of a micro-batch (``update``) and turns them into
    the metrics of a log line (``summary``)."""

    NAMES: tuple[str, ...] = ()

    def __init__(self, device: torch.device):
        self.sums = torch.zeros(len(self.NAMES), dtype=torch.float64, device=device)
        self.start = time.perf_counter()

    def add(self, values: dict) -> None:
        """Add a micro-batch's values (tensors on the device, or numbers), one for each of ``NAMES``."""
        self.sums += torch.stack([torch.as_tensor(values[name], dtype=torch.float64, device=self.sums.device)
                                  for name in self.NAMES])

    def totals(self, process: _Process) -> tuple[dict[str, float], float]:
        """The sums over the window and over all processes, and the window's wall-clock seconds."""
        if process.world_size > 1:
            dist.all_reduce(self.sums)
        sums = dict(zip(self.NAMES, self.sums.tolist()))
        return sums, time.perf_counter() - self.start


class _MaskedLMWindow(_MetricsWindow):
    """The metrics of masked language modelling and next sentence prediction (with ``nsp``)."""

    NAMES = ("loss", "mlm_loss", "nsp_loss", "micro_batches", "mlm_micro_batches", "mlm_correct", "mlm_predicted",
             "nsp_correct", "nsp_examples", "tokens")

    def __init__(self, device: torch.device, nsp: bool):
        super().__init__(device)
        self.nsp = nsp

    @torch.no_grad()
    def update(self, output, batch: dict[str, torch.Tensor]) -> None:
        predicted = batch["mlm_labels"] != IGNORE_INDEX  # (B, N)
        values = dict.fromkeys(self.NAMES, 0)
        values.update(loss=output.loss, mlm_loss=output.mlm_loss, micro_batches=1,
                      mlm_micro_batches=predicted.any(), mlm_predicted=predicted.sum(),
                      # mlm_logits (M, V): the model predicts the labelled positions only (_train)
                      mlm_correct=(output.mlm_logits.argmax(-1) == output.mlm_targets).sum(),
                      tokens=batch["attention_mask"].sum())
        if "nsp_labels" in batch:
            values.update(nsp_loss=output.nsp_loss, nsp_examples=len(batch["nsp_labels"]),
                          nsp_correct=(output.nsp_logits.argmax(-1) == batch["nsp_labels"]).sum())
        self.add(values)

    def summary(self, process: _Process) -> dict[str, float | None]:
        """Means over the window and over all processes, the throughput in tokens/s (non-padding) and
        the window's wall-clock seconds."""
        sums, seconds = self.totals(process)
        return {
            "loss": sums["loss"] / sums["micro_batches"],
            # over the micro-batches that predicted something; None when none did (see _without_empty_mlm_loss)
            "mlm_loss": sums["mlm_loss"] / sums["mlm_micro_batches"] if sums["mlm_micro_batches"] else None,
            "nsp_loss": sums["nsp_loss"] / sums["micro_batches"] if self.nsp else None,
            "mlm_accuracy": sums["mlm_correct"] / max(1.0, sums["mlm_predicted"]),
            "nsp_accuracy": sums["nsp_correct"] / sums["nsp_examples"] if self.nsp else None,
            "tokens_per_second": sums["tokens"] / seconds,
            "seconds": seconds,
        }

    @staticmethod
    def progress(record: dict) -> dict[str, str]:
        """What the progress bar shows of a log line."""
        return {"loss": f"{record['loss']:.3f}", "mlm_acc": f"{record['mlm_accuracy']:.3f}"}


class _CausalLMWindow(_MetricsWindow):
    """The metrics of causal language modelling: the loss and the accuracy of the next-token predictions."""

    NAMES = ("loss", "micro_batches", "correct", "predicted", "tokens")

    @torch.no_grad()
    def update(self, output, batch: dict[str, torch.Tensor]) -> None:
        labels = batch["labels"]  # (B, N): the tokens, -100 at the padding
        targets = labels[:, 1:]  # (B, N - 1): the token that each position predicts
        predicted = targets != IGNORE_INDEX
        correct = (output.logits[:, :-1].argmax(-1) == targets) & predicted
        self.add({"loss": output.loss, "micro_batches": 1, "correct": correct.sum(), "predicted": predicted.sum(),
                  "tokens": (labels != IGNORE_INDEX).sum()})

    def summary(self, process: _Process) -> dict[str, float]:
        """The mean loss and the next-token accuracy over the window and over all processes, the
        throughput in tokens/s (non-padding) and the window's wall-clock seconds."""
        sums, seconds = self.totals(process)
        return {"loss": sums["loss"] / sums["micro_batches"],
                "accuracy": sums["correct"] / max(1.0, sums["predicted"]),
                "tokens_per_second": sums["tokens"] / seconds,
                "seconds": seconds}

    @staticmethod
    def progress(record: dict) -> dict[str, str]:
        """What the progress bar shows of a log line."""
        return {"loss": f"{record['loss']:.3f}", "acc": f"{record['accuracy']:.3f}"}


# --------------------------------------------------------------------------------------------------
# The metrics log
# --------------------------------------------------------------------------------------------------


def load_metrics(metrics_path: str | Path) -> list[dict]:
    """The records of a metrics log (JSON lines), in order."""
    metrics_path = Path(metrics_path)
    if not metrics_path.is_file():
        raise FileNotFoundError(f"metrics log {metrics_path} does not exist")
    with metrics_path.open() as file:
        return [json.loads(line) for line in file if line.strip()]


def _write_metrics(metrics_path: Path, records: list[dict]) -> None:
    with metrics_path.open("w") as file:
        file.writelines(json.dumps(record) + "\n" for record in records)


def plot_metrics(metrics_path: str | Path, out_png: str | Path, title: str = "BERT pretraining") -> Path:
    """Plot the losses and accuracies of a metrics log against the optimizer step, into a PNG.

    Uses matplotlib's Agg canvas directly (no display, no change to pyplot's backend).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    records = load_metrics(metrics_path)
    if not records:
        raise ValueError(f"metrics log {metrics_path} is empty: nothing to plot")
    steps = [record["step"] for record in records]
    figure = Figure(figsize=(10, 4), layout="constrained")
    FigureCanvasAgg(figure)
    loss_axes, accuracy_axes = figure.subplots(1, 2)
    for axes, names, ylabel in [(loss_axes, ("loss", "mlm_loss", "nsp_loss"), "cross-entropy (nats)"),
                                (accuracy_axes, ("mlm_accuracy", "nsp_accuracy", "accuracy"), "accuracy")]:
        for name in names:
            values = [record.get(name) for record in records]
            if any(value is not None for value in values):
                axes.plot(steps, [math.nan if value is None else value for value in values], label=name)
        axes.set_xlabel("optimizer step")
        axes.set_ylabel(ylabel)
        axes.grid(alpha=0.3)
        axes.legend()
    figure.suptitle(title)
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out_png, dpi=100)
    return out_png


# --------------------------------------------------------------------------------------------------
# Checkpoints that resume exactly
# --------------------------------------------------------------------------------------------------


def _rng_states(device: torch.device) -> dict:
    """This process's random states (dropout draws from torch's), in a form ``torch.load`` accepts safely."""
    numpy_state = np.random.get_state()
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
            "python": random.getstate(),
            "numpy": (numpy_state[0], numpy_state[1].tolist(), *numpy_state[2:])}


def _set_rng_states(states: dict, device: torch.device) -> None:
    torch.set_rng_state(states["torch"])
    if device.type == "cuda" and states["cuda"] is not None:
        torch.cuda.set_rng_state(states["cuda"], device)
    random.setstate(states["python"])
    name, keys, *rest = states["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), *rest))


def _save_checkpoint(path: Path, step: int, model: nn.Module, optimizer, scheduler, scaler, settings: dict,
                     process: _Process) -> None:
    """Write the training state atomically (rank 0); every process contributes its random states."""
    rng_states = [None] * process.world_size
    if process.world_size > 1:
        dist.all_gather_object(rng_states, _rng_states(process.device))
    else:
        rng_states[0] = _rng_states(process.device)
    if process.is_main:
        state = {"step": step, "settings": settings, "model": model.state_dict(),
                 "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                 "scaler": scaler.state_dict(), "rng_states": rng_states,
                 "micro_batches_seen": step * settings["grad_accum_steps"]}
        temporary = path.with_suffix(".tmp")
        torch.save(state, temporary)
        os.replace(temporary, path)  # a crash while writing never leaves a broken checkpoint


def _load_checkpoint(path: Path, model: nn.Module, optimizer, scheduler, scaler, settings: dict,
                     process: _Process) -> int:
    """Restore the training state of ``path``; return its step. The run's settings must be the same.

    The file is read onto the CPU: ``load_state_dict`` then copies the weights to the model's device
    and the optimizer state next to its parameters (AdamW's step counts stay on the CPU, as in a
    fresh run), and the random states must be CPU byte tensors for ``torch.set_rng_state`` and
    ``torch.cuda.set_rng_state``.
    """
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # a truncated or foreign file: pickle, zip and torch raise many kinds
        raise ValueError(f"cannot resume from {path}: it is not a readable checkpoint ({error}); delete it, "
                         f"or pass resume=False (--no-resume) to start over") from None
    different = {name: (state["settings"].get(name), value) for name, value in settings.items()
                 if state["settings"].get(name) != value}
    if different:
        changes = ", ".join(f"{name} {old!r} -> {new!r}" for name, (old, new) in different.items())
        raise ValueError(f"cannot resume from {path}: it was written with other settings ({changes}); "
                         f"pass the same arguments, or resume=False (or another output_dir) to start over")
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as error:
        raise ValueError(f"the checkpoint {path} does not fit this model (another config?): {error}") from None
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    if state.get("scaler"):  # empty when the run that wrote it did not scale its losses
        scaler.load_state_dict(state["scaler"])
    _set_rng_states(state["rng_states"][process.rank], process.device)
    return state["step"]


# --------------------------------------------------------------------------------------------------
# The training loop
# --------------------------------------------------------------------------------------------------


def pretrain(
    model: nn.Module,
    tokenizer,
    documents: Sequence[Sequence[str]] | PackedSegments,
    recipe: PretrainingRecipe | None = None,
    *,
    output_dir: str | Path,
    device: str | torch.device | None = None,
    stop_at_step: int | None = None,
    resume: bool = True,
    progress: bool = True,
    precision: str = "auto",
    compile_model: bool = False,
    **recipe_keywords,
) -> list[dict]:
    """Pretrain a ``BertForPreTraining`` with MLM (and NSP), or a GPT with causal language modelling, on
    one device or under ``torchrun``.

    ``recipe`` holds the run's settings (:class:`PretrainingRecipe`). Each optimizer step averages the
    losses L = L_MLM + L_NSP (L_MLM alone with ``nsp=False``) of grad_accum_steps micro-batches of
    batch_size examples per process (L_MLM = 0 for a micro-batch in which no token was chosen, where the
    mean would be 0/0), clips the gradient's global norm to max_grad_norm, and takes an AdamW step
    (Loshchilov and Hutter, 2019; betas (0.9, 0.999), eps 1e-6 as in BERT; no weight decay on biases and
    LayerNorm weights) with a learning rate that rises linearly over warmup_steps and falls linearly to 0
    at max_steps. The forward pass runs in bf16 autocast on CUDA (fp16 with a gradient scaler on GPUs
    without native bf16) and on a CPU that computes bf16 natively, in float32 on other CPUs
    (``precision``). One step sees batch_size * grad_accum_steps * world_size examples.

    With ``objective="causal"`` the model is a ``bertlab.gpt.GPTLMHeadModel`` and the examples are the
    full-sentence segments of ``nsp=False``, [CLS] segment [SEP], unmasked (``CausalLMDataset``; masking,
    nsp, mlm_probability and static_mask_copies do not apply). Each position predicts the next token:
    L_LM = -(1/|P|) sum_{i in P} log p(x_{i+1} | x_1 .. x_i) over the positions P whose next token is
    real (``bertlab.gpt.causal_lm_loss``). Everything else is the same loop.

    Multi-GPU: launched with ``torchrun --nproc_per_node P script.py``, each process trains a
    DistributedDataParallel replica on its own share of every epoch (``DistributedSampler``); NCCL on
    GPUs, gloo on CPUs. Only rank 0 writes files, logs and shows progress. The model's weights are
    those of rank 0 at the start (DDP broadcasts them).

    Outputs in output_dir: ``config.json`` and the weights (``model.save_pretrained``), ``vocab.txt``,
    ``pretraining_args.json``, ``metrics.jsonl`` (one JSON line every log_every steps: step, epoch,
    loss, mlm_loss, nsp_loss, mlm_accuracy, nsp_accuracy, lr, tokens_per_second, seconds; the metrics
    are means over the steps since the previous line, mlm_loss over the micro-batches that predicted a
    token, None if none did; seconds, the wall-clock time of those steps; with the causal objective:
    step, epoch, loss, accuracy of the next-token predictions, lr, tokens_per_second, seconds),
    ``loss_curve.png`` and ``checkpoint.pt`` (model, optimizer, scheduler, gradient scaler, step, random states of every
    process; the data order is a function of the step). With ``resume=True`` a call continues from
    the checkpoint in output_dir and ends exactly as one uninterrupted run would; ``resume=False``
    starts over.

    Args:
        model: a ``BertForPreTraining`` (a ``GPTLMHeadModel`` for the causal objective); trained in place,
            left on ``device``.
        tokenizer: the ``BertTokenizer`` of the model's vocabulary.
        documents: the corpus, a list of documents, each a list of sentences; or, with nsp=False or the
            causal objective, ``PackedSegments`` packed for seq_len with the tokenizer's vocabulary.
        recipe: the run's settings.
        output_dir: folder for the outputs (created).
        device: "cpu", "cuda", ...; None for CUDA when available.
        stop_at_step: end this call after this step, without changing the schedule (a later call
            with resume=True goes on; stop at a multiple of log_every for the same log lines as
            an uninterrupted run); None to train to max_steps.
        resume: continue from output_dir's checkpoint when there is one.
        progress: show a tqdm progress bar.
        precision: the forward pass's precision (``bertlab.utils.autocast_dtype``): "auto" (bf16 or fp16
            on CUDA, bf16 on a CPU that computes it natively, else float32), or "float32", "bfloat16",
            "float16" explicitly. A speed choice, not a setting of the run: a run may resume in another
            precision.
        compile_model: run the forward and backward passes through ``torch.compile`` (the first steps
            are slower while it compiles; the weights and the checkpoints are the model's own).
        **recipe_keywords: the recipe's fields as keywords, as earlier releases took them (deprecated).

    Returns:
        The metrics history, a list of the dicts written to ``metrics.jsonl`` (the same on every process).
    """
    recipe = recipe_from_keywords(PretrainingRecipe, recipe, recipe_keywords, "pretrain")
    check_precision(precision)
    if isinstance(model, GPTLMHeadModel) != recipe.causal:
        raise ValueError(f"a {type(model).__name__} does not learn the {recipe.objective} objective: a "
                         f"GPTLMHeadModel learns the causal one, a BertForPreTraining the masked one")
    end_step = recipe.max_steps if stop_at_step is None else stop_at_step
    if not 1 <= end_step <= recipe.max_steps:
        raise ValueError(f"stop_at_step must be between 1 and max_steps = {recipe.max_steps}, got {stop_at_step}")
    config = model.config
    if recipe.seq_len > config.max_position_embeddings:
        raise ValueError(f"seq_len {recipe.seq_len} exceeds the model's max_position_embeddings "
                         f"{config.max_position_embeddings}")
    if tokenizer.vocab_size > config.vocab_size:
        raise ValueError(f"the tokenizer has {tokenizer.vocab_size} tokens but the model's vocab_size is "
                         f"{config.vocab_size}: build the model with vocab_size >= {tokenizer.vocab_size}")
    process = _setup_process(device)
    try:
        return _train(model, tokenizer, documents, Path(output_dir), recipe, process, end_step=end_step,
                      resume=resume, progress=progress, precision=precision, compile_model=compile_model)
    finally:
        if process.started_group:
            dist.destroy_process_group()


def _train(model, tokenizer, documents, output_dir: Path, recipe: PretrainingRecipe, process: _Process, *,
           end_step: int, resume: bool, progress: bool, precision: str, compile_model: bool) -> list[dict]:
    settings = {**recipe.settings(), "world_size": process.world_size}  # what the checkpoint must match
    seed, batch_size, accumulation = recipe.seed, recipe.batch_size, recipe.grad_accum_steps
    seed_everything(seed + process.rank)  # dropout differs between processes
    if recipe.causal:
        dataset = CausalLMDataset(tokenizer, documents, seq_len=recipe.seq_len)
    else:
        dataset = PretrainingDataset(tokenizer, documents, seq_len=recipe.seq_len, nsp=recipe.nsp,
                                     masking=recipe.masking, static_mask_copies=recipe.static_mask_copies,
                                     mlm_probability=recipe.mlm_probability, seed=seed)
    sampler = DistributedSampler(dataset, num_replicas=process.world_size, rank=process.rank, shuffle=True, seed=seed)
    batches_per_epoch = len(sampler) // batch_size
    if batches_per_epoch == 0:
        raise ValueError(f"the corpus gives {len(dataset)} examples, fewer than one batch of {batch_size} per "
                         f"process ({process.world_size} processes): use a smaller batch_size or more text")

    model.to(process.device)
    optimizer = torch.optim.AdamW(weight_decay_groups(model, recipe.weight_decay), lr=recipe.lr,
                                  betas=(0.9, 0.999), eps=1e-6)
    scheduler = get_linear_schedule(optimizer, recipe.warmup, recipe.max_steps)
    scaler = grad_scaler(process.device, precision)  # enabled for float16 autocast only

    output_dir.mkdir(parents=True, exist_ok=True)
    checkpoint_path, metrics_path = output_dir / CHECKPOINT_FILE, output_dir / METRICS_FILE
    step, history = 0, []
    if resume and checkpoint_path.is_file():
        step = _load_checkpoint(checkpoint_path, model, optimizer, scheduler, scaler, settings, process)
        if metrics_path.is_file():  # drop the lines logged after the checkpoint by an interrupted run
            history = [record for record in load_metrics(metrics_path) if record["step"] <= step]
    if process.world_size > 1:
        dist.barrier()  # every process has read the files before rank 0 rewrites them
    if process.is_main:
        if not resume:
            checkpoint_path.unlink(missing_ok=True)  # a later resume must not go back to an older run
        (output_dir / SETTINGS_FILE).write_text(json.dumps(settings, indent=2) + "\n")
        _write_metrics(metrics_path, history)

    without_nsp = not recipe.causal and not recipe.nsp
    network = _WithoutNextSentencePrediction(model) if without_nsp else model
    if process.world_size > 1:
        network = DistributedDataParallel(network, device_ids=[process.device.index] if process.device.type == "cuda"
                                          else None, find_unused_parameters=without_nsp)
    network.train()
    forward = torch.compile(network) if compile_model else network
    batches = _micro_batches(dataset, sampler, batch_size, start=step * accumulation, seed=seed, rank=process.rank)
    if recipe.causal:
        new_window = partial(_CausalLMWindow, process.device)
    else:
        new_window = partial(_MaskedLMWindow, process.device, recipe.nsp)
    window = new_window()
    bar = tqdm(total=end_step, initial=step, desc="pretraining", unit="step",
               disable=not progress or not process.is_main)
    while step < end_step:
        for micro_step in range(accumulation):
            batch = {name: tensor.to(process.device, non_blocking=True) for name, tensor in next(batches).items()}
            synchronize = micro_step == accumulation - 1 or process.world_size == 1
            with contextlib.nullcontext() if synchronize else network.no_sync():
                with autocast(process.device, precision=precision):
                    output = (forward(**batch) if recipe.causal
                              else _without_empty_mlm_loss(forward(**batch, predict_labelled_only=True), batch))
                scaler.scale(output.loss / accumulation).backward()
            window.update(output, batch)
        if recipe.max_grad_norm is not None:
            scaler.unscale_(optimizer)  # clip the true gradients
            nn.utils.clip_grad_norm_(model.parameters(), recipe.max_grad_norm)
        lr = scheduler.get_last_lr()[0]
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        bar.update()

        if step % recipe.log_every == 0 or step == end_step:
            record = {"step": step, "epoch": step * accumulation / batches_per_epoch, **window.summary(process),
                      "lr": lr}
            history.append(record)
            if process.is_main:
                with metrics_path.open("a") as file:
                    file.write(json.dumps(record) + "\n")
            bar.set_postfix(window.progress(record))
            window = new_window()
        if step % recipe.checkpoint_every == 0 or step == end_step:
            _save_checkpoint(checkpoint_path, step, model, optimizer, scheduler, scaler, settings, process)
    bar.close()

    if process.is_main:
        model.save_pretrained(output_dir)
        tokenizer.save_vocabulary(output_dir)
        if history:
            title = "GPT pretraining" if recipe.causal else "BERT pretraining"
            plot_metrics(metrics_path, output_dir / PLOT_FILE, title)
    if process.world_size > 1:
        dist.barrier()  # the outputs are complete when pretrain returns, on every process
    return history
