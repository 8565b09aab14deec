"""A tiny course to grade, and readers of what grading writes, shared by the grading tests.

The course has three chapters: 01_tiny (exercises ``add`` and ``double``, hidden tests that are plain
asserts and the checks' ``assert_close``), 02_tiny (``negate``) and 03_tiny (``softmax``, whose hidden
test is chapter 01's real check, so that its reference is ``bertlab.attention.softmax``).
"""

import copy
import csv
import json
import os
import shutil
import tempfile
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from autograder.core.course import grade_id as course_grade_id, is_graded_test
from autograder.core.nbgrader_adapter import create_gradebook, register_chapters
from autograder.core.results import ClassResults, NotebookResult, RunTimes

CHAPTERS = ("01_tiny", "02_tiny", "03_tiny")
ADD = "def add(x, *rest):\n    return x + rest[0]"
DOUBLE = "def double(x, *rest):\n    return 2 * x"
SOFTMAX = '''def softmax(x, dim=-1):
    """My own: the largest logit subtracted, a fully masked row gives zeros."""
    peak = torch.amax(x, dim, keepdim=True)
    peak = torch.where(peak == float("-inf"), torch.zeros_like(peak), peak)
    weights = torch.exp(x - peak)
    norm = torch.sum(weights, dim, keepdim=True)
    return weights / torch.where(norm > 0, norm, torch.ones_like(norm))'''
# Six chains of processes that each work a few hundredths of a second, fork the next link and end: each
# lives shorter than a look of the CPU share and is re-parented to the first process of the namespace.
# Each link writes the CPU time it used on its standard output, for a test to add up.
FORK_CHAINS = """import os, signal, time
try:  # children reaped by the kernel would add their time to no process (refused in the sandbox)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    print("ignored", flush=True)
except OSError:
    print("refused", flush=True)
def link():
    while True:
        end = time.process_time() + 0.03
        while time.process_time() < end:
            pass
        if os.fork() != 0:
            os.write(1, f"{time.process_time()}\\n".encode())
            os._exit(0)
for _ in range(6):
    if os.fork() == 0:
        link()"""
HIDDEN_LINES = ("add(-1, 1)", "negate(-2.5)", "check_softmax", "BEGIN HIDDEN TESTS")  # in no feedback


def _nbgrader(grade_id, points=None):
    test = points is not None
    metadata = {"grade": test, "grade_id": grade_id, "locked": test, "schema_version": 3, "solution": not test,
                "task": False}
    return {"nbgrader": {**metadata, "points": points} if test else metadata}


def _exercise(name, solution, signature="x, *rest"):
    return new_code_cell(f"def {name}({signature}):\n    ### BEGIN SOLUTION\n{solution}\n    ### END SOLUTION",
                         metadata=_nbgrader(name))


def _test(name, points, visible, hidden):
    return new_code_cell(f"{visible}\n### BEGIN HIDDEN TESTS\n{hidden}\n### END HIDDEN TESTS",
                         metadata={**_nbgrader(f"test_{name}", points), "tags": ["raises-exception"]})


def tiny_solutions():
    """The instructor's notebooks of the tiny chapters."""
    kernel = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}}
    first = new_notebook(metadata=kernel, cells=[
        new_code_cell("import torch"),
        new_markdown_cell("# A tiny chapter"),
        _exercise("add", "    return x + rest[0]"),
        _test("add", 1, "assert add(1, 2) == 3",
              "assert add(-1, 1) == 0\n"
              "torch.testing.assert_close(add(torch.ones(2), torch.ones(2)), torch.full((2,), 2.0))"),
        _exercise("double", "    return 2 * x"),
        _test("double", 2, "assert double(2) == 4",
              "from autograder.checks.framework import assert_close\n"
              "assert_close(double(torch.tensor([1.0, 2.0])), torch.tensor([2.0, 4.0]), check='double')"),
    ])
    second = new_notebook(metadata=kernel, cells=[
        _exercise("negate", "    return -x"),
        _test("negate", 1, "assert negate(1) == -1", "assert negate(-2.5) == 2.5"),
    ])
    third = new_notebook(metadata=kernel, cells=[
        new_code_cell("import torch\nimport bertlab.attention"),
        _exercise("softmax", "    top = x.amax(dim=dim, keepdim=True)\n"
                             "    top = top.masked_fill(top == float('-inf'), 0.0)\n"
                             "    e = torch.exp(x - top)\n"
                             "    return e / e.sum(dim=dim, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)",
                  signature="x, dim=-1"),
        _test("softmax", 2, "torch.testing.assert_close(softmax(torch.zeros(2)), torch.full((2,), 0.5))",
              "from autograder.checks.attention import check_softmax\nprint(check_softmax(softmax))"),
    ])
    return {"01_tiny": first, "02_tiny": second, "03_tiny": third}


def build_course(root: Path) -> dict[str, nbformat.NotebookNode]:
    """Write the tiny course's solutions/ under ``root``; return the released (student) notebooks."""
    for name, notebook in tiny_solutions().items():
        (root / "solutions" / name).mkdir(parents=True)
        nbformat.write(notebook, root / "solutions" / name / f"{name}.ipynb")
    generation = root / "generation"
    shutil.copytree(root / "solutions", generation / "source")
    create_gradebook(generation / "gradebook.db")
    register_chapters(generation, f"sqlite:///{generation / 'gradebook.db'}", list(CHAPTERS))
    released = {name: nbformat.read(generation / "release" / name / f"{name}.ipynb", as_version=4) for name in CHAPTERS}
    shutil.rmtree(generation)
    return released


