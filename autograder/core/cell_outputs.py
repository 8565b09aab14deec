"""The outputs of the student's cells, as the grader keeps them: checked, and within fixed caps.

The student process reports what each cell showed; the report is the student's to forge, so the
grader keeps only well-formed nbformat outputs of known kinds (streams, displays and results of the
mimetypes of :data:`KEPT_MIMETYPES`, errors), each text cut to ``MAX_OUTPUT_CHARS`` and the whole
notebook to ``MAX_NOTEBOOK_OUTPUT_CHARS`` (:mod:`autograder.bounds`; after which only the start of each
error is kept) and ``MAX_NOTEBOOK_OUTPUTS`` outputs (after which none); what is cut is replaced by a note
saying so. A feedback page cleans them again within its own bounds. HTML and Markdown outputs, which the grader
sanitizes and renders, are kept as such within ``MAX_RICH_OUTPUT_CHARS`` characters and the tags of a
:class:`TagBudget`; past them, their text is kept, with a note that says why.

The sanitizer parses HTML in a time that grows with the square of how its elements nest, so what it is handed
is bounded by start tags (:class:`TagBudget`): here for a notebook's HTML outputs, and on a feedback page
for its Markdown (:mod:`autograder.report.sanitize`).
"""

import re

from nbformat.v4 import new_output

from autograder.bounds import (
    MAX_ERROR_NAME_CHARS, MAX_HTML_TAGS, MAX_IMAGE_CHARS, MAX_NOTEBOOK_HTML_TAGS, MAX_NOTEBOOK_OUTPUT_CHARS,
    MAX_NOTEBOOK_OUTPUTS, MAX_OUTPUT_CHARS, MAX_RICH_OUTPUT_CHARS)
from autograder.text import printable

KEPT_MIMETYPES = ("text/plain", "text/html", "text/markdown", "text/latex", "image/png", "image/jpeg")
RICH_MIMETYPES = ("text/html", "text/markdown")  # sanitized and rendered as HTML
START_TAG = re.compile(r"<[A-Za-z]")  # what html5lib may make an element of


def start_tags(text: str) -> int:
    """How many start tags ``text`` has: each may become an element of html5lib's tree, one level deeper or one
    more sibling."""
    return len(START_TAG.findall(text))


class TagBudget:
    """What is left of the ``MAX_NOTEBOOK_HTML_TAGS`` start tags the sanitizer parses of one whole (a page's
    Markdown cells, a notebook's HTML outputs); of one part (a cell, an output), ``MAX_HTML_TAGS``."""

    def __init__(self, whole: str):
        self.whole = whole  # what the budget is of, for the reasons: "the page", "the notebook's outputs"
        self.left = MAX_NOTEBOOK_HTML_TAGS

    def admit(self, html_text: str) -> str | None:
        """None when the sanitizer may parse ``html_text``, whose tags are then taken from what is left; else why
        it may not."""
        tags = start_tags(html_text)
        if tags > MAX_HTML_TAGS:
            return (f"its HTML has {tags:,} tags, more than the {MAX_HTML_TAGS:,} the grader renders of one cell or "
                    "output")
        if tags > self.left:
            return f"the HTML of {self.whole} reached the {MAX_NOTEBOOK_HTML_TAGS:,} tags the grader renders"
        self.left -= tags
        return None


