"""The Redis type each queue key holds, and what a read-only view says when it does not.

A foreign writer, a manual edit or a bug can leave a value of another type at a
queue key (``RPUSH`` onto the ``jobs`` hash's name, a list at an idempotency key).
Scripts refuse such a key before their first write (``QUEUE_CORRUPT``); read-only
views go on instead: they read with ``raise_on_error=False``, treat a ``WRONGTYPE``
reply as "nothing readable here" and name the key in a note (:func:`note`), so
the rest of the view is still shown.
"""

from __future__ import annotations

from typing import Any

import redis

from .cluster import UNAVAILABLE, RedisClient
from .errors import QueueConnectionError
from .replies import text

#: Redis type of each structure of a queue (``QueueKeys.key(kind)``), and of an
#: idempotency key (``idem``).
KEY_TYPES = {
    "ready": "list",
    "delayed": "zset",
    "active": "zset",
    "jobs": "hash",
    "attempts": "hash",
    "leases": "hash",
    "dead": "zset",
    "info": "hash",
    "done": "zset",
    "stats": "hash",
    "seq": "string",
    "wake": "list",
    "paused": "hash",
    "limit": "hash",
    "waiting": "zset",
    "flow": "hash",
    "tags": "hash",
    "running": "zset",
    "keycap": "string",
    "idem": "string",
}


def wrong_type(reply: Any) -> bool:
    """True when a pipelined reply (or a raised error) is Redis's ``WRONGTYPE`` error.

    A pipeline that raises words it ``Command # 2 (GET ...) of pipeline caused error:
    WRONGTYPE ...`` (redis-py): that form counts too; the command's arguments (key
    names) do not.
    """
    if not isinstance(reply, redis.ResponseError):
        return False
    text = str(reply)
    return text.startswith("WRONGTYPE") or "of pipeline caused error: WRONGTYPE" in text


def note(client: RedisClient, key: str, want: str) -> str:
    """What a view says about ``key``, which did not hold a ``want``: one line naming both.

    Asks Redis for the key's type (one more round trip, on this rare path only).

    Raises:
        QueueConnectionError: Redis unreachable.
    """
    try:
        found = text(client.type(key))
    except UNAVAILABLE as exc:
        raise QueueConnectionError(str(exc)) from exc
    return f"key {key} holds a {found}, expected a {want}; it is left as it is"


def checked(client: RedisClient, reply: Any, key: str, want: str) -> tuple[Any, str | None]:
    """A pipelined reply, or ``(None, note)`` when the key held another type.

    Raises:
        redis.ResponseError: any other error reply (not a condition of the data).
    """
    if wrong_type(reply):
        return None, note(client, key, want)
    if isinstance(reply, redis.ResponseError):
        raise reply
    return reply, None
