"""The grading pipeline (autograder/grade.py and the modules it runs), end to end.

The tiny course of tests/grading_helpers.py is graded for a class that covers the good, the bad and
the hostile submissions, once (``--jobs 2``), and the tests read what it wrote. The pieces (the wire,
the runner, the collector) are tested on their own below, and every chapter the book lists in
_toc.yml is graded too: its solution must get full marks and its released version zero, without a
crash. The attacks on the grader itself are in tests/test_grading_attacks.py.
"""

import copy
import json
import os
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
from checks_helpers import run_in_grader
from grading_helpers import (
    ADD, DOUBLE, HIDDEN_LINES, assert_one_job_at_a_time, build_course, feedback_pages, graded_notebook, insert_after,
    notebooks, put, records, tiny_solutions, with_cells, without)

from autograder import cli
from autograder.bounds import Limits
from autograder.collect.submissions import read_notebook, student_id
from autograder.core import course
from autograder.core.results import JobTimes, RunTimes
from autograder.grade import grade
from autograder.publish import translations
from autograder.run.wire import UnreadableReply, decode, dumps_reply

REPO = Path(__file__).resolve().parents[1]
LIMITS = Limits(cell_timeout=20, notebook_timeout=300, memory_mb=3072)

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
WRONG_AXIS_SOFTMAX = ("def softmax(x, dim=-1):\n    e = torch.exp(x - x.amax(dim=dim, keepdim=True))\n"
                      "    return e / e.sum(dim=0, keepdim=True)")  # the maximum along `dim`, the sum along axis 0
QUIT = "def double(x, *rest):\n    import sys\n    sys.exit('bye')"


def _with_duplicates(notebook) -> str:
    """The notebook's JSON with a second, wrong ``add`` cell, and every cell sharing one id."""
    notebook = insert_after(notebook, "add", "def add(x, *rest):\n    return x - rest[0]")
    index = next(i for i, cell in enumerate(notebook.cells) if cell.source.endswith("x - rest[0]"))
    notebook.cells[index].metadata = copy.deepcopy(notebook.cells[index - 1].metadata)
    data = json.loads(nbformat.writes(notebook))
    for cell in data["cells"]:
        cell["id"] = "same-id"
    return json.dumps(data)


def write_class(folder: Path, solutions: dict, released: dict) -> None:
    """The class: one student per kind of submission (see the expectations in EXPECTED)."""
    first, blank = solutions["01_tiny"], released["01_tiny"]
    with zipfile.ZipFile(folder / "Émile Zola (v2).zip", "w") as archive:  # odd names, chapter told by content
        archive.writestr("homework/01_tiny (1).ipynb", nbformat.writes(first))
    older = put(folder, "Émile Zola (v2).ipynb", blank)  # the same student, an older submission: not graded
    os.utime(older, (time.time() - 3600,) * 2)
    put(folder, "blank/01_tiny/01_tiny.ipynb", blank)
    put(folder, "broken/01_tiny/01_tiny.ipynb", '{"cells": [')
    put(folder, "mixup/01_tiny/01_tiny.ipynb", released["02_tiny"])
    put(folder, "forger/01_tiny/01_tiny.ipynb", with_cells(blank, add=FORGER_ADD, double=FORGER_DOUBLE))
    put(folder, "looper/01_tiny/01_tiny.ipynb",
        with_cells(blank, add=ADD, double="def double(x, *rest):\n    while True:\n        pass"))
    killer = with_cells(blank, add="def add(x, *rest):\n    return x - rest[0]",
                        double="def double(x, *rest):\n    block = bytearray(8 * 1024 ** 3)\n    return 2 * x")
    put(folder, "killer/01_tiny/01_tiny.ipynb", insert_after(killer, "test_add", "import os\nos._exit(0)"))
    tamperer = with_cells(blank, add=ADD, double=DOUBLE, test_add="assert True")
    duplicate = next(c for c in tamperer.cells if course.grade_id(c) == "test_double")
    tamperer.cells.append(copy.deepcopy(duplicate))
    tamperer.cells[-1].id = "copy-of-the-test"
    put(folder, "tamperer/01_tiny/01_tiny.ipynb", tamperer)
    bob = insert_after(with_cells(blank, add=ADD, double="def double(x, *rest):\n    return x + x + 1"), "add",
                       HUGE_OUTPUT)
    bob.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="x" * 10_000_000)]
    put(folder, "bob.ipynb", bob)  # a notebook named by student, with 10 MB of old output and 50 MB of new
    put(folder, "02_tiny/carol.ipynb", solutions["02_tiny"])
    hooker = insert_after(insert_after(blank, "add", SWALLOW_ERRORS), "test_add", "print(In)")
    put(folder, "hooker/01_tiny/01_tiny.ipynb", hooker)  # IPython hooks that hide every error, and a peek
    quitter = insert_after(with_cells(blank, add=ADD, double=QUIT), "add", "import sys\nsys.exit('top level')")
    put(folder, "quitter/01_tiny/01_tiny.ipynb", insert_after(quitter, "test_add", "exit()"))
    put(folder, "deleter/01_tiny/01_tiny.ipynb",
        without(with_cells(blank, add=ADD, double=DOUBLE), "test_add", "double"))
    put(folder, "dupe/01_tiny/01_tiny.ipynb", _with_duplicates(with_cells(blank, add=ADD, double=DOUBLE)))
    put(folder, "axis/03_tiny/03_tiny.ipynb", with_cells(released["03_tiny"], softmax=WRONG_AXIS_SOFTMAX))
    put(folder, "sleeper/01_tiny/01_tiny.ipynb", insert_after(with_cells(blank, add=ADD, double=DOUBLE), "add",
                                                               "import time\ntime.sleep(600)  # past the cell's limit"))


