"""Training throughput of bertlab's BERT against Hugging Face's, side by side in one run.

Both models get the same config, batch and sequence length, and take full training steps (forward,
backward, AdamW step) on masked-language-modelling batches (15% of the positions labelled, no NSP):
``bertlab.bert.BertForPreTraining`` with ``mlm_labels`` only, and ``transformers.BertForMaskedLM`` with
its default (SDPA) attention. After warm-up, the two are timed in alternation, ``--steps`` steps at a
time, ``--repeats`` times; the table gives the median tokens per second (tokens = batch x sequence
length), and the ratio ours / theirs is the median of the per-repeat ratios (each repeat times both
models back to back, so a change in the machine's load affects both). A third row times bertlab's model
with the MLM head applied at the labelled positions only (``predict_labelled_only=True``, as
``bertlab.pretraining.pretrain`` and BERT's own code do), which the other two do not: its ratio shows
what that saves. On CUDA all run under mixed precision (``bertlab.utils.autocast``).

    python benchmarks/bert_throughput.py --preset mini --batch-size 16 --seq-len 128 --out bert_throughput.json
"""

import argparse
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from benchmark_runs import measured, synchronize
from bertlab.bert import PRESETS, BertConfig, BertForPreTraining
from bertlab.utils import autocast, autocast_dtype, resolve_device, seed_everything

LABELLED_ONLY = "bertlab BertForPreTraining, MLM head at the labelled positions only"


def make_batch(config: BertConfig, batch_size: int, seq_len: int, device: torch.device, generator: torch.Generator):
    """Random token ids (B, N) and MLM labels (B, N): the original id at 15% of the positions, -100 elsewhere."""
    input_ids = torch.randint(0, config.vocab_size, (batch_size, seq_len), generator=generator)
    chosen = torch.rand(batch_size, seq_len, generator=generator) < 0.15
    labels = input_ids.masked_fill(~chosen, -100)
    return input_ids.to(device), labels.to(device)


def build_models(config: BertConfig, device: torch.device) -> dict[str, tuple[torch.nn.Module, callable]]:
    """Both models in training mode, with a loss function each: (input_ids, labels) -> loss."""
    import transformers

    ours = BertForPreTraining(config).to(device).train()
    hf_config = transformers.BertConfig(**config.to_dict())  # default attention: "sdpa"
    theirs = transformers.BertForMaskedLM(hf_config).to(device).train()
    gathered = BertForPreTraining(config).to(device).train()
    return {
        "bertlab BertForPreTraining": (ours, lambda ids, labels: ours(ids, mlm_labels=labels).loss),
        f"transformers BertForMaskedLM ({theirs.config._attn_implementation})": (
            theirs, lambda ids, labels: theirs(input_ids=ids, labels=labels).loss
        ),
        LABELLED_ONLY: (gathered, lambda ids, labels: gathered(ids, mlm_labels=labels,
                                                                predict_labelled_only=True).loss),
    }


def make_step(model: torch.nn.Module, loss_fn, device: torch.device):
    """One training step: forward, backward, AdamW step."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(input_ids, labels):
        optimizer.zero_grad(set_to_none=True)
        with autocast(device):
            loss = loss_fn(input_ids, labels)
        loss.backward()
        optimizer.step()

    return step


def load_average() -> list[float] | None:
    """The machine's 1, 5 and 15 minute load averages (None where the OS has none), to judge the noise."""
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else None


def measure(args) -> dict:
    load_at_start = load_average()
    device = resolve_device(args.device)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    generator = seed_everything(args.seed)
    config = BertConfig.preset(args.preset)
    input_ids, labels = make_batch(config, args.batch_size, args.seq_len, device, generator)
    models = build_models(config, device)
    steps = {name: make_step(model, loss_fn, device) for name, (model, loss_fn) in models.items()}
    for step in steps.values():  # warm-up: allocator, kernels, optimizer states
        for _ in range(args.warmup):
            step(input_ids, labels)
    synchronize(device)
    tokens = args.batch_size * args.seq_len * args.steps
    samples = {name: [] for name in steps}
    for repeat in range(args.repeats):
        order = list(steps) if repeat % 2 == 0 else list(reversed(steps))  # alternate who goes first
        for name in order:
            start = time.perf_counter()
            for _ in range(args.steps):
                steps[name](input_ids, labels)
            synchronize(device)
            samples[name].append(tokens / (time.perf_counter() - start))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    ours, theirs, gathered = list(samples)
    # each repeat times the models back to back, under the same machine load: compare them pairwise
    paired_ratios = [mine / other for mine, other in zip(samples[ours], samples[theirs])]
    gathered_ratios = [mine / other for mine, other in zip(samples[gathered], samples[theirs])]
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["python", *sys.argv]),
        "load_average_at_start": load_at_start,
        "load_average_at_end": load_average(),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({platform.machine()})",
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "precision": str(autocast_dtype(device) or torch.float32).removeprefix("torch.") + (
            " autocast" if device.type == "cuda" else ""),
        "preset": args.preset,
        "config": config.to_dict(),
        "batch_size": args.batch_size,
        "seq_len": args.seq_len,
        "steps_per_repeat": args.steps,
        "repeats": args.repeats,
        "tokens_per_second": samples,
        "median_tokens_per_second": medians,
        "paired_ratios_ours_over_theirs": paired_ratios,
        "ratio_ours_over_theirs": statistics.median(paired_ratios),
        "paired_ratios_labelled_only_over_theirs": gathered_ratios,
        "ratio_labelled_only_over_theirs": statistics.median(gathered_ratios),
    }


def markdown_table(result: dict) -> str:
    medians = result["median_tokens_per_second"]
    lines = [
        f"Training throughput, BERT-{result['preset']}, batch {result['batch_size']} x {result['seq_len']} tokens, "
        f"{result['precision']}, {result['device']}, {result['threads']} threads "
        f"(median of {result['repeats']} x {result['steps_per_repeat']} steps)",
        "",
        "| model | tokens/s (median) | min | max | ms/step |",
        "|---|---:|---:|---:|---:|",
    ]
    tokens_per_step = result["batch_size"] * result["seq_len"]
    for name, median in medians.items():
        values = result["tokens_per_second"][name]
        lines.append(
            f"| {name} | {median:,.0f} | {min(values):,.0f} | {max(values):,.0f} | "
            f"{1000 * tokens_per_step / median:.0f} |"
        )
    ratios = ", ".join(f"{ratio:.2f}" for ratio in result["paired_ratios_ours_over_theirs"])
    lines += ["", f"bertlab / transformers: {result['ratio_ours_over_theirs']:.2f}x "
                  f"(median of the per-repeat ratios {ratios}); with the MLM head at the labelled positions "
                  f"only: {result['ratio_labelled_only_over_theirs']:.2f}x"]
    if result["load_average_at_start"] is not None:
        lines += ["", "Load average (1 min) at start and end: "
                      f"{result['load_average_at_start'][0]:.1f}, {result['load_average_at_end'][0]:.1f}"]
    return "\n".join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto (default: auto)")
    parser.add_argument("--preset", default="mini", choices=list(PRESETS))
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per model first (default: 2)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per repeat (default: 3)")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per model (default: 5)")
    parser.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's choice)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="also write the result as JSON to this file")
    args = parser.parse_args(argv)
    for name in ("batch_size", "seq_len", "steps", "repeats", "threads"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.warmup < 0:
        parser.error("--warmup must be >= 0")
    return args


def main(argv=None) -> int:
    return measured(measure, markdown_table, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
