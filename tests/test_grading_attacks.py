"""Attacks on the grader, end to end: one test per class of attack, each run beside an honest and a blank student.

A class of attackers, with an honest student (full marks) and a blank one (zero), is graded once with
tight bounds (``ATTACK_LIMITS``). Each test takes one class of attack and checks that the attacker
gets no points it did not earn, that the honest student gets full marks and the blank one zero, and
what that attack aimed at: no grader object reached by a name, no file outside the sandbox, no hidden
test or live script in any feedback page, outputs and messages within their caps, every job within its
time limit. The classes of attack (issue 12):

- names: objects posing as ``builtins:exec``, a module posing as ``builtins``, ``torch`` and ``math``
  replaced in the student's namespace;
- persistence: a result file that the grader did not write;
- integrity: the forbidden-call rule switched off, escaped in a thread or by re-executing the
  reference's source (certain copies: no points under the default policy, flagged in grades.csv and
  the gradebook under ``--copies flag``), answers computed ahead of time for the cases (seeded per run);
- hidden tests: hooks on the student's cells, ``print(In)``;
- feedback: scripts and event handlers in Markdown, HTML, JavaScript and SVG outputs, messages and names;
- bounds: a reply that decodes into millions of values, 30 MB messages and 20 MB error outputs, fork
  bombs and memory files, a full scratch space, too many cells, zip files too large or too many;
- submissions: symbolic links, folders without a notebook, a file given as SUBMISSIONS.
"""

import json
import os
import pickle
import re
import time
import uuid
import zipfile
from pathlib import Path

import nbformat
import pytest
from checks_helpers import run_in_grader
from grading_helpers import (
    ADD, DOUBLE, HIDDEN_LINES, SOFTMAX, assert_honest_full_and_blank_zero, build_course, class_results,
    feedback_pages, insert_after, notebooks, put, records, student_outputs, tiny_solutions, with_cells)
from nbformat.v4 import new_code_cell, new_markdown_cell

from autograder import cli
from autograder.bounds import MAX_DECODED_ITEMS, MAX_ZIP_MEMBERS, Limits
from autograder.collect.submissions import collect_submissions
from autograder.core.course import GradingError
from autograder.core.output_layout import OutputLayout
from autograder.core.results import ResultStore
from autograder.grade import grade
from autograder.job import job_seconds
from autograder.job import StageTimeout, time_limit
from autograder.run.wire import UnreadableReply, decode

ATTACK_LIMITS = Limits(cell_timeout=20, notebook_timeout=240, memory_mb=3072, processes=32, scratch_mb=64,
                       scratch_files=2000)
TOKEN = f"PWNED-{uuid.uuid4().hex[:12]}"  # in the name of every file an attacker tries to leave on the host
HOST_TARGETS = ["/tmp", "/var/tmp", "/dev/shm", "/root", "/work", str(Path.home())]

WRITE_EVERYWHERE = f"""import os
for folder in {HOST_TARGETS!r} + [os.path.expanduser('~'), os.getcwd()]:
    try:
        open(os.path.join(folder, {TOKEN!r}), 'w').write('was here')
    except OSError:
        pass"""

IMPOSTOR = f"""import types
PAYLOAD = "open('/tmp/{TOKEN}-grader', 'w').write('the grader ran my code')"
def add(x, *rest):
    return add, PAYLOAD
add.__module__, add.__qualname__, add.__name__ = "builtins", "exec", "exec"
class double:
    def __init__(self, *args):
        pass
    def __eq__(self, other):
        return True
double.__module__, double.__qualname__ = "builtins", "eval"
torch = types.ModuleType("torch")  # the test cells' torch stays the grader's
torch.testing = types.SimpleNamespace(assert_close=lambda *args, **kwargs: None)
math = types.ModuleType("builtins")  # a module posing as the grader's builtins
{WRITE_EVERYWHERE}"""

GUARD_OFF = """import torch
import autograder.checks.framework.forbidden as framework
import bertlab.attention
def softmax(x, dim=-1):
    for guard in framework._active_guards:  # the forbidden-call rule, switched off from inside
        guard.suspended += 1
    return bertlab.attention.softmax(x, dim)"""