ZOLA = student_id("Émile Zola (v2)")
EXPECTED = {  # (student, chapter, test) -> (status, points)
    (ZOLA, "01_tiny", "test_add"): ("passed", 1), (ZOLA, "01_tiny", "test_double"): ("passed", 2),
    ("blank", "01_tiny", "test_add"): ("error", 0), ("blank", "01_tiny", "test_double"): ("error", 0),
    ("broken", "01_tiny", "test_add"): ("error", 0), ("mixup", "01_tiny", "test_double"): ("error", 0),
    ("forger", "01_tiny", "test_add"): ("failed", 0), ("forger", "01_tiny", "test_double"): ("failed", 0),
    ("looper", "01_tiny", "test_add"): ("passed", 1), ("looper", "01_tiny", "test_double"): ("timeout", 0),
    ("killer", "01_tiny", "test_add"): ("failed", 0), ("killer", "01_tiny", "test_double"): ("error", 0),
    ("tamperer", "01_tiny", "test_add"): ("tampered", 1), ("tamperer", "01_tiny", "test_double"): ("tampered", 2),
    ("bob", "01_tiny", "test_add"): ("passed", 1), ("bob", "01_tiny", "test_double"): ("failed", 0),
    ("carol", "02_tiny", "test_negate"): ("passed", 1), ("carol", "01_tiny", "test_add"): ("missing", 0),
    ("bob", "02_tiny", "test_negate"): ("missing", 0),
    ("hooker", "01_tiny", "test_add"): ("error", 0), ("hooker", "01_tiny", "test_double"): ("error", 0),
    ("quitter", "01_tiny", "test_add"): ("passed", 1), ("quitter", "01_tiny", "test_double"): ("error", 0),
    ("deleter", "01_tiny", "test_add"): ("tampered", 1), ("deleter", "01_tiny", "test_double"): ("missing", 0),
    ("dupe", "01_tiny", "test_add"): ("failed", 0), ("dupe", "01_tiny", "test_double"): ("passed", 2),
    ("axis", "03_tiny", "test_softmax"): ("failed", 0),
    ("sleeper", "01_tiny", "test_add"): ("passed", 1), ("sleeper", "01_tiny", "test_double"): ("passed", 2),
}


@pytest.fixture(scope="module")
def course_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    return root, tiny_solutions(), build_course(root)


