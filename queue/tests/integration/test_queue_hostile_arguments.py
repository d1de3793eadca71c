"""Hostile arguments at the library's entry points: refused with a QueueError, nothing written.

A number past its bound (``delay=9.3e15`` once stored a due score of -9.2e18: an
integer overflow in the script, and the job ran at once) and a text UTF-8 cannot
encode (a lone surrogate once raised a bare ``TypeError`` or ``UnicodeEncodeError``)
are both refused before anything reaches Redis. The property test runs enqueue's
numeric arguments against the real server: refused, or stored exactly as asked.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from queue_helpers import redis_now

from reliable_queue import (
    PayloadValidationError,
    Queue,
    QueueError,
    QueueLimitError,
    QueueSettings,
    RetryPolicy,
    explain,
    find_job,
)

# the documented bounds (reliable_queue.limits; docs/reliability.md, "Hostile input")
MAX_DELAY_SECONDS = 10 * 366 * 86400.0  # ten years
MAX_RUN_AT = 253_402_300_799.0  # 9999-12-31 23:59:59 UTC

SURROGATE = "order-\ud800-7"

HUGE = [9.3e15, 1e18, 2**64, -1, -0.001, math.nan, math.inf, -math.inf, "5", True, None]


def written(client: redis.Redis, prefix: str) -> list[bytes]:
    """Keys of the test's key space other than the queue registry."""
    return [k for k in client.scan_iter(f"{prefix}:*") if not k.endswith(b":queues")]


@pytest.mark.parametrize("delay", HUGE[:-1])
def test_a_delay_past_its_bound_is_refused_and_nothing_is_written(
    make_queue: Callable[..., Queue], redis_client: redis.Redis, key_prefix: str, delay: Any
) -> None:
    queue = make_queue()

    with pytest.raises(QueueLimitError, match="delay"):
        queue.enqueue("t", {}, delay=delay)

    assert written(redis_client, key_prefix) == []


@pytest.mark.parametrize("run_at", [1e18, 2**64, MAX_RUN_AT + 1, -1, math.nan, "soon"])
def test_a_run_at_past_its_bound_is_refused(
    make_queue: Callable[..., Queue], redis_client: redis.Redis, key_prefix: str, run_at: Any
) -> None:
    with pytest.raises(QueueLimitError, match="run_at"):
        make_queue().enqueue("t", {}, run_at=run_at)
    assert written(redis_client, key_prefix) == []


@pytest.mark.parametrize("max_attempts", [-1, 10_001, 2**64, 1.5, "3", True])
def test_max_attempts_past_its_bound_is_refused(
    make_queue: Callable[..., Queue], redis_client: redis.Redis, key_prefix: str, max_attempts: Any
) -> None:
    with pytest.raises(QueueLimitError, match="max_attempts"):
        make_queue().enqueue("t", {}, max_attempts=max_attempts)
    assert written(redis_client, key_prefix) == []


def test_a_huge_payload_integer_is_a_payload_error_not_a_type_error(
    make_queue: Callable[..., Queue],
) -> None:
    with pytest.raises(PayloadValidationError, match="64-bit"):
        make_queue().enqueue("t", {"n": 2**70})


@pytest.mark.parametrize("lease", [1e18, 2**64, -1, math.nan, math.inf, 86_400.5])
def test_a_lease_past_its_bound_is_refused_by_fetch_and_heartbeat(
    make_queue: Callable[..., Queue], lease: Any
) -> None:
    queue = make_queue()
    queue.enqueue("t", {})

    with pytest.raises(QueueLimitError, match="lease_seconds"):
        queue.fetch(1, lease_seconds=lease)
    held = queue.fetch(1).jobs[0]
    with pytest.raises(QueueLimitError, match="lease_seconds"):
        queue.extend([held.lease], lease)


@pytest.mark.parametrize("delay", [1e18, -1, math.nan])
def test_a_retry_delay_past_its_bound_is_refused_and_the_lease_is_kept(
    make_queue: Callable[..., Queue], delay: float
) -> None:
    queue = make_queue()
    queue.enqueue("t", {})
    held = queue.fetch(1).jobs[0]

    with pytest.raises(QueueLimitError, match="delay"):
        queue.nack(held.lease, delay=delay)

    assert explain(queue, held.job_id).state == "active"


@pytest.mark.parametrize(
    "make",
    [
        lambda: RetryPolicy(max_delay=1e18),
        lambda: RetryPolicy(base_delay=math.nan),
        lambda: RetryPolicy(max_attempts=2**64),
        lambda: RetryPolicy(time_limit=1e18),
    ],
    ids=["max_delay", "base_delay_nan", "max_attempts", "time_limit"],
)
def test_a_retry_policy_past_its_bounds_is_refused(make: Callable[[], Any]) -> None:
    with pytest.raises(QueueLimitError):
        make()


@pytest.mark.parametrize(
    "field", ["idempotency_window_seconds", "job_retention_seconds", "dlq_max_age_seconds"]
)
def test_queue_settings_past_their_bounds_are_refused(field: str) -> None:
    with pytest.raises(ValueError, match="less than or equal"):
        QueueSettings(**{field: 1e18})


@pytest.mark.parametrize(
    ("rate", "batch"), [(0, 100), (-1, 100), (math.inf, 100), (1, 0), (1, 501)]
)
def test_redrive_pacing_past_its_bounds_is_refused(
    make_queue: Callable[..., Queue], rate: float, batch: int
) -> None:
    with pytest.raises(QueueLimitError):
        make_queue().dead_letters.redrive(rate=rate, batch=batch)


