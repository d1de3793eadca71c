"""What worker processes record: handler time, start latency, failures, duplicates,
and each order's placement-to-completion time.

These are the figures only a worker sees. Counts that Redis keeps itself
(enqueued, succeeded, retried, dead-lettered, reaped, stale acks refused) are
read from Redis by ``collectors.QueueCollector`` instead, so they are exact
across every process and survive worker restarts.

Call ``multiproc.enable_multiprocess`` before building :class:`WorkerMetrics`
when several processes should add up (``orders worker`` does).
"""

from __future__ import annotations

import re
import time
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Sequence

from prometheus_client import Counter, Histogram

from orders.domain.steps import ALL_STEPS, TASKS, queue_name, task_name
from orders.observability.labels import bounded
from reliable_queue import RawJob
from reliable_queue.attempts import REASONS as GUARD_REASONS
from reliable_queue.codec import RecordDecodeError, decode_record
from reliable_queue.execution import Dead, Outcome, Retry
from reliable_queue.middleware import BatchMiddleware, CallNext, Items, Results
from workflows.errors import FencedOut
from workflows.tracker import StepResult

HANDLER_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
"""Seconds; handler runs are database transactions, usually milliseconds."""

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)
"""Seconds from enqueue to the start of the first attempt."""

COMPLETION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600)
"""Seconds from an order's placement to its last step's commit."""

REFUSAL_REASONS = (*GUARD_REASONS, FencedOut.reason)
"""Why a delivery's commit is refused: its attempt guard's reason or the database's."""

_ERROR_CLASS = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*): ")


def error_kind(outcome: Retry | Dead) -> str:
    """A bounded label for a failure: the exception class name, else the DLQ reason.

    Args:
        outcome: a Retry or Dead outcome (its ``error`` reads ``"Type: message"``).
    """
    match = _ERROR_CLASS.match(outcome.error)
    if match:
        return match.group(1).rsplit(".", 1)[-1]
    return outcome.reason if isinstance(outcome, Dead) else "error"


def job_labels(queue: str, task: str) -> tuple[str, str]:
    """The ``queue`` and ``task`` label values of a job, bounded to orderflow's own
    queues and task names (anything else, e.g. a foreign producer's task: ``unknown``)."""
    return bounded(queue, ALL_STEPS), bounded(task, TASKS)


def observe_all(histogram: Histogram, amounts: Sequence[float]) -> None:
    """Observe each of ``amounts`` in ``histogram`` (a labelled child): what
    ``observe(a)`` for every ``a`` records, with one write per bucket touched.

    A batch of 50 jobs observed one by one wrote its sum and a bucket 50 times: in a
    multi-process folder each write takes a lock and updates the process's file. Its
    amounts fall in one bucket or two, so they take a write or two and one of the sum.
    This reads the histogram's own bucket bounds and values (prometheus_client's
    ``_upper_bounds``, ``_buckets`` and ``_sum``; a test holds it to ``observe``).

    Args:
        histogram: a histogram without labels, or a child (``.labels(...)``).
        amounts: the observations (seconds, for orderflow's histograms).
    """
    if not amounts:
        return
    bounds = histogram._upper_bounds  # type: ignore[attr-defined]
    counts: dict[int, int] = defaultdict(int)
    for amount in amounts:
        if amount == amount:  # a NaN has no bucket, as in observe
            counts[bisect_left(bounds, amount)] += 1  # the first bound >= amount, as observe
    histogram._sum.inc(sum(amounts))  # type: ignore[attr-defined]
    buckets = histogram._buckets  # type: ignore[attr-defined]
    for i, count in counts.items():
        buckets[i].inc(count)


class HandlerTiming(BatchMiddleware):
    """Worker middleware: time each job's handler run; record first attempts' start latency.

    Every job is observed once in each histogram, alone or in a batch. A job of
    a batch (one handler call, one transaction) is observed with the time of that
    call, which is how long the job took to run and commit.

    Args:
        metrics: the histograms to feed (``handler_seconds``, ``start_latency``)
            and the wall clock (``metrics.clock``, epoch seconds).
        timer: monotonic seconds for the run time (injected in tests).
    """

    def __init__(
        self, metrics: WorkerMetrics, timer: Callable[[], float] = time.perf_counter
    ) -> None:
        self.metrics = metrics
        self.timer = timer

    def around(self, items: Items, call_next: CallNext) -> Results:
        """Observe start latency per first attempt, run the rest, observe run time per job.

        The jobs of a call are observed together, per queue and task
        (:func:`observe_all`), each exactly once in each histogram.
        """
        now = self.metrics.clock()
        jobs: dict[tuple[str, str], int] = defaultdict(int)
        latencies: dict[tuple[str, str], list[float]] = defaultdict(list)
        for _, ctx in items:
            key = (ctx.queue, ctx.task)
            jobs[key] += 1
            if ctx.attempt == 1:
                latencies[key].append(max(now - ctx.enqueued_at, 0.0))
        for key, amounts in latencies.items():
            observe_all(self.metrics.start_latency.labels(*job_labels(*key)), amounts)
        started = self.timer()
        try:
            return call_next(items)
        finally:
            elapsed = self.timer() - started
            for key, count in jobs.items():
                observe_all(
                    self.metrics.handler_seconds.labels(*job_labels(*key)), [elapsed] * count
                )