@pytest.fixture(scope="module")
def graded(course_folder, tmp_path_factory):
    """The class graded once, with two workers."""
    root, solutions, released = course_folder
    submissions = tmp_path_factory.mktemp("submissions")
    write_class(submissions, solutions, released)
    out = tmp_path_factory.mktemp("out")
    report = grade(submissions, out, jobs=2, limits=LIMITS, course_root=root, seed=1)
    return submissions, out, report


# --------------------------------------------------------------------------------------------------
# The class
# --------------------------------------------------------------------------------------------------


def test_every_submission_gets_its_expected_status_and_points(graded):
    _, out, report = graded
    assert report.failures == [] and report.exit_status == 0
    found = records(out)
    got = {key: (found[key].status, found[key].points) for key in EXPECTED}
    assert got == EXPECTED


@pytest.mark.parametrize("key, words", [
    (("blank", "01_tiny", "test_add"), "NotImplementedError"),
    (("broken", "01_tiny", "test_add"), "not valid JSON"),
    (("mixup", "01_tiny", "test_add"), "notebook of chapter 02_tiny"),
    (("forger", "01_tiny", "test_add"), "this assertion failed, line 1: assert add(1, 2) == 3"),
    (("forger", "01_tiny", "test_double"), "double is not right yet"),
    (("looper", "01_tiny", "test_double"), "time limit"),
    (("killer", "01_tiny", "test_double"), "memory"),
    (("tamperer", "01_tiny", "test_add"), "test_add was edited"),
    (("tamperer", "01_tiny", "test_double"), "appears 2 times"),
    (("bob", "01_tiny", "test_double"), "this assertion failed, line 1: assert double(2) == 4"),
    ((ZOLA, "01_tiny", "test_add"), "is graded as"),
    ((ZOLA, "01_tiny", "test_add"), "2 submissions found; graded the newest"),
    (("hooker", "01_tiny", "test_add"), "NotImplementedError"),
    (("quitter", "01_tiny", "test_double"), "sys.exit()"),
    (("deleter", "01_tiny", "test_add"),
     "test_add was deleted; graded with the instructor's version (your code passed"),
    (("deleter", "01_tiny", "test_double"), "`double` is not defined"),
    (("axis", "03_tiny", "test_softmax"), "Hint: your values sum to 1 along another axis than `dim`"),
])
def test_messages_say_what_happened(graded, key, words):
    assert words in records(graded[1])[key].message


def test_gradebook_and_csv_hold_the_grader_s_scores(graded):
    from nbgrader.api import Gradebook

    _, out, _ = graded
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gradebook:
        assert gradebook.find_submission("01_tiny", ZOLA).score == 3
        assert gradebook.find_submission("01_tiny", "forger").score == 0
        assert gradebook.find_submission("01_tiny", "tamperer").score == 3
    rows = [line.split(",") for line in (out / "grades.csv").read_text().splitlines()]
    scores = {(row[0], row[3]): float(row[9]) for row in rows[1:]}
    assert scores[("01_tiny", "bob")] == 1 and scores[("02_tiny", "carol")] == 1 and scores[("01_tiny", "carol")] == 0


def test_the_student_s_cells_ran_once_and_their_outputs_are_kept(graded):
    _, out, _ = graded
    cells = graded_notebook(out, "bob", "01_tiny").cells
    printed = "".join(output.get("text", "") for cell in cells if cell.cell_type == "code" for output in cell.outputs)
    assert printed.count("spam spam") >= 1 and "x" * 1000 not in printed  # new outputs, not the submitted ones
    tests = {cell.metadata.nbgrader.grade_id: cell for cell in cells if course.is_graded_test(cell)}
    assert "BEGIN HIDDEN TESTS" in tests["test_add"].source  # the instructor's copy holds the hidden tests
    assert "passed" in tests["test_add"].outputs[0].text