ENTRY_POINTS: dict[str, Callable[[Queue], Any]] = {
    "enqueue task name": lambda q: q.enqueue(SURROGATE, {}),
    "enqueue idempotency key": lambda q: q.enqueue("t", {}, idempotency_key=SURROGATE),
    "enqueue payload value": lambda q: q.enqueue("t", {"name": SURROGATE}),
    "enqueue payload key": lambda q: q.enqueue("t", {SURROGATE: 1}),
    "queue name": lambda q: Queue(q.client, SURROGATE, prefix=q.keys.prefix),
    "key prefix": lambda q: Queue(q.client, "jobs", prefix=SURROGATE),
    "locate": lambda q: q.locate(SURROGATE),
    "locate_many": lambda q: q.locate_many(["a", SURROGATE]),
    "pending_job_for": lambda q: q.pending_job_for(SURROGATE),
    "explain": lambda q: explain(q, SURROGATE),
    "find_job": lambda q: find_job([q], SURROGATE),
    "dlq show": lambda q: q.dead_letters.show(SURROGATE),
    "dlq purge": lambda q: q.dead_letters.purge(ids=[SURROGATE]),
    "dlq redrive": lambda q: q.dead_letters.redrive(ids=[SURROGATE]),
}


@pytest.mark.parametrize("call", list(ENTRY_POINTS.values()), ids=list(ENTRY_POINTS))
def test_a_lone_surrogate_is_refused_as_invalid_text_at_every_entry_point(
    make_queue: Callable[..., Queue],
    redis_client: redis.Redis,
    key_prefix: str,
    call: Callable[[Queue], Any],
) -> None:
    queue = make_queue()

    with pytest.raises(QueueError) as refused:
        call(queue)

    assert "lone surrogate" in str(refused.value)  # a QueueError saying what is wrong
    assert written(redis_client, key_prefix) == []


def test_a_handler_error_with_a_lone_surrogate_is_stored_escaped(
    make_queue: Callable[..., Queue],
) -> None:
    queue = make_queue()
    queue.enqueue("t", {})
    held = queue.fetch(1).jobs[0]

    assert queue.dead(held.lease, "error", error=f"boom {SURROGATE}")

    assert queue.dead_letters.show(held.job_id).error == "boom order-\\ud800-7"


# -------------------------------------------------------------- the property


@pytest.mark.timeout(300)
def test_enqueue_numbers_are_refused_or_stored_exactly_as_asked(
    make_queue: Callable[..., Queue], redis_client: redis.Redis
) -> None:
    now = redis_now(redis_client)
    queue = make_queue(name="prop")
    queue.clock = lambda: now  # run_at's bound is now + ten years on this clock
    numbers = st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(min_value=0, max_value=MAX_DELAY_SECONDS * 1.01),
        st.sampled_from([9.3e15, 1e18, 2**64, 2**63, MAX_DELAY_SECONDS, MAX_RUN_AT]),
    )
    attempts = st.one_of(st.none(), st.integers(min_value=-5, max_value=2**70))
    delayed, jobs = queue.keys.key("delayed"), queue.keys.key("jobs")

    @settings(
        max_examples=150,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(
        delay=numbers,
        run_at=st.one_of(st.none(), numbers, st.floats(now - 10, now + MAX_DELAY_SECONDS)),
        max_attempts=attempts,
    )
    def check(delay: float, run_at: float | None, max_attempts: int | None) -> None:
        redis_client.delete(delayed, jobs, queue.keys.key("ready"))
        before = redis_now(redis_client)
        try:
            job_id = queue.enqueue("t", {}, delay=delay, run_at=run_at, max_attempts=max_attempts)
        except QueueLimitError:
            assert redis_client.exists(delayed, jobs, queue.keys.key("ready")) == 0
            return
        after = redis_now(redis_client)
        assert 0 <= delay <= MAX_DELAY_SECONDS
        assert max_attempts is None or 0 <= max_attempts <= 10_000
        due = redis_client.zscore(delayed, job_id)
        if run_at is not None:  # run_at wins over delay: stored as asked, to the ms
            wanted = max(round(run_at * 1000), 1)
            if wanted > after * 1000:
                assert due == wanted
            elif wanted <= before * 1000 - 1:
                assert due is None  # due already: ready
            else:
                assert due in (None, wanted)
        elif round(delay * 1000) == 0:
            assert due is None
        else:  # now + delay on the server clock, read between before and after
            wanted = round(delay * 1000)
            assert due is not None
            assert math.floor(before * 1000) + wanted <= due <= math.ceil(after * 1000) + wanted

    check()


def test_the_bounds_here_are_the_library_s() -> None:
    from reliable_queue import limits

    assert (limits.MAX_DELAY_SECONDS, limits.MAX_RUN_AT) == (MAX_DELAY_SECONDS, MAX_RUN_AT)


def test_the_overflow_case_is_refused_not_run_at_once(
    make_queue: Callable[..., Queue], redis_client: redis.Redis
) -> None:
    queue = make_queue()

    with pytest.raises(QueueLimitError):
        queue.enqueue("t", {}, delay=9.3e15)

    assert queue.fetch(1).jobs == []
    assert redis_client.zcard(queue.keys.key("delayed")) == 0
