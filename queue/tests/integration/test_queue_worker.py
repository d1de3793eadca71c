"""The worker against real Redis: blocking fetch, heartbeats, fencing, retries, bad input."""

import gc
import threading
import time

import orjson
import pytest
from pydantic import BaseModel
from queue_helpers import FAST, command_calls, running_worker, wait_until

from reliable_queue import (
    EnqueueRequest,
    JobContext,
    PermanentError,
    Queue,
    QueueSettings,
    RetryPolicy,
    TaskRegistry,
    Worker,
    WorkerHooks,
    explain,
    stats,
)
from reliable_queue.limits import SCRIPT_BATCH


class Note(BaseModel):
    text: str


@pytest.fixture
def registry():
    return TaskRegistry()


def test_idle_worker_blocks_on_redis_instead_of_polling(private_client, key_prefix, registry):
    registry.task("t")(lambda p, c: None)
    settings = QueueSettings(lease_seconds=3.0)  # default max_block_seconds: 2 s
    # the lanes alone: the presence publisher's period is test_queue_presence's subject
    with running_worker(
        private_client,
        ["idle"],
        registry,
        prefix=key_prefix,
        settings=settings,
        concurrency=2,
        presence=False,
    ):
        time.sleep(0.3)  # start-up: first fetch, script load
        private_client.config_resetstat()
        started = time.monotonic()
        time.sleep(3.0)
        calls = command_calls(private_client)
        elapsed = time.monotonic() - started

    # two lanes, each one fetch (EVALSHA) + one BLPOP per 2 s block: about 2 a second.
    # commandstats also counts what the fetch script runs inside Redis (no round trips).
    assert (calls["evalsha"] + calls["blpop"]) / elapsed < 3, calls
    # an idle fetch only reads: the sequence (get), the clock (time, and the queue
    # clock's fields: hmget), due jobs and expired leases, the ids it would take
    # (lrange), whether flow-controlled jobs wait instead (exists, ADR 0033), the next
    # due time and lease expiry; it writes the queue clock's last time seen (hset) at
    # most about once a second, whatever the number of lanes
    inside_fetch = {"get", "time", "hmget", "zrangebyscore", "lrange", "exists", "zrange"}
    assert set(calls) <= {"evalsha", "blpop", "info", "config", "hset", *inside_fetch}
    assert calls.get("hset", 0) <= elapsed + 1, calls


def test_delayed_job_wakes_a_blocked_worker_by_its_due_time(redis_client, key_prefix, registry):
    ran: list[float] = []
    registry.task("t")(lambda p, c: ran.append(time.time()))
    queue = Queue(redis_client, "jobs", prefix=key_prefix)
    settings = QueueSettings(lease_seconds=3.0, max_block_seconds=2.0)
    with running_worker(redis_client, ["jobs"], registry, prefix=key_prefix, settings=settings):
        time.sleep(0.3)  # the worker has found nothing and blocks for up to 2 s
        due = time.time() + 0.5
        queue.enqueue("t", {}, delay=0.5)
        wait_until(lambda: ran, timeout=5)

    assert due - 0.01 <= ran[0] <= due + 0.4  # well inside the 2 s block it interrupted


def test_heartbeat_keeps_a_long_job_alive_past_its_lease(redis_client, key_prefix, registry):
    runs: list[int] = []

    @registry.task("slow")
    def slow(payload, ctx):
        runs.append(ctx.attempt)
        time.sleep(2.0)

    queue = Queue(redis_client, "jobs", prefix=key_prefix)
    job_id = queue.enqueue("slow", {})
    settings = QueueSettings(lease_seconds=0.6, max_block_seconds=0.3)
    with (
        running_worker(redis_client, ["jobs"], registry, prefix=key_prefix, settings=settings),
        running_worker(redis_client, ["jobs"], registry, prefix=key_prefix, settings=settings),
    ):
        wait_until(lambda: explain(queue, job_id).state == "done", timeout=6)

    assert runs == [1]
    s = stats(queue)
    assert (s.counters["reaped"], s.counters["stale_refused"], s.counters["succeeded"]) == (0, 0, 1)


