"""Tolerant readers for what the scripts stored beside a job: its failure info and attempts.

Readers that show data (the DLQ listing, one dead letter, a job's explanation)
must not fail on one bad entry: a hand edit, an old version's format or a bug
elsewhere can leave failure info that is not a JSON object, or attempts that
are not an integer. These functions never raise; they return the best reading
and, when the stored value did not have the expected shape, its raw text so the
caller can show it as it is. Pure functions, no Redis.
"""

from __future__ import annotations

from typing import Any

from . import codec

_RAW_LIMIT = 4096  # characters of a malformed value kept for display


def raw_text(value: Any) -> str:
    """A stored value as display text: bytes decoded (invalid UTF-8 replaced), cut to 4096
    characters."""
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return text[:_RAW_LIMIT]


def failure_info(value: bytes | str | None) -> tuple[dict[str, Any] | None, str | None]:
    """Decode a job's stored failure info.

    Args:
        value: the ``info`` hash field (JSON text), or None when there is none.

    Returns:
        ``(info, raw)``: ``info`` is the decoded JSON object with ``reason``,
        ``error`` and ``traceback`` (when present) as str, or None when absent or
        malformed; ``raw`` is the stored text when it was malformed (not JSON, or
        JSON but not an object), else None.
    """
    if value is None:
        return None, None
    try:
        decoded = codec.loads(value)
    except ValueError:
        return None, raw_text(value)
    if not isinstance(decoded, dict):
        return None, raw_text(value)
    for key in ("reason", "error", "traceback"):
        if key in decoded and not isinstance(decoded[key], str):
            decoded[key] = raw_text(decoded[key])
    return decoded, None


def attempts(value: bytes | str | int | None) -> tuple[int, str | None]:
    """Decode a job's stored attempt count.

    Args:
        value: the ``attempts`` hash field, or None when there is none.

    Returns:
        ``(count, raw)``: the count (0 when absent or malformed) and the stored
        text when it was not a non-negative integer, else None.
    """
    if value is None:
        return 0, None
    try:
        count = int(value)
    except (TypeError, ValueError):
        return 0, raw_text(value)
    if count < 0:
        return 0, raw_text(value)
    return count, None
