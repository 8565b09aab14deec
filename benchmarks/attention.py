"""Time and peak memory of attention versus sequence length, measured side by side in one run.

    python benchmarks/attention.py [--device cpu|cuda] [--out benchmarks/results/attention-<device>.json]
                                   [--threads T] [--lengths N [N ...]] [--dtype float32|float16|bfloat16]

Methods (self-attention, no mask, forward pass only under ``torch.no_grad``), on q, k, v of shape
(B, H, N, D) = (1, 4, N, 64) in float32 for N = 512 ... 8192:

- ``dense``          bertlab.attention.scaled_dot_product_attention (builds the (N, N) weights)
- ``flash``          bertlab.efficient.flash_attention, block_size 128
- ``sliding_window`` bertlab.efficient.sliding_window_attention, window 256
- ``linear``         bertlab.efficient.linear_attention
- ``torch_sdpa``     torch.nn.functional.scaled_dot_product_attention (PyTorch's fused kernels)

How it measures. Every (method, N) runs in a fresh Python process (this script with ``--worker``),
so that no measurement inherits another one's allocations. The worker allocates the inputs, calls
the method once to warm up, then times ``repeats_for(N)`` calls and reports the median (all the
times are in the JSON). ``--threads`` sets torch's CPU threads in the workers.

- Peak memory on CUDA: ``torch.cuda.max_memory_allocated()`` during the timed calls, minus the
  memory allocated before them (the inputs).
- Peak memory on CPU: the peak resident set size of the process (VmHWM in /proc/self/status) during
  the timed calls, minus the resident set size just before them (the inputs and the libraries). The
  peak is reset to the current size before the timed calls by writing 5 to /proc/self/clear_refs
  (Linux). The worker runs with MALLOC_MMAP_THRESHOLD_=65536, so that glibc gives every allocation of
  64 KiB or more its own pages and returns them on free: the resident size then follows the live
  tensors instead of glibc's free lists.

The growth exponent of a method is the slope of log(time) or log(memory) against log(N), fitted by
least squares over all N. Timings depend on the load of the machine; compare methods within a run.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from functools import partial
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from bertlab.attention import scaled_dot_product_attention
from bertlab.efficient import flash_attention, linear_attention, sliding_window_attention

LENGTHS = (512, 1024, 2048, 4096, 8192)
BATCH, HEADS, HEAD_DIM = 1, 4, 64
WINDOW, BLOCK_SIZE = 256, 128
MIB = 2**20

METHODS = {  # each maps q, k, v (B, H, N, D) to the output (B, H, N, D)
    "dense": lambda q, k, v: scaled_dot_product_attention(q, k, v)[0],
    "flash": partial(flash_attention, block_size=BLOCK_SIZE),
    "sliding_window": partial(sliding_window_attention, window=WINDOW),
    "linear": linear_attention,
    "torch_sdpa": F.scaled_dot_product_attention,
}


def repeats_for(n: int) -> int:
    """Fewer timed calls for long sequences, where one call of dense attention takes seconds."""
    return 7 if n <= 1024 else 5 if n <= 2048 else 3


# --------------------------------------------------------------------------------------------------
# Worker: one (method, N) in its own process
# --------------------------------------------------------------------------------------------------


def _proc_status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not found in /proc/self/status")


class PeakMemory:
    """Peak extra memory, in bytes, of the code run between ``start()`` and ``stop()``."""

    def __init__(self, device: torch.device):
        self.device = device

    def start(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.baseline = torch.cuda.memory_allocated(self.device)
        else:
            Path("/proc/self/clear_refs").write_text("5")  # peak RSS := current RSS
            self.baseline = _proc_status_kib("VmRSS") * 1024

    def stop(self) -> int:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            return torch.cuda.max_memory_allocated(self.device) - self.baseline
        return _proc_status_kib("VmHWM") * 1024 - self.baseline


def run_worker(method: str, n: int, device: torch.device, dtype: torch.dtype) -> dict:
    torch.manual_seed(0)
    q, k, v = torch.randn(3, BATCH, HEADS, n, HEAD_DIM, device=device, dtype=dtype).unbind(0)
    attend = METHODS[method]

    def call() -> None:
        attend(q, k, v)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    with torch.no_grad():
        call()  # warm-up: kernels, thread pools, lazy initialization
        memory = PeakMemory(device)
        memory.start()
        times = []
        for _ in range(repeats_for(n)):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        peak = memory.stop()
    median = statistics.median(times)
    return {"method": method, "n": n, "time_s": median, "times_s": times, "peak_bytes": peak}


# --------------------------------------------------------------------------------------------------
# Driver: all (method, N), the fits, the table
# --------------------------------------------------------------------------------------------------


def measure(method: str, n: int, args: argparse.Namespace) -> dict:
    command = [sys.executable, __file__, "--worker", method, str(n)]
    command += ["--device", args.device, "--dtype", args.dtype]
    if args.threads:
        command += ["--threads", str(args.threads)]
    environment = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    done = subprocess.run(command, env=environment, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"worker {method} N={n} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def growth_exponent(lengths: list[int], values: list[float]) -> float | None:
    """Slope of log(value) against log(N), by least squares over the positive values.

    A peak below the resolution of the measurement (a 4 KiB page on CPU) reads as 0 and is left out;
    None when fewer than two values remain.
    """
    points = [(n, value) for n, value in zip(lengths, values) if value > 0]
    if len(points) < 2:
        return None
    slope, _ = np.polyfit(*np.log(points).T, 1)
    return float(slope)


def check_expectations(results: dict) -> list[dict]:
    """The issue's expectations: flash and sliding-window memory grow linearly, and flash at the
    longest N uses at most a tenth of dense attention's peak memory."""
    exponents = results["exponents"]
    longest = str(max(results["lengths"]))
    flash_peak = results["measurements"]["flash"][longest]["peak_bytes"]
    dense_peak = results["measurements"]["dense"][longest]["peak_bytes"]
    checks = [
        {
            "expectation": f"{method} memory grows linearly (exponent <= 1.2)",
            "measured": f"exponent {_format_exponent(exponents[method]['memory'])}",
            "holds": exponents[method]["memory"] is not None and exponents[method]["memory"] <= 1.2,
        }
        for method in ("flash", "sliding_window")
    ]
    checks.append(
        {
            "expectation": f"flash peak memory at N={longest} <= dense / 10",
            "measured": f"{flash_peak / MIB:.1f} MiB / {dense_peak / MIB:.1f} MiB"
            f" = {flash_peak / dense_peak:.4f}",
            "holds": flash_peak <= dense_peak / 10,
        }
    )
    return checks


