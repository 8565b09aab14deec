"""The grading pipeline (autograder/grade.py, verdict.py, feedback.py), end to end.

A tiny course is built in a temporary folder: chapter 01_tiny with two exercises, ``add`` and
``double``, each with visible and hidden tests, and chapter 02_tiny with one. A class of students
covers the good, the bad and the hostile submissions; it is graded once (``--jobs 2``) and the tests
read the results. Every chapter the book lists in _toc.yml is graded too: its solution must get
full marks and its released version zero, without a crash.
"""

import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from collections import defaultdict
from pathlib import Path

import nbformat
import pytest
import torch
import yaml
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from autograder import cli, release
from autograder.grade import Limits, grade, register_chapters
from autograder.sandbox import Sandbox
from autograder.submissions import read_notebook, student_id
from autograder.verdict import _DataUnpickler, _from_wire, _ReceivedObjects, _Server, _to_wire, run_tests

REPO = Path(__file__).resolve().parents[1]
LIMITS = Limits(cell_timeout=20, notebook_timeout=300, memory_mb=3072)

# --------------------------------------------------------------------------------------------------
# A tiny course
# --------------------------------------------------------------------------------------------------


def _nbgrader(grade_id, points=None):
    test = points is not None
    metadata = {"grade": test, "grade_id": grade_id, "locked": test, "schema_version": 3, "solution": not test,
                "task": False}
    return {"nbgrader": {**metadata, "points": points} if test else metadata}


def _exercise(name, solution):
    return new_code_cell(f"def {name}(x, *rest):\n    ### BEGIN SOLUTION\n{solution}\n    ### END SOLUTION",
                         metadata=_nbgrader(name))


def _test(name, points, visible, hidden):
    return new_code_cell(f"{visible}\n### BEGIN HIDDEN TESTS\n{hidden}\n### END HIDDEN TESTS",
                         metadata={**_nbgrader(f"test_{name}", points), "tags": ["raises-exception"]})


def tiny_solutions():
    """The instructor's notebooks of the two tiny chapters."""
    kernel = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}}
    first = new_notebook(metadata=kernel, cells=[
        new_code_cell("import torch"),
        new_markdown_cell("# A tiny chapter"),
        _exercise("add", "    return x + rest[0]"),
        _test("add", 1, "assert add(1, 2) == 3",
              "assert add(-1, 1) == 0\ntorch.testing.assert_close(add(torch.ones(2), torch.ones(2)), torch.full((2,), 2.0))"),
        _exercise("double", "    return 2 * x"),
        _test("double", 2, "assert double(2) == 4",
              "from autograder.checks.framework import assert_close\n"
              "assert_close(double(torch.tensor([1.0, 2.0])), torch.tensor([2.0, 4.0]), check='double')"),
    ])
    second = new_notebook(metadata=kernel, cells=[
        _exercise("negate", "    return -x"),
        _test("negate", 1, "assert negate(1) == -1", "assert negate(-2.5) == 2.5"),
    ])
    return {"01_tiny": first, "02_tiny": second}


def build_course(root: Path) -> dict[str, nbformat.NotebookNode]:
    """Write the tiny course's solutions/ under ``root``; return the released (student) notebooks."""
    for name, notebook in tiny_solutions().items():
        (root / "solutions" / name).mkdir(parents=True)
        nbformat.write(notebook, root / "solutions" / name / f"{name}.ipynb")
    generation = root / "generation"
    shutil.copytree(root / "solutions", generation / "source")
    release.create_gradebook(generation / "gradebook.db")
    register_chapters(generation, f"sqlite:///{generation / 'gradebook.db'}", ["01_tiny", "02_tiny"])
    released = {name: nbformat.read(generation / "release" / name / f"{name}.ipynb", as_version=4)
                for name in ("01_tiny", "02_tiny")}
    shutil.rmtree(generation)
    return released


def _with_cells(notebook, **sources):
    """A copy of ``notebook`` whose cells with the given grade ids get new sources."""
    notebook = copy.deepcopy(notebook)
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in sources:
            cell.source = sources[grade_id]
    return notebook


