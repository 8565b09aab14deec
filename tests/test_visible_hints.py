"""Hints where students work: the visible test cell of every exercise of chapters 01-10 runs the
exercise's check first (``visible_check``), so a typical mistake shows its hint in the student's notebook.

Each mistake is put into the solution in place of the right function: every mistake of the check's
catalogue (the ``mistakes`` of its record, :class:`~autograder.checks.framework.Exercise`) and every
typical wrong implementation of the chapter's mutation tests (``tests/test_<module>_checks.py``). The
visible test cell then runs as in the student's notebook, after the chapter's solution cells and the
setup code the test cells use, and must fail with the mistake's hint. A correct function whose earlier
exercise is wrong passes its visible test.

Both registries, :data:`MUTATION_TESTS` and :data:`CATALOGUES`, are derived from the records of the
modules of checks and from the test classes, and
:func:`test_every_exercise_of_every_chapter_is_declared_and_tested` fails for an exercise left out.
"""

import ast
import functools
import html
import importlib
from pathlib import Path

import nbformat
import pytest
import torch

import test_transformer_checks
from autograder.checks import exercises_by_chapter
from autograder.checks.framework import Exercise, Mistake, allowed
from autograder.core.chapters import load_chapters
from autograder.core.course import grade_id, is_graded_test, is_solution, python_source
from autograder.core.steps import ContextStep
from checks_helpers import MutationTests, solution_cells

ROOT = Path(__file__).resolve().parents[1]


def mutation_test_classes() -> dict[str, type[MutationTests]]:
    """chapter -> the mutation tests of its checks: the :class:`MutationTests` class of each
    ``tests/test_<module>_checks.py``, under the chapter its module of checks declares (``CHAPTER``)."""
    found = {}
    for path in sorted(Path(__file__).parent.glob("test_*_checks.py")):
        module = importlib.import_module(path.stem)
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, MutationTests) and value.__module__ == module.__name__:
                found[value.checks.CHAPTER] = value
    return dict(sorted(found.items()))


def catalogues_its_own_implementations(exercise: Exercise) -> bool:
    """Whether the catalogue of ``exercise`` holds wrong implementations of the exercise itself (a function
    exercise's), which can take the solution's place in the notebook; a class exercise's mistakes are made
    per case from the case's reference module."""
    return not isinstance(exercise.reference, type) and isinstance(exercise.mistakes, (tuple, list))


#: chapter -> the mutation tests of its checks (their ``mutants``)
MUTATION_TESTS = mutation_test_classes()

#: (chapter, exercise) -> the catalogue of its check (``Mistake`` records), for the checks whose catalogue holds
#: wrong implementations of the exercise itself; from the records of the modules of checks
CATALOGUES = {(chapter, exercise.name): exercise.mistakes
              for chapter, (_, exercises) in exercises_by_chapter().items()
              for exercise in exercises if catalogues_its_own_implementations(exercise) and exercise.mistakes}

#: The mistakes of issue 13 in chapter 01, written as a student writes them: (exercise, code, hint)
STUDENT_MISTAKES = [
    ("softmax", "def softmax(x, dim=-1):\n    e = torch.exp(x)\n    return e / e.sum(dim=dim, keepdim=True)",
     "Subtract the maximum along `dim`"),
    ("softmax", "def softmax(x, dim=-1):\n    e = torch.exp(x - x.amax(dim=0, keepdim=True))\n"
                "    return e / e.sum(dim=0, keepdim=True)", "sum to 1 along axis 0"),
    ("softmax", "def softmax(x, dim=-1):\n    e = torch.exp(x - x.amax(dim=dim, keepdim=True))\n"
                "    return e / e.sum(dim=dim, keepdim=True)", "must give zeros, not NaN"),
    ("scaled_dot_product_attention",
     "def scaled_dot_product_attention(q, k, v, mask=None):\n    scores = q @ k.transpose(-2, -1)\n"
     "    if mask is not None:\n        scores = scores.masked_fill(~mask, float('-inf'))\n"
     "    weights = softmax(scores)\n    return weights @ v, weights", "divide the scores by sqrt(d_k)"),
    ("scaled_dot_product_attention",
     "def scaled_dot_product_attention(q, k, v, mask=None):\n    scores = q @ k.transpose(-2, -1) / q.shape[-1]\n"
     "    if mask is not None:\n        scores = scores.masked_fill(~mask, float('-inf'))\n"
     "    weights = softmax(scores)\n    return weights @ v, weights", "not by d_k"),
    ("scaled_dot_product_attention",
     "def scaled_dot_product_attention(q, k, v, mask=None):\n"
     "    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
     "    if mask is not None:\n        scores = scores.masked_fill(mask, float('-inf'))\n"
     "    weights = softmax(scores)\n    return weights @ v, weights", "True in the mask means 'may attend'"),
    ("padding_mask", "def padding_mask(attention_mask):\n    return (attention_mask == 0)[:, None, None, :]",
     "1 marks a real token"),
    ("additive_score", "def additive_score(q, k, w_q, w_k, v):\n"
                       "    return torch.tanh((q @ w_q.T).unsqueeze(-2) + (k @ w_k.T).unsqueeze(-3)).sum(-1)",
     "not a plain sum"),
    ("causal_mask", "def causal_mask(n, m=None, device=None):\n"
                    "    return torch.triu(torch.ones(n, n if m is None else m, dtype=torch.bool, device=device), "
                    "diagonal=1)",
     "True above the diagonal"),
]