def test_stalled_worker_whose_heartbeats_stop_cannot_ack_the_reaped_copy(
    redis_client, key_prefix, registry
):
    # the scenario: lease 3 s; worker A's heartbeats stop (a long GC pause or a
    # partition) while its handler stalls 6 s and then acks; worker B takes the reaped copy
    settings = QueueSettings(lease_seconds=3.0, max_block_seconds=0.5)
    queue = Queue(redis_client, "jobs", prefix=key_prefix)
    workers = {}
    runs: list[tuple[str, int, int]] = []
    a_started = threading.Event()

    @registry.task("t")
    def handler(payload, ctx: JobContext):
        if not a_started.is_set():
            workers["a"].heartbeat.paused.set()
            runs.append(("a", ctx.attempt, ctx.fencing_token))
            a_started.set()
            time.sleep(6.0)
        else:
            runs.append(("b", ctx.attempt, ctx.fencing_token))

    with running_worker(
        redis_client, ["jobs"], registry, prefix=key_prefix, settings=settings, worker_id="A"
    ) as a:
        workers["a"] = a
        job_id = queue.enqueue("t", {})
        assert a_started.wait(5)
        with running_worker(
            redis_client, ["jobs"], registry, prefix=key_prefix, settings=settings, worker_id="B"
        ):
            wait_until(lambda: explain(queue, job_id).state == "done", timeout=5)
            t_done = time.monotonic()
            wait_until(lambda: a.counters.counts["stale_refused"] == 1, timeout=6)
            assert time.monotonic() - t_done > 1.5  # A's ack came later, and was refused

    assert [r[:2] for r in runs] == [("a", 1), ("b", 1)]  # a first loss is not charged
    assert runs[1][2] > runs[0][2]  # B's fencing token is the larger
    s = stats(queue)
    assert (s.counters["stale_refused"], s.counters["succeeded"], s.counters["reaped"]) == (1, 1, 1)
    assert (s.done, s.active, s.ready, s.dead) == (1, 0, 0, 0)


def test_delayed_job_runs_once_not_before_its_time_with_three_workers(
    redis_client, key_prefix, registry
):
    # the scenario with its exact numbers: lease 5 s, a job delayed 20 s, 3 workers
    ran: list[float] = []
    registry.task("t")(lambda p, c: ran.append(time.time()))
    settings = QueueSettings(lease_seconds=5.0)  # default max_block_seconds
    queue = Queue(redis_client, "jobs", prefix=key_prefix, settings=settings)
    job_id = queue.enqueue("t", {}, delay=20.0)
    due = explain(queue, job_id).next_run_at

    kw = {"prefix": key_prefix, "settings": settings}
    with (
        running_worker(redis_client, ["jobs"], registry, **kw),
        running_worker(redis_client, ["jobs"], registry, **kw),
        running_worker(redis_client, ["jobs"], registry, **kw),
    ):
        wait_until(lambda: ran, timeout=25, interval=0.05)
        time.sleep(0.5)  # room for a second (wrong) run to show up

    assert len(ran) == 1
    assert due <= ran[0] <= due + 0.4
    assert stats(queue).counters["succeeded"] == 1


def test_job_context_carries_attempt_lease_token_and_a_rising_fencing_token(
    redis_client, key_prefix, registry
):
    seen: list[JobContext] = []

    @registry.task("t", retry=RetryPolicy(base_delay=0, jitter=False, max_attempts=3))
    def flaky(payload, ctx):
        seen.append(ctx)
        if ctx.attempt < 3:
            raise RuntimeError("not yet")

    queue = Queue(redis_client, "jobs", prefix=key_prefix, registry=registry)
    job_id = queue.enqueue("t", {}, idempotency_key="wf-1:t")
    with running_worker(
        redis_client, ["jobs"], registry, prefix=key_prefix, settings=FAST, worker_id="w-7"
    ):
        wait_until(lambda: explain(queue, job_id).state == "done")

    assert [c.attempt for c in seen] == [1, 2, 3]
    assert {(c.job_id, c.queue, c.task, c.max_attempts) for c in seen} == {(job_id, "jobs", "t", 3)}
    assert all(c.lease_token == f"{c.fencing_token}:w-7" for c in seen)
    assert seen[0].fencing_token < seen[1].fencing_token < seen[2].fencing_token
    assert seen[0].idempotency_key == "wf-1:t"


