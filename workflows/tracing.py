"""The relay's spans: each publishing pass is a root span with one link per row it publishes.

A pass (``relay publish`` after a writer's commit, ``relay sweep`` for the sweep's
rows) serves the rows of many workflows, so it borrows none of their traces as its
parent: it links to each row's context, and the queue's producer span of each job,
a child of its row's context, links back to the pass (``reliable_queue.tracing``).
No tracer: no span, nothing done. Reasoning: docs/adr/0036.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind, Tracer

from reliable_queue.tracing import span_context_of
from workflows.messages import StepMessage

#: attribute: the rows a pass publishes
ROWS = "workflows.relay.rows"
#: attribute: True for the sweep's pass over dispatched rows the queue lost
REPUBLISH = "workflows.relay.republish"


@contextmanager
def relay_pass(
    tracer: Tracer | None, name: str, messages: Sequence[StepMessage], *, republish: bool = False
) -> Iterator[Span | None]:
    """A root span, current while the block runs, linked to every message's context.

    Args:
        tracer: None records nothing (the block just runs).
        name: ``relay publish`` or ``relay sweep``.
        messages: the rows' messages, each with its row's trace context.
        republish: the sweep's pass over lost rows.

    Yields:
        The span, or None without a tracer. An exception of the block is recorded
        on it and raised again.
    """
    if tracer is None:
        yield None
        return
    links = [Link(parent) for m in messages if (parent := span_context_of(m.trace_context))]
    attributes: dict[str, int | bool] = {ROWS: len(messages)}
    if republish:
        attributes[REPUBLISH] = True
    with tracer.start_as_current_span(
        name, context=Context(), kind=SpanKind.INTERNAL, links=links, attributes=attributes
    ) as span:
        yield span


__all__ = ["relay_pass"]
