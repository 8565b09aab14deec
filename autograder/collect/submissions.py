"""What a class handed in: the submissions found in SUBMISSIONS, read, named, and what was skipped.

:func:`collect_submissions` reads a folder laid out as nbgrader collects it
(``<student>/<chapter>/<notebook>.ipynb`` and its ``timestamp.txt``), or as ``<chapter>/<student>.ipynb``,
or holding zip files and notebooks named by student (``alice.zip``, ``alice.ipynb``): three layouts
(:class:`Layout`), each naming a submission's student its own way. A notebook's chapter comes from its
path, else from its graded cells; a student's name becomes a safe id (:func:`student_id`); of several
submissions for one (student, chapter) in one layout the newest readable one counts, and of several
layouts the one the instructor prefers (the student's own folder by default), the others reported: a
file named after a student elsewhere never replaces their own folder unnoticed. What cannot be graded
(not JSON, another chapter's notebook, too large) is kept with the reason, to be graded as such.

It trusts nothing in the folder, and no one file stops the collection of the others:

- Only regular files are read, and links are never followed: a symbolic link (a notebook, a folder,
  a zip member), a pipe or a device is skipped, with why.
- Every folder and file it does not grade is reported (:class:`autograder.core.results.Skipped`): hidden
  files, other kinds of files, a student folder without a notebook.
- Each file and each zip member is read on its own: whatever goes wrong with one (a folder that cannot
  be listed, a zip file that cannot be opened, a member whose data is corrupt) is reported for that
  one, skipped or kept with its problem, and the others are read.
- Files are read one at a time and at most ``MAX_NOTEBOOK_BYTES`` each, and at most
  ``MAX_STUDENT_BYTES`` for one student (all their files and zip members together); a
  :class:`Submission` keeps where its bytes are and their digest, not the bytes. A zip file is read
  member by member, at most ``MAX_ZIP_MEMBERS`` members, and only when its list of members is at most
  ``MAX_ZIP_DIRECTORY_BYTES`` (:func:`_open_zip`); nested zips are not opened. A member is known by its
  place in the zip file, not by its name, which two members may share.
- Folders are walked ``MAX_FOLDER_DEPTH`` levels deep and ``MAX_ENTRIES`` entries per student, and
  at most ``MAX_SKIPPED_KEPT_PER_STUDENT`` skipped entries are kept per student, the rest counted in
  one more (these bounds are in :mod:`autograder.bounds`).
- Every name it gives out (origins, skipped paths, notes) is printable and encodable as UTF-8: a byte
  of a file name that is not UTF-8 is written ``\\xff``, a control character escaped. Two names never
  share an id (:func:`collect_submissions`); :func:`look_alike_names` tells the instructor about
  names that differ only by letters that look alike, width, case, accents or padding.
- nbgrader's ``timestamp.txt`` counts only when it is a date no later than a day from now; else the
  file's modification time counts, and a note says why.

:func:`read_notebook` parses a submission leniently into a valid notebook, or names the problem; it
never raises. It counts the cells before it builds anything, and reads an nbformat-3 notebook itself
(only what grading keeps) rather than with ``nbformat.convert``, which validates and converts every
output: a 4 MB notebook of 100,000 outputs cost it a minute and 3 GB.
"""

import contextlib
import functools
import hashlib
import json
import os
import re
import stat
import unicodedata
import zipfile
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from enum import StrEnum
from pathlib import Path
from typing import NamedTuple

from autograder.bounds import (
    MAX_CELLS,
    MAX_ENTRIES,
    MAX_FOLDER_DEPTH,
    MAX_ID_CHARS,
    MAX_NAME_CHARS,
    MAX_NOTEBOOK_BYTES,
    MAX_REASON_CHARS,
    MAX_SKIPPED_KEPT_PER_STUDENT,
    MAX_STUDENT_BYTES,
    MAX_TIMESTAMP_BYTES,
    MAX_TIMESTAMP_REASON_CHARS,
    MAX_ZIP_DIRECTORY_BYTES,
    MAX_ZIP_MEMBERS,
    TIMESTAMP_SLACK,
)
from autograder.core import Chapter, GradingError, Skipped, grade_id
from autograder.text import printable

UNKNOWN_CHAPTER = "(unknown)"
EXPECTED_LAYOUT = ("a folder holding one folder per student, laid out as nbgrader collects them "
                   "(<student>/<chapter>/<notebook>.ipynb), or <chapter>/<student>.ipynb, or zip files and "
                   "notebooks named by student (alice.zip, alice.ipynb)")
NBGRADER_KEYS = {"grade_id": str, "grade": bool, "solution": bool, "locked": bool, "task": bool,
                 "points": (int, float), "schema_version": int}
LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # JSON may escape one; UTF-8 cannot hold it
ID_SUFFIX = re.compile(r"-[0-9a-f]{6}\Z")  # the hash that student_id gives a name it had to change
# What nbgrader writes in timestamp.txt: a date, a time, and a time zone's name or offset (a name,
# not a path: nbgrader's parser would open a file of that name).
NBGRADER_TIMESTAMP = re.compile(r"[0-9][0-9T:. +-]{0,40}( [A-Za-z0-9_+-]{1,40}(/[A-Za-z0-9_+-]{1,40})?)?")
# Cyrillic, Greek and Latin letters drawn like the Latin letters they pass for.
LOOK_ALIKE_LETTERS = str.maketrans({look_alike: latin for latin, look_alikes in {
    "a": "аα", "c": "с", "d": "ԁ", "e": "е", "g": "ɡ", "h": "һ", "i": "іι", "j": "ј", "k": "кκ", "o": "оο",
    "p": "рρ", "q": "ԛ", "s": "ѕ", "u": "υ", "v": "ν", "w": "ԝ", "x": "х", "y": "у", "A": "АΑ", "B": "ВΒ",
    "C": "С", "E": "ЕΕ", "H": "НΗ", "I": "ІΙ", "J": "Ј", "K": "КΚ", "M": "МΜ", "N": "Ν", "O": "ОΟ", "P": "РΡ",
    "S": "Ѕ", "T": "ТΤ", "X": "ХΧ", "Y": "УΥ", "Z": "Ζ"}.items() for look_alike in look_alikes})


class Layout(StrEnum):
    """How SUBMISSIONS names a submission's student, from the most specific to the least: the student's
    own folder (``<student>/...``, nbgrader's ``<student>/<chapter>/<notebook>.ipynb``), a file or folder
    in a chapter's folder (``<chapter>/<student>.ipynb``, ``<chapter>/<student>/...``), or a file at its
    top (``<student>.ipynb``, ``<student>.zip``). The value is the name ``autograder grade --prefer`` takes."""

    STUDENT_FOLDERS = "student-folders"
    CHAPTER_FOLDERS = "chapter-folders"
    FILES = "files"

    @property
    def place(self) -> str:
        """Where a submission of this layout is, in words."""
        return {Layout.STUDENT_FOLDERS: "the student's own folder", Layout.CHAPTER_FOLDERS: "a chapter's folder",
                Layout.FILES: "a file named by the student"}[self]


class ZipMember(NamedTuple):
    """A member of a zip file: its place in the zip file's list of members, and its name."""

    position: int
    name: str


@dataclass
class Submission:
    """One notebook of one student for one chapter, as found in SUBMISSIONS (its bytes stay there)."""

    student: str  # the id of the student's name (student_id)
    name: str  # the student's name as found (a folder's, a file's), raw: given out only escaped (look_alike_names)
    layout: Layout  # how SUBMISSIONS named the student
    chapter: str  # UNKNOWN_CHAPTER when it cannot be told
    origin: str  # where it came from, relative to SUBMISSIONS (a zip member after a colon), printable
    path: Path  # the notebook, or the zip file that holds it
    member: ZipMember | None  # the zip member
    digest: str  # sha256 of its bytes
    timestamp: datetime
    problem: str | None = None  # why it cannot be graded as a notebook of that chapter
    notes: list[str] = field(default_factory=list)
    passed_over: list[str] = field(default_factory=list)  # the origins of other layouts not graded for this one

    def read(self) -> bytes:
        """The submission's bytes, as they were when collected (GradingError if they changed or cannot be read)."""
        try:
            data = (_read_member(self.path, self.member) if self.member is not None
                    else _read_file(self.path, MAX_NOTEBOOK_BYTES + 1))
        except Exception as error:  # a corrupt zip member raises zlib's error, among others
            raise GradingError(f"{self.origin} cannot be read ({error_line(error)})") from error
        if hashlib.sha256(data).hexdigest() != self.digest:
            raise GradingError(f"{self.origin} changed while it was being graded")
        return data

    @property
    def file_name(self) -> str:
        """The name of the notebook's file (of the zip member, without its folders)."""
        return Path(self.member.name if self.member is not None else self.path.name).name


def _cleaned(name: str) -> str:
    """A name as its id keeps it: NFKC-folded (fullwidth letters as ASCII ones), each run of characters
    other than letters, digits, '.', '_' and '-' (spaces, slashes) as '_', without '.', '_' and '-' at
    its ends, at most MAX_ID_CHARS characters."""
    return re.sub(r"[^\w.-]+", "_", unicodedata.normalize("NFKC", name)).strip("._-")[:MAX_ID_CHARS] or "student"


def student_id(name: str) -> str:
    """A safe gradebook id for a student's name: letters, digits, '.', '_' and '-' (:func:`_cleaned`).

    A name that had to change gets a short hash of itself (``-`` and 6 hex digits); that ending is
    reserved, so a name that already ends so gets a hash too, and no name is kept as another's id.
    """
    cleaned = _cleaned(name)
    if cleaned == name and not ID_SUFFIX.search(name):
        return cleaned
    return f"{cleaned}-{hashlib.sha1(name.encode('utf-8', 'surrogateescape')).hexdigest()[:6]}"


