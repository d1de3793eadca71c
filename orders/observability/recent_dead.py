"""The newest dead letters across queues, without reading whole dead-letter queues."""

from __future__ import annotations

from collections.abc import Iterable

from reliable_queue import DeadLetter, Queue, QueueDataError


def newest_dead_letters(queues: Iterable[Queue], limit: int = 5) -> list[DeadLetter]:
    """The ``limit`` most recently dead-lettered jobs of ``queues``, newest first.

    Reads the ``limit`` newest ids of each queue's DLQ (``DeadLetters.newest``), then
    the full entries of the overall newest ``limit``. An id that is not UTF-8 comes
    in its ``hex:`` form; a queue whose DLQ key holds another type is passed over
    (its stats name the key).

    Raises:
        QueueConnectionError: Redis unreachable.
    """
    if limit <= 0:
        return []
    candidates: list[tuple[float, Queue, str]] = []
    for queue in queues:
        try:
            top = queue.dead_letters.newest(limit)
        except QueueDataError:  # WRONGTYPE: not a DLQ to read
            continue
        for at, job_id in reversed(top):  # oldest first, as ties were always kept
            candidates.append((at, queue, job_id))
    candidates.sort(key=lambda c: c[0], reverse=True)
    out: list[DeadLetter] = []
    for _, queue, job_id in candidates[:limit]:
        try:
            letter = queue.dead_letters.show(job_id)
        except QueueDataError:
            continue
        if letter is not None:
            out.append(letter)
    return out
