"""Grading fails closed, and no one submission can stop, slow or corrupt a class's grading (issue 26).

Each hostile submission is graded beside an honest student (full marks) and a blank one (zero):

- without working namespaces the grader runs no student code, unless told to (``--unsandboxed``), and
  then every result says so;
- a class holding one hostile file of each kind (numbers too long to read, cells of a wrong type, zip
  files with corrupt data or undecodable names, undecodable and terminal-escaping file names, names
  that take another student's id or look like another's, a forged timestamp, Markdown with scripts,
  600 shell commands, an import of ``bertlab.__main__``) is graded whole: every student in
  results.json and grades.csv, nothing lost, no script in the notebooks kept for the formgrader;
- a submission that spins many processes leaves the others' grading time within the CPU share's
  factor (measured side by side: the honest student graded beside it and beside a blank one);
- a crash of the grader on one job is a result of that student, everywhere.
"""

import csv
import json
import os
import re
import zipfile
from pathlib import Path

import nbformat
import pytest
from grading_helpers import (
    ADD, DOUBLE, FORK_CHAINS, build_course, feedback_pages, insert_after, notebooks, put, student_outputs, with_cells)
from nbformat.v4 import new_markdown_cell

from autograder import cli
from autograder import grade as grade_module
from autograder.bounds import Limits
from autograder.grade import grade
from autograder.run.sandbox import isolation_available

LIMITS = Limits(cell_timeout=20, notebook_timeout=240, memory_mb=3072)
ISOLATED, WHY = isolation_available()
needs_namespaces = pytest.mark.skipif(not ISOLATED, reason=f"no sandbox namespaces here: {WHY}")

XSS_MARKDOWN = ("<script>alert('markdown')</script> <img src=x onerror=\"alert('img')\"> "
                "[a link](javascript:alert('link')) <svg onload=alert(1)></svg>")
XSS_OUTPUT = "from IPython.display import HTML, display\ndisplay(HTML(\"<img src=x onerror=alert('output')>\"))"
SHELL = "\n".join(["!true"] * 600)
IMPORT_MAIN = "from bertlab import __main__  # runs the command line: SystemExit in the student's process"
MAIN = "def add(x, *rest):\n    if x is None:\n        __main__.main()\n    return x + rest[0]"
SPIN = """import os, time
for _ in range(40):
    if os.fork() == 0:
        os.setsid()
        while True:
            pass
print("spinning")"""
REAP = """import os, time
stop = time.time() + 15
while time.time() < stop:  # the orphaned links come to this process, which reaps them
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        time.sleep(0.01)"""
HOGS = {"spinners": ("import time\ntime.sleep(15)", "import time\ntime.sleep(15)", SPIN),  # SPIN first, then 30 s
        "chains": (REAP, REAP, FORK_CHAINS)}


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    return root, build_course(root)


def honest_and_blank(folder: Path, released: dict) -> None:
    blank = released["01_tiny"]
    put(folder, "honest/01_tiny/01_tiny.ipynb", with_cells(blank, add=ADD, double=DOUBLE))
    put(folder, "blank/01_tiny/01_tiny.ipynb", blank)


def assert_honest_full_and_blank_zero(out: Path) -> None:
    results = notebooks(out)
    assert results["honest", "01_tiny"].score == 3, results["honest", "01_tiny"]
    assert results["blank", "01_tiny"].score == 0


# --------------------------------------------------------------------------------------------------
# Without the sandbox
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def no_namespaces(monkeypatch):
    monkeypatch.setattr(grade_module, "isolation_available", lambda: (False, "namespaces do not work here (a test)"))


def test_without_the_sandbox_no_student_code_runs_and_one_line_says_why(course, tmp_path, no_namespaces, capsys):
    honest_and_blank(tmp_path / "submissions", course[1])
    status = cli.main(["grade", str(tmp_path / "submissions"), "--out", str(tmp_path / "out"),
                       "--root", str(course[0])])
    printed = capsys.readouterr()
    assert status == 2
    assert printed.err.count("\n") == 1 and "the sandbox cannot start here" in printed.err
    assert "namespaces do not work here (a test)" in printed.err and "--unsandboxed" in printed.err
    assert not (tmp_path / "out" / "results.json").exists() and not (tmp_path / "out" / "feedback").exists()


