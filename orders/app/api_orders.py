"""Placing one order over HTTP, at most once per ``Idempotency-Key``.

The order goes through the same transactional outbox as ``orders place``
(``orders.app.placement.write_orders``: order, lines, workflow and step rows, the
first steps dispatched) and in the same transaction an ``api_orders`` row records
the token, the key, the body's fingerprint and the response; after the commit the
first steps are published (``workflows.relay.publish_dispatched``, ADR 0028), and a
queue that cannot be reached only defers them to the sweep.

The key's rules (the IETF httpapi draft "The Idempotency-Key HTTP Header Field"): the
same key with the same body answers the stored first response; with another body,
:class:`KeyReused`; while a request with that key is being served by this process,
:class:`KeyInFlight`; a key older than the window counts as new. A second process
placing the same key at the same moment fails on the unique index and answers the
first's stored response. Reasoning: docs/adr/0039-the-front-door-tokens-and-idempotency.md.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from opentelemetry.trace import Tracer
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from orders.app.order_traces import OrderSpans
from orders.app.placement import write_orders
from orders.domain.access import ApiOrder
from orders.domain.errors import OrdersError
from orders.domain.models import Customer, Product
from orders.domain.queries import OrderView, order_status
from orders.sources.drafts import LineDraft, OrderDraft
from reliable_queue.trace_context import TraceContext
from workflows.columns import utcnow
from workflows.isolation import describe
from workflows.messages import DispatchedStep, Publisher
from workflows.relay import PublishPolicy, publish_dispatched
from workflows.uow import SessionFactory, UnitOfWork

log = logging.getLogger("orders.api")

SOURCE = "api"
"""``orders.source`` of an order placed over HTTP."""
SHIP_MODE = "MAIL"
"""Ship mode of an API order's lines (the request names none)."""


class ApiOrderError(OrdersError):
    """A placement request refused before anything was written."""


class KeyInFlight(ApiOrderError):
    """A request with this ``Idempotency-Key`` is still being served (HTTP 409)."""


class KeyReused(ApiOrderError):
    """This ``Idempotency-Key`` was used with another body (HTTP 422)."""


class InvalidOrder(ApiOrderError):
    """The body names something that does not exist.

    Attributes:
        field: where, as a JSON path (``customer_id``, ``lines.2.part_id``).
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class LineRequest:
    """One line asked for: a part and a quantity (> 0)."""

    part_id: int
    quantity: int


@dataclass(frozen=True)
class PlaceRequest:
    """A validated order body (the API checked types, bounds and duplicates)."""

    customer_id: int
    lines: tuple[LineRequest, ...]
    priority: int | None = None


@dataclass(frozen=True)
class Placed:
    """The answer to a placement request.

    Attributes:
        status: the HTTP status (201).
        body: the response body as JSON text (stored, and replayed as is).
        order_id: the order.
        replayed: the stored first response of the same key.
        deferred: first steps left to the sweep (the queue could not take them now).
    """

    status: int
    body: str
    order_id: int
    replayed: bool = False
    deferred: int = 0


class InFlight:
    """The idempotency keys this process is serving now (per token)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: set[tuple[str, str]] = set()

    @contextmanager
    def hold(self, placed_by: str, key: str) -> Iterator[None]:
        """Mark ``key`` of ``placed_by`` in flight for the block.

        Raises:
            KeyInFlight: it is in flight already.
        """
        entry = (placed_by, key)
        with self._lock:
            if entry in self._held:
                raise KeyInFlight(
                    "a request with this Idempotency-Key is still being processed; "
                    "retry after it finished"
                )
            self._held.add(entry)
        try:
            yield
        finally:
            with self._lock:
                self._held.discard(entry)


@dataclass(frozen=True)
class KeyRules:
    """The idempotency key of one request and its window.

    Attributes:
        key: the ``Idempotency-Key`` header, or None (no key: placed every time).
        fingerprint: SHA-256 hex of the canonical body.
        window_seconds: how long a key is kept.
    """

    key: str | None
    fingerprint: str
    window_seconds: float


