"""Consumer spans of a worker's attempts: one middleware and four hooks, passed to ``Worker``.

Each delivery is a CONSUMER span ``process <queue>`` whose parent is the job's
creation context (read from its record by the ``after_fetch`` hook,
``codec.trace_context_of``), so the attempts of one job are siblings in its trace.
A handler call of several jobs (a batch task) is one more ``process <queue>`` span
of its own, a root with ``messaging.batch.message_count``
and a link to every job's context; each job's span links to it. A span stays open
until its settlement's reply: its ``reliable_queue.outcome`` is ``acked``,
``retried``, ``dead-lettered``, ``throttled`` (held back by a downstream, uncharged:
ADR 0034; past its budget ``retried`` or ``dead-lettered``), ``timed out``,
``duplicate absorbed`` (told by the application, :meth:`AttemptTracing.note`),
``stale ack refused``, ``released``
(handed back unrun) or ``unsettled`` (:meth:`AttemptTracing.close`). A worker built
without this piece pays nothing for it. Reasoning: docs/adr/0036.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind, StatusCode, Tracer

from .codec import trace_context_of
from .execution import Dead, Outcome, Retry, Throttle
from .job import JobContext, Lease, RawJob
from .middleware import BatchMiddleware, CallNext, Items, Results
from .trace_context import TraceContext
from .tracing import (
    BATCH_COUNT,
    DESTINATION,
    MESSAGE_ID,
    MESSAGING_SYSTEM,
    OPERATION_NAME,
    OPERATION_TYPE,
    SYSTEM,
    context_of,
    span_context_of,
)
from .worker import WorkerHooks

ATTEMPT = "reliable_queue.attempt"
LEASE_TOKEN = "reliable_queue.lease_token"
OUTCOME = "reliable_queue.outcome"
TASK = "reliable_queue.task"
DEAD_REASON = "reliable_queue.dead_reason"

ACKED = "acked"
RETRIED = "retried"
DEAD_LETTERED = "dead-lettered"
THROTTLED = "throttled"
TIMED_OUT = "timed out"
DUPLICATE = "duplicate absorbed"
STALE = "stale ack refused"
RELEASED = "released"
UNSETTLED = "unsettled"
#: a throttle past its attempt's budget: what the worker tells it became -> the outcome
_PAST_BUDGET = {"nack": RETRIED, "dead": DEAD_LETTERED}
#: the outcomes that are failures of the attempt (span status ERROR)
_FAILED = frozenset({RETRIED, DEAD_LETTERED, TIMED_OUT, STALE})
#: longest error text kept in a span's status, characters
STATUS_CHARS = 500


class _Open:
    """One attempt's open span and what is known of its outcome so far."""

    __slots__ = ("error", "outcome", "span")

    def __init__(self, span: Span) -> None:
        self.span = span
        self.outcome: str | None = None
        self.error = ""


