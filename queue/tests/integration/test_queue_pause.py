"""Pause / resume, decided in the fetch script with its pop (ADR 0031).

A paused queue hands out no job from the moment ``pause`` returns, also to a worker
that was blocked waiting on the queue before (the blocking wait may wake it; the fetch
reads the paused flag and pops nothing: the race of bull #447). Leased jobs settle as
usual, due delayed jobs are promoted and wait, and an idle worker of a paused queue
sleeps instead of polling.
"""

from __future__ import annotations

import threading
import time

import pytest
from queue_helpers import command_calls, running_worker, wait_until

from reliable_queue import (
    JobContext,
    Lease,
    PauseState,
    Queue,
    QueueDataError,
    QueueLimitError,
    QueueSettings,
    TaskRegistry,
    audit,
    explain,
    stats,
)
from reliable_queue.execution import fencing_number
from reliable_queue.pausing import MAX_REASON_CHARS


def test_pause_state_is_read_back_and_resume_clears_it(make_queue):
    queue: Queue = make_queue()
    assert queue.paused() is None and stats(queue).paused is None
    assert queue.resume() is False  # not paused: nothing to do

    first = queue.pause(reason="provider down", by="ops@host")
    again = queue.pause(reason="still down", by="other@host")

    state = queue.paused()
    assert isinstance(state, PauseState)
    assert (state.by, state.reason) == ("other@host", "still down")
    assert state.since == first.since == again.since  # the first pause's time is kept
    assert abs(state.since - time.time()) < 5
    assert stats(queue).paused == state
    assert stats(queue).as_dict()["paused"] == state.as_dict()
    assert queue.resume() is True
    assert queue.paused() is None and queue.resume() is False


def test_a_paused_queue_leases_nothing_and_resume_restores(make_queue):
    queue: Queue = make_queue()
    ids = [queue.enqueue("t", {"n": i}) for i in range(3)]
    queue.pause()

    result = queue.fetch(10)
    assert result.jobs == [] and result.paused and not result.suspect_waiting
    assert queue.ids_in("ready") == list(reversed(ids))  # nothing moved, no attempt charged
    assert explain(queue, ids[0]).attempts == 0

    queue.resume()
    got = queue.fetch(10)
    assert [j.job_id for j in got.jobs] == ids and [j.attempt for j in got.jobs] == [1, 1, 1]
    assert not got.paused


def test_an_idle_paused_queue_fetches_like_an_idle_one(make_queue):
    queue: Queue = make_queue()
    queue.pause()
    result = queue.fetch(1)
    assert result.jobs == [] and not result.paused  # nothing waits: nothing was held back


def test_leased_jobs_settle_normally_while_paused(make_queue):
    queue: Queue = make_queue()
    for i in range(3):
        queue.enqueue("t", {"n": i}, max_attempts=3)
    a, b, c = queue.fetch(3).jobs
    queue.pause(reason="maintenance")

    assert queue.ack([a.lease]).acked == [a.job_id]
    assert queue.nack(b.lease) is True  # back to ready: it waits there
    assert queue.dead(c.lease, "error") is True
    assert queue.extend([Lease(a.job_id, a.token)]) == [a.job_id]  # acked: stale as ever

    assert queue.fetch(5).paused
    s = stats(queue)
    assert (s.ready, s.active, s.dead, s.done) == (1, 0, 1, 1)
    assert s.counters["succeeded"] == 1 and s.counters["retried"] == 1


def test_expired_leases_are_reaped_and_delayed_jobs_promoted_while_paused(make_queue):
    queue: Queue = make_queue()
    lost = queue.enqueue("t", {})
    queue.fetch(1, lease_seconds=0.05)
    later = queue.enqueue("t", {}, delay=0.2)
    queue.pause()
    time.sleep(0.3)

    result = queue.fetch(5)
    assert result.jobs == [] and result.paused and result.reaped == 1
    assert sorted(queue.ids_in("ready")) == sorted([lost, later])  # promoted, waiting
    assert queue.ids_in("delayed") == [] and queue.ids_in("active") == []
    assert audit(queue, record=False).clean


