"""What grading shows the instructor and hands to students (issue 13), on the tiny course of
tests/grading_helpers.py graded once through the command line: the summary's line per student and
chapter (a blank exercise told from a crash, an exercise not defined from no submission at all), the
paths of what was written, progress lines on a stderr that is not a terminal, the permissions of the
files, the feedback's math and citations rendered without a script, ``--regrade``, and an output
folder that git would commit refused.
"""

import contextlib
import io
import os
import re
import stat
import subprocess

import pytest
from grading_helpers import ADD, DOUBLE, build_course, feedback_pages, notebooks, put, tiny_solutions, with_cells
from nbformat.v4 import new_markdown_cell

from autograder import cli
from autograder.bounds import SUMMARY_MESSAGE_CHARS, Limits
from autograder.core import results
from autograder.core.results import Cause, NotebookResult, Status

BIB = """@inproceedings{vaswani2017attention,
  author = {Ashish Vaswani and Noam Shazeer and Niki Parmar},
  title = {Attention Is All You Need},
  year = {2017}
}
"""
PROSE = ("Scores are divided by $\\sqrt{d_k}$, as {cite:t}`vaswani2017attention` do {cite:p}`vaswani2017attention`,"
         " and masked where $j > i$:\n\n$$\\mathrm{softmax}\\left(\\frac{QK^\\top}{\\sqrt{d_k}}\\right)V$$")
LIMITS = ["--timeout", "20", "--notebook-timeout", "300", "--memory", "3072"]


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    released = build_course(root)
    (root / "references.bib").write_text(BIB)
    return root, released


@pytest.fixture(scope="module")
def graded(course, tmp_path_factory):
    """The class graded once by ``autograder grade``: five notebooks of four students."""
    root, released = course
    solutions, blank = tiny_solutions(), released["01_tiny"]
    submissions = tmp_path_factory.mktemp("submissions")
    honest = with_cells(blank, add=ADD, double=DOUBLE)
    honest.cells.insert(0, new_markdown_cell(PROSE))
    put(submissions, "honest/01_tiny/01_tiny.ipynb", honest)
    put(submissions, "honest/02_tiny/02_tiny.ipynb", solutions["02_tiny"])
    put(submissions, "blank/01_tiny/01_tiny.ipynb", blank)
    put(submissions, "renamed/01_tiny/01_tiny.ipynb",
        with_cells(blank, add=ADD.replace("def add(", "def add_numbers("), double=DOUBLE))
    put(submissions, "crasher/01_tiny/01_tiny.ipynb",
        with_cells(blank, add="def add(x, *rest):\n    return x / 0", double=DOUBLE))
    out = tmp_path_factory.mktemp("out")
    command = ["grade", str(submissions), "--out", str(out), "--root", str(root), "--jobs", "2", "--seed", "3", *LIMITS]
    status, printed = _run(command)
    return submissions, out, command, status, printed