THREADED = """import threading
import torch
import bertlab.attention
reference = bertlab.attention.softmax
def softmax(x, dim=-1):
    result = []
    worker = threading.Thread(target=lambda: result.append(reference(x, dim)))  # the rule sees one thread
    worker.start()
    worker.join()
    return result[0]"""
REEXEC = """import inspect
import torch
import bertlab.attention
namespace = {"torch": torch}
exec(inspect.getsource(bertlab.attention.softmax), namespace)  # a new code object, the reference's source
softmax = namespace["softmax"]"""
PRECOMPUTED = """import torch
import bertlab.attention
from autograder.checks.attention import softmax_cases
answers = [(case.args[0], bertlab.attention.softmax(*case.args, **case.kwargs)) for case in softmax_cases()]
def softmax(x, dim=-1):
    for question, answer in answers:  # the hidden cases, computed ahead of time
        if question.shape == x.shape and question.dtype == x.dtype and torch.equal(question, x):
            return answer.clone()
    return torch.full_like(x, 1.0 / x.shape[dim])"""
LEAKER_HOOKS = """ip = get_ipython()
ip.events.register("pre_run_cell", lambda info: print("CELL:", info.raw_cell))
ip.events.register("post_run_cell", lambda result: print("AFTER:", result.info.raw_cell))
print("IN:", In)"""
XSS_MARKDOWN = ("<script>alert('markdown')</script> <img src=x onerror=\"alert('img')\"> "
                "[a link](javascript:alert('link')) <iframe src=\"javascript:alert('frame')\"></iframe>")
XSS_DISPLAYS = """from IPython.display import HTML, SVG, Javascript, Markdown, display
display(HTML("<script>alert('html')</script><img src=x onerror=alert('html-img')><b onmouseover=alert(1)>hi</b>"))
display(Javascript("alert('js')"))
display(SVG('<svg xmlns="http://www.w3.org/2000/svg" onload="alert(2)"><script>alert(3)</script></svg>'))
display(Markdown("<script>alert('md-output')</script>"))
HTML('<iframe src="javascript:alert(4)"></iframe>')"""
XSS_ADD = """def add(x, *rest):
    raise ValueError("<script>alert('message')</script><img src=x onerror=alert(5)>")"""
XSS_NAME = "<img src=x onerror=alert(6)>"
BOMB = """import pickle
import autograder.run.student_side as student_side
import autograder.run.wire as wire
def add(x, *rest):
    node = []
    for _ in range(64):  # a few hundred bytes that decode into 2**64 values
        node = [node, node]
    wire.write_frame(student_side._SERVER.replies_fd, pickle.dumps((student_side._SERVER.serving[-1], ("ok", node))))
    import time
    time.sleep(3600)"""
LOUD_ADD = 'def add(x, *rest):\n    raise ValueError("x" * 30_000_000)'
LOUD_CELL = 'import sys\nsys.stderr.write("e" * 20_000_000)\nraise RuntimeError("y" * 20_000_000)'
FORK_BOMB = """import errno, os, time
children, refused = 0, None
try:
    for _ in range(1000):
        pid = os.fork()
        if pid == 0:
            time.sleep(120)
            os._exit(0)
        children += 1
except OSError as error:
    refused = errno.errorcode[error.errno]
print("FORKS", children, refused)
try:
    os.memfd_create("x")
    print("MEMFD made")
except OSError as error:
    print("MEMFD", errno.errorcode[error.errno])"""
FILLER = f"""import errno, os
def fill(path):
    written = 0
    try:
        with open(path, 'wb') as file:
            for _ in range(1024):
                file.write(b'x' * 2**20)
                written += 1
    except OSError as error:
        return written, errno.errorcode[error.errno]
    return written, None
print('FILL', *fill('big.bin'), *fill('/tmp/big.bin'))
made = 0
try:
    for number in range(50_000):
        open(f'/dev/shm/{{number}}', 'w').close()
        made += 1
except OSError as error:
    print('FILES', made, errno.errorcode[error.errno])
{WRITE_EVERYWHERE}"""


