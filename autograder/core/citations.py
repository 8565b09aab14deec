"""The book's citations as text: ``{cite:t}`key``` reads "Vaswani et al. (2017)" and ``{cite:p}`key```
"(Vaswani et al., 2017)", as the book's author-year style cites them, from the course's
``references.bib`` (:func:`read_references`, :func:`cite`). The feedback pages use them
(:mod:`autograder.report.book_markdown`), where the book's Sphinx extension does not run.
"""

from dataclasses import dataclass
from pathlib import Path

from autograder.core.course import GradingError


@dataclass(frozen=True)
class Reference:
    """How a work is cited: its authors' last names, shortened, and its year."""

    authors: str  # "Vaswani et al.", "Ba and Kiros" (two authors), "Graves" (one)
    year: str


def read_references(path: Path) -> dict[str, Reference]:
    """The entries of a BibTeX file by key; none when the file is absent. Raises :class:`GradingError`
    when it cannot be read."""
    from pybtex.database import parse_file
    from pybtex.exceptions import PybtexError

    if not Path(path).is_file():
        return {}
    try:
        entries = parse_file(str(path)).entries
    except (PybtexError, UnicodeDecodeError) as error:
        raise GradingError(f"{path} cannot be read as BibTeX: {' '.join(str(error).split())}") from None
    as_text = _latex_to_text()
    references = {}
    for key, entry in entries.items():
        people = entry.persons.get("author") or entry.persons.get("editor") or []
        names = [" ".join(as_text(part) for part in person.prelast_names + person.last_names) for person in people]
        if len(names) > 2:
            authors = f"{names[0]} et al."
        else:
            authors = " and ".join(names) or as_text(entry.fields.get("title", key))
        references[key] = Reference(authors, entry.fields.get("year", "n.d."))
    return references


def _latex_to_text():
    """A function giving BibTeX's LaTeX as plain text, as pybtex's ``Text.from_latex(latex).render_as("text")``
    does, with pybtex's text backend looked up once: ``render_as`` looks it up among the installed
    packages' entry points at every call, which took seconds for a course's references."""
    from pybtex.plugin import find_plugin
    from pybtex.richtext import Text

    backend = find_plugin("pybtex.backends", "text")()
    return lambda latex: Text.from_latex(latex).render(backend)


def cite(role: str, keys: str, references: dict[str, Reference]) -> str:
    """The text of a MyST citation role: ``t`` "Author (year)", else (``p`` and the others) "(Author,
    year)"; several keys (comma-separated) joined by "; " (``p``) or ", " (``t``). An unknown key is
    shown as it is written, in brackets."""
    found = [references.get(key.strip()) or key.strip() for key in keys.split(",") if key.strip()]
    if role == "t":
        return ", ".join(f"{item.authors} ({item.year})" if isinstance(item, Reference) else f"[{item}]"
                         for item in found)
    return "(" + "; ".join(f"{item.authors}, {item.year}" if isinstance(item, Reference) else f"[{item}]"
                           for item in found) + ")"