def test_unsandboxed_grades_and_every_result_says_so(course, tmp_path, no_namespaces, capsys):
    honest_and_blank(tmp_path / "submissions", course[1])
    out = tmp_path / "out"
    status = cli.main(["grade", str(tmp_path / "submissions"), "--out", str(out), "--root", str(course[0]),
                       "--unsandboxed", "--jobs", "2"])
    printed = capsys.readouterr()
    assert status == 0
    assert_honest_full_and_blank_zero(out)
    warning = "graded WITHOUT the sandbox"
    assert warning in printed.out and warning in printed.err
    assert json.loads((out / "results.json").read_text())["sandbox"].startswith(f"WARNING: {warning}")
    assert all(warning in result.notes[0] for result in notebooks(out).values())
    pages = feedback_pages(out)
    assert set(pages) == {"honest", "blank"} and all(warning in page for page in pages.values())


@needs_namespaces
def test_a_result_graded_without_the_sandbox_is_not_reused_with_it(course, tmp_path, monkeypatch):
    honest_and_blank(tmp_path / "submissions", course[1])
    out = tmp_path / "out"
    with monkeypatch.context() as patch:
        patch.setattr(grade_module, "isolation_available", lambda: (False, "a test"))
        grade(tmp_path / "submissions", out, limits=LIMITS, course_root=course[0], seed=1, unsandboxed=True)
    again = grade(tmp_path / "submissions", out, limits=LIMITS, course_root=course[0], seed=1)
    assert again.graded == 2 and again.reused == 0
    assert not any(result.notes for result in notebooks(out).values())


# --------------------------------------------------------------------------------------------------
# A class with one hostile submission of each kind
# --------------------------------------------------------------------------------------------------


def corrupt_zip(path: Path, notebook) -> None:
    """A zip whose member's deflated data is damaged (zlib fails while reading it)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("01_tiny.ipynb", nbformat.writes(notebook))
    data = bytearray(path.read_bytes())
    middle = len(data) // 3
    data[middle:middle + 64] = bytes(range(64))
    path.write_bytes(bytes(data))


def undecodable_name_zip(path: Path, notebook) -> None:
    """A zip whose member's name is flagged UTF-8 but is not."""
    name = b"01_tiny_xx.ipynb"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(name.decode(), nbformat.writes(notebook))
    data = path.read_bytes().replace(name, b"01_tiny_\xff\xfe.ipynb")
    data = data.replace(b"PK\x03\x04\x14\x00\x00\x00", b"PK\x03\x04\x14\x00\x00\x08")  # the local header's flag
    data = data.replace(b"PK\x01\x02\x14\x03\x14\x00\x00\x00", b"PK\x01\x02\x14\x03\x14\x00\x00\x08")  # the central's
    path.write_bytes(data)


def write_hostile_class(folder: Path, released: dict) -> None:
    blank = released["01_tiny"]
    honest = with_cells(blank, add=ADD, double=DOUBLE)
    honest_and_blank(folder, released)
    text = nbformat.writes(honest)
    put(folder, "bignumber/01_tiny/01_tiny.ipynb",
        text.replace('"metadata": {', '"metadata": {"x": ' + "9" * 5000 + ", ", 1))
    cell_types = json.loads(text)
    cell_types["cells"][0]["cell_type"] = ["code"]
    put(folder, "celltype/01_tiny/01_tiny.ipynb", json.dumps(cell_types))
    corrupt_zip(folder / "corrupt.zip", honest)
    undecodable_name_zip(folder / "badname.zip", honest)
    put(folder, os.fsdecode(b"bytes\xff") + "/01_tiny/01_tiny.ipynb", honest)
    put(folder, "\x1b[2Jescape/01_tiny/01_tiny.ipynb", honest)
    put(folder, "alice smith/01_tiny/01_tiny.ipynb", honest)
    put(folder, "alice_smith-b6a89e/01_tiny/01_tiny.ipynb", blank)  # the id "alice smith" is given
    put(folder, "alice/01_tiny/01_tiny.ipynb", honest)
    put(folder, "\u0430lice/01_tiny/01_tiny.ipynb", blank)  # a Cyrillic a
    put(folder, "forger/01_tiny/01_tiny.ipynb", honest)
    put(folder, "forger/01_tiny/timestamp.txt", "9999-12-31 23:59:59.000000 UTC")
    xss = insert_after(insert_after(honest, "add", XSS_MARKDOWN, new_markdown_cell), "add", XSS_OUTPUT)
    put(folder, "xss/01_tiny/01_tiny.ipynb", xss)
    put(folder, "shell/01_tiny/01_tiny.ipynb", insert_after(honest, "add", SHELL))
    put(folder, "mainer/01_tiny/01_tiny.ipynb", insert_after(with_cells(honest, add=MAIN), "test_double", IMPORT_MAIN))


