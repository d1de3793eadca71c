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

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from opentelemetry.trace import Tracer
from sqlalchemy import Row, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from orders.app.group_commit import GroupCommit
from orders.app.order_traces import OrderSpans
from orders.app.placement import PlacedOrder, write_orders
from orders.domain.access import ApiOrder
from orders.domain.errors import OrdersError
from orders.domain.models import Customer, OrderStatus, Product
from orders.domain.queries import OrderView, StepView
from orders.domain.steps import STEPS
from orders.sources.drafts import LineDraft, OrderDraft
from reliable_queue.trace_context import TraceContext
from workflows.columns import utcnow
from workflows.isolation import describe
from workflows.messages import DispatchedStep, Publisher
from workflows.models import StepStatus, WorkflowStatus
from workflows.relay import PublishPolicy, publish_dispatched
from workflows.sql import dialect_of, per_dialect
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
    group: GroupCommit[Pending, Committed] | None = None,
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
        tracer: records the order's ``place order`` span (None: tracing off); with
            ``group``, the group's write function has its own.
        parent: the caller's W3C context (its ``traceparent`` header): the order
            continues that trace; None: the order's span is a root.
        group: writes the placements waiting at once in one transaction (its write
            function is :func:`commit_placements`; it holds the turn itself); None:
            this one alone, in its own transaction, holding ``turn``.

    Returns:
        :class:`Placed`: 201 with the new order, or the stored first response.

    Raises:
        KeyInFlight: the key is being served now; nothing written.
        KeyReused: the key came with another body; nothing written.
        InvalidOrder: unknown customer or part; nothing written.
        sqlalchemy.exc.SQLAlchemyError: the database failed; nothing written.
    """
    pending = Pending(request, placed_by, rules, parent)
    held = in_flight.hold(placed_by, rules.key) if rules.key else nullcontext()
    with held:
        if group is not None:
            placed, first = group.submit(pending)
        else:
            with turn or nullcontext():
                placed, first = _commit_alone(session_factory, pending, render, clock(), tracer)
    if placed.replayed or not first:
        return placed
    return _publish(session_factory, publisher, first, placed, clock, policy)


async def place_api_order_async(
    session_factory: SessionFactory,
    publisher: Callable[[], Publisher],
    request: PlaceRequest,
    *,
    placed_by: str,
    rules: KeyRules,
    in_flight: InFlight,
    group: GroupCommit[Pending, Committed],
    clock: Callable[[], datetime] = utcnow,
    policy: PublishPolicy | None = None,
    parent: TraceContext | None = None,
) -> Placed:
    """:func:`place_api_order` through ``group`` for a coroutine: it waits for the
    group's writer thread on its event loop instead of holding a thread of its own.

    Args:
        session_factory, publisher, request, placed_by, rules, in_flight, clock,
        policy, parent: as :func:`place_api_order`.
        group: writes the placements waiting at once in one transaction (its write
            function is :func:`commit_placements`, which publishes the first steps when
            given a publisher; steps it leaves are published here, in a thread).

    Returns:
        :class:`Placed`: 201 with the new order, or the stored first response.

    Raises:
        KeyInFlight, KeyReused, InvalidOrder, sqlalchemy.exc.SQLAlchemyError: as
            :func:`place_api_order`.
    """
    pending = Pending(request, placed_by, rules, parent)
    held = in_flight.hold(placed_by, rules.key) if rules.key else nullcontext()
    with held:
        placed, first = await group.submit_async(pending)
    if placed.replayed or not first:
        return placed
    return await asyncio.to_thread(
        _publish, session_factory, publisher, first, placed, clock, policy
    )


@dataclass(frozen=True)
class Pending:
    """A placement waiting for its transaction: the order, its caller, its key, and the
    caller's W3C context (None: the order's span is a root)."""

    request: PlaceRequest
    placed_by: str
    rules: KeyRules
    parent: TraceContext | None = None


Committed = tuple[Placed, list[DispatchedStep]]
"""A placement's answer and the first steps its commit marked dispatched (to publish)."""


