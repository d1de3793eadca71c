"""Untrusted text made visible: the one rule for a terminal, a page and a log.

Text from jobs, users or Redis may carry control characters (ESC starts a
terminal escape sequence, BEL rings, CR overwrites a line) and bidi overrides
that reorder what a reader sees (Trojan Source). :func:`visible` shows each of
them as a ``\\x1b`` / ``\\u202e`` escape, so the text is seen, never acted on.
A lone surrogate (which UTF-8 cannot encode, so a page or a pipe would fail on
it) is shown as its ``\\ud800`` escape too. And shown text never carries a
secret: :func:`visible` passes it through the masker
(:func:`orders.observability.urls.mask_urls_in`) first. It does not escape HTML
or Rich markup: the page (Jinja autoescape) and the terminal
(:class:`rich.text.Text`) do that part.
"""

from __future__ import annotations

import unicodedata
from typing import Any

from orders.observability.urls import mask_urls_in

# Format characters that reorder or hide text (Trojan Source); the rest of
# category Cf (soft hyphen, zero-width joiner in emoji) is harmless.
BIDI = frozenset(chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F))


def hidden(ch: str) -> bool:
    """Whether ``ch`` acts instead of showing: a control character or a bidi override.

    Args:
        ch: one character (str of length 1).

    Returns:
        True for Unicode category Cc, the bidi overrides in :data:`BIDI` and lone
        surrogates (category Cs).
    """
    return ch in BIDI or unicodedata.category(ch) in ("Cc", "Cs")


def _escape_char(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(value: Any, *, multiline: bool = False) -> str:
    """``str(value)`` with every control and bidi character shown as an escape.

    Args:
        value: anything; None becomes ``-``.
        multiline: keep newlines and tabs (a traceback); otherwise they are
            escaped too, so one value stays on one line of a table.

    Returns:
        The text with secrets masked (``***``), and control characters (Unicode
        category Cc), bidi overrides and lone surrogates replaced by ``\\x..`` /
        ``\\u....`` escapes; all else as is.
    """
    raw = mask_urls_in("-" if value is None else str(value))
    keep = "\n\t" if multiline else ""
    return "".join(ch if ch in keep or not hidden(ch) else _escape_char(ch) for ch in raw)
