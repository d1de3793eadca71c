"""Time limits that stop anything: a task's handler in a child process of its lane.

A handler stuck in one C call that holds the GIL (``ctypes.PyDLL``'s libc ``sleep``,
as a catastrophic regex or a stuck extension would be) freezes every thread of its
process: the heartbeat, the time-limit check and the other lanes. With
``isolation="process"`` the lane kills the handler's child at the run's time limit
and the rest of the worker never notices (docs/adr/0026-process-isolation-per-task.md).
Real worker processes (queue_worker_process.py), real children, real SIGKILLs.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from queue_helpers import wait_until
from queue_worker_process import deliveries, effects

from reliable_queue import EnqueueRequest, explain, stats

pytestmark = pytest.mark.chaos

LIMIT = 1.0
SETTINGS = {"lease_seconds": 2.0, "max_block_seconds": 0.25}
RETRY = {"time_limit": LIMIT, "max_attempts": 2, "base_delay": 0.1, "jitter": False}
KILL_BOUND = 0.5  # seconds past the limit by which the child is gone
TWICE = 2  # max attempts of every job (the job records carry it)


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, killed and not yet reaped, counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def runs_of(db: Path, job_id: str) -> list[tuple[int, int, float]]:
    """``(attempt, pid, start time)`` of each logged delivery of ``job_id``."""
    return [(d[2], d[4], d[5]) for d in deliveries(db) if d[0] == job_id]


def test_a_thread_cannot_stop_a_handler_holding_the_gil_in_one_c_call(
    make_queue, spawn_worker, effects_db
):
    """What thread isolation cannot do (the default, documented): the C call freezes the
    whole worker, so the run goes on past its 1 s limit to its effect, 3 s after it
    began, and a quick job of the process's other lane waits for it."""
    jobs, other = make_queue("jobs"), make_queue("other")
    proc = spawn_worker(queues=["jobs", "other"], settings=SETTINGS, retry=RETRY)
    stuck = jobs.enqueue("c_sleep", {"seconds": 3}, max_attempts=TWICE)
    [(_, pid, began)] = wait_until(lambda: runs_of(effects_db, stuck), timeout=20)
    assert pid == proc.pid  # in the worker's own process
    quick = other.enqueue("record", {})
    wait_until(lambda: stuck in effects(effects_db), timeout=10)
    applied_after = time.time() - began
    wait_until(lambda: quick in effects(effects_db), timeout=10)
    quick_after = time.time() - began
    assert applied_after >= 3.0 - 0.1  # the limit did not stop it
    assert quick_after >= 3.0 - 0.1  # nothing else of the process ran meanwhile
    assert proc.poll() is None


def test_a_handler_holding_the_gil_is_killed_at_its_limit_in_its_own_process(
    make_queue, spawn_worker, effects_db
):
    """Each run is killed at its limit plus a small bound and fails as timed_out (retried
    once, then dead-lettered); its effect, written after the C call, never lands; and a
    quick job of the worker's other lane finishes meanwhile."""
    jobs, other = make_queue("jobs"), make_queue("other")
    proc = spawn_worker(
        queues=["jobs", "other"], settings=SETTINGS, retry=RETRY, isolation="process"
    )
    stuck = jobs.enqueue("c_sleep", {"seconds": 60}, max_attempts=TWICE)
    [(_, pid, began)] = wait_until(lambda: runs_of(effects_db, stuck), timeout=30)
    assert pid != proc.pid  # a child of the worker runs it
    quick = other.enqueue("record", {})
    wait_until(lambda: quick in effects(effects_db), timeout=5)
    assert time.time() - began < LIMIT  # done while the stuck run was still in its C call
    assert alive(pid)

    gone: dict[int, float] = {}  # pid -> when it was seen dead
    deadline = time.monotonic() + 30
    while explain(jobs, stuck).state != "dead":
        assert time.monotonic() < deadline, "the stuck job was not dead-lettered"
        for _, pid, _ in runs_of(effects_db, stuck):
            if pid not in gone and not alive(pid):
                gone[pid] = time.time()
        time.sleep(0.01)
    runs = runs_of(effects_db, stuck)
    assert [attempt for attempt, _, _ in runs] == [1, 2]
    for _, pid, began in runs:
        wait_until(lambda pid=pid: not alive(pid) and gone.setdefault(pid, time.time()), 5)
        assert LIMIT - 0.2 <= gone[pid] - began <= LIMIT + KILL_BOUND, (pid, gone[pid] - began)
    letter = jobs.dead_letters.show(stuck)
    assert (letter.reason, letter.attempts) == ("timed_out", 2)
    assert stuck not in effects(effects_db)  # no run got past its C call
    assert stats(jobs).counters.get("timed_out") == 2
    assert proc.poll() is None  # the worker lives on