def _run(command):
    """The exit status and (stdout, stderr) of ``autograder`` with ``command``, stderr not a terminal."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        status = cli.main(command)
    return status, (stdout.getvalue(), stderr.getvalue())


def test_the_summary_has_a_line_per_student_and_chapter_that_says_what_failed_and_why(graded):
    _, out, _, status, (printed, _) = graded
    assert status == 0, printed
    lines = printed.splitlines()
    assert "- honest, 01_tiny: 3 / 3" in lines and "- honest, 02_tiny: 1 / 1" in lines
    assert f"- blank, 01_tiny: 0 / 3; {Cause.BLANK}: test_add, test_double" in lines
    assert f"- blank, 02_tiny: 0 / 1; {Cause.NO_SUBMISSION}" in lines
    assert f"- renamed, 01_tiny: 2 / 3; {Cause.NOT_DEFINED}: test_add (`add` is not defined in your notebook)" in lines
    crash = next(line for line in lines if line.startswith("- crasher, 01_tiny:"))
    assert crash.startswith(f"- crasher, 01_tiny: 2 / 3; {Cause.CRASH}: test_add (ZeroDivisionError")
    assert lines.index("| 01_tiny | 4 | 4 | 1.75 / 3 | 1 | 0 |") < lines.index("- blank, 01_tiny: 0 / 3; blank: "
                                                                              "test_add, test_double")
    for line in (f"results:  {out / 'results.json'}", f"grades:   {out / 'grades.csv'}",
                 f"feedback: {out / 'feedback'}/"):
        assert any(printed_line.startswith(line) for printed_line in lines), line


def test_results_record_the_cause_of_each_error_and_missing_test(graded):
    out = graded[1]
    causes = {(student, chapter): [test.cause for test in result.tests]
              for (student, chapter), result in notebooks(out).items()}
    assert causes["blank", "01_tiny"] == [Cause.BLANK, Cause.BLANK] \
        and causes["crasher", "01_tiny"] == [Cause.CRASH, ""]
    assert causes["renamed", "01_tiny"] == [Cause.NOT_DEFINED, ""] \
        and causes["blank", "02_tiny"] == [Cause.NO_SUBMISSION]
    assert causes["honest", "01_tiny"] == ["", ""]


def test_progress_is_one_line_per_finished_job_when_stderr_is_not_a_terminal(graded):
    _, _, _, _, (_, errors) = graded
    progress = [line for line in errors.splitlines() if re.match(r"\[\d/5\] ", line)]
    assert any(line.startswith("grading 5 notebook(s), 2 at a time") for line in errors.splitlines()), errors
    assert [line[:5] for line in progress] == ["[1/5]", "[2/5]", "[3/5]", "[4/5]", "[5/5]"]
    assert any(re.match(r"\[\d/5\] honest, 01_tiny: 3 / 3 \(\d+ s\)$", line) for line in progress), progress


def test_what_students_get_is_readable_by_all_and_the_grades_by_the_instructor_only(graded):
    out = graded[1]

    def mode(path):
        return stat.S_IMODE(path.stat().st_mode)

    pages = sorted((out / "feedback").glob("*/*/*.html"))
    assert len(pages) == 5 and all(mode(page) == 0o644 for page in pages)
    folders = {out / "feedback"} | {page.parent for page in pages} | {page.parent.parent for page in pages}
    assert {folder: mode(folder) for folder in folders} == {folder: 0o755 for folder in folders}
    for name in ("results.json", "grades.csv", "gradebook.db"):
        assert mode(out / name) == 0o600, name


def test_feedback_renders_math_as_mathml_and_citations_as_text_with_no_script(graded):
    page = feedback_pages(graded[1])["honest"]
    assert "Vaswani et al. (2017) do (Vaswani et al., 2017), and masked" in page
    assert page.count("<math") >= 3 and "<msqrt>" in page and "<mfrac>" in page and "<mo>&gt;</mo>" in page
    assert "\\sqrt" not in page and "{cite:" not in page
    assert not re.findall(r"<script", page, re.IGNORECASE) and "MathJax.Hub" not in page and "cdnjs" not in page


def test_the_feedback_summary_table_keeps_its_columns_apart_and_a_status_on_one_line(graded):
    page = feedback_pages(graded[1])["honest"]
    head = page[:page.index("</head>")]
    assert "padding: 0.3em 0.8em" in head and "td:nth-child(2)" in head and "white-space: nowrap" in head
    assert re.search(r"<th>test</th>\s*<th>status</th>\s*<th[^>]*>points</th>\s*<th>message</th>", page), page[-3000:]


def test_regrade_grades_everything_again(graded):
    _, _, command, _, _ = graded
    status, (printed, _) = _run(command)
    assert status == 0 and "graded 0, unchanged 5" in printed
    status, (printed, _) = _run([*command, "--regrade"])
    assert status == 0 and "graded 5, unchanged 0" in printed
    assert "- renamed, 01_tiny: 2 / 3; not defined: test_add" in printed


def test_an_output_folder_git_would_commit_is_refused(course, tmp_path, capsys):
    root = tmp_path / "repository"
    root.mkdir()
    for name in ("solutions", "references.bib"):
        os.symlink(course[0] / name, root / name)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (tmp_path / "submissions" / "others").mkdir(parents=True)  # nothing to grade: quick
    (tmp_path / "submissions" / "others" / "notes.txt").write_text("no notebook here")
    assert cli.main(["grade", str(tmp_path / "submissions"), "--out", str(root / "out"), "--root", str(root)]) == 2
    [error] = capsys.readouterr().err.splitlines()
    assert "where git would commit the students' grades" in error
    (root / ".gitignore").write_text("/grading/\n")
    assert cli.main(["grade", str(tmp_path / "submissions"), "--out", str(root / "grading"), "--root", str(root)]) == 0
    assert "where git would commit" not in capsys.readouterr().err


def test_a_data_folder_given_through_a_link_is_the_one_the_sandbox_reads(tmp_path, monkeypatch):
    """BERTLAB_DATA naming a symbolic link: the sandbox binds the folder it points to, and its variable
    names that folder, where the student's code finds the data; the run's notes say which folder."""
    import sys

    from autograder.grade import _data_note
    from autograder.job import sandbox_options
    from autograder.run.sandbox import isolation_available

    data = tmp_path / "datasets"
    (data / "rt-polarity").mkdir(parents=True)
    (tmp_path / "link").symlink_to(data)
    monkeypatch.setenv("BERTLAB_DATA", str(tmp_path / "link"))
    options = sandbox_options(tmp_path, isolation_available()[0], ())
    assert options.share == (data.resolve(),) and options.variables["BERTLAB_DATA"] == str(data.resolve())
    assert str(data.resolve()) in _data_note(options)
    if options.isolate:
        with options.new_sandbox(Limits()) as sandbox:
            probe = "import os; print(sorted(os.listdir(os.environ['BERTLAB_DATA'])))"
            assert sandbox.run([sys.executable, "-c", probe], timeout=120).stdout.strip() == "['rt-polarity']"
    monkeypatch.setenv("BERTLAB_DATA", str(tmp_path / "nowhere"))
    assert "none in the sandboxes" in _data_note(sandbox_options(tmp_path, False, ()))


def test_the_summary_line_keeps_the_hint_of_a_long_message_whole():
    """A first line longer than the summary allows is cut, the hint of the known mistake after it is not."""
    hint = ("Hint: scale the scores by 1 / sqrt(d_k), the key's size (Q.shape[-1]), before the softmax, not by "
            "1 / d_k and not after it.")
    message = f"line 4: check(softmax)\nsoftmax: case 3 of 9 differs: {'x' * 400}\n  more detail\n{hint}"
    result = NotebookResult(student="ada", chapter="01_attention", origin="ada.ipynb", tests=(
        results.TestResult(grade_id="test_softmax", status=Status.FAILED, points=0, max_points=1, message=message),))
    line = result.line()
    assert line.endswith(f"({('softmax: case 3 of 9 differs: ' + 'x' * 400)[:SUMMARY_MESSAGE_CHARS - 1]}"
                         f"… {hint})"), line
