"""The routes of ``/api/v1``: read, cancel and search orders (placing one:
``orders.web.api.placing``); search jobs; bulk cancel and redrive; the audit log. Each
route names the permission it needs (docs/adr/0039-the-front-door-tokens-and-idempotency.md,
0041 for the searches)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from decimal import Decimal
from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field

from orders.app.api_orders import (
    Committed,
    InFlight,
    Pending,
    commit_placements,
    placed_by,
)
from orders.app.audit import Action, Actor, recent_actions, record
from orders.app.bulk import UnfilteredAction, cancel_matching, redrive_matching
from orders.app.cancellation import cancel_then_publish
from orders.app.group_commit import GroupCommit
from orders.app.step_jobs import step_jobs
from orders.app.tokens import Caller
from orders.domain.access import Permission, allows
from orders.domain.cancellation import CancelResult
from orders.domain.errors import OrderNotCancellable, OrderNotFound
from orders.domain.queries import OrderView, StepView, order_status
from orders.domain.search import MAX_PAGE, SearchFilter, search_jobs, search_orders
from orders.web.api.auth import Authenticator
from orders.web.api.content import json_if_any
from orders.web.api.problems import ApiProblem, responses
from orders.web.api.schemas import (
    MAX_ID,
    AuditPage,
    BulkIn,
    BulkOut,
    CancelOut,
    JobPage,
    OrderOut,
    OrderPage,
)
from orders.web.state import WebState
from reliable_queue import QueueError
from workflows.sql import dialect_of_factory
from workflows.uow import UnitOfWork

PLACEMENTS_PER_TRANSACTION = 100
"""Most placements one transaction writes (group commit; under load a batch is the
requests that arrived during the previous one's write)."""


@dataclass
class ApiState:
    """What the API's routes share: the dashboard's state, the authenticator, the keys
    in flight, when expired keys were last released, and the placements let through at
    once (the database's ``writers_at_once``: on SQLite one, the others queue in the
    process instead of polling for its one write turn; decided at the first placement,
    so the server starts while the database is away)."""

    web: WebState
    auth: Authenticator
    in_flight: InFlight = field(default_factory=InFlight)
    pruned_at: float = 0.0
    _placing: AbstractContextManager[Any] | None = None
    _group: GroupCommit[Pending, Committed] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def placing(self) -> AbstractContextManager[Any]:
        """A context held around each placement."""
        with self._lock:
            if self._placing is None:
                writers = dialect_of_factory(self.web.app.session_factory).writers_at_once
                self._placing = threading.BoundedSemaphore(writers) if writers else nullcontext()
            return self._placing

    def placements(self) -> GroupCommit[Pending, Committed]:
        """The group commit of this process's placements (each batch holds
        :meth:`placing`, then publishes its first steps in one call)."""
        turn = self.placing()
        with self._lock:
            if self._group is None:
                app = self.web.app
                self._group = GroupCommit(
                    partial(
                        commit_placements,
                        app.session_factory,
                        render_order,
                        publisher=lambda: app.publisher,
                        policy=app.publish_policy,
                        tracer=app.tracer("orders.placement"),
                    ),
                    most=PLACEMENTS_PER_TRANSACTION,
                    turn=turn,
                )
            return self._group


def api_state(request: Request) -> ApiState:
    """The :class:`ApiState` of the app serving ``request``."""
    return request.app.state.api  # type: ignore[no-any-return]


bearer = HTTPBearer(auto_error=False, description="A token from `orders tokens create`.")


async def authorize(
    request: Request, credentials: HTTPAuthorizationCredentials | None, permission: str
) -> Caller:
    """The caller of ``request`` (its bearer ``credentials``), allowed ``permission``
    and within its rate: ``Authenticator.caller``, on the event loop.

    Raises:
        ApiProblem: as ``Authenticator.caller`` (401, 403, 429).
    """
    token = credentials.credentials if credentials else None
    return await api_state(request).auth.caller(request, token, permission)


def needs(permission: str) -> Any:
    """A dependency giving the :class:`Caller` allowed ``permission`` (else a problem):
    :func:`authorize` of the request's bearer token."""

    async def dependency(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> Caller:
        return await authorize(request, credentials, permission)

    return Depends(dependency)


def actor(request: Request, caller: Caller) -> Actor:
    """The audit actor of an API request."""
    return Actor(caller.name, "api", getattr(request.state, "request_id", None))


router = APIRouter(prefix="/api/v1", responses=responses())


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    return value


STEP_FIELDS = tuple(f.name for f in fields(StepView))
ORDER_FIELDS = tuple(f.name for f in fields(OrderView) if f.name not in ("steps", "source_key"))


def order_out(view: OrderView, unreadable: dict[str, str] | None = None) -> dict[str, Any]:
    """The JSON of an order: the facts of ``orders status ID --json`` (``OrderView``),
    with ``id`` for ``order_id`` (built field by field: ``dataclasses.asdict`` deep-copies
    and cost more than the rest of a placement's rendering)."""
    return _order_fields(view, unreadable, _plain)


def render_order(view: OrderView) -> str:
    """The body of a placement's answer: :func:`order_out` as JSON text (the encoder
    converts the times and the price, the only values JSON has no type for, itself)."""
    return json.dumps(_order_fields(view, None, None), default=_plain)


def _order_fields(
    view: OrderView, unreadable: dict[str, str] | None, plain: Callable[[Any], Any] | None
) -> dict[str, Any]:
    """:func:`order_out`, each value passed through ``plain`` (None: as it is)."""
    if plain is None:
        out = {name: getattr(view, name) for name in ORDER_FIELDS}
        steps = [{n: getattr(s, n) for n in STEP_FIELDS} for s in view.steps]
    else:
        out = {name: plain(getattr(view, name)) for name in ORDER_FIELDS}
        steps = [{n: plain(getattr(s, n)) for n in STEP_FIELDS} for s in view.steps]
    out["id"] = out.pop("order_id")
    out["steps"] = steps
    out["unreadable"] = unreadable or {}
    return out


OrderId = Annotated[int, Path(ge=1, le=MAX_ID, description="The order's id.")]


@router.get("/orders/{order_id}", response_model=OrderOut, summary="One order with its steps")
def get_order(
    request: Request, order_id: OrderId, caller: Annotated[Caller, needs(Permission.READ_OWN)]
) -> dict[str, Any]:
    """The order with its steps (state, attempts, errors, times; compensations): the facts
    of ``orders status ID --json``. A placer sees only the orders it placed."""
    app = api_state(request).web.app
    with UnitOfWork(app.session_factory) as uow:
        view = order_status(uow.session, order_id)
        owner = placed_by(uow.session, order_id) if view is not None else None
    if view is None or (not allows(caller.role, Permission.READ) and owner != caller.name):
        raise ApiProblem(404, f"no order {order_id}", field="order_id")
    unreadable: dict[str, str] = {}
    try:
        jobs = step_jobs(app.queues, view.workflow_id, view.steps)
        view = replace(view, steps=tuple(replace(s, job_id=jobs.ids[s.step]) for s in view.steps))
        unreadable = dict(jobs.problems)
    except QueueError as exc:  # the database's facts still stand
        unreadable = {"*": f"Redis: {type(exc).__name__}"}
    return order_out(view, unreadable)


@router.post("/orders/{order_id}/cancel", response_model=CancelOut, summary="Cancel an order")
def cancel_order(
    request: Request, order_id: OrderId, caller: Annotated[Caller, needs(Permission.OPERATE)]
) -> dict[str, Any]:
    """Cancel the order (as ``orders cancel``): idempotent; 409 when too late (completed
    or out of stock). The audit row commits with the cancellation."""
    app = api_state(request).web.app
    who = actor(request, caller)

    def audited(session: Any, result: CancelResult) -> None:
        record(
            session,
            who,
            Action.CANCEL,
            {"order_ids": [order_id]},
            count=0 if result.already else 1,
            result="already cancelled" if result.already else "ok",
        )

    try:
        done = cancel_then_publish(
            app.session_factory,
            app.publisher_if_running,
            order_id,
            policy=app.publish_policy,
            record=audited,
            tracer=app.tracer("orders.cancellation"),
        )
    except OrderNotFound as exc:
        raise ApiProblem(404, str(exc), field="order_id") from exc
    except OrderNotCancellable as exc:
        raise ApiProblem(409, str(exc), field="order_id") from exc
    r = done.result
    return {
        "id": r.order_id,
        "status": "cancelled",
        "already_cancelled": r.already,
        "compensations": list(r.compensations),
        "skipped": list(r.skipped),
        "deferred_steps": done.deferred,
    }


class SearchQuery(SearchFilter):
    """The search filter with its page: ``limit`` rows after ``cursor``."""

    limit: int = Field(default=50, ge=1, le=MAX_PAGE)
    cursor: int | None = Field(default=None, ge=1, le=MAX_ID)

    def filter(self) -> SearchFilter:
        """The filter alone."""
        return SearchFilter.model_validate(self.model_dump(exclude={"limit", "cursor"}))


@router.get("/orders", response_model=OrderPage, summary="Search orders")
def list_orders(
    request: Request,
    query: Annotated[SearchQuery, Query()],
    caller: Annotated[Caller, needs(Permission.READ_OWN)],
) -> dict[str, Any]:
    """Orders matching every filter given, newest first, a page at a time (indexed SQL on
    the database). A placer finds only the orders it placed."""
    own = None if allows(caller.role, Permission.READ) else caller.name
    with api_state(request).web.app.session_factory() as session:
        page = search_orders(
            session, query.filter(), limit=query.limit, cursor=query.cursor, placed_by=own
        )
    items = []
    for hit in page.items:
        row = hit.as_dict()
        row["id"] = row.pop("order_id")
        items.append(row)
    return {"items": items, "next_cursor": page.next_cursor}


@router.get("/jobs", response_model=JobPage, summary="Search step jobs")
def list_jobs(
    request: Request,
    query: Annotated[SearchQuery, Query()],
    caller: Annotated[Caller, needs(Permission.READ)],
) -> dict[str, Any]:
    """Step jobs (their step rows) matching every filter given, newest first."""
    with api_state(request).web.app.session_factory() as session:
        page = search_jobs(session, query.filter(), limit=query.limit, cursor=query.cursor)
    items = [{k: v for k, v in h.as_dict().items() if k != "workflow_id"} for h in page.items]
    return {"items": items, "next_cursor": page.next_cursor}


@router.post("/actions/cancel", response_model=BulkOut, summary="Cancel what a filter finds")
def bulk_cancel(
    request: Request,
    body: BulkIn,
    caller: Annotated[Caller, needs(Permission.OPERATE)],
    _json: Annotated[None, Depends(json_if_any)],
) -> dict[str, Any]:
    """Cancel every placed or blocked order the filter finds (at most 500; ``dry_run``,
    the default, only lists them; an empty filter acts only with ``all``). One audit
    row."""
    app = api_state(request).web.app
    try:
        result = cancel_matching(
            app.session_factory,
            app.publisher_if_running,
            body.filter,
            actor=actor(request, caller),
            dry_run=body.dry_run,
            everything=body.all,
            policy=app.publish_policy,
        )
    except UnfilteredAction as exc:
        raise ApiProblem(422, str(exc), field="filter") from exc
    return result.as_dict()


@router.post("/actions/redrive", response_model=BulkOut, summary="Redrive what a filter finds")
def bulk_redrive(
    request: Request,
    body: BulkIn,
    caller: Annotated[Caller, needs(Permission.OPERATE)],
    _json: Annotated[None, Depends(json_if_any)],
) -> dict[str, Any]:
    """Redrive every dead step job the filter finds (at most 500; ``dry_run``, the
    default, only lists them; an empty filter acts only with ``all``). One audit row,
    written right after the queue acted."""
    app = api_state(request).web.app
    try:
        result = redrive_matching(
            app.session_factory,
            app.queues,
            body.filter,
            actor=actor(request, caller),
            dry_run=body.dry_run,
            everything=body.all,
        )
    except UnfilteredAction as exc:
        raise ApiProblem(422, str(exc), field="filter") from exc
    return result.as_dict()


class PageQuery(BaseModel):
    """A page: ``limit`` rows older than ``cursor``; no other parameter is accepted."""

    model_config = ConfigDict(extra="forbid")

    limit: int = Field(default=50, ge=1, le=MAX_PAGE)
    cursor: int | None = Field(default=None, ge=1, le=MAX_ID)


@router.get("/audit", response_model=AuditPage, summary="The operator actions")
def audit_log(
    request: Request,
    query: Annotated[PageQuery, Query()],
    caller: Annotated[Caller, needs(Permission.READ)],
) -> dict[str, Any]:
    """Operator actions, newest first (as ``orders audit --json``)."""
    with api_state(request).web.app.session_factory() as session:
        rows = recent_actions(session, limit=query.limit + 1, before_id=query.cursor)
    items = [r.as_dict() for r in rows[: query.limit]]
    more = len(rows) > query.limit
    return {"items": items, "next_cursor": items[-1]["id"] if more and items else None}
