"""Placement pacing: batch sizes follow the rate."""

from __future__ import annotations

from orders.app.pacing import batch_size_for


def test_unpaced_placement_uses_the_largest_batch() -> None:
    assert batch_size_for(None) == 500


def test_a_tenth_of_a_second_of_orders_per_batch() -> None:
    assert batch_size_for(100.0) == 10
    assert batch_size_for(1000.0) == 100


def test_slow_rates_place_one_order_at_a_time() -> None:
    assert batch_size_for(0.5) == 1


def test_batches_never_exceed_the_ceiling() -> None:
    assert batch_size_for(1e9) == 500
