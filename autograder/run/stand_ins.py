"""The graded chapter's references out of the student's reach: stand-ins in the sandbox's course packages.

While a chapter is graded, the student process sees ``bertlab`` with that chapter's references
withheld (:func:`withhold`): in their place are *stand-ins* that call the student's own function or
class of the same name, from the notebook's namespace. So ``bertlab`` code that builds on an exercise
(a layer that calls ``softmax``) runs the student's version, as the chapter would with the student's
code in place of the reference. The files bound into the sandbox are the stand-ins' (and the
compiled copies, ``__pycache__``, are hidden), so reading ``bertlab``'s source from disk finds no
reference either; the topic modules of ``autograder.checks``, whose records hold some references,
cannot be imported there at all: the checks run in the grader.

A stand-in reached from the student's own function of the same name (the reference called from the
exercise, in whatever disguise: a list, a lambda, ``functools.partial``, ``sys.modules``, a module
written to ``/tmp``) raises :class:`ReferenceUnavailable`, which the grader grades as ``failed`` with
the cause ``reference unavailable``. Nothing the student's code does in its process undoes this: the
reference's code is not there to be found.

A check sometimes needs a reference in the student process: a dependency (the reference ``softmax``
in place of the student's, to check ``scaled_dot_product_attention``) or an object of a reference
class (a reference model handed to the student's ``train_epoch``). Such a reference is *released*
(:meth:`Withholding.released_source`) only once the test of its own exercise has run: its module's
source travels with the request, the references still withheld replaced by stand-ins as on disk.

This module is imported in the sandbox by the stand-ins (:func:`call_own`); what builds them runs in
the grader only.
"""

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

STAND_IN_IMPORT = "from autograder.run.stand_ins import call_own as _call_own  # noqa: E402 (a stand-in's)\n"
CHECKS_ONLY = ("raise ImportError('{module} is part of the grader: the checks run in the grader, not in the process '\n"
               "                  'that runs your notebook')\n")


class ReferenceUnavailable(RuntimeError):
    """The student's code reached a withheld reference from the exercise the reference is for."""


# --------------------------------------------------------------------------------------------------
# In the sandbox: what a stand-in does
# --------------------------------------------------------------------------------------------------

_entered: set[str] = set()  # the stand-ins being called, by "module.name"


def call_own(module: str, name: str, args: tuple, kwargs: dict):
    """A stand-in's body: call the student's own ``name`` (the notebook's) in place of ``module.name``.

    Raises :class:`ReferenceUnavailable` when the notebook defines no ``name``, or when this stand-in
    is reached again while the student's ``name`` runs: the student's code tried to use the reference.
    """
    qualified = f"{module}.{name}"
    own = vars(sys.modules["__main__"]).get(name) if "__main__" in sys.modules else None
    if own is None:
        raise ReferenceUnavailable(
            f"{qualified} is an exercise of the chapter being graded: while your notebook is graded, bertlab's "
            f"{name} is your own, and your notebook does not define {name}")
    if qualified in _entered:
        raise ReferenceUnavailable(
            f"your {name} used bertlab's {name}, the reference of this exercise: it is not available while your "
            f"notebook is graded (there, bertlab's {name} is your own). Write {name} yourself.")
    _entered.add(qualified)
    try:
        return own(*args, **kwargs)
    finally:
        _entered.discard(qualified)


# --------------------------------------------------------------------------------------------------
# In the grader: which references are withheld, and the files that show the stand-ins
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Withheld:
    """A reference the student process does not get: a top-level function or class of a module."""

    exercise: str  # the exercise it is the reference of
    module: str  # e.g. "bertlab.attention"
    name: str  # its name in that module


@dataclass(frozen=True)
class Cover:
    """A file of the course's packages, and the file the sandbox shows in its place."""

    target: Path
    source: Path


