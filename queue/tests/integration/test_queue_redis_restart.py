"""Surviving Redis itself: SCRIPT FLUSH mid-run, and a kill -9 + restart of the server.

These use a private embedded server (appendfsync always) that the test may flush or
kill, whatever ``TEST_REDIS_URL`` says.
"""

import threading
import time

import redis
from queue_helpers import running_worker, wait_until

from reliable_queue import (
    EnqueueRequest,
    Queue,
    QueueConnectionError,
    QueueSettings,
    TaskRegistry,
    explain,
    stats,
)

SETTINGS = QueueSettings(lease_seconds=2.0, max_block_seconds=0.5)


def counting_registry():
    registry = TaskRegistry()
    seen: set[str] = set()
    lock = threading.Lock()

    @registry.task("t")
    def handler(payload, ctx):
        with lock:
            seen.add(ctx.job_id)

    return registry, seen


def test_scripts_are_reloaded_after_script_flush_and_the_worker_keeps_going(
    private_client, key_prefix
):
    registry, seen = counting_registry()
    queue = Queue(private_client, "jobs", prefix=key_prefix, settings=SETTINGS)
    first = queue.enqueue_many([EnqueueRequest("t", {}) for _ in range(5)])
    with running_worker(private_client, ["jobs"], registry, prefix=key_prefix, settings=SETTINGS):
        wait_until(lambda: stats(queue).counters["succeeded"] == 5)
        # flush and check in one MULTI: the running worker may load fetch again
        # right after the flush, which is the behaviour under test, not a failure
        pipe = private_client.pipeline(transaction=True)
        pipe.script_flush()
        pipe.script_exists(queue.scripts.sha("fetch"))
        assert pipe.execute()[1] == [False]

        second = queue.enqueue_many([EnqueueRequest("t", {}) for _ in range(5)])
        wait_until(lambda: stats(queue).counters["succeeded"] == 10)
        private_client.script_flush()
        third = queue.enqueue("t", {})
        wait_until(lambda: stats(queue).counters["succeeded"] == 11)

    assert seen == {*first, *second, third}


def test_worker_reconnects_after_redis_is_killed_mid_run_and_loses_no_ack(
    embedded_redis, key_prefix
):
    registry, seen = counting_registry()
    registry.task("slow")(lambda payload, ctx: (time.sleep(0.02), seen.add(ctx.job_id)))
    settings = QueueSettings(lease_seconds=1.0, max_block_seconds=0.5)
    client = redis.Redis.from_url(embedded_redis.url, socket_timeout=3, socket_connect_timeout=1)
    worker_client = redis.Redis.from_url(
        embedded_redis.url, socket_timeout=3, socket_connect_timeout=1
    )
    queue = Queue(client, "jobs", prefix=key_prefix, settings=settings)
    before = queue.enqueue_many([EnqueueRequest("slow", {"i": i}) for i in range(40)])
    try:
        with running_worker(
            worker_client, ["jobs"], registry, prefix=key_prefix, settings=settings, batch_size=4
        ) as worker:
            wait_until(lambda: stats(queue).counters["succeeded"] >= 10)
            acked = set(queue.ids_in("done"))

            embedded_redis.kill()  # mid-run: jobs leased, acks on the wire
            down_at = time.monotonic()
            time.sleep(0.5)  # the worker's round trips fail meanwhile
            embedded_redis.ensure_running()

            after = enqueue_when_up(queue, 10)
            everything = set(before) | set(after)
            wait_until(lambda: set(queue.ids_in("done")) == everything, timeout=15)
            assert time.monotonic() - down_at < 10
            assert all(lane.is_alive() for lane in worker._lanes)

        assert len(acked) >= 10 and acked <= set(queue.ids_in("done"))  # no ack was lost
        assert seen == everything
        s = stats(queue)
        assert (s.dead, s.ready, s.active, s.delayed) == (0, 0, 0, 0)
    finally:
        client.close()
        worker_client.close()


def enqueue_when_up(queue, n, timeout=5.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            return queue.enqueue_many([EnqueueRequest("t", {"i": i}) for i in range(n)])
        except QueueConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_heartbeat_survives_redis_refusing_writes_when_out_of_memory(private_client, key_prefix):
    # under maxmemory, the extend script's first write (ZADD) is refused with an OOM
    # error; one refused beat must not end the heartbeat for good
    runs: list[int] = []
    registry = TaskRegistry()

    @registry.task("slow")
    def slow(payload, ctx):
        runs.append(ctx.attempt)
        time.sleep(2.0)

    settings = QueueSettings(lease_seconds=0.6, max_block_seconds=0.3)
    queue = Queue(private_client, "jobs", prefix=key_prefix, settings=settings)
    kw = {"prefix": key_prefix, "settings": settings}
    with running_worker(private_client, ["jobs"], registry, **kw):
        job_id = queue.enqueue("slow", {})
        wait_until(lambda: runs)
        with running_worker(private_client, ["jobs"], registry, **kw):  # would reap
            private_client.config_set("maxmemory", 1)
            time.sleep(0.3)  # at least one heartbeat is refused
            private_client.config_set("maxmemory", 0)
            wait_until(lambda: explain(queue, job_id).state == "done", timeout=5)

    assert runs == [1]
    assert stats(queue).counters["reaped"] == 0


def test_worker_lanes_survive_redis_turning_read_only_mid_run(private_client, key_prefix):
    # a failover can leave clients on a server that has become a replica: every write
    # fails with READONLY until it is a primary again; lanes must wait it out, not die
    registry, seen = counting_registry()
    registry.task("slow")(lambda payload, ctx: (time.sleep(0.02), seen.add(ctx.job_id)))
    queue = Queue(private_client, "jobs", prefix=key_prefix, settings=SETTINGS)
    ids = queue.enqueue_many([EnqueueRequest("slow", {}) for _ in range(40)])
    try:
        with running_worker(
            private_client, ["jobs"], registry, prefix=key_prefix, settings=SETTINGS, batch_size=3
        ) as worker:
            wait_until(lambda: stats(queue).counters["succeeded"] >= 5)
            private_client.replicaof("127.0.0.1", 1)  # a primary that does not exist
            time.sleep(0.5)
            private_client.replicaof("NO", "ONE")
            wait_until(lambda: set(queue.ids_in("done")) == set(ids), timeout=10)
            assert all(lane.is_alive() for lane in worker._lanes)
    finally:
        private_client.replicaof("NO", "ONE")

    assert seen == set(ids)
    assert stats(queue).dead == 0
