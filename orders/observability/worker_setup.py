"""Observability of one worker process: log context, recorded metrics, its gauges, and the
server of /metrics, /livez and /readyz."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from orders.app.bootstrap import App
from orders.domain.steps import queue_name, task_name
from orders.observability.liveness import Verdict
from orders.observability.logs import job_log_context
from orders.observability.multiproc import current_slot, enable_multiprocess, metrics_dir
from orders.observability.worker_gauges import WorkerGauges
from orders.observability.worker_metrics import WorkerMetrics
from reliable_queue import RawJob
from reliable_queue.execution import Middleware, Outcome
from reliable_queue.worker import LaneView
from workflows.tracker import StepResult

log = logging.getLogger("orders.worker")


class WorkerObservability:
    """What a worker process adds to its worker: middleware, hooks and a server.

    Args:
        metrics: the process's metric objects, or None to record nothing.
        server: the ``/metrics`` HTTP server, or None.
    """

    def __init__(self, metrics: WorkerMetrics | None = None, server: Any = None) -> None:
        self.metrics = metrics
        self.server = server

    def middleware(self) -> list[Middleware]:
        """Outermost first: timing (so it includes the rest), then the log context."""
        out: list[Middleware] = []
        if self.metrics is not None:
            out.append(self.metrics.middleware)
        out.append(job_log_context)
        return out

    def on_outcome(
        self, then: Callable[[RawJob, Outcome], None] | None
    ) -> Callable[[RawJob, Outcome], None]:
        """An ``on_outcome`` hook that records the outcome, then calls ``then``."""

        def hook(job: RawJob, outcome: Outcome) -> None:
            if self.metrics is not None:
                try:
                    self.metrics.on_outcome(job, outcome)
                except Exception:
                    log.exception("recording the outcome of job %s failed", job.job_id)
            if then is not None:
                then(job, outcome)

        return hook

    def on_results(self, step: str, results: Sequence[StepResult]) -> None:
        """Step-handler hook, once per handler call: duplicates absorbed and order
        completion times."""
        if self.metrics is not None:
            self.metrics.on_results(step, results)

    def on_refused(self, step: str, reason: str) -> None:
        """A delivery's commit was refused (``reason``: see ``orders.worker.tasks.OnRefused``)."""
        if self.metrics is not None:
            self.metrics.on_refused(step, reason)

    def serve(
        self, app: App, host: str, port: int, live: Callable[[], Verdict] | None = None
    ) -> int:
        """Serve ``/metrics`` of this data dir on ``host:port``, with ``/readyz``
        (``orders.observability.readiness``) and ``/livez`` (``live``; without it, the
        server answering is the answer); return the bound port.

        The server's modules (the registry, the Redis and database collectors, the
        readiness probe) are imported here: a worker without a port needs none of them.

        Raises:
            OSError: the port cannot be bound.
        """
        from orders.observability.readiness import cached_readiness
        from orders.observability.registry import metrics_registry, serve

        registry = metrics_registry(app, multiproc=metrics_dir(app.settings))
        probes = {
            "/livez": live or (lambda: Verdict(True, ("serving",))),
            "/readyz": cached_readiness(app),
        }
        self.server = serve(registry, host, port, probes)
        bound = int(self.server.server_port)
        log.info("metrics on http://%s:%d/metrics (probes /livez, /readyz)", host, bound)
        return bound

    def watch(
        self,
        lanes: Callable[[], list[LaneView]],
        queues: Sequence[str],
        stop: threading.Event,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Sample the worker's lanes and memory into its gauges about once a second until
        ``stop`` is set (``orders.observability.worker_gauges``); nothing when this
        process records no metrics.

        Args:
            lanes: the worker's lane view (``Worker.lanes``).
            queues: the queues it serves.
            stop: ends the sampling.
            clock: the lane view's monotonic clock (``Worker.clock``), seconds.
        """
        slot = current_slot()
        if self.metrics is None or slot is None:
            return
        WorkerGauges(lanes, queues, slot, clock=clock).run(stop)

    def close(self) -> None:
        """Stop the ``/metrics`` server, if any."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


def worker_observability(
    app: App, steps: Sequence[str] = (), *, record: bool = True
) -> WorkerObservability:
    """Set up a worker process's metrics (call once per process, before the worker runs).

    Touches neither Redis nor the database, then or later: an order's completion
    time comes with the commit that completed it (``StepResult.workflow_seconds``).

    Args:
        app: the application.
        steps: the steps served; their series are created at zero.
        record: record metrics into the data dir's multi-process folder.

    Raises:
        OSError: the metrics folder cannot be created.
    """
    metrics = None
    if record:
        enable_multiprocess(metrics_dir(app.settings))
        metrics = WorkerMetrics()
        for step in steps:
            metrics.declare(queue_name(step), task_name(step))
    return WorkerObservability(metrics)
