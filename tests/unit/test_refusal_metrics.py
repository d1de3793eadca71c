"""Refused commits are counted per step and reason, with bounded labels."""

from __future__ import annotations

from orders.observability.worker_metrics import REFUSAL_REASONS, WorkerMetrics


def test_refused_commits_are_counted_by_step_and_a_bounded_reason() -> None:
    metrics = WorkerMetrics()
    metrics.on_refused("stock", "timed_out")
    metrics.on_refused("stock", "fenced_out")
    metrics.on_refused("stock", "fenced_out")
    metrics.on_refused("\x1b[31mstock", "a reason nobody defined")
    counted = {
        (s.labels["step"], s.labels["reason"]): s.value
        for family in metrics.attempts_fenced.collect()
        for s in family.samples
        if s.name == "orderflow_attempts_fenced_total"
    }
    assert counted == {
        ("stock", "timed_out"): 1,
        ("stock", "fenced_out"): 2,
        ("unknown", "unknown"): 1,
    }
    assert set(REFUSAL_REASONS) == {
        "timed_out",
        "abandoned",
        "lease_lost",
        "lease_expired",
        "fenced_out",
    }