class OutputBudget:
    """What is left of a notebook's MAX_NOTEBOOK_OUTPUT_CHARS and MAX_NOTEBOOK_OUTPUTS (or of ``chars`` and
    ``outputs``: a feedback page's), and of what its HTML and Markdown outputs may hold: MAX_RICH_OUTPUT_CHARS
    characters and the tags of a :class:`TagBudget`."""

    def __init__(self, chars: int = MAX_NOTEBOOK_OUTPUT_CHARS, outputs: int = MAX_NOTEBOOK_OUTPUTS,
                 whole: str = "the notebook"):
        self.whole = whole  # what the budget is of, for the notes
        self.left = chars
        self.exhausted = False
        self.outputs = outputs
        self.counted_out = False  # whether the outputs ran out; a note says so where they did
        self.out_note = f"[{whole} keeps no more outputs: at most {outputs:,}]\n"
        self.rich = MAX_RICH_OUTPUT_CHARS
        self.tags = TagBudget(f"{whole}'s outputs")

    def take(self, text: str, limit: int) -> str:
        """``text`` cut to ``limit`` and to what is left of the budget, with a note when cut."""
        allowed = max(0, min(limit, self.left))
        kept = (text if len(text) <= allowed
                else text[:allowed] + f"\n[output truncated: {len(text) - allowed} more characters]\n")
        self.exhausted = self.exhausted or len(text) > self.left  # the budget, not ``limit``, cut it
        self.left -= min(len(text), allowed)
        return kept

    def refuse_rich(self, text: str) -> str | None:
        """None when an HTML or Markdown output's ``text`` may be kept as such (its characters and tags are then
        taken from what is left); else why not."""
        if len(text) > self.rich:
            return (f"{self.whole}'s HTML and Markdown outputs reached the {MAX_RICH_OUTPUT_CHARS:,} characters the "
                    "grader renders")
        refusal = self.tags.admit(text)
        if refusal is None:
            self.rich -= len(text)
        return refusal


def clean(raw, budget: OutputBudget) -> list:
    """The outputs of one cell, as nbformat outputs, from what the student process sent. Once the
    notebook's characters are spent, only errors are kept, each as its name and the start of its message;
    once its outputs are, none, and a note says so where they ran out."""
    outputs = []
    for item in raw if isinstance(raw, list) else []:
        if budget.outputs == 0:
            if not budget.counted_out:
                outputs.append(new_output("stream", name="stderr", text=budget.out_note))
                budget.counted_out = budget.exhausted = True
            break
        if not isinstance(item, dict):
            continue
        if not budget.exhausted:
            output = _clean_one(item, budget)
        elif item.get("output_type") == "error":
            output = new_output("error", ename=printable(str(item.get("ename")), MAX_ERROR_NAME_CHARS),
                                evalue=printable(str(item.get("evalue")), MAX_ERROR_NAME_CHARS), traceback=[])
        else:
            output = None
        if output is not None:
            outputs.append(output)
            budget.outputs -= 1
    return outputs


def _clean_one(item: dict, budget: OutputBudget):
    kind = item.get("output_type")
    if kind == "stream" and isinstance(item.get("text"), str):
        name = "stderr" if item.get("name") == "stderr" else "stdout"
        return new_output("stream", name=name, text=budget.take(item["text"], MAX_OUTPUT_CHARS))
    if kind in ("display_data", "execute_result") and isinstance(item.get("data"), dict):
        data = {}
        for mimetype in KEPT_MIMETYPES:
            value = item["data"].get(mimetype)
            if isinstance(value, str):
                if mimetype.startswith("image/"):
                    if len(value) > min(MAX_IMAGE_CHARS, budget.left):
                        continue  # a cut image is no image
                    budget.left -= len(value)
                    data[mimetype] = value
                elif mimetype in RICH_MIMETYPES and (refusal := budget.refuse_rich(value)):
                    data["text/plain"] = f"[{mimetype} output shown as text: {refusal}]\n" + data.get("text/plain", "")
                else:
                    data[mimetype] = budget.take(value, MAX_OUTPUT_CHARS)
        if not data:
            return None
        extra = {"execution_count": None} if kind == "execute_result" else {}
        return new_output(kind, data=data, metadata={}, **extra)
    if kind == "error":
        traceback = item.get("traceback") if isinstance(item.get("traceback"), list) else []
        text = budget.take("\n".join(str(line) for line in traceback), MAX_OUTPUT_CHARS)
        return new_output("error", ename=printable(str(item.get("ename")), MAX_ERROR_NAME_CHARS),
                          evalue=budget.take(str(item.get("evalue")), MAX_OUTPUT_CHARS),
                          traceback=text.split("\n") if text else [])
    return None
