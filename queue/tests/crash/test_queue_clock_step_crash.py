"""A worker killed while its leases run, then the Redis clock steps back an hour.

The server is a real redis-server under libfaketime (``stepped_redis``); the worker is
a real process, SIGKILLed right after it leased its batch.
"""

import signal
import time

import pytest
import redis
from queue_helpers import wait_until
from queue_worker_process import deliveries, effects

from reliable_queue import EnqueueRequest, Queue, QueueSettings, explain, stats

pytestmark = pytest.mark.chaos

LEASE = 1.0  # seconds
SETTINGS = {"lease_seconds": LEASE, "max_block_seconds": 0.5}


def test_jobs_of_a_killed_worker_run_again_within_a_lease_after_the_clock_steps_back(
    stepped_redis, spawn_worker, key_prefix, effects_db
):
    # seen: the 10 jobs stayed active with leases ~3,557 s in the future until the
    # clock was put right
    client = redis.Redis.from_url(stepped_redis.url, socket_timeout=10)
    queue = Queue(client, "jobs", prefix=key_prefix, settings=QueueSettings(**SETTINGS))
    try:
        ids = queue.enqueue_many([EnqueueRequest("record", {}) for _ in range(10)])
        crashed = spawn_worker(
            url=stepped_redis.url, kill="after_fetch", batch_size=10, settings=SETTINGS
        )
        assert crashed.wait(timeout=30) == -signal.SIGKILL
        assert stats(queue).active == 10

        stepped_redis.step(-3600.0)
        start = time.monotonic()
        left = [explain(queue, i) for i in ids]
        assert all(e.lease_deadline - e.queue_time <= LEASE for e in left)
        reaped = 0

        def all_reaped() -> bool:
            nonlocal reaped
            reaped += queue.reap()
            return reaped == 10

        wait_until(all_reaped, timeout=LEASE + 5.0, interval=0.05)
        took = time.monotonic() - start

        spawn_worker(url=stepped_redis.url, batch_size=10, settings=SETTINGS)
        wait_until(lambda: stats(queue).counters["succeeded"] == 10, timeout=30)
    finally:
        client.close()
    # reaped within one lease (at 9/10 speed while the offset slews back) plus slack
    assert took <= LEASE / 0.9 + 1.0, took
    assert sorted(effects(effects_db)) == sorted(ids)
    runs = deliveries(effects_db)
    assert sorted(d[0] for d in runs) == sorted(ids)  # the killed worker ran none of them
    assert all(d[2] == 1 for d in runs)  # a batch lost with its worker is not charged
