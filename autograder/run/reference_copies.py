"""Exercises whose code is the reference's, flagged for the instructor.

The forbidden-call rule of the checks runs in the student's process, where the student's code can
switch it off; so the grader also reads the submission's source, which the student's code cannot
change, and flags an exercise (:func:`find_copies`) when

- its definition (the last ``def`` or ``class`` of its name) is the reference's (the ``bertlab``
  function or class of the same name) once docstrings, annotations and every name are normalized,
  for references of at least ``MIN_COPY_NODES`` syntax nodes (a one-line formula such as
  ``causal_mask`` has few ways to be written, and an honest solution may well be the reference's);
- its definition, or a function or class of the notebook that the definition uses, refers to the
  reference (through any import, alias or ``getattr`` with a constant name), or the exercise's name
  is bound to the reference after its definition (``softmax = bertlab.attention.softmax``);
- its definition, or a helper it uses, builds code at run time (``exec``, ``eval``, ``compile``,
  ``inspect.getsource``, ``__code__``, ``types.FunctionType``, ...), or the notebook does so at its
  top level (which could define any exercise).

Each flag states its certainty (:class:`autograder.core.results.Certainty`). Certain: the
exercise's code, or a helper it uses, names the reference, its name is bound to it, or the notebook
builds code at run time from something that names it (``exec(inspect.getsource(reference))``): the
code that ran is the reference's. Suspected: the code is the reference's up to names (the solution
notebooks are too, so an honest student who writes the specified algorithm plainly may match), or
the exercise or the notebook builds code at run time without naming the reference, or a code cell was too
large to read (more than ``MAX_COPY_READ_CELL_CHARS``, or past the ``MAX_COPY_READ_CHARS`` that IPython's
transformation may read of a notebook: :func:`ipython_lines`; :mod:`autograder.bounds`): it could define any
exercise. What the grade
does with each is the instructor's copy policy (:mod:`autograder.grade`, ``--copies``). What static
reading cannot see (a reference reached through strings built at run time and an unflagged library)
is not flagged; the threat model in ``instructors.md`` says so.
"""

import ast
import functools
import importlib
import inspect
import pkgutil
import re
import sys
import textwrap
import types

from IPython.core.inputtransformer2 import TRANSFORM_LOOP_LIMIT

from autograder.bounds import MAX_COPY_READ_CELL_CHARS, MAX_COPY_READ_CHARS, MAX_REBOUND_SOURCE_CHARS
from autograder.core import Certainty, ReferenceCopy, python_source

DYNAMIC_NAMES = {"exec", "eval", "compile", "__import__"}
DYNAMIC_ATTRIBUTES = {"getsource", "getsourcelines", "getsourcefile", "__code__", "FunctionType", "CodeType",
                      "reload", "run_path", "run_module", "__globals__"}
CODE_LOADERS = {"marshal", "pickle", "dill", "cloudpickle"}  # their load and loads build code too
MIN_COPY_NODES = 50  # syntax nodes in a reference's body (docstring aside) for its shape to be a sign of a copy
# A line IPython's transformation may rewrite: an escape first (%magic, !shell, ?obj, ,f, ;f, /f), an assignment of
# a magic or a shell command (x = %time f(), x = !ls), a help request last (obj?).
IPYTHON_SYNTAX = re.compile(r"^\s*[!%?,;/]|=\s*[!%]|\?\s*$")


@functools.cache
def reference_modules() -> tuple[types.ModuleType, ...]:
    """Every module of ``bertlab``, imported (but ``__main__``, which runs the command line)."""
    import bertlab

    return tuple(importlib.import_module(f"bertlab.{info.name}") for info in pkgutil.iter_modules(bertlab.__path__)
                 if not info.name.startswith("_"))


@functools.cache
def references(exercise: str) -> tuple[object, ...]:
    """The ``bertlab`` functions and classes named ``exercise``, in the modules that define them."""
    found = []
    for module in reference_modules():
        value = getattr(module, exercise, None)
        if (inspect.isfunction(value) or inspect.isclass(value)) and value.__module__ == module.__name__:
            found.append(value)
    return tuple(found)


