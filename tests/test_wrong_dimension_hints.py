"""Mistakes of dimension, the most common ones in these exercises: a sum, a maximum, a mean, a softmax or
a transpose along the wrong axis. For every exercise that takes a `dim` or works on several axes, the
solution with one axis changed, as a student changes it, gets a hint that names the axis:

- in the visible test cell of the student's notebook (run as the student runs it), and
- in the hidden check, on the cases of a grading run's seed: what the feedback shows (the end-to-end
  run of a wrong-axis softmax through the grader is in ``tests/test_grading.py``).
"""

import re

import pytest

from autograder.checks.framework import CheckFailed, use_run_seed
from test_visible_hints import MUTATION_TESTS, run_visible_test, student_code, student_namespace

RUN_SEED = 27

#: (chapter, exercise, [(text of the solution cell, what the student wrote instead)], part of the hint)
WRONG_DIMENSIONS = [
    ("01_attention", "softmax", [("exponentials.sum(dim=dim", "exponentials.sum(dim=0")],
     "sum to 1 along another axis than `dim`"),
    ("01_attention", "softmax", [("x.amax(dim=dim", "x.amax(dim=0")], "not along axis 0"),
    ("01_attention", "softmax", [("x.amax(dim=dim", "x.amax(dim=0"),
                                 ("exponentials.sum(dim=dim", "exponentials.sum(dim=0")],
     "sum to 1 along axis 0"),
    ("01_attention", "additive_score", [("unsqueeze(-2)", "unsqueeze(-4)"), ("unsqueeze(-3)", "unsqueeze(-2)"),
                                        ("unsqueeze(-4)", "unsqueeze(-3)")], "(..., N, M)"),
    ("01_attention", "scaled_dot_product_attention", [("softmax(scores, dim=-1)", "softmax(scores, dim=-2)")],
     "normalize over the keys"),
    ("01_attention", "scaled_dot_product_attention", [("k.transpose(-2, -1)", "k.transpose(0, 1)")],
     "transpose the last two axes of k"),
    ("01_attention", "causal_mask", [(".tril()", ".triu()")], "the lower triangle"),
    ("01_attention", "padding_mask", [("[:, None, None, :]", "[:, None, :, None]")], "along the keys"),
    ("02_transformer", "MultiHeadAttention",
     [("t.reshape(batch, t.shape[1], self.num_heads, self.head_size).transpose(1, 2)",
       "t.reshape(batch, self.num_heads, t.shape[1], self.head_size)"),
      ("heads.transpose(1, 2).reshape(", "heads.reshape(")], "without the transposes"),
    ("03_positional", "sinusoidal_positional_encoding", [("return encoding", "return encoding.T")],
     "yours is transposed"),
    ("03_positional", "alibi_bias",
     [("torch.arange(n, device=device)[:, None] - torch.arange(m, device=device)[None, :]",
       "torch.arange(m, device=device)[None, :] - torch.arange(n, device=device)[:, None]")], "you used j - i"),
    ("03_positional", "apply_rope", [("*_, seq_len, head_dim = x.shape",
                                      "seq_len, head_dim = x.shape[0], x.shape[-1]")],
     "not x.shape[0]"),
    ("04_normalization", "layer_norm", [("h.mean(dim=-1", "h.mean(dim=0"), ("pow(2).mean(dim=-1", "pow(2).mean(dim=0")],
     "not over the batch (dim 0)"),
    ("04_normalization", "layer_norm", [("pow(2).mean(dim=-1", "pow(2).mean(dim=0")], "the same axis as the mean"),
    ("04_normalization", "rms_norm", [("mean(dim=-1", "mean(dim=0")], "not over the batch (dim 0)"),
    ("05_efficient_attention", "sliding_window_mask",
     [("positions[:, None] - positions[None, :]", "positions[None, :] - positions[:, None]")], "looks back"),
    ("05_efficient_attention", "repeat_kv", [("dim=-3", "dim=1")], "Use dim=-3"),
    ("05_efficient_attention", "repeat_kv", [("dim=-3", "dim=-2")], "not the keys (dim -2)"),
    ("05_efficient_attention", "flash_attention", [("scores.amax(dim=-1)", "scores.amax(dim=(-2, -1))[..., None]")],
     "one running maximum per query"),
    ("05_efficient_attention", "linear_attention", [("phi_k.sum(dim=-2, keepdim=True)",
                                                     "phi_k.sum(dim=-1, keepdim=True)")],
     "yours sums over the features"),
    ("06_bert", "BertEmbeddings", [("torch.arange(input_ids.shape[1], device=input_ids.device)",
                                    "torch.arange(input_ids.shape[0], device=input_ids.device)[:, None]")],
     "yours count the sequences of the batch"),
    ("07_pretraining", "mlm_loss", [("torch.log_softmax(logits[chosen], dim=-1)",
                                     "torch.log_softmax(logits[chosen], dim=0)")],
     "not over the predicted positions"),
    ("07_pretraining", "mlm_loss", [("torch.log_softmax(logits[chosen], dim=-1)",
                                     "torch.log_softmax(logits, dim=0)[chosen]")],
     "not over the first axis"),
    ("09_distillation", "softmax_with_temperature", [("dim=-1", "dim=0")], "normalise along dim=-1"),
    ("09_distillation", "softmax_with_temperature",
     [("return torch.softmax(logits / temperature, dim=-1)",
       "e = torch.exp(logits / temperature - (logits / temperature).amax(dim=-1, keepdim=True))\n"
       "    return e / e.sum(dim=0, keepdim=True)")], "sum to 1 along another axis than the classes"),
    ("09_distillation", "distillation_loss", [("F.log_softmax(student_logits / T, dim=-1)",
                                               "F.log_softmax(student_logits / T, dim=0)")],
     "yours are over the batch"),
    ("10_tasks", "tagging_accuracy", [("logits.argmax(dim=-1)", "logits.argmax(dim=1)")],
     "the classes are the last axis of logits"),
    ("10_tasks", "best_span", [("start_logits.unsqueeze(-1) + end_logits.unsqueeze(-2)",
                                "start_logits.unsqueeze(-2) + end_logits.unsqueeze(-1)")], "the starts index the rows"),
    ("10_tasks", "best_span", [("positions[None, :] - positions[:, None]", "positions[:, None] - positions[None, :]")],
     "a span ends at or after its start"),
    ("10_tasks", "best_span", [(".flatten(-2).argmax(dim=-1)", ".flatten(-2).argmax(dim=0)")],
     "return one span per sequence"),
    ("11_gpt", "top_p_filter", [("softmax(dim=-1)", "softmax(dim=0)")], "not over the rows of the batch (dim 0)"),
    ("11_gpt", "attend_with_cache", [("dim=-2)", "dim=1)")], "not along the heads (dim 1)"),
    ("11_gpt", "attend_with_cache", [("dim=-2)", "dim=-1)")], "not along the head size (dim -1)"),
]


