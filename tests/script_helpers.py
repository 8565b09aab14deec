"""Importing a script of ``benchmarks/`` or ``tools/`` in a test, as running it as a script does."""

import importlib.util
import sys

from tests.conftest import REPO_ROOT


def benchmark_script(name: str):
    """The module of ``benchmarks/<name>.py``, imported as running it as a script does: with its folder on
    the import path (it imports benchmark_runs)."""
    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "benchmarks" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(REPO_ROOT / "benchmarks"))
    return module


def tool_module(name: str):
    """The module of ``tools/<name>.py``, imported as running it as a script does: with its folder on the
    import path (the course model tools import course_models)."""
    tools = str(REPO_ROOT / "tools")
    sys.path.insert(0, tools)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(tools)