def commit_placements(
    session_factory: SessionFactory,
    render: Callable[[OrderView], str],
    items: Sequence[Pending],
    *,
    clock: Callable[[], datetime] = utcnow,
    publisher: Callable[[], Publisher] | None = None,
    policy: PublishPolicy | None = None,
    tracer: Tracer | None = None,
) -> list[Committed | Exception]:
    """Write ``items`` in one transaction (group commit, ``orders.app.group_commit``).

    A refused item (:class:`ApiOrderError`) or a replayed key writes nothing and
    leaves the others in the batch. When the batch's transaction fails (another
    process committed one of its keys first: the unique index; the database failed;
    any other error of one item's write), each item is written again alone, so only
    its own failure reaches it, and an order committed alone is always answered.

    Args:
        session_factory: makes the session of the unit of work.
        render: the response body (JSON text) from an order's view.
        items: the placements, one per request (no two with one key of one token).
        clock: current time (timezone-aware).
        publisher: with it, the first steps of the whole batch are published here after
            the commit, in one call (each outcome then carries none to publish and its
            :attr:`Placed.deferred`); None leaves them in the outcomes.
        policy: publish attempts and backoff of refused rows.
        tracer: records each order's ``place order`` span, a child of its item's
            ``parent`` (None: tracing off); a batch that fails and is written again
            item by item leaves its spans ended with the error.

    Returns:
        One outcome per item, in order: :data:`Committed`, or the exception its request
        raises (:class:`ApiOrderError`, ``sqlalchemy.exc.SQLAlchemyError``, or whatever
        else writing it alone raised).
    """
    if len(items) == 1:
        outcomes = [_alone_or_error(session_factory, items[0], render, clock(), tracer)]
    else:
        try:
            with _placing(session_factory) as (uow, spans):
                outcomes = _write(uow.session, items, render, clock(), tracer, spans)
                uow.commit()
        except Exception:  # each item alone meets its own failure again
            outcomes = [
                _alone_or_error(session_factory, item, render, clock(), tracer) for item in items
            ]
    if publisher is None:
        return outcomes
    return _publish_batch(session_factory, publisher, outcomes, clock, policy)


def _publish_batch(
    session_factory: SessionFactory,
    publisher: Callable[[], Publisher],
    outcomes: list[Committed | Exception],
    clock: Callable[[], datetime],
    policy: PublishPolicy | None,
) -> list[Committed | Exception]:
    """Publish the first steps of every placed outcome at once; when some are left to
    the sweep, each order that had any counts all its own as deferred (at most)."""
    rows = [row for o in outcomes if not isinstance(o, Exception) for row in o[1]]
    if not rows:
        return outcomes
    short = len(rows) - _publish_rows(session_factory, publisher, rows, clock, policy)
    done: list[Committed | Exception] = []
    for o in outcomes:
        if isinstance(o, Exception) or not o[1]:
            done.append(o)
            continue
        placed, first = o
        deferred = len(first) if short else 0
        done.append((Placed(placed.status, placed.body, placed.order_id, False, deferred), []))
    return done


@contextmanager
def _placing(session_factory: SessionFactory) -> Iterator[tuple[UnitOfWork, list[OrderSpans]]]:
    """A unit of work and the ``place order`` spans its writes start: ended after it,
    with its error when it raised."""
    spans: list[OrderSpans] = []
    try:
        with UnitOfWork(session_factory) as uow:
            yield uow, spans
    except BaseException as exc:
        for started in spans:
            started.end(exc)
        raise
    for started in spans:
        started.end()


def _alone_or_error(
    session_factory: SessionFactory,
    item: Pending,
    render: Callable[[OrderView], str],
    now: datetime,
    tracer: Tracer | None,
) -> Committed | Exception:
    try:
        return _commit_alone(session_factory, item, render, now, tracer)
    except Exception as exc:  # its caller raises it; the others are placed
        return exc


def _commit_alone(
    session_factory: SessionFactory,
    item: Pending,
    render: Callable[[OrderView], str],
    now: datetime,
    tracer: Tracer | None = None,
) -> Committed:
    """One placement in its own transaction; a key another process committed first
    answers that one's stored response."""
    try:
        with _placing(session_factory) as (uow, spans):
            [outcome] = _write(uow.session, [item], render, now, tracer, spans)
            if isinstance(outcome, Exception):
                raise outcome
            uow.commit()
        return outcome
    except IntegrityError:
        if item.rules.key is None:
            raise
        # another process committed this key first: answer its response
        with UnitOfWork(session_factory) as uow:
            replay = _stored(item.placed_by, item.rules, now, _stored_rows(uow.session, [item]))
        if replay is None:
            raise
        return replay, []


