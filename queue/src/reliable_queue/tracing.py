"""OpenTelemetry spans of the queue, on the API alone: producer spans at enqueue.

A :class:`~reliable_queue.Queue` given a tracer records one PRODUCER span
``send <queue>`` per enqueued job: its parent is the request's ``trace_context``
(else the current context), it links to the current span when that is another
operation (a relay pass), and its own context is what the record stores, so every
attempt of the job is its child (the consumer side: :mod:`reliable_queue.attempt_tracing`).
A queue without a tracer stores the request's context as it is, at no cost.
Attribute names follow the OpenTelemetry messaging conventions; the reasoning is in
docs/adr/0036-trace-context-travels-in-the-job-record.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .ids import new_job_id
from .job import EnqueueRequest
from .trace_context import TraceContext

#: ``messaging.system`` of every span of the queue
MESSAGING_SYSTEM = "reliable_queue"
#: the W3C propagator, whatever ``OTEL_PROPAGATORS`` says: records hold W3C text
_W3C = TraceContextTextMapPropagator()

SYSTEM = "messaging.system"
DESTINATION = "messaging.destination.name"
MESSAGE_ID = "messaging.message.id"
OPERATION_TYPE = "messaging.operation.type"
OPERATION_NAME = "messaging.operation.name"
BATCH_COUNT = "messaging.batch.message_count"
IDEMPOTENCY_KEY = "reliable_queue.idempotency_key"
DUPLICATE = "reliable_queue.duplicate"


def context_of(trace_context: TraceContext | None) -> Context | None:
    """The OpenTelemetry context whose remote parent is ``trace_context`` (None: None)."""
    if trace_context is None:
        return None
    return _W3C.extract(trace_context.carrier())


def span_context_of(trace_context: TraceContext | None) -> trace.SpanContext | None:
    """The remote span context ``trace_context`` names, or None."""
    if trace_context is None:
        return None
    context = context_of(trace_context)
    span_context = trace.get_current_span(context).get_span_context()
    return span_context if span_context.is_valid else None


def trace_context_of(span: Span) -> TraceContext | None:
    """The W3C context of ``span`` (None when it has no valid span context)."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, context=trace.set_span_in_context(span))
    return TraceContext.from_carrier(carrier)


def current_trace_context() -> TraceContext | None:
    """The W3C context of the current span, or None when there is none."""
    return trace_context_of(trace.get_current_span())


class ProducerSpans:
    """The producer spans of one ``enqueue_many`` call (built by :meth:`start`).

    Attributes:
        requests: the requests, each carrying its producer span's context.
        ids: the job id chosen for each request, in order.
    """

    def __init__(self, spans: list[Span], requests: list[EnqueueRequest], ids: list[str]) -> None:
        self._spans = spans
        self.requests = requests
        self.ids = ids
        self._ended = 0

    @classmethod
    def start(
        cls, tracer: Tracer, queue: str, requests: Sequence[EnqueueRequest], now: float
    ) -> ProducerSpans:
        """Start one ``send <queue>`` span per request and choose its job id.

        Args:
            tracer: the queue's tracer.
            queue: the queue name.
            requests: the requests of the call.
            now: epoch seconds the job ids are stamped with.
        """
        current = trace.get_current_span().get_span_context()
        link = [Link(current)] if current.is_valid else []
        spans: list[Span] = []
        made: list[EnqueueRequest] = []
        ids: list[str] = []
        name = f"send {queue}"
        for request in requests:
            job_id = new_job_id(now)
            attributes: dict[str, Any] = {
                SYSTEM: MESSAGING_SYSTEM,
                DESTINATION: queue,
                OPERATION_TYPE: "send",
                OPERATION_NAME: "send",
                MESSAGE_ID: job_id,
            }
            if request.idempotency_key is not None:
                attributes[IDEMPOTENCY_KEY] = request.idempotency_key
            parent = request.trace_context
            span = tracer.start_span(
                name,
                context=context_of(parent),  # None: the current context
                kind=SpanKind.PRODUCER,
                attributes=attributes,
                links=link if parent is not None else (),
            )
            spans.append(span)
            made.append(replace(request, trace_context=trace_context_of(span) or parent))
            ids.append(job_id)
        return cls(spans, made, ids)

    def sent(self, stored: Sequence[str]) -> None:
        """End the spans of the next ``len(stored)`` requests, with the ids the queue gave.

        Args:
            stored: the job ids the script returned, in request order; an id other than
                the one chosen is a duplicate of an earlier job (its idempotency key).
        """
        for job_id in stored:
            span, chosen = self._spans[self._ended], self.ids[self._ended]
            if job_id != chosen:
                span.set_attribute(MESSAGE_ID, job_id)
                span.set_attribute(DUPLICATE, True)
            span.end()
            self._ended += 1

    def failed(self, error: BaseException) -> None:
        """End every span not ended yet with ``error`` (the call raised it)."""
        for span in self._spans[self._ended :]:
            span.record_exception(error)
            span.set_status(StatusCode.ERROR, f"{type(error).__name__}: {error}"[:200])
            span.end()
        self._ended = len(self._spans)


__all__ = [
    "MESSAGING_SYSTEM",
    "ProducerSpans",
    "context_of",
    "current_trace_context",
    "span_context_of",
    "trace_context_of",
]
