"""Where a job can be, and the one rule that says when an idempotency key is trusted.

A job record can outlive its place in the queue: a script that failed half-way
(Redis keeps the writes made before the error), or an evicted or deleted list,
leaves a record and an idempotency key that point at a job nothing will run.
Such a key is no proof that the job is queued. :func:`key_is_trusted` is the
rule every reader of idempotency keys applies (:meth:`Queue.pending_jobs_for`,
:meth:`Queue.drop_untrusted_keys`, ``inspection.KeyedJob.pending``); the
enqueue script's ``replace_stale_keys`` replaces only keys this rule distrusts
too (a job whose record is gone is ``unknown``).
"""

from __future__ import annotations

#: a structure holds the job (the first of active, ready, delayed, dead, done)
READY, DELAYED, ACTIVE, DEAD, DONE = "ready", "delayed", "active", "dead", "done"
#: the record exists but the job is in no structure (an orphan the audit repairs)
NOWHERE = "nowhere"
#: neither a record nor a structure holds the job
UNKNOWN = "unknown"

#: Answers of :meth:`Queue.locate`.
PLACES = (READY, DELAYED, ACTIVE, DEAD, DONE, NOWHERE, UNKNOWN)
#: Places of a job that has not finished (ready to run, waiting, running, dead-lettered).
PENDING_PLACES = frozenset({READY, DELAYED, ACTIVE, DEAD})


def key_is_trusted(place: str | None) -> bool:
    """Whether an idempotency key whose job is at ``place`` may be taken as a duplicate.

    A key is trusted only while its job has not finished and the queue still holds
    it: ready, delayed, active or dead-lettered (a dead letter is parked, and a
    redrive runs it). A finished job, an orphan record or a vanished job does not
    count: the step it stood for must be enqueued again.

    Args:
        place: one of :data:`PLACES`, or None when there is no job (or its place
            could not be read).

    Returns:
        True when ``place`` is in :data:`PENDING_PLACES`.
    """
    return place in PENDING_PLACES


__all__ = [
    "ACTIVE",
    "DEAD",
    "DELAYED",
    "DONE",
    "NOWHERE",
    "PENDING_PLACES",
    "PLACES",
    "READY",
    "UNKNOWN",
    "key_is_trusted",
]
