"""Shared machinery of the checks that the chapters' hidden tests call.

A check compares a student's function with the reference implementation in ``bertlab`` on inputs
drawn at grading time, and either returns a short summary or raises :class:`CheckFailed` with a
message a student can act on: what differs, where, by how much, and, when the wrong output matches a
known mistake, a hint about that mistake. Its parts, a module each, each built on the ones above it:

- ``inputs``: :class:`Case`, :func:`generator_for`, :func:`random_normal`, :func:`random_integer`,
  :func:`random_choice`: the inputs of a check, drawn from a generator seeded by the check's name and,
  when the grader runs the check, by the grading run's seed (:func:`use_run_seed`), which only the
  grader knows: a student's code cannot compute the cases ahead of time, and a regrade with the same
  seed meets the same inputs. Every hidden case depends on that seed: its values, and also its sizes
  and integer arguments, which are drawn too.
- ``comparison``: :func:`describe_difference`, :func:`assert_close`, :class:`Mistake`,
  :class:`Symptom`: the comparison and its diagnosis; a check lists known-wrong implementations (forgot
  1/sqrt(d_k), softmax over the wrong axis, ...) and the hint shown when the student's output equals
  one of theirs, and signs read from the output alone (probabilities that sum to 1 along another axis
  than ``dim``).
- ``forbidden``: :func:`forbidden_calls`, :func:`allowed`: while the student's code runs, calling the
  reference or a built-in that does the exercise's job fails with "implement this yourself". Torch
  functions are caught with a ``TorchFunctionMode`` and Python functions by their code object with a
  profile hook, so aliases captured before the check (``from torch.nn.functional import softmax as
  f``) are caught. This is a hint for honest mistakes, not a security measure: the rule runs in the
  student's own process, where the student's code can switch it off; the grader flags copies of the
  reference for the instructor instead (:mod:`autograder.run.reference_copies`).
- ``dependencies``: :func:`with_dependencies` runs the student's function with the reference versions
  of the earlier exercises it builds on, so one mistake is not punished twice; :func:`visible_check`
  runs a check on its fixed, visible cases (:func:`visible_cases`), for the visible test cells: the
  student sees the check's message and hint in the notebook.
- ``exercise``: an :class:`Exercise` puts them together, the record of one exercise's check
  (reference, cases, mistakes, forbidden functions, dependencies, tolerance), whose ``check`` runs the
  loop over the cases and compares each with :func:`compare_output`, or with the exercise's own
  ``compare`` of one case (the modules' is :func:`autograder.checks.modules.compare_module`).

The checks modules declare their exercises as records and import what they use from here.
"""

from autograder.checks.framework.comparison import (
    DEFAULT_TOLERANCES,
    CheckFailed,
    Mistake,
    Symptom,
    Tolerance,
    assert_close,
    describe_difference,
    diagnose,
    fail,
    failure_message,
    format_inputs,
    hint_of_first,
    mistakes_told_apart,
    normalized_along_another_axis,
    sums_to_one_along,
)
from autograder.checks.framework.dependencies import (
    call_and_backward,
    visible_check,
    with_dependencies,
)
from autograder.checks.framework.exercise import (
    Exercise,
    check_against_reference,
    check_function,
    check_functions,
    compare_output,
    describe_mismatch,
    parameter_names_of,
    run_student,
)
from autograder.checks.framework.forbidden import (
    allowed,
    describe_callable,
    forbidden_calls,
    forbidden_in_force,
    implement_yourself_message,
)
from autograder.checks.framework.inputs import (
    Case,
    generator_for,
    kind_of_cases,
    random_choice,
    random_integer,
    random_normal,
    same_value,
    use_run_seed,
    visible_cases,
)

__all__ = [
    "Case", "generator_for", "kind_of_cases", "random_choice", "random_integer", "random_normal", "same_value",
    "use_run_seed", "visible_cases", "DEFAULT_TOLERANCES", "CheckFailed", "Mistake", "Symptom", "Tolerance",
    "assert_close", "describe_difference", "diagnose", "fail", "failure_message", "format_inputs", "hint_of_first",
    "mistakes_told_apart", "normalized_along_another_axis", "sums_to_one_along", "allowed", "describe_callable",
    "forbidden_calls", "forbidden_in_force", "implement_yourself_message", "call_and_backward", "visible_check",
    "with_dependencies", "Exercise", "check_against_reference", "check_function", "check_functions", "compare_output",
    "describe_mismatch",
    "parameter_names_of", "run_student",
]
