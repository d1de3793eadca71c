"""The per-token token bucket of the API: a burst, then one request per 1/rate seconds."""

from __future__ import annotations

import pytest

from orders.web.api.auth import TokenBuckets


def test_a_bucket_allows_its_burst_then_refills_at_its_rate() -> None:
    now = [100.0]
    buckets = TokenBuckets(rate=2.0, burst=3, clock=lambda: now[0])
    assert [buckets.take("shop") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take("shop") == pytest.approx(0.5)  # one request back in 1/rate s
    assert buckets.take("other") == 0.0  # buckets are per name
    now[0] += 0.5
    assert buckets.take("shop") == 0.0
    now[0] += 60
    assert [buckets.take("shop") for _ in range(4)][-1] > 0  # refills to the burst, no more


def test_a_bucket_needs_a_rate_and_a_burst() -> None:
    with pytest.raises(ValueError):
        TokenBuckets(rate=0, burst=1)
    with pytest.raises(ValueError):
        TokenBuckets(rate=1, burst=0)
