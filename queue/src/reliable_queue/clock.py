"""The queue clock as the scripts compute it (``lua/_common.lua``), for read-only views.

Every deadline and due time of a queue is on its queue clock: Redis ``TIME`` plus an
offset kept in the queue's stats hash, which grows when the host's clock steps back
and shrinks back to 0 at a bounded rate (ADR 0022). The views (``explain``) read
``TIME`` and the two fields in one transaction and compute the same time here, so a
deadline they show and the time they compare it with are on one clock. Pure: no Redis.
"""

from __future__ import annotations

#: Stats hash fields: the last queue time a script wrote (ms) and the offset (ms).
LAST_FIELD = "clock:last_ms"
OFFSET_FIELD = "clock:offset_ms"
#: A queue time this far below the last one seen is a step back of the host's clock.
TOLERANCE_MS = 2000
#: The offset shrinks by 1 ms per this many ms of queue time (the clock runs at 9/10).
SLEW = 10
#: Largest queue time (ms) the scripts accept in a field: ``2**53 / 1000``, so a fencing
#: number (queue ms * 1000) stays exact in a Lua number.
MAX_MS = 9_007_199_254_740


def field(raw: bytes | str | None) -> int | None:
    """A stored clock field as an int, or None when unset or not an integer up to
    :data:`MAX_MS` (the scripts then treat it as unset, and write it again)."""
    if raw is None:
        return None
    text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else raw
    if not (0 < len(text) <= 13 and text.isascii() and text.isdigit()):
        return None
    value = int(text)
    return value if value <= MAX_MS else None


def queue_time_ms(redis_ms: int, last_ms: int | None, offset_ms: int | None) -> tuple[int, int]:
    """The queue time and the offset in force, both ms, as a script would compute them.

    Args:
        redis_ms: Redis ``TIME`` in epoch milliseconds.
        last_ms: the ``clock:last_ms`` field (:func:`field`), None when unset.
        offset_ms: the ``clock:offset_ms`` field (:func:`field`), None when unset.

    Returns:
        ``(queue time ms, offset ms)``: the offset after a step back was absorbed or
        the slew took its part; queue time = ``redis_ms`` + that offset.
    """
    off = offset_ms or 0
    q = redis_ms + off
    if last_ms is None:
        return q, off
    elapsed = q - last_ms
    if elapsed < -TOLERANCE_MS:
        return last_ms, last_ms - redis_ms
    if elapsed > 0 and off > 0:
        slewed = min(off, elapsed // SLEW)
        off, q = off - slewed, q - slewed
    return q, off


__all__ = ["LAST_FIELD", "MAX_MS", "OFFSET_FIELD", "SLEW", "TOLERANCE_MS", "field", "queue_time_ms"]
