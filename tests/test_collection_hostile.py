"""No one file stops the collection of a class's submissions.

Each test puts a hostile file (or name) in SUBMISSIONS beside an honest student and a blank one, and
checks that collection does not raise, that the honest and blank students are collected as usual,
and that the hostile file is either collected with a problem that says what is wrong with it, or
skipped with its name and the reason. The classes of hostile files: notebooks that JSON or nbformat
cannot read (numbers too long, cells of the wrong types), nbformat-3 notebooks of too many cells,
more bytes than a student may hand in, corrupt zip files and zip members, pipes, names that cannot be
printed or encoded, names that pose as another student's id or look like another's name, files that
name another student from a chapter's folder or the top of SUBMISSIONS, floods of files that are not
notebooks, and forged nbgrader timestamps.
"""

import json
import os
import random
import struct
import time
import warnings
import zipfile
from datetime import datetime, timedelta, timezone

import nbformat
import pytest
from grading_helpers import ADD, DOUBLE, build_course, put, with_cells

from autograder.bounds import MAX_ZIP_DIRECTORY_BYTES
from autograder.collect import submissions
from autograder.collect.submissions import Layout, collect_submissions, look_alike_names, read_notebook, student_id
from autograder.core.chapters import load_chapters
from autograder.core.course import GradingError, grade_id
from autograder.core.results import ClassResults, Skipped

