"""What the checks of the module exercises (``nn.Module`` classes) share: their cases (:class:`ModuleCase`,
random weights), their comparison (:func:`compare_module`, the ``compare`` of their :class:`Exercise`
records), a tiny BERT configuration, the student's module built and given the reference's weights, and
the reading of a dropout in training mode. The topic modules of checks import these from here, never
from one another.
"""

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from autograder.checks.framework import (
    DEFAULT_TOLERANCES,
    Case,
    CheckFailed,
    Exercise,
    Tolerance,
    describe_difference,
    diagnose,
    fail,
    failure_message,
    forbidden_calls,
    random_normal,
    run_student,
)
from bertlab.bert import BertConfig


def tiny_bert_config(num_layers: int = 2, **fields) -> BertConfig:
    """A tiny BERT configuration for the checks: a vocabulary of 40, width 16, 2 heads, feed-forward
    width 32, 24 positions; ``fields`` override any of them."""
    values = {"vocab_size": 40, "hidden_size": 16, "num_hidden_layers": num_layers, "num_attention_heads": 2,
              "intermediate_size": 32, "max_position_embeddings": 24, **fields}
    return BertConfig(**values)


def constructor_call(name: str, args: tuple, kwargs: Mapping) -> str:
    """How the constructor is called, e.g. ``FeedForward(8, 16, dropout=0.5)``."""
    arguments = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    return f"{name}({', '.join(arguments)})"


def describe_parameters(shapes: Mapping[str, tuple], names: Iterable[str]) -> str:
    """``names`` with their shapes (``shapes``: name -> shape); a submodule all of whose (more than 2)
    tensors are named is written ``submodule.* (n tensors)``."""
    groups = {}
    for name in sorted(names):
        groups.setdefault(name.split(".")[0], []).append(name)
    parts = []
    for prefix, members in groups.items():
        whole = [name for name in shapes if name.startswith(prefix + ".")]
        if len(members) > 2 and sorted(whole) == members:
            parts.append(f"{prefix}.* ({len(members)} tensors)")
        else:
            parts.extend(f"{name} {shapes[name]}" for name in members)
    return ", ".join(parts) or "none"


def parameter_mismatch(shapes: Mapping[str, tuple], expected: Mapping[str, tuple]) -> str | None:
    """How the names and shapes of the student's tensors (``shapes``: name -> shape) differ from the
    reference's (``expected``): missing, unexpected, of the wrong shape; None when they agree."""
    missing = expected.keys() - shapes.keys()
    unexpected = shapes.keys() - expected.keys()
    misshapen = sorted(name for name in expected.keys() & shapes.keys() if shapes[name] != expected[name])
    if not (missing or unexpected or misshapen):
        return None
    problems = [f"missing {describe_parameters(expected, missing)}"] if missing else []
    if unexpected:
        problems.append(f"unexpected {describe_parameters(shapes, unexpected)}")
    problems += [f"{name} has shape {shapes[name]}, expected {expected[name]}" for name in misshapen]
    return "; ".join(problems)