def _insert_after(notebook, grade_id, source):
    notebook = copy.deepcopy(notebook)
    index = next(i for i, cell in enumerate(notebook.cells) if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    notebook.cells.insert(index + 1, new_code_cell(source))
    return notebook


ADD = "def add(x, *rest):\n    return x + rest[0]"
DOUBLE = "def double(x, *rest):\n    return 2 * x"
FORGER_ADD = """import torch
class AlwaysEqual:
    def __eq__(self, other):
        return True
def add(x, *rest):
    return AlwaysEqual()
torch.testing.assert_close = lambda *args, **kwargs: None
print("test_add: passed, 1 / 1 points")"""
FORGER_DOUBLE = """import autograder.checks.framework as framework
framework.assert_close = lambda *args, **kwargs: None
def double(x, *rest):
    return 2 * x if isinstance(x, int) else x"""
HUGE_OUTPUT = "for line in range(100_000):\n    print('spam ' * 100)"
SWALLOW_ERRORS = """ip = get_ipython()
ip.set_custom_exc((BaseException,), lambda *args, **kwargs: None)
def swallow(lines):
    return ["try:\\n", *("    " + line for line in lines), "\\nexcept BaseException:\\n    pass\\n"]
ip.input_transformers_post.append(swallow)"""
QUIT = "def double(x, *rest):\n    import sys\n    sys.exit('bye')"


def _without(notebook, *grade_ids):
    """A copy of ``notebook`` without the cells of the given grade ids."""
    notebook = copy.deepcopy(notebook)
    notebook.cells = [cell for cell in notebook.cells if cell.metadata.get("nbgrader", {}).get("grade_id") not in grade_ids]
    return notebook


def _with_duplicates(notebook) -> str:
    """The notebook's JSON with a second, wrong ``add`` cell, and every cell sharing one id."""
    notebook = _insert_after(notebook, "add", "def add(x, *rest):\n    return x - rest[0]")
    index = next(i for i, cell in enumerate(notebook.cells) if cell.source.endswith("x - rest[0]"))
    notebook.cells[index].metadata = copy.deepcopy(notebook.cells[index - 1].metadata)
    data = json.loads(nbformat.writes(notebook))
    for cell in data["cells"]:
        cell["id"] = "same-id"
    return json.dumps(data)


def write_class(folder: Path, solutions: dict, released: dict) -> None:
    """The class: one student per kind of submission (see the expectations in EXPECTED)."""

    def put(relative: str, content) -> Path:
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content if isinstance(content, str) else nbformat.writes(content))
        return path

    first, blank = solutions["01_tiny"], released["01_tiny"]
    with zipfile.ZipFile(folder / "Émile Zola (v2).zip", "w") as archive:  # odd names, chapter told by content
        archive.writestr("homework/01_tiny (1).ipynb", nbformat.writes(first))
    older = put("Émile Zola (v2).ipynb", blank)  # the same student, an older submission: not graded
    os.utime(older, (time.time() - 3600,) * 2)
    put("blank/01_tiny/01_tiny.ipynb", blank)
    put("broken/01_tiny/01_tiny.ipynb", '{"cells": [')
    put("mixup/01_tiny/01_tiny.ipynb", released["02_tiny"])
    put("forger/01_tiny/01_tiny.ipynb", _with_cells(blank, add=FORGER_ADD, double=FORGER_DOUBLE))
    put("looper/01_tiny/01_tiny.ipynb", _with_cells(blank, add=ADD, double="def double(x, *rest):\n    while True:\n        pass"))
    killer = _with_cells(blank, add="def add(x, *rest):\n    return x - rest[0]",
                         double="def double(x, *rest):\n    block = bytearray(8 * 1024 ** 3)\n    return 2 * x")
    put("killer/01_tiny/01_tiny.ipynb", _insert_after(killer, "test_add", "import os\nos._exit(0)"))
    tamperer = _with_cells(blank, add=ADD, double=DOUBLE, test_add="assert True")
    duplicate = next(c for c in tamperer.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "test_double")
    tamperer.cells.append(copy.deepcopy(duplicate))
    tamperer.cells[-1].id = "copy-of-the-test"
    put("tamperer/01_tiny/01_tiny.ipynb", tamperer)
    bob = _insert_after(_with_cells(blank, add=ADD, double="def double(x, *rest):\n    return x + x + 1"), "add", HUGE_OUTPUT)
    bob.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="x" * 10_000_000)]
    put("bob.ipynb", bob)  # a notebook named by student, with 10 MB of old output and 50 MB of new
    put("02_tiny/carol.ipynb", solutions["02_tiny"])
    hooker = _insert_after(_insert_after(blank, "add", SWALLOW_ERRORS), "test_add", "print(In)")
    put("hooker/01_tiny/01_tiny.ipynb", hooker)  # IPython hooks that hide every error, and a leak
    quitter = _insert_after(_with_cells(blank, add=ADD, double=QUIT), "add", "import sys\nsys.exit('top level')")
    put("quitter/01_tiny/01_tiny.ipynb", _insert_after(quitter, "test_add", "exit()"))
    put("deleter/01_tiny/01_tiny.ipynb", _without(_with_cells(blank, add=ADD, double=DOUBLE), "test_add", "double"))
    put("dupe/01_tiny/01_tiny.ipynb", _with_duplicates(_with_cells(blank, add=ADD, double=DOUBLE)))