def place_api_order(
    session_factory: SessionFactory,
    publisher: Callable[[], Publisher],
    request: PlaceRequest,
    *,
    placed_by: str,
    rules: KeyRules,
    render: Callable[[OrderView], str],
    in_flight: InFlight,
    turn: AbstractContextManager[Any] | None = None,
    clock: Callable[[], datetime] = utcnow,
    policy: PublishPolicy | None = None,
    tracer: Tracer | None = None,
    parent: TraceContext | None = None,
) -> Placed:
    """Place ``request`` once per key, then publish its first steps.

    Args:
        session_factory: makes the session of the unit of work.
        publisher: called after the commit for the queue adapter; whatever it raises
            defers publishing to the sweep.
        request: the order.
        placed_by: the caller's token name (recorded; keys are per token).
        rules: the key, the body's fingerprint and the window.
        render: the response body (JSON text) from the order's view, in the
            transaction (it is stored with the key).
        in_flight: the keys this process serves now.
        turn: held around the transaction, after the key is marked in flight (the
            API lets one placement of the process at a time write on SQLite).
        clock: current time (timezone-aware).
        policy: publish attempts and backoff of refused rows.
        tracer: records the order's ``place order`` span (None: tracing off).
        parent: the caller's W3C context (its ``traceparent`` header): the order
            continues that trace; None: the order's span is a root.

    Returns:
        :class:`Placed`: 201 with the new order, or the stored first response.

    Raises:
        KeyInFlight: the key is being served now; nothing written.
        KeyReused: the key came with another body; nothing written.
        InvalidOrder: unknown customer or part; nothing written.
        sqlalchemy.exc.SQLAlchemyError: the database failed; nothing written.
    """
    held = in_flight.hold(placed_by, rules.key) if rules.key else nullcontext()
    with held, turn or nullcontext():
        try:
            placed, first = _commit(
                session_factory, request, placed_by, rules, render, clock(), (tracer, parent)
            )
        except IntegrityError:
            if rules.key is None:
                raise
            # another process committed this key first: answer its response
            with UnitOfWork(session_factory) as uow:
                replay = _stored(uow.session, placed_by, rules, clock())
            if replay is None:
                raise
            return replay
    if placed.replayed or not first:
        return placed
    return _publish(session_factory, publisher, first, placed, clock, policy)


def _commit(
    session_factory: SessionFactory,
    request: PlaceRequest,
    placed_by: str,
    rules: KeyRules,
    render: Callable[[OrderView], str],
    now: datetime,
    tracing: tuple[Tracer | None, TraceContext | None] = (None, None),
) -> tuple[Placed, list[DispatchedStep]]:
    """Write the order, or find the key's stored response, in one transaction; the
    order's ``place order`` span (a child of the caller's context) ends after it."""
    spans = OrderSpans([], [])
    try:
        with UnitOfWork(session_factory) as uow:
            session = uow.session
            if rules.key is not None:
                replay = _stored(session, placed_by, rules, now)
                if replay is not None:
                    return replay, []
            draft = _draft(session, request, now)
            tracer, parent = tracing
            spans = OrderSpans.start(tracer, 1, SOURCE, parent)
            placed, first = write_orders(
                session, [draft], now=now, dispatch=True, traces=spans.contexts
            )
            order_id = placed[0].order_id
            spans.placed([order_id])
            view = order_status(session, order_id)
            assert view is not None  # written above, in this transaction
            body = render(view)
            session.add(
                ApiOrder(
                    order_id=order_id,
                    placed_by=placed_by,
                    idempotency_key=rules.key,
                    fingerprint=rules.fingerprint if rules.key else None,
                    response_status=201 if rules.key else None,
                    response_body=body if rules.key else None,
                    priority=request.priority,
                    created_at=now,
                )
            )
            uow.commit()
    except BaseException as exc:
        spans.end(exc)
        raise
    spans.end()
    return Placed(201, body, order_id), first