def test_feedback_shows_outcomes_but_not_hidden_tests(graded):
    _, out, _ = graded
    pages = feedback_pages(out)
    assert {ZOLA, "blank", "forger", "bob", "carol", "broken", "hooker", "deleter"} <= set(pages)
    for page in pages.values():
        assert "nbgrader_cell" in page  # nbgrader's feedback page, not the plain one made when rendering fails
        assert not [line for line in HIDDEN_LINES if line in page]
    assert "this assertion failed, line 1: assert double(2) == 4" in pages["bob"] \
        and "not valid JSON" in pages["broken"]
    assert "Hint: your values sum to 1 along another axis than `dim`" in pages["axis"]  # the hidden check's hint


def test_a_cell_stopped_at_its_time_limit_is_named_in_results_and_the_summary(graded):
    submissions, out, report = graded
    cells = nbformat.read(submissions / "sleeper" / "01_tiny" / "01_tiny.ipynb", as_version=4).cells
    sleeping = next(number for number, cell in enumerate(cells, start=1) if "time.sleep(600)" in cell.source)
    result = notebooks(out)["sleeper", "01_tiny"]
    assert result.timed_out_cells == (sleeping,)
    assert all(result.timed_out_cells == () for key, result in notebooks(out).items() if key[0] != "sleeper")
    summary = report.results.summary()
    assert "Cells stopped at the time limit of a cell (--timeout; raise it to let them finish):" in summary
    assert f"- sleeper/01_tiny: cell(s) {result.timed_out_cells[0]}" in summary


def test_huge_output_is_truncated(graded):
    _, out, _ = graded
    executed = out / ".work" / "course" / "autograded" / "bob" / "01_tiny" / "01_tiny.ipynb"
    assert executed.stat().st_size < 10_000_000
    assert "output truncated" in executed.read_text()


def test_results_record_the_run_seed_and_the_bound_in_force(graded):
    _, out, _ = graded
    results = json.loads((out / "results.json").read_text())
    graded_ones = [result for result in results["notebooks"] if result["origin"]]
    assert graded_ones and all(result["seed"] == 1 for result in graded_ones)
    assert "RLIMIT_NPROC" in results["bounds"] or "cgroup v2" in results["bounds"]


def test_the_run_records_when_each_job_ran_and_what_the_engine_cost(graded):
    _, out, report = graded
    times = report.times
    assert len(times.jobs) == report.graded + len(report.failures)
    assert_one_job_at_a_time(times, slots=2)
    assert {job.slot for job in times.jobs} == {"1", "2"}
    assert times.cpu_seconds > 0 and times.connected is times.admitted is times.worker_cpu_seconds is None
    assert all(result.seconds["setup"] >= 0 for result in notebooks(out).values() if result.seconds)


def test_run_times_break_a_run_down_into_the_engine_s_costs():
    jobs = [JobTimes("a", 10.0, 10.5, 20.0), JobTimes("b", 10.0, 11.0, 15.0), JobTimes("b", 16.0, 16.5, 25.0),
            JobTimes("a", 20.25, 20.5, 30.0)]
    times = RunTimes(began=4.0, jobs=jobs, closed=31.0)
    assert times.to_first_job == 6.5  # the first fork (10.5) after the start (4)
    assert times.fork == (0.5 + 1.0 + 0.5 + 0.25) / 4
    assert times.between_jobs == (0.25 + 1.0) / 2  # a: from 20 to 20.25; b: from 15 to 16
    assert times.idle_at_end == 5.0  # b from 25 to the last end, 30
    assert times.after_last_job == 1.0
    nothing = RunTimes(began=4.0, closed=5.0)
    assert (nothing.to_first_job, nothing.fork, nothing.between_jobs, nothing.idle_at_end,
            nothing.after_last_job) == (None,) * 5


def test_regrading_is_idempotent_and_the_cli_reports(graded, course_folder, capsys):
    submissions, out, _ = graded
    before = {name: (out / name).read_bytes() for name in ("results.json", "grades.csv")}
    status = cli.main(["grade", str(submissions), "--out", str(out), "--jobs", "2", "--root", str(course_folder[0]),
                       "--timeout", str(LIMITS.cell_timeout), "--notebook-timeout", str(LIMITS.notebook_timeout),
                       "--memory", str(LIMITS.memory_mb)])
    printed = capsys.readouterr().out
    assert status == 0 and "graded 0, unchanged 16" in printed and "| 01_tiny |" in printed
    assert {name: (out / name).read_bytes() for name in before} == before