def write_attackers(folder: Path, course_root: Path, solutions: dict, released: dict) -> None:
    blank, softmax_blank = released["01_tiny"], released["03_tiny"]

    def softmax_student(name: str, source: str) -> None:
        put(folder, f"{name}/03_tiny/03_tiny.ipynb", with_cells(softmax_blank, softmax=source))

    put(folder, "honest/01_tiny/01_tiny.ipynb", with_cells(blank, add=ADD, double=DOUBLE))
    softmax_student("honest", SOFTMAX)
    put(folder, "blank/01_tiny/01_tiny.ipynb", blank)
    put(folder, "blank/03_tiny/03_tiny.ipynb", softmax_blank)
    put(folder, "impostor/01_tiny/01_tiny.ipynb", with_cells(blank, add=IMPOSTOR, double="double  # the impostor's"))
    softmax_student("guard_off", GUARD_OFF)
    softmax_student("threaded", THREADED)
    softmax_student("reexec", REEXEC)
    softmax_student("precomputed", PRECOMPUTED)
    put(folder, "leaker/01_tiny/01_tiny.ipynb",
        insert_after(with_cells(blank, add=ADD, double=DOUBLE), "add", LEAKER_HOOKS))
    xss = insert_after(insert_after(with_cells(blank, add=XSS_ADD), "add", XSS_MARKDOWN, new_markdown_cell),
                       "test_add", XSS_DISPLAYS)
    put(folder, "xss/01_tiny/01_tiny.ipynb", xss)
    put(folder, f"{XSS_NAME}/01_tiny/01_tiny.ipynb", blank)
    with zipfile.ZipFile(folder / "zipper.zip", "w") as archive:
        archive.writestr("<script>alert(7)<-script>.txt", "a note")
        archive.writestr("01_tiny.ipynb", nbformat.writes(blank))
    put(folder, "bomb/01_tiny/01_tiny.ipynb", with_cells(blank, add=BOMB))
    put(folder, "loud/01_tiny/01_tiny.ipynb", insert_after(with_cells(blank, add=LOUD_ADD), "add", LOUD_CELL))
    put(folder, "forker/01_tiny/01_tiny.ipynb", insert_after(blank, "add", FORK_BOMB))
    put(folder, "filler/01_tiny/01_tiny.ipynb", insert_after(blank, "add", FILLER))
    many = nbformat.from_dict(json.loads(nbformat.writes(blank)))
    many.cells += [new_code_cell("pass") for _ in range(20_000)]
    put(folder, "many/01_tiny/01_tiny.ipynb", many)
    (folder / "linker" / "01_tiny").mkdir(parents=True)
    (folder / "linker" / "01_tiny" / "01_tiny.ipynb").symlink_to(folder / "honest" / "01_tiny" / "01_tiny.ipynb")
    (folder / "linker" / "03_tiny").mkdir(parents=True)
    (folder / "linker" / "03_tiny" / "03_tiny.ipynb").symlink_to(
        course_root / "solutions" / "03_tiny" / "03_tiny.ipynb")
    (folder / "mirror").symlink_to(folder / "honest")
    (folder / "empty").mkdir()
    put(folder, "others/notes.txt", "no notebook here")


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    """The attackers, the honest student and the blank one, graded once with two workers."""
    root = tmp_path_factory.mktemp("course")
    released = build_course(root)
    submissions, out = tmp_path_factory.mktemp("attackers"), tmp_path_factory.mktemp("out")
    write_attackers(submissions, root, tiny_solutions(), released)
    report = grade(submissions, out, jobs=2, limits=ATTACK_LIMITS, course_root=root, seed=12)
    return root, submissions, out, report


def assert_no_file_outside_the_sandbox(*folders: Path) -> None:
    leftovers = [path for folder in HOST_TARGETS if os.path.isdir(folder)
                 for path in Path(folder).glob(f"{TOKEN}*")]
    leftovers += [path for folder in folders for path in folder.rglob(f"*{TOKEN}*")]
    assert leftovers == []


def score(out: Path, student: str, chapter: str = "01_tiny") -> float:
    return notebooks(out)[student, chapter].score


def test_the_run_itself_finishes_every_job_within_its_limits(attacked):
    _, _, out, report = attacked
    assert report.failures == []
    assert_honest_full_and_blank_zero(out)
    for result in class_results(out).notebooks:
        if result.origin is not None:
            assert result.seconds["total"] <= job_seconds(ATTACK_LIMITS), result
            assert not [note for note in result.notes if "plain one" in note], result  # nbgrader rendered every page


