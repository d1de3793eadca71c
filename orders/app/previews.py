"""Bounded views of job data: how much of a payload a terminal or a page shows.

A payload is bounded at enqueue, but a producer writing to Redis directly is
not, and one 20 MB dead letter should not flood a terminal or a page. Views
show the first :data:`PAYLOAD_SHOWN` bytes and say how many they left out;
``--json`` / ``--full`` (CLI) and ``?full=1`` (dashboard) show everything.
"""

from __future__ import annotations

from dataclasses import dataclass

PAYLOAD_SHOWN = 4096
"""Bytes of a payload's text (UTF-8) a view shows before it cuts."""


@dataclass(frozen=True)
class Preview:
    """The shown part of a text.

    Attributes:
        text: the text, or its first part.
        more: bytes (UTF-8) left out; 0 when ``text`` is whole.
    """

    text: str
    more: int


def preview(text: str, limit: int = PAYLOAD_SHOWN) -> Preview:
    """At most ``limit`` bytes of ``text``, cut at a character boundary.

    Args:
        text: the whole text (a payload as JSON, a raw record).
        limit: bytes (UTF-8) shown at most (>= 0).

    Returns:
        The shown part and how many bytes were left out.
    """
    if len(text) * 4 <= limit:  # no UTF-8 character takes more than 4 bytes
        return Preview(text, 0)
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return Preview(text, 0)
    head = data[:limit].decode("utf-8", "ignore")
    return Preview(head, len(data) - len(head.encode("utf-8", "surrogatepass")))
