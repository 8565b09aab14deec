"""The grader's bounds are in one place, and the threat model of ``instructors.md`` names real ones.

Every bound is defined in :mod:`autograder.bounds` (the modules that enforce one import it), and the
threat model's table names, for each threat, bounds of that module (every one of them under some
threat) and tests that exist.
"""

import ast
import dataclasses
import re
from pathlib import Path

from autograder import bounds

REPO = Path(__file__).resolve().parents[1]
BOUND_NAMES = {name for name in vars(bounds) if name.isupper()}


def _module_level_names(path: Path) -> set[str]:
    """The names a module binds at its top level by assignment, and the classes it defines."""
    names = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AnnAssign, ast.AugAssign)) else []
        names |= {leaf.id for target in targets for leaf in ast.walk(target) if isinstance(leaf, ast.Name)}
        if isinstance(node, ast.ClassDef):
            names.add(node.name)
    return names


def _threat_model() -> str:
    text = (REPO / "instructors.md").read_text()
    start = text.index("### Threat model")
    return text[start:text.index("\n### ", start + 1)]


def test_no_module_of_the_grader_but_bounds_defines_a_bound():
    defined_elsewhere = {}
    for path in sorted((REPO / "autograder").rglob("*.py")):
        if path.name == "bounds.py" and path.parent.name == "autograder":
            continue
        names = {name for name in _module_level_names(path)
                 if name.startswith("MAX_") or name in BOUND_NAMES or name == "Limits"}
        if names:
            defined_elsewhere[str(path.relative_to(REPO))] = sorted(names)
    assert defined_elsewhere == {}


#: Calls whose number argument cuts text or bytes, or waits: such a number is a bound, named in bounds.py.
TRUNCATING_CALLS = {"printable", "safe_str", "error_line", "_read_file", "shorten"}
SMALLEST_LITERAL_BOUND = 16  # a smaller number in a slice is an index (a digest's bytes), not a bound


def _inline_bounds(tree: ast.AST) -> list[str]:
    """The numbers typed where a bound belongs: the end of a slice that keeps a text's start or end
    (``[:N]``, ``[-N:]``; a range of fields ``[a:b]`` is not one), a truncating call's argument, a timeout."""
    def number(node) -> bool:
        return isinstance(node, ast.Constant) and type(node.value) in (int, float)

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Slice) and (node.lower is None) != (node.upper is None):
            end = node.lower or node.upper
            found += [f"slice [{ast.unparse(node)}]" for leaf in ast.walk(end)
                      if number(leaf) and abs(leaf.value) >= SMALLEST_LITERAL_BOUND][:1]
        elif isinstance(node, ast.Call):
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            arguments = [*node.args, *(keyword.value for keyword in node.keywords)] if name in TRUNCATING_CALLS else []
            arguments += [keyword.value for keyword in node.keywords if keyword.arg == "timeout"]
            found += [f"{ast.unparse(node)}" for argument in arguments if number(argument)][:1]
    return found


def test_no_module_of_the_grader_types_a_bound_inline():
    """A number that cuts a message or waits for a process is a bound: bounds.py names it."""
    inline = {}
    for path in sorted((REPO / "autograder").rglob("*.py")):
        if path == REPO / "autograder" / "bounds.py" or "checks" in path.relative_to(REPO / "autograder").parts:
            continue  # checks/ holds test cases' data, not bounds
        found = _inline_bounds(ast.parse(path.read_text(), str(path)))
        if found:
            inline[str(path.relative_to(REPO))] = found
    assert inline == {}


def test_the_inline_bound_finder_finds_what_it_looks_for():
    tree = ast.parse("a = text[:500]\nb = printable(x, 300)\nc = p.wait(timeout=10)\n"
                     "d = text[:MAX_NAME_CHARS]\ne = fields[11:15]\nf = printable(x, MAX_NAME_CHARS)\n"
                     "g = log[-3000:]\nh = digest[:8]\n")
    assert sorted(_inline_bounds(tree)) == ["p.wait(timeout=10)", "printable(x, 300)", "slice [-3000:]", "slice [:500]"]

def test_every_test_the_threat_model_names_exists():
    named = re.findall(r"`tests/(test_\w+\.py)::(test_\w+)`", _threat_model())
    assert len(named) > 20
    missing = []
    for file, function in sorted(set(named)):
        path = REPO / "tests" / file
        defined = {node.name for node in ast.parse(path.read_text()).body
                   if isinstance(node, ast.FunctionDef)} if path.exists() else set()
        if function not in defined:
            missing.append(f"tests/{file}::{function}")
    assert missing == []


def test_the_threat_model_names_every_bound_and_only_bounds():
    table = [line for line in _threat_model().splitlines() if line.startswith("| ") and "`tests/" in line]
    named = {name for line in table for name in re.findall(r"`([A-Z][A-Za-z_.]+)`", line.split(" | ")[1])}
    limits = {f"Limits.{field.name}" for field in dataclasses.fields(bounds.Limits)}
    assert named == BOUND_NAMES | limits