def _escaped(character: str) -> str:
    """A character as it may be shown: a byte of a file name that is not UTF-8 as ``\\xff``, a
    character that is not printable as Python writes it (``\\x1b``, ``\\u202e``)."""
    if "\udc80" <= character <= "\udcff":  # how os.fsdecode keeps such a byte
        return f"\\x{ord(character) - 0xdc00:02x}"
    return character if character.isprintable() else character.encode("unicode_escape").decode("ascii")


def _shown(text: str, limit: int = MAX_NAME_CHARS) -> str:
    """``text`` (a file name, a zip member's, a student's) escaped as :func:`_escaped` does, cut to ``limit``."""
    return printable("".join(map(_escaped, text[: limit + 1])), limit)


def error_line(error: BaseException, limit: int = MAX_REASON_CHARS) -> str:
    """An exception as one printable line: its type (with its module, when not a built-in) and its message."""
    kind = type(error).__qualname__ if type(error).__module__ == "builtins" else (
        f"{type(error).__module__}.{type(error).__qualname__}")
    message = next(iter(str(error).splitlines()), "")
    return _shown(f"{kind}: {message}" if message else kind, limit)


def _skeleton(name: str) -> str:
    """What a student's name looks like: as its id cleans it (:func:`_cleaned`: NFKC-folded, padding and
    dots trimmed), without accents or case, and with look-alike letters as the Latin ones."""
    decomposed = unicodedata.normalize("NFKD", _cleaned(name))
    bare = "".join(character for character in decomposed if not unicodedata.combining(character))
    return bare.translate(LOOK_ALIKE_LETTERS).casefold()


def _plain(name: str) -> bool:
    """Whether a name is ASCII and its own id: nothing in it was cleaned or can pass for another letter."""
    return name.isascii() and student_id(name) == name


def look_alike_names(submissions: list[Submission]) -> list[str]:
    """One line per group of students whose names differ but look alike once folded (:func:`_skeleton`),
    one of them not :func:`_plain` (``аlice`` with a Cyrillic а, ``ｈｏｎｅｓｔ``, ``．．／honest`` or ``honest ``
    beside ``honest``): for the instructor to check that they are different students. Plain names that
    differ only in case (``Alice``, ``alice``) are not listed: they read apart. Each student is written as
    their id, then the name as found when it is not the id; what is not ASCII as its code (``\\u0430lice``)."""
    groups = defaultdict(set)
    for submission in submissions:
        groups[_skeleton(submission.name)].add((submission.student, submission.name))
    return sorted("students whose names look alike: " + ", ".join(_as_ascii(*student) for student in sorted(group))
                  for group in groups.values() if len(group) > 1 and not all(_plain(name) for _, name in group))


def _as_ascii(student: str, name: str) -> str:
    """A student's id, and their name as found when it is not the id, in ASCII (``honest-3f9a2c ('honest ')``)."""
    shown = student if name == student else f"{student} ('{_shown(name)}')"
    return shown.encode("ascii", "backslashreplace").decode()


def _text(text: str) -> str:
    """A string of a submission as a notebook can be written with it: a lone surrogate as U+FFFD."""
    return LONE_SURROGATE.sub("\N{REPLACEMENT CHARACTER}", text)


def _clean_nbgrader(metadata) -> dict | None:
    """A submission's nbgrader metadata, with only the keys grading reads, of their types."""
    if not isinstance(metadata, dict) or not isinstance(metadata.get("grade_id"), str):
        return None
    return {key: _text(value) if isinstance(value, str) else value for key, value in metadata.items()
            if key in NBGRADER_KEYS and isinstance(value, NBGRADER_KEYS[key])
            and not (key == "points" and isinstance(value, bool))}


def _parse_json(data: bytes):
    """(the JSON value, None), or (None, why the bytes are not JSON)."""
    if not data.strip():
        return None, "the file is empty"
    try:
        return json.loads(data.decode("utf-8-sig")), None
    except UnicodeDecodeError:
        return None, "the file is not UTF-8 text, so not a notebook"
    except json.JSONDecodeError as error:
        return None, f"the file is not valid JSON ({error.msg}; line {error.lineno}, column {error.colno})"
    except RecursionError:
        return None, "the file is JSON nested too deeply to be a notebook"
    except ValueError:  # the one other error of json.loads: an integer past Python's limit of digits
        return None, "the file is not valid JSON: it holds a number too long to read"


def _source(source) -> str:
    """A cell's source: a string, or the strings of a list of lines (anything else is no source)."""
    if isinstance(source, list):
        source = "".join(line for line in source if isinstance(line, str))
    return _text(source) if isinstance(source, str) else ""


