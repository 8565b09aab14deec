"""What a class handed in: the submissions found in SUBMISSIONS, read, named, and what was skipped.

:func:`collect_submissions` reads a folder laid out as nbgrader collects it
(``<student>/<chapter>/<notebook>.ipynb`` and its ``timestamp.txt``), or as ``<chapter>/<student>.ipynb``,
or holding zip files and notebooks named by student (``alice.zip``, ``alice.ipynb``). A notebook's
chapter comes from its path, else from its graded cells; a student's name becomes a safe id
(:func:`student_id`); of several submissions for one (student, chapter) the newest readable one
counts. What cannot be graded (not JSON, another chapter's notebook, too large) is kept with the
reason, to be graded as such.

It trusts nothing in the folder:

- A symbolic link (a notebook, a folder, a zip member) is never followed: it is skipped, with why.
- Every folder and file it does not grade is reported (:class:`autograder.results.Skipped`): hidden
  files, other kinds of files, a student folder without a notebook.
- Files are read one at a time and at most :data:`MAX_NOTEBOOK_BYTES` each; a :class:`Submission`
  keeps where its bytes are and their digest, not the bytes. A zip file is read member by member,
  at most :data:`MAX_ZIP_MEMBERS` members and :data:`MAX_ZIP_BYTES` in all; nested zips are not opened.
- Folders are walked :data:`MAX_DEPTH` levels deep and :data:`MAX_ENTRIES` entries per student.

:func:`read_notebook` parses a submission leniently into a valid notebook, or names the problem.
"""

import hashlib
import json
import os
import re
import stat
import unicodedata
import zipfile
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from autograder.chapters import Chapter
from autograder.course import GradingError, grade_id
from autograder.results import Skipped

MAX_NOTEBOOK_BYTES = 50 * 1024 * 1024
MAX_CELLS = 5_000
MAX_ZIP_MEMBERS = 1_000
MAX_ZIP_BYTES = 200 * 1024 * 1024
MAX_DEPTH = 6
MAX_ENTRIES = 10_000
UNKNOWN_CHAPTER = "(unknown)"
EXPECTED_LAYOUT = ("a folder holding one folder per student, laid out as nbgrader collects them "
                   "(<student>/<chapter>/<notebook>.ipynb), or <chapter>/<student>.ipynb, or zip files and "
                   "notebooks named by student (alice.zip, alice.ipynb)")
NBGRADER_KEYS = {"grade_id": str, "grade": bool, "solution": bool, "locked": bool, "task": bool,
                 "points": (int, float), "schema_version": int}


@dataclass
class Submission:
    """One notebook of one student for one chapter, as found in SUBMISSIONS (its bytes stay there)."""

    student: str
    chapter: str  # UNKNOWN_CHAPTER when it cannot be told
    origin: str  # where it came from, relative to SUBMISSIONS (a zip member after a colon)
    path: Path  # the notebook, or the zip file that holds it
    member: str | None  # the zip member
    digest: str  # sha256 of its bytes
    timestamp: datetime
    problem: str | None = None  # why it cannot be graded as a notebook of that chapter
    notes: list[str] = field(default_factory=list)

    def read(self) -> bytes:
        """The submission's bytes, as they were when collected (GradingError if they changed since)."""
        data = _read_member(self.path, self.member) if self.member is not None else _read_file(self.path)
        if hashlib.sha256(data).hexdigest() != self.digest:
            raise GradingError(f"{self.origin} changed while it was being graded")
        return data


def student_id(name: str) -> str:
    """A safe gradebook id for a student's name: letters, digits, '.', '_' and '-'.

    A name that had to change gets a short hash, so that two names never share an id.
    """
    cleaned = re.sub(r"[^\w.-]+", "_", unicodedata.normalize("NFKC", name)).strip("._-")[:64] or "student"
    if cleaned == name:
        return cleaned
    return f"{cleaned}-{hashlib.sha1(name.encode('utf-8', 'surrogateescape')).hexdigest()[:6]}"


def _clean_nbgrader(metadata) -> dict | None:
    """A submission's nbgrader metadata, with only the keys grading reads, of their types."""
    if not isinstance(metadata, dict) or not isinstance(metadata.get("grade_id"), str):
        return None
    return {key: value for key, value in metadata.items()
            if key in NBGRADER_KEYS and isinstance(value, NBGRADER_KEYS[key])
            and not (key == "points" and isinstance(value, bool))}


