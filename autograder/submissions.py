"""What a class handed in: the chapters' tests, and the submissions found, read and named.

- :func:`load_chapters` reads the instructor's notebooks in ``solutions/``: each chapter's test
  cells (hidden tests included, and as released), the exercise each one grades, and the grade ids
  that recognize a notebook of that chapter.
- :func:`collect_submissions` finds the submissions in a folder laid out as nbgrader collects them
  (``<student>/<chapter>/<notebook>.ipynb`` and its ``timestamp.txt``), or as ``<chapter>/<student>.ipynb``,
  or as zip files and notebooks named by student. A notebook's chapter comes from its path, else
  from its graded cells; a student's name becomes a safe id (:func:`student_id`); of several
  submissions for one (student, chapter), the newest readable one counts. What cannot be graded
  (not JSON, another chapter's notebook, too large) is kept with the reason, to be graded as such.
- :func:`read_notebook` parses a submission leniently into a valid notebook, or names the problem.
"""

import hashlib
import json
import re
import unicodedata
import zipfile
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from autograder import release

MAX_NOTEBOOK_BYTES = 50 * 1024 * 1024
UNKNOWN_CHAPTER = "(unknown)"


class GradingError(RuntimeError):
    """Grading itself cannot go on (not a problem of one submission); the message says why."""


# --------------------------------------------------------------------------------------------------
# The chapters: what the instructor's notebooks test
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TestCell:
    grade_id: str
    points: float
    source: str  # the instructor's version, hidden tests included
    released: str  # what students get: the hidden tests removed
    exercise: str | None  # the solution cell (function) it grades, when there is one: test_<name>


@dataclass(frozen=True)
class Chapter:
    name: str  # the nbgrader assignment, e.g. 01_attention
    notebook: str  # the notebook's name without .ipynb
    tests: tuple[TestCell, ...]
    grade_ids: frozenset[str]  # of every nbgrader cell: recognizes the chapter's notebooks
    fingerprint: str  # of the solution notebook


def load_chapters(course_root: Path) -> dict[str, Chapter]:
    """The chapters of ``course_root/solutions``, one notebook each."""
    import nbformat
    from nbgrader.preprocessors import ClearHiddenTests

    chapters = {}
    for name in release.chapter_names(course_root):
        notebooks = sorted((course_root / release.SOLUTIONS / name).glob("*.ipynb"))
        if len(notebooks) != 1:
            raise GradingError(f"{course_root / release.SOLUTIONS / name} has {len(notebooks)} notebooks; "
                               "the grader expects one notebook per chapter")
        data = notebooks[0].read_bytes()
        notebook = nbformat.reads(data.decode("utf-8"), as_version=4)
        grade_ids = {cell.metadata.nbgrader["grade_id"] for cell in notebook.cells
                     if "grade_id" in cell.metadata.get("nbgrader", {})}
        tests = []
        for cell in notebook.cells:
            if release.is_graded_test(cell):
                released = nbformat.from_dict(cell)
                ClearHiddenTests()._remove_hidden_test_region(released)
                grade_id = cell.metadata.nbgrader["grade_id"]
                exercise = grade_id.removeprefix("test_")
                tests.append(TestCell(grade_id, float(cell.metadata.nbgrader["points"]), cell.source,
                                      released.source, exercise if exercise in grade_ids else None))
        chapters[name] = Chapter(name, notebooks[0].stem, tuple(tests), frozenset(grade_ids),
                                 hashlib.sha256(data).hexdigest())
    return chapters


# --------------------------------------------------------------------------------------------------
# Collecting submissions
# --------------------------------------------------------------------------------------------------


@dataclass
class Submission:
    """One notebook of one student for one chapter, as found in SUBMISSIONS."""

    student: str
    chapter: str  # UNKNOWN_CHAPTER when it cannot be told
    origin: str  # where it came from, relative to SUBMISSIONS (a zip member after a colon)
    data: bytes
    timestamp: datetime
    problem: str | None = None  # why it cannot be graded as a notebook of that chapter
    notes: list[str] = field(default_factory=list)


