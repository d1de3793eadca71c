"""Prometheus collectors reading Redis and the database, cached per scrape interval.

A scrape never scans: the queue collector runs two MULTI round trips per queue
(``reliable_queue.stats``: LLEN, ZCARDs and the counters hash; and
``reliable_queue.oldest_waiting_seconds``: the heads of ready, delayed and each band
of waiting, plus one HMGET of those jobs' records); the orders
collector runs three grouped counts on indexed columns. Both cache what they
read for ``ttl`` seconds, so many scrapers (or a fast one) cost no more.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from orders.observability.cache import TTLCache
from orders.observability.labels import UNKNOWN, bounded
from orders.observability.order_counts import SHOWN_STATUSES, OrderCounts, order_counts
from reliable_queue import DEAD_REASONS, Queue, QueueStats, oldest_waiting_seconds, stats
from workflows.uow import SessionFactory

log = logging.getLogger("orders.metrics")

STATES = ("ready", "delayed", "active", "dead", "done")
"""``orderflow_queue_jobs`` states (``done``: finished records still retained)."""

QUEUE_COUNTERS: dict[str, tuple[str, str]] = {
    "enqueued": ("orderflow_jobs_enqueued", "Jobs enqueued."),
    "duplicates": (
        "orderflow_enqueue_duplicates",
        "Enqueues absorbed by an idempotency key (the first job's id returned).",
    ),
    "succeeded": ("orderflow_jobs_succeeded", "Jobs acknowledged as done."),
    "retried": ("orderflow_jobs_retried", "Failed runs scheduled to run again."),
    "timed_out": ("orderflow_jobs_timed_out", "Runs failed past their task's time limit."),
    "reaped": ("orderflow_jobs_reaped", "Expired leases taken back from lost workers."),
    "stale_refused": (
        "orderflow_stale_acks_refused",
        "Acks, nacks and dead-letters refused because the lease had expired.",
    ),
    "stale_extends": ("orderflow_stale_extends_refused", "Lease extensions refused as stale."),
    "released": ("orderflow_jobs_released", "Jobs handed back unstarted at shutdown."),
    "redriven": ("orderflow_jobs_redriven", "Dead letters replayed."),
    "replayed": ("orderflow_jobs_replayed", "Finished jobs replayed (fault injection)."),
    "purged": ("orderflow_dead_letters_purged", "Dead letters deleted."),
    "rate_limited": (
        "orderflow_jobs_rate_limited",
        "Fetches deferred by the queue's rate limit (no lease held, no attempt charged).",
    ),
    "throttled": (
        "orderflow_jobs_throttled",
        "Runs throttled by a downstream, put off with no attempt charged.",
    ),
    "dlq_dropped": (
        "orderflow_dead_letters_dropped",
        "Dead letters dropped by the DLQ size or age bound.",
    ),
    "orphans_repaired": (
        "orderflow_orphans_repaired",
        "Job records found in no structure by the audit and put back on ready.",
    ),
}
"""Counter in ``reliable_queue`` stats -> (metric name without ``_total``, help)."""

_UP_HELP = "1 when the last reading of this source succeeded, else 0."


class QueueCollector(Collector):
    """Depths and lifetime counters of the queues, from Redis.

    Exposes ``orderflow_queue_jobs{queue,task,state}`` (gauge), one counter
    per entry of :data:`QUEUE_COUNTERS`, ``orderflow_jobs_dead_lettered_total
    {queue,task,reason}``, ``orderflow_queue_audit_findings{queue,task,kind}``
    (gauge), ``orderflow_queue_paused{queue,task}`` (gauge, 1 while paused) and
    ``orderflow_queue_oldest_waiting_seconds{queue,task}`` (gauge, seconds:
    ``reliable_queue.oldest_waiting_seconds``), ``orderflow_queue_key_cap{queue,task}``
    (gauge, the per-key cap, 0 for none), plus ``orderflow_redis_up``.
    The counters live in Redis, bumped by the queue's Lua scripts, so they count
    every process's work exactly once and survive worker restarts.

    Args:
        queues: queue name -> Queue.
        task_of: queue name -> the task its jobs run (orderflow: one per queue).
        ttl: seconds a reading is reused.
    """

    def __init__(
        self, queues: Mapping[str, Queue], task_of: Callable[[str], str], *, ttl: float = 5.0
    ) -> None:
        self.queues = dict(queues)
        self.task_of = task_of
        self.cache: TTLCache[tuple[list[QueueStats], dict[str, float]]] = TTLCache(self._read, ttl)

    def _read(self) -> tuple[list[QueueStats], dict[str, float]]:
        readings = [stats(q) for q in self.queues.values()]
        return readings, {q.name: oldest_waiting_seconds(q) for q in self.queues.values()}

    def describe(self) -> Iterable[Metric]:
        """Nothing up front (so registering does not read Redis)."""
        return []

    def collect(self) -> Iterator[Metric]:
        """Yield the families; a Redis failure yields only ``up == 0``."""
        try:
            readings, waited = self.cache.get()
        except Exception as exc:
            log.warning("metrics: Redis reading failed: %s", exc)
            yield GaugeMetricFamily("orderflow_redis_up", _UP_HELP, value=0)
            return
        yield GaugeMetricFamily("orderflow_redis_up", _UP_HELP, value=1)
        yield from queue_families(readings, self.task_of)
        oldest = GaugeMetricFamily(
            "orderflow_queue_oldest_waiting_seconds",
            "How long the longest-waiting job has waited to start, seconds (0: none waits).",
            labels=["queue", "task"],
        )
        for queue, seconds in waited.items():
            oldest.add_metric([queue, self.task_of(queue)], seconds)
        yield oldest


def queue_families(
    readings: Iterable[QueueStats], task_of: Callable[[str], str]
) -> Iterator[Metric]:
    """Turn queue stats into metric families (see :class:`QueueCollector`)."""
    readings = list(readings)
    depth = GaugeMetricFamily(
        "orderflow_queue_jobs", "Jobs in each state now.", labels=["queue", "task", "state"]
    )
    counters = {
        name: CounterMetricFamily(metric, text, labels=["queue", "task"])
        for name, (metric, text) in QUEUE_COUNTERS.items()
    }
    findings = GaugeMetricFamily(
        "orderflow_queue_audit_findings",
        "What the last complete audit found: orphans (left unrepaired), doubles, no_record.",
        labels=["queue", "task", "kind"],
    )
    paused = GaugeMetricFamily(
        "orderflow_queue_paused",
        "1 while the queue is paused (its workers start none of its jobs), else 0.",
        labels=["queue", "task"],
    )
    cap = GaugeMetricFamily(
        "orderflow_queue_key_cap",
        "Most jobs of one fairness key leased at once (0: no cap).",
        labels=["queue", "task"],
    )
    dead = CounterMetricFamily(
        "orderflow_jobs_dead_lettered",
        "Jobs moved to the dead-letter queue, by reason.",
        labels=["queue", "task", "reason"],
    )
    for s in readings:
        task = task_of(s.queue)
        for state in STATES:
            depth.add_metric([s.queue, task, state], getattr(s, state))
        for name, family in counters.items():
            family.add_metric([s.queue, task], s.counters.get(name, 0))
        reasons = dict.fromkeys((*DEAD_REASONS, UNKNOWN), 0)
        for key, value in s.counters.items():
            if key.startswith("dead:"):  # any text another writer put in the hash
                reasons[bounded(key[5:], DEAD_REASONS)] += value
        for reason, value in reasons.items():
            dead.add_metric([s.queue, task, reason], value)
        for kind in ("orphans", "doubles", "no_record"):
            findings.add_metric([s.queue, task, kind], s.audit.get(kind, 0))
        paused.add_metric([s.queue, task], 1 if s.paused is not None else 0)
        cap.add_metric([s.queue, task], s.key_cap or 0)
    yield depth
    yield findings
    yield paused
    yield cap
    yield from counters.values()
    yield dead


class OrdersCollector(Collector):
    """Orders by status and the outbox backlog, from the database.

    Exposes ``orderflow_orders{status}`` (in_progress, completed, out_of_stock,
    blocked), ``orderflow_orders_placed`` (all of them) and
    ``orderflow_outbox_backlog`` (step records not yet published),
    ``orderflow_outbox_unpublishable`` (step records given up), plus
    ``orderflow_database_up``.

    Args:
        session_factory: makes a read-only session per reading.
        ttl: seconds a reading is reused.
    """

    def __init__(self, session_factory: SessionFactory, *, ttl: float = 5.0) -> None:
        self.session_factory = session_factory
        self.cache: TTLCache[OrderCounts] = TTLCache(self._read, ttl)

    def _read(self) -> OrderCounts:
        with self.session_factory() as session:
            return order_counts(session)

    def describe(self) -> Iterable[Metric]:
        """Nothing up front (so registering does not query the database)."""
        return []

    def collect(self) -> Iterator[Metric]:
        """Yield the families; a database failure yields only ``up == 0``."""
        try:
            counts = self.cache.get()
        except Exception as exc:
            log.warning("metrics: database reading failed: %s", exc)
            yield GaugeMetricFamily("orderflow_database_up", _UP_HELP, value=0)
            return
        yield GaugeMetricFamily("orderflow_database_up", _UP_HELP, value=1)
        orders = GaugeMetricFamily("orderflow_orders", "Orders by status now.", labels=["status"])
        for status in SHOWN_STATUSES:
            orders.add_metric([status], getattr(counts, status))
        yield orders
        yield GaugeMetricFamily(
            "orderflow_orders_placed", "Orders placed so far.", value=counts.placed
        )
        yield GaugeMetricFamily(
            "orderflow_outbox_backlog",
            "Step records written but not yet published to their queue.",
            value=counts.outbox_backlog,
        )
        yield GaugeMetricFamily(
            "orderflow_outbox_unpublishable",
            "Step records the relay gave up publishing (orders blocked; `orders outbox list`).",
            value=counts.outbox_unpublishable,
        )
