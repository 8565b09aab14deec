"""The words of the book's figures (titles, axis labels, legends, tick labels that are words), translated
inside the figures' SVG.

The book's kernels draw every figure as SVG (:data:`KERNEL_CONFIG`, set by ``_ext/figure_labels.py``
for both builds) with its text as paths, matplotlib's default for SVG (:data:`SVG_RC`): the same glyphs
in every browser, as in a PNG. matplotlib writes each text artist as a group ``<g id="text_N">`` and
each of its lines as a comment with the line's source (``$...$`` mathtext included) followed by a group
of glyph outlines. A figure's **label** is a text artist's lines joined by newlines; one with a word
(:func:`has_words`) is a message of its chapter's catalogue, with the context ``figure:<cell id>``
(:func:`executed_labels` reads them from the English build's execution cache; the code cells, hence
the outputs, are the same in both editions).

The translated build substitutes the translations in each executed SVG after execution and before
rendering (:func:`translate_svg`). A translated line is drawn as text (:data:`TEXT_RC`), which the
reader's browser draws with its own fonts (CJK among them), in place of the English outlines, anchored
at the point of the English line that matplotlib aligned (its start, middle or end, inferred by
:func:`_fraction_of_alignment`): a plain line by the browser (``text-anchor``), a line with mathtext laid
out by matplotlib's mathtext, each wide (CJK) character one em wide, the width CJK fonts give it. A
translation keeps its English's lines, and each line its math and numbers (:func:`label_differences`).

Why not ``svg.fonttype: none`` (text as text) for the English too: its mathtext is one ``<tspan>`` per
glyph at a fixed place, drawn with the reader's fonts, and a glyph of a font the reader lacks (the
radical of ``\\sqrt`` comes from "DejaVu Sans Display") is drawn wrong; paths look as before.
"""

import math
import re
import unicodedata
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from io import StringIO
from pathlib import Path
from xml.sax.saxutils import escape, unescape

import nbformat

from autograder.publish.myst_blocks import INLINE_MATH, NUMBER, multiset_difference

#: matplotlib's settings for the book's figures: their text drawn as paths (the same glyphs in every
#: browser, as in a PNG), each line's source kept in a comment before it.
SVG_RC = {"svg.fonttype": "path"}
#: ... and for a translated line: text, which the browser draws with its fonts (CJK among them).
TEXT_RC = {"svg.fonttype": "none"}
#: The IPython kernel's configuration for the book's builds: figures as SVG (only), drawn with
#: :data:`SVG_RC`, and no date in the SVG's metadata (the same figure, the same file).
KERNEL_CONFIG = f"""\
c.InlineBackend.figure_formats = {{"svg"}}
c.InlineBackend.rc = {SVG_RC!r}
c.InlineBackend.print_figure_kwargs = {{"bbox_inches": "tight", "metadata": {{"Date": None}}}}
"""
SVG_MIME = "image/svg+xml"
#: The catalogue context of a figure's labels: this prefix and the id of the code cell that draws it.
CONTEXT_PREFIX = "figure:"
SVG = "http://www.w3.org/2000/svg"
NAMESPACES = {"": SVG, "xlink": "http://www.w3.org/1999/xlink", "dc": "http://purl.org/dc/elements/1.1/",
              "cc": "http://creativecommons.org/ns#", "rdf": "http://www.w3.org/1999/02/22-rdf-syntax-ns#"}
