"""Shared pytest configuration: GPU skipping, devices and the optional real datasets."""

from pathlib import Path

import pytest
import torch

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


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
