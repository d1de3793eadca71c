"""``/metrics``: the Prometheus text exposition."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from orders.observability.registry import render
from orders.web.state import web_state


def metrics(request: Request) -> Response:
    """GET /metrics : every worker's metrics of this data dir, and the Redis and
    database gauges (cached a few seconds)."""
    body, content_type = render(web_state(request).registry)
    return Response(body, media_type=content_type)


def healthz(request: Request) -> Response:
    """GET /healthz : ``ok`` while the server runs (does not touch Redis or the database)."""
    return Response("ok\n", media_type="text/plain")


routes = [
    Route("/metrics", metrics, methods=["GET"]),
    Route("/healthz", healthz, methods=["GET"]),
]
