"""``POST /api/v1/orders``: place an order, at most once per ``Idempotency-Key``
(docs/adr/0039-the-front-door-tokens-and-idempotency.md).

The route is declared as FastAPI reads it (its OpenAPI operation, its dependencies),
and served by :class:`PlacementRoute`: a request that is plainly valid (JSON content
type, a body and key that pass the very validators FastAPI runs) goes straight to the
same authorization and the same placement code, without FastAPI's dependency solving;
any other request is handled by FastAPI as declared, so every refusal is FastAPI's own.
The placement waits for the group commit's writer on the event loop (ADR 0044).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import Response
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool

from orders.app.api_orders import (
    InvalidOrder,
    KeyInFlight,
    KeyReused,
    KeyRules,
    LineRequest,
    PlaceRequest,
    place_api_order_async,
    release_expired_keys,
)
from orders.app.tokens import Caller
from orders.domain.access import Permission
from orders.web.api.content import require_json
from orders.web.api.problems import ApiProblem, responses
from orders.web.api.routes import api_state, authorize, bearer, needs
from orders.web.api.schemas import OrderIn, OrderOut
from reliable_queue.trace_context import TraceContext

KEY = re.compile(r'^"?([\x21\x23-\x7e]{1,255})"?$')
"""An ``Idempotency-Key``: 1-255 visible ASCII characters, optionally quoted (the draft's
structured-header string)."""
MAX_KEY_HEADER = 257
"""Characters of the ``Idempotency-Key`` header the declared route accepts (a quoted key)."""
PLAIN_JSON = frozenset(
    {"application/json", "application/json; charset=utf-8", "application/json;charset=utf-8"}
)
"""``Content-Type`` values (lower case) that FastAPI parses as JSON and
:func:`~orders.web.api.content.require_json` accepts: only these take
:class:`PlacementRoute`'s short way."""
PRUNE_EVERY_SECONDS = 60.0
PERMISSION = Permission.PLACE
"""What the caller's role must allow, on either way."""


def _fingerprint(body: OrderIn) -> str:
    canonical = json.dumps(body.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _key(raw: str | None) -> str | None:
    if raw is None:
        return None
    match = KEY.match(raw)
    if not match:
        raise ApiProblem(
            422,
            "Idempotency-Key must be 1-255 visible ASCII characters (optionally quoted)",
            field="Idempotency-Key",
        )
    return match.group(1)


class PlacementRoute(APIRoute):
    """The placement route, with a short way for a plainly valid request.

    FastAPI's handler reads the body, solves the dependencies (the bearer token, the
    caller, the content type, the ``Idempotency-Key`` header), validates the body and
    calls the endpoint. For a request whose content type is one of :data:`PLAIN_JSON`,
    whose body parses as JSON and passes the route's own body validator, and whose key
    header is absent or well formed, every one of those checks passes but the caller's,
    which has effects (a wrong token counts against the address, a right one spends
    its rate): that request goes to :func:`authorize` and :func:`place` directly, in
    the same order. Every other request takes FastAPI's handler, side effects not yet
    begun. Errors raised either way reach the application's problem handlers alike.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """FastAPI's handler of the declared route, behind the short way."""
        declared = super().get_route_handler()
        body_field = self.body_field
        assert body_field is not None, "the placement route has a body"

        async def handler(request: Request) -> Response:
            content_type = request.headers.get("content-type")
            if content_type is None or content_type.lower() not in PLAIN_JSON:
                return await declared(request)
            raw = request.headers.get("idempotency-key")
            if raw is not None and not KEY.match(raw):  # (a match is within MAX_KEY_HEADER)
                return await declared(request)
            received = await request.body()  # kept by the request for FastAPI's reading
            try:
                parsed = json.loads(received) if received else None
            except Exception:  # noqa: BLE001 - FastAPI's handler says what is wrong
                return await declared(request)
            body, errors = body_field.validate(parsed, {}, loc=("body",))
            if errors or not isinstance(body, OrderIn):
                return await declared(request)
            caller = await authorize(request, await bearer(request), PERMISSION)
            return await place(request, body, caller, raw)

        return handler


router = APIRouter(prefix="/api/v1", responses=responses())


async def place_order(
    request: Request,
    body: OrderIn,
    caller: Annotated[Caller, needs(PERMISSION)],
    _json: Annotated[None, Depends(require_json)],
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            max_length=MAX_KEY_HEADER,
            description="Retry-safe placement: the same key and body answer the first "
            "response again; another body with it is 422; while the first is in flight, 409.",
        ),
    ] = None,
) -> Response:
    """Place one order through the transactional outbox; its first steps are published
    after the commit. Answers 201 with the order's state and ``Location``. A W3C
    ``traceparent`` (and ``tracestate``) header is continued: the order's trace is the
    caller's (an invalid one is ignored, as W3C says)."""
    return await place(request, body, caller, idempotency_key)


router.add_api_route(
    "/orders",
    place_order,
    methods=["POST"],
    status_code=201,
    response_model=OrderOut,
    summary="Place an order",
    responses={201: {"headers": {"Location": {"schema": {"type": "string"}}}}},
    route_class_override=PlacementRoute,
)


async def place(
    request: Request, body: OrderIn, caller: Caller, idempotency_key: str | None
) -> Response:
    """The placement itself, once the request is valid and its caller allowed.

    Args:
        request: the request (its ``traceparent`` / ``tracestate`` headers).
        body: the validated order.
        caller: the token placing it.
        idempotency_key: the ``Idempotency-Key`` header as sent, or None.

    Returns:
        201 with the order's JSON and ``Location`` (``Idempotent-Replayed: true`` for
        the stored first response of the key).

    Raises:
        ApiProblem: 422 a malformed key, more than one key header, a key used with
            another body, an unknown customer or part; 409 the key is in flight.
        sqlalchemy.exc.SQLAlchemyError, reliable_queue.QueueError: a backing service
            failed (nothing written).
    """
    state = api_state(request)
    app = state.web.app
    if len(request.headers.getlist("idempotency-key")) > 1:  # which one would be the key?
        raise ApiProblem(
            422, "send one Idempotency-Key header, not several", field="Idempotency-Key"
        )
    key = _key(idempotency_key)
    window = state.web.settings.idempotency_hours * 3600
    if time.monotonic() - state.pruned_at > PRUNE_EVERY_SECONDS:
        state.pruned_at = time.monotonic()
        await run_in_threadpool(release_expired_keys, app.session_factory, window)
    order = PlaceRequest(
        body.customer_id,
        tuple(LineRequest(line.part_id, line.quantity) for line in body.lines),
        body.priority,
    )
    try:
        placed = await place_api_order_async(
            app.session_factory,
            lambda: app.publisher,
            order,
            placed_by=caller.name,
            rules=KeyRules(key, _fingerprint(body), window),
            in_flight=state.in_flight,
            group=state.placements(),
            policy=app.publish_policy,
            parent=TraceContext.parse(
                request.headers.get("traceparent"), request.headers.get("tracestate")
            ),
        )
    except KeyInFlight as exc:
        raise ApiProblem(409, str(exc), field="Idempotency-Key") from exc
    except KeyReused as exc:
        raise ApiProblem(422, str(exc), field="Idempotency-Key") from exc
    except InvalidOrder as exc:
        raise ApiProblem(422, str(exc), field=exc.field) from exc
    headers = {"Location": f"/api/v1/orders/{placed.order_id}"}
    if placed.replayed:
        headers["Idempotent-Replayed"] = "true"
    return Response(
        placed.body, status_code=placed.status, media_type="application/json", headers=headers
    )
