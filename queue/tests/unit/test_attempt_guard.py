"""The attempt guard: a block runs only while its delivery holds its lease, and the
time-limit check and the block exclude each other (no Redis: the clock is injected)."""

from __future__ import annotations

import pickle
import threading
from contextlib import contextmanager

import pytest
import redis

from reliable_queue import AttemptLost, Lease, Queue
from reliable_queue.attempts import ALWAYS, GuardPolicy, margin_of
from reliable_queue.heartbeat import LaneRun, LeaseBook
from reliable_queue.job import make_context

LEASE = 8.0


class Clock:
    """Monotonic seconds that move only when told."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def policy(clock: Clock) -> GuardPolicy:
    return GuardPolicy(LEASE, clock)


@contextmanager
def held_by_a_lane(guard):
    """``guard`` held by another thread (a lane) for the duration of the block."""
    entered, leave = threading.Event(), threading.Event()

    def commit() -> None:
        with guard:
            entered.set()
            leave.wait(5)

    lane = threading.Thread(target=commit)
    lane.start()
    try:
        assert entered.wait(5)
        yield
    finally:
        leave.set()
        lane.join(5)


def refusal(guard) -> str | None:
    """The reason ``guard`` refuses a block now, or None when the block ran."""
    try:
        with guard:
            return None
    except AttemptLost as exc:
        return exc.reason


def test_a_fresh_attempt_runs_its_block_and_a_completed_block_is_never_timed_out(policy, clock):
    guard = policy.guard(sent_at=clock.now)
    assert refusal(guard) is None
    assert guard.kept
    clock.now += 60
    assert guard.revoke("timed_out", clock.now) is False  # its effect is in: not timed out


def test_a_timed_out_attempt_is_refused_on_entry(policy, clock):
    guard = policy.guard(sent_at=clock.now)
    assert guard.revoke("timed_out", clock.now) is True
    assert refusal(guard) == "timed_out"
    assert guard.lost == "timed_out" and not guard.kept


def test_the_time_limit_check_skips_a_held_attempt_and_decides_at_a_later_beat(policy, clock):
    guard = policy.guard(sent_at=clock.now)
    with held_by_a_lane(guard):
        assert guard.revoke("timed_out", clock.now) is False  # held: not this beat
    assert guard.revoke("timed_out", clock.now) is False  # and it completed: never
    assert guard.lost is None


def test_a_block_that_raised_leaves_the_attempt_open_to_a_time_out(policy, clock):
    guard = policy.guard(sent_at=clock.now)
    with pytest.raises(RuntimeError), guard:
        raise RuntimeError("the commit failed")
    assert not guard.kept
    assert guard.revoke("timed_out", clock.now) is True


def test_a_hold_longer_than_its_bound_no_longer_defers_the_time_out(clock):
    policy = GuardPolicy(LEASE, clock, hold_limit=2.0)
    guard = policy.guard(sent_at=clock.now)
    with held_by_a_lane(guard):
        clock.now += 1.0
        assert guard.revoke("timed_out", clock.now) is False
        clock.now += 1.5  # held 2.5 s > 2 s
        assert guard.revoke("timed_out", clock.now) is True
    assert refusal(guard) == "timed_out"


def test_a_lease_known_lost_is_refused(policy, clock):
    guard = policy.guard(sent_at=clock.now)
    guard.lose("lease_lost")
    guard.renew(clock.now + LEASE)  # a later renewal does not bring it back
    assert refusal(guard) == "lease_lost"


def test_the_guard_refuses_within_its_margin_of_the_lease_deadline_and_a_renewal_moves_it(
    policy, clock
):
    sent = clock.now
    guard = policy.guard(sent_at=sent)
    clock.now = sent + LEASE - margin_of(LEASE) - 0.01
    assert refusal(guard) is None
    clock.now = sent + LEASE - margin_of(LEASE)
    assert refusal(guard) == "lease_expired"
    guard.renew(clock.now + LEASE)  # the heartbeat's extend, sent now, was accepted
    assert refusal(guard) is None


def test_a_process_frozen_past_its_lease_refuses_when_it_thaws(policy, clock):
    guard = policy.guard(sent_at=clock.now)
    assert refusal(guard) is None
    clock.now += 3 * LEASE  # SIGSTOP ... SIGCONT: nothing ran, not even the heartbeat
    assert refusal(guard) == "lease_expired"


def test_one_thread_may_hold_its_guard_twice(policy, clock):
    """A handler holding its guard may call code that holds it again (no deadlock)."""
    guard = policy.guard(sent_at=clock.now)
    with guard, guard:
        pass
    assert guard.kept and guard.lost is None


def test_a_context_made_outside_a_worker_always_allows():
    ctx = make_context("j1", "q", "t", 1, 5, "7:w", 7, 1.5, None)
    assert ctx.guard is ALWAYS
    with ctx.hold_lease():
        pass
    assert pickle.loads(pickle.dumps(ctx)) == ctx
    assert pickle.loads(pickle.dumps(ALWAYS)) is ALWAYS


def _queue() -> Queue:
    return Queue(redis.Redis(), "q")  # never connects: the book keeps a reference only


def test_the_lease_book_does_not_time_out_a_run_whose_guard_is_held(policy, clock):
    """The time-limit check takes overdue runs out of the book; a run holding its guard
    stays held (and heartbeated) until a later beat finds it free."""
    book = LeaseBook(policy)
    queue = _queue()
    lane = LaneRun(queue)
    held, mate = book.add(queue, [Lease("a", "1:w"), Lease("b", "1:w")], lane, clock.now)
    held.start(deadline=clock.now + 1)
    clock.now += 2
    with held_by_a_lane(held.guard):
        assert book.take_overdue(clock.now) == ([], [])
    assert [h.lease.job_id for h in book.snapshot()] == ["a", "b"]

    other = book.add(queue, [Lease("c", "2:w")], LaneRun(queue), clock.now)[0]
    other.start(deadline=clock.now)
    overdue, mates = book.take_overdue(clock.now + 1)
    assert [h.lease.job_id for h in overdue] == ["c"] and mates == []
    assert refusal(other.guard) == "timed_out"
    assert refusal(held.guard) is None  # completed: never timed out afterwards
    assert refusal(mate.guard) is None  # its lane was not abandoned


def test_the_mates_of_a_timed_out_run_lose_their_guards(policy, clock):
    book = LeaseBook(policy)
    queue = _queue()
    lane = LaneRun(queue)
    hung, unstarted = book.add(queue, [Lease("a", "1:w"), Lease("b", "1:w")], lane, clock.now)
    hung.start(deadline=clock.now + 1)
    overdue, mates = book.take_overdue(clock.now + 2)
    assert (overdue, mates) == ([hung], [unstarted])
    assert refusal(hung.guard) == "timed_out"
    assert refusal(unstarted.guard) == "abandoned"  # handed back: its run must not commit


def test_a_guard_lost_before_any_block_is_sealed_and_refuses_every_block(policy, clock):
    guard = policy.guard(clock())

    guard.lose("lease_lost")

    assert guard.sealed
    assert refusal(guard) == "lease_lost"


def test_a_guard_lost_while_a_block_holds_it_or_after_one_completed_is_not_sealed(policy, clock):
    held = policy.guard(clock())
    with held_by_a_lane(held):
        held.lose("lease_lost")  # the block goes on: only the database can refuse it
    assert held.lost == "lease_lost" and not held.sealed

    done = policy.guard(clock())
    assert refusal(done) is None
    done.lose("lease_lost")
    assert not done.sealed  # its effect is in


def test_a_time_out_seals_a_guard_no_block_entered_not_one_held_past_the_hold_limit(policy, clock):
    waiting = policy.guard(clock())
    assert waiting.revoke("timed_out", clock())
    assert waiting.sealed

    holding = policy.guard(clock())
    with held_by_a_lane(holding):
        clock.now += policy.hold_limit + 1
        assert holding.revoke("timed_out", clock())  # no longer deferred...
    assert not holding.sealed  # ...but the block it did not stop may have committed
    assert ALWAYS.sealed is False
