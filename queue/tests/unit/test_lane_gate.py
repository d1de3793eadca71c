"""The gate of a worker process's lanes: shared for batches, exclusive for a suspect."""

from __future__ import annotations

import threading
from collections.abc import Callable

from reliable_queue.gate import EXCLUSIVE, NONE, SHARED, LaneGate, Ticket


def _in_thread(take: Callable[[Ticket], bool]) -> tuple[threading.Thread, Ticket, list]:
    """Run ``take(ticket)`` in a thread; its result lands in the returned list."""
    ticket, got = Ticket(), []
    thread = threading.Thread(target=lambda: got.append(take(ticket)), daemon=True)
    thread.start()
    return thread, ticket, got


def _until_a_lane_waits_for_the_exclusive_hold(gate: LaneGate, thread: threading.Thread):
    while gate.counts()[2] == 0:
        thread.join(0.001)


def test_lanes_running_batches_hold_the_gate_side_by_side() -> None:
    gate = LaneGate()
    a, b = Ticket(), Ticket()
    assert gate.try_shared(a) and gate.shared(b)
    assert (a.holds, b.holds, gate.counts()) == (SHARED, SHARED, (2, False, 0))
    gate.leave(a)
    gate.leave(b)
    assert (a.holds, b.holds, gate.counts()) == (NONE, NONE, (0, False, 0))


def test_the_exclusive_hold_waits_for_running_batches_and_stops_new_ones() -> None:
    """Writer preference: once a lane waits to run a suspect alone, no new batch
    starts, the running ones end, and then it runs; the others go on after it."""
    gate = LaneGate()
    running = Ticket()
    assert gate.try_shared(running)
    writer, alone, granted = _in_thread(gate.exclusive)
    _until_a_lane_waits_for_the_exclusive_hold(gate, writer)
    assert not gate.try_shared(Ticket())  # no new batch while a suspect waits
    reader, later, shared = _in_thread(gate.shared)
    reader.join(0.05)
    assert reader.is_alive() and writer.is_alive()
    gate.leave(running)
    writer.join(2)
    assert granted == [True] and alone.holds == EXCLUSIVE
    assert gate.counts() == (0, True, 0)
    reader.join(0.05)
    assert reader.is_alive()  # still waiting: the suspect runs alone
    gate.leave(alone)
    reader.join(2)
    assert shared == [True] and later.holds == SHARED
    assert gate.counts() == (1, False, 0)


def test_two_lanes_never_hold_the_exclusive_hold_at_once() -> None:
    gate = LaneGate()
    first = Ticket()
    assert gate.exclusive(first)
    second, ticket, got = _in_thread(gate.exclusive)
    second.join(0.05)
    assert second.is_alive() and not got
    gate.leave(first)
    second.join(2)
    assert got == [True] and ticket.holds == EXCLUSIVE


def test_a_hold_given_back_twice_counts_once() -> None:
    """The time-limit check gives back an abandoned lane's hold, and the lane gives it
    back again when its stuck run returns: the second time changes nothing."""
    gate = LaneGate()
    abandoned, other, alone = Ticket(), Ticket(), Ticket()
    assert gate.shared(abandoned) and gate.shared(other)
    gate.leave(abandoned)
    gate.leave(abandoned)
    assert gate.counts() == (1, False, 0)
    gate.leave(other)
    assert gate.exclusive(alone)
    gate.leave(alone)
    gate.leave(alone)
    assert gate.counts() == (0, False, 0)
    assert gate.try_shared(other)


def test_closing_ends_every_wait_and_refuses_later_holds() -> None:
    gate = LaneGate()
    running = Ticket()
    assert gate.shared(running)
    writer, alone, granted = _in_thread(gate.exclusive)
    _until_a_lane_waits_for_the_exclusive_hold(gate, writer)
    reader, later, shared = _in_thread(gate.shared)
    gate.close()
    writer.join(2)
    reader.join(2)
    assert (granted, shared, alone.holds, later.holds) == ([False], [False], NONE, NONE)
    late = Ticket()
    assert not (gate.try_shared(late) or gate.shared(late) or gate.exclusive(late))
    gate.leave(running)  # a hold granted before the close is given back as usual
    assert gate.counts() == (0, False, 0)
