"""A handler throttled by its downstream (ADR 0034): the job waits the given delay, then
goes first in its band, with no attempt charged; the throttles of one attempt are
bounded (past the bound the run is an ordinary failure, which starts the count again);
and a worker whose every run is throttled waits instead of looping."""

from __future__ import annotations

import time

import pytest
from queue_helpers import running_worker, wait_until

from reliable_queue import (
    Queue,
    QueueLimitError,
    QueueSettings,
    TaskRegistry,
    Throttled,
    audit,
    explain,
    stats,
)

SETTINGS = QueueSettings(lease_seconds=5.0, max_block_seconds=0.5, max_throttles=5)


def test_a_job_throttled_three_times_keeps_its_attempt(redis_client, key_prefix):
    registry = TaskRegistry()
    runs: list[int] = []

    @registry.task("call")
    def call(payload: dict, ctx) -> None:
        runs.append(ctx.attempt)
        if len(runs) <= 3:
            raise Throttled(0.1, "429 Too Many Requests")

    queue = Queue(redis_client, "calls", prefix=key_prefix, settings=SETTINGS)
    job = queue.enqueue("call", {})
    with running_worker(redis_client, ["calls"], registry, prefix=key_prefix, settings=SETTINGS):
        wait_until(lambda: queue.locate(job) == "done", timeout=10)
    assert runs == [1, 1, 1, 1]  # no attempt charged for a throttle
    counters = stats(queue).counters
    assert counters["throttled"] == 3 and counters["retried"] == 0
    assert audit(queue, record=False).clean


def test_a_throttled_job_goes_first_in_its_band_when_due(make_queue):
    queue: Queue = make_queue()
    first = queue.enqueue("t", {}, priority=3, fairness_key="a")
    raw = queue.fetch(1, lease_seconds=60).jobs[0]
    assert raw.job_id == first
    others = [queue.enqueue("t", {}, priority=3, fairness_key=k) for k in "bcd"]
    assert queue.throttle(raw.lease, 0.05, error="429") == "throttled"
    e = explain(queue, first)
    assert (e.state, e.attempts, e.last_failure["reason"]) == ("delayed", 0, "throttled")
    time.sleep(0.1)
    assert queue.fetch(1, lease_seconds=60).jobs[0].job_id == first  # ahead of b, c, d
    assert all(queue.locate(j) == "ready" for j in others)
    assert queue.client.hget(queue.keys.key("flow"), first) == b"3|a"  # its front flag used


def test_a_plain_job_throttled_goes_to_the_head_of_the_ready_list(make_queue):
    queue: Queue = make_queue()
    ids = [queue.enqueue("t", {}) for _ in range(3)]
    raw = queue.fetch(1).jobs[0]
    assert queue.throttle(raw.lease, 0) == "throttled"  # no delay: at the head now
    assert [j.job_id for j in queue.fetch(3).jobs] == ids
    raw = queue.fetch(1).jobs
    assert raw == []
    assert not queue.client.exists(queue.keys.key("flow"))


def test_past_the_bound_a_throttle_is_an_ordinary_failure_and_the_count_starts_again(
    make_queue,
):
    queue: Queue = make_queue(settings=QueueSettings(lease_seconds=60, max_throttles=2))
    job = queue.enqueue("t", {}, max_attempts=2)

    def run() -> object:
        return queue.fetch(1).jobs[0]

    assert queue.throttle(run().lease, 0) == "throttled"
    assert queue.throttle(run().lease, 0) == "throttled"
    raw = run()
    assert raw.attempt == 1
    assert queue.throttle(raw.lease, 0, fallback_delay=0) == "retried"  # the third: a failure
    raw = run()
    assert raw.attempt == 2  # charged
    assert queue.throttle(raw.lease, 0) == "throttled"  # a new attempt: the count restarted
    raw = run()
    assert queue.throttle(raw.lease, 0) == "throttled"
    assert queue.throttle(run().lease, 0, fallback_delay=None) == "dead"  # at max attempts
    assert explain(queue, job).dead_reason == "retries_exhausted"
    assert stats(queue).counters["throttled"] == 4


@pytest.mark.parametrize("delay", [-1, float("nan"), float("inf"), "1", True, 1e12])
def test_a_bad_throttle_delay_is_refused(delay):
    with pytest.raises(QueueLimitError):
        Throttled(delay)


def test_a_stale_throttle_is_refused_and_counted(make_queue):
    queue: Queue = make_queue(settings=QueueSettings(lease_seconds=0.05))
    queue.enqueue("t", {})
    raw = queue.fetch(1).jobs[0]
    time.sleep(0.1)
    queue.reap()
    assert queue.throttle(raw.lease, 0) is None
    assert stats(queue).counters["stale_refused"] == 1


def test_a_lane_whose_batch_was_all_throttled_waits_before_its_next_fetch(redis_client, key_prefix):
    registry = TaskRegistry()
    runs: list[float] = []

    @registry.task("call")
    def call(payload: dict, ctx) -> None:
        runs.append(time.monotonic())
        raise Throttled(5.0, "429: the downstream is saturated")

    settings = QueueSettings(lease_seconds=5.0, max_block_seconds=0.4)
    queue = Queue(redis_client, "busy", prefix=key_prefix, settings=settings)
    for _ in range(4):
        queue.enqueue("call", {})
    with running_worker(
        redis_client, ["busy"], registry, prefix=key_prefix, settings=settings, batch_size=1
    ):
        wait_until(lambda: len(runs) == 4, timeout=10)
    # the other jobs wait too: the lane holds its next fetch for the delay asked, at
    # most its usual bound, instead of running every job into the same refusal at once
    gaps = [b - a for a, b in zip(runs, runs[1:], strict=False)]
    assert min(gaps) >= 0.35, gaps
    assert stats(queue).counters["throttled"] == 4 and stats(queue).delayed == 4
