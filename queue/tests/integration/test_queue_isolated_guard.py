"""An isolated child's attempt guard is the lane's: holds cross the process boundary,
are refused as they would be in-process, defer the kill for at most one lease, and
none is granted once the time limit decided. Real child processes, real Redis."""

from __future__ import annotations

import threading
import time

import pytest
from isolated_tasks import PREFIX_ENV, URL_ENV, registry
from queue_helpers import running_worker, wait_until

from reliable_queue import AttemptLost, PermanentError, Queue, QueueSettings, explain, stats
from reliable_queue.attempts import GuardPolicy
from reliable_queue.errors import IsolatedError
from reliable_queue.isolation import ChildProcess, Finished, Killed
from reliable_queue.job import make_context

FACTORY = "isolated_tasks:registry"
SETTINGS = QueueSettings(lease_seconds=1.5, max_block_seconds=0.2)  # hold bound 1.5 s


@pytest.fixture
def tasks_env(monkeypatch, redis_url, key_prefix) -> str:
    """The children's factory finds this test's Redis and key space; returns the prefix."""
    monkeypatch.setenv(URL_ENV, redis_url)
    monkeypatch.setenv(PREFIX_ENV, key_prefix)
    return key_prefix


def marker(client, prefix: str, job_id: str, kind: str = "marker") -> bytes | None:
    return client.get(f"{prefix}:{kind}:{job_id}")


def serve(redis_client, prefix: str, settings: QueueSettings = SETTINGS):
    return running_worker(
        redis_client, ["jobs"], registry(), prefix=prefix, settings=settings,
        isolated_registry=FACTORY,
    )  # fmt: skip


def test_a_guarded_commit_in_a_child_runs_inside_the_delivery_guard(redis_client, tasks_env):
    queue = Queue(redis_client, "jobs", prefix=tasks_env, registry=registry())
    with serve(redis_client, tasks_env):
        job_id = queue.enqueue("commit", {})
        wait_until(lambda: explain(queue, job_id).state == "done", timeout=20)
    assert marker(redis_client, tasks_env, job_id) is not None


def test_a_hold_the_lane_refuses_raises_attempt_lost_in_the_child(redis_client, tasks_env):
    """The heartbeat stops (a stalled worker): the lease's local deadline passes, the
    lane refuses the child's hold with the reason it gives in-process, and the retry
    commits."""
    queue = Queue(redis_client, "jobs", prefix=tasks_env, registry=registry())
    with serve(redis_client, tasks_env) as worker:
        worker.heartbeat.paused.set()
        job_id = queue.enqueue("late_commit", {"sleep": SETTINGS.lease_seconds * 1.2})
        wait_until(lambda: marker(redis_client, tasks_env, job_id, "refused"), timeout=20)
        worker.heartbeat.paused.clear()
        wait_until(lambda: explain(queue, job_id).state == "done", timeout=20)
    reason, refused_token = marker(redis_client, tasks_env, job_id, "refused").split()
    assert reason == b"lease_expired"
    assert int(marker(redis_client, tasks_env, job_id)) > int(refused_token)  # a later delivery


def test_a_hold_in_progress_at_the_limit_defers_the_kill_and_its_commit_stands(
    redis_client, tasks_env
):
    """Limit 0.5 s, a guarded block of 1 s begun at once: the lane does not kill the child
    while it holds the guard, and a run whose block completed is not timed out."""
    queue = Queue(redis_client, "jobs", prefix=tasks_env, registry=registry())
    with serve(redis_client, tasks_env, QueueSettings(lease_seconds=2.0, max_block_seconds=0.2)):
        job_id = queue.enqueue("long_hold", {"hold": 1.0})
        wait_until(lambda: explain(queue, job_id).state == "done", timeout=20)
    assert marker(redis_client, tasks_env, job_id) is not None
    assert explain(queue, job_id).attempts == 1
    assert stats(queue).counters.get("timed_out", 0) == 0


def test_a_hold_longer_than_one_lease_is_killed_and_commits_nothing(redis_client, tasks_env):
    queue = Queue(redis_client, "jobs", prefix=tasks_env, registry=registry())
    with serve(redis_client, tasks_env) as worker:
        job_id = queue.enqueue("long_hold", {"hold": 30})
        wait_until(lambda: explain(queue, job_id).state == "active", timeout=20)
        began = time.monotonic()
        wait_until(lambda: explain(queue, job_id).state == "dead", timeout=20)
        ended = time.monotonic() - began
    # killed at the hold bound (one lease), not at the end of the 30 s block; the
    # margin is for a loaded machine's process start and polling (seen: 6.7 s)
    assert ended < 15.0
    assert queue.dead_letters.show(job_id).reason == "timed_out"
    assert worker.counters.counts["isolated_killed"] == 1
    assert marker(redis_client, tasks_env, job_id) is None