class AttemptTracing:
    """The tracing piece of a worker: ``Worker(middleware=[t.middleware, ...],
    hooks=t.hooks(base))``.

    Args:
        tracer: the OpenTelemetry tracer the spans are made with.
        max_open: most spans kept open waiting for their settlement; past it the
            oldest is ended as ``unsettled`` (a settlement that never came back).

    Thread-safe: lanes, the heartbeat and the hooks call it from their threads.
    """

    def __init__(self, tracer: Tracer, *, max_open: int = 100_000) -> None:
        self._tracer = tracer
        self._max_open = max_open
        self._open: dict[Lease, _Open] = {}
        self._fetched: dict[Lease, TraceContext | None] = {}
        self._lock = threading.Lock()
        self.middleware = _AttemptSpans(self)
        """The :class:`~reliable_queue.middleware.BatchMiddleware` that opens the spans;
        put it first (outermost), so that it sees every job the others see."""

    # ----------------------------------------------------------------- spans
    def creation(self, ctx: JobContext) -> TraceContext | None:
        """The creation context of a delivery :meth:`after_fetch` read (None: none)."""
        with self._lock:
            return self._fetched.get(Lease(ctx.job_id, ctx.lease_token))

    def start(self, ctx: JobContext, links: list[Link]) -> Span:
        """Open the span of one delivery, a child of the job's creation context."""
        lease = Lease(ctx.job_id, ctx.lease_token)
        with self._lock:
            creation = self._fetched.pop(lease, None)
        span = self._tracer.start_span(
            f"process {ctx.queue}",
            context=context_of(creation) or Context(),
            kind=SpanKind.CONSUMER,
            links=links,
            attributes={
                SYSTEM: MESSAGING_SYSTEM,
                DESTINATION: ctx.queue,
                OPERATION_TYPE: "process",
                OPERATION_NAME: "process",
                MESSAGE_ID: ctx.job_id,
                TASK: ctx.task,
                ATTEMPT: ctx.attempt,
                LEASE_TOKEN: ctx.lease_token,
            },
        )
        stale: list[_Open] = []
        with self._lock:
            self._open[lease] = _Open(span)
            while len(self._open) > self._max_open:
                stale.append(self._open.pop(next(iter(self._open))))
        for entry in stale:
            _end(entry, UNSETTLED)
        return span

    def start_batch(self, items: Items) -> Span:
        """Open the root span of a handler call of several jobs, linked to each job."""
        first = items[0][1]
        links = [
            Link(parent) for _, ctx in items if (parent := span_context_of(self.creation(ctx)))
        ]
        return self._tracer.start_span(
            f"process {first.queue}",
            context=Context(),  # its own root: never a borrowed parent
            kind=SpanKind.CONSUMER,
            links=links,
            attributes={
                SYSTEM: MESSAGING_SYSTEM,
                DESTINATION: first.queue,
                OPERATION_TYPE: "process",
                OPERATION_NAME: "process",
                TASK: first.task,
                BATCH_COUNT: len(items),
            },
        )

    def note(self, ctx: JobContext, outcome: str) -> None:
        """Record an outcome the application knows better than the queue (``duplicate
        absorbed``: the handler found the step done); the queue's settlement still ends
        the span, and a refused one overrides it."""
        with self._lock:
            entry = self._open.get(Lease(ctx.job_id, ctx.lease_token))
            if entry is not None:
                entry.outcome = outcome

    def failed(self, ctx: JobContext, error: BaseException) -> None:
        """Record the exception a delivery's run ended with on its span."""
        with self._lock:
            entry = self._open.get(Lease(ctx.job_id, ctx.lease_token))
        if entry is not None:
            entry.span.record_exception(error)

    # ----------------------------------------------------------------- hooks
    def after_fetch(self, jobs: list[RawJob]) -> None:
        """Worker hook: read each fetched job's creation context from its record (a
        worker without this piece reads nothing more per job)."""
        read = {job.lease: trace_context_of(job.record) for job in jobs}
        with self._lock:
            self._fetched.update(read)
            while len(self._fetched) > self._max_open:  # jobs that never ran: bounded
                self._fetched.pop(next(iter(self._fetched)))

    def on_outcome(self, job: RawJob, outcome: Outcome) -> None:
        """Worker hook: the outcome the lane is about to settle."""
        with self._lock:
            self._fetched.pop(job.lease, None)  # settled without running (a bad record)
            entry = self._open.get(job.lease)
            if entry is None:
                return
            if isinstance(outcome, Retry):
                entry.outcome, entry.error = RETRIED, outcome.error
            elif isinstance(outcome, Dead):
                entry.outcome, entry.error = DEAD_LETTERED, outcome.error
                entry.span.set_attribute(DEAD_REASON, outcome.reason)
            elif isinstance(outcome, Throttle):  # the reply tells if it was past its budget
                entry.outcome, entry.error = THROTTLED, outcome.error
            elif entry.outcome is None:
                entry.outcome = ACKED

    def on_settled(self, queue: str, script: str, leases: list[Lease], refused: list[str]) -> None:
        """Worker hook: a settlement's reply came back; end the spans it settled."""
        stale = set(refused)
        ended: list[tuple[_Open, str]] = []
        with self._lock:
            for lease in leases:
                self._fetched.pop(lease, None)  # handed back unrun
                entry = self._open.pop(lease, None)
                if entry is None:
                    continue
                if lease.job_id in stale:
                    outcome = STALE
                elif script == "release":
                    outcome = RELEASED
                elif entry.outcome == THROTTLED and script != "throttle":
                    outcome = _PAST_BUDGET.get(script, THROTTLED)  # charged after all
                    if outcome == DEAD_LETTERED:
                        entry.span.set_attribute(DEAD_REASON, "retries_exhausted")
                else:
                    outcome = entry.outcome or ACKED
                ended.append((entry, outcome))
        for entry, outcome in ended:
            _end(entry, outcome)

    def on_attempt_lost(self, queue: str, lease: Lease, reason: str) -> None:
        """Worker hook: the worker took an attempt's lease from it. A time-out settles
        the job at once (its span ends ``timed out``); an abandoned, unstarted batch-mate
        is handed back (``released``); a lost lease waits for its refused settlement."""
        if reason not in ("timed_out", "abandoned"):
            return
        with self._lock:
            entry = self._open.pop(lease, None)
        if entry is not None:
            _end(entry, TIMED_OUT if reason == "timed_out" else RELEASED)

    def hooks(self, base: WorkerHooks | None = None) -> WorkerHooks:
        """``base``'s hooks with this piece's added (each of ``base``'s runs first).

        Returns:
            A new :class:`~reliable_queue.WorkerHooks`; ``base`` is not changed.
        """
        base = base or WorkerHooks()
        return WorkerHooks(
            after_fetch=_both(base.after_fetch, self.after_fetch),
            before_settle=base.before_settle,
            on_outcome=_both(base.on_outcome, self.on_outcome),
            on_attempt_lost=_both(base.on_attempt_lost, self.on_attempt_lost),
            on_settled=_both(base.on_settled, self.on_settled),
        )

    def close(self) -> int:
        """End every span still open as ``unsettled`` (the worker stopped).

        Returns:
            How many were ended.
        """
        with self._lock:
            left = list(self._open.values())
            self._open.clear()
        for entry in left:
            _end(entry, UNSETTLED)
        return len(left)


