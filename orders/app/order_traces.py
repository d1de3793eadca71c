"""The trace each placed order starts or continues: one ``place order`` span per order.

Placement asks for the spans before it writes a batch, writes each order's context on
its step rows in the same transaction (``workflows.outbox.WorkflowSpec.trace_context``)
and ends the spans after the commit. Every later span of the order (the relay's
producer spans, each attempt, its compensations) descends from that context. A
caller with a current span (a script) or a W3C context it hands in (an HTTP
request's ``traceparent``) has its orders continue its trace; without one each order
is the root of a trace of its own. Tracing off (no tracer): no span, and only a
caller's context is written, unrecorded. Reasoning: docs/adr/0036.
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.trace import Span, SpanKind, StatusCode, Tracer

from reliable_queue.trace_context import TraceContext
from reliable_queue.tracing import context_of, current_trace_context, trace_context_of

#: attribute: the order's id
ORDER_ID = "orders.order_id"
#: attribute: where the order came from (``tpch``, ``random``)
SOURCE = "orders.source"


class OrderSpans:
    """The ``place order`` spans of one batch of drafts, one per draft in order.

    Attributes:
        contexts: the trace context of each order, to write on its step rows.
    """

    def __init__(self, spans: list[Span], contexts: list[TraceContext | None]) -> None:
        self._spans = spans
        self.contexts = contexts

    @classmethod
    def start(
        cls,
        tracer: Tracer | None,
        count: int,
        source: str,
        parent: TraceContext | None = None,
    ) -> OrderSpans:
        """Start the spans of ``count`` orders: children of ``parent`` (a caller's W3C
        context, e.g. an HTTP request's ``traceparent``) when given, else of the current
        span, if any.

        Args:
            tracer: None records no span; each order then carries ``parent`` or the
                current span's context (or none).
            count: orders in the batch.
            source: the orders' source, recorded on each span.
            parent: the caller's context the orders continue; None: the current span's.
        """
        if tracer is None:
            return cls([], [parent or current_trace_context()] * count)
        context = context_of(parent)  # None: the current context
        spans = [
            tracer.start_span(
                "place order",
                context=context,
                kind=SpanKind.INTERNAL,
                attributes={SOURCE: source},
            )
            for _ in range(count)
        ]
        return cls(spans, [trace_context_of(span) for span in spans])

    def placed(self, order_ids: Sequence[int]) -> None:
        """Name each span's order (the ids the batch's insert gave them)."""
        for span, order_id in zip(self._spans, order_ids, strict=False):
            span.set_attribute(ORDER_ID, order_id)

    def end(self, error: BaseException | None = None) -> None:
        """End every span; ``error`` (the batch did not commit) is recorded on each."""
        for span in self._spans:
            if error is not None:
                span.record_exception(error)
                span.set_status(StatusCode.ERROR, f"{type(error).__name__}: {error}"[:200])
            span.end()
        self._spans = []


__all__ = ["OrderSpans"]