def _upgraded(cell):
    """A cell of an nbformat-3 notebook (a code cell's source in ``input``, a ``heading`` cell) in
    nbformat 4's terms, as ``nbformat.convert`` would make it; any other cell as it is."""
    if not isinstance(cell, dict):
        return cell
    if cell.get("cell_type") == "code" and "source" not in cell:
        return {**cell, "source": cell.get("input", "")}
    if cell.get("cell_type") == "heading":
        level = cell["level"] if isinstance(cell.get("level"), int) and 1 <= cell["level"] <= 6 else 1
        return {**cell, "cell_type": "markdown",
                "source": "#" * level + " " + " ".join(_source(cell.get("source")).splitlines())}
    return cell


def _submitted_cells(raw: dict) -> list | None:
    """The cells of a parsed notebook, as they are (an nbformat-3 notebook's are in its worksheets);
    None when it has no list of cells."""
    if raw.get("nbformat") == 3 and isinstance(raw.get("worksheets"), list):
        return [cell for sheet in raw["worksheets"] if isinstance(sheet, dict) and isinstance(sheet.get("cells"), list)
                for cell in sheet["cells"]]
    return raw["cells"] if isinstance(raw.get("cells"), list) else None


def _lenient_cell(cell):
    """A valid nbformat-4 cell with a submitted cell's type, source and nbgrader metadata, or None
    for what is not a cell. A cell of an unknown type is kept as Markdown."""
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_raw_cell

    if not isinstance(cell, dict):
        return None
    makers = {"code": new_code_cell, "markdown": new_markdown_cell, "raw": new_raw_cell}
    kind = cell.get("cell_type")
    make = makers.get(kind, new_markdown_cell) if isinstance(kind, str) else new_markdown_cell
    metadata = cell.get("metadata") if isinstance(cell.get("metadata"), dict) else {}
    nbgrader = _clean_nbgrader(metadata.get("nbgrader"))
    return make(source=_source(cell.get("source")), metadata={"nbgrader": nbgrader} if nbgrader else {})


def _read_notebook(data: bytes):
    """:func:`read_notebook`, which may raise on what it does not foresee."""
    from nbformat.v4 import new_notebook

    if len(data) > MAX_NOTEBOOK_BYTES:
        return None, f"the file is {len(data) / 1e6:.0f} MB, more than the limit of {MAX_NOTEBOOK_BYTES / 1e6:.0f} MB"
    raw, problem = _parse_json(data)
    if problem:
        return None, problem
    cells = _submitted_cells(raw) if isinstance(raw, dict) else None
    if cells is None:
        return None, "the file is JSON but not a notebook (it has no list of cells)"
    if len(cells) > MAX_CELLS:
        return None, f"the notebook has {len(cells)} cells, more than the limit of {MAX_CELLS}"
    kept = [_lenient_cell(_upgraded(cell)) for cell in cells]
    return new_notebook(cells=[cell for cell in kept if cell is not None], metadata={}), None


def read_notebook(data: bytes):
    """Parse a submission leniently into a valid nbformat-4 notebook: (notebook, None) or (None, problem).

    Outputs are dropped (they are recomputed) and only the cell metadata grading needs is kept, so
    a notebook that nbformat would reject for a stray field is still graded. It never raises: what
    it does not foresee is a problem that names the exception's type.
    """
    try:
        return _read_notebook(data)
    except Exception as error:
        return None, f"the file cannot be read as a notebook ({type(error).__name__})"


def recognize(notebook, chapters: dict[str, Chapter]) -> str | None:
    """The chapter whose graded cells the notebook shares most, if it shares any."""
    ids = {grade_id(cell) for cell in notebook.cells} - {None}
    overlaps = {name: len(ids & chapter.grade_ids) for name, chapter in chapters.items()}
    best = max(overlaps, key=overlaps.get, default=None)
    return best if best is not None and overlaps[best] > 0 else None


# --------------------------------------------------------------------------------------------------
# Reading files without following links and without holding them
# --------------------------------------------------------------------------------------------------


def _open_regular(path: Path):
    """A regular file, opened to read; OSError for a symbolic link, a pipe or a device (not waited on)."""
    file = os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK), "rb")
    if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
        file.close()
        raise OSError(f"{_shown(path.name)} is not a regular file")
    return file


def _read_file(path: Path, size: int) -> bytes:
    """At most ``size`` bytes of a regular file, refusing a symbolic link."""
    with _open_regular(path) as file:
        return file.read(size)


def _open_zip(file) -> zipfile.ZipFile:
    """An open zip file (a regular file opened to read), refused with ValueError when its list of
    members (its central directory) is larger than MAX_ZIP_DIRECTORY_BYTES: ``zipfile.ZipFile`` builds
    a record of every member before the first can be read, in memory and time that grow with the
    number of members, whatever MAX_ZIP_MEMBERS says.

    The size is read by zipfile's own reading of the end record, the one ``ZipFile`` makes next, so
    that the check and the opening cannot disagree about it.
    """
    end = zipfile._EndRecData(file)
    if end is not None and end[zipfile._ECD_SIZE] > MAX_ZIP_DIRECTORY_BYTES:
        raise ValueError(f"its list of members takes {end[zipfile._ECD_SIZE]:,} bytes, more than the limit of "
                         f"{MAX_ZIP_DIRECTORY_BYTES:,} (too many members, or names too long)")
    return zipfile.ZipFile(file)


