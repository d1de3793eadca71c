"""A run past its task's time limit fails as timed_out, its lane is freed, and it is retried."""

import threading
import time
from collections import Counter

import pytest
from queue_helpers import running_worker, stop_worker, wait_until

from reliable_queue import (
    JobContext,
    Queue,
    QueueSettings,
    RetryPolicy,
    TaskRegistry,
    Worker,
    WorkerHooks,
    explain,
    stats,
)
from reliable_queue.worker import LaneView

SETTINGS = QueueSettings(lease_seconds=1.5, max_block_seconds=0.2)  # heartbeat every 0.5 s
LIMIT = 0.5


@pytest.fixture
def registry():
    return TaskRegistry()


def test_a_hung_handler_is_released_within_its_limit_and_retried(
    redis_client, key_prefix, registry
):
    queue = Queue(redis_client, "jobs", prefix=key_prefix, registry=registry)
    unblock = threading.Event()
    started: dict[int, float] = {}
    finished: list[str] = []

    policy = RetryPolicy(max_attempts=3, base_delay=0.05, jitter=False, time_limit=LIMIT)

    @registry.task("hang", retry=policy)
    def hang(payload, ctx: JobContext):
        started[ctx.attempt] = time.monotonic()
        if ctx.attempt == 1:
            unblock.wait(30)  # hung: never returns by itself within the test
        finished.append(f"hang {ctx.attempt}")

    @registry.task("quick")
    def quick(payload, ctx: JobContext):
        finished.append("quick")

    try:
        with running_worker(
            redis_client, ["jobs"], registry, prefix=key_prefix, settings=SETTINGS
        ) as worker:
            job_id = queue.enqueue("hang", {})
            wait_until(lambda: 1 in started, timeout=5)
            other = queue.enqueue("quick", {})  # the only lane is stuck: a fresh one runs it

            wait_until(lambda: 2 in started, timeout=5)
            released_after = started[2] - started[1]
            wait_until(lambda: explain(queue, job_id).state == "done", timeout=5)
            wait_until(lambda: explain(queue, other).state == "done", timeout=5)

            heartbeat = worker.heartbeat.interval
            assert LIMIT <= released_after <= LIMIT + heartbeat + 0.5  # + backoff, scheduling
            assert worker.counters.counts["timed_out"] == 1
            assert worker.counters.counts["lanes_abandoned"] == 1
            info = explain(queue, job_id)
            assert info.attempts == 2
            s = stats(queue)
            assert (s.counters["timed_out"], s.counters["retried"], s.dead) == (1, 1, 0)
            unblock.set()  # the abandoned run returns; its result is ignored
            wait_until(lambda: "hang 1" in finished, timeout=5)
            time.sleep(0.1)
            assert stats(queue).counters["succeeded"] == 2
            assert stats(queue).counters["stale_refused"] == 0  # not even sent
    finally:
        unblock.set()


def test_a_run_timed_out_at_every_attempt_is_dead_lettered_as_timed_out(
    redis_client, key_prefix, registry
):
    queue = Queue(redis_client, "jobs", prefix=key_prefix, registry=registry)
    unblock = threading.Event()
    policy = RetryPolicy(max_attempts=2, base_delay=0.01, jitter=False, time_limit=0.2)

    @registry.task("hang", retry=policy)
    def hang(payload, ctx: JobContext):
        unblock.wait(30)

    try:
        with running_worker(
            redis_client, ["jobs"], registry, prefix=key_prefix, settings=SETTINGS
        ) as worker:
            job_id = queue.enqueue("hang", {})
            wait_until(lambda: explain(queue, job_id).state == "dead", timeout=8)
            letter = queue.dead_letters.show(job_id)
            assert (letter.reason, letter.attempts) == ("timed_out", 2)
            assert "limit of 0.2 s" in letter.error
            assert worker.counters.counts["timed_out"] == 2
            unblock.set()
    finally:
        unblock.set()


def test_the_queue_default_applies_when_the_task_sets_no_limit(redis_client, key_prefix, registry):
    queue = Queue(redis_client, "jobs", prefix=key_prefix, registry=registry)
    unblock = threading.Event()
    settings = SETTINGS.model_copy(update={"default_time_limit_seconds": 0.2})

    @registry.task("hang", retry=RetryPolicy(max_attempts=1))
    def hang(payload, ctx: JobContext):
        unblock.wait(30)

    try:
        with running_worker(redis_client, ["jobs"], registry, prefix=key_prefix, settings=settings):
            job_id = queue.enqueue("hang", {})
            wait_until(lambda: explain(queue, job_id).state == "dead", timeout=5)
            assert queue.dead_letters.show(job_id).reason == "timed_out"
            unblock.set()
    finally:
        unblock.set()