def test_a_newer_submission_replaces_the_graded_one_and_an_older_one_is_ignored(graded, course_folder):
    submissions, out, _ = graded
    path = submissions / "mixup" / "01_tiny" / "01_tiny.ipynb"
    path.write_text('{"cells": [')  # newer: graded again (quickly: no student process for a broken file)
    report = grade(submissions, out, jobs=2, limits=LIMITS, course_root=course_folder[0])
    assert (report.graded, report.reused) == (1, 15)
    assert "not valid JSON" in records(out)[("mixup", "01_tiny", "test_add")].message
    path.write_text(nbformat.writes(course_folder[1]["01_tiny"]))
    os.utime(path, (time.time() - 86400,) * 2)  # older than the graded one: ignored
    report = grade(submissions, out, jobs=2, limits=LIMITS, course_root=course_folder[0])
    assert report.graded == 0 and any("older than the submission already graded" in note for note in report.notes)
    assert "not valid JSON" in records(out)[("mixup", "01_tiny", "test_add")].message


def test_interrupted_run_leaves_whole_files_and_the_next_run_resumes(course_folder, tmp_path):
    submissions, out = tmp_path / "submissions", tmp_path / "out"
    slow = nbformat.from_dict(copy.deepcopy(course_folder[2]["01_tiny"]))
    slow.cells.insert(0, nbformat.v4.new_code_cell("import time\ntime.sleep(40)"))  # still running at the Ctrl-C
    for name, content in (("ann", "{not a notebook"), ("ben", nbformat.writes(slow))):
        (submissions / name / "01_tiny").mkdir(parents=True)  # ann's is graded fast, ben's cut short
        (submissions / name / "01_tiny" / "01_tiny.ipynb").write_text(content)
    command = [sys.executable, "-m", "autograder", "grade", str(submissions), "--out", str(out), "--root",
               str(course_folder[0])]
    # A grader in a terminal's foreground: Ctrl-C raises KeyboardInterrupt in it even when the test suite itself
    # runs in the background, whose shell starts it with SIGINT ignored (a disposition its children inherit).
    process = subprocess.Popen(command, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 600
    while (not list((out / ".work" / "results").glob("*/*.json")) and time.monotonic() < deadline
           and process.poll() is None):
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the whole process group
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr
    assert list(notebooks(out)) == [("ann", "01_tiny")]  # one student graded, whole
    assert not [path for path in out.rglob(".*") if path.is_file()]  # no temporary file left
    (submissions / "ben" / "01_tiny" / "01_tiny.ipynb").write_text("[]")  # quick to grade this time
    report = grade(submissions, out, limits=Limits(), course_root=course_folder[0])  # the CLI's limits
    assert (report.graded, report.reused) == (1, 1)
    assert set(notebooks(out)) == {("ann", "01_tiny"), ("ben", "01_tiny")}


def test_exit_status_is_nonzero_only_when_grading_itself_fails(tmp_path, capsys):
    (tmp_path / "submissions" / "alice").mkdir(parents=True)
    status = cli.main(["grade", str(tmp_path / "submissions"), "--out", str(tmp_path / "out"), "--root", str(tmp_path)])
    assert status == 2 and "no chapter to grade" in capsys.readouterr().err


def test_a_class_with_nothing_to_grade_says_so(course_folder, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    status = cli.main(["grade", str(tmp_path / "empty"), "--out", str(tmp_path / "out"),
                       "--root", str(course_folder[0])])
    assert status == 2 and "is empty; expected" in capsys.readouterr().err
    put(tmp_path / "junk", "others/notes.txt", "no notebook here")
    status = cli.main(["grade", str(tmp_path / "junk"), "--out", str(tmp_path / "out"),
                       "--root", str(course_folder[0])])
    printed = capsys.readouterr()
    assert status == 0 and "no notebook to grade was found" in printed.err and "- others: no notebook" in printed.out


def test_exit_status_is_1_when_the_grader_fails_on_a_job_and_the_rest_is_graded(course_folder, tmp_path, capsys):
    submissions, out = tmp_path / "submissions", tmp_path / "out"
    for name in ("ann", "ben"):  # unreadable notebooks: graded without a student process, quickly
        (submissions / name / "01_tiny").mkdir(parents=True)
        (submissions / name / "01_tiny" / "01_tiny.ipynb").write_text("{not a notebook")
    (out / "feedback").mkdir(parents=True)
    (out / "feedback" / "ben").write_text("a file where ben's feedback folder goes")  # the grader cannot write
    status = cli.main(["grade", str(submissions), "--out", str(out), "--root", str(course_folder[0]), "--jobs", "2"])
    printed = capsys.readouterr()
    assert status == 1
    assert "ben/01_tiny: the grader failed" in printed.err
    assert ("ann", "01_tiny") in notebooks(out) and "graded 1" in printed.out
    ben = notebooks(out)["ben", "01_tiny"]  # a crash of the grader is a result too, graded again next time
    assert {test.cause for test in ben.tests} == {"grader error"} and ben.score == 0 and ben.fingerprint is None
    assert "ben" in (out / "grades.csv").read_text() and "ben, 01_tiny: 0 / 3; grader error" in printed.out


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
    (51 * 1024 * 1024, "more than the limit"), (json.dumps({"cells": [{}] * 20_000}).encode(), "20000 cells")],
    ids=["binary", "list", "no-cells", "51MB", "20000-cells"])
