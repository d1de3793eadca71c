"""Build the ASGI application of `orders web`: the dashboard and the HTTP API."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import jinja2
import redis
from fastapi import FastAPI
from sqlalchemy.exc import SQLAlchemyError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Receive, Scope, Send

from orders.app.bootstrap import App
from orders.observability.multiproc import metrics_dir
from orders.observability.registry import metrics_registry
from orders.observability.sampler import Sampler
from orders.observability.snapshot import SystemView, read_queue_stats
from orders.observability.urls import mask_urls_in
from orders.observability.workers import ago
from orders.web import render
from orders.web.api.app import RequestIds, create_api
from orders.web.api.auth import TokenLookup
from orders.web.api.problems import problem
from orders.web.params import BadParam
from orders.web.protect import BODY_LIMITS, Protect, allowed_hosts
from orders.web.routes import (
    audit,
    auth,
    dlq,
    metrics,
    orders,
    overview,
    queues,
    search,
    workers,
)
from orders.web.security import Guard, Refused, SignInThrottle
from orders.web.settings import WebSettings
from orders.web.state import WebState
from reliable_queue import QueueDataError, QueueError, QueueLimitError
from reliable_queue.errors import InvalidTextError

log = logging.getLogger("orders.web")

HERE = Path(__file__).parent
OPEN_PATHS = ("/login", "/static/", "/healthz", "/livez", "/readyz")
API_BODY_LIMITS = {"/api/v1/orders": 16 * 1024}
"""Bytes, by exact path: an order of 50 lines is under 2 KiB."""


def templates() -> Jinja2Templates:
    """The Jinja2 environment with the dashboard's filters (``when``, ``ms``, ``rate``,
    and ``url_part`` / ``attr_value`` for links and form fields that carry real ids).

    Autoescape is on and every printed value passes :func:`render.shown`, so job
    and Redis text can neither add markup nor carry control characters into a page.
    """
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(HERE / "templates")),
        autoescape=True,
        finalize=render.shown,
    )
    t = Jinja2Templates(env=env)
    t.env.filters["when"] = render.when
    t.env.filters["when_ms"] = render.when_ms
    t.env.filters["ms"] = render.ms
    t.env.filters["rate"] = render.rate
    t.env.filters["url_part"] = render.url_part
    t.env.filters["attr_value"] = render.attr_value
    t.env.filters["ago"] = ago
    t.env.globals["login_link"] = auth.login_link
    t.env.globals["order_link"] = render.order_link
    return t


class ReadGuard:
    """ASGI middleware: a client that is neither on loopback nor signed in may only
    reach the sign-in page (pages redirect there; ``/metrics`` answers 401)."""

    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            request = Request(scope)
            path = request.url.path
            try:
                allowed = path.startswith(OPEN_PATHS) or self.guard.may_read(request)
            except Refused as exc:
                await PlainTextResponse(str(exc), exc.status)(scope, receive, send)
                return
            if not allowed:
                response: Response
                if path == "/metrics" or request.method != "GET":
                    response = PlainTextResponse("sign in or send the bearer token", 401)
                else:
                    response = RedirectResponse(auth.login_link(path), status_code=303)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def _bad_param(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, BadParam)
    return render.error_page(request, exc.status, str(exc), links=exc.links)


async def _refused(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Refused)
    return render.error_page(request, exc.status, str(exc))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return render.error_page(request, exc.status_code, str(exc.detail))


async def _bad_value(request: Request, exc: Exception) -> Response:
    """A text the queue cannot store or a number past its bound: bad input (400)."""
    return render.error_page(request, 400, str(exc))


async def _unreadable(request: Request, exc: Exception) -> Response:
    """A queue key holds another type: Redis answered, the data is the problem (409)."""
    message = mask_urls_in(str(exc)).splitlines()[0] if str(exc) else type(exc).__name__
    log.warning("%s %s: %s", request.method, request.url.path, message)
    return render.error_page(request, 409, f"queue data cannot be read: {message}")


async def _unavailable(request: Request, exc: Exception) -> Response:
    message = mask_urls_in(str(exc)).splitlines()[0] if str(exc) else type(exc).__name__
    log.warning("%s %s: %s", request.method, request.url.path, message)
    return render.error_page(request, 503, f"a backing service failed: {message}")


def create_app(
    app: App,
    settings: WebSettings | None = None,
    *,
    multiproc: Path | None = None,
    sample: bool = True,
    throttle: SignInThrottle | None = None,
) -> Front:
    """The dashboard and the HTTP API (``/api/v1``) for ``app``, one ASGI application.

    Args:
        app: the application (its Redis, database and queues).
        settings: web settings (default: read ``ORDERS_WEB_*``).
        multiproc: the workers' metrics folder (default: the data dir's).
        sample: run the background queue sampler while the server runs
            (the test client runs it inside ``with TestClient(...)``).
        throttle: failed sign-in counter (default: 10 per minute per client).

    Returns:
        The ASGI application (:class:`Front`); it stops its sampler on shutdown but
        does not close ``app`` (the caller owns it).

    Raises:
        WeakToken: the configured token is too short (see ``orders.web.security``).
    """
    settings = settings or WebSettings()
    folder = multiproc or metrics_dir(app.settings)
    # the engine is built at the first lookup: the server starts while the database is away
    lookup = TokenLookup(lambda: app.session_factory(), settings.token_value())
    guard = Guard(
        settings.token_value(),
        session_seconds=settings.session_hours * 3600,
        throttle=throttle,
        lookup=lookup,
        any_tokens=lookup.any_tokens,
    )
    sampler = Sampler(lambda: read_queue_stats(app), keep=settings.history_seconds)
    state = WebState(
        app=app,
        settings=settings,
        guard=guard,
        sampler=sampler,
        view=SystemView(app, multiproc=folder, sampler=sampler),
        registry=metrics_registry(app, multiproc=folder),
        templates=templates(),
        multiproc=folder,
    )

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        thread = None
        if sample:
            state.stop.clear()
            thread = state.sampler.start(settings.sample_seconds, state.stop)
        try:
            yield
        finally:
            state.stop.set()
            if thread is not None:
                thread.join(timeout=5)

    dashboard = Starlette(
        routes=[
            *overview.routes,
            *queues.routes,
            *orders.routes,
            *workers.routes,
            *dlq.routes,
            *search.routes,
            *audit.routes,
            *auth.routes,
            *metrics.routes,
            Mount("/static", app=StaticFiles(directory=str(HERE / "static")), name="static"),
        ],
        exception_handlers={
            BadParam: _bad_param,
            Refused: _refused,
            HTTPException: _http_error,
            QueueDataError: _unreadable,
            InvalidTextError: _bad_value,
            QueueLimitError: _bad_value,
            QueueError: _unavailable,
            SQLAlchemyError: _unavailable,
            redis.RedisError: _unavailable,
        },
    )
    dashboard.state.web = state
    dashboard.add_middleware(ReadGuard, guard=guard)
    return Front(
        api=create_api(state, lookup, lifespan=lifespan),
        dashboard=dashboard,
        hosts=allowed_hosts(settings.host, settings.allowed_host_names()),
    )


class Front:
    """The one ASGI application of ``orders web``: ``/api/...`` to the API (FastAPI),
    every other path (any character in it) to the dashboard, and the lifespan to the
    API (the dashboard's sampler runs in it). Outermost, :class:`Protect` refuses
    unknown Hosts and large bodies before anything reads them (ADR 0039).

    Attributes:
        api: the FastAPI application of ``/api/v1``.
        dashboard: the dashboard's Starlette application.
    """

    def __init__(self, *, api: FastAPI, dashboard: Starlette, hosts: frozenset[str]) -> None:
        self.api = api
        self.dashboard = dashboard
        self._protected = Protect(
            RequestIds(self._dispatch),
            hosts=hosts,
            body_limits={**BODY_LIMITS, **API_BODY_LIMITS},
            refuse=refusal,
        )

    @property
    def routes(self) -> list[BaseRoute]:
        """The dashboard's routes (the API's are in its OpenAPI document)."""
        return list(self.dashboard.routes)

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "lifespan" or path == "/api" or path.startswith("/api/"):
            await self.api(scope, receive, send)
        else:
            await self.dashboard(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.api(scope, receive, send)
            return
        await self._protected(scope, receive, send)


def refusal(path: str, status: int, message: str) -> Response:
    """How the outer shell refuses a request: a problem for ``/api/``, else plain text."""
    if path.startswith("/api/"):
        return problem(status, message, instance=path)
    return PlainTextResponse(message, status)
