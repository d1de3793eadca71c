"""Job ids as stored: text, or bytes that are not UTF-8, shown and addressed as ``hex:...``.

A foreign writer may put any bytes in a queue's structures. An id that is not UTF-8
text is shown as ``hex:`` and the lowercase hex of its bytes (``b"\\xff\\x01"`` ->
``hex:ff01``), and that text names the stored id again wherever an id is taken
(``show``, ``purge``, ``redrive``, ``explain``, ``find_job``). So that the two forms
never name two ids, a UTF-8 id that itself reads as the hex form of a stored id is
shown in hex too: :func:`id_text` and :func:`id_member` are inverse for every byte
string (``tests`` check it with hypothesis). Our own ids are hex digits, never
``hex:...``. Pure functions, no Redis.
"""

from __future__ import annotations

import re

from .codec import check_text
from .limits import MAX_ID_BYTES

HEX_PREFIX = "hex:"
_HEX = re.compile(r"(?:[0-9a-f]{2})+")


def _hex_bytes(text: str) -> bytes | None:
    """The bytes ``text`` spells as ``hex:<even count of lowercase hex digits>``, else None."""
    if not text.startswith(HEX_PREFIX) or not _HEX.fullmatch(text, len(HEX_PREFIX)):
        return None
    return bytes.fromhex(text[len(HEX_PREFIX) :])


def _names_bytes(text: str) -> bytes | None:
    """The stored id ``text`` is the hex form of, or None when it names itself."""
    raw = _hex_bytes(text)
    # raw is shorter than text, so this recursion ends (depth about log2 of the length)
    return raw if raw is not None and id_text(raw) == text else None


def id_text(member: bytes | str) -> str:
    """A stored id as text: itself when it is UTF-8 (and not a hex form), else ``hex:...``.

    Args:
        member: a member of a queue structure as Redis returned it.

    Returns:
        The text every view shows and every id argument accepts back.
    """
    if isinstance(member, str):
        member = member.encode("utf-8", "surrogateescape")
    try:
        text = member.decode("utf-8")
    except UnicodeDecodeError:
        return HEX_PREFIX + member.hex()
    return HEX_PREFIX + member.hex() if _names_bytes(text) is not None else text


def id_member(text: str, argument: str = "job id") -> bytes | str:
    """The stored id a text names: the bytes of a hex form, else the text itself.

    Args:
        text: an id as :func:`id_text` shows it (or as a caller typed it).
        argument: what the text is, for the error message.

    Returns:
        bytes for a hex form that names a non-UTF-8 id, else ``text`` (str).

    Raises:
        InvalidTextError: ``text`` holds a lone surrogate.
    """
    raw = _names_bytes(text)
    if raw is not None:
        return raw
    return check_text(argument, text)


def unreadable(text: str) -> bool:
    """True when ``text`` is the hex form of a stored id (:func:`id_text` made it)."""
    return _names_bytes(text) is not None


def leasable(text: str) -> bool:
    """True when the id ``text`` names could be leased by a worker: UTF-8 text of
    1..``MAX_ID_BYTES`` bytes. Any other id is dead-lettered as ``invalid_record`` by
    the fetch that meets it, so redriving it only sends it back to the DLQ."""
    if unreadable(text):
        return False
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return False
    return 0 < size <= MAX_ID_BYTES
