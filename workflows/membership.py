"""Where a job really is: membership in the queue's structures, not a record's existence.

A job record can outlive its place in the queue: a script that failed half-way
(Redis keeps the writes made before the error), or an evicted or deleted list,
leaves a record and an idempotency key that point at a job nothing will run.
The relay must not take such a key for proof that the step is queued.

The check reads one queue's keys in one MULTI/EXEC transaction (all keys of a
queue share one hash slot), so a job moving between structures meanwhile is
seen in exactly one of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from reliable_queue import Queue
from reliable_queue.cluster import UNAVAILABLE, node_client, snapshot
from reliable_queue.errors import QueueConnectionError

#: states :func:`where_is` returns
READY, DELAYED, ACTIVE, DEAD, DONE = "ready", "delayed", "active", "dead", "done"
NOWHERE = "nowhere"  # the record exists but the job is in no structure (an orphan)
UNKNOWN = "unknown"  # no record at all
#: states in which the queue will still run (or has parked) the job
QUEUED = (READY, DELAYED, ACTIVE, DEAD)

_ZSETS = (DELAYED, ACTIVE, DEAD, DONE)


def where_is(queue: Queue, job_ids: Sequence[str]) -> list[str]:
    """The state of each job: ready, delayed, active, dead, done, nowhere or unknown.

    The ready list is searched from its oldest end (``LPOS ... RANK -1``), where
    the jobs a sweep asks about usually are; the sorted sets cost O(1) per job.

    Args:
        queue: the job's queue.
        job_ids: ids to look up (one transaction per id).

    Returns:
        One state per id, in order.

    Raises:
        QueueConnectionError: Redis unreachable.
    """
    states: list[str] = []
    jobs = queue.keys.key("jobs")
    for job_id in job_ids:

        def fill(pipe: Any, job_id: str = job_id) -> None:
            pipe.hexists(jobs, job_id)
            for kind in _ZSETS:
                pipe.zscore(queue.keys.key(kind), job_id)
            pipe.lpos(queue.keys.key(READY), job_id, rank=-1)

        exists, *scores, position = snapshot(queue.client, jobs, fill)
        states.append(_state(bool(exists), scores, position))
    return states


def _state(exists: bool, scores: list[Any], position: Any) -> str:
    if position is not None:
        return READY
    for kind, score in zip(_ZSETS, scores, strict=True):
        if score is not None:
            return kind
    return NOWHERE if exists else UNKNOWN


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
