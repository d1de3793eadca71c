"""Retry policy: exponential backoff with full jitter and a cap (pure logic).

Formula ("full jitter", M. Brooker, *Exponential Backoff And Jitter*, AWS
Architecture Blog, 2015): ``delay = uniform(0, min(cap, base * 2 ** (attempt - 1)))``.
With jitter off the delay is the upper bound itself, so attempts run at about
t, t+base, t+3*base, t+7*base, ...
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .limits import MAX_ATTEMPTS, MAX_DELAY_SECONDS, MAX_LEASE_SECONDS, integer, number


@dataclass(frozen=True)
class RetryPolicy:
    """How a task is retried after an ordinary exception.

    Attributes:
        max_attempts: total runs of the job, the first included. ``0`` and ``1``
            both mean "run once, never retry"; ``None`` uses the queue default.
        base_delay: backoff after the first failure, seconds.
        max_delay: cap of any single backoff, seconds.
        jitter: draw the delay uniformly from ``[0, bound]`` (full jitter) when True.
        time_limit: longest one run may take, seconds; past it the attempt fails
            with reason ``timed_out`` (retried per this policy). ``None`` uses the
            queue default (``QueueSettings.default_time_limit_seconds``), ``0``
            means no limit.

    Raises:
        QueueLimitError: (a ``ValueError``) ``max_attempts`` outside ``0..MAX_ATTEMPTS``,
            a delay outside ``0..MAX_DELAY_SECONDS``, a time limit outside
            ``0..MAX_LEASE_SECONDS``, or a number that is NaN or infinite
            (:mod:`reliable_queue.limits`).
    """

    max_attempts: int | None = None
    base_delay: float = 0.5
    max_delay: float = 60.0
    jitter: bool = True
    time_limit: float | None = None

    def __post_init__(self) -> None:
        if self.time_limit is not None:
            number("time_limit", self.time_limit, low=0, high=MAX_LEASE_SECONDS)
        if self.max_attempts is not None:
            integer("max_attempts", self.max_attempts, low=0, high=MAX_ATTEMPTS)
        number("base_delay", self.base_delay, low=0, high=MAX_DELAY_SECONDS)
        number("max_delay", self.max_delay, low=0, high=MAX_DELAY_SECONDS)

    def backoff(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before the run after failed run number ``attempt`` (1-based).

        Args:
            attempt: the run that just failed, 1 for the first.
            rng: source of jitter (inject a seeded one in tests); ``random`` if None.

        Returns:
            A delay in seconds, ``0 <= delay <= max_delay``.
        """
        bound = min(self.max_delay, self.base_delay * (2.0 ** max(attempt - 1, 0)))
        if not self.jitter:
            return bound
        return (rng or random).uniform(0.0, bound)


def time_limit_of(policy: RetryPolicy, default: float) -> float | None:
    """The run time limit in seconds a task gets, or None for no limit.

    Args:
        policy: the task's retry policy (its ``time_limit``, if set, wins).
        default: the queue-wide default, seconds (0 = no limit).
    """
    limit = default if policy.time_limit is None else policy.time_limit
    return limit if limit > 0 else None


def should_retry(attempt: int, max_attempts: int) -> bool:
    """True if a job that just failed its run number ``attempt`` may run again.

    ``max_attempts`` counts total runs; 0 and 1 both mean no retry.
    """
    return attempt < max(max_attempts, 1)
