"""Batch tasks run through the same middleware as single jobs, one job at a time seen."""

from __future__ import annotations

import random

import pytest
import redis

from reliable_queue import PermanentError, TaskRegistry, Worker
from reliable_queue.codec import encode_record
from reliable_queue.execution import Dead, Succeeded, execute, prepare, run_batch
from reliable_queue.job import RawJob
from reliable_queue.middleware import BatchMiddleware, call_rest


def raw(job_id: str, task: str = "order.ship", order_id: int = 7) -> RawJob:
    record = encode_record(task, {"order_id": order_id}, 1_000, 3, None)
    return RawJob("q", job_id, "41:host:1:ab", 1, record)


class Recorder(BatchMiddleware):
    """Notes every job it sees and fails the jobs whose order id is in ``fail``."""

    def __init__(self, name: str, log: list[str], fail: frozenset[int] = frozenset()) -> None:
        self.name, self.log, self.fail = name, log, fail

    def around(self, items, call_next):
        errors: list[BaseException | None] = [None] * len(items)
        for i, (payload, ctx) in enumerate(items):
            self.log.append(f"{self.name}>{ctx.job_id}")
            if payload["order_id"] in self.fail:
                errors[i] = PermanentError(f"{self.name} failed {ctx.job_id}")
        call_rest(items, errors, call_next)
        self.log.extend(f"<{self.name}{ctx.job_id}" for _, ctx in items)
        return errors


def batch_registry(calls: list[list[str]]) -> TaskRegistry:
    registry = TaskRegistry()

    @registry.task("order.ship", batch=True)
    def ship(items):
        calls.append([ctx.job_id for _, ctx in items])
        return [None] * len(items)

    return registry


def test_batch_middleware_sees_every_job_of_a_batch_outermost_first():
    calls: list[list[str]] = []
    registry = batch_registry(calls)
    log: list[str] = []
    items = [prepare(raw(f"j{i}", order_id=i), registry) for i in range(3)]

    outcomes = run_batch(
        items, random.Random(0), middleware=[Recorder("a", log), Recorder("b", log)]
    )

    assert all(isinstance(o, Succeeded) for o in outcomes)
    assert calls == [["j0", "j1", "j2"]]  # still one handler call for the batch
    assert log == [
        *(f"a>j{i}" for i in range(3)),
        *(f"b>j{i}" for i in range(3)),
        *(f"<bj{i}" for i in range(3)),
        *(f"<aj{i}" for i in range(3)),
    ]


def test_a_job_failed_by_middleware_is_left_out_and_only_it_fails():
    calls: list[list[str]] = []
    registry = batch_registry(calls)
    items = [prepare(raw(f"j{i}", order_id=i), registry) for i in range(4)]

    outcomes = run_batch(items, middleware=[Recorder("faults", [], fail=frozenset({1, 3}))])

    assert calls == [["j0", "j2"]]
    assert [type(o) for o in outcomes] == [Succeeded, Dead, Succeeded, Dead]
    assert "faults failed j1" in outcomes[1].error  # type: ignore[union-attr]


def test_a_single_job_runs_through_the_same_middleware_as_a_batch_of_one():
    registry = TaskRegistry()
    ran: list[str] = []

    @registry.task("order.ship")
    def ship(payload, ctx):
        ran.append(ctx.job_id)

    log: list[str] = []
    middleware = [Recorder("m", log, fail=frozenset({9}))]
    assert isinstance(execute(raw("ok"), registry, middleware=middleware), Succeeded)
    failed = execute(raw("bad", order_id=9), registry, middleware=middleware)

    assert isinstance(failed, Dead) and "m failed bad" in failed.error
    assert ran == ["ok"]
    assert log == ["m>ok", "<mok", "m>bad", "<mbad"]


def test_a_worker_with_batch_tasks_refuses_middleware_that_could_not_see_their_jobs():
    registry = batch_registry([])

    def plain(ctx, payload, call_next):
        return call_next()

    client = redis.Redis()  # never connected: the check comes first
    with pytest.raises(TypeError, match="BatchMiddleware"):
        Worker(client, ["q"], registry, middleware=[plain])
    Worker(client, ["q"], registry, middleware=[Recorder("m", [])])