ZOLA = student_id("Émile Zola (v2)")
EXPECTED = {  # (student, chapter, test) -> (status, points)
    (ZOLA, "01_tiny", "test_add"): ("passed", 1), (ZOLA, "01_tiny", "test_double"): ("passed", 2),
    ("blank", "01_tiny", "test_add"): ("error", 0), ("blank", "01_tiny", "test_double"): ("error", 0),
    ("broken", "01_tiny", "test_add"): ("error", 0), ("mixup", "01_tiny", "test_double"): ("error", 0),
    ("forger", "01_tiny", "test_add"): ("tampered", 0), ("forger", "01_tiny", "test_double"): ("tampered", 0),
    ("looper", "01_tiny", "test_add"): ("passed", 1), ("looper", "01_tiny", "test_double"): ("timeout", 0),
    ("killer", "01_tiny", "test_add"): ("failed", 0), ("killer", "01_tiny", "test_double"): ("error", 0),
    ("tamperer", "01_tiny", "test_add"): ("tampered", 1), ("tamperer", "01_tiny", "test_double"): ("tampered", 2),
    ("bob", "01_tiny", "test_add"): ("passed", 1), ("bob", "01_tiny", "test_double"): ("failed", 0),
    ("carol", "02_tiny", "test_negate"): ("passed", 1), ("carol", "01_tiny", "test_add"): ("missing", 0),
    ("bob", "02_tiny", "test_negate"): ("missing", 0),
    ("hooker", "01_tiny", "test_add"): ("tampered", 0), ("hooker", "01_tiny", "test_double"): ("tampered", 0),
    ("quitter", "01_tiny", "test_add"): ("passed", 1), ("quitter", "01_tiny", "test_double"): ("error", 0),
    ("deleter", "01_tiny", "test_add"): ("tampered", 1), ("deleter", "01_tiny", "test_double"): ("missing", 0),
    ("dupe", "01_tiny", "test_add"): ("failed", 0), ("dupe", "01_tiny", "test_double"): ("passed", 2),
}


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    return root, tiny_solutions(), build_course(root)


@pytest.fixture(scope="module")
def graded(course, tmp_path_factory):
    """The class graded once, with two workers."""
    root, solutions, released = course
    submissions = tmp_path_factory.mktemp("submissions")
    write_class(submissions, solutions, released)
    out = tmp_path_factory.mktemp("out")
    report = grade(submissions, out, jobs=2, limits=LIMITS, course_root=root, progress=False)
    return submissions, out, report


def _records(out: Path) -> dict:
    return {(r["student"], r["chapter"], r["grade_id"]): r for r in json.loads((out / "results.json").read_text())}


# --------------------------------------------------------------------------------------------------
# The class
# --------------------------------------------------------------------------------------------------


