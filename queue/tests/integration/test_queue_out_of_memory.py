"""A Redis at its memory limit (``maxmemory``, ``noeviction``) keeps the drain going.

Redis refuses a script's first write that may grow memory (HSET, ZADD, HINCRBY,
LPUSH, SET: commands flagged ``denyoom``) with an OOM error once ``used_memory``
is over ``maxmemory``; once a script has written, its later commands are allowed.
Taking leased jobs off ``ready`` and settling them frees memory (an ack with
retention 0 deletes the record), so fetch and ack must still work there: a
refused first write is not a corrupt key, and a settlement the worker drops
runs its jobs a second time after their leases expire.

These use a private embedded server, whatever ``TEST_REDIS_URL`` says.
"""

import collections
import threading
import time

import pytest
import redis
from queue_helpers import running_worker, wait_until

from reliable_queue import (
    EnqueueRequest,
    Queue,
    QueueDataError,
    QueueSettings,
    TaskRegistry,
    explain,
    stats,
)


def test_fetch_and_ack_work_while_redis_refuses_writes_that_grow_memory(private_client, key_prefix):
    queue = Queue(private_client, "jobs", prefix=key_prefix)
    # the same queue, acks deleting the record at once (retention 0)
    forgetful = Queue(
        private_client, "jobs", prefix=key_prefix, settings=QueueSettings(job_retention_seconds=0)
    )
    first, second, third = queue.enqueue_many([EnqueueRequest("t", {"i": i}) for i in range(3)])
    lease = queue.fetch(1).jobs[0].lease
    try:
        private_client.config_set("maxmemory", 1)

        assert forgetful.ack([lease]).acked == [first]
        [job] = queue.fetch(1).jobs
        assert job.job_id == second
        assert queue.ack([job.lease]).acked == [second]
    finally:
        private_client.config_set("maxmemory", 0)

    assert explain(queue, first) is None  # its record went with the ack
    assert explain(queue, second).state == "done"
    assert explain(queue, third).state == "ready"
    assert stats(queue).counters["succeeded"] == 2


def test_a_worker_runs_each_job_once_through_a_second_of_redis_out_of_memory(
    private_client, key_prefix
):
    runs: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()
    registry = TaskRegistry()

    @registry.task("t")
    def handler(payload, ctx):
        with lock:
            runs[ctx.job_id] += 1
        time.sleep(0.002)

    settings = QueueSettings(lease_seconds=2.0, max_block_seconds=0.3)
    queue = Queue(private_client, "jobs", prefix=key_prefix, settings=settings)
    ids = queue.enqueue_many([EnqueueRequest("t", {"i": i}) for i in range(1500)])
    kw = {"prefix": key_prefix, "settings": settings, "batch_size": 10}
    try:
        with running_worker(private_client, ["jobs"], registry, **kw) as worker:
            wait_until(lambda: len(runs) >= 100)
            private_client.config_set("maxmemory", 1)
            time.sleep(1.0)
            private_client.config_set("maxmemory", 0)
            wait_until(lambda: len(runs) == len(ids), timeout=30)
            time.sleep(settings.lease_seconds + 0.5)  # a dropped ack's lease would expire
            wait_until(lambda: stats(queue).ready + stats(queue).active == 0, timeout=10)
            counts = dict(worker.counters.counts)
    finally:
        private_client.config_set("maxmemory", 0)

    assert set(runs) == set(ids)
    assert max(runs.values()) == 1, [j for j, n in runs.items() if n > 1][:5]
    assert stats(queue).counters["reaped"] == 0
    assert counts.get("settle_errors", 0) == 0, counts


def test_out_of_memory_does_not_hide_a_corrupt_key_from_fetch_and_ack(private_client, key_prefix):
    # over maxmemory the OOM refusal comes before the type check: the checks behind it
    # must still refuse a wrong-type key with nothing written
    queue = Queue(private_client, "jobs", prefix=key_prefix)
    first, second = queue.enqueue_many([EnqueueRequest("t", {"i": i}) for i in range(2)])
    lease = queue.fetch(1).jobs[0].lease
    stats_key = queue.keys.key("stats")
    private_client.hset(stats_key, "succeeded", "many")
    leases_key = queue.keys.key("leases")
    saved = private_client.dump(leases_key)
    private_client.delete(leases_key)
    private_client.rpush(leases_key, "not a hash")
    try:
        private_client.config_set("maxmemory", 1)
        with pytest.raises(QueueDataError, match="leases"):
            queue.fetch(1)
        assert private_client.llen(queue.keys.key("ready")) == 1
        private_client.delete(leases_key)  # deletes are never refused
        private_client.config_set("maxmemory", 0)
        private_client.restore(leases_key, 0, saved)
        private_client.config_set("maxmemory", 1)
        with pytest.raises(QueueDataError, match="succeeded"):
            queue.ack([lease])
        assert private_client.zscore(queue.keys.key("active"), first) is not None
    finally:
        private_client.config_set("maxmemory", 0)
    assert explain(queue, second).state == "ready"


def test_an_enqueue_over_maxmemory_is_refused_with_nothing_written(private_client, key_prefix):
    """Enqueue's first write (the record's HSETNX, under pcall) is its check of jobs; a
    refusal over maxmemory is the reply, not corruption, and nothing is written."""
    queue = Queue(private_client, "jobs", prefix=key_prefix)
    (first,) = queue.enqueue_many([EnqueueRequest("t", {})])
    keys = [queue.keys.key(k) for k in ("ready", "jobs", "stats", "wake")]
    before = [private_client.dump(k) for k in keys]
    try:
        private_client.config_set("maxmemory", 1)
        with pytest.raises(redis.ResponseError, match="maxmemory") as refused:
            queue.enqueue("t", {}, idempotency_key="k")
        assert not isinstance(refused.value, QueueDataError)
    finally:
        private_client.config_set("maxmemory", 0)

    assert [private_client.dump(k) for k in keys] == before
    assert private_client.exists(queue.keys.idempotency_key("k")) == 0
    assert queue.enqueue("t", {}) != first
