"""What a /metrics scrape and a worker's gauges cost: per queue and per sample.

Times, on a throwaway Redis with ``waiting`` jobs in one queue, ``stats`` (the
depths and counters every scrape reads) and ``oldest_waiting_seconds`` (the longest
wait, ADR 0042) — also on a second queue whose ``waiting`` jobs carry priorities in
every band and 1,000 fairness keys, as the orders app's step jobs do —, interleaved
call by call; and one sample of a worker
process's gauges (its lanes and resident memory, written to a multi-process folder).
Prints the median, min and max of each, microseconds.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from reliable_queue import EnqueueRequest, Queue, oldest_waiting_seconds, stats
from reliable_queue.worker import LaneView

from .server import RedisServer

QUEUES = ("stock", "notification", "points", "logistics")


def _spread(samples: list[float]) -> str:
    us = [s * 1e6 for s in samples]
    return f"median {statistics.median(us):8.1f}  min {min(us):8.1f}  max {max(us):9.1f} µs"


def run(waiting: int = 100_000, calls: int = 2000) -> dict[str, list[float]]:
    """Seconds per call of each reading (see the module docstring)."""
    server = RedisServer().start()
    try:
        client = server.client()
        queue = Queue(client, "stock")
        for start in range(0, waiting, 500):
            queue.enqueue_many(
                [EnqueueRequest("t", {"i": i}) for i in range(start, min(start + 500, waiting))]
            )
        keyed = Queue(client, "notification")
        for start in range(0, waiting, 500):
            keyed.enqueue_many(
                [
                    EnqueueRequest("t", {"i": i}, priority=i % 10, fairness_key=f"c-{i % 1000}")
                    for i in range(start, min(start + 500, waiting))
                ]
            )
        readings: dict[str, Callable[[], object]] = {
            "stats (one queue)": lambda: stats(queue),
            "oldest_waiting_seconds (one queue)": lambda: oldest_waiting_seconds(queue),
            "oldest_waiting_seconds (keyed, 10 bands)": lambda: oldest_waiting_seconds(keyed),
        }
        times: dict[str, list[float]] = {name: [] for name in readings}
        for _ in range(calls):
            for name, read in readings.items():  # interleaved: the same moments for both
                began = time.perf_counter()
                read()
                times[name].append(time.perf_counter() - began)
        client.close()
    finally:
        server.stop()
    times["worker gauge sample (4 queues, 8 lanes)"] = _gauge_samples(calls)
    return times


def _gauge_samples(calls: int) -> list[float]:
    from orders.observability.multiproc import current_slot, enable_multiprocess
    from orders.observability.worker_gauges import WorkerGauges

    enable_multiprocess(Path(tempfile.mkdtemp(prefix="bench-metrics-")))
    lanes = [LaneView(q, True, False, time.monotonic(), None) for q in QUEUES for _ in (1, 2)]
    gauges = WorkerGauges(lambda: lanes, QUEUES, current_slot() or "slot0")
    out = []
    for _ in range(calls):
        began = time.perf_counter()
        gauges.sample()
        out.append(time.perf_counter() - began)
    return out


def main(waiting: int = 100_000, calls: int = 2000) -> None:
    """Print the table."""
    print(f"cost per call, {waiting:,} jobs waiting, {calls:,} calls each (interleaved):")
    for name, samples in run(waiting, calls).items():
        print(f"  {name:42s} {_spread(samples)}")