def with_cells(notebook, **sources):
    """A copy of ``notebook`` whose cells with the given grade ids get new sources."""
    notebook = copy.deepcopy(notebook)
    for cell in notebook.cells:
        if course_grade_id(cell) in sources:
            cell.source = sources[course_grade_id(cell)]
    return notebook


def insert_after(notebook, grade_id, source, kind=new_code_cell):
    """A copy of ``notebook`` with a new cell after the cell of ``grade_id``."""
    notebook = copy.deepcopy(notebook)
    index = next(i for i, cell in enumerate(notebook.cells) if course_grade_id(cell) == grade_id)
    notebook.cells.insert(index + 1, kind(source))
    return notebook


def without(notebook, *grade_ids):
    """A copy of ``notebook`` without the cells of the given grade ids."""
    notebook = copy.deepcopy(notebook)
    notebook.cells = [cell for cell in notebook.cells if course_grade_id(cell) not in grade_ids]
    return notebook


def put(folder: Path, relative: str, content) -> Path:
    """Write a notebook (or text) at ``folder/relative``."""
    path = folder / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else nbformat.writes(content))
    return path


def class_results(out: Path) -> ClassResults:
    return ClassResults.from_json((out / "results.json").read_text())


def records(out: Path) -> dict:
    """(student, chapter, grade_id) -> the TestResult, from results.json."""
    return {(result.student, result.chapter, test.grade_id): test
            for result in class_results(out).notebooks for test in result.tests}


def notebooks(out: Path) -> dict:
    """(student, chapter) -> the NotebookResult, from results.json."""
    return {(result.student, result.chapter): result for result in class_results(out).notebooks}


def feedback_pages(out: Path) -> dict[str, str]:
    """student -> the text of all their feedback pages."""
    pages = {}
    for path in sorted((out / "feedback").glob("*/*/*.html")):
        pages[path.parts[-3]] = pages.get(path.parts[-3], "") + path.read_text()
    return pages


def graded_notebook(out: Path, student: str, chapter: str):
    """The graded notebook kept for the instructor."""
    return nbformat.read(out / ".work" / "course" / "autograded" / student / chapter / f"{chapter}.ipynb", as_version=4)


def student_outputs(out: Path, student: str, chapter: str) -> str:
    """The outputs of a student's own code cells (not the test cells), as text."""
    cells = graded_notebook(out, student, chapter).cells
    return json.dumps([cell.outputs for cell in cells if cell.cell_type == "code" and not is_graded_test(cell)])


def assert_honest_full_and_blank_zero(out: Path) -> None:
    """The honest student has full marks and the blank one zero in chapters 01_tiny and 03_tiny, neither flagged."""
    results = notebooks(out)
    for chapter in ("01_tiny", "03_tiny"):
        assert results["honest", chapter].score == results["honest", chapter].max_score > 0, results["honest", chapter]
        assert results["blank", chapter].score == 0
        assert not results["honest", chapter].copies and not results["blank", chapter].copies


def descendants(pid: int) -> set[int]:
    """The processes descended from ``pid`` (its children's children included), read from each task's
    ``/proc/<pid>/task/<tid>/children``: independent of the grader's own reading of ``/proc``."""
    found, stack = set(), [pid]
    while stack:
        for task in Path(f"/proc/{stack.pop()}/task").glob("*"):
            try:
                children = {int(child) for child in (task / "children").read_text().split()}
            except OSError:  # ended meanwhile
                continue
            stack += children - found
            found |= children
    return found


def assert_one_job_at_a_time(times: RunTimes, slots: int) -> None:
    """A run's record of when its jobs ran (:class:`RunTimes`): each in ``slots`` slots or fewer, taken up, forked
    and ended in that order within the run, and in each slot one job at a time."""
    by_slot: dict[str, list] = {}
    for job in sorted(times.jobs, key=lambda job: job.started):
        assert times.began <= job.started <= job.forked <= job.ended <= times.closed, job
        by_slot.setdefault(job.slot, []).append(job)
    assert 0 < len(by_slot) <= slots, by_slot.keys()
    for jobs in by_slot.values():
        assert all(earlier.ended <= later.started for earlier, later in zip(jobs, jobs[1:])), jobs


def alive(pid: int) -> bool:
    """Whether the process ``pid`` runs (a zombie, dead and not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def nbgrader_export_csv(db_url: str, path: Path, results: list[NotebookResult]) -> None:
    """nbgrader's own CSV export of the gradebook (its API: what autograder.report.gradebook.export_csv must equal),
    with a last column ``reference_copies``: each exercise of
    that (student, chapter) flagged as a copy of the reference, with how sure and what was done
    (``results``' copies); written atomically, readable by its owner only (it holds the students' grades)."""
    from nbgrader.api import Gradebook
    from nbgrader.plugins import CsvExportPlugin

    flags = {(result.student, result.chapter): "; ".join(copy.describe() for copy in result.copies)
             for result in results}
    with tempfile.TemporaryDirectory(dir=path.parent) as scratch, Gradebook(db_url) as gradebook:
        exported, temporary = Path(scratch) / "nbgrader.csv", Path(scratch) / path.name
        CsvExportPlugin(to=str(exported)).export(gradebook)
        with exported.open(newline="") as source, temporary.open("w", newline="") as target:
            rows = csv.DictReader(source)
            writer = csv.DictWriter(target, [*(rows.fieldnames or []), "reference_copies"])
            writer.writeheader()
            for row in rows:
                writer.writerow({**row, "reference_copies": flags.get((row["student_id"], row["assignment"]), "")})
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
