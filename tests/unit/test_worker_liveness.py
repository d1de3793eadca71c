"""/livez of a worker: a lane that waits is alive, one stuck past its bounds is not."""

from __future__ import annotations

import pytest

from orders.observability.liveness import StallBounds, stuck_lanes, worker_liveness
from orders.observability.worker_gauges import LaneCounts, lane_counts
from reliable_queue.worker import LaneView

# heartbeat 10 s, grace 3 beats = 30 s; idle bound 5 (Redis backoff) + 60 + 30 = 95 s;
# busy bound 60 + 30 = 90 s
BOUNDS = StallBounds(heartbeat_seconds=10.0, time_limit_seconds=60.0, max_block_seconds=2.0)
NOW = 1000.0


def lane(
    queue: str = "stock",
    *,
    idle_for: float = 1.0,
    busy_for: float | None = None,
    alive: bool = True,
    abandoned: bool = False,
) -> LaneView:
    return LaneView(
        queue=queue,
        alive=alive,
        abandoned=abandoned,
        progress_at=NOW - idle_for,
        busy_since=None if busy_for is None else NOW - busy_for,
    )


def live(*lanes: LaneView, heartbeat: bool = True, stopping: bool = False) -> bool:
    verdict = worker_liveness(
        lanes, heartbeat_alive=heartbeat, stopping=stopping, now=NOW, bounds=BOUNDS
    )
    return verdict.ok


def test_bounds_add_the_waits_a_lane_may_take_and_the_grace() -> None:
    assert (BOUNDS.grace, BOUNDS.idle_seconds, BOUNDS.busy_seconds) == (30.0, 95.0, 90.0)
    no_limit = StallBounds(heartbeat_seconds=10.0, time_limit_seconds=0, max_block_seconds=2.0)
    assert no_limit.busy_seconds is None and no_limit.idle_seconds == 35.0


def test_idle_and_busy_lanes_within_their_bounds_are_alive() -> None:
    assert live(lane(idle_for=94.0), lane(busy_for=89.0, idle_for=500.0))


@pytest.mark.parametrize(
    ("stuck", "says"),
    [
        (lane(idle_for=96.0), "lane of stock made no progress for 96s"),
        (lane(busy_for=91.0), "lane of stock has run one batch for 91s (time limit 60s)"),
        (lane(busy_for=91.0, abandoned=True), "abandoned lane of stock has run one batch"),
        (lane(alive=False), "lane of stock ended"),
    ],
)
def test_a_stuck_or_ended_lane_makes_the_process_dead(stuck: LaneView, says: str) -> None:
    problems = stuck_lanes([lane(), stuck], NOW, BOUNDS)
    assert len(problems) == 1 and problems[0].startswith(says)
    assert not live(lane(), stuck)


def test_an_abandoned_lane_that_returned_or_still_waits_its_turn_is_no_problem() -> None:
    assert live(lane(), lane(alive=False, abandoned=True), lane(busy_for=80.0, abandoned=True))


def test_without_a_time_limit_a_long_batch_is_never_stuck() -> None:
    bounds = StallBounds(heartbeat_seconds=10.0, time_limit_seconds=0, max_block_seconds=2.0)
    assert stuck_lanes([lane(busy_for=86_400.0, idle_for=86_400.0)], NOW, bounds) == []


def test_a_stopped_heartbeat_is_dead_but_starting_and_stopping_are_alive() -> None:
    assert not live(lane(), heartbeat=False)
    assert live()  # no lane yet: the worker is starting
    assert live(lane(alive=False), stopping=True)
    verdict = worker_liveness(
        [lane(), lane("points")], heartbeat_alive=True, stopping=False, now=NOW, bounds=BOUNDS
    )
    assert verdict.body() == "2 lane(s) serving\nok\n"


def test_lane_counts_per_queue() -> None:
    views = [
        lane("stock", busy_for=4.0),
        lane("stock"),
        lane("stock", busy_for=30.0, abandoned=True),
        lane("stock", alive=False, abandoned=True),
        lane("points", busy_for=2.5),
    ]
    counts = lane_counts(views, ["stock", "points", "logistics"], NOW)
    assert counts == {
        "stock": LaneCounts(lanes=2, busy=1, abandoned=1, oldest_running_seconds=30.0),
        "points": LaneCounts(lanes=1, busy=1, abandoned=0, oldest_running_seconds=2.5),
        "logistics": LaneCounts(),
    }
