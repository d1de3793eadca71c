"""Quantiles of the handler-time histograms the worker processes record.

Reads the multi-process folder (the sum over every worker of the data dir) and
estimates p50 / p95 over a recent window from the bucket counts, the way
PromQL's ``histogram_quantile`` does (linear inside a bucket).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

from prometheus_client.multiprocess import MultiProcessCollector

from orders.observability.multiproc import has_samples

Buckets = list[tuple[float, float]]
"""``(upper bound, cumulative count)`` pairs sorted by bound, ending with ``+Inf``."""

HANDLER_METRIC = "orderflow_job_handler_seconds"


def read_histograms(path: Path, metric: str = HANDLER_METRIC) -> dict[str, Buckets]:
    """Cumulative bucket counts of ``metric`` per queue, summed over every process.

    Args:
        path: the multi-process folder.
        metric: histogram name (without ``_bucket``).

    Returns:
        queue -> buckets; empty when no worker wrote there yet.
    """
    if not has_samples(path):
        return {}
    merged: dict[str, dict[float, float]] = {}
    for family in MultiProcessCollector(None, path=str(path)).collect():
        if family.name != metric:
            continue
        for sample in family.samples:
            if not sample.name.endswith("_bucket"):
                continue
            queue = sample.labels.get("queue", "")
            le = float(sample.labels["le"])
            per_queue = merged.setdefault(queue, {})
            per_queue[le] = per_queue.get(le, 0.0) + sample.value
    return {q: sorted(b.items()) for q, b in merged.items()}


def quantile(buckets: Sequence[tuple[float, float]], q: float) -> float | None:
    """Estimate the ``q`` quantile (0 < q < 1) from cumulative buckets.

    Returns:
        Seconds; None when the buckets hold no observation. Past the last
        finite bound the answer is that bound.
    """
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (
                count - lower_count
            )
        lower_bound, lower_count = bound, count
    return lower_bound


def _minus(new: Buckets, old: Buckets) -> Buckets:
    before = dict(old)
    return [(le, max(count - before.get(le, 0.0), 0.0)) for le, count in new]


class HandlerTimes:
    """p50 / p95 handler time per queue over the last ``window`` seconds.

    Args:
        path: the multi-process folder.
        window: seconds of history the quantiles cover.
        clock: monotonic clock, seconds.
    """

    def __init__(
        self, path: Path, *, window: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.path = path
        self.window = window
        self.clock = clock
        self._history: deque[tuple[float, dict[str, Buckets]]] = deque()
        self._lock = threading.Lock()

    def refresh(self) -> None:
        """Read the folder now and remember the reading."""
        reading = read_histograms(self.path)
        now = self.clock()
        with self._lock:
            self._history.append((now, reading))
            while len(self._history) > 2 and now - self._history[1][0] > self.window:
                self._history.popleft()

    def quantiles(self, queue: str) -> tuple[float | None, float | None]:
        """``(p50, p95)`` seconds of ``queue``'s handler runs in the window (None: none ran)."""
        with self._lock:
            if not self._history:
                return None, None
            newest = self._history[-1][1].get(queue, [])
            oldest = self._history[0][1].get(queue, []) if len(self._history) > 1 else []
        recent = _minus(newest, oldest) if oldest else newest
        return quantile(recent, 0.5), quantile(recent, 0.95)
