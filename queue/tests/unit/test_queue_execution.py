"""Deciding a job's outcome from its record and handler (no Redis: execute() is pure)."""

import random

import pytest
from pydantic import BaseModel

from reliable_queue import (
    AttemptLost,
    JobContext,
    PermanentError,
    RetryPolicy,
    TaskRegistry,
    Throttled,
)
from reliable_queue.codec import encode_record
from reliable_queue.execution import Dead, Retry, Succeeded, Throttle, execute, fencing_number
from reliable_queue.job import RawJob


class Order(BaseModel):
    order_id: int
    note: str = ""


def raw(task="order.ship", payload=None, *, attempt=1, max_attempts=3, record=None, token=None):
    record = record or encode_record(task, payload or {"order_id": 7}, 1_000, max_attempts, "k")
    return RawJob("q", "job-1", token or "41:host:1:ab", attempt, record)


@pytest.fixture
def registry():
    return TaskRegistry()


def test_handler_returning_normally_succeeds_and_sees_its_context(registry):
    seen: list[tuple[Order, JobContext]] = []

    @registry.task("order.ship", model=Order)
    def ship(payload: Order, ctx: JobContext) -> None:
        seen.append((payload, ctx))

    outcome = execute(raw(attempt=2), registry)

    assert outcome == Succeeded(raw().lease)
    payload, ctx = seen[0]
    assert payload == Order(order_id=7)
    assert (ctx.job_id, ctx.queue, ctx.task, ctx.attempt) == ("job-1", "q", "order.ship", 2)
    assert (ctx.lease_token, ctx.fencing_token) == ("41:host:1:ab", 41)
    assert (ctx.max_attempts, ctx.enqueued_at, ctx.idempotency_key) == (3, 1.0, "k")


def test_ordinary_exception_retries_after_the_policy_backoff(registry):
    @registry.task("order.ship", retry=RetryPolicy(base_delay=1.0, jitter=False))
    def ship(payload, ctx):
        raise RuntimeError("carrier down")

    outcome = execute(raw(attempt=2, max_attempts=5), registry)

    assert isinstance(outcome, Retry)
    assert outcome.delay == 2.0  # fault 2: the backoff is part of the outcome, not dropped
    assert outcome.error == "RuntimeError: carrier down"
    assert "carrier down" in outcome.traceback


def test_last_allowed_attempt_failing_is_retries_exhausted(registry):
    @registry.task("order.ship")
    def ship(payload, ctx):
        raise RuntimeError("still down")

    outcome = execute(raw(attempt=3, max_attempts=3), registry)

    assert isinstance(outcome, Dead) and outcome.reason == "retries_exhausted"


@pytest.mark.parametrize("max_attempts", [0, 1])
def test_max_attempts_zero_or_one_never_retries(registry, max_attempts):
    @registry.task("order.ship", retry=RetryPolicy(max_attempts=5))
    def ship(payload, ctx):
        raise RuntimeError("boom")

    outcome = execute(raw(attempt=1, max_attempts=max_attempts), registry)

    assert isinstance(outcome, Dead) and outcome.reason == "retries_exhausted"


def test_permanent_error_is_dead_at_once_even_with_attempts_left(registry):
    @registry.task("order.ship")
    def ship(payload, ctx):
        raise PermanentError("order was cancelled")

    outcome = execute(raw(attempt=1, max_attempts=10), registry)

    assert isinstance(outcome, Dead) and outcome.reason == "error"
    assert "order was cancelled" in outcome.error and outcome.traceback


def test_unknown_task_is_dead_as_unknown_task_not_retried(registry):
    outcome = execute(raw(task="nobody.handles.this", max_attempts=10), registry)

    assert isinstance(outcome, Dead) and outcome.reason == "unknown_task"


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (b"\xc3\x28 invalid utf-8", "invalid_record"),
        (b"{truncated", "invalid_payload"),
        (b'{"t": "order.ship", "p": {"order_id": "x"}}', "invalid_payload"),
    ],
)
def test_unparsable_or_invalid_payload_is_dead_not_raised(registry, record, reason):
    # fault 8: a payload that does not parse crashed the worker loop
    @registry.task("order.ship", model=Order)
    def ship(payload, ctx):
        raise AssertionError("must not run")

    outcome = execute(raw(record=record), registry)

    assert isinstance(outcome, Dead) and outcome.reason == reason


def test_middleware_wraps_the_handler_outermost_first(registry):
    calls: list[str] = []

    @registry.task("order.ship")
    def ship(payload, ctx):
        calls.append("handler")

    def outer(ctx, payload, call_next):
        calls.append("outer>")
        call_next()
        calls.append("<outer")

    def inner(ctx, payload, call_next):
        calls.append("inner>")
        call_next()
        calls.append("<inner")

    assert isinstance(execute(raw(), registry, middleware=[outer, inner]), Succeeded)
    assert calls == ["outer>", "inner>", "handler", "<inner", "<outer"]


def test_system_exit_from_a_handler_propagates(registry):
    @registry.task("order.ship")
    def ship(payload, ctx):
        raise SystemExit(3)

    with pytest.raises(SystemExit):
        execute(raw(), registry, rng=random.Random(0))


def test_fencing_number_is_the_sequence_at_the_start_of_the_token():
    assert fencing_number("1234:host:99:ab") == 1234
    assert fencing_number("garbage") == 0


def test_registering_a_task_name_twice_is_refused(registry):
    registry.task("a")(lambda p, c: None)

    with pytest.raises(ValueError):
        registry.task("a")(lambda p, c: None)


def test_a_lost_attempt_is_retried_even_at_max_attempts_never_dead_lettered(registry):
    """An attempt that no longer held its lease does not decide its job's fate: a
    dead letter from it would block a step another delivery is running."""

    @registry.task("order.ship")
    def ship(payload, ctx):
        raise AttemptLost("lease_lost")

    outcome = execute(raw(attempt=3, max_attempts=3), registry)

    assert isinstance(outcome, Retry)
    assert outcome.error.startswith("AttemptLost: ")


def test_a_throttle_is_put_off_with_the_ordinary_failure_as_its_fallback(registry):
    @registry.task("order.ship", retry=RetryPolicy(base_delay=1.0, jitter=False))
    def ship(payload, ctx):
        raise Throttled(2.5, "429 Too Many Requests")

    early = execute(raw(attempt=1, max_attempts=3), registry)
    assert isinstance(early, Throttle) and early.delay == 2.5
    assert early.error == "Throttled: 429 Too Many Requests"
    assert isinstance(early.fallback, Retry) and early.fallback.delay == 1.0
    last = execute(raw(attempt=3, max_attempts=3), registry)
    assert isinstance(last, Throttle)
    assert isinstance(last.fallback, Dead) and last.fallback.reason == "retries_exhausted"


def test_a_throttle_from_an_isolated_child_comes_back_as_one():
    from reliable_queue.isolation.wire import error_data, error_from

    back = error_from(error_data(Throttled(3.0, "slow down"), ""))
    assert isinstance(back, Throttled) and back.delay_seconds == 3.0
    assert str(back) == "slow down"
    forged = error_from({**error_data(RuntimeError("x"), ""), "throttle": float("nan")})
    assert not isinstance(forged, Throttled)  # a delay out of bounds: an ordinary error
