"""The inputs of a check: cases drawn from a generator seeded by the check's name and the grading run's seed."""

import hashlib
import zlib
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Case:
    """One call of the function under test: a description for the student, and the arguments."""

    description: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)

    def fresh_arguments(self) -> tuple[tuple, dict]:
        """Copies of the arguments (tensors cloned), so no call can change another call's inputs."""
        return _clone(self.args), _clone(self.kwargs)


_run_seed: int | None = None  # the grading run's seed, set in the grader's process only
_visible: bool = False  # within visible_check: the fixed cases, whatever the run seed


@contextmanager
def use_run_seed(seed: int):
    """Within the block, :func:`generator_for` also depends on ``seed`` (the grader's run seed)."""
    global _run_seed
    previous, _run_seed = _run_seed, seed
    try:
        yield
    finally:
        _run_seed = previous


@contextmanager
def visible_cases():
    """Within the block, :func:`generator_for` ignores the grading run's seed: the checks draw their
    visible cases, the same in the student's notebook and in every grading run."""
    global _visible
    previous, _visible = _visible, True
    try:
        yield
    finally:
        _visible = previous


def kind_of_cases() -> str:
    """What a summary calls the cases it checked: ``"visible "`` within :func:`visible_cases`, ``"hidden "``
    in a grading run (its seed set), else nothing (a check called by hand)."""
    return "visible " if _visible else "hidden " if _run_seed is not None else ""


def generator_for(name: str) -> torch.Generator:
    """A CPU generator seeded by ``name``, and by the grading run's seed within :func:`use_run_seed`
    (unless within :func:`visible_cases`): the same inputs for the same (name, run seed)."""
    if _run_seed is None or _visible:
        return torch.Generator().manual_seed(zlib.crc32(name.encode()))
    digest = hashlib.sha256(f"{_run_seed}:{name}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "big") >> 1)


def random_normal(
    generator: torch.Generator, *shape: int, scale: float = 1.0, shift: float = 0.0, dtype=torch.float32
) -> torch.Tensor:
    """A tensor of ``shape`` drawn from N(shift, scale^2) with ``generator``, then cast to ``dtype``.

    The values are drawn in float64, so a case in float32, float64 or bfloat16 holds the same numbers
    (up to the rounding of its dtype).
    """
    return (torch.randn(shape, generator=generator, dtype=torch.float64) * scale + shift).to(dtype)


def random_integer(generator: torch.Generator, low: int, high: int) -> int:
    """An integer drawn uniformly from ``low`` to ``high`` (both included) with ``generator``.

    The sizes and integer arguments of the cases (lengths, window sizes, numbers of heads, ...) are drawn
    with it, so that a hidden case changes with the grading run's seed however small its input: a table
    of answers computed ahead of time, on the cases a student can draw, misses it. Draw from ranges wide
    enough that two seeds rarely give the same case.
    """
    return int(torch.randint(low, high + 1, (1,), generator=generator))


def random_choice(generator: torch.Generator, options: Sequence):
    """One of ``options``, drawn uniformly with ``generator``."""
    return options[random_integer(generator, 0, len(options) - 1)]


def _clone(value):
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (tuple, list)):
        return type(value)(_clone(item) for item in value)
    if isinstance(value, dict):
        return {key: _clone(item) for key, item in value.items()}
    return value


def same_value(a, b) -> bool:
    """Exact equality of two argument structures (NaN equals NaN)."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if not a.is_floating_point():
            return torch.equal(a, b)
        return bool(((a == b) | (a.isnan() & b.isnan())).all())
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[key], b[key]) for key in a)
    return a is b or a == b