HONEST_TIME = datetime(2024, 1, 5, 10, 20, 30, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """The tiny course's released notebooks, and its chapters."""
    root = tmp_path_factory.mktemp("course")
    released = build_course(root)
    return released, load_chapters(root)


@pytest.fixture
def folder(tmp_path, course):
    """SUBMISSIONS with an honest student (nbgrader's layout, with its timestamp.txt) and a blank one."""
    released, _ = course
    folder = tmp_path / "class"
    put(folder, "honest/01_tiny/01_tiny.ipynb", with_cells(released["01_tiny"], add=ADD, double=DOUBLE))
    put(folder, "honest/01_tiny/timestamp.txt", f"{HONEST_TIME:%Y-%m-%d %H:%M:%S.%f} UTC")
    put(folder, "blank/01_tiny/01_tiny.ipynb", released["01_tiny"])
    return folder


def collected(folder, course):
    """What collection finds (it must not raise), once the honest and blank students are checked."""
    found, skipped = collect_submissions(folder, course[1])
    students = {(submission.student, submission.chapter): submission for submission in found}
    for student in ("honest", "blank"):
        submission = students[student, "01_tiny"]
        assert submission.problem is None and submission.origin == f"{student}/01_tiny/01_tiny.ipynb"
    assert students["honest", "01_tiny"].timestamp == HONEST_TIME
    assert not [item for item in skipped if item.student in ("honest", "blank")]
    return found, skipped


def outcome(found, skipped, origin: str) -> str:
    """The problem of the submission, or the reason of the skipped entry, that came from ``origin``."""
    outcomes = [s.problem for s in found if s.origin == origin] + [s.reason for s in skipped if s.path == origin]
    assert len(outcomes) == 1 and outcomes[0], (origin, found, skipped)
    return outcomes[0]


# --------------------------------------------------------------------------------------------------
# Notebooks that cannot be read as they are
# --------------------------------------------------------------------------------------------------


def test_a_number_too_long_for_python_is_the_notebook_s_problem(folder, course):
    number = "7" * 5000  # past Python's limit of 4300 digits
    notebook = nbformat.writes(course[0]["01_tiny"]).replace('"metadata": {', f'"metadata": {{"n": {number},', 1)
    put(folder, "mallory/01_tiny/01_tiny.ipynb", notebook)
    found, skipped = collected(folder, course)
    assert "a number too long to read" in outcome(found, skipped, "mallory/01_tiny/01_tiny.ipynb")


def test_cells_of_the_wrong_types_are_read_leniently(folder, course):
    notebook = json.loads(nbformat.writes(course[0]["01_tiny"]))
    notebook["cells"] += [{"cell_type": ["code"], "source": "print('a list of types')", "metadata": []},
                          {"cell_type": {"a": 1}, "source": {"not": "a string"}},
                          {"cell_type": "code", "source": ["x = 1\n", 2, None, "y = 2"], "metadata": {"nbgrader": []}},
                          {"cell_type": None}, "not a cell"]
    put(folder, "mallory/01_tiny/01_tiny.ipynb", json.dumps(notebook))
    found, _ = collected(folder, course)
    assert [s.problem for s in found if s.student == "mallory"] == [None]
    cells = read_notebook(json.dumps(notebook).encode())[0].cells[-4:]
    assert [(cell.cell_type, cell.source) for cell in cells] == [
        ("markdown", "print('a list of types')"), ("markdown", ""), ("code", "x = 1\ny = 2"), ("markdown", "")]
    nbformat.validate(read_notebook(json.dumps(notebook).encode())[0])


def test_lone_surrogates_escaped_in_the_json_are_replaced_so_the_notebook_can_be_written():
    data = json.dumps({"cells": [{"cell_type": "code", "source": ["x = '\ud800'", "\udcff"],
                                  "metadata": {"nbgrader": {"grade_id": "add\udfff", "solution": True}}}]})
    notebook, problem = read_notebook(data.encode())
    assert problem is None and notebook.cells[0].source == "x = '\ufffd'\ufffd"
    assert notebook.cells[0].metadata.nbgrader == {"grade_id": "add\ufffd", "solution": True}
    nbformat.writes(notebook).encode("utf-8")


@pytest.mark.parametrize("data, words", [
    (b'{"cells": [{"cell_type": "code", "source": "unterminated', "Unterminated string starting at; line 1, column"),
    (b'{"cells": [1, 2,, 3]}', "Expecting value; line 1, column 17"),
    (b'{"cells": [], "nbformat": ' + b"9" * 4301 + b"}", "number too long"),
    (b"[" * 100_000, "nested too deeply"),
    (b'{"worksheets": {"cells": []}, "nbformat": 3}', "the file is JSON but not a notebook"),
], ids=["unterminated", "syntax", "digits", "depth", "v3-no-cells"])
def test_json_that_cannot_be_read_is_named_in_plain_words(data, words):
    notebook, problem = read_notebook(data)
    assert notebook is None and words in problem and " at at " not in problem


def test_read_notebook_turns_what_it_does_not_foresee_into_a_problem(monkeypatch, course):
    def broken(metadata):
        raise TypeError("a bug, or a case no one thought of")

    monkeypatch.setattr(submissions, "_clean_nbgrader", broken)
    assert read_notebook(nbformat.writes(course[0]["01_tiny"]).encode()) == (
        None, "the file cannot be read as a notebook (TypeError)")


def test_read_notebook_never_raises_whatever_the_bytes(course):
    data = nbformat.writes(course[0]["01_tiny"]).encode()
    generator = random.Random(12)
    for _ in range(300):
        mutated = bytearray(data)
        for _ in range(generator.randint(1, 8)):
            where = generator.randrange(len(mutated))
            mutated[where:where + generator.randint(1, 4)] = bytes(generator.choices(b'{}[]":,0123456789 \\ntrue', k=3))
        notebook, problem = read_notebook(bytes(mutated))
        assert (notebook is None) != (problem is None)


# --------------------------------------------------------------------------------------------------
# Bounds: nbformat-3 notebooks, and the bytes of a student
# --------------------------------------------------------------------------------------------------


def v3_notebook(cells: int, outputs: int) -> str:
    """An nbformat-3 notebook of ``cells`` code cells, each with ``outputs`` outputs."""
    output = {"output_type": "stream", "stream": "stdout", "text": ["x\n"]}
    cell = {"cell_type": "code", "input": ["x = 1"], "language": "python", "metadata": {},
            "outputs": [output] * outputs}
    return json.dumps({"nbformat": 3, "nbformat_minor": 0, "metadata": {"name": ""},
                       "worksheets": [{"cells": [cell] * cells, "metadata": {}}]})


def test_nbformat_3_notebooks_are_counted_before_they_are_converted(folder, course, monkeypatch):
    monkeypatch.setattr(submissions, "MAX_CELLS", 50)
    monkeypatch.setattr(nbformat, "convert", lambda *args, **kwargs: pytest.fail("nbformat.convert was called"))
    with zipfile.ZipFile(folder / "mallory.zip", "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for number in range(4):
            archive.writestr(f"copy{number}/01_tiny.ipynb", v3_notebook(cells=60, outputs=500))
        archive.writestr("02_tiny.ipynb", v3_notebook(cells=1, outputs=100_000))  # cost nbformat a minute and 3 GB
    start = time.monotonic()
    found, skipped = collected(folder, course)
    assert time.monotonic() - start < 10
    assert "60 cells, more than the limit of 50" in outcome(found, skipped, "mallory.zip:copy3/01_tiny.ipynb")
    chapter_2 = next(s for s in found if s.student == "mallory" and s.chapter == "02_tiny")
    assert chapter_2.problem is None  # read, as one code cell


def test_an_honest_nbformat_3_notebook_reads_as_nbformat_converts_it(folder, course):
    honest = with_cells(course[0]["01_tiny"], add=ADD, double=DOUBLE)
    put(folder, "vera/01_tiny/01_tiny.ipynb", nbformat.writes(nbformat.convert(honest, 3)))
    found, _ = collected(folder, course)
    vera = next(s for s in found if s.student == "vera")
    assert vera.problem is None and vera.chapter == "01_tiny"
    notebook, _ = read_notebook(vera.read())
    expected = nbformat.convert(nbformat.convert(honest, 3), 4)
    assert [(c.cell_type, c.source, grade_id(c)) for c in notebook.cells] == [
        (c.cell_type, c.source, grade_id(c)) for c in expected.cells]


def test_a_student_s_bytes_are_bounded_over_all_their_files(folder, course, monkeypatch):
    size = len(nbformat.writes(course[0]["01_tiny"]).encode())
    monkeypatch.setattr(submissions, "MAX_STUDENT_BYTES", int(2.5 * size))
    with zipfile.ZipFile(folder / "mallory.zip", "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for number in range(4):
            archive.writestr(f"copy{number}/01_tiny.ipynb", nbformat.writes(course[0]["01_tiny"]))
    put(folder, "mallory/01_tiny/01_tiny.ipynb", course[0]["01_tiny"])  # the same student, read first
    found, skipped = collected(folder, course)
    refused = [item.path for item in skipped if "files exceed" in item.reason and item.student == "mallory"]
    assert refused == [f"mallory.zip:copy{number}/01_tiny.ipynb" for number in (1, 2, 3)]
    assert [s.problem for s in found if s.student == "mallory"] == [None]


def test_a_student_s_folders_are_walked_to_a_bounded_depth_and_count(folder, course, monkeypatch):
    monkeypatch.setattr(submissions, "MAX_ENTRIES", 3)
    deep = "deep/" + "/".join(f"level{n}" for n in range(submissions.MAX_FOLDER_DEPTH)) + "/01_tiny.ipynb"
    put(folder, deep, course[0]["01_tiny"])
    for number in range(5):
        put(folder, f"crowd/01_tiny/copy{number}.ipynb", course[0]["01_tiny"])
    found, skipped = collected(folder, course)
    assert any(item.path == deep.rpartition("/")[0] and "deeper than" in item.reason for item in skipped)
    assert not [s for s in found if s.student == "deep"]
    assert any(item.path == "crowd" and "only its first 3 files" in item.reason for item in skipped)


def test_a_student_s_skipped_entries_are_bounded_and_the_summary_shows_a_few(folder, course, monkeypatch):
    """A flood of files that are not notebooks (100,000 once gave 10,000 lines in the summary): results.json
    keeps MAX_SKIPPED_KEPT_PER_STUDENT of a student's entries and counts the rest in one more; the summary
    lists MAX_SKIPPED_SHOWN_PER_STUDENT of them, then how many more there are."""
    monkeypatch.setattr(submissions, "MAX_SKIPPED_KEPT_PER_STUDENT", 20)
    put(folder, "crowd/01_tiny/01_tiny.ipynb", course[0]["01_tiny"])
    for number in range(50):
        put(folder, f"crowd/notes/note{number:02}.txt", "not a notebook")
    put(folder, "quiet/01_tiny/notes.txt", "not a notebook")
    found, skipped = collected(folder, course)
    crowd = [item for item in skipped if item.student == "crowd"]
    assert [item.path for item in crowd[:20]] == [f"crowd/notes/note{number:02}.txt" for number in range(20)]
    assert crowd[20:] == [Skipped("crowd/notes/note20.txt", "this entry and 29 more of this student met after it "
                                  "were not graded and are not listed (at most 20 are listed per student)", "crowd")]
    summary = ClassResults([], skipped, "").summary().splitlines()
    listed = summary[summary.index("Not graded:") + 1:]
    not_a_notebook = "not a notebook (.ipynb) or a zip file"
    assert listed == [*(f"- crowd/notes/note{number:02}.txt: {not_a_notebook}" for number in range(5)),
                      "- ... and 16 more of crowd (all in results.json)",
                      f"- quiet/01_tiny/notes.txt: {not_a_notebook}",
                      "- quiet: no notebook (.ipynb) or zip file in this student's folder"]


# --------------------------------------------------------------------------------------------------
# Files and zip members that raise when read
# --------------------------------------------------------------------------------------------------


def corrupt_member_zip(path, notebook: str) -> None:
    """A zip file of a notebook whose deflated data starts with a block of a type that does not exist,
    then a sound copy."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("01_tiny.ipynb", notebook)
        archive.writestr("02_tiny.ipynb", notebook)
        first = archive.infolist()[0]
    data = bytearray(path.read_bytes())
    start = 30 + len(first.filename)  # the first member's local header, then its compressed data
    data[start:start + 8] = b"\xff" * 8  # the last block, of type 3 (reserved)
    path.write_bytes(bytes(data))


def test_a_corrupt_zip_member_is_its_own_problem_and_the_others_are_read(folder, course):
    notebook = nbformat.writes(course[0]["01_tiny"])
    corrupt_member_zip(folder / "mallory.zip", notebook)
    found, skipped = collected(folder, course)
    problem = outcome(found, skipped, "mallory.zip:01_tiny.ipynb")
    assert problem.startswith("the zip member cannot be read (zlib.error: Error -3 while decompressing data")
    sound = next(s for s in found if s.origin == "mallory.zip:02_tiny.ipynb")
    assert sound.read() == notebook.encode()
    with pytest.raises(GradingError, match="mallory.zip:01_tiny.ipynb cannot be read"):
        next(s for s in found if s.origin == "mallory.zip:01_tiny.ipynb").read()


def zip_of(path, members: list[tuple[str, str]]) -> None:
    """A zip file of the (name, text) members, in that order, names repeated as given."""
    with warnings.catch_warnings(), zipfile.ZipFile(path, "w") as archive:
        warnings.simplefilter("ignore", UserWarning)  # zipfile warns of a duplicate name, and writes it
        for name, text in members:
            archive.writestr(name, text)


def test_zip_members_that_share_a_name_are_told_apart_and_each_read_as_itself(folder, course):
    answered = nbformat.writes(with_cells(course[0]["01_tiny"], add=ADD, double=DOUBLE))
    blank = nbformat.writes(course[0]["01_tiny"])
    # mallory's readable notebook comes first, then a member of the same name that is not JSON;
    # trudy's two readable notebooks share a name, and the last one is the one unzipping leaves.
    zip_of(folder / "mallory.zip", [("01_tiny.ipynb", answered), ("01_tiny.ipynb", "not json")])
    zip_of(folder / "trudy.zip", [("01_tiny.ipynb", blank), ("01_tiny.ipynb", answered)])
    found, skipped = collected(folder, course)
    graded = {s.student: s for s in found}
    assert graded["mallory"].origin == "mallory.zip:01_tiny.ipynb (member 1)"
    assert graded["mallory"].read() == answered.encode()  # not the other member of that name
    assert "2 submissions found" in graded["mallory"].notes[-1]
    assert graded["trudy"].origin == "trudy.zip:01_tiny.ipynb (member 2)"
    assert graded["trudy"].read() == answered.encode()


def test_a_zip_file_whose_list_of_members_is_too_large_is_not_opened(folder, course, monkeypatch):
    notebook = nbformat.writes(course[0]["01_tiny"])
    names = [f"{number:03}{'n' * 6_000}.ipynb" for number in range(200)]  # 200 members, 1.2 MB of names
    zip_of(folder / "mallory.zip", [(name, notebook) for name in names])
    zip_of(folder / "eve.zip", [("01_tiny.ipynb", notebook)])
    opened = []
    monkeypatch.setattr(zipfile, "ZipFile", lambda file, *args, zip_file=zipfile.ZipFile: (
        opened.append(file), zip_file(file, *args))[1])
    found, skipped = collected(folder, course)
    assert outcome(found, skipped, "mallory.zip").startswith(
        "the zip file cannot be read (ValueError: its list of members takes 1,2")
    assert f"more than the limit of {MAX_ZIP_DIRECTORY_BYTES:,}" in outcome(found, skipped, "mallory.zip")
    assert next(s for s in found if s.student == "eve").problem is None
    assert len(opened) == 1  # eve's: zipfile never built mallory's list of members


def test_a_zip_whose_name_is_flagged_utf8_but_is_not_is_its_own_problem(folder, course):
    path = folder / "mallory.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("01_tiny.ipynb", nbformat.writes(course[0]["01_tiny"]))
    data = bytearray(path.read_bytes().replace(b"01_tiny.ipynb", b"\xff\xfe_tiny.ipynb"))
    central = data.index(b"PK\x01\x02")
    for flags in (6, central + 8):  # the general purpose flags of the local and of the central header
        struct.pack_into("<H", data, flags, struct.unpack_from("<H", data, flags)[0] | 0x800)
    path.write_bytes(bytes(data))
    found, skipped = collected(folder, course)
    assert outcome(found, skipped, "mallory.zip").startswith("the zip file cannot be read (UnicodeDecodeError: ")


def test_a_file_that_raises_anything_is_skipped_with_its_name(folder, course, monkeypatch):
    put(folder, "mallory/01_tiny/01_tiny.ipynb", course[0]["01_tiny"])
    read_file = submissions._read_file

    def failing(path, size):
        if "mallory" in str(path):
            raise RuntimeError("the disk is on fire\nand this line is not shown")
        return read_file(path, size)

    monkeypatch.setattr(submissions, "_read_file", failing)
    found, skipped = collected(folder, course)
    reason = outcome(found, skipped, "mallory/01_tiny/01_tiny.ipynb")
    assert reason == "cannot be read (RuntimeError: the disk is on fire)"


def test_a_folder_that_raises_anything_is_skipped_with_its_name(folder, course, monkeypatch):
    put(folder, "mallory/01_tiny/01_tiny.ipynb", course[0]["01_tiny"])
    put(folder, "01_tiny/trudy/01_tiny.ipynb", course[0]["01_tiny"])
    put(folder, "01_tiny/zed.ipynb", course[0]["01_tiny"])
    read_timestamp_file, walk = submissions._read_timestamp_file, submissions._Collector.walk

    def failing_stamp(folder):
        if "mallory" in str(folder):
            raise PermissionError("no entry")
        return read_timestamp_file(folder)

    def failing_walk(self, folder, student, depth=0):
        if student == "trudy":
            raise OSError("the folder went away")
        return walk(self, folder, student, depth)

    monkeypatch.setattr(submissions, "_read_timestamp_file", failing_stamp)
    monkeypatch.setattr(submissions._Collector, "walk", failing_walk)
    found, skipped = collected(folder, course)
    assert outcome(found, skipped, "mallory") == "cannot be read (PermissionError: no entry)"
    assert outcome(found, skipped, "01_tiny/trudy") == "cannot be read (OSError: the folder went away)"
    assert [s.origin for s in found if s.student == "zed"] == ["01_tiny/zed.ipynb"]  # after trudy, in her chapter


def test_a_pipe_is_skipped_not_waited_on(folder, course):
    os.mkfifo(folder / "mallory.ipynb")
    os.mkfifo(folder / "trudy.zip")
    found, skipped = collected(folder, course)
    assert "is not a regular file" in outcome(found, skipped, "mallory.ipynb")
    assert "is not a regular file" in outcome(found, skipped, "trudy.zip")


# --------------------------------------------------------------------------------------------------
# Names
# --------------------------------------------------------------------------------------------------


def test_every_name_given_out_is_printable_and_encodable(folder, course):
    blank = course[0]["01_tiny"]
    put(folder, os.fsdecode(b"bob\xff") + "/01_tiny/01_tiny.ipynb", blank)
    put(folder, "\x1b[31mred/01_tiny/01_tiny.ipynb", blank)
    put(folder, "\x1b[2Jclear\u202e.txt", "hidden commands")
    with zipfile.ZipFile(folder / "eve\x07.zip", "w") as archive:
        archive.writestr("\x1b]0;owned\x07/01_tiny.ipynb", nbformat.writes(blank))
        archive.writestr("notes\n\x1b[2J.txt", "x")
    found, skipped = collected(folder, course)
    texts = [text for s in found for text in (s.student, s.chapter, s.origin, s.problem or "", *s.notes)]
    texts += [text for item in skipped for text in (item.path, item.reason, item.student or "")]
    for text in texts:
        text.encode("utf-8")
        assert text.isprintable(), text
    ClassResults([], skipped, "").to_json().encode("utf-8")  # results.json can be written
    origins = {s.origin for s in found} | {item.path for item in skipped}
    assert {"bob\\xff/01_tiny/01_tiny.ipynb", "\\x1b[31mred/01_tiny/01_tiny.ipynb", "\\x1b[2Jclear\\u202e.txt",
            "eve\\x07.zip:\\x1b]0;owned\\x07/01_tiny.ipynb", "eve\\x07.zip:notes\\n\\x1b[2J.txt"} <= origins
    assert any("the name 'bob\\xff' is graded as 'bob-" in note for s in found for note in s.notes)
    for submission in found:
        assert all(character.isalnum() or character in "._-" for character in submission.student)


def test_a_name_shaped_as_another_s_id_gets_an_id_of_its_own(folder, course):
    released = course[0]
    put(folder, "alice smith/01_tiny/01_tiny.ipynb", with_cells(released["01_tiny"], add=ADD, double=DOUBLE))
    put(folder, f"{student_id('alice smith')}/01_tiny/01_tiny.ipynb", released["01_tiny"])
    found, _ = collected(folder, course)
    alices = {s.origin.split("/")[0]: s for s in found if s.student.startswith("alice_smith")}
    assert alices.keys() == {"alice smith", "alice_smith-b6a89e"}
    assert alices["alice smith"].student == "alice_smith-b6a89e"
    assert alices["alice_smith-b6a89e"].student.startswith("alice_smith-b6a89e-")
    assert alices["alice smith"].read() != alices["alice_smith-b6a89e"].read()  # each with its own notebook


def test_two_names_that_give_one_id_are_never_merged(folder, course, monkeypatch):
    def one_id_for_two_names(name):
        return "ann-0a0a0a" if name in ("ann 1", "ann 2") else student_id(name)

    monkeypatch.setattr(submissions, "student_id", one_id_for_two_names)
    put(folder, "ann 1/01_tiny/01_tiny.ipynb", with_cells(course[0]["01_tiny"], add=ADD, double=DOUBLE))
    put(folder, "ann 2/01_tiny/01_tiny.ipynb", course[0]["01_tiny"])
    found, skipped = collected(folder, course)
    assert [s.origin for s in found if s.student == "ann-0a0a0a"] == ["ann 1/01_tiny/01_tiny.ipynb"]
    reason = outcome(found, skipped, "ann 2/01_tiny/01_tiny.ipynb")
    assert "'ann 2' and 'ann 1' give one id, ann-0a0a0a" in reason


def test_names_that_look_alike_are_told_to_the_instructor(folder, course):
    blank = course[0]["01_tiny"]
    put(folder, "alice/01_tiny/01_tiny.ipynb", blank)
    put(folder, "\u0430lice/01_tiny/01_tiny.ipynb", blank)  # a Cyrillic а
    put(folder, "Émile Zola/01_tiny/01_tiny.ipynb", blank)
    put(folder, "Emile Zola/01_tiny/01_tiny.ipynb", blank)
    found, _ = collected(folder, course)
    assert {"alice", "\u0430lice"} <= {s.student for s in found}
    emile = student_id("Émile Zola").replace("É", "\\xc9")
    assert look_alike_names(found) == [
        f"students whose names look alike: {student_id('Emile Zola')} ('Emile Zola'), {emile} ('\\xc9mile Zola')",
        "students whose names look alike: alice, \\u0430lice"]


def test_names_alike_once_folded_by_width_padding_and_dots_are_told_to_the_instructor(folder, course):
    """``ｈｏｎｅｓｔ``, ``．．／honest`` and ``honest `` get ids of their own, which once hid that they pose as
    ``honest``: the names are compared as found, once folded (NFKC, case, padding and dots). Plain names that
    differ only in case are not listed."""
    posers = ("\uff48\uff4f\uff4e\uff45\uff53\uff54", "\uff0e\uff0e\uff0fhonest", "honest ")
    for name in (*posers, "HONEST", "Alice", "alice"):
        put(folder, f"{name}/01_tiny/01_tiny.ipynb", course[0]["01_tiny"])
    found, _ = collected(folder, course)
    assert {student_id(name) for name in posers} <= {s.student for s in found}
    named = sorted(f"{student_id(name)} ('{name}')".encode("ascii", "backslashreplace").decode() for name in posers)
    assert look_alike_names(found) == [f"students whose names look alike: HONEST, honest, {', '.join(named)}"]
    assert "honest-" in named[0] and "('\\uff0e\\uff0e\\uff0fhonest')" in " ".join(named)


# --------------------------------------------------------------------------------------------------
# Timestamps
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stamp, words", [
    ("2999-01-01 00:00:00.000000 UTC", "it is in the future: 2999-01-01 00:00 UTC"),
    (f"{datetime.now(timezone.utc) + timedelta(days=3):%Y-%m-%d %H:%M:%S} UTC", "it is in the future"),
    ("next \x1b[2J tuesday" + "!" * 200, "(ValueError: not a date: next \\x1b[2J tu…)"),
    ("2024-01-05 10:20:30 ../../../../etc/passwd", "not a date"),
    ("2024-99-99 10:20:30 UTC", "ParserError"),
], ids=["far-future", "in-three-days", "not-a-date", "a-path-as-time-zone", "no-such-day"])
def test_a_forged_timestamp_is_not_used(folder, course, stamp, words):
    put(folder, "mallory/01_tiny/01_tiny.ipynb", course[0]["01_tiny"])
    put(folder, "mallory/01_tiny/timestamp.txt", stamp)
    found, _ = collected(folder, course)
    mallory = next(s for s in found if s.student == "mallory")
    assert abs(mallory.timestamp - datetime.now(timezone.utc)) < timedelta(minutes=5)  # the file's time
    note = next(note for note in mallory.notes if "timestamp.txt was ignored" in note)
    assert words in note and note.isprintable() and len(note) <= 110


# --------------------------------------------------------------------------------------------------
# Messages that say what happened (issue 27)
# --------------------------------------------------------------------------------------------------


def test_an_empty_file_is_called_empty(folder, course):
    put(folder, "hollow/01_tiny/01_tiny.ipynb", "")
    put(folder, "spaces/01_tiny/01_tiny.ipynb", " \n\t\n")
    found, skipped = collected(folder, course)
    for student in ("hollow", "spaces"):
        assert outcome(found, skipped, f"{student}/01_tiny/01_tiny.ipynb") == "the file is empty"


def test_a_notebook_under_another_chapter_s_file_name_is_graded_by_its_folder_and_cells_with_a_note(folder, course):
    released, _ = course
    put(folder, "frank/01_tiny/02_tiny.ipynb", with_cells(released["01_tiny"], add=ADD))
    found, _ = collected(folder, course)
    frank = next(submission for submission in found if submission.student == "frank")
    assert frank.chapter == "01_tiny" and frank.problem is None
    assert frank.notes == ["the file is named 02_tiny.ipynb, the notebook of chapter 02_tiny, but it is graded as "
                           "chapter 01_tiny, which its folder and its cells say it is"]
    assert not any(submission.notes for submission in found if submission.student in ("honest", "blank"))


def test_an_empty_submissions_folder_is_an_error_that_says_so(tmp_path, course):
    (tmp_path / "class").mkdir()
    with pytest.raises(GradingError, match="is empty; expected a folder holding one folder per student"):
        collect_submissions(tmp_path / "class", course[1])


# --------------------------------------------------------------------------------------------------
# Layouts: a file that names a student from outside the student's own folder
# --------------------------------------------------------------------------------------------------


def test_a_file_named_after_a_student_in_a_chapter_s_folder_does_not_replace_their_own(folder, course):
    """The attack: a blank notebook at ``01_tiny/honest.ipynb``, newer than honest's own, was graded as
    honest's (full marks became 0). Honest's own folder counts, and the other file is reported, with both
    origins and the option that would grade it."""
    put(folder, "mallory/01_tiny/01_tiny.ipynb", course[0]["01_tiny"])
    put(folder, "01_tiny/honest.ipynb", course[0]["01_tiny"])  # newer than honest's own
    found, skipped = collect_submissions(folder, course[1])
    graded = {s.student: s for s in found}
    assert {student: s.origin for student, s in graded.items()} == {
        student: f"{student}/01_tiny/01_tiny.ipynb" for student in ("blank", "honest", "mallory")}
    assert graded["honest"].layout == Layout.STUDENT_FOLDERS and graded["honest"].timestamp == HONEST_TIME
    assert graded["honest"].passed_over == ["01_tiny/honest.ipynb"] and not graded["honest"].notes
    assert skipped == [Skipped("01_tiny/honest.ipynb", "not graded: honest's 01_tiny is also in the student's own "
                               "folder, honest/01_tiny/01_tiny.ipynb, which was graded; --prefer chapter-folders "
                               "grades this one (a chapter's folder) instead", "honest")]


ORIGINS = {Layout.STUDENT_FOLDERS: "honest/01_tiny/01_tiny.ipynb", Layout.CHAPTER_FOLDERS: "01_tiny/honest.ipynb",
           Layout.FILES: "honest.ipynb"}


@pytest.mark.parametrize("prefer", list(Layout))
def test_of_a_student_s_chapter_in_several_layouts_the_instructor_s_choice_counts_and_the_others_come_first(
        folder, course, prefer):
    for origin in ORIGINS.values():
        if not (folder / origin).exists():
            put(folder, origin, course[0]["01_tiny"])
    for number in range(10):
        put(folder, f"honest/01_tiny/note{number}.txt", "not a notebook")  # after what was passed over
    found, skipped = collect_submissions(folder, course[1], prefer)
    honest = next(s for s in found if s.student == "honest")
    assert (honest.origin, honest.layout) == (ORIGINS[prefer], prefer)
    others = [layout for layout in Layout if layout != prefer]
    assert honest.passed_over == [ORIGINS[layout] for layout in others]
    assert [item.path for item in skipped[:2]] == honest.passed_over
    for item, layout in zip(skipped, others):
        graded_instead = f", {ORIGINS[prefer]}, which was graded; --prefer {layout} grades this one ({layout.place})"
        assert graded_instead in item.reason
    summary = ClassResults([], skipped, "").summary()
    assert all(f"- {origin}: not graded: honest's 01_tiny is also in" in summary for origin in honest.passed_over)


def test_without_a_submission_in_the_preferred_layout_the_most_specific_one_counts(folder, course):
    put(folder, "01_tiny/honest/01_tiny.ipynb", course[0]["01_tiny"])
    found, skipped = collect_submissions(folder, course[1], Layout.FILES)
    assert next(s for s in found if s.student == "honest").origin == "honest/01_tiny/01_tiny.ipynb"
    assert [(item.path, item.student) for item in skipped] == [("01_tiny/honest/01_tiny.ipynb", "honest")]
    assert "--prefer chapter-folders grades this one" in skipped[0].reason