def build_with_reference_weights(student_class, args: tuple, kwargs: Mapping, reference: nn.Module, *, check: str,
                                 context: str, naming_hint: str, forbidden: Iterable = (), own_buffers: bool = False,
                                 assign: bool = False) -> nn.Module:
    """The student's module ``student_class(*args, **kwargs)``, built under the forbidden-call guard, with
    the names and shapes of the tensors of ``reference`` and copies of its weights loaded.

    Fails with the constructor call and what went wrong: the constructor raised, did not give an
    ``nn.Module``, or the tensors differ (then with ``naming_hint``, how to name the submodules). With
    ``own_buffers`` the parameters are compared and the student's module may hold buffers of its own,
    which keep their values; ``assign`` gives the module the weights' dtype (float64 cases).
    ``NotImplementedError`` (a blank exercise) passes through.
    """
    constructor = constructor_call(check, args, kwargs)
    try:
        with forbidden_calls(forbidden):
            module = student_class(*args, **kwargs)
    except (NotImplementedError, CheckFailed):
        raise
    except Exception as error:
        raise CheckFailed(failure_message(
            check, context, f"{constructor} raised {type(error).__name__}: {error}", None)) from error
    if not all(callable(getattr(module, method, None))
               for method in ("named_parameters", "state_dict", "load_state_dict", "eval")):
        fail(check, context, f"{constructor} returned a {type(module).__name__}, expected a torch.nn.Module "
                             f"(write `class {check}(nn.Module)` and call `super().__init__()` first).")
    tensors = (lambda m: dict(m.named_parameters())) if own_buffers else (lambda m: m.state_dict())
    shapes = {name: tuple(tensor.shape) for name, tensor in tensors(module).items()}
    problems = parameter_mismatch(shapes, {name: tuple(tensor.shape) for name, tensor in tensors(reference).items()})
    if problems:
        expected = {name: tuple(tensor.shape) for name, tensor in tensors(reference).items()}
        fail(check, context, f"the parameters of your {constructor} do not match the reference's, so its weights "
                             f"cannot be loaded into your module: {problems}. Expected: "
                             f"{describe_parameters(expected, expected)}.", naming_hint)
    try:
        module.load_state_dict({name: tensor.detach().clone() for name, tensor in reference.state_dict().items()},
                               strict=not own_buffers, assign=assign)
    except Exception as error:
        fail(check, context, f"loading the reference's weights into your {constructor} with load_state_dict "
                             f"raised {type(error).__name__}: {error}", naming_hint)
    return module


@dataclass(frozen=True)
class DropoutHints:
    """What to tell the student for each way a dropout in training mode can be wrong."""

    nothing_dropped: str  # the training-mode output equals the eval-mode one
    no_zeros: str  # it differs, but no entry is dropped (a dropout before a later step)
    not_scaled: str  # the kept entries equal the eval-mode ones: not divided by 1 - p
    kept_differ: str  # the kept entries are neither
    wrong_share: str  # a share of entries other than about p is dropped


def check_dropout(output: torch.Tensor, expected: torch.Tensor, p: float, *, check: str, context: str,
                  hints: DropoutHints,
                  on_kept_differ: Callable[[torch.Tensor, torch.Tensor], None] | None = None) -> None:
    """Fail unless ``output``, computed in training mode, is a dropout of probability ``p`` applied to
    ``expected`` (the eval-mode output): every entry either dropped (exactly 0) or ``expected / (1 - p)``,
    about a fraction ``p`` of them dropped (between p / 3 and 1.5 p + 5%).

    ``on_kept_differ(kept, kept_expected)`` may fail with a more precise message first when the kept
    entries are neither scaled nor equal.
    """
    if not isinstance(output, torch.Tensor) or output.shape != expected.shape:
        fail(check, context, describe_difference(output, expected) or "wrong output")
    dropped = output == 0
    if not dropped.any():
        if describe_difference(output, expected) is None:
            fail(check, context, "in training mode your output equals the eval-mode output: nothing was dropped.",
                 hints.nothing_dropped)
        fail(check, context, "in training mode no entry of your output was dropped (exactly 0).", hints.no_zeros)
    kept, kept_expected = output[~dropped], expected[~dropped]
    if describe_difference(kept, kept_expected / (1 - p)) is not None:
        if describe_difference(kept, kept_expected) is None:
            fail(check, context, "the entries you kept are not scaled by 1 / (1 - p).", hints.not_scaled)
        if on_kept_differ is not None:
            on_kept_differ(kept, kept_expected)
        fail(check, context, "in training mode the entries that were not dropped differ from the eval-mode "
                             "output / (1 - p).", hints.kept_differ)
    fraction = dropped.double().mean().item()
    if not p / 3 <= fraction <= 1.5 * p + 0.05:
        fail(check, context, f"{fraction:.0%} of the entries were dropped, expected about {p:.0%}.", hints.wrong_share)


#: Module outputs go through several matrix products (and, in a layer, two norms): float32 is
#: compared a little more loosely than the framework's default; float64 keeps the default.
MODULE_TOLERANCES = {**DEFAULT_TOLERANCES, torch.float32: Tolerance(atol=2e-5, rtol=2e-4)}