def test_a_child_killed_from_outside_mid_run_fails_that_run_and_the_job_is_retried(
    make_queue, spawn_worker, effects_db, tmp_path
):
    jobs = make_queue("jobs")
    proc = spawn_worker(settings=SETTINGS, retry=dict(RETRY, time_limit=0), isolation="process")
    job_id = jobs.enqueue("hang_first", {}, max_attempts=TWICE)
    [(_, pid, _)] = wait_until(lambda: runs_of(effects_db, job_id), timeout=30)
    os.kill(pid, signal.SIGKILL)  # as an OOM killer or an operator would
    wait_until(lambda: job_id in effects(effects_db), timeout=20)
    assert [attempt for attempt, _, _ in runs_of(effects_db, job_id)] == [1, 2]
    wait_until(lambda: explain(jobs, job_id).state == "done", timeout=5)
    assert explain(jobs, job_id).attempts == 2  # an ordinary failure: charged, retried
    assert proc.poll() is None
    log = (tmp_path / "worker-0.log").read_text()
    assert f"(pid {pid}) running task 'hang_first' died of signal SIGKILL (9)" in log


def test_a_batch_call_killed_at_its_limit_is_handed_back_and_only_the_stuck_job_is_charged(
    make_queue, spawn_worker, effects_db
):
    """One handler call ran the whole batch, so its kill cannot tell the stuck job: the
    batch goes back uncharged, each job runs alone, and only the stuck one times out."""
    jobs = make_queue("jobs")
    batch = [EnqueueRequest("batch_record", {}, max_attempts=TWICE) for _ in range(3)]
    innocent = jobs.enqueue_many(batch[:1])
    stuck = jobs.enqueue("batch_record", {"c_sleep": 60}, max_attempts=TWICE)
    innocent += jobs.enqueue_many(batch[1:])
    proc = spawn_worker(settings=SETTINGS, retry=RETRY, isolation="process", batch_size=4)
    wait_until(lambda: explain(jobs, stuck).state == "dead", timeout=40)
    wait_until(lambda: all(explain(jobs, j).state == "done" for j in innocent), timeout=10)
    assert [explain(jobs, j).attempts for j in innocent] == [1, 1, 1]
    assert [attempt for attempt, _, _ in runs_of(effects_db, stuck)] == [1, 1, 2]
    letter = jobs.dead_letters.show(stuck)
    assert (letter.reason, letter.attempts) == ("timed_out", 2)
    assert sorted(effects(effects_db)) == sorted(innocent)
    assert proc.poll() is None


def test_a_batch_call_whose_child_dies_is_handed_back_and_only_its_culprit_is_charged(
    make_queue, spawn_worker, effects_db
):
    """A child that exits mid-batch (as a segfault or an OOM kill would) sinks no
    batch-mate: they run alone, and the job that kills its child alone fails as an
    ordinary failure, naming the exit, until it is dead-lettered."""
    jobs = make_queue("jobs")
    batch = [EnqueueRequest("batch_record", {}, max_attempts=TWICE) for _ in range(3)]
    innocent = jobs.enqueue_many(batch[:1])
    culprit = jobs.enqueue("batch_record", {"exit": 3}, max_attempts=TWICE)
    innocent += jobs.enqueue_many(batch[1:])
    proc = spawn_worker(settings=SETTINGS, retry=RETRY, isolation="process", batch_size=4)
    wait_until(lambda: explain(jobs, culprit).state == "dead", timeout=40)
    wait_until(lambda: all(explain(jobs, j).state == "done" for j in innocent), timeout=10)
    assert [explain(jobs, j).attempts for j in innocent] == [1, 1, 1]
    assert [attempt for attempt, _, _ in runs_of(effects_db, culprit)] == [1, 1, 2]
    letter = jobs.dead_letters.show(culprit)
    assert (letter.reason, letter.attempts) == ("retries_exhausted", 2)
    assert "running task 'batch_record' exited with status 3" in letter.error
    assert sorted(effects(effects_db)) == sorted(innocent)
    assert proc.poll() is None