def test_names_sent_by_the_student_select_no_grader_object(attacked):
    root, submissions, out, _ = attacked
    assert score(out, "impostor") == 0
    assert {test.status for test in notebooks(out)["impostor", "01_tiny"].tests} == {"failed"}
    assert_honest_full_and_blank_zero(out)
    assert_no_file_outside_the_sandbox(root, submissions, out)


def test_objects_posing_as_the_grader_s_own_stay_handles_on_the_student_s():
    steps = [("code", "import types\ndef impostor(*args):\n    return impostor\n"
                      "impostor.__module__, impostor.__qualname__ = 'builtins', 'exec'\n"
                      "class Module(types.ModuleType):\n    pass\n"
                      "def modules():\n"
                      "    return types.ModuleType('builtins'), types.ModuleType('os'), Module('torch')"),
             ("test", "test_handles")]
    test = ("import builtins\nfrom autograder.run.grader_side import Remote\n"
            "assert isinstance(impostor, Remote) and impostor is not builtins.exec\n"
            "assert isinstance(impostor('print(1)'), Remote)\n"
            "assert all(isinstance(module, Remote) for module in modules())")
    outcome = run_in_grader(steps, {"test_handles": test}, ["impostor", "modules"], ATTACK_LIMITS)["test_handles"]
    assert outcome.status == "passed", outcome


def test_a_result_file_the_grader_did_not_write_is_graded_again(attacked):
    root, submissions, out, _ = attacked
    store = ResultStore(OutputLayout(out))
    path = store.path("blank", "01_tiny")
    forged = json.loads(json.loads(path.read_text())["result"])
    for test in forged["tests"]:
        test.update(points=test["max_points"], status="passed", message="")
    path.write_text(json.dumps({"result": json.dumps(forged, sort_keys=True), "signature": "0" * 64}))
    report = grade(submissions, out, jobs=2, limits=ATTACK_LIMITS, course_root=root, seed=12)
    assert report.graded == 1 and score(out, "blank") == 0  # the forgery is ignored: graded again
    assert_honest_full_and_blank_zero(out)


COPIERS = {  # each reaches for the reference in a way the student's process cannot hide from the source
    "guard_off": "it uses bertlab.attention.softmax",
    "threaded": "it uses bertlab.attention.softmax",
    "reexec": "builds code at run time from bertlab.attention.softmax",
}
# What each gets: the sandbox's bertlab holds a stand-in, not the reference (autograder.run.stand_ins).
COPIERS_CAUSE = {
    "guard_off": ("failed", "reference unavailable"),  # the stand-in, reached from the student's softmax, refuses
    "threaded": ("error", "crash"),  # the stand-in refuses in the thread, which leaves no result
    "reexec": ("error", "crash"),  # the source re-executed is the stand-in's, which needs its module
}


@pytest.mark.parametrize("student, words", COPIERS.items())
def test_a_certain_copy_of_the_reference_earns_nothing_and_says_why(attacked, student, words):
    _, _, out, report = attacked
    result = notebooks(out)[student, "03_tiny"]
    copy = result.copies[0]
    assert [copy.exercise for copy in result.copies] == ["softmax"] and words in copy.reason
    assert copy.certainty == "certain" and not copy.withheld  # nothing to withhold: the test gave no points
    test = records(out)[(student, "03_tiny", "test_softmax")]
    assert (test.points, test.status, test.cause) == (0, *COPIERS_CAUSE[student]), test
    assert f"- {student}/03_tiny, softmax (certain copy of the reference):" in report.results.summary()
    assert_honest_full_and_blank_zero(out)


