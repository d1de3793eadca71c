"""One look at the whole system for the live views (``orders watch``, the dashboard)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from orders.app.bootstrap import App
from orders.domain.steps import task_name
from orders.observability.histograms import HandlerTimes
from orders.observability.order_counts import OrderCounts, order_counts
from orders.observability.recent_dead import newest_dead_letters
from orders.observability.sampler import Sample, Sampler
from orders.observability.urls import mask_urls_in
from orders.observability.workers import WORKERS_SHOWN, read_workers
from reliable_queue import DeadLetter, PauseState, QueueStats, WorkersView, stats
from reliable_queue.rate_limits import RateLimit

THROUGHPUT_WINDOW = 10.0
"""Seconds over which jobs/s is measured."""

RETRY_WINDOW = 60.0
"""Seconds over which retries per minute are measured."""


@dataclass(frozen=True)
class QueueView:
    """One queue as the live views show it.

    Attributes:
        name / task: queue name and the task its jobs run.
        ready / delayed / active / dead: jobs in each state now.
        succeeded / retried: lifetime counters.
        timed_out: attempts failed past their time limit (lifetime counter).
        jobs_per_second: jobs acknowledged per second over the last 10 s (None: too early).
        retries_per_minute: retries scheduled per minute over the last minute.
        p50_seconds / p95_seconds: handler time over the last minute (None: no runs
            recorded on this machine).
        orphans: job records in no structure, as the last audit left them (0: none).
        paused: who paused the queue, why and since when (None: not paused).
        rate_limit: the queue's rate limit (None: none set, ADR 0032).
        key_cap: most leased jobs per fairness key (None: no cap, ADR 0033).
    """

    name: str
    task: str
    ready: int
    delayed: int
    active: int
    dead: int
    succeeded: int
    retried: int
    jobs_per_second: float | None
    retries_per_minute: float | None
    p50_seconds: float | None
    p95_seconds: float | None
    orphans: int = 0
    timed_out: int = 0
    paused: PauseState | None = None
    rate_limit: RateLimit | None = None
    key_cap: int | None = None


@dataclass(frozen=True)
class Snapshot:
    """Everything a live view draws at one moment.

    Attributes:
        at: epoch seconds of the look.
        queues: one view per queue (empty when Redis failed).
        orders: counts from the database (None when it failed).
        newest_dead: newest dead letters first.
        errors: what could not be read, one line each (credentials masked).
        workers: the worker processes, newest first (None when Redis failed).
    """

    at: float
    queues: list[QueueView] = field(default_factory=list)
    orders: OrderCounts | None = None
    newest_dead: list[DeadLetter] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    workers: WorkersView | None = None


def read_queue_stats(app: App) -> dict[str, QueueStats]:
    """``stats`` of every step queue, by queue name.

    Raises:
        reliable_queue.QueueConnectionError: Redis unreachable.
    """
    return {q.name: stats(q) for q in app.queues.values()}


class SystemView:
    """Takes snapshots; keeps the history that rates and quantiles need.

    Args:
        app: the application.
        multiproc: the workers' metrics folder (None: no handler times).
        sampler: where queue samples are kept (default: a new one on ``app``).
        dead_limit: newest dead letters per snapshot.
        workers_limit: most worker processes per snapshot.
    """

    def __init__(
        self,
        app: App,
        *,
        multiproc: Path | None,
        sampler: Sampler | None = None,
        dead_limit: int = 5,
        workers_limit: int = WORKERS_SHOWN,
    ) -> None:
        self.app = app
        self.sampler = sampler or Sampler(lambda: read_queue_stats(app), keep=120.0)
        self.handler_times = HandlerTimes(multiproc) if multiproc is not None else None
        self.dead_limit = dead_limit
        self.workers_limit = workers_limit

    def look(self) -> Snapshot:
        """Read Redis (a new queue sample), the database and the metrics folder now.

        Never raises: what cannot be read is named in ``Snapshot.errors``.
        """
        errors: list[str] = []
        queues: list[QueueView] = []
        try:
            latest: Sample | None = self.sampler.sample()
        except Exception as exc:
            errors.append(f"Redis: {mask_urls_in(str(exc))}")
            latest = None
        if self.handler_times is not None:
            try:
                self.handler_times.refresh()
            except Exception as exc:
                errors.append(f"metrics folder: {mask_urls_in(str(exc))}")
        if latest is not None:
            queues = [self._queue_view(name, s) for name, s in latest.queues.items()]
            errors.extend(
                f"queue {name}: {problem}"
                for name, s in latest.queues.items()
                for problem in s.corrupt.values()
            )
        orders = None
        try:
            with self.app.session_factory() as session:
                orders = order_counts(session)
        except Exception as exc:
            errors.append(f"database: {mask_urls_in(str(exc)).splitlines()[0]}")
        dead: list[DeadLetter] = []
        workers: WorkersView | None = None
        if latest is not None:
            try:
                dead = newest_dead_letters(self.app.queues.values(), self.dead_limit)
                workers = read_workers(self.app, self.workers_limit)
            except Exception as exc:
                errors.append(f"Redis: {mask_urls_in(str(exc))}")
            if workers is not None:
                errors.extend(f"workers: {note}" for note in workers.notes)
        return Snapshot(time.time(), queues, orders, dead, errors, workers)

    def _queue_view(self, name: str, s: QueueStats) -> QueueView:
        rate = self.sampler.rate(name, "succeeded", THROUGHPUT_WINDOW)
        retries = self.sampler.rate(name, "retried", RETRY_WINDOW)
        p50 = p95 = None
        if self.handler_times is not None:
            p50, p95 = self.handler_times.quantiles(name)
        return QueueView(
            name=name,
            task=task_name(name),
            ready=s.ready,
            delayed=s.delayed,
            active=s.active,
            dead=s.dead,
            succeeded=s.counters.get("succeeded", 0),
            retried=s.counters.get("retried", 0),
            jobs_per_second=rate,
            retries_per_minute=retries * 60 if retries is not None else None,
            p50_seconds=p50,
            p95_seconds=p95,
            orphans=s.orphans,
            timed_out=s.counters.get("timed_out", 0),
            paused=s.paused,
            rate_limit=s.rate_limit,
            key_cap=s.key_cap,
        )