@functools.cache
def chapters():
    return load_chapters(ROOT)


@functools.cache
def student_namespace(chapter: str) -> dict:
    """The names a student's notebook holds when the test cells run: the solution cells, and the setup
    code the test cells use (the instructor code the grader runs too; no figure, no training)."""
    namespace = {"__name__": "__main__"}
    for source in student_code(chapter, {}):
        exec(compile(source, f"<{chapter}>", "exec"), namespace)
    return namespace


def student_code(chapter: str, replacements: dict[str, str]) -> list[str]:
    """The code cells of the solution notebook of ``chapter`` but its test cells: the solution cells
    (those of ``replacements``, exercise -> code, replaced), and of the other cells the imports and the
    statements the test cells use (the setup), so that no figure and no training runs."""
    needed = {step.source for step in chapters()[chapter].context if isinstance(step, ContextStep)}
    sources = []
    for cell in nbformat.read(ROOT / "solutions" / chapter / f"{chapter}.ipynb", as_version=4).cells:
        if cell.cell_type != "code" or is_graded_test(cell):
            continue
        if is_solution(cell):
            sources.append(replacements.get(grade_id(cell), cell.source))
        else:
            source = python_source(cell.source)
            sources.append("\n".join(ast.get_source_segment(source, node) for node in ast.parse(source).body
                                      if isinstance(node, (ast.Import, ast.ImportFrom))
                                      or ast.get_source_segment(source, node) in needed))
    return sources


def run_visible_test(chapter: str, exercise: str, namespace: dict) -> str:
    """Run the visible test cell of ``exercise`` in ``namespace`` (a student's notebook), as the student
    does; return the message it fails with ("" when it passes)."""
    namespace = dict(namespace)
    test = chapters()[chapter].test(f"test_{exercise}")
    try:
        exec(compile(python_source(test.released), f"<test_{exercise}>", "exec"), namespace)
    except AssertionError as error:
        return str(error) or "an AssertionError without a message"
    return ""


def with_exercise(chapter: str, exercise: str, implementation) -> dict:
    """The student's notebook of ``chapter`` with ``implementation`` in place of the solution's ``exercise``."""
    return {**student_namespace(chapter), exercise: implementation}


def all_mistakes():
    """(chapter, exercise, wrong implementation, hint) of every mutation test's mutant and every catalogued
    wrong implementation (a symptom has none: the mutants that show it test it), as pytest params."""
    for chapter, tests in MUTATION_TESTS.items():
        for exercise, mutants in tests.mutants.items():
            for number, (wrong, hint) in enumerate(mutants):
                yield pytest.param(chapter, exercise, wrong, hint, id=f"{chapter}-{exercise}-mutant{number}")
    for (chapter, exercise), catalogue in CATALOGUES.items():
        for number, mistake in enumerate(catalogue):
            if isinstance(mistake, Mistake):
                # what the catalogue's implementation calls (the reference, a built-in) is allowed: the hint is tested
                yield pytest.param(chapter, exercise, allowed(mistake.implementation), mistake.hint,
                                   id=f"{chapter}-{exercise}-catalogue{number}")