def test_a_child_whose_factory_fails_fails_the_run_with_the_factory_error(
    redis_client, tasks_env, monkeypatch
):
    queue = Queue(redis_client, "jobs", prefix=tasks_env, registry=registry())
    with serve(redis_client, tasks_env):
        monkeypatch.setenv("ISOLATED_TASKS_FAIL", "1")  # the children see it, not the worker
        job_id = queue.enqueue("commit", {}, max_attempts=1)
        wait_until(lambda: explain(queue, job_id).state == "dead", timeout=30)
    letter = queue.dead_letters.show(job_id)
    assert letter.reason == "retries_exhausted"
    assert "could not build its registry with isolated_tasks:registry" in letter.error
    assert "RuntimeError: the factory refuses on purpose" in letter.error


class SteppedClock:
    """Monotonic seconds that a test moves on by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def one_job(policy: GuardPolicy, task: str = "hold_at"):
    guard = policy.guard(policy.clock())
    return make_context("job-1", "jobs", task, 1, 1, "1:w", 1, 0.0, None, guard)


@pytest.fixture
def child(tasks_env):
    clock = SteppedClock()  # a lease far longer than the steps: only the limit passes
    process = ChildProcess(FACTORY, GuardPolicy(1000.0, clock), label="test")
    process.ready()
    try:
        yield process
    finally:
        process.close()


def test_a_hold_asked_before_the_limit_is_granted(child, tmp_path):
    ctx = one_job(child.policy)
    path = tmp_path / "effect"
    result = child.call("hold_at", [({"wait": 0.1, "path": str(path)}, ctx)], 1050.0)
    assert result == Finished([None])
    assert path.read_text() == "committed"
    assert ctx.guard.kept


def test_no_hold_is_granted_once_the_time_limit_passed(child, tmp_path):
    """The limit passes while the child is still before its hold: the lane decides the
    time-out before it reads the hold, kills the child, and nothing is committed."""
    ctx = one_job(child.policy)
    path = tmp_path / "effect"
    clock = child.policy.clock
    stepper = threading.Timer(0.2, lambda: setattr(clock, "now", clock.now + 100.0))
    stepper.start()
    try:
        result = child.call("hold_at", [({"wait": 0.6, "path": str(path)}, ctx)], 1050.0)
    finally:
        stepper.cancel()
    assert result == Killed(kept=False)
    assert ctx.guard.lost == "timed_out"
    time.sleep(0.8)  # past the moment the child would have written
    assert not path.exists()
    assert child.pid is None


def test_a_childs_errors_come_back_as_its_own_type_and_traceback(child):
    policy = child.policy
    value, permanent, lost = (one_job(policy, "fail") for _ in range(3))
    pairs = [({"kind": "value"}, value)]
    [error] = child.call("fail", pairs, None).errors  # type: ignore[union-attr]
    assert isinstance(error, IsolatedError) and not isinstance(error, PermanentError)
    assert (error.type_name, error.message) == ("ValueError", "bad value at attempt 1")
    assert 'raise ValueError(f"bad value' in error.traceback_text
    [error] = child.call("fail", [({"kind": "permanent"}, permanent)], None).errors  # type: ignore[union-attr]
    assert isinstance(error, PermanentError) and error.type_name == "PermanentError"
    [error] = child.call("fail", [({"kind": "lost"}, lost)], None).errors  # type: ignore[union-attr]
    assert isinstance(error, AttemptLost) and error.reason == "lease_lost"


def test_a_child_dies_with_the_thread_that_started_it(tasks_env):
    """No orphan runs on: the child is tied to its lane's thread (PR_SET_PDEATHSIG)."""
    started: list[ChildProcess] = []

    def lane() -> None:
        process = ChildProcess(FACTORY, GuardPolicy(30.0))
        process.ready()
        started.append(process)

    thread = threading.Thread(target=lane)
    thread.start()
    thread.join()
    [process] = started
    proc = process._proc
    assert proc is not None
    proc.wait(5)  # SIGKILLed when the thread ended
    assert proc.returncode == -9
    process.close()