@pytest.fixture(scope="module", params=["local", "dask"])
def hostile(course, tmp_path_factory, request):
    """The hostile class graded by each engine: this machine's worker processes, and a two-worker Dask
    LocalCluster (autograder.cluster), whose results must hold the same."""
    submissions, out = tmp_path_factory.mktemp("hostile"), tmp_path_factory.mktemp("out")
    write_hostile_class(submissions, course[1])
    status = cli.main(["grade", str(submissions), "--out", str(out), "--root", str(course[0]), "--jobs", "2",
                       "--seed", "3", "--timeout", "20", "--engine", request.param])
    return submissions, out, status


def test_the_whole_class_is_graded_and_written(hostile, capsys):
    submissions, out, status = hostile
    assert status == 0
    assert_honest_full_and_blank_zero(out)
    results = json.loads((out / "results.json").read_bytes().decode("utf-8"))  # valid UTF-8, whatever the names
    graded = {(item["student"], item["chapter"]) for item in results["notebooks"]}
    skipped = " ".join(item["path"] for item in results["skipped"])
    rows = {row["student_id"] for row in csv.DictReader((out / "grades.csv").open())}
    assert {student for student, _ in graded} <= rows
    assert "corrupt.zip" in skipped or any(item["origin"] and "corrupt.zip" in item["origin"]
                                           for item in results["notebooks"])
    assert "badname.zip" in skipped or any(item["origin"] and "badname.zip" in item["origin"]
                                           for item in results["notebooks"])
    for name in ("bignumber", "celltype", "alice", "forger", "xss", "shell", "mainer"):
        assert (name, "01_tiny") in graded, name
    assert len([student for student, _ in graded if "escape" in student]) == 1
    assert len([student for student, _ in graded if student.startswith("bytes")]) == 1


def test_names_never_merge_or_reach_the_terminal_raw(hostile):
    _, out, _ = hostile
    results = notebooks(out)
    smiths = [key for key in results if key[0].startswith("alice_smith")]
    assert len(smiths) == 2 and sorted(results[key].score for key in smiths) == [0, 3]
    text = (out / "results.json").read_text()
    assert "\x1b" not in text and "\udcff" not in text
    look_alikes = json.loads(text)["look_alikes"]
    assert len(look_alikes) == 1 and "alice" in look_alikes[0] and "\\u0430lice" in look_alikes[0]


def test_unreadable_notebooks_are_results_with_the_reason(hostile):
    _, out, _ = hostile
    results = notebooks(out)
    assert results["bignumber", "01_tiny"].score == 0 and "number" in results["bignumber", "01_tiny"].problem
    assert results["celltype", "01_tiny"].problem is None or results["celltype", "01_tiny"].score == 0


def test_a_forged_timestamp_is_not_taken(hostile):
    _, out, _ = hostile
    forger = notebooks(out)["forger", "01_tiny"]
    assert not forger.timestamp.startswith("9999") and any("timestamp.txt" in note for note in forger.notes)


def active_content(html: str) -> list[str]:
    """Scripts, event handlers and ``javascript:`` links in HTML."""
    return re.findall(r"<script|\son\w+\s*=|(?:href|src)\s*=\s*[\"']?\s*javascript:", html, re.IGNORECASE)


def test_what_is_kept_for_the_formgrader_runs_no_script(hostile):
    """Each notebook kept for the formgrader, rendered as nbconvert renders it (its Markdown cells read
    as Markdown, its HTML and SVG outputs as they are), holds nothing active."""
    from nbconvert.filters.markdown import markdown2html

    _, out, _ = hostile
    kept = sorted((out / ".work" / "course" / "autograded").glob("*/*/*.ipynb"))
    assert len(kept) >= 10
    for path in kept:
        notebook = nbformat.read(path, as_version=4)
        html = [markdown2html(cell.source) for cell in notebook.cells if cell.cell_type != "code"]
        html += [str(output.get("data", {}).get(kind, "")) for cell in notebook.cells if cell.cell_type == "code"
                 for output in cell.outputs for kind in ("text/html", "image/svg+xml", "text/markdown")]
        html += ["javascript" for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs
                 if "application/javascript" in output.get("data", {})]
        assert not active_content(" ".join(html)), (path, active_content(" ".join(html)))
    assert notebooks(out)["xss", "01_tiny"].score == 3
    assert active_content(markdown2html(XSS_MARKDOWN))  # the check finds what the student wrote


