"""MyST Markdown as translation units: blocks, and the markup a translation must keep.

- :func:`split_blocks` cuts a Markdown text at its blank lines, except inside a fence (code, a
  ```` ```{directive} ```` or ``:::{directive}``) or a ``$$`` display formula, so that each block is a
  paragraph, a heading, a list, a table, a whole directive or a whole formula. :func:`join_blocks` puts
  them back together: ``join_blocks(split_blocks(text)) == text`` for every text.
- :func:`is_translatable`: whether a block has words to translate (a formula, a code fence or a
  ``{tableofcontents}`` alone has none).
- :func:`markup` is what a translation of a block must keep: MyST roles with their targets and cited
  keys, directives with their options, inline and display math, inline code, link targets, numbers,
  the block's leading Markdown marker (heading level, list item, table); :func:`markup_differences`
  says, in words, what a translation lost or added.
- :func:`relocate_links`: a text's relative link targets rewritten for the text's new folder, so that a
  page copied one folder deeper (a translation in ``chapters/LANG/``) still reaches the same files, or
  their translations where a page it links to has one.
"""

import posixpath
import re
from collections import Counter
from dataclasses import dataclass

#: A fence line: its marker (three or more backticks, tildes or colons) and what follows it.
FENCE = re.compile(r"^\s*(?P<marker>`{3,}|~{3,}|:{3,})(?P<info>.*)$")
DISPLAY_MATH_LINE = "$$"
ROLE = re.compile(r"\{(?P<name>[\w:+-]+)\}(?P<ticks>`+)(?P<content>.*?)(?P=ticks)", re.DOTALL)
INLINE_CODE = re.compile(r"(?P<ticks>`+)(?P<content>.+?)(?P=ticks)", re.DOTALL)
DISPLAY_MATH = re.compile(r"\$\$(?P<content>.+?)\$\$", re.DOTALL)
INLINE_MATH = re.compile(r"(?<![\\$])\$(?!\$)(?P<content>(?:\\.|[^$\\])+?)(?<!\\)\$")
DIRECTIVE = re.compile(r"^\s*(?:`{3,}|~{3,}|:{3,})\{(?P<name>[\w:-]+)\}.*$", re.MULTILINE)
DIRECTIVE_OPTION = re.compile(r"^\s*:(?P<key>[\w-]+):(?P<value>.*)$", re.MULTILINE)
CODE_FENCE = re.compile(r"^\s*(?P<marker>`{3,}|~{3,})(?!\{)[^\n]*\n.*?^\s*(?P=marker)\s*$", re.DOTALL | re.MULTILINE)
FENCE_LINE = re.compile(r"^\s*(?:`{3,}|~{3,}|:{3,})(?:\{[\w:-]+\})?", re.MULTILINE)
LINK = re.compile(r"\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
URL = re.compile(r"<?https?://[^\s<>)]+>?")
#: A link target that is not relative to the page's folder: a URL scheme (``https:``, ``mailto:``), a
#: path from the site's root, or an anchor of the page itself.
NOT_RELATIVE = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*:|/|#)")
NUMBER = re.compile(r"(?<![A-Za-z0-9_.])\d+(?:[.,]\d+)*")
#: The Markdown marker that starts a block: indentation, then a heading, list item, quote or table row.
LEADING_MARKER = re.compile(r"^(?P<indent>[ \t]*)(?P<marker>#{1,6}(?=\s)|[-*+](?=\s)|\d+[.)](?=\s)|>|\|)?")
#: Citation roles, whose content is a list of keys (their order may change); any other role keeps its target
#: (``text <target>``, whose text may be translated, or the content alone).
CITE_ROLE = re.compile(r"^cite(?::\w+)?$")


def _fence_change(line: str, open_fences: list[tuple[str, int]]) -> None:
    """Update ``open_fences`` (a stack of (character, length)) for one line."""
    match = FENCE.match(line)
    if not match:
        return
    marker, info = match["marker"], match["info"].strip()
    top = open_fences[-1] if open_fences else None
    if not info and top and top[0] == marker[0] and len(marker) >= top[1]:
        open_fences.pop()
    elif top is None or top[0] == ":" or info.startswith("{"):  # a code fence holds no fences of its own
        open_fences.append((marker[0], len(marker)))


def split_blocks(text: str) -> list[str]:
    """The blocks of ``text`` and the runs of blank lines between them, alternating, block first.

    Every even index is a block (the first and last may be empty when ``text`` starts or ends with blank
    lines); every odd index is the separator that followed it. Inside a fence or a ``$$`` formula a blank
    line does not separate blocks.
    """
    pieces, current, separator = [], [], []
    open_fences: list[tuple[str, int]] = []
    in_math = False
    for line in text.splitlines(keepends=True):
        inside = bool(open_fences) or in_math
        if not line.strip() and not inside:
            separator.append(line)
            continue
        if separator:
            pieces += ["".join(current), "".join(separator)]
            current, separator = [], []
        current.append(line)
        if not in_math:
            _fence_change(line, open_fences)
        if not open_fences and line.count(DISPLAY_MATH_LINE) % 2 == 1:
            in_math = not in_math
    pieces.append("".join(current))
    if separator:
        pieces += ["".join(separator), ""]
    return pieces


def join_blocks(pieces: list[str]) -> str:
    """The text of :func:`split_blocks`' pieces."""
    return "".join(pieces)


def blocks(text: str) -> list[str]:
    """The blocks of ``text`` (without the separators), each stripped of its final newline."""
    return [piece.rstrip("\n") for piece in split_blocks(text)[::2] if piece.strip()]


def _prose(text: str) -> str:
    """``text`` without what is not prose: code fences, math, roles, inline code, directive lines,
    directive options and URLs."""
    for pattern in (CODE_FENCE, DISPLAY_MATH, ROLE, INLINE_CODE, INLINE_MATH, DIRECTIVE_OPTION, FENCE_LINE, LINK, URL):
        text = pattern.sub(" ", text)
    return text


def is_translatable(block: str) -> bool:
    """Whether ``block`` has words to translate."""
    return bool(re.search(r"[^\W\d_]", _prose(block)))


@dataclass(frozen=True)
class Markup:
    """What a translation of a block keeps, each a sorted tuple (a multiset)."""

    roles: tuple[str, ...]
    directives: tuple[str, ...]
    directive_options: tuple[str, ...]
    display_math: tuple[str, ...]
    inline_math: tuple[str, ...]
    inline_code: tuple[str, ...]
    links: tuple[str, ...]
    numbers: tuple[str, ...]
    leading_marker: str
    table_rows: int


#: The multiset fields of :class:`Markup`, as the messages of :func:`markup_differences` name them.
MARKUP_LABELS = {
    "roles": "role", "directives": "directive", "directive_options": "directive option",
    "display_math": "display math", "inline_math": "math", "inline_code": "inline code",
    "links": "link", "numbers": "number",
}


def _role(match: re.Match) -> str:
    name, content = match["name"], match["content"]
    if CITE_ROLE.match(name):
        return f"{{{name}}}" + ",".join(sorted(key.strip() for key in content.split(",")))
    target = re.search(r"<([^<>]+)>\s*$", content)
    return f"{{{name}}}" + (target[1] if target else content)


def markup(block: str) -> Markup:
    """The markup of ``block`` that its translation must keep."""
    code_fences = [match[0] for match in CODE_FENCE.finditer(block)]
    rest = CODE_FENCE.sub(" ", block)
    display = [" ".join(match["content"].split()) for match in DISPLAY_MATH.finditer(rest)]
    rest = DISPLAY_MATH.sub(" ", rest)
    roles = [_role(match) for match in ROLE.finditer(rest)]
    rest = ROLE.sub(" ", rest)
    code = [match["content"] for match in INLINE_CODE.finditer(rest)] + code_fences
    rest = INLINE_CODE.sub(" ", rest)
    inline = [match["content"].strip() for match in INLINE_MATH.finditer(rest)]
    rest = INLINE_MATH.sub(" ", rest)
    directives = [match["name"] for match in DIRECTIVE.finditer(rest)]
    options = [f":{match['key']}:{match['value'].strip()}" for match in DIRECTIVE_OPTION.finditer(rest)]
    rest = DIRECTIVE_OPTION.sub(" ", FENCE_LINE.sub(" ", rest))
    links = [match["target"] for match in LINK.finditer(rest)]
    rest = LINK.sub("] ", rest)
    links += [match[0].strip("<>") for match in URL.finditer(rest)]
    rest = URL.sub(" ", rest)
    numbers = NUMBER.findall(rest)
    first_line = block.lstrip("\n").split("\n", 1)[0]
    leading = LEADING_MARKER.match(first_line)
    marker = leading["indent"] + re.sub(r"\d+", "N", leading["marker"] or "")
    table_rows = sum(1 for line in block.splitlines() if line.lstrip().startswith("|"))
    return Markup(*(tuple(sorted(items)) for items in (roles, directives, options, display, inline, code, links,
                                                       numbers)), marker, table_rows)


def multiset_difference(label: str, english: tuple[str, ...], translated: tuple[str, ...]) -> list[str]:
    expected, found = Counter(english), Counter(translated)
    problems = [f"{label} {item!r} missing" for item in sorted((expected - found).elements())]
    return problems + [f"{label} {item!r} not in the English" for item in sorted((found - expected).elements())]


def markup_differences(english: str, translated: str) -> list[str]:
    """What ``translated`` loses or adds of ``english``'s markup, one phrase each; empty when it keeps all."""
    source, target = markup(english), markup(translated)
    problems = []
    for field, label in MARKUP_LABELS.items():
        problems += multiset_difference(label, getattr(source, field), getattr(target, field))
    if source.leading_marker != target.leading_marker:
        problems.append(f"starts with {target.leading_marker!r} "
                        f"where the English starts with {source.leading_marker!r}")
    if source.table_rows != target.table_rows:
        problems.append(f"{target.table_rows} table rows where the English has {source.table_rows}")
    return problems


def _code_spans(text: str) -> list[tuple[int, int]]:
    """Where ``text`` has code (fences and inline code), in which nothing is a link."""
    return [match.span() for pattern in (CODE_FENCE, INLINE_CODE) for match in pattern.finditer(text)]


def relocate_link(target: str, old_folder: str, new_folder: str, moved: dict[str, str] | None = None) -> str:
    """``target``, a link written in a page of ``old_folder``, as written in a page of ``new_folder`` to
    reach the same file (both folders relative to one root, ``""`` for the root itself), or the file
    that ``moved`` (file -> file, relative to that root) puts in its place: a page's translation. A
    target that is not relative (:data:`NOT_RELATIVE`) is returned as it is; the anchor (``#...``) is kept."""
    if NOT_RELATIVE.match(target):
        return target
    path, hash_sign, anchor = target.partition("#")
    reached = posixpath.normpath(posixpath.join(old_folder, path))
    reached = (moved or {}).get(reached, reached)
    return posixpath.relpath(reached, new_folder or ".") + hash_sign + anchor


def relocate_links(text: str, old_folder: str, new_folder: str, moved: dict[str, str] | None = None) -> str:
    """``text`` (Markdown written in ``old_folder``) with each relative link target of a Markdown link or
    image, ``[text](target)``, rewritten by :func:`relocate_link` for a page in ``new_folder`` (with the
    files ``moved``). Code fences and inline code are left as they are."""
    code = _code_spans(text)

    def rewrite(match: re.Match) -> str:
        if any(start <= match.start() < end for start, end in code):
            return match[0]
        start, end = match.start("target") - match.start(), match.end("target") - match.start()
        return match[0][:start] + relocate_link(match["target"], old_folder, new_folder, moved) + match[0][end:]

    return LINK.sub(rewrite, text)