def _read_member(path: Path, member: ZipMember) -> bytes:
    """At most MAX_NOTEBOOK_BYTES + 1 bytes of the member at ``member.position`` of a zip file."""
    with _open_regular(path) as file, _open_zip(file) as archive:
        members = archive.infolist()
        if member.position >= len(members) or members[member.position].filename != member.name:
            raise ValueError(f"its member {member.position + 1} is no longer {_shown(member.name)}")
        with archive.open(members[member.position]) as opened:
            return opened.read(MAX_NOTEBOOK_BYTES + 1)  # no more than the limit, whatever the header says


def _timestamp_of(path: Path) -> datetime:
    return datetime.fromtimestamp(path.lstat().st_mtime, timezone.utc)


def _read_timestamp_file(folder: Path) -> tuple[datetime | None, tuple[str, ...]]:
    """nbgrader's ``timestamp.txt`` in a collected submission folder: (its time, no notes), or (None,
    a note saying why it was ignored) when it is not a date or is in the future; (None, ()) without one."""
    from nbgrader.utils import parse_utc

    path = folder / "timestamp.txt"
    if path.is_symlink() or not path.is_file():
        return None, ()
    try:
        text = _read_file(path, MAX_TIMESTAMP_BYTES).decode().strip()
        if not NBGRADER_TIMESTAMP.fullmatch(text):
            raise ValueError(f"not a date: {text}")
        stamp = parse_utc(text)
    except Exception as error:  # nbgrader's parser raises more than ValueError
        return None, (f"its timestamp.txt was ignored ({error_line(error, MAX_TIMESTAMP_REASON_CHARS)}); "
                      "the file's time counts instead",)
    stamp = stamp.replace(tzinfo=timezone.utc) if stamp.tzinfo is None else stamp
    if stamp > datetime.now(timezone.utc) + TIMESTAMP_SLACK:
        return None, (f"its timestamp.txt was ignored (it is in the future: {stamp:%Y-%m-%d %H:%M} UTC); "
                      "the file's time counts instead",)
    return stamp, ()


def _chapter_of_name(parts: list[str], chapters: dict[str, Chapter]) -> str | None:
    """A chapter named by a folder of the path, or by the notebook's file name."""
    for part in parts[:-1]:
        if part in chapters:
            return part
    stem = parts[-1].removesuffix(".ipynb")
    return next((name for name, chapter in chapters.items() if stem in (name, chapter.notebook)), None)


def _ignored_because(name: str) -> str | None:
    if name == "__MACOSX" or name == ".ipynb_checkpoints" or name.endswith("-checkpoint.ipynb"):
        return "an editor's or archiver's copy, not a submission"
    if name.startswith("."):
        return "a hidden file or folder"
    return None


def _member_ignored_because(info: zipfile.ZipInfo) -> str | None:
    """Why a zip member (not a folder) is not read as a notebook, if it is not."""
    if stat.S_ISLNK(info.external_attr >> 16):
        return "a symbolic link in the zip file: links are never followed"
    reason = next(filter(None, map(_ignored_because, info.filename.split("/"))), None)
    if reason is None and not info.filename.endswith(".ipynb"):
        return "not a notebook (.ipynb)" + (": zip files in zip files are not opened"
                                            if info.filename.endswith(".zip") else "")
    return reason


@dataclass(frozen=True)
class _Place:
    """What a file's place in SUBMISSIONS tells about it."""

    layout: Layout  # how the place names the student
    student: str  # the name as found (a folder's, a file's), not yet an id
    chapter: str | None  # the chapter the path names, if it names one
    stamp: datetime | None = None  # when it was handed in (nbgrader's timestamp.txt, else the file's time)
    notes: tuple[str, ...] = ()


