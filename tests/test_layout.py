"""The grader's layout (CONTRIBUTING.md, "Layout of the grader"): rooms by step, above a shared core.

The import edges between the grader's modules (``autograder/`` but ``checks/``, whose checks every step
may call) are read from their source with ``ast``, function-level imports included, a package's
``__init__`` counting as a module. They form no cycle; no room imports a room of a later step; a room
whose ``__init__`` is its interface is imported through it; and there are fewer of them than
:data:`MAX_EDGES`, so that a new import across rooms is a choice (a name the room's interface exposes,
or a definition moved down), not a habit.

Also: every Python file that git tracks has lines of at most :data:`MAX_LINE_LENGTH` characters.
"""

import ast
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "autograder"

#: The rooms, by the modules they hold (a module belongs to the room of its longest prefix here).
ROOMS = {
    "core": ("autograder.bounds", "autograder.text", "autograder.core"),
    "collect": ("autograder.collect",),
    "run": ("autograder.run",),
    "report": ("autograder.report",),
    "publish": ("autograder.publish",),
    "orchestration": ("autograder", "autograder.__main__", "autograder.cli", "autograder.grade", "autograder.job",
                      "autograder.cluster", "autograder.cluster_preload", "autograder.worker_preload"),
}
#: The steps, in their order: each room imports its own and those of the steps before it, never a later one.
STEPS = ("core", "collect", "run", "report", "orchestration")
#: Rooms beside the steps: what each may import besides itself; only the orchestration imports them.
BESIDE = {"publish": ("core",)}
#: Packages whose ``__init__`` is their interface: from outside, a module imports the package, not its modules.
#: (``autograder.run`` and ``autograder.publish`` have none: their ``__init__`` imports nothing, the one for the
#: student process, see below, the other for the book's extension, which imports its translations only.)
INTERFACES = ("autograder.core", "autograder.collect", "autograder.report")
#: 135 before the rooms (issue 39); 107 before the figure labels (issue 41: translations and myst_blocks); 109 before
#: the light preload of a LocalCluster's workers (issue 40: autograder.cluster_preload imports autograder.cluster late).
MAX_EDGES = 110
#: What the student process imports of the grader, and the modules that may come with it (standard library
#: only, and nothing of the grader's side): its modules' top-level imports, and their packages' __init__.
STUDENT_PROCESS = ("autograder.run.student_side", "autograder.run.stand_ins")
STUDENT_PROCESS_MAY_IMPORT = {"autograder", "autograder.bounds", "autograder.text", "autograder.run",
                              "autograder.run.student_side", "autograder.run.wire", "autograder.run.stand_ins"}