def test_unreadable_notebooks_are_named(data, problem):
    notebook, found = read_notebook(b"x" * data if isinstance(data, int) else data)
    assert notebook is None and problem in found


def test_a_lenient_reading_repairs_what_nbformat_rejects():
    data = json.dumps({"cells": [{"cell_type": "code", "source": ["x = 1\n", "y = 2"], "extra": 1,
                                  "metadata": {"nbgrader": {"grade_id": "x", "points": "many", "grade": True}}},
                                 "junk"],
                       "nbformat": 4}).encode()
    notebook, problem = read_notebook(data)
    assert problem is None and notebook.cells[0].source == "x = 1\ny = 2"
    assert notebook.cells[0].metadata.nbgrader == {"grade_id": "x", "grade": True}  # points of the wrong type go
    nbformat.validate(notebook)


def test_replies_of_the_student_process_are_plain_data_only():
    import pickle

    with pytest.raises(UnreadableReply):
        decode(pickle.dumps(os.system))
    values = [torch.tensor(True), torch.zeros(0, 3), torch.randn(2, 3).to(torch.bfloat16), torch.arange(6).view(2, 3),
              torch.float16, torch.device("cpu"), torch.Size([2, 3]), {"a": [1, 2.5, "x", None]}]
    decoded = decode(dumps_reply(values))
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
    ("code", "class Counter:\n    entered = 0\n    def __enter__(self):\n        self.entered += 1\n"
             "        return self\n"
             "    def __exit__(self, *exc_info):\n        return True  # would swallow any exception"),
    ("test", "test_context_manager"),
    ("code", "class Grumpy:\n    def __enter__(self):\n        return self\n"
             "    def __exit__(self, *exc_info):\n        raise ValueError('from __exit__')"),
    ("test", "test_exit_raises"),
    ("code", "def train(model, optimizer, scheduler):\n    model.train()\n"
             "    model(torch.ones(1, 2)).sum().backward()\n"
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
        "model.weight.requires_grad_(False)\n"
        "assert trainable(model) == [False, False], 'a change of the test is seen'\n"
        "q, k = torch.randn(2, 3).unbind(0)\nkeeper = Keep(q)\nassert keeper.same(q) and not keeper.same(k)",
    "test_stubborn": "stubborn(1)",
    "test_after_restart": "torch.testing.assert_close(identity(torch.ones(2)), torch.zeros(2))",
    "test_missing": "nowhere(1)",
}
VERDICT_EXERCISES = ["fake", "cheat", "scale", "picky", "apply", "pick", "Counter", "Grumpy", "train", "Keep",
                     "parameters", "trainable", "stubborn", "identity", "nowhere"]


