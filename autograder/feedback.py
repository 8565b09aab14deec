"""Feedback for a student: the graded notebook, each test's outcome, and no hidden test.

nbgrader's feedback shows the executed test cells, hidden tests and the tracebacks through them
included. Here the feedback notebook is the executed notebook in which every test cell holds the
released source (hidden tests removed, as the student received it) and, as its only output, the
grader's outcome: status, points and message. A table of all outcomes opens the notebook. nbgrader's
generate_feedback then renders it to HTML with the scores from the gradebook.

The student's own cells keep their outputs only up to the first test cell: in nbgrader's run the
hidden tests executed in the student's kernel, so any later output could show them (``print(In)``).
"""

import copy
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

HIDDEN_TESTS = "BEGIN HIDDEN TESTS"
MARKS = {"passed": "✔", "failed": "✘", "error": "✘", "timeout": "⧗", "tampered": "⚠", "missing": "∅"}


def _strip_hidden_tests(source: str) -> str:
    """Remove every hidden test region (nbgrader's delimiters) from a cell's source."""
    from nbgrader.preprocessors import ClearHiddenTests

    cell = new_code_cell(source=source)
    try:
        ClearHiddenTests()._remove_hidden_test_region(cell)
    except RuntimeError:  # an unterminated region: drop everything from its start
        return source[: source.index(HIDDEN_TESTS)].rsplit("\n", 1)[0]
    return cell.source


def _outcome_output(record: dict, printed: str):
    mark = MARKS.get(record["status"], "")
    text = f"{mark} {record['status']}: {record['points']:g} / {record['max_points']:g} points\n"
    if record["message"]:
        text += record["message"].rstrip() + "\n"
    if printed:
        text += "\n" + printed.rstrip() + "\n"
    return new_output("stream", name="stdout" if record["status"] == "passed" else "stderr", text=text)


def _summary(records: list[dict], problem: str | None) -> str:
    total, maximum = sum(r["points"] for r in records), sum(r["max_points"] for r in records)
    lines = [f"## Grading: {total:g} / {maximum:g} points", ""]
    if problem:
        lines += [f"**This submission could not be graded:** {problem}", ""]
    lines += ["Outputs of your cells after the first test are not shown here; run your notebook to see them.", ""]
    lines += ["| test | status | points | message |", "|---|---|---:|---|"]
    for record in records:
        message = record["message"].splitlines()[0] if record["message"] else ""
        lines.append(f"| `{record['grade_id']}` | {MARKS.get(record['status'], '')} {record['status']} | "
                     f"{record['points']:g} / {record['max_points']:g} | {message.replace('|', '/')} |")
    return "\n".join(lines)


def feedback_notebook(base, source, records: list[dict], outputs: dict[str, str], problem: str | None):
    """The notebook shown to the student.

    ``base`` is the executed notebook (or the submission, or None); ``source`` the instructor's
    notebook, whose nbgrader metadata the graded cells get back (so the gradebook's scores attach
    to them); ``outputs`` what each test printed in the grader's run.
    """
    notebook = copy.deepcopy(base) if base is not None else new_notebook()
    notebook.metadata = copy.deepcopy(source.metadata)
    metadata = {cell.metadata.nbgrader["grade_id"]: cell.metadata.nbgrader
                for cell in source.cells if "grade_id" in cell.metadata.get("nbgrader", {})}
    released = {cell.metadata.nbgrader["grade_id"]: _strip_hidden_tests(cell.source)
                for cell in source.cells if "grade_id" in cell.metadata.get("nbgrader", {})}
    by_test = {record["grade_id"]: record for record in records}
    seen = set()
    after_a_test = False  # the hidden tests have run in the kernel: later outputs could show them
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        cell.metadata.pop("nbgrader", None)
        if grade_id in metadata and grade_id not in seen:
            seen.add(grade_id)
            cell.metadata["nbgrader"] = copy.deepcopy(metadata[grade_id])
        if grade_id in by_test and cell.cell_type == "code":
            cell.source = released[grade_id]
            cell.outputs = [_outcome_output(by_test[grade_id], outputs.get(grade_id, ""))]
            after_a_test = True
            continue
        hidden = HIDDEN_TESTS in cell.source
        if hidden:
            cell.source = _strip_hidden_tests(cell.source)
        if cell.cell_type == "code" and (after_a_test or hidden):
            cell.outputs = []
    for grade_id, record in by_test.items():  # test cells the submission lacks
        if grade_id not in seen and grade_id in metadata:
            cell = new_code_cell(source=released[grade_id], metadata={"nbgrader": copy.deepcopy(metadata[grade_id])})
            cell.outputs = [_outcome_output(record, outputs.get(grade_id, ""))]
            notebook.cells.append(cell)
    notebook.cells.insert(0, new_markdown_cell(_summary(records, problem)))
    return notebook


def generate(course: Path, chapter, student: str, executed: Path | None, submission, records: list[dict],
             outputs: dict[str, str], problem: str | None) -> bytes:
    """The feedback HTML of one (student, chapter), made in the job's nbgrader ``course``.

    The feedback notebook replaces the executed one in ``autograded/`` and nbgrader's
    generate_feedback renders it with the scores of the course's gradebook (which must hold them).
    """
    from autograder.grade import nbgrader_api

    source = nbformat.read(course / "source" / chapter.name / f"{chapter.notebook}.ipynb", as_version=4)
    base = nbformat.read(executed, as_version=4) if executed is not None else submission
    notebook = feedback_notebook(base, source, records, outputs, problem)
    path = course / "autograded" / student / chapter.name / f"{chapter.notebook}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    nbformat.write(notebook, path)
    result = nbgrader_api(course, f"sqlite:///{course / 'gradebook.db'}").generate_feedback(chapter.name, student)
    html = course / "feedback" / student / chapter.name / f"{chapter.notebook}.html"
    if not result["success"] or not html.exists():
        raise RuntimeError(f"nbgrader could not generate the feedback:\n{(result.get('error') or '')[-3000:]}")
    return html.read_bytes()
