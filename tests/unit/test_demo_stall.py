"""The demo notices a run where nothing happens, and sums up violations readably."""

from __future__ import annotations

from orders.cli.demo import violation_lines
from orders.demo.stall import StallWatch


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_no_finished_step_for_the_stall_window_with_work_pending_is_a_stall():
    clock = FakeClock()
    watch = StallWatch(30.0, clock)
    assert not watch.stalled(0, pending=True)
    clock.now += 29
    assert not watch.stalled(0, pending=True)
    clock.now += 2
    assert watch.stalled(0, pending=True)


def test_a_step_finishing_restarts_the_stall_window():
    clock = FakeClock()
    watch = StallWatch(30.0, clock)
    watch.stalled(0, pending=True)
    clock.now += 25
    assert not watch.stalled(1, pending=True)
    clock.now += 25
    assert not watch.stalled(1, pending=True)
    clock.now += 6
    assert watch.stalled(1, pending=True)


def test_violations_are_counted_per_invariant_and_cut_with_and_n_more():
    violations = [
        {"invariant": "order_settled", "order_id": i, "part_id": None, "detail": "still placed"}
        for i in range(500)
    ] + [
        {"invariant": "stock_conservation", "order_id": None, "part_id": 7, "detail": "off by 2"},
        {"invariant": "stock_conservation", "order_id": None, "part_id": 8, "detail": "off by 1"},
    ]
    lines = violation_lines(violations, shown=10)
    assert lines[0] == "order_settled: 500"
    assert lines[1] == "stock_conservation: 2"
    assert lines[2] == "  order_settled: order 0: still placed"
    assert lines[-1] == "  … and 492 more (--json lists them all)"
    assert len(lines) == 2 + 10 + 1
    assert not any("{" in line for line in lines)  # no raw dicts