def test_every_exercise_of_every_chapter_is_declared_and_tested():
    """Every exercise of every chapter has a record in the module of checks that declares the chapter, a
    ``check_<name>``, a mutation-test class with at least 3 mutants, and (a function exercise with a
    catalogue) its catalogue in CATALOGUES: a chapter or an exercise left out fails here."""
    declared = exercises_by_chapter()
    graded = {name: chapter for name, chapter in chapters().items() if chapter.exercises}
    assert set(declared) == set(graded), "each chapter with exercises needs a module of checks with CHAPTER = it"
    assert set(MUTATION_TESTS) == set(graded), "each chapter needs a MutationTests class in tests/test_*_checks.py"
    for name, chapter in graded.items():
        module, records = declared[name]
        assert sorted(record.name for record in records) == sorted(chapter.exercises), (
            f"{name}: the records of {module.__name__} are not the chapter's exercises")
        tests = MUTATION_TESTS[name]
        assert tests.checks is module, name
        assert sorted(tests.references) == sorted(chapter.exercises), f"{name}: references of {tests.__name__}"
        for record in records:
            check = getattr(module, f"check_{record.name}", None)
            assert callable(check) and check.__name__ == f"check_{record.name}", \
                f"{module.__name__}.check_{record.name}"
            assert record.summary.strip() and check.__doc__.startswith(("Compare", "Check")), (
                f"{module.__name__}.{record.name}: its summary says what the check compares")
            assert len(tests.mutants.get(record.name, [])) >= 3, f"{name}: {record.name} has fewer than 3 mutants"
            if catalogues_its_own_implementations(record) and record.mistakes:
                assert CATALOGUES[(name, record.name)] is record.mistakes


@pytest.mark.parametrize("chapter, exercise, wrong, hint", list(all_mistakes()))
def test_visible_test_shows_the_hint_of_the_mistake(chapter, exercise, wrong, hint):
    message = run_visible_test(chapter, exercise, with_exercise(chapter, exercise, wrong))
    assert hint in message, f"expected the hint {hint!r}, the visible test said:\n{message}"


@pytest.mark.parametrize("exercise, code, hint", STUDENT_MISTAKES,
                         ids=[f"{e}-{i}" for i, (e, _, _) in enumerate(STUDENT_MISTAKES)])
def test_visible_test_shows_the_hint_of_the_mistakes_of_issue_13(exercise, code, hint):
    namespace = dict(student_namespace("01_attention"))
    exec(code, namespace)
    message = run_visible_test("01_attention", exercise, namespace)
    assert hint in message, f"expected the hint {hint!r}, the visible test said:\n{message}"


@pytest.mark.parametrize("chapter", MUTATION_TESTS)
def test_the_solution_passes_its_visible_tests(chapter):
    for exercise in MUTATION_TESTS[chapter].references:
        assert run_visible_test(chapter, exercise, student_namespace(chapter)) == "", exercise


@pytest.mark.parametrize("chapter, exercise, dependency, wrong", [
    ("01_attention", "scaled_dot_product_attention", "softmax", lambda x, dim=-1: torch.softmax(x, dim=0)),
    ("02_transformer", "EncoderLayer", "FeedForward", test_transformer_checks.FFNActivationOnInput),
    ("02_transformer", "EncoderLayer", "MultiHeadAttention",
     test_transformer_checks.TestTransformerChecks.mutants["MultiHeadAttention"][0][0]),
    ("03_positional", "alibi_bias", "alibi_slopes",
     lambda num_heads, *, device=None: torch.ones(num_heads, device=device)),
])
def test_a_correct_function_passes_its_visible_test_when_an_earlier_exercise_is_wrong(chapter, exercise,
                                                                                       dependency, wrong):
    namespace = with_exercise(chapter, dependency, wrong)
    assert run_visible_test(chapter, dependency, namespace) != "", "the earlier exercise should be wrong"
    exec(dict(solution_cells(ROOT / "solutions" / chapter / f"{chapter}.ipynb"))[exercise], namespace)  # reads it
    assert run_visible_test(chapter, exercise, namespace) == ""


# --------------------------------------------------------------------------------------------------
# The same hints in the grader's feedback and results.json
#
# Grading runs the same released test cell in the student's process, so a mistake fails there with the
# message tested above; what is left to test is that grading carries that message, its hint and the
# failing line into results.json, the summary and the feedback page. One graded class does: chapter
# 01's mistakes of issue 13 and one mistake written into each other chapter's solution.
# --------------------------------------------------------------------------------------------------