def test_pause_refuses_bad_text_and_changes_nothing(make_queue):
    queue: Queue = make_queue()
    for bad in ("x" * (MAX_REASON_CHARS + 1), 7):
        with pytest.raises(QueueLimitError):
            queue.pause(reason=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        queue.pause(by="\ud800")
    assert queue.paused() is None


def test_a_wrong_type_paused_key_is_refused_reported_and_removed_by_resume(make_queue):
    queue: Queue = make_queue()
    job = queue.enqueue("t", {})
    queue.client.rpush(queue.keys.paused, "x")

    with pytest.raises(QueueDataError, match="paused"):
        queue.fetch(1)  # a job waits: the flag is read, and refused, nothing written
    with pytest.raises(QueueDataError, match="paused"):
        queue.pause()
    with pytest.raises(QueueDataError, match="paused"):
        queue.paused()
    s = stats(queue)
    assert "paused" in s.corrupt and s.paused is None and s.ready == 1
    report = audit(queue, record=False)
    assert not report.clean and "paused" in " ".join(report.problems)

    assert queue.resume() is True  # the repair: the key is removed
    assert [j.job_id for j in queue.fetch(1).jobs] == [job]
    assert audit(queue, record=False).clean


def test_a_worker_blocked_before_the_pause_starts_nothing_until_resume(redis_client, key_prefix):
    registry = TaskRegistry()
    started: list[tuple[float, int]] = []
    registry.task("t")(lambda payload, ctx: started.append((time.monotonic(), ctx.attempt)))
    settings = QueueSettings(lease_seconds=5.0, max_block_seconds=2.0)
    queue = Queue(redis_client, "held", prefix=key_prefix, settings=settings)
    with running_worker(
        redis_client, ["held"], registry, prefix=key_prefix, settings=settings, concurrency=2
    ):
        time.sleep(0.5)  # both lanes found nothing and block on the wake-up list
        queue.pause(reason="test")
        job = queue.enqueue("t", {})  # its wake-up token wakes a blocked lane
        time.sleep(3.0)
        assert started == []
        assert queue.locate(job) == "ready" and explain(queue, job).attempts == 0

        resumed = time.monotonic()
        queue.resume()
        wait_until(lambda: started, timeout=5)
        time.sleep(0.3)

    assert len(started) == 1 and started[0][1] == 1  # once, as its first attempt
    assert started[0][0] - resumed <= settings.max_block_seconds + 0.5
    assert queue.locate(job) == "done"


def test_a_leased_job_runs_to_completion_after_a_pause(redis_client, key_prefix):
    registry = TaskRegistry()
    entered, release = threading.Event(), threading.Event()
    done: list[str] = []

    @registry.task("slow")
    def slow(payload: dict, ctx: JobContext) -> None:
        entered.set()
        release.wait(5)
        done.append(ctx.job_id)

    settings = QueueSettings(lease_seconds=5.0, max_block_seconds=0.5)
    queue = Queue(redis_client, "slow", prefix=key_prefix, settings=settings)
    job = queue.enqueue("slow", {})
    with running_worker(redis_client, ["slow"], registry, prefix=key_prefix, settings=settings):
        assert entered.wait(5)
        queue.pause()
        other = queue.enqueue("slow", {})
        release.set()
        wait_until(lambda: queue.locate(job) == "done", timeout=5)
        time.sleep(1.0)
        assert queue.locate(other) == "ready"
    assert done == [job]


def test_an_idle_worker_of_a_paused_queue_does_not_poll(private_client, key_prefix):
    registry = TaskRegistry()
    registry.task("t")(lambda payload, ctx: None)
    settings = QueueSettings(lease_seconds=5.0)  # default max_block_seconds: 2 s
    queue = Queue(private_client, "quiet", prefix=key_prefix, settings=settings)
    queue.pause()
    for _ in range(5):
        queue.enqueue("t", {})
    with running_worker(  # the lanes alone (the presence publisher writes on its own period)
        private_client,
        ["quiet"],
        registry,
        prefix=key_prefix,
        settings=settings,
        concurrency=2,
        presence=False,
    ):
        time.sleep(0.3)
        private_client.config_resetstat()
        started = time.monotonic()
        for _ in range(20):  # enqueues while paused wake lanes; they do not spin
            queue.enqueue("t", {})
            time.sleep(0.1)
        calls = command_calls(private_client)
        elapsed = time.monotonic() - started
    # 20 enqueues, and per lane about one fetch per 2 s: far from a loop
    assert calls["evalsha"] - 20 <= 2 * (elapsed / 2.0 + 2), calls
    assert stats(queue).ready == 25


def test_pause_returns_a_fence_that_orders_leases_of_its_own_millisecond(make_queue):
    """``since`` is in ms: a lease of the same millisecond may have come before or after
    the pause. The fence (the last fencing number issued before the pause) orders them."""
    queue: Queue = make_queue()
    for _ in range(3):
        queue.enqueue("t", {})
    before = queue.fetch(2).jobs
    state = queue.pause(reason="fence", by="test")
    assert state.fence == max(fencing_number(j.lease.token) for j in before)
    assert queue.fetch(1).jobs == []  # paused
    assert queue.resume() is True
    [after] = queue.fetch(1).jobs
    assert fencing_number(after.lease.token) > state.fence
    assert queue.paused() is None