def test_every_submission_gets_its_expected_status_and_points(graded):
    _, out, report = graded
    assert report.failures == [] and report.exit_status == 0
    records = _records(out)
    got = {key: (records[key]["status"], records[key]["points"]) for key in EXPECTED}
    assert got == EXPECTED
    required = {"student", "chapter", "grade_id", "points", "max_points", "status", "message"}
    assert all(required <= set(record) for record in records.values())


@pytest.mark.parametrize("key, words", [
    (("blank", "01_tiny", "test_add"), "NotImplementedError"),
    (("broken", "01_tiny", "test_add"), "not valid JSON"),
    (("mixup", "01_tiny", "test_add"), "notebook of chapter 02_tiny"),
    (("forger", "01_tiny", "test_add"), "reported this test as passed"),
    (("forger", "01_tiny", "test_double"), "double is not right yet"),
    (("looper", "01_tiny", "test_double"), "time limit"),
    (("killer", "01_tiny", "test_double"), "memory"),
    (("tamperer", "01_tiny", "test_add"), "test_add was edited"),
    (("tamperer", "01_tiny", "test_double"), "appears 2 times"),
    (("bob", "01_tiny", "test_double"), "this assertion failed: assert double(2) == 4"),
    ((ZOLA, "01_tiny", "test_add"), "is graded as"),
    ((ZOLA, "01_tiny", "test_add"), "2 submissions found; graded the newest"),
    (("hooker", "01_tiny", "test_add"), "reported this test as passed"),
    (("quitter", "01_tiny", "test_double"), "sys.exit()"),
    (("deleter", "01_tiny", "test_add"), "test_add was deleted; graded with the instructor's version (your code passed"),
    (("deleter", "01_tiny", "test_double"), "`double` is not defined"),
])
def test_messages_say_what_happened(graded, key, words):
    assert words in _records(graded[1])[key]["message"]


def test_gradebook_and_csv_hold_the_trusted_scores(graded):
    from nbgrader.api import Gradebook

    _, out, _ = graded
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gradebook:
        assert gradebook.find_submission("01_tiny", ZOLA).score == 3
        assert gradebook.find_submission("01_tiny", "forger").score == 0
        assert gradebook.find_submission("01_tiny", "tamperer").score == 3
    rows = [line.split(",") for line in (out / "grades.csv").read_text().splitlines()]
    scores = {(row[0], row[3]): float(row[9]) for row in rows[1:]}
    assert scores[("01_tiny", "bob")] == 1 and scores[("02_tiny", "carol")] == 1 and scores[("01_tiny", "carol")] == 0


def test_feedback_shows_outcomes_but_not_hidden_tests(graded):
    _, out, _ = graded
    pages = {path.parts[-3]: path.read_text() for path in (out / "feedback").glob("*/*/*.html")}
    assert {ZOLA, "blank", "forger", "bob", "carol", "broken", "hooker", "deleter"} <= set(pages)
    for page in pages.values():
        assert "HIDDEN TESTS" not in page and "add(-1, 1)" not in page and "negate(-2.5)" not in page
    assert "this assertion failed: assert double(2) == 4" in pages["bob"] and "not valid JSON" in pages["broken"]


def test_huge_output_is_truncated(graded):
    _, out, _ = graded
    executed = out / ".work" / "course" / "autograded" / "bob" / "01_tiny" / "01_tiny.ipynb"
    assert executed.stat().st_size < 10_000_000
    assert "output truncated" in executed.read_text()


def test_regrading_is_idempotent_and_the_cli_reports(graded, course, capsys):
    submissions, out, _ = graded
    before = {name: (out / name).read_bytes() for name in ("results.json", "grades.csv")}
    status = cli.main(["grade", str(submissions), "--out", str(out), "--jobs", "2", "--root", str(course[0]),
                       "--timeout", str(LIMITS.cell_timeout), "--notebook-timeout", str(LIMITS.notebook_timeout),
                       "--memory", str(LIMITS.memory_mb)])
    printed = capsys.readouterr().out
    assert status == 0 and "graded 0, unchanged 14" in printed and "| 01_tiny |" in printed
    assert {name: (out / name).read_bytes() for name in before} == before


