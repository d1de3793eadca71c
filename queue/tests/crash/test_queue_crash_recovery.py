"""Worker processes killed with SIGKILL at the worst moments lose nothing.

Each worker is a real process (queue_worker_process.py) logging its deliveries and
applying its effects in a SQLite file, so effects can be counted after the crash.
"""

import signal
import time

import pytest
from queue_helpers import wait_until
from queue_worker_process import deliveries, effects

from reliable_queue import EnqueueRequest, explain, stats

pytestmark = pytest.mark.chaos

LEASE_1S = {"lease_seconds": 1.0, "max_block_seconds": 0.5}
LEASE_HALF_S = {"lease_seconds": 0.5, "max_block_seconds": 0.25}


def test_crash_between_fetch_and_lease_loses_nothing(make_queue, spawn_worker, effects_db):
    # fault 1: the job was popped, then recorded as in flight; a crash between lost it.
    # Here fetch and lease are one script: a worker killed right after fetching leaves
    # the job leased, and the lease is reaped.
    queue = make_queue()
    job_id = queue.enqueue("record", {})

    crashed = spawn_worker(kill="after_fetch", settings=LEASE_1S)
    assert crashed.wait(timeout=15) == -signal.SIGKILL
    assert explain(queue, job_id).state == "active"

    spawn_worker(settings=LEASE_1S)
    wait_until(lambda: explain(queue, job_id).state == "done", timeout=10)

    assert effects(effects_db) == [job_id]
    # a first loss is not charged: the job may never have started (ADR 0002)
    assert explain(queue, job_id).attempts == 1
    assert stats(queue).counters["reaped"] == 1


def test_crash_after_effect_before_ack_redelivers_and_the_effect_applies_once(
    make_queue, spawn_worker, effects_db
):
    queue = make_queue()
    job_id = queue.enqueue("record", {})

    crashed = spawn_worker(kill="before_settle", settings=LEASE_1S)
    assert crashed.wait(timeout=15) == -signal.SIGKILL
    assert effects(effects_db) == [job_id] and explain(queue, job_id).state == "active"

    spawn_worker(settings=LEASE_1S)
    wait_until(lambda: explain(queue, job_id).state == "done", timeout=10)

    # the lost delivery is not charged: the redelivery is attempt 1 again, with a
    # higher fencing token
    runs = deliveries(effects_db)
    assert [(d[0], d[2]) for d in runs] == [(job_id, 1), (job_id, 1)]
    assert runs[1][3] > runs[0][3]
    assert effects(effects_db) == [job_id]
    assert stats(queue).counters["succeeded"] == 1


def test_kill_9_mid_run_then_restart_does_every_job_exactly_once(
    make_queue, spawn_worker, effects_db
):
    # the scenario: a worker fetching 2 at a time, 20 jobs, kill -9 after 5 acks
    queue = make_queue()
    ids = queue.enqueue_many([EnqueueRequest("record", {"sleep": 0.05}) for _ in range(20)])

    first = spawn_worker(batch_size=2, settings=LEASE_1S)
    wait_until(lambda: stats(queue).counters["succeeded"] >= 5, timeout=15, interval=0.002)
    first.send_signal(signal.SIGKILL)
    assert first.wait(timeout=10) == -signal.SIGKILL
    acked_at_kill = stats(queue).counters["succeeded"]
    assert 5 <= acked_at_kill < 20

    spawn_worker(batch_size=2, settings=LEASE_1S)
    wait_until(lambda: stats(queue).counters["succeeded"] == 20, timeout=20)
    time.sleep(0.2)  # nothing more may happen

    done = effects(effects_db)
    assert sorted(done) == sorted(ids)  # every effect applied, none twice
    s = stats(queue)
    assert (s.counters["succeeded"], s.done, s.dead, s.ready, s.active) == (20, 20, 0, 0, 0)
    assert queue.dead_letters.size() == 0
    assert {d[0] for d in deliveries(effects_db)} == set(ids)


@pytest.mark.parametrize("batch_size", [1, 10, 100])
def test_a_poison_job_dies_alone_whatever_the_batch_size(
    make_queue, spawn_worker, effects_db, batch_size
):
    # 1 job that kills its worker among 29 normal ones, max 3 attempts, the worker
    # restarted after each death: only the poison job is dead-lettered and every
    # normal job runs, however many of them were leased with it (at 100, as at the
    # application's default batch of 50, all 30 are leased in one batch)
    queue = make_queue()
    before = queue.enqueue_many([EnqueueRequest("record", {}, max_attempts=3) for _ in range(5)])
    poison = queue.enqueue("suicide", {}, max_attempts=3)
    after = queue.enqueue_many([EnqueueRequest("record", {}, max_attempts=3) for _ in range(24)])
    normal = before + after

    def finished():
        s = stats(queue)
        return s.dead >= 1 and s.counters["succeeded"] == 29

    deaths = 0
    deadline = time.monotonic() + 40
    while not finished():
        assert time.monotonic() < deadline, "supervised workers did not finish"
        proc = spawn_worker(batch_size=batch_size, settings=LEASE_HALF_S)
        while proc.poll() is None and not finished():
            time.sleep(0.02)
        if proc.poll() is not None:
            assert proc.returncode == -signal.SIGKILL
            deaths += 1

    assert queue.dead_letters.size() == 1
    letter = queue.dead_letters.show(poison)
    assert (letter.reason, letter.attempts, letter.task) == ("worker_lost", 3, "suicide")
    assert stats(queue).counters["dead:worker_lost"] == 1
    assert sorted(effects(effects_db)) == sorted(normal)
    ran = {d[0] for d in deliveries(effects_db)}
    assert set(normal) <= ran
    # no normal job was ever charged for the poison job's crashes
    assert all(explain(queue, j).attempts == 1 for j in normal)
    poison_runs = [d[2] for d in deliveries(effects_db) if d[0] == poison]
    assert poison_runs == [1, 1, 2, 3]  # the first loss uncharged, then 3 runs alone
    assert deaths == 4
