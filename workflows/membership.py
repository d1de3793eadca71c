"""Where a job really is: membership in the queue's structures, not a record's existence.

A job record can outlive its place in the queue: a script that failed half-way
(Redis keeps the writes made before the error), or an evicted or deleted list,
leaves a record and an idempotency key that point at a job nothing will run.
The relay must not take such a key for proof that the step is queued.

The queue owns the answer: the place names are ``reliable_queue.places``'s, the
check is :meth:`~reliable_queue.Queue.locate_many` (read-only scripts, so a job
moving between structures meanwhile is seen in exactly one of them), and whether
an idempotency key is trusted is :func:`reliable_queue.places.key_is_trusted`.
Nothing here sends a Redis command of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from reliable_queue import Queue
from reliable_queue.places import ACTIVE, DEAD, DELAYED, DONE, NOWHERE, READY, UNKNOWN


def where_is(queue: Queue, job_ids: Sequence[str]) -> list[str]:
    """The state of each job: ready, delayed, active, dead, done, nowhere or unknown.

    :meth:`reliable_queue.Queue.locate_many`: one pipelined round trip, each script
    call a consistent snapshot of its ids.

    Args:
        queue: the jobs' queue.
        job_ids: ids to look up.

    Returns:
        One state per id, in order (one of ``reliable_queue.places.PLACES``).

    Raises:
        QueueConnectionError: Redis unreachable.
    """
    return queue.locate_many(job_ids)


__all__ = ["ACTIVE", "DEAD", "DELAYED", "DONE", "NOWHERE", "READY", "UNKNOWN", "where_is"]
