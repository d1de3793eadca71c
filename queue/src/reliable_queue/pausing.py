"""Pause / resume of a queue: the state a paused queue carries, and its bounds (ADR 0031).

While a queue is paused, its ``paused`` hash exists (``since`` in queue-clock ms, ``by``
and ``reason`` as given); the fetch script reads it atomically with its pop and leases
nothing, so a paused queue hands out no job from the moment :meth:`Queue.pause` returns,
also to a worker that was already blocked waiting on the queue. Leased jobs run on and
settle as usual; due delayed jobs are still promoted (they wait on ``ready``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .codec import check_text
from .errors import QueueLimitError

#: Longest ``reason`` a pause keeps, in characters (it is shown on terminals and pages).
MAX_REASON_CHARS = 200
#: Longest ``by`` a pause keeps, in characters.
MAX_BY_CHARS = 100


@dataclass(frozen=True)
class PauseState:
    """Who paused a queue, why, and since when.

    The texts are untrusted (any writer of the Redis may have set them): views show
    them through their rule for untrusted text, never raw.

    Attributes:
        since: epoch seconds on the queue clock when the pause began (None when the
            stored value is not a time: a foreign writer's hash).
        by: who paused it ("" when not given).
        reason: why ("" when not given).
        fence: as :meth:`Queue.pause <reliable_queue.queue.Queue.pause>` returns it,
            the last fencing number issued before the pause took effect (every lease
            made after it has a larger number, ADR 0022); None when read back from Redis.
            Not part of the state's equality: it says when this call took effect.
    """

    since: float | None
    by: str
    reason: str
    fence: int | None = field(default=None, compare=False)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON output."""
        return {"since": self.since, "by": self.by, "reason": self.reason}


def bounded_text(argument: str, value: str | None, limit: int) -> str:
    """A pause's ``by`` or ``reason`` checked: text, UTF-8 encodable, at most ``limit`` chars.

    Args:
        argument: the argument's name, as the error names it.
        value: the text, or None ("").
        limit: most characters allowed.

    Returns:
        The text unchanged ("" for None).

    Raises:
        QueueLimitError: not a str, or longer than ``limit`` characters.
        InvalidTextError: a lone surrogate (UTF-8 cannot encode it).
    """
    if value is None:
        return ""
    if not isinstance(value, str):
        raise QueueLimitError(f"a pause's {argument} is text, not {type(value).__name__}")
    if len(value) > limit:
        raise QueueLimitError(
            f"a pause's {argument} is at most {limit} characters, not {len(value)}"
        )
    return check_text(f"pause {argument}", value)


def _field_text(raw: Any) -> str:
    if raw is None:
        return ""
    if isinstance(raw, bytes):
        return raw.decode("utf-8", "backslashreplace")
    return str(raw)


def parse_state(raw: dict[Any, Any] | None) -> PauseState | None:
    """The :class:`PauseState` a paused hash (``HGETALL``) holds, or None when it is empty.

    Never raises for foreign data: fields that are not UTF-8 are shown with escapes,
    texts are cut to their bounds, a ``since`` that is not an integer of ms becomes None.
    """
    if not raw:
        return None
    fields = {_field_text(k): v for k, v in raw.items()}
    since_text = _field_text(fields.get("since"))
    since = int(since_text) / 1000.0 if since_text.isascii() and since_text.isdigit() else None
    if since_text and len(since_text) > 16:
        since = None
    return PauseState(
        since=since,
        by=_field_text(fields.get("by"))[:MAX_BY_CHARS],
        reason=_field_text(fields.get("reason"))[:MAX_REASON_CHARS],
    )


__all__ = ["MAX_BY_CHARS", "MAX_REASON_CHARS", "PauseState", "bounded_text", "parse_state"]