def _write(
    session: Session,
    items: Sequence[Pending],
    render: Callable[[OrderView], str],
    now: datetime,
    tracer: Tracer | None,
    spans: list[OrderSpans],
) -> list[Committed | Exception]:
    """Write the new orders of ``items`` in the caller's transaction (not committed),
    starting each one's ``place order`` span into ``spans`` (the caller ends them)."""
    outcomes: list[Committed | Exception | None] = [None] * len(items)
    new: list[tuple[int, OrderDraft]] = []
    found = _stored_rows(session, items)
    known = _catalog(session, [item.request for item in items])
    for i, item in enumerate(items):
        expired: list[int] = []
        try:
            if item.rules.key is not None:
                replay = _stored(item.placed_by, item.rules, now, found, expired)
                if replay is not None:
                    outcomes[i] = (replay, [])
                    continue
            new.append((i, _draft(session, item.request, now, known)))
            if expired:  # only a placement that goes ahead releases the old key
                _release(session, expired)
        except ApiOrderError as exc:
            outcomes[i] = exc
    if new:
        started = [OrderSpans.start(tracer, 1, SOURCE, items[i].parent) for i, _ in new]
        spans.extend(started)
        placed, first = write_orders(
            session,
            [draft for _, draft in new],
            now=now,
            dispatch=True,
            traces=[s.contexts[0] for s in started],
        )
        for order_spans, order in zip(started, placed, strict=True):
            order_spans.placed([order.order_id])
        by_workflow: dict[int, list[DispatchedStep]] = {}
        for row in first:
            by_workflow.setdefault(row.workflow_id, []).append(row)
        keys = []
        for (i, draft), order in zip(new, placed, strict=True):
            item = items[i]
            dispatched = by_workflow.get(order.workflow_id, [])
            body = render(_written_view(draft, order, dispatched, now))
            keyed = item.rules.key is not None
            keys.append(
                {
                    "order_id": order.order_id,
                    "placed_by": item.placed_by,
                    "idempotency_key": item.rules.key,
                    "fingerprint": item.rules.fingerprint if keyed else None,
                    "response_status": 201 if keyed else None,
                    "response_body": body if keyed else None,
                    "priority": item.request.priority,
                    "created_at": now,
                }
            )
            outcomes[i] = (Placed(201, body, order.order_id), dispatched)
        # one Core statement on the table (the unique index checks every key here): no
        # ORM bulk insert and its bookkeeping
        session.execute(insert(_API_ORDERS), keys)
    return outcomes  # type: ignore[return-value]


def _written_view(
    draft: OrderDraft, order: PlacedOrder, dispatched: Sequence[DispatchedStep], now: datetime
) -> OrderView:
    """The view of an order just written (what ``order_status`` reads back in the same
    transaction): placed, its first steps dispatched, the others waiting."""
    first = {row.step for row in dispatched}
    steps = tuple(
        StepView(
            step,
            StepStatus.DISPATCHED if step in first else StepStatus.WAITING,
            None,
            0,
            None,
            None,
            now,
            now if step in first else None,
            None,
            None,
        )
        for step in STEPS
    )
    return OrderView(
        order_id=order.order_id,
        status=OrderStatus.PLACED,
        source=draft.source,
        source_key=draft.source_key,
        customer_id=draft.customer_id,
        total_price=draft.total_price,
        placed_at=now,
        workflow_id=order.workflow_id,
        workflow_status=WorkflowStatus.RUNNING,
        blocked_step=None,
        blocked_reason=None,
        completed_at=None,
        steps=steps,
    )


def _stored(
    placed_by: str,
    rules: KeyRules,
    now: datetime,
    found: Mapping[tuple[str, str], Row[Any]],
    expired: list[int] | None = None,
) -> Placed | None:
    """The stored first response of the key, None when the key is new or past its
    window. ``found``: the ``api_orders`` rows of the keys at hand, read at once
    (:func:`_stored_rows`). ``expired``: gets the order id of a key past its window,
    which the caller releases (:func:`_release`) before it writes the key again, and
    only when it does (a refused request writes nothing).

    Raises:
        KeyReused: the key was used with another body.
    """
    row = found.get((placed_by, rules.key or ""))
    if row is None:
        return None
    if row.created_at < now - timedelta(seconds=rules.window_seconds):
        if expired is not None:
            expired.append(row.order_id)
        return None
    if row.fingerprint != rules.fingerprint:
        raise KeyReused(
            "this Idempotency-Key was used with a different request body "
            f"(order {row.order_id}); use a new key for a new order"
        )
    return Placed(row.response_status or 201, row.response_body or "", row.order_id, True)