def read_notebook(data: bytes):
    """Parse a submission leniently into a valid nbformat-4 notebook: (notebook, None) or (None, problem).

    Outputs are dropped (they are recomputed) and only the cell metadata grading needs is kept, so
    a notebook that nbformat would reject for a stray field is still graded.
    """
    import nbformat
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_raw_cell

    if len(data) > MAX_NOTEBOOK_BYTES:
        return None, f"the file is {len(data) / 1e6:.0f} MB, more than the limit of {MAX_NOTEBOOK_BYTES / 1e6:.0f} MB"
    try:
        raw = json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError:
        return None, "the file is not UTF-8 text, so not a notebook"
    except json.JSONDecodeError as error:
        return None, f"the file is not valid JSON ({error.msg} at line {error.lineno}, column {error.colno})"
    except RecursionError:
        return None, "the file is JSON nested too deeply to be a notebook"
    if isinstance(raw, dict) and raw.get("nbformat") == 3:
        try:
            raw = nbformat.convert(nbformat.from_dict(raw), 4)
        except Exception as error:
            return None, f"the file is an nbformat-3 notebook that cannot be converted ({type(error).__name__})"
    if not isinstance(raw, dict) or not isinstance(raw.get("cells"), list):
        return None, "the file is JSON but not a notebook (it has no list of cells)"
    if len(raw["cells"]) > MAX_CELLS:
        return None, f"the notebook has {len(raw['cells'])} cells, more than the limit of {MAX_CELLS}"
    makers = {"code": new_code_cell, "markdown": new_markdown_cell, "raw": new_raw_cell}
    cells = []
    for cell in raw["cells"]:
        if not isinstance(cell, dict):
            continue
        source = cell.get("source", "")
        source = "".join(map(str, source)) if isinstance(source, list) else str(source)
        metadata = cell.get("metadata") if isinstance(cell.get("metadata"), dict) else {}
        nbgrader = _clean_nbgrader(metadata.get("nbgrader"))
        kept = {"nbgrader": nbgrader} if nbgrader else {}
        cells.append(makers.get(cell.get("cell_type"), new_markdown_cell)(source=source, metadata=kept))
    return new_notebook(cells=cells, metadata={}), None


def recognize(notebook, chapters: dict[str, Chapter]) -> str | None:
    """The chapter whose graded cells the notebook shares most, if it shares any."""
    ids = {grade_id(cell) for cell in notebook.cells} - {None}
    overlaps = {name: len(ids & chapter.grade_ids) for name, chapter in chapters.items()}
    best = max(overlaps, key=overlaps.get, default=None)
    return best if best is not None and overlaps[best] > 0 else None


# --------------------------------------------------------------------------------------------------
# Reading files without following links and without holding them
# --------------------------------------------------------------------------------------------------


def _read_file(path: Path) -> bytes:
    """At most MAX_NOTEBOOK_BYTES + 1 bytes of a regular file, refusing a symbolic link."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(descriptor, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise OSError(f"{path} is not a regular file")
        return file.read(MAX_NOTEBOOK_BYTES + 1)


def _read_member(path: Path, member: str) -> bytes:
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(descriptor, "rb") as file, zipfile.ZipFile(file) as archive, archive.open(member) as opened:
        return opened.read(MAX_NOTEBOOK_BYTES + 1)  # no more than the limit, whatever the header says


def _timestamp_of(path: Path) -> datetime:
    return datetime.fromtimestamp(path.lstat().st_mtime, timezone.utc)


def _read_timestamp_file(folder: Path) -> datetime | None:
    """nbgrader's ``timestamp.txt`` in a collected submission folder."""
    from nbgrader.utils import parse_utc

    path = folder / "timestamp.txt"
    if path.is_symlink() or not path.is_file():
        return None
    try:
        stamp = parse_utc(_read_file(path)[:100].decode().strip())
    except Exception:
        return None
    return stamp.replace(tzinfo=timezone.utc) if stamp.tzinfo is None else stamp


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