def test_a_newer_submission_replaces_the_graded_one_and_an_older_one_is_ignored(graded, course):
    submissions, out, _ = graded
    path = submissions / "mixup" / "01_tiny" / "01_tiny.ipynb"
    path.write_text('{"cells": [')  # newer: graded again (quickly: no kernel for a broken file)
    report = grade(submissions, out, jobs=2, limits=LIMITS, course_root=course[0], progress=False)
    assert (report.graded, report.reused) == (1, 13)
    assert "not valid JSON" in _records(out)[("mixup", "01_tiny", "test_add")]["message"]
    path.write_text(nbformat.writes(course[1]["01_tiny"]))
    os.utime(path, (time.time() - 86400,) * 2)  # older than the graded one: ignored
    report = grade(submissions, out, jobs=2, limits=LIMITS, course_root=course[0], progress=False)
    assert report.graded == 0 and any("older than the submission already graded" in note for note in report.notes)
    assert "not valid JSON" in _records(out)[("mixup", "01_tiny", "test_add")]["message"]


def test_interrupted_run_leaves_whole_files_and_the_next_run_resumes(course, tmp_path):
    submissions, out = tmp_path / "submissions", tmp_path / "out"
    for name, content in (("ann", "{not a notebook"), ("ben", nbformat.writes(course[2]["01_tiny"]))):
        (submissions / name / "01_tiny").mkdir(parents=True)  # ann's is graded fast, ben's kernel cut short
        (submissions / name / "01_tiny" / "01_tiny.ipynb").write_text(content)
    command = [sys.executable, "-m", "autograder", "grade", str(submissions), "--out", str(out), "--root", str(course[0])]
    process = subprocess.Popen(command, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    while not list((out / ".work" / "results").glob("*/*.json")) and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the whole process group
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr
    assert len(json.loads((out / "results.json").read_text())) == 2  # one student graded, whole
    assert not [path for path in out.rglob(".*") if path.is_file()]  # no temporary file left
    (submissions / "ben" / "01_tiny" / "01_tiny.ipynb").write_text("[]")  # quick to grade this time
    report = grade(submissions, out, limits=Limits(), course_root=course[0], progress=False)  # the CLI's limits
    assert (report.graded, report.reused) == (1, 1)
    assert len(json.loads((out / "results.json").read_text())) == 4


def test_exit_status_is_nonzero_only_when_grading_itself_fails(tmp_path, capsys):
    (tmp_path / "submissions" / "alice").mkdir(parents=True)
    status = cli.main(["grade", str(tmp_path / "submissions"), "--out", str(tmp_path / "out"), "--root", str(tmp_path)])
    assert status == 2 and "no chapter to grade" in capsys.readouterr().err


def test_exit_status_is_1_when_the_grader_fails_on_a_job_and_the_rest_is_graded(course, tmp_path, capsys,
                                                                                   monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    from autograder import grade as grading

    class WorkerThreads(ThreadPoolExecutor):  # workers in this process, so that the failure can be injected
        def __init__(self, max_workers, mp_context=None, initializer=None, initargs=()):
            super().__init__(max_workers)

    def grade_job_failing_for_ben(job):
        if job.student == "ben":
            raise OSError("disk full (injected)")
        return real_grade_job(job)

    real_grade_job = grading.grade_job
    monkeypatch.setattr(grading, "ProcessPoolExecutor", WorkerThreads)
    monkeypatch.setattr(grading, "grade_job", grade_job_failing_for_ben)
    submissions, out = tmp_path / "submissions", tmp_path / "out"
    for name in ("ann", "ben"):  # unreadable notebooks: graded without a kernel, quickly
        (submissions / name / "01_tiny").mkdir(parents=True)
        (submissions / name / "01_tiny" / "01_tiny.ipynb").write_text("{not a notebook")
    status = cli.main(["grade", str(submissions), "--out", str(out), "--root", str(course[0]), "--jobs", "2"])
    printed = capsys.readouterr()
    assert status == 1
    assert "ben/01_tiny: the grader failed: disk full (injected)" in printed.err
    graded = {(record["student"], record["chapter"]) for record in json.loads((out / "results.json").read_text())}
    assert ("ann", "01_tiny") in graded and "graded 1" in printed.out


# --------------------------------------------------------------------------------------------------
# Pieces
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, expected", [
    ("alice", "alice"), ("o'brien", None), ("../../etc", None), ("a b", None), ("", None)])
