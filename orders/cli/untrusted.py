"""Text from Redis, jobs or the database made safe for a terminal.

Control characters (escape sequences could move the cursor or retitle the
terminal) are shown as ``\\xNN``, and Rich markup is escaped.
"""

from __future__ import annotations

from rich.markup import escape


def for_terminal(text: object, limit: int = 500) -> str:
    """Printable, markup-escaped form of ``text``, cut to ``limit`` characters.

    Args:
        text: any value; ``str()`` is applied.
        limit: most characters kept before escaping.

    Returns:
        A string safe to pass to ``console.print`` with markup on.
    """
    raw = str(text)[:limit]
    shown = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in raw)
    return escape(shown)
