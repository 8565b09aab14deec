"""Sphinx extension: serve MathJax 3 from the built book, so formulas render without internet.

The MathJax files come from the PyPI package ``django-static-mathjax`` (MathJax's own release files,
importable as ``mathjax``; nothing of Django is used or needed). The extension points Sphinx's
``mathjax_path`` at ``_static/mathjax/tex-mml-chtml.js`` and copies there the parts the pages load:
the combined TeX/MathML component, the TeX extensions it autoloads, the CHTML fonts, the menu and
the accessibility components.
"""

import shutil
from pathlib import Path

MATHJAX_FILES = ("tex-mml-chtml.js", "input/tex/extensions", "output/chtml/fonts", "a11y", "ui")


def mathjax_source() -> Path:
    import mathjax

    return Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"


def _use_local_mathjax(app, config) -> None:
    config.mathjax_path = "mathjax/tex-mml-chtml.js"  # relative to _static


def _copy_mathjax(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    source, target = mathjax_source(), Path(app.outdir) / "_static" / "mathjax"
    for name in MATHJAX_FILES:
        if (source / name).is_dir():
            shutil.copytree(source / name, target / name, dirs_exist_ok=True)
        else:
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / name, target / name)


def setup(app):
    mathjax_source()  # fail early, with an ImportError naming the missing package
    app.connect("config-inited", _use_local_mathjax, priority=900)
    app.connect("build-finished", _copy_mathjax)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