def test_student_ids_are_safe_and_distinct(name, expected):
    identifier = student_id(name)
    assert identifier == (expected or identifier)
    assert identifier and "/" not in identifier and "," not in identifier and not identifier.startswith(".")
    if expected is None:
        assert identifier != name and student_id(name.upper() + "x") != identifier


@pytest.mark.parametrize("data, problem", [
    (b"\xff\xfe", "not UTF-8"), (b"[1, 2]", "not a notebook"), (b'{"cells": 3}', "not a notebook"),
    (51 * 1024 * 1024, "more than the limit")], ids=["binary", "list", "no-cells", "51MB"])
def test_unreadable_notebooks_are_named(data, problem):
    notebook, found = read_notebook(b"x" * data if isinstance(data, int) else data)
    assert notebook is None and problem in found


def test_a_lenient_reading_repairs_what_nbformat_rejects():
    data = json.dumps({"cells": [{"cell_type": "code", "source": ["x = 1\n", "y = 2"], "extra": 1}, "junk"],
                       "nbformat": 4}).encode()
    notebook, problem = read_notebook(data)
    assert problem is None and notebook.cells[0].source == "x = 1\ny = 2"
    nbformat.validate(notebook)


def test_replies_of_the_student_process_are_plain_data_only():
    import pickle

    with pytest.raises(pickle.UnpicklingError):
        _DataUnpickler(__import__("io").BytesIO(pickle.dumps(os.system))).load()
    server = object.__new__(_Server)
    server.objects, server.received = {}, _ReceivedObjects()
    values = [torch.tensor(True), torch.zeros(0, 3), torch.randn(2, 3).to(torch.bfloat16), torch.arange(6).view(2, 3).t(),
              torch.float16, torch.device("cpu"), torch.Size([2, 3]), {"a": [1, 2.5, "x", None]}]
    decoded = _from_wire(pickle.loads(pickle.dumps(_to_wire(server.encode(values)))))
    for before, after in zip(values, decoded):
        if isinstance(before, torch.Tensor):
            assert after.dtype == before.dtype and torch.equal(after, before)
        else:
            assert after == before


