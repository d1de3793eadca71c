"""``/metrics`` (the Prometheus text exposition) and the probes ``/healthz``, ``/livez``,
``/readyz``."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from orders.observability.liveness import Verdict
from orders.observability.registry import render
from orders.web.state import web_state


def metrics(request: Request) -> Response:
    """GET /metrics : every worker's metrics of this data dir, and the Redis and
    database gauges (cached a few seconds)."""
    body, content_type = render(web_state(request).registry)
    return Response(body, media_type=content_type)


def healthz(request: Request) -> Response:
    """GET /healthz : ``ok`` while the server runs (does not touch Redis or the database;
    ``/readyz`` does)."""
    return Response("ok\n", media_type="text/plain")


def _answer(verdict: Verdict) -> Response:
    return Response(
        verdict.body(),
        status_code=200 if verdict.ok else 503,
        media_type="text/plain",
        headers={"Cache-Control": "no-store"},
    )


def livez(request: Request) -> Response:
    """GET /livez : 200 while the server answers (Redis or the database being away
    never makes it dead)."""
    return _answer(Verdict(True, ("serving",)))


def readyz(request: Request) -> Response:
    """GET /readyz : 200 when Redis and the database answer, the namespace is bound to
    this database and Redis evicts no keys; else 503 naming the failed checks
    (``orders.observability.readiness``)."""
    return _answer(web_state(request).readiness())


routes = [
    Route("/metrics", metrics, methods=["GET"]),
    Route("/healthz", healthz, methods=["GET"]),
    Route("/livez", livez, methods=["GET"]),
    Route("/readyz", readyz, methods=["GET"]),
]
