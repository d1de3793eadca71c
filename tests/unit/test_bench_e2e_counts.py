"""The end-to-end peer benchmark's step-run counts: runs beyond the first, or unknown."""

from __future__ import annotations

import pytest

from benchmarks.e2e_counts import (
    StepRuns,
    duplicate_runs,
    from_counters,
    from_run_counts,
    run_field,
)


def test_a_step_run_twice_for_one_order_is_one_duplicate() -> None:
    runs = from_run_counts(
        {b"stock:7": b"1", b"stock:8": b"2", b"points:7": b"1", run_field("points", 8): 3}
    )

    assert runs == StepRuns(first={"stock": 2, "points": 2}, again={"stock": 1, "points": 2})
    assert duplicate_runs(runs, {"stock": 2, "points": 2}) == 3


def test_counts_that_miss_a_run_the_database_saw_are_unknown_not_zero() -> None:
    runs = from_run_counts({"stock:7": "1", "stock:8": "1", "points:7": "1"})

    assert duplicate_runs(runs, {"stock": 2, "points": 2}) is None
    assert duplicate_runs(runs, {"stock": 2, "points": 1}) == 0


def test_orderflow_counters_give_the_same_shape() -> None:
    runs = from_counters(
        {"applied:stock": 5, "duplicate:stock": 1, "applied:points": 4, "sweep:published": 9}
    )

    assert runs == StepRuns(first={"stock": 5, "points": 4}, again={"stock": 1})
    assert duplicate_runs(runs, {"stock": 5, "points": 4}) == 1
    assert duplicate_runs(runs, {"stock": 5, "points": 4, "logistics": 4}) is None


@pytest.mark.parametrize("field", ["stock", "stock:", ":7", "stock:seven"])
def test_a_field_that_names_no_step_and_order_is_refused(field: str) -> None:
    with pytest.raises(ValueError, match="run count"):
        from_run_counts({field: "1"})
