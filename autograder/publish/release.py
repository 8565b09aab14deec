"""Release the chapters: regenerate ``chapters/`` from ``solutions/`` with nbgrader, and verify them.

- :func:`generate` runs nbgrader's generate_assignment (Python API) for each chapter, with the
  configuration in ``nbgrader_config.py`` and a throwaway gradebook, then normalizes the student
  notebooks so that generating twice gives identical bytes: no outputs, no execution counts, only
  the metadata the notebook needs. Into ``chapters/`` it writes only the files whose bytes changed,
  each replaced in one step, and deletes nothing. For each language with translation catalogues
  (``locale/LANG/LC_MESSAGES``, :mod:`autograder.publish.translations`) it also writes ``chapters/LANG/``: the
  same notebooks with their Markdown translated, code cells, ids, metadata and outputs unchanged, and
  the translated pages of the book (``chapters/LANG/intro.md``, the root of the translated book, and
  ``chapters/LANG/references.md``, its bibliography); their relative links are rewritten to reach the
  same files from one folder deeper, a link to a translated page reaching its translation.
- :class:`InstallCell`, one of generate_assignment's preprocessors (``nbgrader_config.py`` adds it,
  so plain ``nbgrader generate_assignment`` does the same): the repository URL of ``_config.yml``
  in the install cell, which the book's pages leave out (:data:`BOOK_HIDDEN_TAG`).
  :func:`placeholder_warning` says when that URL is still the template's placeholder.
- :func:`stale_chapters` says which chapters differ from what generation produces.
- :func:`verify` executes notebooks: every solution notebook must run with all its tests passing,
  and every released chapter, graded with its hidden tests restored as nbgrader does, must fail in
  each graded test cell with ``NotImplementedError`` and nowhere else.

``autograder release`` (see :mod:`autograder.cli`) calls them.
"""

import filecmp
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import nbformat
import yaml
from nbgrader.api import MissingEntry
from nbgrader.preprocessors import NbGraderPreprocessor, OverwriteCells
from traitlets import Unicode

from autograder.core import (
    CHAPTERS, INSTALL_TAG, ROOT, SHARED, SOLUTIONS, chapter_names, create_gradebook, grade_id, is_graded_test,
    replace_if_changed, strip_hidden_tests, write_if_changed)
import autograder.publish.translations as translations

URL_PLACEHOLDER = "{repository_url}"
#: ``repository.url`` of the course template's ``_config.yml``: to be replaced by the course's own.
PLACEHOLDER_REPOSITORY = "https://github.com/your-org/bertlab"
#: Jupyter Book 1 leaves a cell with this tag out of the HTML page; the downloaded notebook keeps it.
BOOK_HIDDEN_TAG = "remove-cell"
#: Cell metadata kept in a released notebook; everything else (execution times, scroll state) goes.
KEPT_CELL_METADATA = ("nbgrader", "tags", "editable", "deletable")


class ReleaseError(RuntimeError):
    """A chapter cannot be generated or verified; the message names the chapter, notebook and cell."""


# --------------------------------------------------------------------------------------------------
# Generation
# --------------------------------------------------------------------------------------------------


def _resolve_names(names, root: Path) -> list[str]:
    available = chapter_names(root)
    if not names:
        return available
    unknown = [name for name in names if name not in available]
    if unknown:
        raise ReleaseError(
            f"no solution notebook for {', '.join(unknown)} in {Path(root) / SOLUTIONS}; "
            f"chapters with one: {', '.join(available) or 'none'}"
        )
    return list(names)


def repository_url(root: Path = ROOT) -> str:
    """The course repository's URL: ``repository.url`` in ``_config.yml``, its only home."""
    config_path = Path(root) / "_config.yml"
    url = (yaml.safe_load(config_path.read_text()) or {}).get("repository", {}).get("url")
    if not url:
        raise ReleaseError(f"{config_path} has no repository.url (the install cell of every chapter needs it)")
    return url


def placeholder_warning(root: Path = ROOT) -> str | None:
    """A one-line warning when ``repository.url`` is still the template's placeholder, else None."""
    if repository_url(root).rstrip("/") != PLACEHOLDER_REPOSITORY:
        return None
    return (f"warning: repository.url in {Path(root) / '_config.yml'} is the placeholder {PLACEHOLDER_REPOSITORY}: "
            "every chapter's install cell installs from it; set it to your course's repository")


