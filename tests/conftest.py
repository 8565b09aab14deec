"""Shared pytest configuration: GPU skipping, devices and the optional real datasets."""

import os
import socket
import time
from pathlib import Path

# fp32 on the GPU means fp32: NGC containers set this override to force TF32 (10-bit mantissas) in
# cuBLAS, which fails comparisons at 1e-5. PyTorch reads it once, at the first CUDA matmul.
os.environ["TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"] = "0"

import pytest  # noqa: E402
import torch  # noqa: E402

import bertlab.utils  # noqa: E402

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

REPO_ROOT = Path(__file__).resolve().parents[1]
# Real data to check the project on, when the course repo sits next to a ``shared/`` folder (CI does).
SHARED_DATASETS = REPO_ROOT.parent / "shared" / "datasets"
MR_DIR = SHARED_DATASETS / "rt-polarity"


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request):
    """Run a test on the CPU, and again on CUDA when there is a GPU."""
    return torch.device(request.param)


@pytest.fixture
def mr_dir():
    """The sentence polarity dataset v1.0 (MR) from ``../shared/datasets``; skips when absent."""
    if not (MR_DIR / "rt-polarity.pos").exists():
        pytest.skip(f"MR dataset not found at {MR_DIR}")
    return MR_DIR


@pytest.fixture(scope="module")
def one_thread():
    """Run on one thread: tiny models gain nothing from a second one, and OpenMP threads crawl when the
    cores are shared with other jobs. A module asks for it with
    ``pytestmark = pytest.mark.usefixtures("one_thread")``; the thread count is restored afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def free_port() -> int:
    """A TCP port of 127.0.0.1 that no process listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until_listening(port: int, seconds: float = 60.0) -> None:
    """Return once a process listens on TCP ``port`` of 127.0.0.1; fail the test after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                pytest.fail(f"nothing listens on port {port} after {seconds:g} s")
            time.sleep(0.1)


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``bertlab argv`` run in this process."""
    from bertlab.cli import main

    status = main([str(arg) for arg in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _pinned_device(request, monkeypatch):
    """A test not marked ``gpu`` must say which device it runs on.

    Left to ``bertlab`` (device None or "auto"), it would run on CUDA on a machine with a GPU and
    compare CUDA results with CPU ones; it fails here instead, on every machine, CPU-only CI too.
    """
    if "gpu" in request.keywords:
        return

    def unpinned() -> torch.device:
        raise AssertionError("this test left the device to bertlab (None or 'auto'): on a machine with CUDA it "
                             "would run there. Pass device='cpu' (--device cpu), or mark the test gpu.")

    monkeypatch.setattr(bertlab.utils, "default_device", unpinned)
