"""Batch tasks: one handler call for every job of the task in a fetched batch."""

from __future__ import annotations

import threading
import time

import redis
from pydantic import BaseModel

from reliable_queue import (
    EnqueueRequest,
    PermanentError,
    Queue,
    QueueSettings,
    RetryPolicy,
    TaskRegistry,
    Worker,
    stats,
)


class Item(BaseModel):
    n: int


def _drain(queue: Queue, worker: Worker, expect_done: int, timeout: float = 20.0) -> None:
    worker.start()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            s = stats(queue)
            if s.counters["succeeded"] + s.dead >= expect_done and s.active == 0 and s.ready == 0:
                return
            time.sleep(0.05)
        raise AssertionError(f"not drained: {stats(queue)}")
    finally:
        worker.request_stop()
        worker.join(10)


def test_a_batch_task_gets_the_fetched_jobs_in_one_call(
    redis_client: redis.Redis, key_prefix: str
) -> None:
    registry = TaskRegistry()
    calls: list[list[int]] = []
    lock = threading.Lock()

    @registry.task("sum", model=Item, batch=True)
    def handle(items: list[tuple[Item, object]]) -> list[BaseException | None]:
        with lock:
            calls.append([p.n for p, _ in items])
        return [None] * len(items)

    queue = Queue(redis_client, "b", prefix=key_prefix, registry=registry)
    queue.enqueue_many([EnqueueRequest("sum", {"n": i}) for i in range(50)])
    worker = Worker(redis_client, ["b"], registry, prefix=key_prefix, batch_size=25)
    _drain(queue, worker, 50)
    assert sorted(n for call in calls for n in call) == list(range(50))
    assert max(len(c) for c in calls) > 1  # really batched
    assert stats(queue).counters["succeeded"] == 50


def test_each_item_of_a_batch_gets_its_own_outcome(
    redis_client: redis.Redis, key_prefix: str
) -> None:
    registry = TaskRegistry()
    seen: dict[int, int] = {}

    @registry.task(
        "mixed",
        model=Item,
        batch=True,
        retry=RetryPolicy(max_attempts=2, base_delay=0.05, jitter=False),
    )
    def handle(items: list[tuple[Item, object]]) -> list[BaseException | None]:
        out: list[BaseException | None] = []
        for payload, _ctx in items:
            seen[payload.n] = seen.get(payload.n, 0) + 1
            if payload.n == 1:
                out.append(PermanentError("bad order"))
            elif payload.n == 2:
                out.append(RuntimeError("always flaky"))
            else:
                out.append(None)
        return out

    queue = Queue(redis_client, "m", prefix=key_prefix, registry=registry)
    queue.enqueue_many([EnqueueRequest("mixed", {"n": i}) for i in range(4)])
    worker = Worker(redis_client, ["m"], registry, prefix=key_prefix, batch_size=10)
    _drain(queue, worker, 4)
    letters = {d.payload["n"]: d for d in queue.dead_letters.list()}
    assert letters[1].reason == "error" and letters[1].attempts == 1
    assert letters[2].reason == "retries_exhausted" and letters[2].attempts == 2
    assert seen == {0: 1, 1: 1, 2: 2, 3: 1}
    assert stats(queue).counters["succeeded"] == 2


def test_a_batch_handler_that_raises_retries_every_item(
    redis_client: redis.Redis, key_prefix: str
) -> None:
    registry = TaskRegistry()
    attempts: list[int] = []

    @registry.task(
        "boom",
        model=Item,
        batch=True,
        retry=RetryPolicy(max_attempts=3, base_delay=0.05, jitter=False),
    )
    def handle(items: list[tuple[Item, object]]) -> list[BaseException | None]:
        attempts.append(len(items))
        if len(attempts) == 1:
            raise ConnectionError("database went away")
        return [None] * len(items)

    queue = Queue(redis_client, "x", prefix=key_prefix, registry=registry)
    queue.enqueue_many([EnqueueRequest("boom", {"n": i}) for i in range(3)])
    worker = Worker(redis_client, ["x"], registry, prefix=key_prefix, batch_size=10)
    _drain(queue, worker, 3)
    s = stats(queue)
    assert s.counters["succeeded"] == 3 and s.dead == 0
    assert s.counters["retried"] == 3


def test_a_lane_survives_a_failing_hook_and_keeps_serving(
    redis_client: redis.Redis, key_prefix: str
) -> None:
    from reliable_queue import WorkerHooks

    registry = TaskRegistry()

    @registry.task("ok", model=Item)
    def handle(payload: Item, ctx: object) -> None:
        return None

    failures = {"left": 1}

    def after_fetch(jobs: object) -> None:
        if failures["left"]:
            failures["left"] -= 1
            raise RuntimeError("hook bug")

    settings = QueueSettings(lease_seconds=1.0)
    queue = Queue(redis_client, "h", prefix=key_prefix, registry=registry, settings=settings)
    queue.enqueue_many([EnqueueRequest("ok", {"n": i}) for i in range(5)])
    worker = Worker(
        redis_client,
        ["h"],
        registry,
        prefix=key_prefix,
        batch_size=5,
        settings=settings,
        hooks=WorkerHooks(after_fetch=after_fetch),
    )
    _drain(queue, worker, 5)
    s = stats(queue)
    assert s.counters["succeeded"] == 5
    assert s.counters["reaped"] >= 1  # the batch held during the failure came back by lease expiry
