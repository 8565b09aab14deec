"""Generation with and without the KV cache, side by side in one run (chapter 11).

One model, one prompt, the same greedy tokens: ``bertlab.gpt.generate(..., use_cache=True)`` passes the
prompt once and then each new token alone, its keys and values appended to a ``KVCache``;
``use_cache=False`` recomputes the whole sequence at every step. Greedy decoding makes both produce the
same tokens (checked), so the timings compare the same work's two algorithms. Each repeat times both
back to back, in alternating order, so a change in the machine's load touches both: the ratio reported
is the median of the per-repeat ratios (recompute time / cached time), with their minimum and maximum.

The model is the course GPT's size (``--preset course``: 4 layers, width 256, 4 heads, vocabulary 8192)
with random weights: the time of a forward pass does not depend on the weights' values, and greedy
decoding runs exactly ``--new-tokens`` steps (no end-of-text token is given).

    python benchmarks/generation.py --out benchmarks/results/generation-cpu.json

Without the cache, step t processes P + t positions, each attending over up to P + t: the work of n steps
grows as n^2 in the feed-forward layers and n^3 in attention; with it, step t processes one position
attending over P + t, n^2 in all. The ratio therefore grows with ``--new-tokens``.
"""

import argparse
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from benchmark_runs import machine, measured, synchronize
from bertlab.gpt import PRESETS, GPTConfig, GPTLMHeadModel, generate
from bertlab.utils import resolve_device, seed_everything

WAYS = {"with the KV cache": True, "recomputing every step": False}


def timed_generation(model: GPTLMHeadModel, prompt: torch.Tensor, new_tokens: int,
                     use_cache: bool) -> tuple[float, torch.Tensor]:
    """Seconds to generate ``new_tokens`` greedy tokens after ``prompt`` (B, P), and the tokens (B, P + new)."""
    synchronize(prompt.device)
    start = time.perf_counter()
    tokens = generate(model, prompt, new_tokens, use_cache=use_cache)
    synchronize(prompt.device)
    return time.perf_counter() - start, tokens


def measure(args: argparse.Namespace) -> dict:
    device = resolve_device(args.device)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    generator = seed_everything(args.seed)
    config = GPTConfig.preset(args.preset)
    if args.prompt_tokens + args.new_tokens > config.n_positions:
        raise ValueError(f"{args.prompt_tokens} prompt and {args.new_tokens} new tokens exceed the "
                         f"{config.n_positions} positions of --preset {args.preset}")
    model = GPTLMHeadModel(config).to(device).eval()
    prompt = torch.randint(0, config.vocab_size, (args.batch_size, args.prompt_tokens), generator=generator).to(device)
    outputs = {}
    for name, use_cache in WAYS.items():  # warm-up, and the check that both ways agree
        _, outputs[name] = timed_generation(model, prompt, args.new_tokens, use_cache)
    cached, recomputed = outputs.values()
    if not torch.equal(cached, recomputed):
        raise RuntimeError("the cached and the recomputed generations differ: the timings would not compare "
                           "the same work")
    seconds = {name: [] for name in WAYS}
    for repeat in range(args.repeats):
        order = list(WAYS) if repeat % 2 == 0 else list(reversed(WAYS))  # alternate who goes first
        for name in order:
            seconds[name].append(timed_generation(model, prompt, args.new_tokens, WAYS[name])[0])
    cached_name, recompute_name = WAYS
    ratios = [slow / fast for fast, slow in zip(seconds[cached_name], seconds[recompute_name])]
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["python", *sys.argv]),
        "machine": machine(device),
        "preset": args.preset,
        "config": config.to_dict(),
        "batch_size": args.batch_size,
        "prompt_tokens": args.prompt_tokens,
        "new_tokens": args.new_tokens,
        "repeats": args.repeats,
        "same_tokens": True,
        "seconds": seconds,
        "median_seconds": {name: statistics.median(values) for name, values in seconds.items()},
        "paired_ratios_recompute_over_cached": ratios,
        "ratio_recompute_over_cached": statistics.median(ratios),
    }


def markdown_table(result: dict) -> str:
    new_tokens = result["new_tokens"]
    lines = [
        f"Greedy generation of {new_tokens} tokens after a prompt of {result['prompt_tokens']}, batch "
        f"{result['batch_size']}, GPT preset {result['preset']} (random weights), "
        f"{result['machine']['device_name']}, {result['machine']['threads']} threads "
        f"(median of {result['repeats']} repeats, float32)",
        "",
        "| generation | seconds (median) | min | max | ms per new token |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, median in result["median_seconds"].items():
        values = result["seconds"][name]
        lines.append(f"| {name} | {median:.3f} | {min(values):.3f} | {max(values):.3f} | "
                     f"{1000 * median / new_tokens:.1f} |")
    ratios = result["paired_ratios_recompute_over_cached"]
    lines += ["", f"recomputing / cached: {result['ratio_recompute_over_cached']:.1f}x (median of the per-repeat "
                  f"ratios, from {min(ratios):.1f} to {max(ratios):.1f}); both produced the same tokens"]
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto (default: auto)")
    parser.add_argument("--preset", default="course", choices=list(PRESETS))
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--prompt-tokens", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats of each way (default: 5)")
    parser.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's choice)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="also write the result as JSON to this file")
    args = parser.parse_args(argv)
    for name in ("batch_size", "prompt_tokens", "new_tokens", "repeats", "threads"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def main(argv=None) -> int:
    return measured(measure, markdown_table, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
