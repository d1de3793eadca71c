"""The soak's verdict: does memory, file descriptors or Redis grow past a documented bound.

Contract: the samples taken before ``steady_from`` seconds (start-up, and finished-job
records and idempotency keys piling up until their retention window ends) are left out;
from the first steady sample to the last, each worker's RSS may grow by at most
:data:`RSS_GROWTH` of its first steady value plus :data:`RSS_SLACK_MB`, its open file
descriptors by at most :data:`FD_GROWTH`, and Redis's ``used_memory`` by at most
:data:`REDIS_GROWTH` plus :data:`REDIS_SLACK_MB`. A leak of a kilobyte per job breaks
the RSS bound within minutes at the soak's rates; allocator noise and pool warm-up do
not. Fewer than two steady samples decide nothing. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

RSS_GROWTH = 0.10
"""A worker's RSS may end at most this share above its first steady sample..."""
RSS_SLACK_MB = 16.0
"""... plus this many MB."""
FD_GROWTH = 8
"""A worker may end with at most this many more open file descriptors."""
REDIS_GROWTH = 0.25
"""Redis ``used_memory`` may end at most this share above its first steady sample..."""
REDIS_SLACK_MB = 2.0
"""... plus this many MB."""


@dataclass(frozen=True)
class Sample:
    """One reading of the soak.

    Attributes:
        elapsed_seconds: since the soak's clock started.
        workers: worker name -> ``(RSS in MB, open file descriptors)``.
        redis_used_mb: Redis ``used_memory``, MB.
        placed / finished: orders placed so far, and finished of those.
    """

    elapsed_seconds: float
    workers: dict[str, tuple[float, int]]
    redis_used_mb: float
    placed: int = 0
    finished: int = 0


@dataclass(frozen=True)
class Verdict:
    """The soak's outcome.

    Attributes:
        within: True when every bound held, False when one did not, None when the run
            was too short to say (fewer than two steady samples).
        lines: one line per check (what grew, from what to what, and the bound).
    """

    within: bool | None
    lines: list[str] = field(default_factory=list)


def _check(name: str, first: float, last: float, allowed: float, unit: str) -> tuple[bool, str]:
    ok = last <= allowed
    word = "within" if ok else "OVER"
    digits = 1 if unit else 0
    return ok, (
        f"{name}: {first:,.{digits}f} -> {last:,.{digits}f}{unit} "
        f"({word} the bound {allowed:,.{digits}f}{unit})"
    )


def judge(samples: Sequence[Sample], steady_from: float) -> Verdict:
    """Check the growth from the first steady sample to the last against the bounds.

    Args:
        samples: the readings, in time order.
        steady_from: seconds after which the soak is in its steady state (start-up done,
            retention windows filled).

    Returns:
        The verdict; a worker missing from the last sample counts as over the bound
        (it died).
    """
    steady = [s for s in samples if s.elapsed_seconds >= steady_from]
    if len(steady) < 2:
        return Verdict(
            None,
            [
                f"too short to judge: {len(steady)} sample(s) after the steady state began "
                f"at {steady_from:.0f} s (two or more needed)"
            ],
        )
    first, last = steady[0], steady[-1]
    results: list[tuple[bool, str]] = []
    for name, (rss, fds) in first.workers.items():
        if name not in last.workers:
            results.append((False, f"{name}: gone by the last sample"))
            continue
        end_rss, end_fds = last.workers[name]
        allowed_rss = rss * (1 + RSS_GROWTH) + RSS_SLACK_MB
        results.append(_check(f"{name} RSS", rss, end_rss, allowed_rss, " MB"))
        results.append(_check(f"{name} open files", fds, end_fds, fds + FD_GROWTH, ""))
    allowed_redis = first.redis_used_mb * (1 + REDIS_GROWTH) + REDIS_SLACK_MB
    results.append(
        _check("Redis used_memory", first.redis_used_mb, last.redis_used_mb, allowed_redis, " MB")
    )
    return Verdict(all(ok for ok, _ in results), [line for _, line in results])
