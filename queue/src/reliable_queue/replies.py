"""Decoding of Lua script replies and unit conversion shared by the queue modules.

Pure functions, no Redis: ``text`` turns a reply item (bytes or str) into str,
``split`` cuts a ``[a..., '|', b...]`` reply in two, ``ms`` converts seconds to
whole milliseconds for script arguments.
"""

from __future__ import annotations

from collections.abc import Sequence


def text(value: bytes | str) -> str:
    """A reply item as str (bytes are decoded as UTF-8; raises UnicodeDecodeError)."""
    return value.decode() if isinstance(value, bytes) else value


def ms(seconds: float) -> int:
    """Seconds (float) as whole milliseconds (int), rounded, never negative."""
    return max(int(round(seconds * 1000)), 0)


def split(reply: Sequence[bytes | str]) -> tuple[list[str], list[str]]:
    """Split a ``[a..., '|', b...]`` script reply into two lists of str.

    Raises:
        ValueError: the reply holds no ``'|'`` separator.
    """
    items = [text(x) for x in reply]
    cut = items.index("|")
    return items[:cut], items[cut + 1 :]
