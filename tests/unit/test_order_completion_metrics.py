"""An order's placement-to-completion time is recorded from the commit that completed it."""

from __future__ import annotations

from orders.observability.worker_metrics import WorkerMetrics
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