@dataclass(frozen=True)
class Withholding:
    """The references of one chapter that the student process does not get, and the files that show
    their stand-ins (and hide the checks) in the sandbox."""

    references: tuple[Withheld, ...] = ()
    covers: tuple[Cover, ...] = ()

    def withheld(self, value) -> Withheld | None:
        """The record of ``value`` when it is one of the withheld references, or a method of one."""
        module, name = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
        if not callable(value) or not isinstance(module, str) or not isinstance(name, str):
            return None
        return next((reference for reference in self.references if reference.module == module
                     and (name == reference.name or name.startswith(f"{reference.name}."))), None)

    def released_source(self, module: str, released: frozenset[str]) -> str:
        """The source of ``module`` as the student process gets it with the exercises ``released``:
        the references of the other exercises replaced by stand-ins."""
        kept = {reference.name for reference in self.references
                if reference.module == module and reference.exercise not in released}
        return stand_in_source(module, _source_file(module).read_text(encoding="utf-8"), kept)


def stand_in_source(module: str, source: str, names: set[str]) -> str:
    """``source`` (the module ``module``) with its top-level functions and classes ``names`` replaced
    by stand-ins that call the student's own (:func:`call_own`)."""
    if not names:
        return source
    lines = source.splitlines(keepends=True)
    tree = ast.parse(source)
    replaced = []  # (first line, last line, replacement), 0-based
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in names:
            first = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)]) - 1
            replaced.append((first, node.end_lineno - 1, _stand_in(module, node.name, isinstance(node, ast.ClassDef))))
    missing = names - {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    if missing:
        raise ValueError(f"{module} defines no top-level function or class {', '.join(sorted(missing))}")
    for first, last, text in sorted(replaced, reverse=True):
        lines[first:last + 1] = [text]
    opening = next((index for index, node in enumerate(tree.body)
                    if not (_is_docstring(node) or isinstance(node, ast.ImportFrom) and node.module == "__future__")),
                   len(tree.body))
    at = tree.body[opening].lineno - 1 if opening < len(tree.body) else len(lines)
    # the lines before `at` are untouched: replacements start at a definition, which comes later
    return "".join([*lines[:at], STAND_IN_IMPORT, *lines[at:]])


def _stand_in(module: str, name: str, is_class: bool) -> str:
    call = f"_call_own({module!r}, {name!r}, args, kwargs)"
    doc = f'"""Withheld while this chapter is graded: your own {name} stands here."""'
    if is_class:
        return f"class {name}:\n    {doc}\n\n    def __new__(cls, *args, **kwargs):\n        return {call}\n"
    return f"def {name}(*args, **kwargs):\n    {doc}\n    return {call}\n"


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _source_file(module: str) -> Path:
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        raise ValueError(f"the source of {module} cannot be found")
    return Path(spec.origin).resolve()


def chapter_references(chapter_name: str, exercises: tuple[str, ...]) -> tuple[Withheld, ...]:
    """The references of a chapter's exercises: the ``bertlab`` functions and classes of their names
    (as :mod:`autograder.run.reference_copies` finds them) and the reference of each exercise's check."""
    from autograder.checks import exercises_by_chapter
    from autograder.run.reference_copies import references

    records = {record.name: record.reference for record in exercises_by_chapter().get(chapter_name, (None, ()))[1]}
    found = []
    for exercise in exercises:
        for value in dict.fromkeys([*references(exercise), *([records[exercise]] if exercise in records else [])]):
            module, name = getattr(value, "__module__", None), getattr(value, "__qualname__", "")
            if isinstance(module, str) and name.isidentifier():  # a top-level function or class
                found.append(Withheld(exercise, module, name))
    return tuple(found)


def withhold(chapter_name: str, exercises: tuple[str, ...], folder: Path) -> Withholding:
    """The withholding of one chapter, its stand-in files written under ``folder``: each module that
    defines one of the chapter's references, with stand-ins in their place, and each topic module of
    ``autograder.checks``, as a module that cannot be imported."""
    from autograder.checks import exercises_by_chapter

    withheld = chapter_references(chapter_name, exercises)
    checks = [module.__name__ for module, _ in exercises_by_chapter().values()]
    covers = []
    folder.mkdir(parents=True, exist_ok=True)
    for module in sorted({reference.module for reference in withheld} | set(checks)):
        if module in checks:
            text = CHECKS_ONLY.format(module=module)
        else:
            text = Withholding(withheld).released_source(module, frozenset())
        source = folder / f"{module}.py"
        source.write_text(text, encoding="utf-8")
        covers.append(Cover(_source_file(module), source))
    return Withholding(withheld, tuple(covers))