VERDICT_STEPS = [
    ("code", "import torch, os, signal\ntorch.testing.assert_close = lambda *args, **kwargs: None"),
    ("code", "while True:  # interrupted after the time limit; the cells after it still run\n    pass"),
    ("code", "class Yes:\n    def __eq__(self, other):\n        return True\ndef fake(x):\n    return Yes()"),
    ("test", "test_fake"),
    ("code", "def cheat(x):\n    return torch.softmax(x, -1)"),
    ("test", "test_forbidden"),
    ("code", "def scale(x):\n    x.mul_(2)\n    return x"),
    ("test", "test_in_place"),
    ("code", "def picky(x):\n    raise ValueError('no')"),
    ("test", "test_exception"),
    ("code", "def apply(f, x):\n    return f(x) + 1\ndef pick(f, x):\n    return f(x)  # a tensor the test made"),
    ("test", "test_callback"),
    ("code", "class Counter:\n    entered = 0\n    def __enter__(self):\n        self.entered += 1\n        return self\n"
             "    def __exit__(self, *exc_info):\n        return True  # would swallow any exception"),
    ("test", "test_context_manager"),
    ("code", "class Grumpy:\n    def __enter__(self):\n        return self\n"
             "    def __exit__(self, *exc_info):\n        raise ValueError('from __exit__')"),
    ("test", "test_exit_raises"),
    ("code", "import bertlab.distillation\n"
             "def train(model, optimizer, scheduler):\n    model.train()\n    model(torch.ones(1, 2)).sum().backward()\n"
             "    optimizer.step()\n    scheduler.step()\n    model.bias.requires_grad = False\n    return model\n"
             "class Keep:\n    def __init__(self, x):\n        self.pointer = x.untyped_storage().data_ptr()\n"
             "    def same(self, x):\n        return x.untyped_storage().data_ptr() == self.pointer\n"
             "def parameters(model):\n    return list(model.parameters())\n"
             "def trainable(model):\n    return [p.requires_grad for p in model.parameters()]"),
    ("test", "test_grader_objects"),
    ("code", "def stubborn(x):\n    signal.signal(signal.SIGINT, signal.SIG_IGN)\n    while True:\n        pass"),
    ("test", "test_stubborn"),
    ("code", "def identity(x):\n    return x"),
    ("test", "test_after_restart"),
    ("test", "test_missing"),
]
VERDICT_TESTS = {
    "test_fake": "assert fake(1) == 5",
    "test_forbidden": "from autograder.checks.framework import forbidden_calls\n"
                      "with forbidden_calls([torch.softmax]):\n    cheat(torch.zeros(3))",
    "test_in_place": "x = torch.ones(2)\nscale(x)\nassert x.tolist() == [2.0, 2.0], 'in-place change not seen'",
    "test_exception": "try:\n    picky(1)\nexcept ValueError as error:\n    assert str(error) == 'no'\n"
                      "else:\n    raise AssertionError('no ValueError')",
    "test_callback": "assert apply(lambda h: 2 * h, 3) == 7\nassert apply(lambda h: apply(lambda g: g, h), 3) == 5\n"
                     "assert torch.equal(pick(lambda h: h + 1, torch.zeros(2)), torch.ones(2))",
    "test_context_manager": "counter = Counter()\nwith counter:\n    pass\nassert counter.entered == 1\n"
                            "with Counter():\n    raise AssertionError('not swallowed')",
    "test_exit_raises": "with Grumpy():\n    raise AssertionError('the test failed')",
    "test_grader_objects":
        "model = torch.nn.Linear(2, 1).eval()\nbefore = model.weight.detach().clone()\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)\n"
        "assert train(model, optimizer, scheduler) is model, 'the same object comes back'\n"
        "assert model.training and not model.bias.requires_grad and model.weight.grad is not None\n"
        "assert not torch.equal(model.weight, before), 'the step changed the grader\\'s parameters'\n"
        "assert scheduler.last_epoch == 1 and optimizer.param_groups[0]['lr'] == 0.05\n"
        "assert [id(p) for p in parameters(model)] == [id(p) for p in model.parameters()]\n"
        "model.weight.requires_grad_(False)\nassert trainable(model) == [False, False], 'a change of the test is seen'\n"
        "q, k = torch.randn(2, 3).unbind(0)\nkeeper = Keep(q)\nassert keeper.same(q) and not keeper.same(k)\n"
        "assert bertlab.distillation.__name__ == 'bertlab.distillation'",
    "test_stubborn": "stubborn(1)",
    "test_after_restart": "torch.testing.assert_close(identity(torch.ones(2)), torch.zeros(2))",
    "test_missing": "nowhere(1)",
}


@pytest.fixture(scope="module")
def verdicts():
    limits = Limits(cell_timeout=10, notebook_timeout=300)  # generous: a loaded machine is slow
    with Sandbox(limits) as sandbox:
        return run_tests(VERDICT_STEPS, VERDICT_TESTS, sandbox, limits, {"test_missing": "nowhere"})


@pytest.mark.parametrize("test, status", [
    ("test_fake", "failed"),  # a student's object has no say in == in the grader
    ("test_forbidden", "failed"),  # the forbidden-call guard runs where the student's code runs
    ("test_in_place", "passed"),  # in-place changes of arguments come back
    ("test_exception", "passed"),  # built-in exceptions keep their type and message
    ("test_callback", "passed"),  # a test's lambda is called back in the grader, even from within a call
    ("test_context_manager", "failed"),  # a student's context manager, entered remotely, swallows nothing
    ("test_exit_raises", "failed"),  # ... nor replaces the test's exception with its own
    ("test_grader_objects", "passed"),  # the test's objects keep their identity and get the student's changes
    ("test_stubborn", "timeout"),  # ignoring SIGINT gets the process killed ...
    ("test_after_restart", "failed"),  # ... and restarted; the grader's torch.testing is the real one
    ("test_missing", "missing"),
])
def test_trusted_verdicts(verdicts, test, status):
    assert verdicts[test].status == status, verdicts[test]
    if test == "test_forbidden":
        assert "implement this yourself" in verdicts[test].message
    if test == "test_exit_raises":
        assert verdicts[test].message == "the test failed"


