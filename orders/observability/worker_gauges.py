"""What a worker process is doing now, written where every ``/metrics`` of the data dir reads it.

A worker process samples its own lanes (``reliable_queue.Worker.lanes``) and its
resident memory about once a second into gauges of the multi-process folder; any
endpoint of the data dir serves them, counting only the processes running now
(``orders.observability.worker_files``). Labels are bounded (``queue``/``task``
of orderflow's own queues, ``slot`` of a running process). See
[ADR 0042](../../docs/adr/0042-worker-gauges-from-live-slots.md).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from prometheus_client import Gauge, ProcessCollector

from orders.domain.steps import task_name
from orders.observability.worker_metrics import job_labels
from reliable_queue.worker import LaneView

log = logging.getLogger("orders.metrics")

PROCESSES = "orderflow_worker_processes"
"""Gauge: worker processes running (each running worker process adds 1)."""


@dataclass(frozen=True)
class LaneCounts:
    """The lanes of one queue in one process.

    Attributes:
        lanes: lanes serving the queue (abandoned ones excluded: a fresh lane replaced
            each).
        busy: serving lanes running a batch now.
        abandoned: abandoned lanes whose thread is still stuck in a handler.
        oldest_running_seconds: how long the longest-running batch (serving or
            abandoned) has run, seconds; 0.0 when none runs.
    """

    lanes: int = 0
    busy: int = 0
    abandoned: int = 0
    oldest_running_seconds: float = 0.0


def lane_counts(
    views: Sequence[LaneView], queues: Sequence[str], now: float
) -> dict[str, LaneCounts]:
    """Count lanes per queue from :meth:`reliable_queue.Worker.lanes`.

    Args:
        views: the lanes (ended ones are skipped).
        queues: the queues served (each gets an entry, also with no lane).
        now: the worker's monotonic clock, seconds (the views' clock).

    Returns:
        queue -> :class:`LaneCounts`.
    """
    out: dict[str, LaneCounts] = {}
    for queue in queues:
        mine = [v for v in views if v.queue == queue and v.alive]
        serving = [v for v in mine if not v.abandoned]
        runs = [now - v.busy_since for v in mine if v.busy_since is not None]
        out[queue] = LaneCounts(
            lanes=len(serving),
            busy=sum(1 for v in serving if v.busy_since is not None),
            abandoned=len(mine) - len(serving),
            oldest_running_seconds=max([0.0, *runs]),
        )
    return out


def resident_memory_bytes() -> float | None:
    """This process's resident memory, bytes (from ``/proc``, as prometheus-client's
    process collector reads it); None where ``/proc`` is missing."""
    for family in ProcessCollector(registry=None).collect():
        if family.name == "process_resident_memory_bytes" and family.samples:
            return float(family.samples[0].value)
    return None


class WorkerGauges:
    """The gauges of one worker process, refreshed by :meth:`sample`.

    Gauges (multi-process modes in brackets: how processes add up):

    - ``orderflow_worker_processes`` (livesum): 1 per running worker process.
    - ``orderflow_worker_lanes{queue,task}`` (livesum): lanes serving the queue.
    - ``orderflow_worker_lanes_busy{queue,task}`` (livesum): of those, running a batch.
    - ``orderflow_worker_lanes_abandoned{queue,task}`` (livesum): lanes left stuck in a
      handler past its time limit (their thread cannot be killed).
    - ``orderflow_job_oldest_running_seconds{queue,task}`` (livemax): run time of the
      longest-running batch, seconds (one handler call: a step's batch runs together).
    - ``orderflow_worker_resident_memory_bytes{slot}`` (livemax): resident memory of
      the process recording under ``slot``, bytes.

    Args:
        lanes: the worker's lane view (``Worker.lanes``).
        queues: the queues the process serves.
        slot: the process's metrics slot (``multiproc.current_slot``).
        clock: the lane view's monotonic clock, seconds.
        memory: reads this process's resident memory, bytes (None: unknown).
    """

    def __init__(
        self,
        lanes: Callable[[], list[LaneView]],
        queues: Sequence[str],
        slot: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        memory: Callable[[], float | None] = resident_memory_bytes,
    ) -> None:
        self.lanes = lanes
        self.queues = list(queues)
        self.slot = slot
        self.clock = clock
        self.memory = memory
        labels = ("queue", "task")
        self.processes = Gauge(
            PROCESSES, "Worker processes running.", multiprocess_mode="livesum", registry=None
        )
        self.serving = Gauge(
            "orderflow_worker_lanes",
            "Lanes (threads) serving the queue.",
            labels,
            multiprocess_mode="livesum",
            registry=None,
        )
        self.busy = Gauge(
            "orderflow_worker_lanes_busy",
            "Lanes running a batch now.",
            labels,
            multiprocess_mode="livesum",
            registry=None,
        )
        self.abandoned = Gauge(
            "orderflow_worker_lanes_abandoned",
            "Lanes stuck in a handler past its time limit (replaced by fresh lanes).",
            labels,
            multiprocess_mode="livesum",
            registry=None,
        )
        self.oldest_running = Gauge(
            "orderflow_job_oldest_running_seconds",
            "Run time of the longest-running batch, seconds.",
            labels,
            multiprocess_mode="livemax",
            registry=None,
        )
        self.resident = Gauge(
            "orderflow_worker_resident_memory_bytes",
            "Resident memory of each worker process, bytes.",
            ("slot",),
            multiprocess_mode="livemax",
            registry=None,
        )

    def sample(self) -> None:
        """Write the gauges from the lanes and memory now."""
        self.processes.set(1)
        counts = lane_counts(self.lanes(), self.queues, self.clock())
        for queue, c in counts.items():
            labels = job_labels(queue, task_name(queue))
            self.serving.labels(*labels).set(c.lanes)
            self.busy.labels(*labels).set(c.busy)
            self.abandoned.labels(*labels).set(c.abandoned)
            self.oldest_running.labels(*labels).set(c.oldest_running_seconds)
        rss = self.memory()
        if rss is not None:
            self.resident.labels(self.slot).set(rss)

    def run(self, stop: threading.Event, interval: float = 1.0) -> threading.Thread:
        """Sample every ``interval`` seconds in a daemon thread until ``stop`` is set.

        Returns:
            The started thread. A failed sample is logged and the next one goes on.
        """

        def loop() -> None:
            while True:
                try:
                    self.sample()
                except Exception:  # a metric must never stop the worker
                    log.exception("sampling the worker's gauges failed")
                if stop.wait(interval):
                    return

        thread = threading.Thread(target=loop, name="worker-gauges", daemon=True)
        thread.start()
        return thread