#: One mistake of each other chapter, as a student writes it: (chapter, exercise, solution's code, wrong code, hint)
CHAPTER_MISTAKES = [
    ("02_transformer", "FeedForward", "return self.linear2(self.dropout(self.activation(self.linear1(x))))",
     "return self.linear2(self.dropout(self.linear1(x)))", "apply the activation between the two linear layers"),
    ("03_positional", "apply_rope",
     "rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)  # (..., N, D/2, 2)\n"
     "    return rotated.flatten(-2).to(x.dtype)",
     "return torch.cat([even * cos - odd * sin, even * sin + odd * cos], dim=-1).to(x.dtype)",
     "put each rotated pair back in place"),
    ("04_normalization", "rms_norm", "torch.sqrt(h.pow(2).mean(dim=-1, keepdim=True) + eps)",
     "(torch.sqrt(h.pow(2).mean(dim=-1, keepdim=True)) + eps)", "eps goes inside the square root"),
    ("05_efficient_attention", "repeat_kv", "return x.repeat_interleave(n_rep, dim=-3)",
     "return torch.cat([x] * n_rep, dim=-3)", "query head h uses key/value head h // n_rep"),
    ("06_bert", "count_parameters", "layer = attention + feed_forward + 2 * 2 * H",
     "layer = attention + feed_forward + 2 * H", "a post-norm encoder layer has TWO LayerNorms"),
    ("07_pretraining", "mlm_loss", "return -picked.mean()", "return -picked.sum()",
     "take the mean over the labelled positions, not the sum"),
    ("08_finetuning", "train_epoch",
     "loss.backward()\n        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], "
     "max_grad_norm)\n        optimizer.step()",
     "optimizer.step()\n        loss.backward()\n        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() "
     "if p.requires_grad], max_grad_norm)", "a step before backward uses the zeroed ones"),
    ("09_distillation", "distillation_loss", "soft = T**2 * F.kl_div(", "soft = F.kl_div(",
     "multiply the soft term by T^2"),
    ("10_tasks", "best_span", "band = (span_length >= 0) & (span_length < max_answer_length)",
     "band = span_length < max_answer_length", "a span ends at or after its start"),
    ("11_gpt", "causal_lm_loss", "shifted_logits = logits[:, :-1].flatten(0, 1).float()",
     "shifted_logits = logits[:, 1:].flatten(0, 1).float()", "the logits at position i predict the NEXT token"),
]


def solution_code(chapter: str, exercise: str) -> str:
    return dict(solution_cells(ROOT / "solutions" / chapter / f"{chapter}.ipynb"))[exercise]


def wrong_solution(chapter: str, exercise: str, right: str, wrong: str) -> str:
    """The solution cell of ``exercise`` with the code ``right`` replaced by ``wrong``."""
    code = solution_code(chapter, exercise)
    assert code.count(right) == 1, f"{chapter}: the solution of {exercise} no longer holds {right!r}"
    return code.replace(right, wrong)


@pytest.mark.parametrize("chapter, exercise, right, wrong, hint", CHAPTER_MISTAKES,
                         ids=[m[0] for m in CHAPTER_MISTAKES])
def test_visible_test_shows_the_hint_of_a_mistake_written_into_the_solution(chapter, exercise, right, wrong, hint):
    namespace = dict(student_namespace(chapter))
    exec(wrong_solution(chapter, exercise, right, wrong), namespace)
    message = run_visible_test(chapter, exercise, namespace)
    assert hint in message, f"expected the hint {hint!r}, the visible test said:\n{message}"


def submission(chapter: str, replacements: dict[str, str]):
    """The solution notebook of ``chapter`` as a student submits it: its code cells those of
    :func:`student_code` (no figure, no training), its test cells the released ones."""
    notebook = nbformat.read(ROOT / "solutions" / chapter / f"{chapter}.ipynb", as_version=4)
    code = iter(student_code(chapter, replacements))
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.source = chapters()[chapter].test(grade_id(cell)).released if is_graded_test(cell) else next(code)
    return notebook