@pytest.mark.parametrize(("max_attempts", "runs"), [(0, 1), (1, 1), (3, 3)])
def test_max_attempts_zero_is_not_replaced_by_a_default_and_n_means_n_runs(
    redis_client, key_prefix, registry, max_attempts, runs
):
    # fault 7: max_retries=0 became the default (a falsy check); counting was off by one
    calls: list[int] = []

    @registry.task("t", retry=RetryPolicy(base_delay=0, jitter=False, max_attempts=9))
    def always_fails(payload, ctx):
        calls.append(ctx.attempt)
        raise RuntimeError("down")

    queue = Queue(redis_client, "jobs", prefix=key_prefix)
    job_id = queue.enqueue("t", {}, max_attempts=max_attempts)
    with running_worker(redis_client, ["jobs"], registry, prefix=key_prefix, settings=FAST):
        wait_until(lambda: explain(queue, job_id).state == "dead")

    assert calls == list(range(1, runs + 1))
    letter = queue.dead_letters.show(job_id)
    assert (letter.reason, letter.attempts) == ("retries_exhausted", runs)
    assert "RuntimeError: down" in letter.error and "always_fails" in letter.traceback


def test_permanent_error_goes_to_the_dlq_at_once(redis_client, key_prefix, registry):
    calls: list[int] = []

    @registry.task("t", retry=RetryPolicy(max_attempts=5))
    def refuse(payload, ctx):
        calls.append(ctx.attempt)
        raise PermanentError("order cancelled")

    queue = Queue(redis_client, "jobs", prefix=key_prefix)
    job_id = queue.enqueue("t", {})
    with running_worker(redis_client, ["jobs"], registry, prefix=key_prefix, settings=FAST):
        wait_until(lambda: explain(queue, job_id).state == "dead")

    assert calls == [1]
    assert queue.dead_letters.show(job_id).reason == "error"
    assert stats(queue).counters["retried"] == 0


def test_unknown_task_goes_to_the_dlq_without_retry(redis_client, key_prefix, registry):
    # fault 8: an unknown task type was retried like a transient error
    registry.task("known")(lambda p, c: None)
    producer = Queue(redis_client, "jobs", prefix=key_prefix)  # no registry: any name goes
    job_id = producer.enqueue("renamed.task", {}, max_attempts=5)
    ok = producer.enqueue("known", {})
    with running_worker(redis_client, ["jobs"], registry, prefix=key_prefix, settings=FAST):
        wait_until(lambda: explain(producer, job_id).state == "dead")
        wait_until(lambda: explain(producer, ok).state == "done")

    letter = producer.dead_letters.show(job_id)
    assert (letter.reason, letter.attempts) == ("unknown_task", 1)
    assert stats(producer).counters["retried"] == 0


def test_raw_messages_go_to_the_dlq_or_round_trip_and_the_worker_never_exits(
    redis_client, key_prefix, registry
):
    # the scenario: three raw messages pushed straight into the queue's keys
    got: list[Note] = []
    registry.task("note", model=Note, retry=RetryPolicy(max_attempts=5))(
        lambda payload, ctx: got.append(payload)
    )
    queue = Queue(redis_client, "jobs", prefix=key_prefix)
    text = "注文が届きました 🚚📦 — ça va? 你好，世界 👍🏽"
    raw = {
        "bad-utf8": b'{"t":"note","p":{"text":"\xff\xfe\xfd"},"e":0,"m":5}',
        "bad-json": orjson.dumps({"t": "note", "p": {"txt": 1}, "e": 0, "m": 5}),
        "unicode": orjson.dumps({"t": "note", "p": {"text": text}, "e": 0, "m": 5}),
    }
    for job_id, record in raw.items():
        redis_client.hset(queue.keys.key("jobs"), job_id, record)
        redis_client.lpush(queue.keys.key("ready"), job_id)
    redis_client.lpush(queue.keys.key("wake"), "1")

    with running_worker(
        redis_client, ["jobs"], registry, prefix=key_prefix, settings=FAST
    ) as worker:
        wait_until(lambda: stats(queue).dead == 2 and stats(queue).done == 1)
        after = queue.enqueue("note", {"text": "still serving"})
        wait_until(lambda: explain(queue, after).state == "done")
        assert all(lane.is_alive() for lane in worker._lanes)

    assert [n.text for n in got] == [text, "still serving"]
    # a record that is not UTF-8 at all is an invalid record; valid JSON that does not
    # fit the task's model is an invalid payload
    for job_id, reason in (("bad-utf8", "invalid_record"), ("bad-json", "invalid_payload")):
        letter = queue.dead_letters.show(job_id)
        assert (letter.reason, letter.attempts) == (reason, 1)
    assert "UTF-8" in queue.dead_letters.show("bad-utf8").error
    assert "text" in queue.dead_letters.show("bad-json").error
    assert stats(queue).counters["retried"] == 0