def solution_source(chapter: str, exercise: str) -> str:
    """The solution cell of ``exercise`` in the solution notebook of ``chapter``."""
    return next(source for source in student_code(chapter, {}) if f" {exercise}(" in source.split("\n", 1)[0])


def wrong_source(chapter: str, exercise: str, edits: list[tuple[str, str]]) -> str:
    """The solution of ``exercise`` with ``edits`` made, each text found in it (or in the previous edit's result)."""
    source = solution_source(chapter, exercise)
    for old, new in edits:
        assert old in source, f"{old!r} is not in the solution of {exercise}"
        source = source.replace(old, new)
    return source


def notebook_with(chapter: str, exercise: str, source: str) -> dict:
    """The student's notebook of ``chapter`` with ``source`` run in place of the solution of ``exercise``."""
    namespace = dict(student_namespace(chapter))
    exec(compile(source, f"<wrong {exercise}>", "exec"), namespace)
    return namespace


CASES = [pytest.param(chapter, exercise, edits, hint, id=f"{exercise}-{number}")
         for number, (chapter, exercise, edits, hint) in enumerate(WRONG_DIMENSIONS)]


@pytest.mark.parametrize("chapter, exercise, edits, hint", CASES)
def test_the_visible_test_names_the_wrong_dimension(chapter, exercise, edits, hint):
    namespace = notebook_with(chapter, exercise, wrong_source(chapter, exercise, edits))
    message = run_visible_test(chapter, exercise, namespace)
    assert hint in message, f"expected the hint {hint!r}, the visible test said:\n{message}"


@pytest.mark.parametrize("chapter, exercise, edits, hint", CASES)
def test_the_hidden_check_names_the_wrong_dimension(chapter, exercise, edits, hint):
    namespace = notebook_with(chapter, exercise, wrong_source(chapter, exercise, edits))
    check = getattr(MUTATION_TESTS[chapter].checks, f"check_{exercise}")
    with use_run_seed(RUN_SEED), pytest.raises(CheckFailed) as failure:
        check(namespace[exercise])
    assert hint in str(failure.value), str(failure.value)


#: code that chooses an axis: a `dim` or `keepdim` argument, a transpose, an unsqueeze, an index with None, a size
AXIS_CODE = re.compile(r"\bdim\s*=|\bkeepdim\b|\.transpose\(|\.unsqueeze\(|\.T\b|\[[^\]\n]*\bNone\b|\.shape\[")


def solved_code(chapter: str, exercise: str) -> str:
    """The code between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` of the exercise's solution cell."""
    blocks = re.findall(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", solution_source(chapter, exercise), re.DOTALL)
    return "".join(blocks)


def test_every_exercise_that_works_on_axes_has_a_wrong_dimension_mistake():
    """Derived from the solutions, not listed: every exercise whose solution chooses an axis."""
    covered = {(chapter, exercise) for chapter, exercise, _, _ in WRONG_DIMENSIONS}
    on_axes = {(chapter, exercise) for chapter, tests in MUTATION_TESTS.items() for exercise in tests.references
               if AXIS_CODE.search(solved_code(chapter, exercise))}
    assert {("01_attention", "softmax"), ("04_normalization", "layer_norm"),
            ("02_transformer", "MultiHeadAttention")} <= on_axes
    assert on_axes <= covered, sorted(on_axes - covered)
