"""An order's trace as a waterfall: its spans as a tree in time, and the spans linked to it.

Pure: it takes the spans read back (``orders.observability.trace_files``) and the
order's trace ids, and returns rows in display order, each with its depth, its place
on the time axis (percent) and one line of detail. ``orders trace`` draws them in the
terminal and the dashboard's order page as HTML; both escape the text they show
(ADR 0013). A span whose parent is not among them (its process was killed before it
exported) is shown at the top level, marked.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from orders.observability.trace_files import SpanRecord


@dataclass(frozen=True)
class TraceRow:
    """One span of the waterfall.

    Attributes:
        span: the span.
        depth: 0 for a root, +1 per parent.
        offset_ms: its start, milliseconds after the first span's.
        left / width: its bar, in percent of the axis.
        detail: attempt, outcome, job, error... in one line (untrusted text inside).
        linked: a span of another trace that links to this one (a relay pass, a batch
            delivery).
        orphan: its parent is missing from the spans read (lost with its process).
    """

    span: SpanRecord
    depth: int
    offset_ms: float
    left: float
    width: float
    detail: str
    linked: bool = False
    orphan: bool = False


@dataclass(frozen=True)
class TraceView:
    """The rows of one order's trace and the axis they are drawn on.

    Attributes:
        trace_ids: the order's trace ids (one, unless rows were written in several).
        rows: the rows, tree order first (children by start), then the linked spans.
        total_ms: the axis's length, milliseconds.
    """

    trace_ids: tuple[str, ...]
    rows: tuple[TraceRow, ...]
    total_ms: float


def detail_of(span: SpanRecord) -> str:
    """One line saying what a span did (from its attributes and status)."""
    a = span.attributes
    parts: list[str] = []
    if "orders.order_id" in a:
        parts.append(f"order {a['orders.order_id']}")
    if "messaging.batch.message_count" in a:
        parts.append(f"batch of {a['messaging.batch.message_count']}")
    elif "reliable_queue.attempt" in a:
        parts.append(f"attempt {a['reliable_queue.attempt']}")
    elif "messaging.message.id" in a:
        parts.append(f"job {str(a['messaging.message.id'])[:14]}")
    if "workflows.relay.rows" in a:
        parts.append(f"{a['workflows.relay.rows']} row(s)")
    if a.get("workflows.relay.republish"):
        parts.append("re-publish")
    if "reliable_queue.outcome" in a:
        parts.append(str(a["reliable_queue.outcome"]))
    if a.get("reliable_queue.duplicate"):
        parts.append("duplicate")
    code, message = span.status
    if code == 2 and message:
        parts.append(message)
    return " · ".join(parts)


def order_trace(spans: Sequence[SpanRecord], trace_ids: Collection[str]) -> TraceView:
    """Lay out ``spans`` as the waterfall of the traces ``trace_ids``.

    Args:
        spans: spans of those traces and spans linking into them, any order.
        trace_ids: the order's trace ids (hex).

    Returns:
        The :class:`TraceView` (no rows when ``spans`` is empty).
    """
    ids = {t.lower() for t in trace_ids}
    own = [s for s in spans if s.trace_id in ids]
    linked = [s for s in spans if s.trace_id not in ids]
    everything = own + linked
    if not everything:
        return TraceView(tuple(sorted(ids)), (), 0.0)
    start = min(s.start_ns for s in everything)
    end = max(max(s.end_ns, s.start_ns) for s in everything)
    total = max(end - start, 1)
    known = {s.span_id for s in own}
    children: dict[str, list[SpanRecord]] = {}
    roots: list[SpanRecord] = []
    for span in sorted(own, key=lambda s: (s.start_ns, s.span_id)):
        if span.parent_id and span.parent_id in known:
            children.setdefault(span.parent_id, []).append(span)
        else:
            roots.append(span)

    rows: list[TraceRow] = []

    def row(span: SpanRecord, depth: int, **flags: bool) -> TraceRow:
        left = (span.start_ns - start) / total * 100
        width = max(span.end_ns - span.start_ns, 0) / total * 100
        return TraceRow(
            span,
            depth,
            (span.start_ns - start) / 1e6,
            min(max(left, 0.0), 100.0),
            min(max(width, 0.3), 100.0),
            detail_of(span),
            **flags,
        )

    stack = [(root, 0) for root in reversed(roots)]
    seen: set[str] = set()
    while stack:  # iterative: a deep or looping file cannot exhaust the stack
        span, depth = stack.pop()
        if span.span_id in seen:
            continue
        seen.add(span.span_id)
        rows.append(row(span, depth, orphan=bool(span.parent_id) and depth == 0))
        for child in reversed(children.get(span.span_id, [])):
            stack.append((child, depth + 1))
    for span in sorted(linked, key=lambda s: (s.start_ns, s.span_id)):
        rows.append(row(span, 0, linked=True))
    return TraceView(tuple(sorted(ids)), tuple(rows), total / 1e6)


__all__ = ["TraceRow", "TraceView", "detail_of", "order_trace"]