TEXT_GROUP = re.compile(r"^text_\d+$")
WORD = re.compile(r"[^\W\d_]{2,}")
#: Units of measure: words that are the same in every language (SI and IEC symbols of time and memory).
UNITS = frozenset({"ns", "µs", "us", "ms", "min", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB"})
TRANSLATE = re.compile(r"translate\((?P<x>[-\d.e]+)[ ,]+(?P<y>[-\d.e]+)\)")
SCALE = re.compile(r"scale\((?P<scale>[-\d.e]+)")
XLINK_HREF = "{http://www.w3.org/1999/xlink}href"
DEFAULT_FONT_SIZE = 10.0
CLIP_REFERENCE = re.compile(r"url\(#(?P<id>[^)]+)\)")
EDGE_TOLERANCE = 0.5  # points: a title on the left starts at its axes' edge, a centred one centres there
ROTATE = re.compile(r"rotate\((?P<angle>[-\d.e]+)")
#: The anchors of a line that starts, centres or ends at its anchor, by the fraction of its width.
ANCHORS = {0.0: "start", 0.5: "middle", 1.0: "end"}
EM_SPACE = "\u2003"  # one em wide in mathtext's fonts: where a wide character is laid out


for prefix, uri in NAMESPACES.items():
    ET.register_namespace(prefix, uri)


def _tag(name: str) -> str:
    return f"{{{SVG}}}{name}"


def has_words(label: str) -> bool:
    """Whether ``label`` has a word to translate: two letters in a row outside its math (``$...$``) that
    are not a unit of measure. A measurement, ``12.7 ms`` on a bar, changes from run to run and its unit
    is written the same in every language: it is no message."""
    return any(word not in UNITS for word in WORD.findall(INLINE_MATH.sub(" ", label)))


def context(cell_id: str) -> str:
    return f"{CONTEXT_PREFIX}{cell_id}"


def is_figure_context(msgctxt: str | None) -> bool:
    return bool(msgctxt) and msgctxt.startswith(CONTEXT_PREFIX)


def _markup(line: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The math (``$...$``) of a label's line and the numbers outside it."""
    return tuple(INLINE_MATH.findall(line)), tuple(NUMBER.findall(INLINE_MATH.sub(" ", line)))


def label_differences(english: str, translated: str) -> list[str]:
    """What ``translated`` changes of the label ``english`` that its figure needs: its number of lines,
    and each line's math and numbers; empty when it keeps them."""
    english_lines, translated_lines = english.split("\n"), translated.split("\n")
    if len(english_lines) != len(translated_lines):
        return [f"{len(translated_lines)} lines where the figure has {len(english_lines)}"]
    problems = []
    for number, (source, target) in enumerate(zip(english_lines, translated_lines), start=1):
        where = f"line {number}: " if len(english_lines) > 1 else ""
        for label, (english_items, translated_items) in zip(("math", "number"), zip(_markup(source), _markup(target))):
            problems += [where + problem for problem in multiset_difference(label, english_items, translated_items)]
    return problems


# --------------------------------------------------------------------------------------------------
# The text of an SVG figure
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Line:
    """One line of a text artist as matplotlib draws it as paths: the comment with its source, and the
    group of its glyphs (``<use>`` of glyph outlines, rules as ``<path>``, and the ``<defs>`` of the
    outlines first used here) at its start, its direction and its size."""

    comment: ET.Element
    group: ET.Element

    @property
    def text(self) -> str:
        """The line's source: the comment, as matplotlib writes it (``&``, ``<``, ``>`` escaped)."""
        source = self.comment.text or ""
        return unescape(source[1:-1] if source.startswith(" ") and source.endswith(" ") else source.strip())

    def set_text(self, text: str) -> None:
        """Write ``text`` in the comment as matplotlib does (escaped, no ``--`` in a comment)."""
        self.comment.text = f" {escape(text).replace('--', '- -')} "

    @property
    def is_math(self) -> bool:
        return INLINE_MATH.search(self.text) is not None

    def origin(self) -> tuple[float, float, float]:
        """Where the line starts and its direction: x, y and the angle (degrees) of its ``transform``."""
        transform = self.group.get("transform", "")
        translate, rotate = TRANSLATE.search(transform), ROTATE.search(transform)
        x, y = (float(translate["x"]), float(translate["y"])) if translate else (0.0, 0.0)
        return x, y, float(rotate["angle"]) if rotate else 0.0

    def font_size(self) -> float:
        """The font size: the ``scale`` of the glyph outlines, drawn at matplotlib's ``FONT_SCALE``."""
        from matplotlib.textpath import TextToPath
        scale = SCALE.search(self.group.get("transform", ""))
        return float(scale["scale"]) * TextToPath.FONT_SCALE if scale else DEFAULT_FONT_SIZE

    def weight(self) -> str:
        """``bold`` when the glyphs are a bold font's (a bold title), else ``normal``."""
        glyphs = [use.get(XLINK_HREF, "") for use in self.group.iter(_tag("use"))]
        return "bold" if any("-Bold" in glyph for glyph in glyphs) else "normal"


@dataclass(frozen=True)
class TextArtist:
    """A text artist of a figure: its lines in order, and its enclosing groups that have an id (the
    axes, an axis, a tick, a legend), outermost first."""

    lines: tuple[Line, ...]
    groups: tuple[ET.Element, ...]

    @property
    def label(self) -> str:
        return "\n".join(line.text for line in self.lines)

    def within(self, prefix: str) -> ET.Element | None:
        """The innermost enclosing group whose id starts with ``prefix`` (``legend_``, ``xtick_``)."""
        return next((group for group in reversed(self.groups) if group.get("id", "").startswith(prefix)), None)


def _lines(group: ET.Element) -> Iterator[Line]:
    """The lines of a text artist's group: each comment and the group after it (groups without an id
    around them, as a clip path's, entered)."""
    children = list(group)
    for index, child in enumerate(children):
        if child.tag is ET.Comment and index + 1 < len(children) and children[index + 1].tag == _tag("g"):
            yield Line(child, children[index + 1])
        elif (child.tag == _tag("g") and not child.get("id")
              and (index == 0 or children[index - 1].tag is not ET.Comment)):
            yield from _lines(child)


def parse(svg: str) -> ET.Element:
    parser = ET.XMLParser(target=ET.TreeBuilder(insert_comments=True))
    parser.feed(svg)
    return parser.close()


def text_artists(root: ET.Element) -> list[TextArtist]:
    """The text artists of an SVG figure, in drawing order."""
    artists = []

    def visit(element: ET.Element, groups: tuple[ET.Element, ...]) -> None:
        for child in element:
            if child.tag != _tag("g"):
                continue
            if TEXT_GROUP.match(child.get("id", "")):
                lines = tuple(_lines(child))
                if lines:
                    artists.append(TextArtist(lines, groups))
            else:
                visit(child, (*groups, child) if child.get("id") else groups)

    visit(root, ())
    return artists


def svg_labels(svg: str) -> list[str]:
    """The labels of an SVG figure that have words (:func:`has_words`), each once, in order."""
    return list(dict.fromkeys(artist.label for artist in text_artists(parse(svg)) if has_words(artist.label)))


# --------------------------------------------------------------------------------------------------
# Laying out a translated line
# --------------------------------------------------------------------------------------------------


def _font(size: float, weight: str = "normal"):
    from matplotlib.font_manager import FontProperties
    return FontProperties(size=size, weight=weight)


def _width(text: str, size: float, ismath: bool, weight: str = "normal") -> float:
    """The width matplotlib gives ``text``."""
    from matplotlib.textpath import TextToPath
    width, _, _ = TextToPath().get_text_width_height_descent(text, _font(size, weight), ismath)
    return width


def _is_wide(character: str) -> bool:
    return unicodedata.east_asian_width(character) in ("W", "F")


def _drawn_as_text(text: str, size: float, weight: str) -> tuple[ET.Element, float | None]:
    """The element that matplotlib's SVG backend draws for the line ``text`` at the origin with its
    text as text (a ``<text>``, or for mathtext a group of one ``<tspan>`` per glyph), and for mathtext
    the line's width (each wide character laid out as an em space and written in its place); the
    browser lays out a plain line."""
    import matplotlib
    from matplotlib.backends.backend_svg import RendererSVG
    ismath = INLINE_MATH.search(text) is not None
    wide = [character for character in text if _is_wide(character)] if ismath else []
    laid_out = "".join(EM_SPACE if _is_wide(character) else character for character in text) if ismath else text
    output = StringIO()
    with matplotlib.rc_context(TEXT_RC):
        renderer = RendererSVG(1, 1, output)
        renderer.draw_text(renderer.new_gc(), 0, 0, laid_out, _font(size, weight), 0, ismath=ismath)
        renderer.finalize()
    root = parse(output.getvalue())
    drawn = root.find(_tag("text")) if not ismath else next(
        group for group in root.iter(_tag("g")) if group.find(_tag("text")) is not None)
    spaces = sorted((span for span in drawn.iter(_tag("tspan")) if span.text == EM_SPACE),
                    key=lambda span: float(span.get("x")))
    for span, character in zip(spaces, wide):
        span.text = character
    return drawn, _width(laid_out, size, True, weight) if ismath else None


def _along(x: float, y: float, angle: float) -> float:
    """The coordinate of the point (x, y) along the direction ``angle`` (degrees, as SVG rotates)."""
    return x * math.cos(math.radians(angle)) + y * math.sin(math.radians(angle))


def _tick_mark(tick: ET.Element) -> tuple[float, float] | None:
    """Where a tick group's mark is drawn (its ``<use>``), or None."""
    mark = next((use for use in tick.iter(_tag("use")) if use.get("x") is not None), None)
    return None if mark is None else (float(mark.get("x")), float(mark.get("y")))


def _nearest_anchor(fraction: float) -> float:
    return min(ANCHORS, key=lambda anchor: abs(anchor - fraction))


def _spread(values: list[float]) -> float:
    return max(values) - min(values)


def _axes_edges(axes: ET.Element, clip_boxes: Mapping[str, tuple[float, float]]) -> tuple[float, float] | None:
    """The left and right edges of an axes: the box its drawing is clipped to, or None."""
    for element in axes.iter():
        reference = CLIP_REFERENCE.match(element.get("clip-path", ""))
        if reference and reference["id"] in clip_boxes:
            return clip_boxes[reference["id"]]
    return None


def _clip_boxes(root: ET.Element) -> dict[str, tuple[float, float]]:
    """The left and right edges of each rectangular clip path of the figure, by id."""
    boxes = {}
    for clip in root.iter(_tag("clipPath")):
        rect = clip.find(_tag("rect"))
        if rect is not None and clip.get("id"):
            left = float(rect.get("x", 0))
            boxes[clip.get("id")] = (left, left + float(rect.get("width", 0)))
    return boxes


def _fraction_of_alignment(artist: TextArtist, widths: list[float],
                           clip_boxes: Mapping[str, tuple[float, float]]) -> float:
    """Where a line of ``artist`` is anchored, as the fraction of its width from its start (0, 1/2 or
    1). matplotlib places each line by its start; the alignment is what the lines agree on (their
    starts, middles or ends at the same place along their direction); else, for one line (or lines of
    one width), its place: a tick's label at the point of its line nearest the tick's mark (the middle
    of a label under its tick, the end of a y axis's label or of a rotated one aligned right); a
    legend's entries at their start; a horizontal line of an axes that starts, centres or ends where
    the axes do (a title, on the left, centred or on the right; an x axis's label) there, and any other
    (text placed in the axes) at its start, matplotlib's default; other labels (a figure's title, a y
    axis's label, rotated text) at their middle."""
    origins = [line.origin() for line in artist.lines]
    along = [_along(*origin) for origin in origins]
    if len(set(round(width, 3) for width in widths)) > 1:
        return min(ANCHORS, key=lambda fraction: _spread([a + fraction * w for a, w in zip(along, widths)]))
    tick = artist.within("xtick_") or artist.within("ytick_")
    mark = _tick_mark(tick) if tick is not None else None
    if mark is not None and widths[0] > 0:
        angle = origins[0][2]
        return _nearest_anchor((_along(*mark, angle) - along[0]) / widths[0])
    axes = artist.within("axes_")
    edges = _axes_edges(axes, clip_boxes) if axes is not None and origins[0][2] == 0 else None
    if artist.within("legend_") is not None:
        return 0.0
    if edges is not None:
        start, width = origins[0][0], widths[0]
        for fraction in ANCHORS:  # at the axes' left edge, middle or right edge: a title, an x axis's label
            if abs(start + fraction * width - (edges[0] + fraction * (edges[1] - edges[0]))) < EDGE_TOLERANCE:
                return fraction
        return 0.0  # text placed in the axes (ax.text): matplotlib's default alignment, left
    return 0.5


def _replace_line(line: Line, parent: ET.Element, text: str, fraction: float, english_width: float) -> None:
    """Draw ``text`` as text in the place of ``line``, anchored at the same point along its direction:
    the browser anchors a plain line (``text-anchor``); a mathtext line, laid out here, is shifted."""
    x, y, angle = line.origin()
    drawn, width = _drawn_as_text(text, line.font_size(), line.weight())
    placed = ET.Element(_tag("g"), transform=f"translate({x:g} {y:g}) rotate({angle:g})")
    if line.group.get("style"):
        placed.set("style", line.group.get("style"))  # the line's colour and opacity
    if line.is_math:
        ET.SubElement(placed, _tag("g"),
                      transform=f"translate({fraction * (english_width - width):g} 0)").extend(list(drawn))
    else:
        drawn.attrib.pop("transform", None)
        drawn.set("x", f"{fraction * english_width:g}")
        drawn.set("style", f"{drawn.get('style')}; text-anchor: {ANCHORS[fraction]}")
        placed.append(drawn)
    for outline in [child for child in line.group if child.tag != _tag("defs")]:
        line.group.remove(outline)  # the English glyphs; their definitions stay, for the lines that reuse them
    parent.insert(list(parent).index(line.group) + 1, placed)
    line.set_text(text)


def _parents(root: ET.Element) -> dict[ET.Element, ET.Element]:
    return {child: parent for parent in root.iter() for child in parent}


def translate_artist(artist: TextArtist, translation: str, parents: Mapping[ET.Element, ET.Element],
                     clip_boxes: Mapping[str, tuple[float, float]]) -> None:
    """Replace the lines of ``artist`` by those of ``translation`` (as many, each with its math);
    ``parents`` maps each element of the figure to its parent, ``clip_boxes`` is :func:`_clip_boxes`."""
    if label_differences(artist.label, translation):
        return
    widths = [_width(line.text, line.font_size(), line.is_math, line.weight()) for line in artist.lines]
    fraction = _fraction_of_alignment(artist, widths, clip_boxes)
    for line, text, width in zip(artist.lines, translation.split("\n"), widths):
        _replace_line(line, parents[line.group], text, fraction, width)


def translate_svg(svg: str, translations: Mapping[str, str]) -> str:
    """``svg`` with each label that ``translations`` (English -> translation) has replaced by it; the
    same text when none is."""
    root = parse(svg)
    translated = [artist for artist in text_artists(root) if artist.label in translations]
    if not translated:
        return svg
    parents, clip_boxes = _parents(root), _clip_boxes(root)
    for artist in translated:
        translate_artist(artist, translations[artist.label], parents, clip_boxes)
    return '<?xml version="1.0" encoding="utf-8" standalone="no"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


# --------------------------------------------------------------------------------------------------
# The labels of the executed chapters
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FigureLabel:
    """A label of a figure that a code cell draws."""

    cell_id: str
    text: str


def notebook_labels(notebook: nbformat.NotebookNode) -> list[FigureLabel]:
    """The labels with words of an executed notebook's SVG outputs, by cell, each once per cell."""
    labels = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        texts = [label for output in cell.get("outputs", []) if SVG_MIME in output.get("data", {})
                 for label in svg_labels(output["data"][SVG_MIME])]
        labels += [FigureLabel(cell.id, text) for text in dict.fromkeys(texts)]
    return labels


def executed_notebook(cache: Path, notebook: Path) -> nbformat.NotebookNode | None:
    """The executed copy of ``notebook`` in the jupyter-cache folder ``cache`` (the book's execution
    cache), or None when the cache has no execution of its current code."""
    if not (Path(cache) / "global.db").is_file():
        return None
    from jupyter_cache import get_cache
    executions = get_cache(Path(cache))
    try:
        record = executions.match_cache_notebook(nbformat.read(notebook, as_version=4))
    except KeyError:
        return None
    return executions.get_cache_bundle(record.pk).nb


def executed_labels(cache: Path, notebook: Path) -> list[FigureLabel] | None:
    """The figure labels of ``notebook`` as the book executed it (:func:`executed_notebook`), or None
    when the cache has no execution of its current code."""
    executed = executed_notebook(cache, notebook)
    return None if executed is None else notebook_labels(executed)