def student_id(name: str) -> str:
    """A safe gradebook id for a student's name: letters, digits, '.', '_' and '-'.

    A name that had to change gets a short hash, so that two names never share an id.
    """
    cleaned = re.sub(r"[^\w.-]+", "_", unicodedata.normalize("NFKC", name)).strip("._-")[:64] or "student"
    if cleaned == name:
        return cleaned
    return f"{cleaned}-{hashlib.sha1(name.encode('utf-8', 'surrogateescape')).hexdigest()[:6]}"


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
    if isinstance(raw, dict) and raw.get("nbformat") == 3:
        try:
            raw = nbformat.convert(nbformat.from_dict(raw), 4)
        except Exception as error:
            return None, f"the file is an nbformat-3 notebook that cannot be converted ({error})"
    if not isinstance(raw, dict) or not isinstance(raw.get("cells"), list):
        return None, "the file is JSON but not a notebook (it has no list of cells)"
    makers = {"code": new_code_cell, "markdown": new_markdown_cell, "raw": new_raw_cell}
    cells = []
    for cell in raw["cells"]:
        if not isinstance(cell, dict):
            continue
        source = cell.get("source", "")
        source = "".join(map(str, source)) if isinstance(source, list) else str(source)
        metadata = cell.get("metadata") if isinstance(cell.get("metadata"), dict) else {}
        kept = {}
        nbgrader = metadata.get("nbgrader")
        if isinstance(nbgrader, dict) and isinstance(nbgrader.get("grade_id"), str):
            kept["nbgrader"] = nbgrader
        if isinstance(metadata.get("tags"), list):
            kept["tags"] = [str(tag) for tag in metadata["tags"]]
        cells.append(makers.get(cell.get("cell_type"), new_markdown_cell)(source=source, metadata=kept))
    return new_notebook(cells=cells, metadata={}), None


def recognize(notebook, chapters: dict[str, Chapter]) -> str | None:
    """The chapter whose graded cells the notebook shares most, if it shares any."""
    ids = {cell.metadata["nbgrader"]["grade_id"] for cell in notebook.cells if "nbgrader" in cell.metadata}
    overlaps = {name: len(ids & chapter.grade_ids) for name, chapter in chapters.items()}
    best = max(overlaps, key=overlaps.get, default=None)
    return best if best is not None and overlaps[best] > 0 else None


def _timestamp_of(path: Path) -> datetime:
    return datetime.fromtimestamp(path.stat().st_mtime, timezone.utc)


def _read_timestamp_file(folder: Path) -> datetime | None:
    """nbgrader's ``timestamp.txt`` in a collected submission folder."""
    from nbgrader.utils import parse_utc

    path = folder / "timestamp.txt"
    if not path.is_file():
        return None
    try:
        stamp = parse_utc(path.read_text().strip())
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


def _is_ignored(name: str) -> bool:
    return name.startswith(".") or name == "__MACOSX" or name.endswith("-checkpoint.ipynb")