def allowed_imports() -> dict[str, set[str]]:
    """Each room, and the rooms it may import."""
    allowed = {room: {room, *STEPS[:index]} for index, room in enumerate(STEPS)}
    for room, below in BESIDE.items():
        allowed[room] = {room, *below}
        allowed["orchestration"].add(room)
    return allowed


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """The grader's modules, by dotted name (a package by its own name), but those of ``checks/``."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if "checks" in parts:
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imported(tree: ast.AST, package: str, top_level_only: bool = False) -> set[str]:
    """The dotted names an import of ``tree`` (a module of ``package``) may name: a module, or a name in one."""
    names = set()
    for node in tree.body if top_level_only else ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names |= {module} | {f"{module}.{alias.name}" for alias in node.names}
    return names


def edges(found: dict[str, Path] | None = None, top_level_only: bool = False) -> set[tuple[str, str]]:
    """(importer, imported) for each import of one grader module by another: the longest module a name
    starts with; none to ``checks`` or to the ``autograder`` package itself."""
    found = modules() if found is None else found
    result = set()
    for name, path in found.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for target in imported(ast.parse(path.read_text(), str(path)), package, top_level_only):
            while target and target not in found:
                target = target.rpartition(".")[0]
            if target and target != name and not target.endswith("checks") and target != "autograder":
                result.add((name, target))
    return result


def room_of(module: str) -> str | None:
    """The room that holds ``module``: that of its longest prefix in :data:`ROOMS`."""
    holding = [(len(prefix), room) for room, prefixes in ROOMS.items() for prefix in prefixes
               if module == prefix or (prefix != "autograder" and module.startswith(f"{prefix}."))]
    return max(holding)[1] if holding else None


def cycles(graph: set[tuple[str, str]]) -> list[list[str]]:
    """The import cycles of ``graph``: its strongly connected components of more than one module."""
    following: dict[str, set[str]] = {}
    for importer, target in graph:
        following.setdefault(importer, set()).add(target)
        following.setdefault(target, set())
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in following[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(following):
        if module not in index:
            visit(module)
    return found


def forbidden(graph: set[tuple[str, str]]) -> list[str]:
    """The imports of ``graph`` from one room into a room it may not import (a later step's, or a room
    beside the steps, from anywhere but the orchestration)."""
    allowed = allowed_imports()
    return sorted(f"{importer} ({room_of(importer)}) imports {target} ({room_of(target)})"
                  for importer, target in graph if room_of(target) not in allowed[room_of(importer)])


def test_every_module_of_the_grader_is_in_one_room():
    assert set(ROOMS) == set(STEPS) | set(BESIDE)
    assert [name for name in modules() if room_of(name) is None] == []


def test_the_grader_imports_no_module_in_a_cycle():
    found = cycles(edges())
    assert not found, found


def test_no_room_imports_a_later_step_or_a_room_beside_the_steps():
    found = forbidden(edges())
    assert not found, "\n".join(found)


def test_a_room_with_an_interface_is_entered_through_it():
    def within(module: str, package: str) -> bool:
        return module == package or module.startswith(f"{package}.")

    found = sorted(f"{importer} imports {target}, not {package}" for importer, target in edges()
                   for package in INTERFACES if within(target, package) and target != package
                   and not within(importer, package))
    assert not found, "\n".join(found)


def test_the_rooms_keep_the_imports_between_modules_few():
    found = edges()
    assert len(found) < MAX_EDGES, f"{len(found)} imports between the grader's modules"


def test_the_student_process_imports_nothing_of_the_graders_side():
    """The student process imports these modules of the grader (``autograder.run``'s ``__init__`` imports
    nothing for them); with them come their top-level imports, and the ``__init__`` of their packages."""
    found = modules()
    seen, todo = set(), list(STUDENT_PROCESS)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:end]) for end in range(1, len(parts))]  # its packages' __init__
        path = found[name]
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for target in imported(ast.parse(path.read_text()), package, top_level_only=True):
            while target and target not in found:
                target = target.rpartition(".")[0]
            if target:
                todo.append(target)
    assert seen <= STUDENT_PROCESS_MAY_IMPORT, sorted(seen - STUDENT_PROCESS_MAY_IMPORT)


def test_the_checks_find_a_cycle_and_an_import_of_a_later_step(tmp_path):
    """The checks above can fail: on a package with a cycle, and with an import of a later step."""
    package = tmp_path / "autograder"
    sources = {"__init__.py": "", "text.py": "from autograder.core.results import Status\n",
               "core/__init__.py": "", "core/results.py": "from autograder import text\n",
               "run/__init__.py": "", "run/runner.py": "def run():\n    from autograder.report import render\n",
               "report/__init__.py": "from autograder.report.page import render\n",
               "report/page.py": "from autograder.core.results import Status\n"}
    for name, source in sources.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(source)
    graph = edges(modules(package))
    assert sorted(cycles(graph)) == [["autograder.core.results", "autograder.text"]]
    assert forbidden(graph) == ["autograder.run.runner (run) imports autograder.report (report)"]
    assert ("autograder.run.runner", "autograder.report") not in edges(modules(package), top_level_only=True)


#: The longest line of a Python file, in characters (the style guide's limit).
MAX_LINE_LENGTH = 120


def tracked_python_files(root: Path = REPO) -> list[Path]:
    """The Python files that git tracks in ``root``, relative to it."""
    listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "*.py"], capture_output=True, check=True)
    return [Path(name) for name in listed.stdout.decode().split("\0") if name]


def long_lines(root: Path, paths: list[Path], limit: int = MAX_LINE_LENGTH) -> list[str]:
    """``path:line (length)`` of each line of ``paths`` (relative to ``root``) longer than ``limit`` characters."""
    return [f"{path.as_posix()}:{number} ({len(line)})" for path in paths
            for number, line in enumerate((root / path).read_text(encoding="utf-8").split("\n"), start=1)
            if len(line) > limit]


def test_every_python_file_has_lines_of_at_most_the_limit():
    if subprocess.run(["git", "-C", str(REPO), "rev-parse"], capture_output=True).returncode != 0:
        pytest.skip("not a git checkout: cannot ask git which files it tracks")
    found = long_lines(REPO, tracked_python_files())
    assert not found, f"lines longer than {MAX_LINE_LENGTH} characters:\n" + "\n".join(found)


def test_the_line_check_names_a_long_line_by_its_characters(tmp_path):
    """The check above can fail: it names the line over the limit, with its number and its length in
    characters (not bytes: each é is two), and not the line at the limit."""
    (tmp_path / "module.py").write_text(f"x = 1\ny = '{'é' * 114}'\nz = '{'é' * 115}'\n", encoding="utf-8")
    assert long_lines(tmp_path, [Path("module.py")]) == ["module.py:3 (121)"]