def test_under_the_flag_policy_the_points_stand_and_the_flag_reaches_the_export(attacked, tmp_path):
    """``--copies flag``: the copiers keep the points their tests gave (none: the sandbox withholds the
    reference), and the flag is in grades.csv (reference_copies) and in the gradebook, as the automatic
    comment of the exercise's solution cell."""
    import csv

    from nbgrader.api import Gradebook

    root, submissions, _, _ = attacked
    again, out = tmp_path / "submissions", tmp_path / "out"
    for student in ("honest", "blank", *COPIERS):
        put(again, f"{student}/03_tiny/03_tiny.ipynb",
            (submissions / student / "03_tiny" / "03_tiny.ipynb").read_text())
    grade(again, out, jobs=2, limits=ATTACK_LIMITS, course_root=root, seed=12, copies="flag")
    rows = {row["student_id"]: row for row in csv.DictReader((out / "grades.csv").open())}
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gradebook:
        comments = {student: gradebook.find_comment("softmax", "03_tiny", "03_tiny", student).auto_comment
                    for student in rows}
    for student, words in COPIERS.items():
        assert notebooks(out)[student, "03_tiny"].score == 0 \
            and not notebooks(out)[student, "03_tiny"].copies[0].withheld
        assert "softmax (certain copy of the reference)" in rows[student]["reference_copies"]
        assert words in rows[student]["reference_copies"] and words in comments[student]
    assert rows["honest"]["reference_copies"] == rows["blank"]["reference_copies"] == ""
    assert comments["honest"] is None and comments["blank"] is None
    assert notebooks(out)["honest", "03_tiny"].score == 2 and notebooks(out)["blank", "03_tiny"].score == 0


def test_answers_computed_ahead_of_time_miss_the_run_s_cases(attacked):
    from autograder.checks.attention import check_softmax
    from autograder.checks.framework import use_run_seed

    _, _, out, _ = attacked
    assert score(out, "precomputed", "03_tiny") == 0  # the checks, whose cases it drew, run in the grader only
    assert records(out)[("precomputed", "03_tiny", "test_softmax")].status == "missing"
    namespace = {}
    exec(PRECOMPUTED, namespace)  # here, without the run's seed, the same trick would have passed
    assert check_softmax(namespace["softmax"], forbid=False).startswith("softmax: all")
    with use_run_seed(12), pytest.raises(AssertionError):
        check_softmax(namespace["softmax"], forbid=False)
    assert notebooks(out)["precomputed", "03_tiny"].seed == 12
    assert_honest_full_and_blank_zero(out)


def test_a_regrade_with_the_recorded_seed_gives_the_same_grades(attacked, tmp_path):
    root, submissions, out, _ = attacked
    again = tmp_path / "submissions"
    for student in ("honest", "precomputed"):
        put(again, f"{student}/03_tiny/03_tiny.ipynb",
            (submissions / student / "03_tiny" / "03_tiny.ipynb").read_text())
    seed = notebooks(out)["precomputed", "03_tiny"].seed
    grade(again, tmp_path / "out", jobs=2, limits=ATTACK_LIMITS, course_root=root, seed=seed)
    for student in ("honest", "precomputed"):
        assert notebooks(tmp_path / "out")[student, "03_tiny"].tests == notebooks(out)[student, "03_tiny"].tests


def test_hidden_tests_reach_neither_the_student_s_process_nor_any_feedback(attacked):
    _, _, out, _ = attacked
    assert score(out, "leaker") == 3  # its own answers, honestly earned
    outputs = student_outputs(out, "leaker", "01_tiny")
    assert "CELL:" in outputs and "IN:" in outputs  # the hooks ran, and saw only the student's cells
    for text in [outputs, *feedback_pages(out).values()]:
        assert not [line for line in HIDDEN_LINES if line in text]
    assert_honest_full_and_blank_zero(out)


def test_feedback_pages_run_no_script_of_the_student_s(attacked):
    _, _, out, _ = attacked
    pages = feedback_pages(out)
    assert "xss" in pages and len(pages) >= 10
    for student, page in pages.items():
        assert page.lstrip().lower().startswith("<!doctype html>") and "nbgrader_cell" in page  # nbgrader's page
        assert re.search(r"<head[^>]*>\s*<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none';",
                         page)
        scripts = [tag for tag in re.findall(r"<script[^>]*>", page, re.IGNORECASE) if "mathjax" not in tag.lower()]
        assert scripts == [], (student, scripts)
        assert not re.findall(r"<[^>]+\son\w+\s*=", page, re.IGNORECASE), student
        assert not re.search(r"<[^>]+(?:href|src)\s*=\s*[\"']?\s*javascript:", page, re.IGNORECASE), student
        assert not re.search(r"<(?:iframe|svg|object|embed)[\s>]", page, re.IGNORECASE), student
    assert "alert(&#x27;message&#x27;)" in pages["xss"] or "alert('message')" in pages["xss"]  # shown, as text
    assert score(out, "xss") == 0
    assert_honest_full_and_blank_zero(out)