class InstallCell(NbGraderPreprocessor):
    """generate_assignment's preprocessor of the install cell (tagged ``install``): ``{repository_url}``
    replaced by ``repository.url`` of ``_config.yml``, and the tag that keeps the cell out of the
    book's pages added."""

    root = Unicode(help="the course repository, whose _config.yml names its URL (default: the working "
                   "folder, which nbgrader sets to the course's root)").tag(config=True)

    def preprocess(self, nb, resources):
        url = repository_url(Path(self.root or os.getcwd()))
        for cell in nb.cells:
            tags = cell.metadata.get("tags", [])
            if cell.cell_type == "code" and INSTALL_TAG in tags:
                cell.source = cell.source.replace(URL_PLACEHOLDER, url)
                if BOOK_HIDDEN_TAG not in tags:
                    cell.metadata["tags"] = [*tags, BOOK_HIDDEN_TAG]
        return nb, resources


class OverwriteReleasedCells(OverwriteCells):
    """nbgrader autograde's OverwriteCells, without its false alarm on the test cells as released.

    The gradebook keeps a test cell's checksum as the instructor wrote it, hidden tests included, while
    the released cell has them removed (jupyter/nbgrader#1961): plain OverwriteCells logs "Attribute
    'checksum' for cell test_softmax has changed!" for every hidden test of every untouched notebook.
    Here that warning is logged only when the submitted cell differs from the released one (the
    gradebook's source without its hidden tests). The cell is restored to the gradebook's source, hidden
    tests included, either way, as OverwriteCells does.
    """

    def preprocess_cell(self, cell, resources, cell_index):
        self._as_released = self._is_as_released(cell)
        return super().preprocess_cell(cell, resources, cell_index)

    def _is_as_released(self, cell) -> bool:
        """Whether ``cell``'s source is its gradebook source with the hidden tests removed."""
        try:
            source = self.gradebook.find_source_cell(grade_id(cell), self.notebook_id, self.assignment_id).source
        except MissingEntry:
            return False
        return cell.source == strip_hidden_tests(source)

    def report_change(self, name, attr, old, new):
        if not (attr == "checksum" and self._as_released):
            super().report_change(name, attr, old, new)


def nbgrader_config(root: Path, release_directory: Path, gradebook: Path):
    """The configuration of ``nbgrader_config.py``, writing into ``release_directory``."""
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
    config.CourseDirectory.root = str(root)
    config.CourseDirectory.release_directory = str(release_directory)
    config.CourseDirectory.db_url = f"sqlite:///{gradebook}"
    return config