def _stored(session: Session, placed_by: str, rules: KeyRules, now: datetime) -> Placed | None:
    """The stored first response of the key, None when the key is new (a key past its
    window is released here, in the caller's transaction).

    Raises:
        KeyReused: the key was used with another body.
    """
    row = session.scalar(
        select(ApiOrder).where(
            ApiOrder.placed_by == placed_by, ApiOrder.idempotency_key == rules.key
        )
    )
    if row is None:
        return None
    if row.created_at < now - timedelta(seconds=rules.window_seconds):
        _release(session, [row.order_id])
        return None
    if row.fingerprint != rules.fingerprint:
        raise KeyReused(
            "this Idempotency-Key was used with a different request body "
            f"(order {row.order_id}); use a new key for a new order"
        )
    return Placed(row.response_status or 201, row.response_body or "", row.order_id, True)


def _release(session: Session, order_ids: Sequence[int]) -> None:
    session.execute(
        update(ApiOrder)
        .where(ApiOrder.order_id.in_(order_ids))
        .values(idempotency_key=None, fingerprint=None, response_status=None, response_body=None)
    )


def release_expired_keys(
    session_factory: SessionFactory,
    window_seconds: float,
    *,
    clock: Callable[[], datetime] = utcnow,
    most: int = 1000,
) -> int:
    """Forget the keys (and stored responses) older than the window, at most ``most``
    per call; the orders and who placed them stay.

    Returns:
        Keys released.
    """
    cutoff = clock() - timedelta(seconds=window_seconds)
    with UnitOfWork(session_factory) as uow:
        ids = list(
            uow.session.scalars(
                select(ApiOrder.order_id)
                .where(ApiOrder.created_at < cutoff, ApiOrder.idempotency_key.is_not(None))
                .limit(most)
            )
        )
        if ids:
            _release(uow.session, ids)
            uow.commit()
    return len(ids)


def _draft(session: Session, request: PlaceRequest, now: datetime) -> OrderDraft:
    """The order draft of ``request``, priced from the catalog.

    Raises:
        InvalidOrder: the customer or a part does not exist (the first one named).
    """
    if session.get(Customer, request.customer_id) is None:
        raise InvalidOrder("customer_id", f"customer {request.customer_id} does not exist")
    wanted = {line.part_id for line in request.lines}
    prices = dict(
        session.execute(
            select(Product.id, Product.retail_price).where(Product.id.in_(sorted(wanted)))
        ).all()
    )
    lines = []
    for n, line in enumerate(request.lines):
        price = prices.get(line.part_id)
        if price is None:
            raise InvalidOrder(f"lines.{n}.part_id", f"part {line.part_id} does not exist")
        lines.append(
            LineDraft(
                n + 1, line.part_id, line.quantity, price * line.quantity, Decimal(0), SHIP_MODE
            )
        )
    return OrderDraft(
        customer_id=request.customer_id,
        total_price=sum((line.extended_price for line in lines), Decimal(0)),
        order_date=now.date(),
        source=SOURCE,
        source_key=None,
        lines=tuple(lines),
        queue_priority=request.priority,  # None: 5, the mapping of NOT SPECIFIED
    )


def _publish(
    session_factory: SessionFactory,
    publisher: Callable[[], Publisher],
    first: list[DispatchedStep],
    placed: Placed,
    clock: Callable[[], datetime],
    policy: PublishPolicy | None,
) -> Placed:
    """Publish the first steps; on any failure they are the sweep's (counted)."""
    try:
        published = publish_dispatched(
            session_factory, publisher(), first, clock=clock, policy=policy
        )
    except Exception as exc:  # the order is committed: publishing is deferred
        log.warning("first steps of order %d left to the sweep: %s", placed.order_id, describe(exc))
        published = 0
    return Placed(placed.status, placed.body, placed.order_id, False, len(first) - published)


def placed_by(session: Session, order_id: int) -> str | None:
    """The token name that placed ``order_id`` over HTTP, or None (placed otherwise)."""
    return session.scalar(select(ApiOrder.placed_by).where(ApiOrder.order_id == order_id))