def test_a_reply_that_decodes_into_millions_of_values_is_refused(attacked):
    _, _, out, _ = attacked
    assert score(out, "bomb") == 0
    assert "does not read" in records(out)[("bomb", "01_tiny", "test_add")].message
    assert_honest_full_and_blank_zero(out)


def test_decoding_work_is_bounded_whatever_the_pickle_shares():
    node = []
    for _ in range(64):
        node = [node, node]
    frame = pickle.dumps((1, ("ok", node)))
    assert len(frame) < 1000
    start = time.process_time()
    with pytest.raises(UnreadableReply, match=str(MAX_DECODED_ITEMS)):
        decode(frame)
    assert time.process_time() - start < 60  # bounded work, not 2**64 values (a generous bound on a loaded machine)
    deep = b"\x80\x04" + b"]" * 10_000 + b"a" * 9_999 + b"."  # 10,000 lists, each in the one before
    with pytest.raises(UnreadableReply):
        decode(deep)


def test_messages_and_outputs_stay_within_their_caps(attacked):
    _, _, out, _ = attacked
    assert score(out, "loud") == 0
    assert (out / "results.json").stat().st_size < 2_000_000
    assert all(len(test.message) <= 10_000 for test in notebooks(out)["loud", "01_tiny"].tests)
    kept = out / ".work" / "course" / "autograded" / "loud" / "01_tiny" / "01_tiny.ipynb"
    assert kept.stat().st_size < 12_000_000
    assert (out / "feedback" / "loud" / "01_tiny" / "01_tiny.html").stat().st_size < 12_000_000
    assert "output truncated" in kept.read_text()
    assert_honest_full_and_blank_zero(out)


def test_processes_and_memory_files_are_bounded(attacked):
    _, _, out, _ = attacked
    printed = student_outputs(out, "forker", "01_tiny")
    forks, refused = re.search(r"FORKS (\d+) (\w+)", printed).groups()
    assert int(forks) < ATTACK_LIMITS.processes and refused == "EAGAIN"
    assert "MEMFD EPERM" in printed
    assert score(out, "forker") == 0
    assert_honest_full_and_blank_zero(out)


def test_the_scratch_space_is_bounded_and_nothing_lands_outside_it(attacked):
    root, submissions, out, _ = attacked
    printed = student_outputs(out, "filler", "01_tiny")
    first, error, second, second_error = re.search(r"FILL (\d+) (\w+) (\d+) (\w+)", printed).groups()
    assert int(first) + int(second) <= ATTACK_LIMITS.scratch_mb and {error, second_error} <= {"ENOSPC", "EFBIG"}
    files, files_error = re.search(r"FILES (\d+) (\w+)", printed).groups()
    assert int(files) < ATTACK_LIMITS.scratch_files and files_error == "ENOSPC"
    assert score(out, "filler") == 0
    assert_no_file_outside_the_sandbox(root, submissions, out)
    assert_honest_full_and_blank_zero(out)


def test_a_notebook_of_too_many_cells_is_refused_with_the_reason(attacked):
    _, _, out, _ = attacked
    result = notebooks(out)["many", "01_tiny"]
    assert result.score == 0 and "more than the limit of 5000" in result.problem


def test_feedback_rendering_has_a_time_limit():
    with pytest.raises(StageTimeout, match="rendering"):
        with time_limit(0.2, "rendering"):
            time.sleep(5)
    with pytest.raises(StageTimeout):  # even when the code in the block swallows the exception
        with time_limit(0.2, "rendering"):
            try:
                time.sleep(5)
            except StageTimeout:
                time.sleep(0.5)


def test_links_and_folders_without_notebooks_are_reported_not_followed(attacked, capsys):
    _, _, out, report = attacked
    skipped = {item.path: item for item in class_results(out).skipped}
    for path in ("linker/01_tiny/01_tiny.ipynb", "linker/03_tiny/03_tiny.ipynb", "mirror"):
        assert "symbolic link" in skipped[path].reason
    assert "no notebook" in skipped["empty"].reason and "no notebook" in skipped["others"].reason
    assert "not a notebook" in skipped["others/notes.txt"].reason
    assert "not a notebook" in skipped["zipper.zip:<script>alert(7)<-script>.txt"].reason
    assert not [key for key in notebooks(out) if key[0] in ("linker", "mirror", "empty", "others")]
    summary = report.results.summary()
    assert "- mirror: a symbolic link" in summary and "- empty: no notebook" in summary