def _end(entry: _Open, outcome: str) -> None:
    span = entry.span
    span.set_attribute(OUTCOME, outcome)
    if outcome in _FAILED:
        why = entry.error or outcome
        span.set_attribute("error.type", why.partition(":")[0][:100] if entry.error else outcome)
        span.set_status(StatusCode.ERROR, why[:STATUS_CHARS])
    span.end()


def _both(first: Callable[..., None] | None, second: Callable[..., None]) -> Callable[..., None]:
    """``first`` then ``second`` (``second`` alone when there is no ``first``)."""
    if first is None:
        return second

    def both(*args: Any) -> None:
        try:
            first(*args)
        finally:
            second(*args)

    return both


class _AttemptSpans(BatchMiddleware):
    """Opens the spans of the jobs of one handler call and makes one current while it runs."""

    def __init__(self, tracing: AttemptTracing) -> None:
        self._tracing = tracing

    def around(self, items: Items, call_next: CallNext) -> Results:
        """Open the spans, run ``call_next`` with the call's span current, record errors."""
        tracing = self._tracing
        batch: Span | None = None
        if len(items) == 1:
            current = tracing.start(items[0][1], [])
        else:
            batch = current = tracing.start_batch(items)
            link = [Link(batch.get_span_context())]
            for _, ctx in items:
                tracing.start(ctx, link)
        token = otel_context.attach(trace.set_span_in_context(current))
        try:
            results = call_next(items)
        except BaseException as exc:
            for _, ctx in items:
                tracing.failed(ctx, exc)
            if batch is not None:
                batch.record_exception(exc)
                batch.set_status(StatusCode.ERROR, f"{type(exc).__name__}"[:STATUS_CHARS])
            raise
        finally:
            otel_context.detach(token)
            if batch is not None:
                batch.end()
        for (_, ctx), error in zip(items, results, strict=False):
            if error is not None:
                tracing.failed(ctx, error)
        return results


__all__ = ["AttemptTracing"]
