"""Rate limits, decided in the fetch script with its pop (ADR 0032).

A limit of N jobs per interval holds across every worker sharing the Redis: a fetch
leases at most what the window in force still allows; a deferral holds no lease,
charges no attempt and is counted; a changed limit applies from the next fetch.
"""

from __future__ import annotations

import time

import pytest
from queue_helpers import running_worker

from reliable_queue import (
    Queue,
    QueueDataError,
    QueueLimitError,
    QueueSettings,
    TaskRegistry,
    audit,
    explain,
    stats,
)
from reliable_queue.rate_limits import RateLimit, parse_spec


def test_a_fetch_leases_at_most_what_the_window_allows_and_defers_the_rest(make_queue):
    queue: Queue = make_queue()
    ids = [queue.enqueue("t", {"n": i}) for i in range(5)]
    assert queue.set_limit(2, 60) is False
    assert queue.rate_limit() == RateLimit(2, 60_000)

    first = queue.fetch(10, lease_seconds=300)
    assert [j.job_id for j in first.jobs] == ids[:2] and not first.rate_limited
    deferred = queue.fetch(10)
    assert deferred.jobs == [] and deferred.rate_limited and not deferred.paused
    assert 59 < deferred.wait_seconds <= 60  # until the window reopens (leases: 300 s)
    assert all(explain(queue, i).attempts == 0 for i in ids[2:])  # no attempt charged
    assert queue.ids_in("ready") == list(reversed(ids[2:]))  # no lease held
    assert int(queue.client.hget(queue.keys.key("stats"), "rate_limited")) == 1


def test_a_changed_limit_applies_from_the_next_fetch(make_queue):
    queue: Queue = make_queue()
    for i in range(6):
        queue.enqueue("t", {"n": i})
    queue.set_limit(1, 3600)
    assert len(queue.fetch(10).jobs) == 1
    assert queue.fetch(10).rate_limited  # the hour-long window is used up
    assert queue.set_limit(3, 3600) is True  # not after the old window: now
    assert len(queue.fetch(10).jobs) == 3
    assert queue.clear_limit() is True and queue.rate_limit() is None
    assert len(queue.fetch(10).jobs) == 2
    assert queue.clear_limit() is False


def test_a_window_reopens_on_the_queue_clock(make_queue):
    queue: Queue = make_queue()
    for i in range(3):
        queue.enqueue("t", {"n": i})
    queue.set_limit(1, 0.3)
    assert len(queue.fetch(10).jobs) == 1
    assert queue.fetch(10).rate_limited
    time.sleep(0.35)
    assert len(queue.fetch(10).jobs) == 1


@pytest.mark.parametrize(
    ("n", "per"), [(0, 1), (-1, 1), (1.5, 1), (True, 1), (1, 0), (1, float("nan")), (1, -2)]
)
def test_a_bad_limit_is_refused_and_changes_nothing(make_queue, n, per):
    queue: Queue = make_queue()
    with pytest.raises(QueueLimitError):
        queue.set_limit(n, per)
    assert not queue.client.exists(queue.keys.limit)


@pytest.mark.parametrize(
    "spec",
    # the last two: digits of other scripts (full-width, Arabic-Indic) were read as 5/s
    ["0/s", "-1/s", "nan/s", "abc", "1/x", "", "1.5/s", "\uff15/s", "\u0665/2s"],
)
def test_bad_specs_are_refused(spec):
    with pytest.raises(QueueLimitError):
        parse_spec(spec)


def test_specs_parse():
    assert parse_spec("200/s") == RateLimit(200, 1000)
    assert parse_spec("5/m") == RateLimit(5, 60_000)
    assert parse_spec("1/2s") == RateLimit(1, 2000)
    assert parse_spec("1/2s").text() == "1/2s" and parse_spec("200/s").text() == "200/s"


def test_a_wrong_type_limit_key_is_refused_and_removed_by_clear(make_queue):
    queue: Queue = make_queue()
    job = queue.enqueue("t", {})
    queue.client.set(queue.keys.limit, "junk")
    with pytest.raises(QueueDataError):
        queue.fetch(1)
    with pytest.raises(QueueDataError):
        queue.set_limit(1, 1)
    assert queue.locate(job) == "ready" and explain(queue, job).attempts == 0
    assert queue.clear_limit() is True
    assert [j.job_id for j in queue.fetch(1).jobs] == [job]


def test_a_limit_with_unreadable_fields_is_refused_and_nothing_moves(make_queue):
    queue: Queue = make_queue()
    job = queue.enqueue("t", {})
    queue.client.hset(queue.keys.limit, mapping={"n": "x", "per": "1000"})
    with pytest.raises(QueueDataError):
        queue.fetch(1)
    assert queue.locate(job) == "ready"


def test_one_per_two_seconds_with_a_delayed_job_runs_every_two_seconds(redis_client, key_prefix):
    """bullmq #3325: a delayed job in the queue must not stretch the limit's wait."""
    registry = TaskRegistry()
    starts: list[float] = []
    registry.task("t")(lambda payload, ctx: starts.append(time.monotonic()))
    registry.task("later")(lambda payload, ctx: None)
    settings = QueueSettings(lease_seconds=5.0, max_block_seconds=10.0)
    queue = Queue(redis_client, "limited", prefix=key_prefix, settings=settings)
    queue.set_limit(1, 2)
    for i in range(30):
        queue.enqueue("t", {"n": i})
    queue.enqueue("later", {}, delay=3600)
    with running_worker(
        redis_client, ["limited"], registry, prefix=key_prefix, settings=settings, concurrency=2
    ):
        began = time.monotonic()
        time.sleep(20.0)
    in_window = [s for s in starts if s - began < 20.0]
    assert 9 <= len(in_window) <= 11, len(in_window)
    assert int(redis_client.hget(queue.keys.key("stats"), "rate_limited")) >= 1
    assert stats(queue).rate_limit == RateLimit(1, 2000)
    assert not audit(queue).problems


def test_the_audit_reports_an_unsound_limit_key_and_loses_no_job(make_queue):
    queue: Queue = make_queue()
    job = queue.enqueue("t", {})
    queue.set_limit(5, 1)
    assert audit(queue).problems == []
    queue.client.hset(queue.keys.limit, "n", "0")
    problems = audit(queue).problems
    assert len(problems) == 1 and "rate limit is not readable" in problems[0]
    queue.client.delete(queue.keys.limit)
    queue.client.rpush(queue.keys.limit, "x")
    assert "holds a list" in audit(queue).problems[0]
    assert queue.locate(job) == "ready"
