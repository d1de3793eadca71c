"""Workers publish their state and the workers view reads it back, on a real Redis.

A running worker lists its busy lane with the job it runs and since when; a stopped one
says why; the presence keys stay bounded (retention, cap, one trim step per publish);
a key of another type is refused by the script and named by the view (ADR 0043).
"""

from __future__ import annotations

import threading
import time

import pytest
from queue_helpers import running_worker, stop_worker, wait_until

from reliable_queue import (
    Queue,
    QueueDataError,
    QueueLimitError,
    QueueSettings,
    TaskRegistry,
    Worker,
    workers,
)
from reliable_queue.keys import WorkerKeys
from reliable_queue.presence import GONE_AFTER_PERIODS, LaneState, WorkerState
from reliable_queue.scripts import ScriptRunner

SETTINGS = QueueSettings(lease_seconds=1.5, max_block_seconds=0.25)  # publishes every 0.25 s


def a_state(**changes) -> str:
    fields = dict(
        host="h", pid=1, queues=["q"], concurrency=1, batch_size=1, up_seconds=1.0,
        every=0.25, state="running", exit_reason=None, counts={}, lanes=[LaneState("q", "idle")],
    )  # fmt: skip
    fields.update(changes)
    return WorkerState(**fields).encode()


def publish(client, prefix: str, worker_id: str, *, retention_ms: int = 3_600_000, cap: int = 10):
    keys = WorkerKeys(prefix)
    return ScriptRunner(client).run(
        "presence", [keys.seen, keys.states], [worker_id, a_state(), retention_ms, cap]
    )


def test_a_busy_lane_shows_its_job_and_a_stopped_worker_says_why(redis_client, key_prefix):
    registry = TaskRegistry()
    release = threading.Event()
    registry.task("slow")(lambda payload, ctx: release.wait(10))
    queue = Queue(redis_client, "jobs", prefix=key_prefix, registry=registry)
    job_id = queue.enqueue("slow", {})
    worker = Worker(
        redis_client, ["jobs"], registry, prefix=key_prefix, settings=SETTINGS, concurrency=2
    )
    worker.start()
    try:

        def busy():
            shown = workers(redis_client, key_prefix).workers
            return shown and shown[0].busy == 1 and shown[0]

        info = wait_until(busy, timeout=10)
        assert info.worker_id == worker.worker_id and info.state == "running"
        assert (info.busy, info.idle, info.abandoned) == (1, 1, 0)
        lane = next(lane for lane in info.lanes if lane.state == "busy")
        assert (lane.queue, lane.job_id, lane.task, lane.jobs) == ("jobs", job_id, "slow", 1)
        assert lane.since is not None and lane.since <= info.last_heartbeat
        assert info.queues == ("jobs",) and info.concurrency == 2
    finally:
        release.set()
        worker.request_stop("the test is over")
        assert worker.join(10)

    (stopped,) = workers(redis_client, key_prefix).workers
    assert (stopped.state, stopped.exit_reason) == ("stopped", "the test is over")
    assert stopped.counts.get("succeeded") == 1
    assert stopped.busy == 0


def test_nothing_is_published_after_the_last_state(redis_client, key_prefix):
    registry = TaskRegistry()
    with running_worker(redis_client, ["jobs"], registry, prefix=key_prefix, settings=SETTINGS):
        wait_until(lambda: workers(redis_client, key_prefix).workers, timeout=10)
    (info,) = workers(redis_client, key_prefix).workers

    time.sleep(GONE_AFTER_PERIODS * info.every + 0.1)

    (later,) = workers(redis_client, key_prefix).workers
    assert later.state == "stopped" and later.last_heartbeat == info.last_heartbeat


def test_without_presence_a_worker_publishes_nothing(redis_client, key_prefix):
    worker = Worker(
        redis_client, ["jobs"], TaskRegistry(), prefix=key_prefix, settings=SETTINGS,
        presence=False,
    )  # fmt: skip
    worker.start()
    time.sleep(0.3)
    stop_worker(worker)

    assert workers(redis_client, key_prefix).total == 0


def test_the_view_shows_the_newest_first_and_at_most_the_limit(redis_client, key_prefix):
    for n in range(5):
        publish(redis_client, key_prefix, f"w{n}")
        time.sleep(0.002)

    view = workers(redis_client, key_prefix, limit=3)

    assert [w.worker_id for w in view.workers] == ["w4", "w3", "w2"]
    assert view.total == 5
    with pytest.raises(QueueLimitError):
        workers(redis_client, key_prefix, limit=0)


def test_a_worker_not_heard_of_past_the_retention_is_forgotten(redis_client, key_prefix):
    publish(redis_client, key_prefix, "old", retention_ms=1)
    time.sleep(0.01)

    publish(redis_client, key_prefix, "new", retention_ms=1)

    view = workers(redis_client, key_prefix)
    assert [w.worker_id for w in view.workers] == ["new"] and view.total == 1
    assert redis_client.hkeys(WorkerKeys(key_prefix).states) == [b"new"]


def test_past_the_cap_the_least_recently_heard_of_are_forgotten(redis_client, key_prefix):
    for n in range(6):
        publish(redis_client, key_prefix, f"w{n}", cap=4)
        time.sleep(0.002)

    view = workers(redis_client, key_prefix)

    assert [w.worker_id for w in view.workers] == ["w5", "w4", "w3", "w2"]
    assert sorted(redis_client.hkeys(WorkerKeys(key_prefix).states)) == [
        b"w2", b"w3", b"w4", b"w5",
    ]  # fmt: skip


def test_a_presence_key_of_another_type_is_refused_and_named(redis_client, key_prefix):
    keys = WorkerKeys(key_prefix)
    redis_client.set(keys.seen, "not a zset")

    with pytest.raises(QueueDataError, match="seen"):
        publish(redis_client, key_prefix, "w1")

    assert redis_client.exists(keys.states) == 0  # nothing written
    view = workers(redis_client, key_prefix)
    assert view.workers == () and "holds a string, expected a zset" in view.notes[0]


def test_a_state_that_does_not_decode_becomes_a_note(redis_client, key_prefix):
    publish(redis_client, key_prefix, "good")
    redis_client.hset(WorkerKeys(key_prefix).states, "good", "\x1b]not json")

    view = workers(redis_client, key_prefix)

    assert view.workers == () and "good: its state is unreadable" in view.notes[0]


def test_a_worker_on_redis_cluster_is_shown_too(cluster_client, key_prefix):
    # both presence keys share one hash tag: the script and the view touch one slot
    with running_worker(
        cluster_client, ["jobs"], TaskRegistry(), prefix=key_prefix, settings=SETTINGS
    ) as worker:
        info = wait_until(lambda: workers(cluster_client, key_prefix).workers, timeout=10)[0]
        assert (info.worker_id, info.state) == (worker.worker_id, "running")
    assert workers(cluster_client, key_prefix).workers[0].state == "stopped"
