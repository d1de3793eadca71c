"""Graceful shutdown of a real worker process on SIGTERM, and a second signal."""

import signal
import time
from pathlib import Path

import pytest
from queue_helpers import wait_until
from queue_worker_process import deliveries, effects

from reliable_queue import EnqueueRequest, explain, stats
from reliable_queue.shutdown import REPEAT_WINDOW_SECONDS

pytestmark = pytest.mark.chaos


def last_line(tmp_path: Path, n: int = 0) -> str:
    """The last line worker process ``n`` wrote."""
    return (tmp_path / f"worker-{n}.log").read_text().rstrip().splitlines()[-1]


def test_sigterm_finishes_the_in_flight_job_and_hands_back_the_unstarted_batch(
    make_queue, spawn_worker, effects_db, tmp_path: Path
):
    queue = make_queue()
    ids = queue.enqueue_many([EnqueueRequest("record", {"sleep": 1.0}) for _ in range(3)])
    proc = spawn_worker(batch_size=3)
    wait_until(lambda: deliveries(effects_db), timeout=10)

    proc.send_signal(signal.SIGTERM)

    assert proc.wait(timeout=10) == 0
    assert effects(effects_db) == [ids[0]]
    assert explain(queue, ids[0]).state == "done"
    for job_id in ids[1:]:
        info = explain(queue, job_id)
        assert (info.state, info.attempts) == ("ready", 0)  # the hand-back is no attempt
    s = stats(queue)
    assert (s.counters["succeeded"], s.counters["released"], s.active) == (1, 2, 0)
    assert [d[0] for d in deliveries(effects_db)] == [ids[0]]
    assert "stopped (signal SIGTERM)" in last_line(tmp_path)  # its last line says why


def test_second_signal_exits_at_once_and_the_lease_is_reaped_later(
    make_queue, spawn_worker, effects_db, tmp_path: Path
):
    queue = make_queue()
    job_id = queue.enqueue("record", {"sleep": 10.0})
    proc = spawn_worker(batch_size=1, settings={"lease_seconds": 1.0})
    wait_until(lambda: deliveries(effects_db), timeout=10)

    proc.send_signal(signal.SIGTERM)
    time.sleep(REPEAT_WINDOW_SECONDS + 0.2)  # a second request, not a forwarded copy
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)

    assert proc.wait(timeout=5) == 128 + signal.SIGTERM
    assert time.monotonic() - sent < 3.0  # not the 10 s grace: at once, allowing a loaded machine
    assert "second signal (SIGTERM), exiting now" in last_line(tmp_path)
    assert explain(queue, job_id).state == "active" and effects(effects_db) == []
    job = wait_until(lambda: queue.fetch(1).jobs, timeout=10)[0]
    # a first loss with the worker is not charged (ADR 0002): the same attempt again,
    # under a fresh lease; the job is now a suspect
    assert (job.job_id, job.attempt) == (job_id, 1)
    assert explain(queue, job_id).last_failure["reason"] == "lease_expired"


def test_sigterm_delivered_twice_at_once_still_drains_gracefully(
    make_queue, spawn_worker, effects_db, tmp_path: Path
):
    # `timeout`, systemd or a container stop signals the process group of
    # `uv run orders worker`, and uv forwards the same SIGTERM: two within ~1 ms
    queue = make_queue()
    job_id = queue.enqueue("record", {"sleep": 1.0})
    proc = spawn_worker(batch_size=1)
    wait_until(lambda: deliveries(effects_db), timeout=10)

    proc.send_signal(signal.SIGTERM)
    time.sleep(0.001)
    proc.send_signal(signal.SIGTERM)

    assert proc.wait(timeout=10) == 0
    assert effects(effects_db) == [job_id]
    assert explain(queue, job_id).state == "done"
    log = (tmp_path / "worker-0.log").read_text()
    assert "finishing in-flight jobs" in log
    assert "exiting now" not in log


def test_jobs_still_running_after_the_grace_period_are_handed_back(
    make_queue, spawn_worker, effects_db
):
    queue = make_queue()
    slow, unstarted = queue.enqueue_many(
        [EnqueueRequest("record", {"sleep": 5.0}), EnqueueRequest("record", {})]
    )
    proc = spawn_worker(batch_size=2, grace_seconds=0.5)
    wait_until(lambda: deliveries(effects_db), timeout=10)

    proc.send_signal(signal.SIGTERM)
    sent = time.monotonic()

    assert proc.wait(timeout=5) == 0
    assert time.monotonic() - sent < 4.5  # grace 0.5 s, well before the 5 s job ends
    started = explain(queue, slow)
    assert (started.state, started.attempts) == ("ready", 1)
    assert "shut down" in started.last_failure["error"]
    assert (explain(queue, unstarted).state, explain(queue, unstarted).attempts) == ("ready", 0)
    assert effects(effects_db) == []