@pytest.fixture(scope="module")
def verdicts():
    limits = Limits(cell_timeout=10, notebook_timeout=300)  # generous: a loaded machine is slow
    return run_in_grader(VERDICT_STEPS, VERDICT_TESTS, VERDICT_EXERCISES, limits, graded={"test_missing": "nowhere"})


@pytest.mark.parametrize("test, status", [
    ("test_fake", "failed"),  # a student's object has no say in == in the grader
    ("test_forbidden", "failed"),  # the forbidden-call guard (a hint) runs where the student's code runs
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
def test_the_grader_s_own_verdicts(verdicts, test, status):
    assert verdicts[test].status == status, verdicts[test]
    if test == "test_forbidden":
        assert "implement this yourself" in verdicts[test].message
    if test == "test_exit_raises":
        assert verdicts[test].message.splitlines() == [  # the failing line of the test, then its message
            "line 2: raise AssertionError('the test failed')", "the test failed"]


def test_the_notebook_time_limit_stops_the_run():
    limits = Limits(cell_timeout=60, notebook_timeout=3)
    outcome = run_in_grader([("code", "import time\ntime.sleep(60)"), ("test", "test_late")], {"test_late": "pass"},
                            [], limits)["test_late"]
    assert outcome.status == "timeout" and "time limit of the notebook" in outcome.message


def test_dependencies_are_rebound_in_the_student_process():
    steps = [("code", "def square(x):\n    return x * x + 1"),  # wrong
             ("code", "def sum_of_squares(x):\n    return square(x).sum()"), ("test", "test_dependency")]
    test = ("from autograder.checks.framework import with_dependencies\n"
            "fixed = with_dependencies(sum_of_squares, square=torch.square)\n"
            "assert fixed(torch.tensor([1.0, 2.0])) == 5")
    outcome = run_in_grader(steps, {"test_dependency": test}, ["sum_of_squares"],
                            Limits(cell_timeout=30, notebook_timeout=120))["test_dependency"]
    assert outcome.status == "passed", outcome


def test_the_student_process_keeps_the_collector_off_what_it_held_before_the_student_s_code():
    steps = [("code", "import gc\nfrozen = gc.get_freeze_count()"), ("test", "test_frozen")]
    outcome = run_in_grader(steps, {"test_frozen": "assert frozen > 100_000, frozen"}, ["frozen"],
                            Limits(cell_timeout=30, notebook_timeout=120))["test_frozen"]
    assert outcome.status == "passed", outcome  # PyTorch and IPython's objects: no full collection walks them


# --------------------------------------------------------------------------------------------------
# The book's chapters
# --------------------------------------------------------------------------------------------------


def toc_chapters() -> list[str]:
    """The chapters the book lists in _toc.yml (``- file: chapters/NN_topic/NN_topic``)."""
    toc = yaml.safe_load((REPO / "_toc.yml").read_text())
    files = [entry["file"] for part in toc.get("parts", []) for entry in part.get("chapters", [])]
    return [Path(file).parts[1] for file in files if Path(file).parts[0] == course.CHAPTERS]


def translated_chapters(language: str = "zh_CN") -> list[str]:
    """The chapters of the book whose catalogue in ``language`` translates something."""
    return [chapter for chapter in toc_chapters()
            if translations.translations(translations.catalogue_path(REPO, language, chapter))]


def chinese_solution(chapter: str) -> str:
    """The solution of ``chapter`` with its Markdown in Chinese, as a student of the Chinese edition who
    solved it hands it in (the release translates the chapter the same way)."""
    catalogue = translations.translations(translations.catalogue_path(REPO, "zh_CN", chapter))
    move = translations.Move(f"{course.SOLUTIONS}/{chapter}", f"{course.CHAPTERS}/zh_CN/{chapter}",
                             translations.translated_pages(REPO, "zh_CN"))
    solution = nbformat.read(REPO / course.SOLUTIONS / chapter / f"{chapter}.ipynb", as_version=4)
    return nbformat.writes(translations.translate_notebook(solution, catalogue, move))


@pytest.fixture(scope="module")
def book_graded(tmp_path_factory):
    """Every chapter of the book graded in one run: its solution and its released version, and for the
    chapters translated into Chinese, the same two in the Chinese edition."""
    chapters = toc_chapters()
    submissions = tmp_path_factory.mktemp("book")
    for student, folder in (("instructor", course.SOLUTIONS), ("student", course.CHAPTERS),
                            ("student-zh_CN", f"{course.CHAPTERS}/zh_CN")):
        for chapter in chapters if student != "student-zh_CN" else translated_chapters():
            notebook = REPO / folder / chapter / f"{chapter}.ipynb"
            if notebook.exists():
                (submissions / student / chapter).mkdir(parents=True)
                (submissions / student / chapter / notebook.name).write_bytes(notebook.read_bytes())
    for chapter in translated_chapters():
        (submissions / "instructor-zh_CN" / chapter).mkdir(parents=True)
        (submissions / "instructor-zh_CN" / chapter / f"{chapter}.ipynb").write_text(chinese_solution(chapter))
    out = tmp_path_factory.mktemp("book-out")
    report = grade(submissions, out, jobs=2, limits=Limits(cell_timeout=300))
    results = defaultdict(list)
    for (student, chapter, _), test in sorted(records(out).items()):
        results[student, chapter].append(test)
    return report, results


@pytest.mark.parametrize("chapter", toc_chapters())
def test_solutions_get_full_marks_and_released_chapters_zero(book_graded, chapter):
    report, results = book_graded
    assert (REPO / course.SOLUTIONS / chapter / f"{chapter}.ipynb").exists(), \
        f"_toc.yml lists {chapter}, which has no solution"
    assert (REPO / course.CHAPTERS / chapter / f"{chapter}.ipynb").exists(), f"{chapter} is not released"
    assert not [failure for failure in report.failures if f"/{chapter}:" in failure], report.failures
    solved, blank = results["instructor", chapter], results["student", chapter]
    assert solved and all(test.status == "passed" and test.points == test.max_points for test in solved), solved
    assert len(blank) == len(solved)
    assert all(test.status == "error" and test.points == 0 and "NotImplementedError" in test.message
               for test in blank), blank


@pytest.mark.parametrize("chapter", translated_chapters())
def test_a_chapter_grades_the_same_in_the_chinese_edition(book_graded, chapter):
    """The solution and the blank chapter, handed in as the Chinese edition has them, get the English
    editions' results test by test: the translation changes the Markdown only."""
    _, results = book_graded

    def outcomes(student):
        return [(test.status, test.points, test.max_points, test.cause, test.message)
                for test in results[student, chapter]]

    assert outcomes("instructor-zh_CN") and outcomes("instructor-zh_CN") == outcomes("instructor")
    assert outcomes("student-zh_CN") == outcomes("student")

# --------------------------------------------------------------------------------------------------
# The grader's own code, wherever it runs
# --------------------------------------------------------------------------------------------------


def _report_package_paths(connection) -> None:
    import autograder
    import bertlab

    connection.send((autograder.__file__, bertlab.__file__))


def test_workers_and_sandboxes_import_the_grader_s_own_packages():
    import multiprocessing

    import autograder
    import bertlab

    here = (autograder.__file__, bertlab.__file__)
    context = multiprocessing.get_context("forkserver")  # as autograder.grade starts its workers
    context.set_forkserver_preload(["autograder.job"])
    receiver, sender = context.Pipe(duplex=False)
    worker = context.Process(target=_report_package_paths, args=(sender,))
    worker.start()
    sender.close()
    assert receiver.recv() == here
    worker.join()
    steps = [("code", "def where():\n    import autograder, bertlab\n    return autograder.__file__, bertlab.__file__")]
    test = f"assert where() == {here!r}, where()"
    outcome = run_in_grader([*steps, ("test", "test_where")], {"test_where": test}, ["where"], LIMITS)["test_where"]
    assert outcome.status == "passed", outcome