def test_a_batch_that_times_out_is_split_and_only_the_hung_job_is_charged(
    redis_client, key_prefix, registry
):
    """One handler call runs a whole batch, so a time-out cannot say which job hung:
    nobody is charged, each job runs alone next, and only a run that times out alone
    counts as an attempt."""
    queue = Queue(redis_client, "jobs", prefix=key_prefix, registry=registry)
    unblock = threading.Event()
    calls: list[list[int]] = []
    policy = RetryPolicy(max_attempts=2, base_delay=0.01, jitter=False, time_limit=LIMIT)

    @registry.task("step", retry=policy, batch=True)
    def step(items):
        calls.append([payload["n"] for payload, _ in items])
        if any(payload["n"] == 3 for payload, _ in items):
            unblock.wait(30)  # hung on job 3, whoever shares its call
        return [None] * len(items)

    ids = [queue.enqueue("step", {"n": n}) for n in range(10)]
    try:
        with running_worker(
            redis_client, ["jobs"], registry, prefix=key_prefix, settings=SETTINGS, batch_size=10
        ) as worker:
            wait_until(lambda: explain(queue, ids[3]).state == "dead", timeout=15)
            mates = [i for n, i in enumerate(ids) if n != 3]
            wait_until(lambda: all(explain(queue, i).state == "done" for i in mates), timeout=5)
            letter = queue.dead_letters.show(ids[3])
            assert (letter.reason, letter.attempts) == ("timed_out", 2)
            assert [explain(queue, i).attempts for i in mates] == [1] * 9  # none charged
            assert calls[0] == list(range(10))  # the whole batch shared one call
            assert [c for c in calls[1:] if 3 in c] == [[3], [3]]  # then 3 ran alone, twice
            assert worker.counters.counts["timeout_splits"] == 1
            assert worker.counters.counts["timed_out"] == 3  # the shared call, twice alone
            s = stats(queue)
            assert (s.dead, s.counters["timed_out"], s.counters["retried"]) == (1, 3, 1)
            unblock.set()
    finally:
        unblock.set()


def test_a_finished_job_is_not_timed_out_with_a_hung_one_after_it(
    redis_client, key_prefix, registry
):
    """A lane runs a fetched batch of single-job tasks one after another: the job that
    finished keeps its result when a later one hangs past its limit."""
    queue = Queue(redis_client, "jobs", prefix=key_prefix, registry=registry)
    unblock = threading.Event()
    policy = RetryPolicy(max_attempts=3, base_delay=0.01, jitter=False, time_limit=LIMIT)

    @registry.task("quick", retry=policy)
    def quick(payload, ctx: JobContext):
        return None

    @registry.task("hang", retry=policy)
    def hang(payload, ctx: JobContext):
        if ctx.attempt == 1:
            unblock.wait(30)

    first = queue.enqueue("quick", {})
    hung = queue.enqueue("hang", {})
    try:
        with running_worker(
            redis_client, ["jobs"], registry, prefix=key_prefix, settings=SETTINGS, batch_size=10
        ) as worker:
            wait_until(lambda: explain(queue, hung).state == "done", timeout=8)
            unblock.set()  # the abandoned lane settles what it finished
            wait_until(lambda: explain(queue, first).state == "done", timeout=5)
            assert explain(queue, first).attempts == 1
            assert explain(queue, hung).attempts == 2
            assert worker.counters.counts["timed_out"] == 1
    finally:
        unblock.set()


def test_finished_batch_mates_of_a_hung_job_are_settled_at_once_and_run_once(
    redis_client, key_prefix, registry
):
    """A lane runs a fetched batch of single-job tasks one after another. When one hangs
    past its limit for longer than a lease, the jobs that finished before it are settled
    by the time-limit check (their hook called once), not left to expire with the
    abandoned lane and run again; the jobs after it are handed back and run once."""
    queue = Queue(redis_client, "jobs", prefix=key_prefix, registry=registry)
    unblock, returned = threading.Event(), threading.Event()
    lock = threading.Lock()
    runs: Counter[str] = Counter()
    hooked: Counter[str] = Counter()
    policy = RetryPolicy(max_attempts=3, base_delay=0.01, jitter=False, time_limit=LIMIT)

    @registry.task("record", retry=policy)
    def record(payload, ctx: JobContext):
        with lock:
            runs[ctx.job_id] += 1
        if payload.get("fail") and ctx.attempt == 1:
            raise RuntimeError("a finished run that failed is settled too")

    @registry.task("hang", retry=policy)
    def hang(payload, ctx: JobContext):
        with lock:
            runs[ctx.job_id] += 1
        if ctx.attempt == 1:
            unblock.wait(30)  # hung well past a lease: the test lets it go
            returned.set()

    def on_outcome(job, outcome) -> None:
        with lock:
            hooked[job.job_id] += 1

    before = [queue.enqueue("record", {}) for _ in range(4)]
    failed = queue.enqueue("record", {"fail": True})
    hung = queue.enqueue("hang", {})
    after = [queue.enqueue("record", {}) for _ in range(3)]
    mates = [*before, failed, *after]
    try:
        with running_worker(
            redis_client,
            ["jobs"],
            registry,
            prefix=key_prefix,
            settings=SETTINGS,
            batch_size=10,
            hooks=WorkerHooks(on_outcome=on_outcome),
        ) as worker:
            wait_until(lambda: explain(queue, hung).state == "done", timeout=8)
            wait_until(lambda: explain(queue, failed).state == "done", timeout=5)
            wait_until(lambda: all(explain(queue, i).state == "done" for i in mates), timeout=5)
            time.sleep(SETTINGS.lease_seconds + 0.5)  # past any lease a finished job kept
            assert {i: runs[i] for i in before + after} == dict.fromkeys(before + after, 1)
            assert runs[failed] == 2  # its first run failed (retried), its second passed
            assert [explain(queue, i).attempts for i in before + after] == [1] * 7
            assert worker.counters.counts["timed_out"] == 1
            unblock.set()  # the abandoned lane returns: it settles nothing twice
            assert returned.wait(5)
            time.sleep(0.3)
            assert worker.counters.counts["lanes_abandoned"] == 1
            s = stats(queue)
            assert (s.counters["reaped"], s.counters["stale_refused"]) == (0, 0)
            assert (s.counters["succeeded"], s.counters["retried"]) == (9, 2)
            assert hooked == {**dict.fromkeys(before + after, 1), failed: 2, hung: 2}
    finally:
        unblock.set()


