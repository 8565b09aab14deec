"""The HTML exporter of the feedback pages: nbconvert's, without its second pass over the page.

nbconvert's ``HTMLExporter.from_notebook_node`` renders the page with its template, then parses the
whole page again with BeautifulSoup's pure-Python parser to give every image without one an ``alt``
text and JupyterLab's cells a ``tabindex``, and writes it out again: a third of the time of a feedback
page, for pages whose template (nbgrader's feedback, on nbconvert's classic template) has no
JupyterLab cells. :class:`FeedbackExporter` renders with the same filters and template and adds the
same ``alt`` text to the ``<img>`` tags that lack one; nothing else differs, the sanitizer included
(``sanitize_html`` and the template's own filters run while the template renders).
:func:`feedback_exporter` configures one as nbgrader's feedback converter configures its own.
"""

import re
from pathlib import Path

from nbconvert.exporters import HTMLExporter, TemplateExporter
from nbconvert.filters.highlight import Highlight2HTML
from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter

MISSING_ALT = "No description has been provided for this image"  # nbconvert's words
_IMAGE_WITHOUT_ALT = re.compile(r"<img(?![^>]*\salt=)(?=[\s>/])", re.IGNORECASE)


def add_missing_alt(page: str) -> str:
    """Every ``<img`` tag without an ``alt`` attribute, given nbconvert's ``alt`` text."""
    return _IMAGE_WITHOUT_ALT.sub(f'<img alt="{MISSING_ALT}"', page)


class FeedbackExporter(HTMLExporter):
    """``HTMLExporter`` whose ``from_notebook_node`` skips the BeautifulSoup pass (see the module)."""

    def from_notebook_node(self, nb, resources=None, **kw):
        language = nb.metadata.get("language_info", {})
        lexer = language.get("pygments_lexer", language.get("name", None))
        self.register_filter("highlight_code", self.filters.get("highlight_code",
                                                                Highlight2HTML(pygments_lexer=lexer, parent=self)))
        resources = self._init_resources(resources)
        self.register_filter("filter_data_type", WidgetsDataTypeFilter(notebook_metadata=self._nb_metadata,
                                                                       parent=self, resources=resources))
        page, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
        return add_missing_alt(page), resources


def feedback_exporter(filters: dict):
    """An exporter of feedback pages configured as nbgrader's feedback converter (``GenerateFeedback``)
    configures the one it makes for each page: :class:`~autograder.report.feedback_exporter.FeedbackExporter`
    (nbconvert's HTMLExporter without its second pass over the page), nbconvert's HTML sanitizer on
    (``sanitize_html``), no default preprocessors, the stylesheets of nbgrader's formgrader, and the
    template ``autograder/templates/sanitized_feedback`` (nbgrader's feedback template whose Markdown
    cells are rendered by the filter ``book_markdown`` and sanitized by ``sanitized_html``, two of the
    template's ``filters``). One exporter renders any number of pages
    (:func:`autograder.report.feedback.render_feedback`); it compiles its template once, with its first page."""
    import nbgrader
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
    from traitlets.config import Config

    formgrader = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader"
    config = Config()
    config.Exporter.default_preprocessors = []
    config.HTMLExporter.sanitize_html = True
    config.HTMLExporter.template_name = "sanitized_feedback"
    config.HTMLExporter.template_file = "sanitized_feedback.html.j2"
    config.HTMLExporter.extra_template_basedirs = [str(Path(__file__).parents[1] / "templates"),
                                                   str(formgrader / "templates")]
    config.HTMLExporter.extra_template_paths = [str(formgrader / "static" / "node_modules" / "bootstrap" / "dist"
                                                    / "css")]
    config.HTMLExporter.filters = filters
    exporter = FeedbackExporter(config=config)
    exporter.register_preprocessor(CSSHTMLHeaderPreprocessor)  # as the converter does (it stays disabled)
    return exporter