class _Collector:
    def __init__(self, root: Path, chapters: dict[str, Chapter]):
        self.root, self.chapters = root, chapters
        self.found: list[Submission] = []
        self.skipped: list[Skipped] = []

    def origin(self, path: Path) -> str:
        return str(path.relative_to(self.root))

    def skip(self, origin: str, reason: str, student: str | None) -> None:
        self.skipped.append(Skipped(origin, reason, student_id(student) if student else None))

    def add(self, student: str, chapter_hint: str | None, origin: str, data: bytes, location: tuple,
            stamp: datetime, problem: str | None = None) -> None:
        notebook, found_problem = read_notebook(data) if problem is None else (None, problem)
        content = recognize(notebook, self.chapters) if notebook is not None else None
        chapter = chapter_hint or content
        if chapter is None and found_problem is None:
            found_problem = "none of the chapters' graded cells are in this notebook, so its chapter is unknown"
        elif chapter_hint and content and content != chapter_hint:
            found_problem = (f"this is the notebook of chapter {content} (it has that chapter's graded cells), "
                             f"not of {chapter_hint}")
        if chapter is None:
            chapter = next(iter(self.chapters)) if len(self.chapters) == 1 else UNKNOWN_CHAPTER
        path, member = location
        submission = Submission(student_id(student), chapter, origin, path, member, hashlib.sha256(data).hexdigest(),
                                stamp, found_problem)
        if submission.student != student:
            submission.notes.append(f"the name {student!r} is graded as {submission.student!r}")
        self.found.append(submission)

    def add_file(self, path: Path, student: str, chapter_hint: str | None, stamp: datetime | None = None) -> None:
        """A notebook or a zip file of ``student`` (neither is followed when it is a link)."""
        origin = self.origin(path)
        if path.is_symlink():
            self.skip(origin, "a symbolic link: links are never followed, submit the file itself", student)
        elif path.suffix == ".ipynb":
            try:
                data = _read_file(path)
            except OSError as error:
                self.skip(origin, f"cannot be read ({error.strerror or error})", student)
                return
            self.add(student, chapter_hint, origin, data, (path, None), stamp or _timestamp_of(path))
        elif path.suffix == ".zip":
            self.add_zip(path, student, chapter_hint, stamp or _timestamp_of(path))
        elif path.name != "timestamp.txt":
            self.skip(origin, "not a notebook (.ipynb) or a zip file", student)

    def add_zip(self, path: Path, student: str, chapter_hint: str | None, stamp: datetime) -> None:
        origin = self.origin(path)
        try:
            descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(descriptor, "rb") as file, zipfile.ZipFile(file) as archive:
                self.add_members(archive, path, student, chapter_hint, stamp)
        except (zipfile.BadZipFile, OSError, EOFError, RuntimeError, NotImplementedError) as error:
            self.add(student, chapter_hint, origin, b"", (path, None), stamp, f"the zip file cannot be read ({error})")

    def add_members(self, archive: zipfile.ZipFile, path: Path, student: str, chapter_hint: str | None,
                    stamp: datetime) -> None:
        origin, budget, notebooks = self.origin(path), MAX_ZIP_BYTES, 0
        for number, info in enumerate(archive.infolist()):
            where = f"{origin}:{info.filename}"
            if number == MAX_ZIP_MEMBERS:
                self.skip(origin, f"only its first {MAX_ZIP_MEMBERS} members were read", student)
                break
            parts = info.filename.split("/")
            reason = next((why for why in map(_ignored_because, parts) if why), None)
            if info.is_dir():
                continue
            if stat.S_ISLNK(info.external_attr >> 16):
                self.skip(where, "a symbolic link in the zip file: links are never followed", student)
            elif reason:
                self.skip(where, reason, student)
            elif not info.filename.endswith(".ipynb"):
                self.skip(where, "not a notebook (.ipynb)" + (": zip files in zip files are not opened"
                                                               if info.filename.endswith(".zip") else ""), student)
            elif budget <= 0:
                self.skip(where, f"not read: the zip file's notebooks exceed {MAX_ZIP_BYTES // 2**20} MB", student)
            else:
                with archive.open(info) as member:  # no more than the limit, whatever the header says
                    data = member.read(min(MAX_NOTEBOOK_BYTES, budget) + 1)
                budget -= len(data)
                notebooks += 1
                hint = _chapter_of_name(parts, self.chapters) or chapter_hint
                self.add(student, hint, where, data, (path, info.filename), stamp)
        if not notebooks:
            self.add(student, chapter_hint, origin, b"", (path, None), stamp, "the zip file holds no notebook")

    def entries(self, folder: Path, student: str | None) -> list[Path]:
        """The entries of a folder, sorted, with the ignored ones reported."""
        entries = []
        for entry in sorted(folder.iterdir()):
            reason = _ignored_because(entry.name)
            if reason:
                self.skip(self.origin(entry), reason, student)
            else:
                entries.append(entry)
        return entries

    def walk(self, folder: Path, student: str, depth: int = 0):
        """The files under a student's folder, without following links, MAX_DEPTH levels deep."""
        for entry in self.entries(folder, student):
            if entry.is_symlink():
                self.skip(self.origin(entry), "a symbolic link: links are never followed", student)
            elif entry.is_dir() and depth + 1 >= MAX_DEPTH:
                self.skip(self.origin(entry), f"deeper than {MAX_DEPTH} levels in the student's folder", student)
            elif entry.is_dir():
                yield from self.walk(entry, student, depth + 1)
            else:
                yield entry

    def add_student_folder(self, folder: Path) -> None:
        before = len(self.found)
        for count, item in enumerate(self.walk(folder, folder.name)):
            if count == MAX_ENTRIES:
                self.skip(self.origin(folder), f"only its first {MAX_ENTRIES} files were read", folder.name)
                break
            parts = item.relative_to(folder).parts
            chapter = parts[0] if len(parts) > 1 and parts[0] in self.chapters else None
            stamp = _read_timestamp_file(folder / parts[0]) if chapter else None
            self.add_file(item, folder.name, chapter or _chapter_of_name(list(parts), self.chapters), stamp)
        if len(self.found) == before:
            self.skip(self.origin(folder), "no notebook (.ipynb) or zip file in this student's folder", folder.name)

    def add_chapter_folder(self, folder: Path) -> None:
        """``<chapter>/<student>.ipynb`` (or ``<chapter>/<student>/...``)."""
        for item in self.entries(folder, None):
            if item.is_symlink():
                self.skip(self.origin(item), "a symbolic link: links are never followed", item.stem)
            elif item.is_dir():
                before = len(self.found)
                for notebook in self.walk(item, item.name):
                    self.add_file(notebook, item.name, folder.name)
                if len(self.found) == before:
                    self.skip(self.origin(item), "no notebook in this student's folder", item.name)
            else:
                self.add_file(item, item.stem, folder.name)

    def collect(self) -> None:
        for entry in self.entries(self.root, None):
            if entry.is_symlink():
                self.skip(self.origin(entry), "a symbolic link: links are never followed", entry.stem)
            elif entry.is_dir() and entry.name in self.chapters:
                self.add_chapter_folder(entry)
            elif entry.is_dir():
                self.add_student_folder(entry)
            else:
                self.add_file(entry, entry.stem, _chapter_of_name([entry.name], self.chapters))


