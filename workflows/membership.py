"""Where a job really is: membership in the queue's structures, not a record's existence.

A job record can outlive its place in the queue: a script that failed half-way
(Redis keeps the writes made before the error), or an evicted or deleted list,
leaves a record and an idempotency key that point at a job nothing will run.
The relay must not take such a key for proof that the step is queued.

The check is the queue's own :meth:`~reliable_queue.Queue.locate_many` (read-only
scripts, so a job moving between structures meanwhile is seen in exactly one of
them).
"""

from __future__ import annotations

from collections.abc import Sequence

import redis

from reliable_queue import Queue
from reliable_queue.cluster import UNAVAILABLE, node_client
from reliable_queue.errors import QueueConnectionError

#: states :func:`where_is` returns
READY, DELAYED, ACTIVE, DEAD, DONE = "ready", "delayed", "active", "dead", "done"
NOWHERE = "nowhere"  # the record exists but the job is in no structure (an orphan)
UNKNOWN = "unknown"  # no record at all
#: states in which the queue will still run (or has parked) the job
QUEUED = (READY, DELAYED, ACTIVE, DEAD)


def where_is(queue: Queue, job_ids: Sequence[str]) -> list[str]:
    """The state of each job: ready, delayed, active, dead, done, nowhere or unknown.

    :meth:`reliable_queue.Queue.locate_many`: one pipelined round trip, each script
    call a consistent snapshot of its ids.

    Args:
        queue: the jobs' queue.
        job_ids: ids to look up.

    Returns:
        One state per id, in order.

    Raises:
        QueueConnectionError: Redis unreachable.
    """
    return queue.locate_many(job_ids)


def forget_key_if(queue: Queue, idempotency_key: str, job_id: str) -> bool:
    """Delete an idempotency key, but only while it still maps to ``job_id``.

    Args:
        queue: the key's queue.
        idempotency_key: the caller's key (``<workflow id>:<step>``), not the Redis key.
        job_id: the job the key must still point at.

    Returns:
        True when deleted; False when the key changed or vanished meanwhile.

    Raises:
        QueueConnectionError: Redis unreachable.
    """
    key = queue.keys.idempotency_key(idempotency_key)
    try:
        with node_client(queue.client, key).pipeline(transaction=True) as pipe:
            pipe.watch(key)
            current = pipe.get(key)
            if current is None or current.decode("utf-8", "replace") != job_id:
                return False
            pipe.multi()
            pipe.delete(key)
            pipe.execute()
            return True
    except redis.WatchError:
        return False
    except UNAVAILABLE as exc:
        raise QueueConnectionError(str(exc)) from exc