#: student -> (chapter, exercise, hint): chapter 01's mistakes of issue 13, then one of each other chapter
GRADED_MISTAKES = {
    **{f"attention{number}": ("01_attention", exercise, hint)
       for number, (exercise, _, hint) in enumerate(STUDENT_MISTAKES)},
    **{f"chapter{chapter[:2]}": (chapter, exercise, hint) for chapter, exercise, _, _, hint in CHAPTER_MISTAKES},
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """One grading run of a class whose students each made one mistake (:data:`GRADED_MISTAKES`)."""
    from autograder.grade import grade
    from autograder.run.sandbox import Limits

    submissions = tmp_path_factory.mktemp("hints")
    codes = {f"attention{number}": {exercise: code} for number, (exercise, code, _) in enumerate(STUDENT_MISTAKES)}
    codes |= {f"chapter{chapter[:2]}": {exercise: wrong_solution(chapter, exercise, right, wrong)}
              for chapter, exercise, right, wrong, _ in CHAPTER_MISTAKES}
    for student, (chapter, _, _) in GRADED_MISTAKES.items():
        folder = submissions / student / chapter
        folder.mkdir(parents=True)
        nbformat.write(submission(chapter, codes[student]), folder / f"{chapter}.ipynb")
    out = tmp_path_factory.mktemp("hints-out")
    grade(submissions, out, jobs=2, limits=Limits(cell_timeout=300), course_root=ROOT, seed=7)
    return out


@pytest.mark.parametrize("student", GRADED_MISTAKES)
def test_grading_results_and_feedback_show_the_hint_and_the_failing_line(graded, student):
    from grading_helpers import feedback_pages, records

    chapter, exercise, hint = GRADED_MISTAKES[student]
    results = {grade_id: test for (who, graded_chapter, grade_id), test in records(graded).items()
               if (who, graded_chapter) == (student, chapter)}
    test = results[f"test_{exercise}"]
    assert test.status == "failed" and hint in test.message, test
    assert test.message.startswith("line ") \
        and f"visible_check(check_{exercise}, {exercise})" in test.message.splitlines()[0]
    assert hint in test.headline  # the summary table's line
    page = html.unescape(feedback_pages(graded)[student])
    assert hint in page and f"print(visible_check(check_{exercise}, {exercise}))" in page
    others = [result for grade_id, result in results.items() if grade_id != f"test_{exercise}"]
    assert all(result.status == "passed" for result in others), others


def test_a_notebook_shows_a_stub_in_one_line_and_a_failure_as_its_message():
    """IPython shows ``_render_traceback_()`` in place of the frames: the book's blank exercises read
    "softmax is not written yet", and a wrong answer reads as the check's message and hint."""
    from autograder.checks import visible_check
    from autograder.checks.attention import check_softmax
    from autograder.checks.framework import CheckFailed

    def softmax(x, dim=-1):
        raise NotImplementedError()

    with pytest.raises(NotImplementedError) as stub:
        visible_check(check_softmax, softmax)
    assert stub.value._render_traceback_() == [
        "NotImplementedError: softmax is not written yet: write it in its cell above, in place of its stub"]

    def softmax(x, dim=-1):  # noqa: F811 -- the student's second try: no shift by the maximum
        return x.exp() / x.exp().sum(dim, keepdim=True)

    with pytest.raises(CheckFailed) as wrong:
        visible_check(check_softmax, softmax)
    assert wrong.value._render_traceback_() == [f"CheckFailed: {wrong.value}"] and "softmax" in str(wrong.value)


def test_a_derived_check_runs_its_record_and_its_threads_are_restored():
    """check_<name> is the record's check (forbid included), named after it, and a module of checks has no
    check_ of a name it does not declare; a record with torch_threads runs on them and restores torch's."""
    from autograder.checks import efficient
    from autograder.checks.framework import CheckFailed
    from bertlab.attention import repeat_kv as reference

    with pytest.raises(AttributeError, match="has no attribute 'check_nothing'"):
        efficient.check_nothing
    assert efficient.REPEAT_KV.torch_threads == 1
    threads = torch.get_num_threads()
    seen = []

    def repeat_kv(x, n_rep):
        seen.append(torch.get_num_threads())
        return reference(x, n_rep)

    with pytest.raises(CheckFailed, match="implement this yourself"):
        efficient.check_repeat_kv(reference)  # the reference is forbidden
    assert efficient.check_repeat_kv(repeat_kv, forbid=False).startswith("repeat_kv: all ")
    assert set(seen) == {1} and torch.get_num_threads() == threads

