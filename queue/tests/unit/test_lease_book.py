"""The lease book of a worker process: what the heartbeat extends."""

from __future__ import annotations

import redis

from reliable_queue import Lease, Queue
from reliable_queue.heartbeat import LaneRun, LeaseBook


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


def test_a_stale_delivery_marking_its_run_leaves_the_newer_delivery_alone() -> None:
    """A lane still running a job whose lease expired (and that another lane of the
    same process fetched again) marks its run on its own entry: the book keyed by job
    id used to mark the newer delivery as started, so its deadline timed out a run
    that had not begun and a late finish cleared the deadline of one that had."""
    book = LeaseBook()
    queue = _queue()
    stale = book.add(queue, [Lease("job-1", "1:w")], LaneRun(queue))[0]
    fresh = book.add(queue, [Lease("job-1", "7:w")], LaneRun(queue))[0]

    stale.start(deadline=0.0)
    assert book.take_overdue(now=1.0) == ([], [])

    fresh.start(deadline=0.5)
    stale.finish()
    overdue, mates = book.take_overdue(now=1.0)
    assert [h.lease for h in overdue] == [Lease("job-1", "7:w")] and mates == []


def test_a_run_finishing_while_the_heartbeat_looks_is_not_an_error() -> None:
    """A lane clears its entry's deadline (``Held.finish``) without the book's lock:
    the heartbeat reads each deadline once, so one that turns None between two reads
    cannot reach a ``None <= now`` comparison (a TypeError that skipped the beat's
    time-limit check)."""
    from reliable_queue.heartbeat import Held

    class FinishingWhileRead(Held):
        """An entry whose run ends right after its deadline is first read."""

        @property
        def deadline(self) -> float | None:
            self.__dict__["reads"] = self.__dict__.get("reads", 0) + 1
            return 1.0 if self.__dict__["reads"] == 1 else None

        @deadline.setter
        def deadline(self, value: float | None) -> None:
            pass

    book = LeaseBook()
    entry = FinishingWhileRead(_queue(), Lease("job-1", "1:w"), started=True)
    book._held["job-1"] = entry
    overdue, mates = book.take_overdue(now=5.0)
    assert [h.lease for h in overdue] == [Lease("job-1", "1:w")]
    assert mates == []


def test_a_batch_is_settled_once_by_its_lane_or_by_the_time_limit_check() -> None:
    """The time-limit check takes the overdue run's batch with its finished and
    unstarted jobs; the lane, returning late, settles none of them, and a batch its
    lane closed first (it had run) is never taken by the check."""
    book = LeaseBook()
    queue = _queue()
    lane = LaneRun(queue)
    done, hung, unstarted = book.add(
        queue, [Lease("a", "1:w"), Lease("b", "2:w"), Lease("c", "3:w")], lane
    )
    done.start(deadline=9.0)
    done.finish(result="a's outcome")
    hung.start(deadline=1.0)
    overdue, mates = book.take_overdue(now=2.0)
    assert (overdue, mates) == ([hung], [done, unstarted])
    assert [m.result for m in mates] == ["a's outcome", None]
    assert book.snapshot() == []
    hung.finish(result="late")
    assert lane.taken
    assert book.close(lane, [done, hung, unstarted]) is False  # taken by the check

    other = LaneRun(queue)
    first, second = book.add(queue, [Lease("d", "4:w"), Lease("e", "5:w")], other)
    first.start(deadline=1.0)
    first.finish(result="d's outcome")
    second.start(deadline=1.0)  # a deadline read as it passes, the batch already run
    assert book.close(other, [first, second]) is True
    assert book.take_overdue(now=2.0) == ([], []) and not other.taken
    assert book.snapshot() == []


def test_closing_a_batch_keeps_a_newer_delivery_of_its_job_held() -> None:
    book = LeaseBook()
    queue = _queue()
    lane = LaneRun(queue)
    old = book.add(queue, [Lease("a", "1:w")], lane)
    book.add(queue, [Lease("a", "7:w")], LaneRun(queue))  # reaped, fetched again
    assert book.close(lane, old) is True
    assert [h.lease for h in book.snapshot()] == [Lease("a", "7:w")]
