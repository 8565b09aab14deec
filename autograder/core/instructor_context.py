"""The instructor code that a chapter's test cells need, found by reading the instructor's notebook.

The grader runs the test cells itself, in a namespace of its own (:mod:`autograder.run.runner`): the
names a test cell uses are the exercises (the student's objects, as handles) and what the
instructor's notebook defines before it (``import torch``, a helper ``attention_state_from_torch``, a
``tokenizer`` trained in a demonstration cell). :func:`plan` selects, statement by statement, the
top-level code of the instructor's notebook that defines those names, and the code that these
statements need in turn (a backward slice), so that the grader runs neither the figures nor the
trainings the tests do not use. A statement that calls a method of a needed object
(``model.eval()``) or changes one (``model.x = 1``) counts as defining it.
"""

import ast
import builtins

from autograder.core.course import grade_id, is_graded_test, is_solution, python_source
from autograder.core.steps import ContextStep, PlanStep, TestStep

BUILTIN_NAMES = frozenset(dir(builtins))
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp, ast.SetComp,
          ast.DictComp, ast.GeneratorExp)


def _stored(node: ast.AST) -> set[str]:
    """Every name a node binds anywhere inside it (parameters, assignments, imports, loop targets)."""
    names = set()
    for inner in ast.walk(node):
        if isinstance(inner, ast.Name) and isinstance(inner.ctx, (ast.Store, ast.Del)):
            names.add(inner.id)
        elif isinstance(inner, ast.arg):
            names.add(inner.arg)
        elif isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(inner.name)
        elif isinstance(inner, (ast.Import, ast.ImportFrom)):
            names |= _imported(inner)
        elif isinstance(inner, ast.ExceptHandler) and inner.name:
            names.add(inner.name)
    return names


def _imported(node: ast.Import | ast.ImportFrom) -> set[str]:
    return {alias.asname or alias.name.split(".")[0] for alias in node.names if alias.name != "*"}


def loaded(node: ast.AST) -> set[str]:
    """The names a statement reads from its enclosing (module) scope: inside a function, lambda,
    class or comprehension, the names it binds itself are its own."""
    found = set()

    def visit(current: ast.AST, local: frozenset[str]) -> None:
        if isinstance(current, ast.Name) and isinstance(current.ctx, ast.Load) and current.id not in local:
            found.add(current.id)
        for child in ast.iter_child_nodes(current):
            if isinstance(child, SCOPES):
                visit(child, local | _stored(child))
            else:
                visit(child, local)

    visit(node, frozenset(_stored(node)) if isinstance(node, SCOPES) else frozenset())
    return found


def bound(node: ast.AST) -> set[str]:
    """The names a top-level statement binds in the module (a compound statement: in its bodies)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return _imported(node)
    if isinstance(node, ast.stmt) and not isinstance(node, SCOPES):  # a compound statement: its parts
        names = set()
        for child in ast.iter_child_nodes(node):
            names |= bound(child)
        return names
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
        return {node.id}
    if (isinstance(node, (ast.expr, ast.withitem, ast.excepthandler, ast.comprehension))
            and not isinstance(node, SCOPES)):
        names = {node.name} if isinstance(node, ast.ExceptHandler) and node.name else set()
        for child in ast.iter_child_nodes(node):
            names |= bound(child)
        return names
    return set()


def _root(node: ast.AST) -> str | None:
    """``x`` of ``x.a.b``, ``x[i].a``, ``x.f(...).g``."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def changed(node: ast.stmt) -> set[str]:
    """The objects a top-level statement changes: ``x.a = ...``, ``x[i] = ...``, ``x.method(...)`` (of
    which those bound by an import are left out by :func:`plan`: calling ``torch.manual_seed`` does
    not make a statement one that defines ``torch``)."""
    roots = set()
    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        roots |= {_root(target) for target in targets if isinstance(target, (ast.Attribute, ast.Subscript))}
    elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute):
        roots.add(_root(node.value.func))
    return roots - {None}


def free_names(statements: list[ast.stmt]) -> set[str]:
    """The names statements read before they bind them (builtins left out), following the bodies of
    compound statements in order."""
    free, bound_so_far = set(), set()

    def read(node) -> None:
        free.update(loaded(node) - bound_so_far)

    def run(body: list[ast.stmt]) -> None:
        for statement in body:
            if isinstance(statement, (ast.For, ast.AsyncFor)):
                read(statement.iter)
                bound_so_far.update(bound(statement.target))
                run(statement.body + statement.orelse)
            elif isinstance(statement, (ast.With, ast.AsyncWith)):
                for item in statement.items:
                    read(item.context_expr)
                    bound_so_far.update(bound(item.optional_vars) if item.optional_vars else ())
                run(statement.body)
            elif isinstance(statement, (ast.If, ast.While)):
                read(statement.test)
                run(statement.body + statement.orelse)
            elif isinstance(statement, ast.Try):
                run(statement.body)
                for handler in statement.handlers:
                    if handler.type:
                        read(handler.type)
                    if handler.name:
                        bound_so_far.add(handler.name)
                    run(handler.body)
                run(statement.orelse + statement.finalbody)
            else:
                read(statement)
                bound_so_far.update(bound(statement))

    run(statements)
    return free - BUILTIN_NAMES


def plan(notebook, exercises) -> tuple[PlanStep, ...]:
    """The instructor's notebook as the grader replays it: a :class:`ContextStep` for each top-level
    statement the test cells need, and a :class:`TestStep` for each graded test cell, in order.

    Solution cells are left out (the exercises are the student's). Raises SyntaxError when a code
    cell does not parse.
    """
    exercises = set(exercises)
    cells = []  # (grade_id of a test, None, None) or (None, source, its statements)
    needed = set()
    for cell in notebook.cells:
        if cell.cell_type != "code" or is_solution(cell):
            continue
        source = python_source(cell.source)
        tree = ast.parse(source)
        if is_graded_test(cell):
            needed |= free_names(tree.body)
            cells.append((grade_id(cell), None, None))
        else:
            cells.append((None, source, tree.body))
    needed -= exercises
    modules = {name for _, _, statements in cells for node in statements or []
               if isinstance(node, (ast.Import, ast.ImportFrom)) for name in bound(node)}
    chosen = set()
    for _, _, statements in reversed(cells):
        for node in reversed(statements or []):
            if (bound(node) | (changed(node) - modules)) & needed:
                chosen.add(id(node))
                needed |= free_names([node]) - exercises
    steps = []
    for test, source, statements in cells:
        if test is not None:
            steps.append(TestStep(test))
        steps += [ContextStep(ast.get_source_segment(source, node)) for node in statements or [] if id(node) in chosen]
    return tuple(steps)
