"""``orders trace``: one order's spans as a tree and waterfall, from the local span files."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from orders.cli.context import ROW_ID_MAX, emit_json, fail, handle_errors, make_app
from orders.cli.render import console, say, text
from orders.observability.trace_view import TraceRow, TraceView

#: width of the waterfall column, characters
BAR_WIDTH = 20


@handle_errors
def trace(
    order_id: Annotated[int, typer.Argument(min=1, max=ROW_ID_MAX, help="The order to show.")],
    as_json: Annotated[bool, typer.Option("--json", help="JSON output: every span.")] = False,
) -> None:
    """Show ORDER_ID's trace: every span from its placement to its last attempt, as a tree
    on a time axis.

    The spans are read from the local span files of the data dir, which processes
    write when ORDERS_TRACES=local (bounded by ORDERS_TRACES_MAX_MB, oldest dropped
    first). Each attempt of a step is a `process <step>` span under the `send <step>`
    that created its job, with its attempt number and outcome (acked, retried,
    dead-lettered, timed out, duplicate absorbed, stale ack refused); relay passes and
    batch deliveries, which serve many orders, are listed after the tree as linked
    spans. Exit status 1 when the order is unknown, has no trace (placed with tracing
    off) or none of its spans is in the files.
    """
    from orders.domain.queries import order_trace_ids
    from orders.observability.trace_files import read_spans, traces_dir
    from orders.observability.trace_view import order_trace
    from workflows.uow import UnitOfWork

    app = make_app(uses_redis=False)
    try:
        with UnitOfWork(app.session_factory) as uow:
            trace_ids = order_trace_ids(uow.session, order_id)
        folder = traces_dir(app.settings.resolved_data_dir())
    finally:
        app.close()
    if trace_ids is None:
        fail(f"no order {order_id}")
        return
    if not trace_ids:
        fail(
            f"order {order_id} has no trace: it was placed with tracing off "
            "(ORDERS_TRACES=local, or the OTEL_* variables, turn it on for new orders)"
        )
        return
    view = order_trace(read_spans(folder, trace_ids), trace_ids)
    if as_json:
        emit_json(_as_json(order_id, view))
    if not view.rows:
        if not as_json:
            fail(
                f"no span of order {order_id} (trace {', '.join(trace_ids)}) in {folder}: "
                "spans are written there while ORDERS_TRACES=local, and the oldest are "
                "dropped past ORDERS_TRACES_MAX_MB"
            )
        raise typer.Exit(1)
    if not as_json:
        _print(order_id, view)


def _as_json(order_id: int, view: TraceView) -> dict[str, Any]:
    return {
        "order_id": order_id,
        "trace_ids": list(view.trace_ids),
        "spans": [
            {
                "trace_id": r.span.trace_id,
                "span_id": r.span.span_id,
                "parent_id": r.span.parent_id or None,
                "name": r.span.name,
                "kind": r.span.kind,
                "start_unix_ns": r.span.start_ns,
                "duration_ms": round(r.span.duration_ms, 3),
                "offset_ms": round(r.offset_ms, 3),
                "depth": r.depth,
                "linked": r.linked,
                "parent_missing": r.orphan,
                "attributes": r.span.attributes,
                "links": [{"trace_id": t, "span_id": s} for t, s in r.span.links],
                "status": {"code": r.span.status[0], "message": r.span.status[1]},
                "process": r.span.service,
            }
            for r in view.rows
        ],
    }


def _bar(row: TraceRow) -> Text:
    left = min(int(row.left / 100 * BAR_WIDTH), BAR_WIDTH - 1)
    width = max(1, round(row.width / 100 * BAR_WIDTH))
    width = min(width, BAR_WIDTH - left)
    style = "red" if row.span.status[0] == 2 else ("dim" if row.linked else "cyan")
    return Text(" " * left + "█" * width + " " * (BAR_WIDTH - left - width), style=style)


def _name(row: TraceRow) -> Text:
    prefix = "  " * row.depth + ("└ " if row.depth else "")
    if row.linked:
        prefix = "⇢ "
    elif row.orphan:
        prefix = "? "
    return Text(prefix) + text(row.span.name, "red" if row.span.status[0] == 2 else "", limit=28)


def _print(order_id: int, view: TraceView) -> None:
    own = sum(1 for r in view.rows if not r.linked)
    say(
        "order {}: trace {} · {} span(s), {} linked · {} ms",
        order_id,
        ", ".join(view.trace_ids),
        own,
        len(view.rows) - own,
        f"{view.total_ms:.1f}",
    )
    names = [_name(row) for row in view.rows]
    starts = [f"{row.offset_ms:.1f}" for row in view.rows]
    took = [f"{row.span.duration_ms:.1f}" for row in view.rows]
    widths = [
        max(n.cell_len for n in names),
        max(5, *map(len, starts)),
        max(2, *map(len, took)),
        BAR_WIDTH,
    ]
    # every width fixed, the detail taking what is left: a table of free columns hides
    # the narrow ones first on an 80-column terminal
    detail = max(console.width - sum(widths) - 2 * len(widths), 8)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=True)
    for header, width, right in zip(
        ("span", "at ms", "ms", "waterfall"), widths, (False, True, True, False), strict=True
    ):
        table.add_column(header, no_wrap=True, width=width, justify="right" if right else "left")
    table.add_column("detail", overflow="ellipsis", no_wrap=True, width=detail)
    for row, name, start, ms in zip(view.rows, names, starts, took, strict=True):
        table.add_row(name, start, ms, _bar(row), text(row.detail))
    console.print(table)
    if any(r.orphan for r in view.rows):
        say("? a span whose parent is not in the files (its process ended before exporting)")
    if any(r.linked for r in view.rows):
        say("⇢ a relay pass or batch delivery of several orders, linked to this one")