def _format_exponent(exponent: float | None) -> str:
    return "n/a" if exponent is None else f"{exponent:.2f}"


def markdown(results: dict) -> str:
    methods, lengths = list(results["measurements"]), results["lengths"]
    header = "| N | " + " | ".join(methods) + " |\n|---:|" + "---:|" * len(methods)
    lines = []
    quantities = (("Median time", "time_s", "ms", 1e3), ("Peak memory", "peak_bytes", "MiB", 1 / MIB))
    for title, key, unit, scale in quantities:
        lines += [f"**{title} ({unit})**", "", header]
        for n in lengths:
            cells = [f"{results['measurements'][m][str(n)][key] * scale:.1f}" for m in methods]
            lines.append(f"| {n} | " + " | ".join(cells) + " |")
        exponent = "time" if key == "time_s" else "memory"
        cells = [_format_exponent(results["exponents"][m][exponent]) for m in methods]
        lines += ["| growth exponent | " + " | ".join(cells) + " |", ""]
    lines += ["| expectation | measured | holds |", "|---|---|---|"]
    for check in results["checks"]:
        holds = "yes" if check["holds"] else "NO"
        lines.append(f"| {check['expectation']} | {check['measured']} | {holds} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--out", type=Path, help="JSON file (default: results/attention-DEVICE.json)")
    parser.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's choice)")
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS), help="sequence lengths N")
    parser.add_argument("--worker", nargs=2, metavar=("METHOD", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda was asked for, but CUDA is not available here")
    if args.device == "cpu" and not Path("/proc/self/clear_refs").exists():
        parser.error("CPU peak memory is read from /proc/self (Linux only)")

    if args.worker:
        method, n = args.worker
        if args.threads:
            torch.set_num_threads(args.threads)
        print(json.dumps(run_worker(method, int(n), torch.device(args.device), getattr(torch, args.dtype))))
        return

    lengths = args.lengths
    measurements = {method: {} for method in METHODS}
    for n in lengths:
        for method in METHODS:
            result = measure(method, n, args)
            measurements[method][str(n)] = result
            time_ms, peak_mib = result["time_s"] * 1e3, result["peak_bytes"] / MIB
            print(f"N={n:5d} {method:15s} {time_ms:10.1f} ms {peak_mib:10.1f} MiB", flush=True)
    exponents = {
        method: {
            key: growth_exponent(lengths, [by_length[str(n)][field] for n in lengths])
            for key, field in (("time", "time_s"), ("memory", "peak_bytes"))
        }
        for method, by_length in measurements.items()
    }
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else cpu_name()
    results = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["python", *sys.argv]),
        "device": args.device,
        "device_name": device_name,
        "cpu_count": os.cpu_count(),
        "threads": args.threads or torch.get_num_threads(),
        "torch": torch.__version__,
        "dtype": args.dtype,
        "shape": {"batch": BATCH, "heads": HEADS, "head_dim": HEAD_DIM},
        "window": WINDOW,
        "block_size": BLOCK_SIZE,
        "lengths": lengths,
        "measurements": measurements,
        "exponents": exponents,
    }
    results["checks"] = check_expectations(results)
    print()
    print(markdown(results))
    out = args.out or Path(__file__).resolve().parent / "results" / f"attention-{args.device}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
