"""Pure rules of the order domain: points, ship mode, step messages, percentiles."""

from __future__ import annotations

from decimal import Decimal

import pytest

from orders.domain.effects import points_for, ship_mode_for
from orders.domain.queries import percentile
from orders.domain.steps import STEPS, order_workflow, queue_name, task_name
from workflows.models import idempotency_key


@pytest.mark.parametrize(
    ("total", "points"),
    [("0.00", 0), ("9.99", 0), ("10.00", 1), ("1234.56", 123), ("172799.49", 17279)],
)
def test_points_are_floor_of_total_price_over_ten(total, points):
    assert points_for(Decimal(total)) == points


def test_ship_mode_is_the_most_common_line_mode():
    assert ship_mode_for(["AIR", "MAIL", "AIR", "TRUCK"]) == "AIR"


def test_ship_mode_tie_goes_to_the_alphabetically_first():
    assert ship_mode_for(["TRUCK", "MAIL", "MAIL", "TRUCK"]) == "MAIL"


def test_ship_mode_of_no_lines_is_an_error():
    with pytest.raises(ValueError):
        ship_mode_for([])


def test_order_workflow_fans_out_one_step_per_queue():
    spec = order_workflow(42)
    assert (spec.kind, spec.subject_id) == ("order", 42)
    assert (
        [s.name for s in spec.steps]
        == list(STEPS)
        == ["stock", "notification", "points", "logistics"]
    )
    for step in spec.steps:
        assert step.queue == queue_name(step.name) == step.name
        assert step.task == task_name(step.name) == f"orders.{step.name}"
        assert step.payload == {"order_id": 42}


def test_idempotency_key_is_workflow_id_and_step():
    assert idempotency_key(7, "points") == "7:points"


@pytest.mark.parametrize(
    ("fraction", "expected"), [(0.5, 5.0), (0.95, 10.0), (0.1, 1.0), (1.0, 10.0)]
)
def test_percentile_is_nearest_rank(fraction, expected):
    assert percentile([float(v) for v in range(10, 0, -1)], fraction) == expected


def test_percentile_of_nothing_is_zero_and_bad_fraction_is_refused():
    assert percentile([], 0.5) == 0.0
    with pytest.raises(ValueError):
        percentile([1.0], 0.0)
