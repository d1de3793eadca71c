"""The metrics the worker processes of a data dir recorded, as one ``/metrics`` serves them.

Counters and histograms are summed over every file of the multi-process folder
(totals go on across restarts); gauges are read only from the slots a running
process holds (``multiproc.live_slots``), so a worker killed with ``kill -9``
leaves no stale reading behind. ``orderflow_worker_processes`` is always served
(0 when no worker runs). See
[ADR 0042](../../docs/adr/0042-worker-gauges-from-live-slots.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from orders.observability.multiproc import live_slots, slot_of
from orders.observability.worker_gauges import PROCESSES


class WorkerFiles(Collector):
    """Collector of the multi-process folder ``path`` (running processes' gauges only).

    Args:
        path: the folder (``multiproc.metrics_dir``); it must exist.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def describe(self) -> Iterable[Metric]:
        """Nothing up front (registering reads no file)."""
        return []

    def collect(self) -> Iterator[Metric]:
        """Merge the files as prometheus-client does, leaving out gauges of dead slots."""
        live = live_slots(self.path)
        files = [
            str(f)
            for f in self.path.glob("*.db")
            if not f.name.startswith("gauge_") or slot_of(f) in live
        ]
        families = list(MultiProcessCollector.merge(files, accumulate=True))
        if not any(family.name == PROCESSES for family in families):
            yield GaugeMetricFamily(PROCESSES, "Worker processes running.", value=0)
        yield from families