def collect_submissions(path: Path, chapters: dict[str, Chapter]) -> tuple[list[Submission], list[Skipped]]:
    """The submission that counts for each (student, chapter), and what was skipped, with why."""
    path = Path(path)
    if not path.exists():
        raise GradingError(f"SUBMISSIONS: {path} does not exist; expected {EXPECTED_LAYOUT}")
    if not path.is_dir():
        raise GradingError(f"SUBMISSIONS: {path} is a file, not a folder; expected {EXPECTED_LAYOUT} "
                           "(a class handed in as one zip file: unpack it into a folder first)")
    collector = _Collector(path.resolve(), chapters)
    collector.collect()
    groups = defaultdict(list)
    for submission in collector.found:
        groups[submission.student, submission.chapter].append(submission)
    chosen = []
    for group in groups.values():
        # The newest readable one; a name that is the chapter's own breaks ties.
        group.sort(key=lambda s: (s.problem is None, s.timestamp, s.origin.endswith(f"{s.chapter}.ipynb"), s.origin))
        best = group[-1]
        if len(group) > 1:
            best.notes.append(f"{len(group)} submissions found; graded the newest readable one ({best.origin})")
        chosen.append(best)
    return sorted(chosen, key=lambda s: (s.student, s.chapter)), collector.skipped