def normalize(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Strip what changes from run to run."""
    notebook.metadata = nbformat.from_dict({
        key: notebook.metadata[key] for key in ("kernelspec", "language_info") if key in notebook.metadata
    })
    if "language_info" in notebook.metadata:
        notebook.metadata.language_info = {"name": notebook.metadata.language_info.get("name", "python")}
    for cell in notebook.cells:
        cell.metadata = nbformat.from_dict({k: cell.metadata[k] for k in KEPT_CELL_METADATA if k in cell.metadata})
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    return notebook


def write_notebook(notebook: nbformat.NotebookNode, path: Path) -> None:
    """Write in nbformat's canonical layout (sorted keys, indent 1) with a final newline."""
    path.write_text(nbformat.writes(notebook) + "\n", encoding="utf-8")



def generate(names=None, *, root: Path = ROOT, output: Path | None = None) -> list[Path]:
    """Generate the student version of each chapter in ``names`` (default: all) into ``output``.

    ``output`` defaults to ``root/chapters``. Each chapter is generated into a scratch folder first;
    then each file generated replaces its copy in ``output`` only when their bytes differ
    (:func:`replace_if_changed`), so that releasing unchanged chapters writes nothing. Nothing is
    deleted: a file of a chapter folder that generation does not produce, and a chapter folder
    without a solution, stay where they are (:func:`stale_chapters` lists them). Returns the files
    written.
    """
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    root = Path(root).resolve()
    names = _resolve_names(names, root)
    output = Path(output) if output is not None else root / CHAPTERS
    repository_url(root)  # a course without one fails here, in one line, before nbgrader runs
    written = []
    with tempfile.TemporaryDirectory(prefix="autograder-release-") as scratch:
        scratch = Path(scratch)
        create_gradebook(scratch / "gradebook.db")
        config = nbgrader_config(root, scratch / "release", scratch / "gradebook.db")
        api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
        for name in names:
            result = api.generate_assignment(name, force=True, create=True)
            if not result["success"]:
                raise ReleaseError(f"nbgrader could not generate {name}:\n{result.get('error') or ''}\n"
                                   f"{result.get('log') or ''}")
            generated = scratch / "release" / name
            for path in sorted(generated.rglob("*.ipynb")):
                write_notebook(normalize(nbformat.read(path, as_version=4)), path)
            for path in sorted(path for path in generated.rglob("*") if path.is_file()):
                destination = output / name / path.relative_to(generated)
                if replace_if_changed(path, destination):
                    written.append(destination)
            written += _write_translations(root, name, generated, output)
        written += _write_translated_pages(root, output)
    return written


def _write_translations(root: Path, name: str, generated: Path, output: Path) -> list[Path]:
    """Write the chapter ``name``, generated into ``generated``, in each language with catalogues, into
    ``output/LANG/name``: its notebooks with their Markdown translated (:mod:`autograder.publish.translations`),
    its other files as they are. Only the files whose bytes change are written."""
    written = []
    for language in translations.languages(root):
        catalogue = translations.catalogue_path(root, language, name)
        pages = translations.translated_pages(root, language)
        for path in sorted(path for path in generated.rglob("*") if path.is_file()):
            relative = path.relative_to(generated)
            destination = output / language / name / relative
            if path.suffix == ".ipynb":
                folder = PurePosixPath(name, relative.as_posix()).parent
                move = translations.Move(str(CHAPTERS / folder), str(PurePosixPath(CHAPTERS, language) / folder), pages)
                text = translations.translated_notebook_text(path, catalogue, move)
                changed = write_if_changed(destination, text.encode("utf-8"), SHARED)
            else:
                changed = replace_if_changed(path, destination)
            if changed:
                written.append(destination)
    return written


def _write_translated_pages(root: Path, output: Path) -> list[Path]:
    """Write each page of the book with a catalogue (:data:`autograder.publish.translations.PAGES`), in each
    language, into ``output/LANG/``. Only the files whose bytes change are written."""
    written = []
    for language in translations.languages(root):
        pages = translations.translated_pages(root, language)
        for domain in translations.page_domains(root):
            page = PurePosixPath(translations.PAGES[domain])
            translated = translations.translated_page(language, domain)
            move = translations.Move(str(page.parent), str(translated.parent), pages)
            destination = output / translated.relative_to(CHAPTERS)
            text = translations.translated_page_text(root, language, domain, move)
            if write_if_changed(destination, text.encode("utf-8"), SHARED):
                written.append(destination)
    return written


def _tree_differences(expected: Path, actual: Path, prefix: str) -> list[str]:
    comparison = filecmp.dircmp(expected, actual, ignore=["__pycache__", ".ipynb_checkpoints"])
    differences = [f"{prefix}{name} is missing" for name in comparison.left_only]
    differences += [f"{prefix}{name} should not be there" for name in comparison.right_only]
    for name in comparison.common_files:
        if (expected / name).read_bytes() != (actual / name).read_bytes():
            differences.append(f"{prefix}{name} differs from what generation produces")
    for name in comparison.common_dirs:
        differences += _tree_differences(expected / name, actual / name, f"{prefix}{name}/")
    return differences


def stale_chapters(root: Path = ROOT) -> list[str]:
    """What differs between ``chapters/`` and a fresh generation; empty when they agree."""
    root = Path(root).resolve()
    with tempfile.TemporaryDirectory(prefix="autograder-expected-") as expected:
        generate(root=root, output=Path(expected))
        chapters = root / CHAPTERS
        if not chapters.is_dir():
            return [f"{CHAPTERS}/ is missing"]
        return _tree_differences(Path(expected), chapters, f"{CHAPTERS}/")


# --------------------------------------------------------------------------------------------------
# Verification
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CellError:
    """An error output of an executed code cell."""

    cell: str  # the nbgrader grade_id, or the cell's id
    ename: str
    evalue: str

    def __str__(self) -> str:
        return f"{self.ename}: {self.evalue}" if self.evalue else self.ename


def _cell_name(cell) -> str:
    return grade_id(cell) or cell.get("id", "?")


def execute(notebook: nbformat.NotebookNode, directory: Path, timeout: int, grading: bool = True,
            figures: bool = False) -> list[CellError]:
    """Run every cell in a fresh kernel, in ``directory``, and return the errors. With ``grading`` the
    kernel sees ``NBGRADER_EXECUTION`` as when nbgrader grades (heavy cells do less); without, it runs as
    a reader's Jupyter does. Figures become PNG outputs, as in Jupyter, with ``figures``; else they are
    not drawn (matplotlib's Agg backend). The outputs are written into ``notebook``."""
    from nbclient import NotebookClient

    client = NotebookClient(
        notebook, timeout=timeout, kernel_name="python3", allow_errors=True,
        resources={"metadata": {"path": str(directory)}},
    )
    environment = {name: value for name, value in os.environ.items()
                   if name not in ("NBGRADER_EXECUTION", "MPLBACKEND")}
    if grading:
        environment["NBGRADER_EXECUTION"] = "autograde"
    if not figures:
        environment["MPLBACKEND"] = "Agg"
    client.execute(env=environment)
    return [
        CellError(_cell_name(cell), output.get("ename", ""), output.get("evalue", ""))
        for cell in notebook.cells if cell.cell_type == "code"
        for output in cell.get("outputs", []) if output.output_type == "error"
    ]


def with_hidden_tests(chapter: nbformat.NotebookNode, solution: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The chapter with each graded test cell's source taken from the solution, as autograde does."""
    tests = {_cell_name(cell): cell.source for cell in solution.cells if is_graded_test(cell)}
    restored = nbformat.from_dict(chapter)
    for cell in restored.cells:
        if is_graded_test(cell):
            cell.source = tests[_cell_name(cell)]
    return restored


def verify_solution(path: Path, timeout: int = 600) -> list[str]:
    """Problems of a solution notebook: any cell that raises (all tests must pass)."""
    notebook = nbformat.read(path, as_version=4)
    tests = [_cell_name(cell) for cell in notebook.cells if is_graded_test(cell)]
    problems = [] if tests else [f"{path}: no graded test cell"]
    for error in execute(notebook, path.parent, timeout):
        problems.append(f"{path}, cell {error.cell}: {error}")
    return problems


def verify_chapter(path: Path, solution_path: Path, timeout: int = 600) -> list[str]:
    """Problems of a released chapter graded blank: every graded test cell must fail with
    NotImplementedError (hidden tests restored), and no other cell may fail."""
    chapter = nbformat.read(path, as_version=4)
    solution = nbformat.read(solution_path, as_version=4)
    restored = with_hidden_tests(chapter, solution)
    tests = {_cell_name(cell) for cell in restored.cells if is_graded_test(cell)}
    errors = {error.cell: error for error in execute(restored, path.parent, timeout)}
    problems = []
    for name in sorted(tests - errors.keys()):
        problems.append(f"{path}, test cell {name}: passes on the blank exercise (a test that cannot fail)")
    for name, error in errors.items():
        if name not in tests:
            problems.append(f"{path}, cell {name}: {error} (only test cells may fail)")
        elif error.ename != "NotImplementedError":
            problems.append(f"{path}, test cell {name}: fails with {error}, expected NotImplementedError")
    return problems


def _verify_one(task: tuple[str, str, str, int]) -> tuple[str, list[str], float]:
    kind, path, solution_path, timeout = task
    start = time.perf_counter()
    if kind == "solution":
        problems = verify_solution(Path(path), timeout)
    else:
        problems = verify_chapter(Path(path), Path(solution_path), timeout)
    return f"{kind} {Path(path).relative_to(Path(path).parents[2])}", problems, time.perf_counter() - start


def verify(names=None, *, root: Path = ROOT, jobs: int = 1, timeout: int = 600, report=print) -> list[str]:
    """Execute the solutions and the released chapters of ``names`` (default: all); return problems.

    Runs ``jobs`` notebooks at a time; ``timeout`` is per cell, in seconds. ``report`` receives one
    line per notebook as it finishes.
    """
    root = Path(root).resolve()
    tasks = []
    for name in _resolve_names(names, root):
        for solution in sorted((root / SOLUTIONS / name).glob("*.ipynb")):
            chapter = root / CHAPTERS / name / solution.name
            tasks.append(("solution", str(solution), str(solution), timeout))
            if not chapter.exists():
                raise ReleaseError(f"{chapter} does not exist: run `autograder release {name}` first")
            tasks.append(("chapter", str(chapter), str(solution), timeout))
    problems = []
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(_verify_one, tasks))
    else:
        results = map(_verify_one, tasks)
    for label, found, seconds in results:
        report(f"{label}: {'ok' if not found else f'{len(found)} problem(s)'} ({seconds:.1f} s)")
        problems += found
    return problems
