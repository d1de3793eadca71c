"""Retry policy: exponential backoff, full jitter, a cap, and what max attempts means."""

import random

import pytest

from reliable_queue import RetryPolicy
from reliable_queue.policy import should_retry


def test_backoff_without_jitter_doubles_from_the_base_delay():
    policy = RetryPolicy(base_delay=1.0, max_delay=60.0, jitter=False)

    assert [policy.backoff(n) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]


def test_backoff_is_capped_by_max_delay():
    policy = RetryPolicy(base_delay=1.0, max_delay=5.0, jitter=False)

    assert policy.backoff(10) == 5.0
    assert policy.backoff(1000) == 5.0  # no overflow for absurd attempt numbers


def test_full_jitter_draws_between_zero_and_the_capped_bound():
    policy = RetryPolicy(base_delay=1.0, max_delay=5.0, jitter=True)
    rng = random.Random(7)

    delays = [policy.backoff(4, rng) for _ in range(2000)]

    assert all(0.0 <= d <= 5.0 for d in delays)
    assert min(delays) < 0.5 and max(delays) > 4.5  # spread over the whole range


def test_jitter_is_reproducible_with_a_seeded_rng():
    policy = RetryPolicy(base_delay=0.5, jitter=True)

    first = [policy.backoff(3, random.Random(1)) for _ in range(3)]
    second = [policy.backoff(3, random.Random(1)) for _ in range(3)]

    assert first == second


@pytest.mark.parametrize(
    ("max_attempts", "runs"),
    [(0, 1), (1, 1), (2, 2), (3, 3), (5, 5)],
)
def test_max_attempts_counts_total_runs_and_zero_means_no_retry(max_attempts, runs):
    # fault 7: max_retries=0 was turned into the default, and counting was off by one
    attempt = 1
    while should_retry(attempt, max_attempts):
        attempt += 1

    assert attempt == runs


def test_negative_max_attempts_or_delays_are_rejected():
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=-1)
    with pytest.raises(ValueError):
        RetryPolicy(base_delay=-0.1)


def test_zero_max_attempts_is_kept_not_replaced_by_a_default():
    assert RetryPolicy(max_attempts=0).max_attempts == 0
