"""What a worker records per handler call: an order's placement-to-completion time from
the commit that completed it, and a batch's observations written together."""

from __future__ import annotations

import math

from prometheus_client import Histogram

from orders.observability.worker_metrics import HANDLER_BUCKETS, WorkerMetrics, observe_all
from workflows.tracker import StepResult


def test_completion_times_come_with_the_results_and_need_no_database() -> None:
    """Regression: the worker read each completed workflow back in a transaction of its
    own after the commit, to time it."""
    metrics = WorkerMetrics()
    metrics.on_results(
        "logistics",
        [
            StepResult(1, "logistics", "scheduled", False, True, workflow_seconds=2.5),
            StepResult(2, "logistics", "scheduled", False, False),
            StepResult(3, "logistics", "scheduled", True, False),
            StepResult(4, "logistics", "cancelled", False, True, workflow_seconds=0.5),
        ],
    )
    samples = {
        s.name: s.value
        for family in metrics.order_completion.collect()
        for s in family.samples
        if s.name.endswith(("_count", "_sum"))
    }
    assert samples == {
        "orderflow_order_completion_seconds_count": 2,
        "orderflow_order_completion_seconds_sum": 3.0,
    }


def samples(histogram) -> dict[tuple[str, str], float]:
    return {
        (s.name, s.labels.get("le", "")): s.value
        for family in histogram.collect()
        for s in family.samples
        if not s.name.endswith("_created")
    }


def test_observing_a_batch_at_once_records_what_observing_each_does() -> None:
    """Regression: the handler-time middleware observed a batch's jobs one by one, two
    writes each to the process's metrics file; it now writes each bucket touched once."""
    amounts = [0.0, 0.001, 0.0011, 0.003, 0.003, 7.0, 61.0, 1e9, -1.0, float("nan"), 0.05]
    one, many = (
        Histogram("h", "h", ["q"], buckets=HANDLER_BUCKETS, registry=None).labels("stock")
        for _ in range(2)
    )
    for amount in amounts:
        one.observe(amount)
    observe_all(many, amounts)
    observe_all(many, [])
    expected, got = samples(one), samples(many)
    assert expected.keys() == got.keys()
    for key, value in expected.items():
        assert got[key] == value or (math.isnan(value) and math.isnan(got[key])), key
