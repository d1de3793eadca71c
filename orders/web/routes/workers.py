"""The workers page: every worker process and what its busy lanes run (Sidekiq's Busy
page, Flower's workers), from the states the workers publish (ADR 0043)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from orders.observability.workers import GONE_WORDS, summary
from orders.web.render import page
from orders.web.state import WebState, web_state


def workers_context(state: WebState) -> dict[str, Any]:
    """The workers of the current snapshot (at most ``WORKERS_SHOWN``, newest first), their
    busy lanes, and what could not be read."""
    snap = state.snapshots.get()
    view = snap.workers
    shown = list(view.workers) if view is not None else []
    busy = [(w, lane) for w in shown if w.alive for lane in w.lanes if lane.state != "idle"]
    return {
        "view": view,
        "workers": shown,
        "busy": busy,
        "summary": summary(view) if view is not None else "-",
        "gone_words": GONE_WORDS,
        "errors": list(snap.errors),
    }


def workers_page(request: Request) -> Response:
    """GET /workers : the whole page (its body refreshes itself from the partial)."""
    return page(request, "workers.html", workers_context(web_state(request)))


def workers_partial(request: Request) -> Response:
    """GET /partials/workers : the refreshing part of the workers page."""
    return page(request, "_workers.html", workers_context(web_state(request)))


routes = [
    Route("/workers", workers_page, methods=["GET"]),
    Route("/partials/workers", workers_partial, methods=["GET"]),
]
