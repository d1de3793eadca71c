"""A worker's published state, encoded and read back without Redis: times on the Redis
clock, ``gone`` after two publish periods, and every field of a hostile record bounded."""

from __future__ import annotations

import json

import pytest

from reliable_queue.limits import MAX_LANES_PUBLISHED, MAX_WORKER_STATE_BYTES
from reliable_queue.presence import (
    MAX_PUBLISH_EVERY,
    MAX_TEXT_CHARS,
    MIN_PUBLISH_EVERY,
    LaneState,
    StateDecodeError,
    WorkerState,
    decode,
    publish_every,
)

SEEN_MS = 1_700_000_000_000.0


def state(**changes) -> WorkerState:
    fields = {
        "host": "box",
        "pid": 4242,
        "queues": ["stock", "points"],
        "concurrency": 2,
        "batch_size": 50,
        "up_seconds": 60.0,
        "every": 0.5,
        "state": "running",
        "exit_reason": None,
        "counts": {"succeeded": 7, "retried": 1, "not_a_count": 3},
        "lanes": [
            LaneState("stock", "busy", 2.5, "job-1", "orders.stock", 50),
            LaneState("stock", "idle"),
            LaneState("points", "abandoned", 40.0, "job-9", "orders.points", 1),
            LaneState("points", "idle"),
        ],
    }
    fields.update(changes)
    return WorkerState(**fields)


def test_a_state_reads_back_with_its_times_on_the_redis_clock():
    info = decode("box:4242:ab12", state().encode(), SEEN_MS, SEEN_MS + 300)

    assert (info.host, info.pid, info.queues) == ("box", 4242, ("stock", "points"))
    assert info.state == "running" and info.alive
    assert info.started_at == pytest.approx(SEEN_MS / 1000 - 60.0)
    assert info.heartbeat_age == pytest.approx(0.3)
    assert (info.busy, info.idle, info.abandoned) == (1, 2, 1)
    busy = info.lanes[0]
    assert (busy.job_id, busy.task, busy.jobs) == ("job-1", "orders.stock", 50)
    assert busy.since == pytest.approx(SEEN_MS / 1000 - 2.5)
    assert busy.running_seconds == pytest.approx(2.8)  # 2.5 s then, 0.3 s later now
    assert info.lanes[1].since is None and info.lanes[1].job_id is None
    assert info.counts == {"succeeded": 7, "retried": 1}  # only the known counters


def test_a_worker_not_heard_of_for_two_periods_is_gone_with_its_last_state():
    record = state(every=0.5).encode()

    assert decode("w", record, SEEN_MS, SEEN_MS + 1000).state == "running"
    gone = decode("w", record, SEEN_MS, SEEN_MS + 1001)
    assert gone.state == "gone" and not gone.alive
    assert gone.lanes[0].job_id == "job-1"  # what it was doing when last heard of


def test_a_stopped_worker_stays_stopped_and_says_why():
    record = state(state="stopped", exit_reason="signal SIGTERM").encode()

    info = decode("w", record, SEEN_MS, SEEN_MS + 3_600_000)

    assert (info.state, info.exit_reason) == ("stopped", "signal SIGTERM")
    assert not info.alive


def test_the_publish_period_is_half_a_heartbeat_within_bounds():
    assert publish_every(1.0) == 0.5
    assert publish_every(10.0) == MAX_PUBLISH_EVERY  # default lease 30 s: every 5 s
    assert publish_every(3600.0) == MAX_PUBLISH_EVERY
    assert publish_every(0.01) == MIN_PUBLISH_EVERY


def test_a_huge_state_is_cut_to_the_size_the_script_accepts():
    lanes = [LaneState("q", "busy", 1.0, "j" * 5000, "t" * 5000, 1) for _ in range(500)]

    text = state(lanes=lanes, host="h" * 10_000).encode()

    assert len(text.encode()) <= MAX_WORKER_STATE_BYTES
    record = json.loads(text)
    assert record["busy"] == 500  # the counts cover every lane
    assert len(record["lanes"]) <= MAX_LANES_PUBLISHED
    assert len(record["host"]) == MAX_TEXT_CHARS


@pytest.mark.parametrize(
    "raw",
    [
        b"\xff\xfe not utf-8",
        b"not json",
        b"[1, 2]",
        json.dumps({"every": 1, "state": "dancing", "queues": [], "lanes": [], "counts": {}}),
        json.dumps({"every": "1", "state": "running", "queues": [], "lanes": [], "counts": {}}),
        '{"every": NaN, "state": "running", "queues": [], "lanes": [], "counts": {}}',
        json.dumps({"every": 1, "state": "running", "queues": "stock", "lanes": [], "counts": {}}),
        json.dumps(
            {"every": 1, "state": "running", "queues": [], "lanes": [{"state": "x"}], "counts": {}}
        ),
        json.dumps({"every": 1, "state": "running", "up": 1, "host": 7, "queues": [], "lanes": []}),
        b"{" + b" " * MAX_WORKER_STATE_BYTES + b"}",
    ],
)
def test_a_record_that_is_not_a_state_is_refused_by_name(raw):
    with pytest.raises(StateDecodeError):
        decode("w", raw, SEEN_MS, SEEN_MS)


def test_a_foreign_record_is_bounded_field_by_field():
    record = {
        "every": 1e300,  # clamped: such a worker would never read as gone otherwise
        "state": "running",
        "host": "\x1b[31m" + "h" * 1000,
        "pid": -5,
        "up": 1e300,
        "queues": [f"q{i}" for i in range(1000)],
        "lanes": [{"queue": "q", "state": "busy", "busy": -3, "job": "j" * 300}] * 100,
        "counts": {"succeeded": 2**80},
    }

    info = decode("x" * 999, json.dumps(record), SEEN_MS, SEEN_MS + 7_200_001)

    assert info.state == "gone"  # every is at most an hour
    assert len(info.host) == MAX_TEXT_CHARS and len(info.worker_id) == MAX_TEXT_CHARS
    assert info.pid == 0
    assert len(info.queues) == len(info.lanes) == MAX_LANES_PUBLISHED
    assert info.lanes[0].running_seconds is not None and info.lanes[0].running_seconds >= 0
    assert len(info.lanes[0].job_id or "") == MAX_TEXT_CHARS
    assert info.counts["succeeded"] <= 2**53