class _Collector:
    def __init__(self, root: Path, chapters: dict[str, Chapter]):
        self.root, self.chapters = root, chapters
        self.found: list[Submission] = []
        self.skipped: list[str] = []

    def origin(self, path: Path) -> str:
        return str(path.relative_to(self.root)) if path != self.root else path.name

    def add(self, student: str, chapter_hint: str | None, origin: str, data: bytes, stamp: datetime) -> None:
        notebook, problem = read_notebook(data)
        content = recognize(notebook, self.chapters) if notebook is not None else None
        chapter = chapter_hint or content
        if chapter is None and problem is None:
            problem = "none of the chapters' graded cells are in this notebook, so its chapter is unknown"
        elif chapter_hint and content and content != chapter_hint:
            problem = (f"this is the notebook of chapter {content} (it has that chapter's graded cells), "
                       f"not of {chapter_hint}")
        if chapter is None:
            chapter = next(iter(self.chapters)) if len(self.chapters) == 1 else UNKNOWN_CHAPTER
        submission = Submission(student_id(student), chapter, origin, data, stamp, problem)
        if submission.student != student:
            submission.notes.append(f"the name {student!r} is graded as {submission.student!r}")
        self.found.append(submission)

    def add_file(self, path: Path, student: str, chapter_hint: str | None, stamp: datetime | None = None) -> None:
        stamp = stamp or _timestamp_of(path)
        if path.suffix == ".ipynb":
            data = path.read_bytes() if path.stat().st_size <= MAX_NOTEBOOK_BYTES else b"\0" * (MAX_NOTEBOOK_BYTES + 1)
            self.add(student, chapter_hint, self.origin(path), data, stamp)
        elif path.suffix == ".zip":
            self.add_zip(path, student, chapter_hint, stamp)
        elif path.name != "timestamp.txt":
            self.skipped.append(f"{self.origin(path)}: not a notebook or a zip file, ignored")

    def add_zip(self, path: Path, student: str, chapter_hint: str | None, stamp: datetime) -> None:
        try:
            archive = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError) as error:
            self.add(student, chapter_hint, self.origin(path), b"", stamp)
            self.found[-1].problem = f"the zip file cannot be opened ({error})"
            return
        with archive:
            members = [info for info in archive.infolist() if info.filename.endswith(".ipynb") and not info.is_dir()
                       and not any(_is_ignored(part) for part in info.filename.split("/"))]
            if not members:
                self.add(student, chapter_hint, self.origin(path), b"", stamp)
                self.found[-1].problem = "the zip file holds no notebook"
            for info in members:
                parts = info.filename.split("/")
                hint = _chapter_of_name(parts, self.chapters) or chapter_hint
                if info.file_size > MAX_NOTEBOOK_BYTES:
                    data = b"\0" * (MAX_NOTEBOOK_BYTES + 1)
                else:
                    with archive.open(info) as member:  # read no more than the limit, whatever the header says
                        data = member.read(MAX_NOTEBOOK_BYTES + 1)
                self.add(student, hint, f"{self.origin(path)}:{info.filename}", data, stamp)

    def add_student_folder(self, folder: Path) -> None:
        for entry in sorted(folder.iterdir()):
            if _is_ignored(entry.name):
                continue
            if entry.is_dir():
                chapter = entry.name if entry.name in self.chapters else None
                stamp = _read_timestamp_file(entry)
                for item in sorted(entry.rglob("*")):
                    if item.is_file() and not any(_is_ignored(part) for part in item.relative_to(entry).parts):
                        if item.suffix in (".ipynb", ".zip"):
                            self.add_file(item, folder.name, chapter or _chapter_of_name([item.name], self.chapters), stamp)
            else:
                self.add_file(entry, folder.name, _chapter_of_name([entry.name], self.chapters))

    def collect(self) -> None:
        if self.root.is_file():
            self.add_file(self.root, self.root.stem, _chapter_of_name([self.root.name], self.chapters))
            return
        for entry in sorted(self.root.iterdir()):
            if _is_ignored(entry.name):
                continue
            if entry.is_dir() and entry.name in self.chapters:  # <chapter>/<student>.ipynb
                for item in sorted(entry.iterdir()):
                    if _is_ignored(item.name):
                        continue
                    if item.is_dir():
                        for notebook in sorted(item.rglob("*.ipynb")):
                            if not any(_is_ignored(part) for part in notebook.parts):
                                self.add_file(notebook, item.name, entry.name)
                    else:
                        self.add_file(item, item.stem, entry.name)
            elif entry.is_dir():
                self.add_student_folder(entry)
            else:
                self.add_file(entry, entry.stem, _chapter_of_name([entry.name], self.chapters))


def collect_submissions(path: Path, chapters: dict[str, Chapter]) -> tuple[list[Submission], list[str]]:
    """The submission that counts for each (student, chapter), and notes on what was skipped."""
    path = Path(path)
    if not path.exists():
        raise GradingError(f"{path} does not exist")
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