class WorkerMetrics:
    """Metric objects of one worker process, and the hooks that feed them.

    Metric names (``queue`` and ``task`` labels unless said otherwise):

    - ``orderflow_job_handler_seconds`` (histogram): one handler run, middleware
      and injected faults included, seconds; a job handled in a batch counts the
      batch's handler call (every job of the batch is observed).
    - ``orderflow_job_start_latency_seconds`` (histogram): enqueue to the start
      of the first attempt, seconds (retries wait on purpose and are left out).
    - ``orderflow_jobs_failed_total`` (+ ``error``: exception class or DLQ reason):
      runs that ended in a retry or a dead letter.
    - ``orderflow_duplicates_absorbed_total``: redeliveries of a finished step
      that the idempotent handler acknowledged without a second effect.
    - ``orderflow_attempts_fenced_total`` (labels ``step`` and ``reason``, one of
      :data:`REFUSAL_REASONS`): deliveries whose commit was refused because the
      attempt no longer held its step (ADR 0023); nothing of them was applied.
    - ``orderflow_order_completion_seconds`` (histogram, no labels): placement to
      completion of each order, seconds.

    Args:
        clock: wall clock, epoch seconds (compared with the producer's enqueue time).
    """

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        labels = ("queue", "task")
        self.handler_seconds = Histogram(
            "orderflow_job_handler_seconds",
            "Handler run time (middleware included), seconds.",
            labels,
            buckets=HANDLER_BUCKETS,
            registry=None,
        )
        self.start_latency = Histogram(
            "orderflow_job_start_latency_seconds",
            "Enqueue to start of the first attempt, seconds.",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=None,
        )
        self.failed = Counter(
            "orderflow_jobs_failed",
            "Handler runs that ended in a retry or a dead letter.",
            (*labels, "error"),
            registry=None,
        )
        self.duplicates = Counter(
            "orderflow_duplicates_absorbed",
            "Redeliveries absorbed by idempotent handlers (no second effect).",
            labels,
            registry=None,
        )
        self.attempts_fenced = Counter(
            "orderflow_attempts_fenced",
            "Deliveries whose commit was refused: the attempt no longer held its step.",
            ("step", "reason"),
            registry=None,
        )
        self.order_completion = Histogram(
            "orderflow_order_completion_seconds",
            "Order placement to completion, seconds.",
            buckets=COMPLETION_BUCKETS,
            registry=None,
        )
        self.middleware = HandlerTiming(self)
        """The worker middleware feeding the two per-job histograms."""

    def declare(self, queue: str, task: str) -> None:
        """Create the ``queue``/``task`` series at zero, so they show before the first job."""
        self.handler_seconds.labels(queue, task)
        self.start_latency.labels(queue, task)
        self.duplicates.labels(queue, task)

    def on_refused(self, step: str, reason: str) -> None:
        """Count one delivery whose commit was refused (labels bounded)."""
        self.attempts_fenced.labels(
            bounded(step, ALL_STEPS), bounded(reason, REFUSAL_REASONS)
        ).inc()

    def on_outcome(self, job: RawJob, outcome: Outcome) -> None:
        """Worker ``on_outcome`` hook: count runs that failed (retry or dead letter)."""
        if not isinstance(outcome, Retry | Dead):
            return
        try:
            task = decode_record(job.record).task
        except RecordDecodeError:
            task = "?"
        self.failed.labels(*job_labels(job.queue, task), error_kind(outcome)).inc()

    def on_results(self, step: str, results: Sequence[StepResult]) -> None:
        """Step-handler hook, once per handler call: count absorbed duplicates; time
        the orders this call completed (``StepResult.workflow_seconds``, from the
        commit itself: nothing is read back)."""
        duplicates = sum(1 for result in results if result.duplicate)
        if duplicates:
            self.duplicates.labels(queue_name(step), task_name(step)).inc(duplicates)
        for result in results:
            if result.workflow_seconds is not None:
                self.order_completion.observe(result.workflow_seconds)
