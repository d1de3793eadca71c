"""The overview: queues with depths and throughput over time, orders, backlog."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from orders.observability.urls import mask_urls_in
from orders.web.charts import line_chart
from orders.web.queries import recent_orders
from orders.web.render import page
from orders.web.state import WebState, web_state


def overview_context(state: WebState) -> dict[str, Any]:
    """Snapshot, charts and recent orders for the overview (page and partial)."""
    snap = state.snapshots.get()
    names = [q.name for q in snap.queues] or list(state.app.queues)
    samples = state.sampler.samples()
    # the time axis grows with the history kept, from one minute up to the whole of it
    known = samples[-1].wall - samples[0].wall if samples else 0.0
    span = min(max(known, 60.0), state.settings.history_seconds)
    throughput = line_chart(
        {name: state.sampler.series(name, "succeeded") for name in names},
        title="jobs done per second",
        unit="jobs/s",
        span_seconds=span,
    )
    depth = line_chart(
        {name: [(s.wall, float(s.depth(name))) for s in samples] for name in names},
        title="jobs queued or running",
        unit="jobs",
        span_seconds=span,
    )
    errors = list(snap.errors)
    orders: list[Any] = []
    try:
        with state.app.session_factory() as session:
            orders = recent_orders(session, 10)
    except Exception as exc:
        errors.append(f"database: {mask_urls_in(str(exc)).splitlines()[0]}")
    return {
        "snap": snap,
        "errors": errors,
        "throughput": throughput,
        "depth": depth,
        "recent": orders,
    }


def overview(request: Request) -> Response:
    """GET / : the whole page (its body refreshes itself from the partial)."""
    return page(request, "overview.html", overview_context(web_state(request)))


def overview_partial(request: Request) -> Response:
    """GET /partials/overview : the refreshing part of the overview."""
    return page(request, "_overview.html", overview_context(web_state(request)))


routes = [
    Route("/", overview, methods=["GET"]),
    Route("/partials/overview", overview_partial, methods=["GET"]),
]