class _Collector:
    """Walks SUBMISSIONS: the submissions found, and what was skipped, with why."""

    def __init__(self, root: Path, chapters: dict[str, Chapter]):
        self.root, self.chapters = root, chapters
        self.found: list[Submission] = []
        self.skipped: list[Skipped] = []
        self.names: dict[str, str] = {}  # id -> the first name met that has it
        self.bytes_read: dict[str, int] = defaultdict(int)  # by student's name
        self.kept: dict[str | None, int] = defaultdict(int)  # skipped entries kept, by student's id
        self.not_kept: dict[str | None, tuple[str, int]] = {}  # by student's id: the first not kept, and how many

    def origin(self, path: Path) -> str:
        return _shown(str(path.relative_to(self.root)))

    def identify(self, student: str) -> tuple[str, str | None]:
        """The id of a student's name, and the other name that has that id already (None when none has)."""
        identifier = student_id(student)
        first = self.names.setdefault(identifier, student)
        return identifier, (first if first != student else None)

    def skip(self, origin: str, reason: str, student: str | None) -> None:
        """``origin`` is not graded, for ``reason``; past MAX_SKIPPED_KEPT_PER_STUDENT entries of one
        student, it is only counted (:meth:`count_not_kept`)."""
        identifier, other = self.identify(student) if student else (None, None)
        key = identifier if other is None else None
        if self.kept[key] < MAX_SKIPPED_KEPT_PER_STUDENT:
            self.kept[key] += 1
            self.skipped.append(Skipped(origin, reason, key))
        else:
            first, count = self.not_kept.get(key, (origin, 0))
            self.not_kept[key] = first, count + 1

    def count_not_kept(self) -> None:
        """One more skipped entry per student who had more than MAX_SKIPPED_KEPT_PER_STUDENT: the first one
        not kept, with how many were not."""
        for student, (first, count) in self.not_kept.items():
            self.skipped.append(Skipped(first, f"this entry and {count - 1:,} more of this student met after it were "
                                               f"not graded and are not listed (at most "
                                               f"{MAX_SKIPPED_KEPT_PER_STUDENT:,} are listed per student)", student))

    @contextlib.contextmanager
    def reported(self, origin: str, student: str | None):
        """Reading ``origin`` (a file, a folder): whatever it raises is reported as skipped, not raised."""
        try:
            yield
        except Exception as error:
            self.skip(origin, f"cannot be read ({error_line(error)})", student)

    def read_within_budget(self, student: str, origin: str, read: Callable[[int], bytes]) -> bytes | None:
        """What ``read(size)`` gives, charged to the student's MAX_STUDENT_BYTES; None (reported) past them.

        The read is charged in full first: one that fails costs as much as one that succeeds.
        """
        left = MAX_STUDENT_BYTES - self.bytes_read[student]
        if left > 0:
            size = min(MAX_NOTEBOOK_BYTES, left) + 1
            self.bytes_read[student] += size
            data = read(size)
            self.bytes_read[student] -= size - len(data)
            if len(data) <= left:
                return data
        self.skip(origin, f"not read: this student's files exceed {MAX_STUDENT_BYTES // 2**20} MB in all", student)
        return None

    def chapter_of(self, notebook, hint: str | None, problem: str | None) -> tuple[str, str | None]:
        """A submission's chapter, from its path (``hint``) or its cells, and its problem."""
        content = recognize(notebook, self.chapters) if notebook is not None else None
        chapter = hint or content
        if chapter is None and problem is None:
            problem = "none of the chapters' graded cells are in this notebook, so its chapter is unknown"
        elif hint and content and content != hint:
            problem = f"this is the notebook of chapter {content} (it has that chapter's graded cells), not of {hint}"
        if chapter is None:
            chapter = next(iter(self.chapters)) if len(self.chapters) == 1 else UNKNOWN_CHAPTER
        return chapter, problem

    def add(self, place: _Place, origin: str, data: bytes, location: tuple, problem: str | None = None) -> None:
        """A submission of ``place.student``; refused when another name has the student's id."""
        identifier, other = self.identify(place.student)
        if other is not None:
            self.skip(origin, f"not graded: the names '{_shown(place.student)}' and '{_shown(other)}' give one id, "
                              f"{identifier}, kept by the first one met", None)
            return
        notebook, problem = read_notebook(data) if problem is None else (None, problem)
        chapter, problem = self.chapter_of(notebook, place.chapter, problem)
        path, member = location
        submission = Submission(identifier, place.student, place.layout, chapter, origin, path, member,
                                hashlib.sha256(data).hexdigest(), place.stamp, problem, list(place.notes))
        if identifier != place.student:
            submission.notes.append(f"the name '{_shown(place.student)}' is graded as '{identifier}'")
        named = _chapter_of_name([submission.file_name], self.chapters)
        if named not in (None, chapter):
            submission.notes.append(f"the file is named {_shown(submission.file_name)}, the notebook of chapter "
                                    f"{named}, but it is graded as chapter {chapter}, which its folder and its "
                                    "cells say it is")
        self.found.append(submission)

    def add_file(self, path: Path, place: _Place) -> None:
        """A notebook or a zip file (neither followed when it is a link); what fails is reported, not raised."""
        origin = self.origin(path)
        with self.reported(origin, place.student):
            if path.is_symlink():
                self.skip(origin, "a symbolic link: links are never followed, submit the file itself", place.student)
            elif path.suffix == ".ipynb":
                self.add_notebook(path, replace(place, stamp=place.stamp or _timestamp_of(path)))
            elif path.suffix == ".zip":
                self.add_zip(path, replace(place, stamp=place.stamp or _timestamp_of(path)))
            elif path.name != "timestamp.txt":
                self.skip(origin, "not a notebook (.ipynb) or a zip file", place.student)

    def add_notebook(self, path: Path, place: _Place) -> None:
        """A notebook file, within the student's bytes."""
        origin = self.origin(path)
        data = self.read_within_budget(place.student, origin, functools.partial(_read_file, path))
        if data is not None:
            self.add(place, origin, data, (path, None))

    def add_zip(self, path: Path, place: _Place) -> None:
        """The notebooks of a zip file; one that cannot be opened is kept with that problem."""
        try:
            with _open_regular(path) as file, _open_zip(file) as archive:
                self.add_members(archive, path, place)
        except Exception as error:  # a name flagged UTF-8 that is not raises UnicodeDecodeError, among others
            self.add(place, self.origin(path), b"", (path, None), f"the zip file cannot be read ({error_line(error)})")

    def add_members(self, archive: zipfile.ZipFile, path: Path, place: _Place) -> None:
        """The members of an open zip file, at most MAX_ZIP_MEMBERS, each read on its own; a name that
        several members share is told apart by the member's place (``alice.zip:01.ipynb (member 2)``)."""
        origin, notebooks = self.origin(path), 0
        members = archive.infolist()[:MAX_ZIP_MEMBERS + 1]
        names = Counter(info.filename for info in members)
        for position, info in enumerate(members):
            if position == MAX_ZIP_MEMBERS:
                self.skip(origin, f"only its first {MAX_ZIP_MEMBERS} members were read", place.student)
                break
            if info.is_dir():
                continue
            where = f"{origin}:{_shown(info.filename)}"
            if names[info.filename] > 1:
                where += f" (member {position + 1})"
            reason = _member_ignored_because(info)
            if reason:
                self.skip(where, reason, place.student)
            else:
                notebooks += 1
                self.add_member(archive, ZipMember(position, info.filename), where, path, place)
        if not notebooks:
            self.add(place, origin, b"", (path, None), "the zip file holds no notebook")

    def add_member(self, archive: zipfile.ZipFile, member: ZipMember, where: str, path: Path, place: _Place) -> None:
        """A notebook of the zip file at ``path``; one that cannot be read is kept with that problem."""
        place = replace(place, chapter=_chapter_of_name(member.name.split("/"), self.chapters) or place.chapter)
        try:
            # read within the limits, whatever the member's header says
            with archive.open(archive.infolist()[member.position]) as opened:
                data = self.read_within_budget(place.student, where, opened.read)
        except Exception as error:  # corrupt data raises zlib's error, a bad checksum BadZipFile
            self.add(place, where, b"", (path, member), f"the zip member cannot be read ({error_line(error)})")
            return
        if data is not None:
            self.add(place, where, data, (path, member))

    def entries(self, folder: Path, student: str | None) -> list[Path]:
        """The entries of a folder, sorted, with the ignored ones reported (none when it cannot be listed)."""
        try:
            listed = sorted(folder.iterdir())
        except OSError as error:
            if folder == self.root:
                raise GradingError(f"SUBMISSIONS: {folder} cannot be listed ({error_line(error)})") from error
            self.skip(self.origin(folder), f"cannot be listed ({error_line(error)})", student)
            return []
        entries = []
        for entry in listed:
            reason = _ignored_because(entry.name)
            if reason:
                self.skip(self.origin(entry), reason, student)
            else:
                entries.append(entry)
        return entries

    def walk(self, folder: Path, student: str, depth: int = 0):
        """The files under a student's folder, without following links, MAX_FOLDER_DEPTH levels deep."""
        for entry in self.entries(folder, student):
            if entry.is_symlink():
                self.skip(self.origin(entry), "a symbolic link: links are never followed", student)
            elif entry.is_dir() and depth + 1 >= MAX_FOLDER_DEPTH:
                self.skip(self.origin(entry), f"deeper than {MAX_FOLDER_DEPTH} levels in the student's folder", student)
            elif entry.is_dir():
                yield from self.walk(entry, student, depth + 1)
            else:
                yield entry

    def add_student_folder(self, folder: Path) -> None:
        """The notebooks and zip files under a student's folder (with nbgrader's timestamp.txt of each chapter)."""
        before = len(self.found)
        for count, item in enumerate(self.walk(folder, folder.name)):
            if count == MAX_ENTRIES:
                self.skip(self.origin(folder), f"only its first {MAX_ENTRIES} files were read", folder.name)
                break
            parts = item.relative_to(folder).parts
            chapter = parts[0] if len(parts) > 1 and parts[0] in self.chapters else None
            stamp, notes = _read_timestamp_file(folder / parts[0]) if chapter else (None, ())
            hint = chapter or _chapter_of_name(list(parts), self.chapters)
            self.add_file(item, _Place(Layout.STUDENT_FOLDERS, folder.name, hint, stamp, notes))
        if len(self.found) == before:
            self.skip(self.origin(folder), "no notebook (.ipynb) or zip file in this student's folder", folder.name)

    def add_chapter_folder(self, folder: Path) -> None:
        """``<chapter>/<student>.ipynb`` (or ``<chapter>/<student>/...``)."""
        for item in self.entries(folder, None):
            with self.reported(self.origin(item), None):
                self.add_chapter_entry(item, folder.name)

    def add_chapter_entry(self, item: Path, chapter: str) -> None:
        """One entry of a chapter's folder: a student's notebook (or zip file), or a student's folder."""
        if item.is_symlink():
            self.skip(self.origin(item), "a symbolic link: links are never followed", item.stem)
        elif item.is_dir():
            before = len(self.found)
            for notebook in self.walk(item, item.name):
                self.add_file(notebook, _Place(Layout.CHAPTER_FOLDERS, item.name, chapter))
            if len(self.found) == before:
                self.skip(self.origin(item), "no notebook in this student's folder", item.name)
        else:
            self.add_file(item, _Place(Layout.CHAPTER_FOLDERS, item.stem, chapter))

    def collect(self) -> None:
        for entry in self.entries(self.root, None):
            with self.reported(self.origin(entry), None):
                self.add_entry(entry)
        self.count_not_kept()

    def add_entry(self, entry: Path) -> None:
        """What SUBMISSIONS holds at its top: a student's folder or file, or a chapter's folder."""
        if entry.is_symlink():
            self.skip(self.origin(entry), "a symbolic link: links are never followed", entry.stem)
        elif entry.is_dir() and entry.name in self.chapters:
            self.add_chapter_folder(entry)
        elif entry.is_dir():
            self.add_student_folder(entry)
        else:
            self.add_file(entry, _Place(Layout.FILES, entry.stem, _chapter_of_name([entry.name], self.chapters)))


