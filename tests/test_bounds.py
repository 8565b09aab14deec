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
