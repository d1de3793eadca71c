"""Rates from queue samples and quantiles from histogram buckets (pure)."""

from __future__ import annotations

import math

import pytest

from orders.observability.histograms import quantile
from orders.observability.sampler import Sampler
from reliable_queue import QueueStats


def reading(succeeded: int, ready: int = 0) -> dict[str, QueueStats]:
    return {"stock": QueueStats("stock", ready, 0, 0, 0, 0, {"succeeded": succeeded})}


def test_jobs_per_second_uses_the_samples_inside_the_window() -> None:
    now = [0.0]
    values = iter([0, 10, 30, 60, 100])
    sampler = Sampler(lambda: reading(next(values)), clock=lambda: now[0], wall=lambda: now[0])
    assert sampler.rate("stock", "succeeded", 10) is None  # no sample yet
    for t in (0.0, 5.0, 10.0, 15.0, 20.0):
        now[0] = t
        sampler.sample()
    assert sampler.rate("stock", "succeeded", 10) == pytest.approx((100 - 30) / 10)
    assert sampler.rate("stock", "succeeded", 60) == pytest.approx(100 / 20)
    assert sampler.series("stock", "succeeded")[-1] == (20.0, pytest.approx(8.0))


def test_a_counter_that_went_backwards_counts_from_zero() -> None:
    now = [0.0]
    values = iter([500, 4])
    sampler = Sampler(lambda: reading(next(values)), clock=lambda: now[0])
    sampler.sample()
    now[0] = 2.0
    sampler.sample()
    assert sampler.rate("stock", "succeeded", 10) == pytest.approx(2.0)


def test_old_samples_are_dropped() -> None:
    now = [0.0]
    sampler = Sampler(lambda: reading(0), keep=30, clock=lambda: now[0])
    for t in range(0, 100, 10):
        now[0] = float(t)
        sampler.sample()
    assert [s.at for s in sampler.samples()] == [60.0, 70.0, 80.0, 90.0]


def test_quantiles_interpolate_inside_the_bucket_like_promql() -> None:
    buckets = [(0.01, 50.0), (0.1, 90.0), (1.0, 100.0), (math.inf, 100.0)]
    assert quantile(buckets, 0.5) == pytest.approx(0.01)
    assert quantile(buckets, 0.7) == pytest.approx(0.01 + 0.09 * 0.5)
    assert quantile(buckets, 0.95) == pytest.approx(0.1 + 0.9 * 0.5)
    assert quantile([(0.01, 0.0), (math.inf, 0.0)], 0.5) is None
    assert quantile([(0.01, 0.0), (math.inf, 4.0)], 0.5) == pytest.approx(0.01)
