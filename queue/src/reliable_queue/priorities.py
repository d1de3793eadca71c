"""A job's priority and fairness key: their bounds, and the flow value the scripts keep.

A job with the default priority and no fairness key waits in the plain ``ready`` list
as before; any other waits in the ``waiting`` sorted set of its queue, and its
``flow`` hash entry ``"[f]<priority>|<fairness key>"`` carries both through every route
back to waiting (``f``: put off by a throttle, it goes first in its band when due).
Priorities are ``0..9``, lower first. Docs/adr/0033 holds the layout and the rules.
"""

from __future__ import annotations

from typing import Any

from .codec import check_text
from .errors import QueueLimitError
from .limits import DEFAULT_PRIORITY, MAX_FAIRNESS_KEY_BYTES, MAX_PRIORITY, MIN_PRIORITY


def check_priority(value: Any) -> int:
    """``value`` if it is a priority: an int in ``MIN_PRIORITY..MAX_PRIORITY`` (0..9).

    Raises:
        QueueLimitError: not an int (a bool or a float is refused), or out of range.
    """
    if type(value) is int and MIN_PRIORITY <= value <= MAX_PRIORITY:
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise QueueLimitError(
            f"a priority is a whole number {MIN_PRIORITY}..{MAX_PRIORITY} (lower runs"
            f" sooner), not {value!r}"
        )
    raise QueueLimitError(
        f"a priority is {MIN_PRIORITY}..{MAX_PRIORITY} (lower runs sooner), not {value}"
    )


def check_fairness_key(value: Any) -> str | None:
    """``value`` if it is a fairness key (or None): text of 1..128 UTF-8 bytes, no NUL.

    Raises:
        QueueLimitError: not a str, empty, longer than ``MAX_FAIRNESS_KEY_BYTES`` bytes,
            or holding a NUL character.
        InvalidTextError: a lone surrogate (UTF-8 cannot encode it).
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise QueueLimitError(f"a fairness key is text, not {type(value).__name__}")
    check_text("fairness key", value)
    size = len(value.encode("utf-8"))
    if not 1 <= size <= MAX_FAIRNESS_KEY_BYTES:
        raise QueueLimitError(
            f"a fairness key is 1..{MAX_FAIRNESS_KEY_BYTES} bytes of UTF-8, not {size}"
        )
    if "\0" in value:
        raise QueueLimitError("a fairness key holds no NUL character")
    return value


def flow_value(priority: int, fairness_key: str | None) -> str | None:
    """The flow value the enqueue script stores, or None for a job that has neither.

    Args:
        priority: a checked priority (:func:`check_priority`).
        fairness_key: a checked key or None (:func:`check_fairness_key`).

    Returns:
        ``"<priority>|<key>"`` (``""`` for no key), or None for the default priority
        without a key (such a job keeps the plain ready list).
    """
    if priority == DEFAULT_PRIORITY and fairness_key is None:
        return None
    return f"{priority}|{fairness_key or ''}"


def parse_flow_value(raw: bytes | str | None) -> tuple[int, str | None] | None:
    """``(priority, fairness key or None)`` of a stored flow value; None when there is none
    or it does not read (never raises: it is data from Redis)."""
    if raw is None:
        return None
    text = raw.decode("utf-8", "backslashreplace") if isinstance(raw, bytes) else str(raw)
    text = text.removeprefix("f")
    if len(text) < 2 or not text[0].isdigit() or not text[0].isascii() or text[1] != "|":
        return None
    return int(text[0]), text[2:] or None


def parse_key_cap(raw: bytes | str | None) -> int | None:
    """The per-key cap a keycap string holds; None when absent or not an integer >= 1
    (never raises: the audit reports an unreadable one)."""
    if raw is None:
        return None
    text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else str(raw)
    if not text.isascii() or not text.isdigit() or len(text) > 9 or int(text) < 1:
        return None
    return int(text)


__all__ = [
    "DEFAULT_PRIORITY",
    "MAX_PRIORITY",
    "MIN_PRIORITY",
    "check_fairness_key",
    "check_priority",
    "flow_value",
    "parse_flow_value",
    "parse_key_cap",
]