def test_shell_commands_and_the_command_line_module_are_graded_as_code(hostile):
    _, out, _ = hostile
    for student in ("shell", "mainer"):
        result = notebooks(out)[student, "01_tiny"]
        assert result.score == 3 and {test.cause for test in result.tests} == {""}, result


def test_the_formgrader_of_the_course_sanitizes():
    import runpy

    from traitlets.config import Config

    config = Config()
    runpy.run_path(str(Path(__file__).resolve().parents[1] / "nbgrader_config.py"),
                   init_globals={"get_config": lambda: config})
    assert config.HTMLExporter.sanitize_html is True


# --------------------------------------------------------------------------------------------------
# One student's processes do not slow the others beyond the CPU share
# --------------------------------------------------------------------------------------------------


@needs_namespaces
@pytest.mark.parametrize("kind", HOGS)
def test_a_student_spinning_many_processes_leaves_the_others_their_time(course, tmp_path, kind):
    """The honest student's grading, beside a submission that spins 40 processes in sessions of their
    own (without a CPU share: about 6 times slower), or runs six chains of processes that each live
    shorter than a look of the share, against the same beside a blank one: within a factor of 2."""
    released = course[1]
    hog = released["01_tiny"]
    for source in HOGS[kind]:  # inserted after the same cell: the last comes first
        hog = insert_after(hog, "add", source)
    seconds = {}
    for neighbour in ("blank", "hog"):
        submissions, out = tmp_path / neighbour / "submissions", tmp_path / neighbour / "out"
        honest_and_blank(submissions, released)
        if neighbour == "hog":  # graded first, beside the blank student, then beside the honest one
            put(submissions, "a-hog/01_tiny/01_tiny.ipynb", hog)
        grade(submissions, out, jobs=2, limits=LIMITS, course_root=course[0], seed=5)
        assert_honest_full_and_blank_zero(out)
        seconds[neighbour] = notebooks(out)["honest", "01_tiny"].seconds["run"]
    assert seconds["hog"] <= 2 * seconds["blank"] + 2, seconds


# --------------------------------------------------------------------------------------------------
# One student's processes together stay under --memory, with or without cgroup v2
# --------------------------------------------------------------------------------------------------

HOARD = """import os, time
for _ in range(4):
    if os.fork() == 0:  # forked children, each with a block of its own, every page written
        block = bytearray(300 * 2**20)
        time.sleep(60)
        os._exit(0)
    time.sleep(0.3)
for megabytes in range(0, 300, 50):  # /dev/shm, a memory file system, which no process's size counts
    with open(f"/dev/shm/hoard-{megabytes}", "wb") as file:
        file.write(bytes(50 * 2**20))
time.sleep(15)
print("HOARDED")"""


@needs_namespaces
def test_a_student_holding_memory_in_many_processes_is_stopped_at_the_limit(course, tmp_path):
    """Four forked children of 300 MB and 300 MB in /dev/shm, under --memory 1024: every process under
    its own limit, 1.5 GB together. The sandbox is killed at 1 GB (cgroup v2's memory.max, or the
    grader's bound without it), the cell says why, and the honest and blank students beside it get
    their grades."""
    submissions, out = tmp_path / "submissions", tmp_path / "out"
    honest_and_blank(submissions, course[1])
    put(submissions, "hoarder/01_tiny/01_tiny.ipynb", insert_after(course[1]["01_tiny"], "add", HOARD))
    limits = Limits(cell_timeout=20, notebook_timeout=240, memory_mb=1024)
    grade(submissions, out, jobs=2, limits=limits, course_root=course[0], seed=5)
    assert_honest_full_and_blank_zero(out)
    outputs = student_outputs(out, "hoarder", "01_tiny")
    assert "HOARDED" not in outputs and "ran out of memory" in outputs, outputs[:2000]
