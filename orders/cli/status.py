"""``orders status``: one order's steps, or the whole system at a glance."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from orders.app.bootstrap import App
from orders.app.eviction import key_eviction_problem
from orders.cli.context import console, emit_json, err_console, fail, handle_errors, make_app
from orders.domain.queries import order_status, totals
from orders.domain.steps import STEPS
from orders.worker.faults import FaultStore, describe
from orders.worker.reconcile import reconcile_dead_letters
from reliable_queue import stats
from workflows.uow import UnitOfWork


def _when(value: Any) -> str:
    return value.strftime("%H:%M:%S.%f")[:-3] if value is not None else "-"


def _one(app: App, order_id: int, as_json: bool) -> None:
    with UnitOfWork(app.session_factory) as uow:
        view = order_status(uow.session, order_id)
    if view is None:
        fail(f"no order {order_id}")
        return
    if as_json:
        emit_json(view.to_dict())
        return
    head = f"order {view.order_id}: {view.status}, workflow {view.workflow_status}"
    if view.blocked_step:
        head += f" — blocked on {view.blocked_step}: {view.blocked_reason}"
    console.print(head, highlight=False, markup=False)
    console.print(
        f"placed {view.placed_at:%Y-%m-%d %H:%M:%S} UTC, completed {_when(view.completed_at)}"
    )
    table = Table()
    for col in (
        "step",
        "state",
        "outcome",
        "attempts",
        "dispatched",
        "started",
        "finished",
        "last error",
    ):
        table.add_column(col)
    for s in view.steps:
        table.add_row(
            s.step,
            s.status,
            s.outcome or "-",
            str(s.attempts),
            _when(s.dispatched_at),
            _when(s.started_at),
            _when(s.finished_at),
            escape((s.last_error or "")[:60]),
        )
    console.print(table)


def _overview(app: App, as_json: bool) -> None:
    eviction = key_eviction_problem(app.redis)
    if eviction and not as_json:
        err_console.print(f"[bold red]WARNING:[/] {escape(eviction)}", highlight=False)
    reconcile_dead_letters(app)
    with UnitOfWork(app.session_factory) as uow:
        t = totals(uow.session)
    queues = {name: stats(q).as_dict() for name, q in app.queues.items()}
    faults = describe(FaultStore(app.redis, app.settings.queue_prefix).all())
    if as_json:
        emit_json(
            {
                "orders": t.to_dict(),
                "queues": queues,
                "faults": faults,
                "redis_warning": eviction,
            }
        )
        return
    orders = Table(title=f"orders ({t.orders})")
    orders.add_column("status")
    orders.add_column("count", justify="right")
    for status, n in sorted(t.orders_by_status.items()):
        orders.add_row(status, str(n))
    console.print(orders)
    steps = Table(title="steps and queues")
    cols = (
        "step",
        "done",
        "failed",
        "dead",
        "pending",
        "ready",
        "delayed",
        "active",
        "DLQ",
        "retried",
    )
    for col in cols:
        steps.add_column(col, justify="right")
    for step in STEPS:
        st, q = t.steps_by_state.get(step, {}), queues[step]
        steps.add_row(
            step,
            str(st.get("done", 0)),
            str(st.get("failed", 0)),
            str(st.get("dead", 0)),
            str(st.get("pending", 0) + st.get("dispatched", 0)),
            str(q["ready"]),
            str(q["delayed"]),
            str(q["active"]),
            str(q["dead"]),
            str(q["counters"].get("retried", 0)),
        )
    console.print(steps)
    unpublishable = sum(st.get("unpublishable", 0) for st in t.steps_by_state.values())
    if unpublishable:
        console.print(
            f"[bold red]outbox: {unpublishable} step record(s) unpublishable[/] (the queue "
            "refused them; their orders are blocked): `orders outbox list`, then "
            "`orders outbox retry`",
            highlight=False,
        )
    for step in STEPS:
        found = queues[step]["audit"]
        if found.get("orphans") or found.get("doubles"):
            console.print(
                f"[bold red]queue {step}: the last audit found {found.get('orphans', 0)}"
                f" orphan(s) and {found.get('doubles', 0)} double(s)[/] — run"
                " `orders queue audit --repair`",
                highlight=False,
            )
    if faults:
        console.print(f"injected faults: {faults}", highlight=False)


@handle_errors
def status(
    order_id: Annotated[
        int | None,
        typer.Argument(min=1, max=2**63 - 1, help="An order id (default: the overview)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
) -> None:
    """Show ORDER_ID's steps (state, attempts, last error, times, job ids), or the overview:
    orders by status, steps by state, queue depths, DLQ sizes and injected faults."""
    app = make_app()
    try:
        if order_id is None:
            _overview(app, as_json)
        else:
            _one(app, order_id, as_json)
    finally:
        app.close()