def test_the_notebook_time_limit_stops_the_trusted_run():
    limits = Limits(cell_timeout=60, notebook_timeout=3)
    with Sandbox(limits) as sandbox:
        outcome = run_tests([("code", "import time\ntime.sleep(60)"), ("test", "test_late")], {"test_late": "pass"},
                            sandbox, limits)["test_late"]
    assert outcome.status == "timeout" and "time limit of the notebook" in outcome.message


def test_dependencies_are_rebound_in_the_student_process():
    steps = [("code", "def square(x):\n    return x * x + 1"),  # wrong
             ("code", "def sum_of_squares(x):\n    return square(x).sum()"), ("test", "test_dependency")]
    test = ("from autograder.checks.framework import with_dependencies\nimport torch\n"
            "fixed = with_dependencies(sum_of_squares, square=torch.square)\n"
            "assert fixed(torch.tensor([1.0, 2.0])) == 5")
    limits = Limits(cell_timeout=30, notebook_timeout=120)
    with Sandbox(limits) as sandbox:
        outcome = run_tests(steps, {"test_dependency": test}, sandbox, limits)["test_dependency"]
    assert outcome.status == "passed", outcome


# --------------------------------------------------------------------------------------------------
# The book's chapters
# --------------------------------------------------------------------------------------------------


def toc_chapters() -> list[str]:
    """The chapters the book lists in _toc.yml (``- file: chapters/NN_topic/NN_topic``)."""
    toc = yaml.safe_load((REPO / "_toc.yml").read_text())
    files = [entry["file"] for part in toc.get("parts", []) for entry in part.get("chapters", [])]
    return [Path(file).parts[1] for file in files if Path(file).parts[0] == release.CHAPTERS]


@pytest.fixture(scope="module")
def book_graded(tmp_path_factory):
    """Every chapter of the book graded twice, in one run: its solution and its released version."""
    chapters = toc_chapters()
    submissions = tmp_path_factory.mktemp("book")
    for student, folder in (("instructor", release.SOLUTIONS), ("student", release.CHAPTERS)):
        for chapter in chapters:
            notebook = REPO / folder / chapter / f"{chapter}.ipynb"
            if notebook.exists():
                (submissions / student / chapter).mkdir(parents=True)
                shutil.copy(notebook, submissions / student / chapter)
    out = tmp_path_factory.mktemp("book-out")
    report = grade(submissions, out, jobs=2, limits=Limits(cell_timeout=300), progress=False)
    records = defaultdict(list)
    for record in json.loads((out / "results.json").read_text()):
        records[record["student"], record["chapter"]].append(record)
    return report, records


@pytest.mark.parametrize("chapter", toc_chapters())
def test_solutions_get_full_marks_and_released_chapters_zero(book_graded, chapter):
    report, records = book_graded
    assert (REPO / release.SOLUTIONS / chapter / f"{chapter}.ipynb").exists(), f"_toc.yml lists {chapter}, which has no solution"
    assert (REPO / release.CHAPTERS / chapter / f"{chapter}.ipynb").exists(), f"{chapter} is not released"
    assert not [failure for failure in report.failures if f"/{chapter}:" in failure], report.failures
    solved, blank = records["instructor", chapter], records["student", chapter]
    assert solved and all(r["status"] == "passed" and r["points"] == r["max_points"] for r in solved), solved
    assert len(blank) == len(solved)
    assert all(r["status"] == "error" and r["points"] == 0 and "NotImplementedError" in r["message"] for r in blank), blank
