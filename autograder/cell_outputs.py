"""The outputs of the student's cells, as the grader keeps them: checked, and within fixed caps.

The student process reports what each cell showed; the report is the student's to forge, so the
grader keeps only well-formed nbformat outputs of known kinds (streams, displays and results of the
mimetypes of :data:`KEPT_MIMETYPES`, errors), each text cut to ``MAX_OUTPUT_CHARS`` and the whole
notebook to ``MAX_NOTEBOOK_OUTPUT_CHARS`` (:mod:`autograder.bounds`; after which only the start of each
error is kept); what is cut is replaced by a note saying so.
"""

from nbformat.v4 import new_output

from autograder.bounds import MAX_ERROR_NAME_CHARS, MAX_IMAGE_CHARS, MAX_NOTEBOOK_OUTPUT_CHARS, MAX_OUTPUT_CHARS
from autograder.wire import printable

KEPT_MIMETYPES = ("text/plain", "text/html", "text/markdown", "text/latex", "image/png", "image/jpeg")


class OutputBudget:
    """What is left of a notebook's MAX_NOTEBOOK_OUTPUT_CHARS."""

    def __init__(self, chars: int = MAX_NOTEBOOK_OUTPUT_CHARS):
        self.left = chars
        self.exhausted = False

    def take(self, text: str, limit: int) -> str:
        """``text`` cut to ``limit`` and to what is left of the budget, with a note when cut."""
        allowed = max(0, min(limit, self.left))
        kept = text if len(text) <= allowed else text[:allowed] + f"\n[output truncated: {len(text) - allowed} more characters]\n"
        self.left -= min(len(text), allowed)
        self.exhausted = self.exhausted or len(text) > allowed
        return kept


def clean(raw, budget: OutputBudget) -> list:
    """The outputs of one cell, as nbformat outputs, from what the student process sent. Once the
    notebook's budget is spent, only errors are kept, each as its name and the start of its message."""
    outputs = []
    for item in raw if isinstance(raw, list) else []:
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