@functools.cache
def _normalized_reference(reference) -> str | None:
    """The reference's shape (:func:`normalized`); None when it is too short to tell a copy by."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(reference)))
    except (OSError, TypeError, SyntaxError):
        return None
    definition = tree.body[0]
    body = [statement for statement in definition.body if not _is_docstring(statement)]
    if sum(1 for statement in body for _ in ast.walk(statement)) < MIN_COPY_NODES:
        return None
    return normalized(definition)


def _is_docstring(statement: ast.stmt) -> bool:
    return (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
            and isinstance(statement.value.value, str))


class _Normalizer(ast.NodeTransformer):
    """Every name becomes its order of appearance; docstrings and annotations go."""

    def __init__(self):
        self.names: dict[str, str] = {}

    def rename(self, name: str) -> str:
        return self.names.setdefault(name, f"_{len(self.names)}")

    def visit_Name(self, node):
        node.id = self.rename(node.id)
        return node

    def visit_arg(self, node):
        node.arg, node.annotation = self.rename(node.arg), None
        return node

    def visit_alias(self, node):
        node.asname = self.rename(node.asname or node.name)
        return node

    def _definition(self, node):
        node.name = self.rename(node.name)
        if getattr(node, "returns", None) is not None:
            node.returns = None
        node.body = [statement for statement in node.body if not _is_docstring(statement)] or [ast.Pass()]
        return self.generic_visit(node)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _definition

    def visit_AnnAssign(self, node):
        return self.visit(ast.Assign(targets=[node.target], value=node.value or ast.Constant(None)))


def normalized(node: ast.AST) -> str:
    """A definition's shape: the same for two definitions that differ only in names, docstrings,
    annotations, comments and layout."""
    return ast.dump(_Normalizer().visit(ast.parse(ast.unparse(node)).body[0]), annotate_fields=False)


def _dotted(node: ast.AST, bindings: dict[str, str]) -> str | None:
    """The dotted path an expression names: ``A.softmax`` after ``import bertlab.attention as A``,
    ``getattr(A, "softmax")``; None for anything else."""
    if isinstance(node, ast.Name):
        return bindings.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, bindings)
        return f"{base}.{node.attr}" if base else None
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
        base = _dotted(node.args[0], bindings)
        return f"{base}.{node.args[1].value}" if base else None
    return None


def _bertlab_object(path: str | None):
    """The object of the grader's own ``bertlab`` a dotted path names (read, never called). Only modules
    already imported are looked in (:func:`references` imports those that define exercises): a name
    in a submission never imports a module (``bertlab.__main__`` would run the command line)."""
    if not path or not path.startswith("bertlab"):
        return None
    parts = path.split(".")
    for split in range(len(parts), 0, -1):
        found = sys.modules.get(".".join(parts[:split]))
        if found is None:
            continue
        for part in parts[split:]:
            found = inspect.getattr_static(found, part, None)
            if found is None:
                return None
        return found
    return None


def ipython_lines(source: str) -> int:
    """How many lines of a cell's ``source`` may be IPython's syntax (:data:`IPYTHON_SYNTAX`): IPython's
    transformation reads the whole cell again after each (500 such lines in a cell of 90,000 characters took it
    over two minutes), and gives up on a cell of ``TRANSFORM_LOOP_LIMIT`` (500)."""
    return sum(1 for line in source.splitlines() if IPYTHON_SYNTAX.search(line))


class _Notebook:
    """The top-level definitions and bindings of a submission's code cells."""

    def __init__(self, sources: list[str]):
        self.definitions: dict[str, ast.AST] = {}
        self.bindings: dict[str, str] = {}  # name -> dotted path, from imports and aliases
        self.rebound: dict[str, ast.AST] = {}  # name -> the last assignment or import of it after its def
        self.dynamic_top_level: list[tuple[int, ast.stmt]] = []  # (cell, statement) building code at run time
        self.unread: list[int] = []  # cells too large to read (MAX_COPY_READ_CELL_CHARS, MAX_COPY_READ_CHARS)
        self.left = MAX_COPY_READ_CHARS  # of what IPython's transformation may read
        for number, source in enumerate(sources, start=1):
            if not self._affordable(number, source):
                continue
            try:
                tree = ast.parse(python_source(source))
            except (SyntaxError, ValueError, RuntimeError, RecursionError, MemoryError):
                # Not Python, or more than IPython's transformation can take (600 shell commands
                # make it give up with a RuntimeError): nothing to read there.
                continue
            for node in tree.body:
                self._read(node, number)

    def _affordable(self, number: int, source: str) -> bool:
        """Whether the cell ``number`` may be read within the bounds (what IPython's transformation reads of it is
        then taken from what is left); one too large is recorded in ``unread``, one that IPython gives up on is
        not (it gives up in the student's process too: the cell defines nothing)."""
        lines = ipython_lines(source) if len(source) <= min(MAX_COPY_READ_CELL_CHARS, self.left) else 0
        if lines >= TRANSFORM_LOOP_LIMIT:
            return False
        cost = len(source) * (1 + lines)
        if len(source) > MAX_COPY_READ_CELL_CHARS or cost > self.left:
            self.unread.append(number)
            return False
        self.left -= cost
        return True

    def _read(self, node: ast.stmt, cell: int) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.definitions[node.name] = node
            self.rebound.pop(node.name, None)
            self.bindings.pop(node.name, None)
            return
        if _builds_code(node):
            self.dynamic_top_level.append((cell, node))
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.asname or alias.name.split(".")[0]
                self.bindings[name] = alias.name if alias.asname else alias.name.split(".")[0]
                self.rebound[name] = node
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                self.bindings[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                self.rebound[alias.asname or alias.name] = node
        elif isinstance(node, ast.Assign):
            path = _dotted(node.value, self.bindings)
            for target in node.targets:
                if isinstance(target, ast.Name):
                    self.rebound[target.id] = node
                    if path:
                        self.bindings[target.id] = path
                    else:
                        self.bindings.pop(target.id, None)

    def reachable(self, name: str) -> list[ast.AST]:
        """The definition of ``name`` and the notebook's definitions it uses, transitively."""
        found, todo = {}, [name]
        while todo:
            current = todo.pop()
            if current in found or current not in self.definitions:
                continue
            found[current] = self.definitions[current]
            todo += [node.id for node in ast.walk(found[current]) if isinstance(node, ast.Name)]
        return list(found.values())


def _builds_code(node: ast.AST) -> bool:
    for inner in ast.walk(node):
        if isinstance(inner, ast.Name) and inner.id in DYNAMIC_NAMES:
            return True
        if isinstance(inner, ast.Attribute) and (inner.attr in DYNAMIC_ATTRIBUTES or (
                inner.attr in ("load", "loads") and isinstance(inner.value, ast.Name)
                and inner.value.id in CODE_LOADERS)):
            return True
    return False


def _reaches(nodes: list[ast.AST], bindings: dict[str, str], targets: tuple) -> str | None:
    """The dotted path of the first expression in ``nodes`` that names one of ``targets``."""
    for node in nodes:
        for inner in ast.walk(node):
            if isinstance(inner, (ast.Name, ast.Attribute, ast.Call)):
                path = _dotted(inner, bindings)
                if path and any(_bertlab_object(path) is target for target in targets):
                    return path
    return None


def find_copies(sources: list[str], exercises) -> list[ReferenceCopy]:
    """The exercises of a submission (its code cells' ``sources``) that may be the reference's code."""
    notebook = _Notebook(sources)
    copies = []
    for exercise in exercises:
        targets = references(exercise)
        if targets:
            reasons = _reasons(notebook, exercise, targets)
            if reasons:
                certainty = Certainty.CERTAIN if any(certain for certain, _ in reasons) else Certainty.SUSPECTED
                copies.append(ReferenceCopy(exercise, "; ".join(reason for _, reason in reasons), certainty))
    return copies


def _reasons(notebook: _Notebook, exercise: str, targets: tuple) -> list[tuple[bool, str]]:
    """Why ``exercise`` may be the reference's code: (certain, reason) pairs, none when it is not."""
    reasons = []
    definition = notebook.definitions.get(exercise)
    reachable = notebook.reachable(exercise)
    shapes = {_normalized_reference(target) for target in targets} - {None}
    if definition is not None and normalized(definition) in shapes:
        reasons.append((False, "its code is the reference's, up to names, docstrings and annotations"))
    path = _reaches(reachable, notebook.bindings, targets)
    if path:
        reasons.append((True, f"it uses {path}, the reference"))
    rebound = notebook.rebound.get(exercise)
    if rebound is not None and _reaches([rebound], notebook.bindings, targets):
        reasons.append((True,
                        f"its name is bound to the reference ({ast.unparse(rebound)[:MAX_REBOUND_SOURCE_CHARS]})"))
    if any(_builds_code(node) for node in reachable):
        reasons.append((False, "it builds code at run time (exec, compile, getsource, __code__, ...)"))
    building = [node for _, node in notebook.dynamic_top_level]
    source = _reaches(building, notebook.bindings, targets)
    if source:
        reasons.append((True, f"the notebook builds code at run time from {source}, the reference"))
    elif building:
        cells = ", ".join(str(cell) for cell, _ in notebook.dynamic_top_level[:5])
        reasons.append((False, f"the notebook builds code at run time at the top level of code cell(s) {cells}"))
    if notebook.unread:
        cells = ", ".join(str(cell) for cell in notebook.unread[:5])
        reasons.append((False, f"code cell(s) {cells} of the notebook, which could define it, are too large to read "
                               f"(more than {MAX_COPY_READ_CELL_CHARS:,} characters, or past the "
                               f"{MAX_COPY_READ_CHARS:,} read of a notebook)"))
    return reasons
