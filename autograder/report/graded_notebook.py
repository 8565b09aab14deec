"""The graded notebook, as nbgrader's autograde would have left it, built by the grader.

The submission's cells in their order, each code cell with the outputs it gave in the student
process (:class:`autograder.core.results.NotebookRun`), and each test cell with the instructor's source
(hidden tests included: this notebook is the instructor's) and the grader's outcome as its output: a
stream with the status, points and message, and an error output when the test did not pass (so that
nbgrader's own tools read the same grade). Graded cells get the instructor's nbgrader metadata back;
a test cell the submission lacks is added at the end. Nothing else of the submission's metadata is
kept.
"""

import copy

from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output, new_raw_cell

from autograder.core import Chapter, NotebookResult, NotebookRun, Status, TestResult, grade_id

MARKS = {Status.PASSED: "✔", Status.FAILED: "✘", Status.ERROR: "✘", Status.TIMEOUT: "⧗", Status.TAMPERED: "⚠",
         Status.MISSING: "∅"}
MAKERS = {"code": new_code_cell, "markdown": new_markdown_cell, "raw": new_raw_cell}


def outcome_text(test: TestResult, printed: str) -> str:
    """What a test cell shows: its status, points and message, then what the test printed."""
    text = f"{MARKS.get(test.status, '')} {test.status}: {test.points:g} / {test.max_points:g} points\n"
    if test.message:
        text += test.message.rstrip() + "\n"
    if printed:
        text += "\n" + printed.rstrip() + "\n"
    return text


def outcome_outputs(test: TestResult, printed: str) -> list:
    outputs = [new_output("stream", name="stdout" if test.status == Status.PASSED else "stderr",
                          text=outcome_text(test, printed))]
    if test.status != Status.PASSED:
        outputs.append(new_output("error", ename=test.status, evalue=test.headline, traceback=[]))
    return outputs


def build(submission, instructor, chapter: Chapter, run: NotebookRun | None, result: NotebookResult):
    """The graded notebook of ``submission`` (None when it could not be read) against the
    ``instructor``'s notebook of ``chapter``."""
    notebook = new_notebook(metadata=copy.deepcopy(instructor.metadata))
    metadata = {grade_id(cell): cell.metadata.nbgrader for cell in instructor.cells if grade_id(cell)}
    kinds = {grade_id(cell): cell.cell_type for cell in instructor.cells if grade_id(cell)}
    tests = {test.grade_id: test for test in result.tests}
    printed = {grade_id: outcome.output for grade_id, outcome in (run.outcomes.items() if run else ())}
    seen = set()
    for index, cell in enumerate(submission.cells if submission is not None else []):
        name = grade_id(cell)
        first = name in metadata and name not in seen and cell.cell_type == kinds[name]
        if first:
            seen.add(name)
        extra = {"metadata": {"nbgrader": copy.deepcopy(metadata[name])}} if first else {}
        new = MAKERS[cell.cell_type](source=cell.source, **extra)
        if first and name in tests and cell.cell_type == "code":
            new.source = chapter.test(name).source
            new.outputs = outcome_outputs(tests[name], printed.get(name, ""))
        elif cell.cell_type == "code" and run is not None:
            new.outputs = list(run.outputs.get(index, []))
        notebook.cells.append(new)
    for name, test in tests.items():  # test cells the submission lacks
        if name not in seen and name in metadata:
            cell = new_code_cell(source=chapter.test(name).source, metadata={"nbgrader": copy.deepcopy(metadata[name])})
            cell.outputs = outcome_outputs(test, printed.get(name, ""))
            notebook.cells.append(cell)
    return notebook