def test_the_process_tells_which_attempts_it_took_the_lease_from(
    redis_client, key_prefix, registry
):
    """``on_attempt_lost`` names the timed-out run and the batch-mates abandoned with
    it, not the mate that had finished: what a late commit must never come from."""
    queue = Queue(redis_client, "jobs", prefix=key_prefix, registry=registry)
    unblock = threading.Event()
    lost: list[tuple[str, str, str]] = []
    policy = RetryPolicy(max_attempts=3, base_delay=0.05, jitter=False, time_limit=LIMIT)

    @registry.task("hang", retry=policy)
    def hang(payload, ctx: JobContext):
        if ctx.attempt == 1:
            unblock.wait(30)

    @registry.task("quick")
    def quick(payload, ctx: JobContext):
        pass

    hooks = WorkerHooks(on_attempt_lost=lambda q, lease, why: lost.append((q, lease.job_id, why)))
    done = queue.enqueue("quick", {})
    hung = queue.enqueue("hang", {})
    waiting = queue.enqueue("quick", {})  # leased with the hung run, not started
    try:
        with running_worker(
            redis_client,
            ["jobs"],
            registry,
            prefix=key_prefix,
            settings=SETTINGS,
            hooks=hooks,
            batch_size=3,
        ):
            wait_until(lambda: explain(queue, hung).state == "done", timeout=8)
            wait_until(lambda: explain(queue, waiting).state == "done", timeout=8)
    finally:
        unblock.set()

    assert ("jobs", hung, "timed_out") in lost
    assert ("jobs", waiting, "abandoned") in lost
    assert not [entry for entry in lost if entry[1] == done]


def test_lanes_show_a_busy_lane_an_idle_one_and_an_abandoned_one(
    redis_client, key_prefix, registry
):
    queue = Queue(redis_client, "jobs", prefix=key_prefix, registry=registry)
    unblock = threading.Event()
    started: list[int] = []

    @registry.task("hang", retry=RetryPolicy(max_attempts=1, time_limit=LIMIT))
    def hang(payload, ctx: JobContext):
        started.append(ctx.attempt)
        unblock.wait(30)

    try:
        with running_worker(
            redis_client, ["jobs"], registry, prefix=key_prefix, settings=SETTINGS
        ) as worker:
            idle = worker.lanes()
            assert [(v.queue, v.alive, v.abandoned, v.busy_since) for v in idle] == [
                ("jobs", True, False, None)
            ]
            time.sleep(0.5)  # an idle lane turns at least every max_block_seconds (0.2)
            assert worker.lanes()[0].progress_at > idle[0].progress_at
            queue.enqueue("hang", {})
            wait_until(lambda: started, timeout=5)
            busy = worker.lanes()[0]
            assert busy.busy_since is not None and busy.busy_since <= time.monotonic()

            wait_until(lambda: len(worker.lanes()) == 2, timeout=5)  # past the limit
            views = sorted(worker.lanes(), key=lambda v: v.abandoned)
            assert [(v.abandoned, v.alive) for v in views] == [(False, True), (True, True)]
            assert views[0].busy_since is None and views[1].busy_since == busy.busy_since
            unblock.set()  # the stuck run returns: its lane ends and drops out
            wait_until(lambda: len(worker.lanes()) == 1, timeout=5)
    finally:
        unblock.set()


def test_a_lane_about_to_start_is_not_shown_as_ended(redis_client, key_prefix, registry):
    queues = [f"q{i}" for i in range(8)]
    worker = Worker(
        redis_client, queues, registry, prefix=key_prefix, settings=SETTINGS, concurrency=4
    )
    seen: list[LaneView] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.extend(worker.lanes())

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        worker.start()  # opens 32 lanes while the watcher reads them
    finally:
        done.set()
        watcher.join(10)
        stop_worker(worker)
    assert seen and all(view.alive for view in seen)
