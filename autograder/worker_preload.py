"""What every grading worker would do for itself, done once by the server the workers are forked from.

The class run (:mod:`autograder.grade`) forks each job's worker from a server that imports
:data:`autograder.job.WORKER_MODULES`, this module last. Importing it does, once, the part of every
job that depends on no submission, so that each worker inherits it done (the CPU it cost each job, on
a 2-core machine):

- the imports that jobs made on first use: ``torch.testing.assert_close`` imports
  ``torch.distributed.tensor``, and sympy with it (0.6 s), :mod:`autograder.run.reference_copies` every
  ``bertlab`` module (0.06 s), and the checks' modules (:func:`autograder.checks.exercises_by_chapter`): a
  job imports its chapter's, a Dask job's stand-ins (:func:`autograder.run.stand_ins.withhold`) every one
  (most of the setup of a Dask job's process, which ``benchmarks/grading.py`` reports);
- the feedback pages' exporter (:func:`autograder.report.feedback.exporter`), its Jinja template compiled, and
  what a first page builds (the Python lexer, the notebook schema's validator, the parsers of Markdown,
  HTML and TeX), by rendering a sample page and the sample's notebook for the formgrader (0.3 s).

The server keeps the garbage collector off all of it (``gc.freeze``), as the workers do: its end, which a
Dask worker's death or a class run's end brings, does not walk through it all.

Nothing here sees a submission: the server runs the grader's code on this module's sample only, so a
worker starts with the grader's state and nothing of any student's. Should this fail, each worker does
the work itself (a line on stderr says why).
"""

import gc
import sys

from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from autograder import report
from autograder.checks import exercises_by_chapter
from autograder.core import Chapter, NotebookResult, Reference
from autograder.run.reference_copies import reference_modules

SAMPLE_MARKDOWN = ("# A sample\n\nAs {cite:t}`sample` write, $\\frac{QK^T}{\\sqrt{d_k}}$ weighs the values:\n\n"
                   "$$\\begin{aligned} a &= b \\\\ c &= d \\end{aligned}$$\n\n"
                   "*Text*, `code`, [a link](https://example.org).")
SAMPLE_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgAAACAAFUok9dAAAAAElFTkSuQmCC"  # 1 x 1


def sample_notebook():
    """A graded notebook of one Markdown cell and one code cell with every kind of output."""
    outputs = [new_output("stream", name="stdout", text="tensor([0.5, 0.5])\n"),
               new_output("display_data", data={"image/png": SAMPLE_PNG, "text/plain": "<Figure>"}),
               new_output("execute_result", data={"text/html": "<b>bold</b>", "text/plain": "bold"}, execution_count=1),
               new_output("error", ename="ZeroDivisionError", evalue="division by zero",
                          traceback=["\x1b[0;31mZeroDivisionError\x1b[0m: division by zero"])]
    return new_notebook(metadata={"language_info": {"name": "python"}},
                        cells=[new_markdown_cell(SAMPLE_MARKDOWN), new_code_cell("print(softmax(x))", outputs=outputs)])


def prepare() -> None:
    """Import what the jobs import on first use; make the feedback exporter and render the sample with it."""
    import torch

    torch.testing.assert_close(torch.zeros(1), torch.zeros(1))
    reference_modules()
    exercises_by_chapter()
    references = {"sample": Reference("Vaswani et al.", "2017")}
    chapter = Chapter("sample", "sample", tests=(), grade_ids=frozenset(), exercises=(), context=(), fingerprint="")
    result = NotebookResult("sample", "sample", tests=())
    graded = sample_notebook()
    report.inert_notebook(graded, references)
    report.render(report.student_view(graded, chapter, result, {}), result, chapter, references)


try:
    prepare()
except Exception as error:  # noqa: BLE001 -- the workers can do it all themselves
    print(f"note: the grading workers' server could not prepare their common work ({type(error).__name__}: {error}); "
          "each worker does it", file=sys.stderr)
gc.freeze()
