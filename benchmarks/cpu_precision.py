"""The pretraining step on a CPU in float32, in bfloat16 autocast, and with torch.compile, side by side.

    python benchmarks/cpu_precision.py [--steps 300] [--log-every 20] [--threads N]
                                       [--out benchmarks/results/cpu-precision.json]

The course's first BERT was pretrained on a 2-core CPU in float32 (``tools/course_bert.py``); a CPU with
native bfloat16 arithmetic (AVX-512 BF16 or AMX, ``bf16`` in its flags) may run the same steps faster
in bfloat16 autocast, and ``torch.compile`` may fuse the small operations of a small model. Each
variant runs ``bertlab.pretraining.pretrain`` with the course BERT's recipe (BERT-mini, MLM only on
full-sentence segments of 128 tokens, dynamic masks, batches of 16, learning rate 5e-4, no dropout)
from the same initial weights, on the same data (the offline pydoc corpus, with the course BERT's
tokenizer), for ``--steps`` steps:

- ``float32``, ``bfloat16`` (autocast), ``float32 + compile`` and ``bfloat16 + compile``;
- ``float32, seed 1``: the same run from other weights and masks, whose distance from the float32
  run is the noise the other variants' loss curves are compared with.

The speed is the median of the tokens per second of the metrics lines after the first (which holds
the compilation); the loss curve is the loss of each metrics line. It prints a markdown table: tokens
per second and the speed-up over float32, and the largest and the mean difference of the loss curve
from float32's next to the noise. Timings depend on the machine and its load (recorded): compare the
rows of one run only.
"""

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from bertlab.bert import BertConfig, BertForPreTraining
from bertlab.data import pretraining_corpus
from bertlab.pretraining import PretrainingRecipe, course_bert_folder, pretrain
from bertlab.tokenization import BertTokenizer

VARIANTS = (  # (name, precision, compile_model, seed)
    ("float32", "float32", False, 0),
    ("bfloat16", "bfloat16", False, 0),
    ("float32 + compile", "float32", True, 0),
    ("bfloat16 + compile", "bfloat16", True, 0),
    ("float32, seed 1", "float32", False, 1),
)


def cpu_flags() -> list[str]:
    """The bfloat16-related flags of this CPU (Linux), e.g. avx512_bf16, amx_bf16."""
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return []
    return sorted(flag for flag in flags.split(":", 1)[1].split() if "bf16" in flag or flag.startswith("amx"))


def run(name: str, precision: str, compile_model: bool, seed: int, steps: int, log_every: int, tokenizer,
        documents) -> dict:
    """One pretraining run of ``steps`` steps; its speed and its loss curve."""
    torch.manual_seed(seed)
    config = BertConfig.preset("mini", vocab_size=tokenizer.vocab_size, hidden_dropout_prob=0.0,
                               attention_probs_dropout_prob=0.0)
    model = BertForPreTraining(config)
    with tempfile.TemporaryDirectory(prefix="cpu-precision-") as folder:
        start = time.perf_counter()
        recipe = PretrainingRecipe(max_steps=steps, batch_size=16, seq_len=128, lr=5e-4, nsp=False, masking="dynamic",
                                   seed=seed, log_every=log_every, checkpoint_every=steps)
        history = pretrain(model, tokenizer, documents, recipe, output_dir=folder, device="cpu", progress=False,
                           precision=precision, compile_model=compile_model)
        seconds = time.perf_counter() - start
    speeds = [record["tokens_per_second"] for record in history[1:]]
    print(f"{name}: {seconds:.0f} s, {statistics.median(speeds):,.0f} tokens/s", flush=True)
    return {"name": name, "precision": precision, "compile": compile_model, "seed": seed, "seconds": seconds,
            "tokens_per_second": statistics.median(speeds), "steps": [record["step"] for record in history],
            "loss": [record["loss"] for record in history]}


def distance(curve: list[float], reference: list[float]) -> tuple[float, float]:
    """The largest and the mean absolute difference between two loss curves."""
    differences = [abs(a - b) for a, b in zip(curve, reference)]
    return max(differences), statistics.mean(differences)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--log-every", type=int, default=20)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/cpu-precision.json"))
    arguments = parser.parse_args()
    if arguments.threads:
        torch.set_num_threads(arguments.threads)
    tokenizer = BertTokenizer(course_bert_folder() / "vocab.txt")  # the course BERT's vocabulary, not its weights
    documents = pretraining_corpus()
    started, load = datetime.now(timezone.utc), os.getloadavg()
    runs = [run(*variant, arguments.steps, arguments.log_every, tokenizer, documents) for variant in VARIANTS]
    base, noise_run = runs[0], runs[-1]
    noise = distance(noise_run["loss"], base["loss"])
    rows = ["| variant | tokens / s | speed-up vs float32 | loss curve vs float32: largest, mean difference |",
            "|---|---:|---:|---:|"]
    for result in runs:
        largest, mean = distance(result["loss"], base["loss"])
        result["loss_difference"] = {"largest": largest, "mean": mean}
        rows.append(f"| {result['name']} | {result['tokens_per_second']:,.0f} | "
                    f"{result['tokens_per_second'] / base['tokens_per_second']:.2f} | {largest:.4f}, {mean:.4f} |")
    print("\n".join(rows))
    print(f"noise (float32 from seed 1 against seed 0): largest {noise[0]:.4f}, mean {noise[1]:.4f}")
    record = {
        "date": started.isoformat(timespec="seconds"), "command": "python benchmarks/cpu_precision.py "
        f"--steps {arguments.steps} --log-every {arguments.log_every}"
        + (f" --threads {arguments.threads}" if arguments.threads else ""),
        "machine": {"processor": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
                    "bf16_flags": cpu_flags(), "threads": torch.get_num_threads(), "torch": torch.__version__,
                    "load_average_start": load, "load_average_end": os.getloadavg()},
        "recipe": {"preset": "mini", "batch_size": 16, "seq_len": 128, "lr": 5e-4, "nsp": False, "dropout": 0.0},
        "runs": runs, "noise": {"largest": noise[0], "mean": noise[1]},
    }
    arguments.out.parent.mkdir(parents=True, exist_ok=True)
    arguments.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"written: {arguments.out}")


if __name__ == "__main__":
    main()
