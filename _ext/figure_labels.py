"""Sphinx extension: the book's figures are SVG, and the translated book's figures have their words
translated.

- Both builds: the kernels that execute the chapters read the IPython configuration
  :data:`autograder.publish.figure_labels.KERNEL_CONFIG` (figures as SVG, their text as paths with each
  line's source in a comment), from a profile in the build folder that ``IPYTHONDIR`` names; nothing is
  added to the notebooks, whose code cells stay those of the student notebooks.
- The translated build (``language`` set, as ``tools/translations.py build`` writes its configuration):
  after a chapter is read (executed, or its outputs found in the English build's cache) and before it
  is written, each SVG figure of a code cell is replaced by its translation
  (:func:`autograder.publish.figure_labels.translate_svg`) with the labels of that cell in the
  chapter's catalogue (context ``figure:<cell id>``). The catalogue is a dependency of the page: a new
  translation rebuilds it.
"""

import hashlib
import os
from pathlib import Path

import nbformat
from docutils import nodes
from sphinx.util import logging

from autograder.publish import figure_labels, translations

LOGGER = logging.getLogger(__name__)
PROFILE = "profile_default"
KERNEL_CONFIG_FILE = "ipython_kernel_config.py"


def _configure_kernels(app, config) -> None:
    """Point the kernels at an IPython profile with :data:`figure_labels.KERNEL_CONFIG`."""
    ipython_dir = Path(app.doctreedir).parent / "ipython"
    profile = ipython_dir / PROFILE
    profile.mkdir(parents=True, exist_ok=True)
    (profile / KERNEL_CONFIG_FILE).write_text(figure_labels.KERNEL_CONFIG, encoding="utf-8")
    os.environ["IPYTHONDIR"] = str(ipython_dir)


def _cell_index(node: nodes.Node) -> int | None:
    """The index in its notebook of the code cell that holds ``node``."""
    while node is not None:
        if isinstance(node, nodes.container) and node.get("nb_element") == "cell_code":
            return node.get("cell_index")
        node = node.parent
    return None


def _translate_figures(app, doctree) -> None:
    language = app.config.language
    if not language or language == "en":
        return
    source = Path(app.env.doc2path(app.env.docname))
    catalogue_path = translations.catalogue_path(Path(app.srcdir), language, source.stem)
    if source.suffix != ".ipynb" or not catalogue_path.is_file():
        return
    app.env.note_dependency(str(catalogue_path))
    catalogue = translations.translations(catalogue_path)
    cells = nbformat.read(source, as_version=4).cells
    for image in doctree.findall(nodes.image):
        index = _cell_index(image)
        if index is None:
            continue
        context = figure_labels.context(cells[index].id)
        labels = {english: translated for (msgctxt, english), translated in catalogue.items() if msgctxt == context}
        if not image["uri"].endswith(".svg"):
            if labels:
                LOGGER.warning(f"the figure of cell {cells[index].id} is not SVG ({image['uri']}): its words stay "
                               "English; its output comes from an execution cache older than the SVG figures "
                               "(jupyter-book clean --all)", location=image)
            continue
        path = Path(app.srcdir) / image["uri"].lstrip("/")
        svg = path.read_text(encoding="utf-8")
        translated = figure_labels.translate_svg(svg, labels) if labels else svg
        if translated == svg:
            continue
        target = path.with_name(f"{hashlib.sha256(translated.encode('utf-8')).hexdigest()}.svg")
        target.write_text(translated, encoding="utf-8")
        image["uri"] = "/" + os.path.relpath(target, app.srcdir)


def setup(app):
    app.connect("config-inited", _configure_kernels)
    app.connect("doctree-read", _translate_figures, priority=400)  # before Sphinx collects the images (500)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