def test_retry_backoff_is_honoured_by_the_worker(redis_client, key_prefix, registry):
    ran: list[float] = []

    @registry.task("t", retry=RetryPolicy(base_delay=0.3, jitter=False, max_attempts=3))
    def flaky(payload, ctx):
        ran.append(time.monotonic())
        if ctx.attempt < 3:
            raise RuntimeError("again")

    queue = Queue(redis_client, "jobs", prefix=key_prefix)
    job_id = queue.enqueue("t", {})
    with running_worker(redis_client, ["jobs"], registry, prefix=key_prefix, settings=FAST):
        wait_until(lambda: explain(queue, job_id).state == "done")

    gaps = [b - a for a, b in zip(ran, ran[1:], strict=False)]
    assert 0.29 <= gaps[0] <= 0.6 and 0.59 <= gaps[1] <= 0.9


def test_a_lane_with_a_split_fetch_runs_a_suspect_alone_then_full_batches(
    redis_client, key_prefix, registry
):
    # a lane batch above SCRIPT_BATCH is several script calls: the later ones are
    # sent only after a full first call, so a suspect never gets batch-mates
    ran: list[str] = []
    batches: list[list[str]] = []

    @registry.task("t")
    def handler(payload, ctx: JobContext):
        ran.append(ctx.job_id)

    queue = Queue(redis_client, "jobs", prefix=key_prefix, registry=registry)
    n = SCRIPT_BATCH + 200
    ids = queue.enqueue_many([EnqueueRequest("t", {"i": i}) for i in range(n)])
    queue.fetch(1, lease_seconds=0.05)
    time.sleep(0.1)
    assert queue.reap() == 1  # ids[0] is a suspect at the head

    hooks = WorkerHooks(after_fetch=lambda jobs: batches.append([j.job_id for j in jobs]))
    with running_worker(
        redis_client,
        ["jobs"],
        registry,
        prefix=key_prefix,
        settings=FAST,
        batch_size=SCRIPT_BATCH + 100,
        hooks=hooks,
    ):
        wait_until(lambda: stats(queue).counters["succeeded"] == n, timeout=30)

    assert batches[0] == [ids[0]]
    assert batches[1] == ids[1 : SCRIPT_BATCH + 101]  # the first call full, then the rest
    assert batches[2] == ids[SCRIPT_BATCH + 101 :]
    assert sorted(ran) == sorted(ids)


@pytest.mark.parametrize("freeze", [True, False])
def test_run_freezes_the_start_up_heap_unless_told_not_to(
    redis_client, key_prefix, registry, freeze
):
    # a lane's per-job values start cyclic collections; run() (the process's own loop)
    # keeps the start-up heap out of them, so a full collection does not walk it
    registry.task("t")(lambda p, c: None)
    worker = Worker(redis_client, ["frz"], registry, prefix=key_prefix, settings=FAST)
    gc.unfreeze()
    try:
        runner = threading.Thread(
            target=worker.run, kwargs={"install_signals": False, "freeze_gc": freeze}
        )
        runner.start()
        wait_until(lambda: worker._live_lanes())
        frozen = gc.get_freeze_count()
        worker.request_stop()
        runner.join(10)
    finally:
        gc.unfreeze()
    assert not runner.is_alive()
    assert (frozen > 0) is freeze
