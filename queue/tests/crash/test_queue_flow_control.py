"""Priorities and per-key caps hold across real worker processes killed with SIGKILL
(ADR 0033): a high-priority job goes first whatever route brought it back to waiting,
and a key's cap counts leases across processes and gives back the slots of the dead."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from queue_helpers import wait_until
from queue_worker_process import deliveries, effects, ends

from reliable_queue import EnqueueRequest, Queue, audit, explain, scripts, stats
from reliable_queue.scripts import script_source

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

SETTINGS = {"lease_seconds": 1.0, "max_block_seconds": 0.25}
NO_BACKOFF = {"base_delay": 0.0, "jitter": False}


def load_scripts(queue: Queue) -> None:
    """Cache every script in Redis first. A lane sends a settlement and its next fetch in
    one round trip; a script Redis has not cached yet is re-sent alone after the others
    ran (NOSCRIPT), so the first retry on a fresh server could follow the next fetch."""
    for path in (Path(scripts.__file__).parent / "lua").glob("[a-z]*.lua"):
        queue.client.script_load(script_source(path.stem))


def lows_and_high(queue: Queue, high: dict, **extra: object) -> tuple[list[str], str]:
    """Twenty waiting jobs of priority 8, then one of priority 1 with payload ``high``."""
    lows = queue.enqueue_many([EnqueueRequest("record", {"sleep": 0.05}, priority=8)] * 20)
    return lows, queue.enqueue("record", high, priority=1, **extra)


def delivered(effects_db, job_ids: set[str]) -> list[str]:
    return [d[0] for d in deliveries(effects_db) if d[0] in job_ids]


def test_a_high_priority_job_goes_first_after_a_failure_a_kill_9_reap_and_a_redrive(
    make_queue, spawn_worker, effects_db
):
    # a failure: retried at once (no backoff), it is served before every waiting low job
    failed = make_queue("failed")
    load_scripts(failed)
    lows, high = lows_and_high(failed, {"fail_deliveries": 1})
    spawn_worker(queue="failed", batch_size=1, settings=SETTINGS, retry=NO_BACKOFF)
    wait_until(lambda: failed.locate(high) == "done", timeout=15)
    assert delivered(effects_db, {high, *lows})[:2] == [high, high]
    assert explain(failed, high).attempts == 2

    # a kill -9: its first run kills the worker; the reaped job goes to the front of its
    # band, and the next worker starts it before every waiting low job
    reaped = make_queue("reaped")
    lows, high = lows_and_high(reaped, {"die_deliveries": 1})
    dying = spawn_worker(queue="reaped", batch_size=1, settings=SETTINGS)
    assert dying.wait(timeout=15) == -signal.SIGKILL
    time.sleep(SETTINGS["lease_seconds"] + 0.2)  # its lease has expired
    spawn_worker(queue="reaped", batch_size=1, settings=SETTINGS)
    wait_until(lambda: reaped.locate(high) == "done", timeout=15)
    assert delivered(effects_db, {high, *lows})[:2] == [high, high]
    assert stats(reaped).counters["reaped"] == 1

    # a dead letter redriven: back in its band, before every waiting low job
    redriven = make_queue("redriven")
    lows, high = lows_and_high(redriven, {"fail_deliveries": 1}, max_attempts=1)
    worker = spawn_worker(queue="redriven", batch_size=1, settings=SETTINGS)
    wait_until(lambda: redriven.locate(high) == "dead", timeout=15)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=15) == 0
    waiting = [j for j in lows if redriven.locate(j) == "ready"]
    assert waiting  # low jobs still wait
    assert redriven.dead_letters.redrive(ids=[high]).redriven == [high]
    before = len(delivered(effects_db, {high, *lows}))
    spawn_worker(queue="redriven", batch_size=1, settings=SETTINGS)
    wait_until(lambda: redriven.locate(high) == "done", timeout=15)
    assert delivered(effects_db, {high, *lows})[before] == high
    for queue in (failed, reaped, redriven):
        assert audit(queue, record=False).clean


def busiest(queue: Queue, keyed: set[str]) -> int:
    """Jobs of ``keyed`` leased now (one ZRANGE of the queue's active set)."""
    active = {x.decode() for x in queue.client.zrange(queue.keys.key("active"), 0, -1)}
    return len(active & keyed)


def test_a_key_cap_of_two_holds_across_three_workers_and_recovers_after_kill_9(
    make_queue, spawn_worker, effects_db
):
    queue = make_queue()
    queue.set_key_cap(2)
    big = set(queue.enqueue_many([EnqueueRequest("record", {"sleep": 0.2}, fairness_key="k")] * 24))
    other = set(
        queue.enqueue_many([EnqueueRequest("record", {"sleep": 0.2}, fairness_key="o")] * 8)
    )
    spec = {"batch_size": 2, "concurrency": 2, "settings": {"lease_seconds": 2.0}}
    workers = [spawn_worker(**spec) for _ in range(3)]
    most = 0
    deadline = time.monotonic() + 20
    while len(effects(effects_db)) < 8 and time.monotonic() < deadline:
        most = max(most, busiest(queue, big))
        time.sleep(0.01)
    assert 1 <= most <= 2
    for worker in workers:
        worker.send_signal(signal.SIGKILL)
    for worker in workers:
        assert worker.wait(timeout=10) == -signal.SIGKILL
    killed_at = time.time()
    assert busiest(queue, big) <= 2

    # the dead workers' slots come back when their leases are reaped: all jobs finish
    workers = [spawn_worker(**spec) for _ in range(3)]
    deadline = time.monotonic() + 60
    while len(effects(effects_db)) < len(big | other) and time.monotonic() < deadline:
        most = max(most, busiest(queue, big))
        time.sleep(0.01)
    assert sorted(effects(effects_db)) == sorted(big | other)
    assert most <= 2
    # no two runs of key k beyond two at once, the killed runs lasting until the kill
    runs = {}
    for job_id, _, _, _, pid, at in deliveries(effects_db):
        runs[(job_id, pid)] = [at, killed_at]
    for job_id, pid, at in ends(effects_db):
        runs[(job_id, pid)][1] = at
    edges = sorted(
        (t, step)
        for (job_id, _), (start, end) in runs.items()
        if job_id in big
        for t, step in ((start, 1), (end, -1))
    )
    level = peak = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    assert peak <= 2
    wait_until(lambda: not queue.client.exists(queue.keys.key("running")), timeout=10)
    assert audit(queue, record=False).clean
