"""An order's page: its steps as a timeline with attempts, errors and times, and its
trace (the spans of the local span files, as ``orders trace`` shows them)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from orders.app.audit import Action, record
from orders.app.cancellation import cancel_then_publish
from orders.app.step_jobs import step_jobs
from orders.domain.access import Permission
from orders.domain.cancellation import CancelResult
from orders.domain.errors import OrderNotCancellable, OrderNotFound
from orders.domain.queries import OrderView, StepView, order_status, order_trace_ids
from orders.observability.trace_files import read_spans, traces_dir
from orders.observability.trace_view import TraceView, order_trace
from orders.web.audited import web_actor
from orders.web.params import BadParam, bounded_int
from orders.web.queries import recent_orders
from orders.web.render import page
from orders.web.state import web_state
from workflows.models import StepStatus
from workflows.uow import UnitOfWork

MAX_ID = 2**63 - 1


@dataclass(frozen=True)
class Bar:
    """One step's row in the timeline, in percent of the timeline's width.

    Attributes:
        step: the step view.
        wait_left / wait_width: placement to the start of the last run (a skipped
            step: to when it was skipped).
        run_left / run_width: the last run (start to finish, or to now if running); 0
            for a step that never ran (skipped, not started yet).
        job_id: the step's queue job (from the step row, or Redis for unstarted ones).
    """

    step: StepView
    wait_left: float
    wait_width: float
    run_left: float
    run_width: float
    job_id: str | None


def timeline(view: OrderView, now: dt.datetime, job_ids: dict[str, str | None]) -> list[Bar]:
    """Place each step on a time axis from the order's placement to its last event."""
    start = view.placed_at
    ends = [t for s in view.steps for t in (s.finished_at, s.started_at, s.dispatched_at) if t]
    running = any(s.status not in (*StepStatus.FINAL, StepStatus.DEAD) for s in view.steps)
    end = max([*ends, now] if running else ends or [start])
    span = max((end - start).total_seconds(), 0.001)

    def pct(t: dt.datetime | None) -> float:
        if t is None:
            return 0.0
        return min(max((t - start).total_seconds() / span * 100, 0.0), 100.0)

    bars = []
    for s in view.steps:
        if s.status == StepStatus.SKIPPED:  # it never ran: a wait up to its skip, no run
            skipped = pct(s.finished_at)
            bars.append(Bar(s, 0.0, skipped, skipped, 0.0, s.job_id or job_ids.get(s.step)))
            continue
        run_start = s.started_at or s.dispatched_at
        run_end = s.finished_at or (now if s.status != StepStatus.DEAD else run_start)
        left = pct(run_start)
        bars.append(
            Bar(
                step=s,
                wait_left=0.0,
                wait_width=left,
                run_left=left,
                run_width=max(pct(run_end) - left, 0.5) if run_start else 0.0,
                job_id=s.job_id or job_ids.get(s.step),
            )
        )
    return bars


def order_page(request: Request) -> Response:
    """GET /orders/{order_id} : the order, its workflow and its steps' timeline."""
    order_id = bounded_int(request.path_params["order_id"], "order id", low=1, high=MAX_ID)
    state = web_state(request)
    with UnitOfWork(state.app.session_factory) as uow:
        view = order_status(uow.session, order_id)
        trace_ids = order_trace_ids(uow.session, order_id) or []
    if view is None:
        raise BadParam(f"no order {order_id}", 404)
    jobs = step_jobs(state.app.queues, view.workflow_id, view.steps)
    notes = [f"{step}: its job id is unreadable: {why}" for step, why in jobs.problems.items()]
    now = dt.datetime.now(dt.UTC)
    return page(
        request,
        "order.html",
        {
            "order": view,
            "bars": timeline(view, now, jobs.ids),
            "span_end": now,
            "end_label": view.end_label(),
            "notes": notes,
            "trace": _trace(state.app.settings.resolved_data_dir(), trace_ids),
        },
    )


def _trace(data_dir: Path, trace_ids: list[str]) -> TraceView | None:
    """The order's trace from the data dir's span files (None: the order has none)."""
    if not trace_ids:
        return None
    return order_trace(read_spans(traces_dir(data_dir), trace_ids), trace_ids)


def orders_page(request: Request) -> Response:
    """GET /orders?id=N : redirect to order N (400 if not a positive integer);
    without ``id``, the newest orders."""
    raw = request.query_params.get("id")
    if raw is not None and raw != "":
        order_id = bounded_int(raw.strip(), "order id", low=1, high=MAX_ID)
        return RedirectResponse(f"/orders/{order_id}", status_code=303)
    with web_state(request).app.session_factory() as session:
        rows = recent_orders(session, 50)
    return page(request, "orders.html", {"recent": rows})


async def cancel_order(request: Request) -> Response:
    """POST /orders/{order_id}/cancel : cancel the order (token and CSRF token required).

    Redirects (303) to the order's page; cancelling again changes nothing.

    Raises:
        Refused: no token configured, not signed in, or a bad CSRF token / origin.
        BadParam: 404 unknown order; 409 too late (completed: its shipment is
            dispatched) or out of stock. Nothing is written in either case.
    """
    order_id = bounded_int(request.path_params["order_id"], "order id", low=1, high=MAX_ID)
    state = web_state(request)
    form = await request.form()
    caller = state.guard.check_action(request, form, Permission.OPERATE)
    app = state.app
    who = web_actor(request, caller)

    def audited(session: Session, result: CancelResult) -> None:  # in its transaction
        record(
            session,
            who,
            Action.CANCEL,
            {"order_ids": [order_id]},
            count=0 if result.already else 1,
            result="already cancelled" if result.already else "ok",
        )

    try:
        await run_in_threadpool(
            cancel_then_publish,
            app.session_factory,
            lambda: app.publisher,
            order_id,
            policy=app.publish_policy,
            record=audited,
            tracer=app.tracer("orders.cancellation"),
        )
    except OrderNotFound as exc:
        raise BadParam(str(exc), 404) from exc
    except OrderNotCancellable as exc:
        raise BadParam(str(exc), 409) from exc
    return RedirectResponse(f"/orders/{order_id}", status_code=303)


routes = [
    Route("/orders", orders_page, methods=["GET"]),
    Route("/orders/{order_id}", order_page, methods=["GET"]),
    Route("/orders/{order_id}/cancel", cancel_order, methods=["POST"]),
]
