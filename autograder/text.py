"""Text from a submission made safe to print: one place for the two rules every message follows.

Standard library only: the student process imports it too.
"""


def safe_str(value) -> str:
    """``str(value)``, or a description when that fails."""
    try:
        return str(value)
    except Exception:
        return f"<{type(value).__name__} that cannot be printed>"


def printable(text: str, limit: int) -> str:
    """``text`` without control characters (other than newlines and tabs), cut to ``limit`` characters."""
    cleaned = "".join(character if character.isprintable() or character in "\n\t" else "\N{REPLACEMENT CHARACTER}"
                      for character in text[: limit + 1])
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 1] + "…"
