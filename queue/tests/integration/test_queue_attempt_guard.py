"""A worker's attempt guards against real Redis: the heartbeat renews them, a refused
extend loses them, and the time-limit check and a held block exclude each other."""

from __future__ import annotations

import threading
import time

import pytest
from queue_helpers import running_worker, wait_until

from reliable_queue import (
    AttemptLost,
    JobContext,
    Lease,
    Queue,
    QueueSettings,
    RetryPolicy,
    TaskRegistry,
    explain,
    stats,
)

SETTINGS = QueueSettings(lease_seconds=1.5, max_block_seconds=0.2)  # heartbeat every 0.5 s
LIMIT = 0.5


@pytest.fixture
def registry() -> TaskRegistry:
    return TaskRegistry()


def test_a_run_longer_than_its_lease_still_holds_its_guard_while_heartbeated(
    redis_client, key_prefix, registry
):
    """Each extend renews the guard's deadline: without that, a run longer than its
    lease would be refused although Redis still leases the job to it."""
    queue = Queue(redis_client, "jobs", prefix=key_prefix, registry=registry)
    committed: list[str] = []

    @registry.task("slow")
    def slow(payload, ctx: JobContext):
        time.sleep(3 * SETTINGS.lease_seconds)
        with ctx.hold_lease():
            committed.append(ctx.job_id)

    with running_worker(redis_client, ["jobs"], registry, prefix=key_prefix, settings=SETTINGS):
        job_id = queue.enqueue("slow", {})
        wait_until(lambda: explain(queue, job_id).state == "done", timeout=10)
    assert committed == [job_id]


def test_a_lease_handed_to_another_worker_is_refused_at_the_next_beat(
    redis_client, key_prefix, registry
):
    queue = Queue(redis_client, "jobs", prefix=key_prefix, registry=registry)
    seen: dict[str, JobContext] = {}
    taken, refused = threading.Event(), []

    @registry.task("work")
    def work(payload, ctx: JobContext):
        seen["ctx"] = ctx
        taken.wait(10)
        time.sleep(SETTINGS.lease_seconds / 3 + 0.2)  # one heartbeat: its extend is refused
        try:
            with ctx.hold_lease():
                pass
        except AttemptLost as exc:
            refused.append(exc.reason)
            raise

    try:
        with running_worker(redis_client, ["jobs"], registry, prefix=key_prefix, settings=SETTINGS):
            job_id = queue.enqueue("work", {})
            wait_until(lambda: "ctx" in seen, timeout=5)
            ctx = seen["ctx"]
            # another worker gets the job: handed back and fetched again under a new token
            assert queue.release([Lease(job_id, ctx.lease_token)]) == 1
            [other] = queue.fetch(1, worker_id="other").jobs
            taken.set()
            wait_until(lambda: refused, timeout=5)
            assert queue.ack([other.lease]).acked == [job_id]
    finally:
        taken.set()
    assert refused == ["lease_lost"]
    assert other.token != ctx.lease_token


def test_a_run_holding_its_guard_past_its_time_limit_is_not_timed_out(
    redis_client, key_prefix, registry
):
    queue = Queue(redis_client, "jobs", prefix=key_prefix, registry=registry)
    policy = RetryPolicy(max_attempts=3, base_delay=0.01, jitter=False, time_limit=LIMIT)
    committed: list[int] = []

    @registry.task("commit", retry=policy)
    def commit(payload, ctx: JobContext):
        with ctx.hold_lease():
            # past the limit by more than a beat (0.5 s), well inside the hold's bound of
            # one lease (1.5 s): a loaded machine's late wake-up cannot reach that bound
            time.sleep(LIMIT + 0.6)
            committed.append(ctx.attempt)

    with running_worker(
        redis_client, ["jobs"], registry, prefix=key_prefix, settings=SETTINGS
    ) as worker:
        job_id = queue.enqueue("commit", {})
        wait_until(lambda: explain(queue, job_id).state == "done", timeout=10)
        assert worker.counters.counts["timed_out"] == 0
    assert committed == [1]
    assert explain(queue, job_id).attempts == 1
    assert stats(queue).counters.get("timed_out", 0) == 0


def test_a_timed_out_run_cannot_enter_its_guard_afterwards(redis_client, key_prefix, registry):
    """The abandoned thread of a timed-out run goes on; its commit must not happen."""
    queue = Queue(redis_client, "jobs", prefix=key_prefix, registry=registry)
    policy = RetryPolicy(max_attempts=2, base_delay=0.01, jitter=False, time_limit=LIMIT)
    committed: list[int] = []
    refused: list[tuple[int, str]] = []

    @registry.task("hang", retry=policy)
    def hang(payload, ctx: JobContext):
        if ctx.attempt == 1:
            time.sleep(LIMIT + SETTINGS.lease_seconds)  # past the limit and one beat
        try:
            with ctx.hold_lease():
                committed.append(ctx.attempt)
        except AttemptLost as exc:
            refused.append((ctx.attempt, exc.reason))
            raise

    with running_worker(
        redis_client, ["jobs"], registry, prefix=key_prefix, settings=SETTINGS
    ) as worker:
        job_id = queue.enqueue("hang", {})
        wait_until(lambda: explain(queue, job_id).state == "done", timeout=10)
        wait_until(lambda: refused, timeout=5)
        assert worker.counters.counts["timed_out"] == 1
    assert committed == [2]  # only the retry committed
    assert refused == [(1, "timed_out")]


def test_a_lease_let_expire_is_reaped_redelivered_and_its_first_attempt_refused(
    redis_client, key_prefix, registry
):
    """``guard.let_expire()`` (the fault a hung process is simulated by): the heartbeat
    stops extending that lease and no time limit takes it, so it expires, another lane
    reaps the job and runs it, and the first attempt's commit is refused."""
    queue = Queue(redis_client, "jobs", prefix=key_prefix, registry=registry)
    committed: list[int] = []
    refused: list[str] = []
    hung: list[int] = []

    @registry.task("work", retry=RetryPolicy(max_attempts=3, time_limit=LIMIT))
    def work(payload, ctx: JobContext):
        if not hung:  # the first delivery only
            hung.append(ctx.attempt)
            ctx.guard.let_expire()
            time.sleep(SETTINGS.lease_seconds * 2.5)  # past its lease and its time limit
        try:
            with ctx.hold_lease():
                committed.append(ctx.attempt)
        except AttemptLost as exc:
            refused.append(exc.reason)
            raise

    with running_worker(
        redis_client, ["jobs"], registry, prefix=key_prefix, settings=SETTINGS, concurrency=2
    ) as worker:
        job_id = queue.enqueue("work", {})
        wait_until(lambda: refused, timeout=10)
        wait_until(lambda: explain(queue, job_id).state == "done", timeout=5)
        timed_out = worker.counters.counts["timed_out"]

    assert len(committed) == 1  # the redelivery, which held its lease
    assert refused == ["lease_expired"]  # the delivery whose lease was let expire
    assert timed_out == 0  # a lease let expire behaves as hung, not as a slow run
    assert stats(queue).counters["reaped"] >= 1
