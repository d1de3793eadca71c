"""The lease book of a worker process: what the heartbeat extends."""

from __future__ import annotations

import redis

from reliable_queue import Lease, Queue
from reliable_queue.heartbeat import LeaseBook


def _queue() -> Queue:
    # never connects: the book only keeps a reference to the queue
    return Queue(redis.Redis(), "q")


def test_settling_a_stale_delivery_keeps_the_newer_lease_of_the_same_job_held() -> None:
    """A lane whose lease expired finishes after another lane of the same process
    fetched the job again: dropping the old lease must not stop the new heartbeat."""
    book = LeaseBook()
    queue = _queue()
    book.add(queue, [Lease("job-1", "1:w")])
    book.add(queue, [Lease("job-1", "7:w")])  # reaped and fetched again
    book.drop([Lease("job-1", "1:w")])
    assert [h.lease for h in book.snapshot()] == [Lease("job-1", "7:w")]
    book.drop([Lease("job-1", "7:w")])
    assert book.snapshot() == []


def test_take_all_empties_the_book() -> None:
    book = LeaseBook()
    book.add(_queue(), [Lease("a", "1:w"), Lease("b", "2:w")])
    assert {h.lease.job_id for h in book.take_all()} == {"a", "b"}
    assert book.snapshot() == []
