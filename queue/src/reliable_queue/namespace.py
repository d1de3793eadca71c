"""A whole key namespace (``<prefix>:*``) at once: the one operation that spans queues.

Every key a queue makes starts with its prefix (``QueueKeys``); an application
may keep keys of its own beside them under the same prefix. Handing a namespace
over wipes both, and only the queue library knows which names are its own, so the
wipe lives here.
"""

from __future__ import annotations

from .cluster import RedisClient

#: keys UNLINKed per round trip by :func:`delete_namespace`
DELETE_BATCH = 500
#: keys SCAN is asked for per call (a hint to Redis)
SCAN_COUNT = 1000


def delete_namespace(client: RedisClient, prefix: str) -> int:
    """Delete every key whose name starts with ``<prefix>:``: all queues of the prefix.

    Their jobs, dead letters, counters and idempotency keys, and any key the
    application keeps under the same prefix, are gone afterwards. SCAN (never
    KEYS: it does not block Redis) then UNLINK, :data:`DELETE_BATCH` keys per
    round trip, each key on its own command so a cluster routes it to its slot.
    Not atomic: a key written meanwhile may survive; run it again.

    Args:
        client: the Redis client (``Redis`` or ``RedisCluster``).
        prefix: the namespace, as given to :class:`~reliable_queue.Queue`.

    Returns:
        Keys deleted.

    Raises:
        redis.RedisError: Redis unreachable (some keys may be deleted; run it again).
    """
    deleted = 0
    batch: list[bytes] = []
    for key in client.scan_iter(match=f"{prefix}:*", count=SCAN_COUNT):
        batch.append(key)
        if len(batch) >= DELETE_BATCH:
            deleted += _unlink(client, batch)
            batch.clear()
    if batch:
        deleted += _unlink(client, batch)
    return deleted


def _unlink(client: RedisClient, keys: list[bytes]) -> int:
    # one key per call keeps a cluster happy (keys of many slots)
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.unlink(key)
    return sum(int(n or 0) for n in pipe.execute())
