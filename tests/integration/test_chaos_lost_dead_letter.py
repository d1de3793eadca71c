"""A worker_lost dead letter that a cut AOF tail drops is made again, by the next reap.

With ``appendfsync everysec`` the chaos run cuts the last second of the AOF at
each Redis crash. When that second held the poison job's dead-lettering, Redis
comes back with the job in ``active`` (its lease long expired, its attempts at
the maximum, still a suspect), and the first reap dead-letters it again. The
dead-lettering then happened twice: once in the writes Redis lost (the report
adds that increment back, ``orders.chaos.observe.lost_increments``) and once in
the writes it kept. One job, two counted events: the chaos report must tell them
apart instead of expecting a single count.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from orders.chaos.observe import lost_increments
from orders.chaos.redis_crash import AofHistory, RedisCrasher
from orders.chaos.summary import restored_increments
from reliable_queue import Queue, QueueSettings, stats
from reliable_queue.embedded import EmbeddedRedis

LEASE = 0.2  # seconds


class Clock:
    """A monotonic clock the test moves by hand (the AOF samples' time)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def server(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    """An embedded Redis of its own (it is killed and its AOF cut)."""
    server = EmbeddedRedis(tmp_path / "data", appendfsync="everysec")
    server.ensure_running()
    try:
        yield server
    finally:
        server.stop(timeout=10.0)


def lose_worker(queue: Queue) -> None:
    """Lease the job alone and let its lease expire, as when its process dies."""
    assert len(queue.fetch(1, lease_seconds=LEASE).jobs) == 1
    time.sleep(LEASE + 0.05)


def dead_worker_lost(queue: Queue) -> int:
    return stats(queue).counters.get("dead:worker_lost", 0)


def test_a_dead_letter_lost_with_the_aof_tail_is_redone_and_counted_twice(
    server: EmbeddedRedis,
) -> None:
    clock = Clock()
    history = AofHistory(server.redis_dir, clock=clock)
    crasher = RedisCrasher(server, lose_window=1.0, history=history, clock=clock)
    settings = QueueSettings(lease_seconds=LEASE)
    with redis.Redis.from_url(server.url) as client:
        queue = Queue(client, "notification", prefix="t-lostdead", settings=settings)
        job_id = queue.enqueue("poison", {}, max_attempts=1)
        lose_worker(queue)
        queue.reap()  # lost for the first time: not charged, a suspect now
        lose_worker(queue)
        assert history.sample() is not None  # the AOF as it was a second before the crash
        clock.now += 1.0
        queue.reap()  # lost alone at max attempts: dead as worker_lost
        assert queue.locate(job_id) == "dead" and dead_worker_lost(queue) == 1
        before = {"notification": stats(queue).counters}

        crasher.kill()
        clock.now += 0.5
        crasher.restart()  # the AOF is cut back past the dead-lettering
    assert crasher.counts.cuts == 1

    with redis.Redis.from_url(server.url) as client:
        queue = Queue(client, "notification", prefix="t-lostdead", settings=settings)
        assert queue.locate(job_id) == "active"  # the writes of the last second are gone
        lost = lost_increments(before, {"notification": stats(queue).counters})
        assert queue.reap() == 1  # ... and the first reap dead-letters the job again
        assert queue.locate(job_id) == "dead"
        kept = dead_worker_lost(queue)
        letters = [letter.job_id for letter in queue.dead_letters.iter(reason="worker_lost")]

    # one job in the DLQ, dead-lettered once in the writes Redis kept and once in
    # the writes it lost: the report's total (kept + restored) is 2, and only the
    # restored part may exceed what the DLQ holds
    restored = restored_increments(lost, "dead:worker_lost")
    assert letters == [job_id]
    assert (kept, restored) == (1, 1)
    assert kept + restored == 2  # the report's total: a single expected count is wrong
