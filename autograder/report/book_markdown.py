"""The book's Markdown as a feedback page shows it, without a script: math rendered to MathML here, on
the grader, and MyST's citation roles resolved to text.

A feedback page's Content-Security-Policy allows no script, so MathJax cannot typeset its math, and the
book's Sphinx extensions (``sphinxcontrib-bibtex``) do not run on it. :func:`render` renders a Markdown
cell as nbconvert does (mistune, with nbconvert's math parser), except that

- math (``$...$``, ``$$...$$``, LaTeX environments) becomes MathML (:func:`tex_to_mathml`, with
  latex2mathml), which browsers draw themselves; TeX it cannot convert is shown as written, as code;
- ``{cite:t}`key``` and ``{cite:p}`key``` become "Author (year)" and "(Author, year)"
  (:mod:`autograder.core.citations`).

The HTML is then sanitized (:func:`autograder.report.sanitize.sanitized_html`): MathML's presentation
elements and attributes are allowed there (:data:`MATHML_TAGS`, :data:`MATHML_ATTRIBUTES`), and
nothing else of MathML (no ``href``, no ``style``, no HTML inside ``annotation-xml``).
"""

import html
import re
from xml.etree import ElementTree

from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath, MathInlineParser

from autograder.core import Reference, cite

MATHML_TAGS = frozenset({
    "math", "mrow", "mi", "mo", "mn", "ms", "mtext", "mspace", "msub", "msup", "msubsup", "munder", "mover",
    "munderover", "mfrac", "msqrt", "mroot", "mstyle", "mpadded", "mphantom", "menclose", "merror", "mtable", "mtr",
    "mtd"})
_SHARED_ATTRIBUTES = ["mathvariant", "displaystyle", "scriptlevel"]
MATHML_ATTRIBUTES = {
    "math": ["display", *_SHARED_ATTRIBUTES],  # no xmlns: HTML puts <math> in MathML's namespace itself
    "mo": ["stretchy", "fence", "form", "accent", "lspace", "rspace", "minsize", "maxsize", "largeop", "movablelimits",
           "separator", "symmetric", *_SHARED_ATTRIBUTES],
    "mover": ["accent", *_SHARED_ATTRIBUTES], "munder": ["accentunder", *_SHARED_ATTRIBUTES],
    "munderover": ["accent", "accentunder", *_SHARED_ATTRIBUTES],
    "mspace": ["width", "height", "depth", "linebreak"], "mpadded": ["width", "height", "depth", "lspace", "voffset"],
    "mfrac": ["linethickness", *_SHARED_ATTRIBUTES], "menclose": ["notation"],
    "mtable": ["columnalign", "rowalign", "columnspacing", "rowspacing", "columnlines", "rowlines", "frame",
               *_SHARED_ATTRIBUTES],
    "mtr": ["columnalign", "rowalign"], "mtd": ["columnalign", "rowalign", "columnspan", "rowspan"],
    **{tag: list(_SHARED_ATTRIBUTES) for tag in ("mi", "mn", "mtext", "ms", "mstyle", "mrow")},
}
#: TeX that latex2mathml lacks, written with what it has (``aligned`` is laid out as ``align*``).
SUBSTITUTES = {r"\begin{aligned}": r"\begin{align*}", r"\end{aligned}": r"\end{align*}",
               r"\arg": r"\operatorname{arg}"}
#: MyST's citation roles: {cite:t}`key`, {cite:p}`key1,key2` (and {cite}, read as {cite:p}).
CITATION = r"\{cite(?::(?P<cite_role>[a-z]+))?\}`(?P<cite_keys>[^`\n]+)`"


def tex_to_mathml(tex: str, display: bool) -> str | None:
    """MathML for ``tex``, or None where latex2mathml cannot convert it: it fails, leaves a command or an
    alignment mark as text, or makes an element outside :data:`MATHML_TAGS`. Attributes outside
    :data:`MATHML_ATTRIBUTES` (``href``, ``style``, colours) are dropped; text is escaped."""
    from latex2mathml.converter import convert_to_element

    for old, new in SUBSTITUTES.items():
        tex = re.sub(re.escape(old) + r"(?![A-Za-z])", lambda match: new, tex)
    try:
        root = convert_to_element(tex, display="block" if display else "inline")
    except Exception:  # noqa: BLE001 -- latex2mathml raises many kinds of errors on TeX it does not know
        return None
    for element in root.iter():
        text = html.unescape(element.text or "")  # latex2mathml writes symbols as character references
        if element.tag not in MATHML_TAGS or text.strip().startswith("\\") or text.strip() == "&":
            return None
        element.text = text or None
        element.tail = html.unescape(element.tail) if element.tail else None
        allowed = MATHML_ATTRIBUTES.get(element.tag, ())
        for name in [name for name in element.attrib if name not in allowed]:
            del element.attrib[name]
    return ElementTree.tostring(root, encoding="unicode")


class FeedbackRenderer(IPythonRenderer):
    """nbconvert's Markdown renderer, with math as MathML and citations as text."""

    def __init__(self, references: dict[str, Reference]):
        super().__init__(escape=False)
        self.references = references

    def _math(self, tex: str, display: bool, delimiter: str) -> str:
        tex = html.unescape(tex)  # as a browser's MathJax reads it: the sanitized cell has &lt; for <, &amp; for &
        mathml = tex_to_mathml(tex, display)
        if mathml is not None:
            return mathml
        written = html.escape(f"{delimiter}{tex}{delimiter}" if delimiter else tex)
        return f"<pre><code>{written}</code></pre>" if display else f"<code>{written}</code>"

    def inline_math(self, body: str) -> str:
        return self._math(body, False, "$")

    def block_math(self, body: str) -> str:
        return self._math(body, True, "$$")

    def latex_environment(self, name: str, body: str) -> str:
        return self._math(f"\\begin{{{name}}}{body}\\end{{{name}}}", True, "")

    def citation(self, role: str, keys: str) -> str:
        return html.escape(cite(role, keys, self.references))


def _parse_citation(inline, match, state) -> int:
    state.append_token({"type": "citation", "attrs": {"role": match.group("cite_role") or "p",
                                                      "keys": match.group("cite_keys")}})
    return match.end()


def render(source: str, references: dict[str, Reference]) -> str:
    """The HTML of a Markdown cell (not yet sanitized: see the module's docstring)."""
    inline = MathInlineParser(hard_wrap=False)
    inline.register("citation", CITATION, _parse_citation, before="codespan")
    return MarkdownWithMath(renderer=FeedbackRenderer(references), inline=inline).render(source)