_API_ORDERS = ApiOrder.__table__
_CUSTOMERS = Customer.__table__
_PRODUCTS = Product.__table__
_KEY_ROWS = per_dialect(
    lambda d: select(
        _API_ORDERS.c.placed_by,
        _API_ORDERS.c.idempotency_key,
        _API_ORDERS.c.order_id,
        _API_ORDERS.c.created_at,
        _API_ORDERS.c.fingerprint,
        _API_ORDERS.c.response_status,
        _API_ORDERS.c.response_body,
    ).where(
        d.one_of(_API_ORDERS.c.placed_by, "names"), d.one_of(_API_ORDERS.c.idempotency_key, "keys")
    )
)
"""The ``api_orders`` rows of some tokens' keys, through the unique index on (placed_by,
idempotency_key); built once per dialect, the lists bound as one parameter each."""
_KNOWN_CUSTOMERS = per_dialect(
    lambda d: select(_CUSTOMERS.c.id).where(d.one_of(_CUSTOMERS.c.id, "ids"))
)
_PRICES = per_dialect(
    lambda d: select(_PRODUCTS.c.id, _PRODUCTS.c.retail_price).where(
        d.one_of(_PRODUCTS.c.id, "ids")
    )
)


def _stored_rows(session: Session, items: Sequence[Pending]) -> dict[tuple[str, str], Row[Any]]:
    """The ``api_orders`` rows of the keys of ``items``, by (token, key): one query
    through the unique index on (placed_by, idempotency_key), none without keys."""
    wanted = {(item.placed_by, item.rules.key) for item in items if item.rules.key is not None}
    if not wanted:
        return {}
    rows = session.execute(
        _KEY_ROWS[dialect_of(session)],
        {"names": sorted({name for name, _ in wanted}), "keys": sorted({k for _, k in wanted})},
    )
    return {
        (row.placed_by, row.idempotency_key): row
        for row in rows
        if (row.placed_by, row.idempotency_key) in wanted
    }


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


@dataclass(frozen=True)
class _Catalog:
    """The customers and part prices that some requests name, read at once."""

    customers: frozenset[int]
    prices: dict[int, Decimal]


def _catalog(session: Session, requests: Sequence[PlaceRequest]) -> _Catalog:
    """What ``requests`` name of the catalog: one query for customers, one for prices."""
    customers = sorted({r.customer_id for r in requests})
    parts = sorted({line.part_id for r in requests for line in r.lines})
    dialect = dialect_of(session)
    return _Catalog(
        frozenset(session.scalars(_KNOWN_CUSTOMERS[dialect], {"ids": customers})),
        dict(session.execute(_PRICES[dialect], {"ids": parts}).all()),
    )


def _draft(
    session: Session, request: PlaceRequest, now: datetime, known: _Catalog | None = None
) -> OrderDraft:
    """The order draft of ``request``, priced from the catalog (``known``: read already
    for a batch; None reads what this request names).

    Raises:
        InvalidOrder: the customer or a part does not exist (the first one named).
    """
    known = known or _catalog(session, [request])
    if request.customer_id not in known.customers:
        raise InvalidOrder("customer_id", f"customer {request.customer_id} does not exist")
    prices = known.prices
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
    published = _publish_rows(session_factory, publisher, first, clock, policy)
    return Placed(placed.status, placed.body, placed.order_id, False, len(first) - published)


def _publish_rows(
    session_factory: SessionFactory,
    publisher: Callable[[], Publisher],
    rows: list[DispatchedStep],
    clock: Callable[[], datetime],
    policy: PublishPolicy | None,
) -> int:
    """Publish committed step rows; returns how many went (on any failure the rest are
    the sweep's)."""
    try:
        return publish_dispatched(session_factory, publisher(), rows, clock=clock, policy=policy)
    except Exception as exc:  # the orders are committed: publishing is deferred
        orders = sorted({row.workflow_id for row in rows})
        log.warning("first steps of workflows %s left to the sweep: %s", orders, describe(exc))
        return 0


def placed_by(session: Session, order_id: int) -> str | None:
    """The token name that placed ``order_id`` over HTTP, or None (placed otherwise)."""
    return session.scalar(select(ApiOrder.placed_by).where(ApiOrder.order_id == order_id))
