"""The feedback pages' exporter gives nbconvert's HTMLExporter's page, without its second pass."""

import base64
import copy

import nbformat
import pytest
from bs4 import BeautifulSoup
from nbconvert.exporters import HTMLExporter
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output
from traitlets.config import Config

from autograder.feedback_exporter import MISSING_ALT, FeedbackExporter, add_missing_alt

PNG = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d49444154789c6360000002000154a24f5d"
    "0000000049454e44ae426082")).decode()


def notebook() -> nbformat.NotebookNode:
    """Markdown with an image that has alt text, code with an image output that has none, HTML output
    with a script (which the sanitizer removes), an error, and a stream."""
    cells = [
        new_markdown_cell("# A title\n\nSome *text* and ![a dot](data:image/png;base64," + PNG + ")."),
        new_code_cell("plot()", outputs=[new_output("display_data", data={"image/png": PNG, "text/plain": "<Figure>"})]),
        new_code_cell("show()", outputs=[new_output("display_data", data={
            "text/html": "<b>bold</b><script>alert(1)</script><IMG SRC='x.png'>", "text/plain": "bold"})]),
        new_code_cell("1 / 0", outputs=[new_output("error", ename="ZeroDivisionError", evalue="division by zero",
                                                   traceback=["ZeroDivisionError: division by zero"])]),
        new_code_cell("print('hi')", outputs=[new_output("stream", name="stdout", text="hi\n")]),
    ]
    return new_notebook(cells=cells, metadata={"language_info": {"name": "python"}})


@pytest.mark.parametrize("sanitize", [True, False])
def test_the_page_is_nbconverts_page(sanitize):
    config = Config()
    config.HTMLExporter.sanitize_html = sanitize
    config.HTMLExporter.template_name = "classic"
    cells = notebook()  # one notebook for both: new cells get random ids
    theirs, _ = HTMLExporter(config=config).from_notebook_node(copy.deepcopy(cells))
    ours, _ = FeedbackExporter(config=config).from_notebook_node(copy.deepcopy(cells))
    # nbconvert's page went through BeautifulSoup once more; so does ours here, to compare them
    assert str(BeautifulSoup(ours, "html.parser")) == theirs
    assert ours.count(f'alt="{MISSING_ALT}"') == theirs.count(f'alt="{MISSING_ALT}"') >= 1
    assert ("<script>alert(1)</script>" in ours) == (not sanitize)


@pytest.mark.parametrize("tag, expected", [
    ('<img src="a.png">', f'<img alt="{MISSING_ALT}" src="a.png">'),
    ("<IMG SRC='a.png'/>", f"<img alt=\"{MISSING_ALT}\" SRC='a.png'/>"),
    ('<img alt="a plot" src="a.png">', '<img alt="a plot" src="a.png">'),
    ('<img src="a.png" alt="">', '<img src="a.png" alt="">'),
    ('<imgur src="a.png">', '<imgur src="a.png">'),
])
def test_images_without_alt_text_get_nbconverts(tag, expected):
    assert add_missing_alt(tag) == expected