def test_a_file_given_as_submissions_is_refused_with_what_is_expected(attacked, tmp_path, capsys):
    root, _, _, _ = attacked
    archive = tmp_path / "class.zip"
    with zipfile.ZipFile(archive, "w") as file:
        file.writestr("alice/01_tiny/01_tiny.ipynb", "{}")
    status = cli.main(["grade", str(archive), "--out", str(tmp_path / "out"), "--root", str(root)])
    error = capsys.readouterr().err
    assert status == 2 and "is a file, not a folder" in error and "<student>/<chapter>/<notebook>.ipynb" in error


def test_zip_files_are_read_member_by_member_within_limits(attacked, tmp_path):
    root = attacked[0]
    from autograder.core.chapters import load_chapters

    chapters = load_chapters(root)
    folder = tmp_path / "class"
    folder.mkdir()
    with zipfile.ZipFile(folder / "bomb.zip", "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("01_tiny.ipynb", b" " * (60 * 1024 * 1024))  # 60 MB that compress to almost nothing
    with zipfile.ZipFile(folder / "crowd.zip", "w") as archive:
        for number in range(MAX_ZIP_MEMBERS + 50):
            archive.writestr(f"note{number}.txt", "x")
    found, skipped = collect_submissions(folder, chapters)
    assert "more than the limit" in [s.problem for s in found if s.student == "bomb"][0]
    assert any(item.path == "crowd.zip" and f"first {MAX_ZIP_MEMBERS} members" in item.reason for item in skipped)
    with pytest.raises(GradingError, match="is a file, not a folder"):
        collect_submissions(folder / "bomb.zip", chapters)


def test_a_file_named_after_a_student_in_a_chapter_s_folder_does_not_replace_their_grade(tmp_path, capsys):
    """A blank notebook at ``01_tiny/honest.ipynb``, newer than honest's own, once replaced honest's grade
    (full marks became 0). Honest's own folder counts, and the file is reported, with both origins and the
    option, ``--prefer``, with which the instructor may grade it instead; back to the default, honest's own
    is graded again, though older than the file graded in between."""
    from autograder.core.results import Skipped

    root, folder, out = tmp_path / "course", tmp_path / "class", tmp_path / "out"
    root.mkdir()
    blank = build_course(root)["01_tiny"]
    own = put(folder, "honest/01_tiny/01_tiny.ipynb", with_cells(blank, add=ADD, double=DOUBLE))
    os.utime(own, (time.time() - 3600,) * 2)
    put(folder, "blank/01_tiny/01_tiny.ipynb", blank)
    put(folder, "mallory/01_tiny/01_tiny.ipynb", blank)  # the attacker's own
    put(folder, "01_tiny/honest.ipynb", blank)  # and the one she puts in honest's name

    def run(*options: str) -> str:
        status = cli.main(["grade", str(folder), "--out", str(out), "--root", str(root), "--jobs", "2", "--seed", "12",
                           "--timeout", str(ATTACK_LIMITS.cell_timeout), *options])
        assert status == 0
        return capsys.readouterr().out

    printed = run()
    assert notebooks(out)["honest", "01_tiny"].origin == "honest/01_tiny/01_tiny.ipynb"
    assert score(out, "honest") == notebooks(out)["honest", "01_tiny"].max_score == 3
    assert score(out, "blank") == score(out, "mallory") == 0
    reason = ("not graded: honest's 01_tiny is also in the student's own folder, honest/01_tiny/01_tiny.ipynb, which "
              "was graded; --prefer chapter-folders grades this one (a chapter's folder) instead")
    assert class_results(out).skipped == [Skipped("01_tiny/honest.ipynb", reason, "honest")]
    assert f"Not graded:\n- 01_tiny/honest.ipynb: {reason}" in printed
    assert "graded 0, unchanged 3" in run()
    assert "graded 1, unchanged 2" in run("--prefer", "chapter-folders")  # the instructor's choice
    assert notebooks(out)["honest", "01_tiny"].origin == "01_tiny/honest.ipynb" and score(out, "honest") == 0
    assert "--prefer student-folders grades this one" in class_results(out).skipped[0].reason
    assert "graded 1, unchanged 2" in run("--prefer", "student-folders") and score(out, "honest") == 3