def collect_submissions(path: Path, chapters: dict[str, Chapter], prefer: Layout = Layout.STUDENT_FOLDERS
                        ) -> tuple[list[Submission], list[Skipped]]:
    """The submission that counts for each (student, chapter), and what was skipped, with why.

    Of one (student, chapter)'s submissions in one layout, the newest readable one counts. When they are
    in several layouts, the one of ``prefer`` counts, else of the first in :class:`Layout`'s order: a
    file that names a student from a chapter's folder or from the top of SUBMISSIONS replaces the
    student's own folder only when the instructor prefers so. The newest readable one of each other
    layout is reported as skipped, first of all, naming the one graded and the preference that would
    grade it instead.

    Two names that give one id (which only a name chosen for it does) are never merged: the first
    one met, in the order of the sorted paths, keeps the id, and the submissions of the others are
    skipped with both names.
    """
    path = Path(path)
    if not path.exists():
        raise GradingError(f"SUBMISSIONS: {path} does not exist; expected {EXPECTED_LAYOUT}")
    if not path.is_dir():
        raise GradingError(f"SUBMISSIONS: {path} is a file, not a folder; expected {EXPECTED_LAYOUT} "
                           "(a class handed in as one zip file: unpack it into a folder first)")
    if next(path.iterdir(), None) is None:
        raise GradingError(f"SUBMISSIONS: {path} is empty; expected {EXPECTED_LAYOUT}")
    collector = _Collector(path.resolve(), chapters)
    collector.collect()
    groups = defaultdict(lambda: defaultdict(list))  # (student, chapter) -> layout -> its submissions
    for submission in collector.found:
        groups[submission.student, submission.chapter][submission.layout].append(submission)
    chosen, passed_over = [], []
    for layouts in groups.values():
        newest = {layout: _newest(layouts[layout]) for layout in Layout if layout in layouts}
        best = newest.pop(next(layout for layout in (prefer, *Layout) if layout in newest))
        if len(layouts[best.layout]) > 1:
            best.notes.append(f"{len(layouts[best.layout])} submissions found; graded the newest readable one "
                              f"({best.origin})")
        for other in newest.values():
            best.passed_over.append(other.origin)
            passed_over.append(Skipped(other.origin, _passed_over_because(other, best, len(layouts[other.layout])),
                                       other.student))
        chosen.append(best)
    return sorted(chosen, key=lambda s: (s.student, s.chapter)), passed_over + collector.skipped


def _newest(submissions: list[Submission]) -> Submission:
    """The newest readable submission; a name that is the chapter's own breaks ties, then the place (of
    members that share a name, the last one, which unzipping the file would leave)."""
    return max(submissions, key=lambda s: (s.problem is None, s.timestamp, s.file_name == f"{s.chapter}.ipynb",
                                           s.path, s.member or ZipMember(-1, "")))


def _passed_over_because(other: Submission, best: Submission, found: int) -> str:
    """Why ``other``, the newest readable of the ``found`` submissions of its layout, is not graded: ``best``,
    of another layout, is; and the preference that would grade ``other`` instead."""
    among = f"; the newest readable of {found} there" if found > 1 else ""
    return (f"not graded: {best.student}'s {best.chapter} is also in {best.layout.place}, {best.origin}, which was "
            f"graded; --prefer {other.layout} grades this one ({other.layout.place}{among}) instead")