NONDETERMINISTIC_HINT = (
    "your module gives a different output each time it is called in evaluation mode: dropout must be "
    "off after `module.eval()`. Use `nn.Dropout` modules (they check `self.training`), or "
    "`F.dropout(x, p, training=self.training)`; `F.dropout(x, p)` alone drops in every mode."
)


# --------------------------------------------------------------------------------------------------
# Checking a module: the cases and the comparison
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModuleCase:
    """One test of a module: how to build it, its weights, and one call of its forward.

    ``init_args`` and ``init_kwargs`` go to the constructor of both the student's and the reference's
    class; ``weights`` is the reference's state dict, random (:func:`random_state`); ``forward`` holds
    the arguments of the call; ``dtype`` is the dtype of the weights and inputs; ``evaluate`` switches
    both modules to evaluation mode (the cases with dropout).
    """

    description: str
    init_args: tuple
    forward: Case
    weights: dict[str, torch.Tensor]
    init_kwargs: dict = field(default_factory=dict)
    dtype: torch.dtype = torch.float32
    evaluate: bool = False


def random_state(module: nn.Module, generator: torch.Generator, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Random weights for ``module``: matrices ~ N(0, 1/fan_in), biases ~ N(0, 0.1^2), the gains of the
    norms ~ N(1, 0.2^2) (so that a norm left out or put in the wrong place changes the output)."""
    state = {}
    for name, tensor in module.state_dict().items():
        if tensor.dim() == 2:
            values = random_normal(generator, *tensor.shape, scale=tensor.shape[1] ** -0.5)
        elif name.endswith("weight"):
            values = 1.0 + random_normal(generator, *tensor.shape, scale=0.2)
        else:
            values = random_normal(generator, *tensor.shape, scale=0.1)
        state[name] = values.to(dtype)
    return state


def compare_module(exercise: Exercise, student_class, case: ModuleCase, context: str, forbidden: Sequence) -> None:
    """The comparison of a module exercise (``nn.Module`` classes), on one case: build the reference's module
    with the case's weights and the student's with the same constructor arguments and the reference's
    weights, call both, and compare; raise :class:`CheckFailed` on a difference.

    ``exercise.mistakes``, given the case's reference module (with its weights), makes the known-wrong
    forward functions and their hints; ``exercise.naming_hint`` is shown when the student's parameters do
    not match the reference's; ``exercise.parameter_names`` names forward's arguments in the messages.
    """
    check, parameter_names = exercise.name, exercise.parameter_names
    reference_module = exercise.reference(*case.init_args, **case.init_kwargs)
    reference_module.load_state_dict({name: tensor.clone() for name, tensor in case.weights.items()}, assign=True)
    if case.evaluate:
        reference_module.eval()
    known_mistakes = exercise.mistakes(reference_module)
    # assign=True gives the module the weights' dtype (float64 cases); float32 weights are copied in.
    student_module = build_with_reference_weights(
        student_class, case.init_args, case.init_kwargs, reference_module, check=check, context=context,
        naming_hint=exercise.naming_hint, forbidden=forbidden, assign=case.dtype != torch.float32)
    if case.evaluate:
        student_module.eval()
    actual = run_student(student_module, case.forward, check=check, forbidden=forbidden,
                         parameter_names=parameter_names, mistakes=known_mistakes, context=context)
    args, kwargs = case.forward.fresh_arguments()
    with torch.no_grad():
        expected = reference_module(*args, **kwargs)
    difference = describe_difference(actual, expected, exercise.tolerance)
    if difference is None:
        return
    hint = None
    if case.evaluate:
        again = run_student(student_module, case.forward, check=check, forbidden=forbidden,
                            parameter_names=parameter_names, context=context)
        if describe_difference(again, actual, Tolerance(0.0, 0.0)) is not None:
            hint = NONDETERMINISTIC_HINT
    hint = hint or diagnose(actual, case.forward, known_mistakes, exercise.tolerance)
    raise CheckFailed(failure_message(check, context, difference, hint))
