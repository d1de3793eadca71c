"""The FastAPI application: ``/api/v1`` routes with their OpenAPI document at
``/api/v1/openapi.json``, and request ids
(docs/adr/0039-the-front-door-tokens-and-idempotency.md)."""

from __future__ import annotations

import re
import uuid

from fastapi import FastAPI, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orders.web.api import flow_control, placing, problems
from orders.web.api.auth import Authenticator, TokenBuckets, TokenLookup
from orders.web.api.problems import ApiProblem
from orders.web.api.routes import ApiState, router
from orders.web.state import WebState

PREFIX = "/api/v1"
REQUEST_ID = re.compile(r"^[A-Za-z0-9._\-]{1,64}$")


class RequestIds:
    """ASGI middleware: every request gets an id (the client's ``X-Request-ID``
    when it is 1-64 letters, digits or ``._-``, else a new one), kept in
    ``request.state.request_id`` (the audit log records it) and sent back in
    ``X-Request-ID``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = ""
        for name, value in scope.get("headers", []):
            if name == b"x-request-id":
                given = value.decode("latin-1")
        request_id = given if REQUEST_ID.match(given) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [
                    *message["headers"],
                    (b"x-request-id", request_id.encode()),
                ]
            await send(message)

        await self.app(scope, receive, send_with_id)


def create_api(state: WebState, lookup: TokenLookup, lifespan: object = None) -> FastAPI:
    """The API application for the dashboard's ``state``.

    Args:
        state: the dashboard's parts (application, settings, sign-in throttle).
        lookup: the named tokens (shared with the dashboard's sign-in).
        lifespan: the server's lifespan (the dashboard's sampler), run by this app.

    Returns:
        A FastAPI app serving ``/api/v1``; the caller mounts the dashboard into it
        at ``/`` (after these routes).
    """
    settings = state.settings
    api = FastAPI(
        title="orderflow API",
        version="1",
        description="Place, find and act on orders. Tokens: `orders tokens create`.",
        openapi_url=f"{PREFIX}/openapi.json",
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,  # type: ignore[arg-type]
    )
    api.state.api = ApiState(
        web=state,
        auth=Authenticator(
            lookup,
            state.guard.throttle,
            TokenBuckets(settings.api_rate_per_second, settings.api_burst),
        ),
    )
    problems.install(api)
    api.include_router(placing.router)  # first: its path leads the document, as it always did
    api.include_router(router)
    api.include_router(flow_control.router)

    @api.api_route(
        PREFIX + "/{rest:path}",
        methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
        include_in_schema=False,
    )
    def unknown(request: Request, rest: str) -> None:
        raise ApiProblem(404, f"no such API route: {request.method} {request.url.path}")

    return api
