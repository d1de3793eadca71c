"""The four step effects, set-based: a batch of orders in a few statements, one order
being a batch of one.

Each effect runs inside the completion tracker's unit of work and commits nothing,
before or after the tracker locks the batch's workflow rows as the dialect's lock
plan says (``workflows.sql.LockPlan``; ADR 0014): where it runs first, the marking
rolls the effect back with it when a claimed step row was finished meanwhile. A
batch's rows go in one statement each (ADR 0015, ADR 0019). It takes the batch's
deliveries
(:class:`Delivery`, in claim order) and returns step row id -> outcome word. Each is
idempotent on its own, on top of the tracker's done-step check: its row is unique per
order (and kind, reason or part), and an existing one means the effect is already
there (the insert leaves it out, ``Dialect.insert_new_rows``; the stock effect reads
the parts deducted before it takes stock, :func:`parts_with_row`); inventory changes
under its version column (:func:`read_inventory`, :func:`write_inventory`). The compensating
effects (``orders.domain.compensations``) are built the same way from these pieces.
"""

from __future__ import annotations

import functools
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple

from sqlalchemy import (
    Integer,
    Select,
    Update,
    bindparam,
    func,
    select,
    update,
)
from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import StaleDataError

from orders.domain.models import (
    Inventory,
    Notification,
    Order,
    OrderLine,
    OrderStatus,
    PointsEntry,
    Shipment,
    StockDeduction,
)
from orders.domain.steps import LOGISTICS, NOTIFICATION, OUT_OF_STOCK_OUTCOME, POINTS, STOCK
from workflows.sql import Dialect, dialect_of, per_dialect

DEDUCTED = "deducted"
OUT_OF_STOCK = OUT_OF_STOCK_OUTCOME
SENT = "sent"
ALREADY_SENT = "already_sent"
CREDITED = "credited"
ALREADY_CREDITED = "already_credited"
SCHEDULED = "scheduled"
CANCELLED = "cancelled"

CONFIRMATION = "order_confirmed"
"""``notifications.kind`` of the confirmation sent for every order that has its stock."""
CANCELLATION = "order_cancelled"
"""``notifications.kind`` of the notice sent instead when an order cannot be fulfilled."""
ORDER_PLACED = "order_placed"
"""``points_ledger.reason`` of the points credited for every order."""


class Delivery(NamedTuple):
    """One order whose step the batch applies: its step row and the order's own columns.

    Attributes:
        step_row_id: the step row (the key of the effect's outcomes).
        order_id: the order.
        customer_id: the order's customer.
        total_price: the order's total price.
        status: the order's status when the batch started.
    """

    step_row_id: int
    order_id: int
    customer_id: int
    total_price: Decimal
    status: str


Effect = Callable[[Session, list[Delivery], datetime], dict[int, str]]
"""``effect(session, deliveries, now) -> {step row id: outcome word}``, one per delivery."""

# The statements of the hot path, built once per dialect (workflows.sql): on a batch of
# one, building a statement (and its cache key) costs more than running it. An id list
# is one parameter (an array on PostgreSQL, a JSON text on SQLite) and a batch's rows
# too (unnest, json_each): the text does not grow with the batch, and no value is
# processed in Python.
_LINE = OrderLine.__table__
_INV = Inventory.__table__
_ORDER = Order.__table__
_SHIPMENT = Shipment.__table__
_DEDUCTION = StockDeduction.__table__
_NOTIFICATION = Notification.__table__
_POINTS = PointsEntry.__table__
_NEEDED = per_dialect(
    lambda d: (
        select(_LINE.c.order_id, _LINE.c.part_id, func.sum(_LINE.c.quantity))
        .where(d.one_of(_LINE.c.order_id, "ids"))
        .group_by(_LINE.c.order_id, _LINE.c.part_id)
        .order_by(_LINE.c.order_id, _LINE.c.part_id)
    )
)
_MODES = per_dialect(
    lambda d: select(_LINE.c.order_id, _LINE.c.ship_mode).where(d.one_of(_LINE.c.order_id, "ids"))
)
_READ_STOCK = per_dialect(
    lambda d: d.for_update(
        select(_INV.c.part_id, _INV.c.on_hand, _INV.c.version).where(
            d.one_of(_INV.c.part_id, "parts")
        ),
        _INV.c.part_id,
    )
)
"""The inventory rows to change, locked in part order where rows are locked."""
_STOCK_COLUMNS = {"part_id": Integer(), "on_hand": Integer(), "version": Integer()}


def _write_stock(d: Dialect) -> Update:
    new = d.rows("stock", _STOCK_COLUMNS, alias="new")
    return (
        update(_INV)
        .where(_INV.c.part_id == new.c.part_id, _INV.c.version == new.c.version)
        .values(on_hand=new.c.on_hand, version=_INV.c.version + 1)
    )


_WRITE_STOCK = per_dialect(_write_stock)
"""Every changed inventory row in one ``UPDATE ... FROM`` the rows bound as one parameter,
each under its version (the row count says how many versions still matched)."""
_SHIPMENTS = per_dialect(
    lambda d: select(_SHIPMENT.c.order_id, _SHIPMENT.c.status).where(
        d.one_of(_SHIPMENT.c.order_id, "ids")
    )
)
_CANCEL_SHIPMENTS = per_dialect(
    lambda d: (
        update(_SHIPMENT)
        .where(d.one_of(_SHIPMENT.c.order_id, "ids"), _SHIPMENT.c.status != CANCELLED)
        .values(status=CANCELLED)
    )
)
_OUT_OF_STOCK = per_dialect(
    lambda d: (
        update(_ORDER).where(d.one_of(_ORDER.c.id, "ids")).values(status=OrderStatus.OUT_OF_STOCK)
    )
)
_COMPLETE = per_dialect(
    lambda d: (
        update(_ORDER)
        .where(d.one_of(_ORDER.c.id, "ids"), _ORDER.c.status == OrderStatus.PLACED)
        .values(status=OrderStatus.COMPLETED)
    )
)


@functools.cache
def _with_row(model: Any, names: tuple[str, ...], dialect: Dialect) -> Select[Any]:
    table = model.__table__
    return select(table.c.order_id).where(
        dialect.one_of(table.c.order_id, "ids"),
        *(table.c[name] == bindparam(name) for name in names),
    )


@functools.cache
def _parts_with_row(model: Any, dialect: Dialect) -> Select[Any]:
    table = model.__table__
    return select(table.c.order_id, table.c.part_id).where(dialect.one_of(table.c.order_id, "ids"))


def points_for(total_price: Decimal) -> int:
    """Return the loyalty points of an order: floor(total price / 10), never negative."""
    return max(0, math.floor(total_price / 10))


def ship_mode_for(modes: Iterable[str]) -> str:
    """Return the most common ship mode; ties go to the alphabetically first.

    Raises:
        ValueError: ``modes`` is empty.
    """
    counts = Counter(modes)
    if not counts:
        raise ValueError("an order without lines has no ship mode")
    return min(counts, key=lambda mode: (-counts[mode], mode))


def orders_with_row(
    session: Session, model: Any, order_ids: Sequence[int], **match: Any
) -> set[int]:
    """The unique-row guard: the orders that already have their ``model`` row.

    Args:
        session: the caller's session.
        model: a mapped class with an ``order_id`` column.
        order_ids: the orders to look at.
        match: column name -> value the row must have (its unique key besides the order).

    Returns:
        The ids among ``order_ids`` with such a row.
    """
    if not order_ids:
        return set()
    statement = _with_row(model, tuple(sorted(match)), dialect_of(session))
    return set(session.scalars(statement, {"ids": list(order_ids), **match}).all())


def parts_with_row(session: Session, model: Any, order_ids: Sequence[int]) -> set[tuple[int, int]]:
    """The per-part guard: the (order, part) pairs that already have their ``model`` row.

    Args:
        model: a mapped class with ``order_id`` and ``part_id`` columns, unique together.
    """
    return {
        (order_id, part_id)
        for order_id, part_id in session.execute(
            _parts_with_row(model, dialect_of(session)), {"ids": list(order_ids)}
        ).all()
    }


def read_inventory(session: Session, parts: Iterable[int]) -> dict[int, list[int]]:
    """Read inventory rows to change, locked in part order where rows are locked (PostgreSQL).

    Returns:
        part id -> ``[on hand, version]`` (change the first, then :func:`write_inventory`).
    """
    statement = _READ_STOCK[dialect_of(session)]
    return {
        part: [on_hand, version]
        for part, on_hand, version in session.execute(statement, {"parts": sorted(parts)}).all()
    }


def write_inventory(session: Session, stock: dict[int, list[int]], before: dict[int, int]) -> None:
    """Write each changed inventory row once, under its version column.

    One statement for all of them: ``UPDATE ... FROM`` the rows bound as one
    parameter (``Dialect.rows``). Every row's version must still
    be the one read, or nothing of the unit of work stands: the error makes the
    caller roll back (rows the statement did change go with it) and rerun.

    Args:
        stock: what :func:`read_inventory` returned, with ``on hand`` changed.
        before: part id -> on hand as read.

    Raises:
        StaleDataError: a row's version moved since it was read (the tracker
            reruns the unit of work).
    """
    changed = [part for part, values in stock.items() if values[0] != before[part]]
    if not changed:
        return
    dialect = dialect_of(session)
    rows = dialect.bind_rows(
        "stock",
        {
            "part_id": changed,
            "on_hand": [stock[part][0] for part in changed],
            "version": [stock[part][1] for part in changed],
        },
    )
    matched = session.execute(_WRITE_STOCK[dialect], rows).rowcount
    if matched != len(changed):
        raise StaleDataError(f"inventory changed under the batch ({matched}/{len(changed)})")


def deduct_stock(session: Session, deliveries: list[Delivery], now: datetime) -> dict[int, str]:
    """Take each order's parts from inventory, all or nothing per order, in delivery order.

    One ``stock_deductions`` row per (order, part); a part already deducted for
    the order is not taken again. An order with any part short takes nothing: it
    becomes ``out_of_stock`` and its customer gets a cancellation notice (the
    steps after stock are skipped; a shipment that exists anyway is cancelled).

    Returns:
        step row id -> ``deducted`` or ``out_of_stock``.
    """
    dialect = dialect_of(session)
    ids = [d.order_id for d in deliveries]
    needed: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for oid, part, qty in session.execute(_NEEDED[dialect], {"ids": ids}).all():
        needed[oid].append((part, int(qty)))
    stock = read_inventory(session, {p for lines in needed.values() for p, _ in lines})
    before = {part: values[0] for part, values in stock.items()}
    taken = parts_with_row(session, StockDeduction, ids)
    out: dict[int, str] = {}
    orders: list[int] = []
    parts: list[int] = []
    quantities: list[int] = []
    short: list[Delivery] = []
    for d in deliveries:
        lines = needed[d.order_id]
        if any(part not in stock or stock[part][0] < qty for part, qty in lines):
            out[d.step_row_id] = OUT_OF_STOCK
            short.append(d)
            continue
        for part, qty in lines:
            if (d.order_id, part) in taken:
                continue
            stock[part][0] -= qty
            orders.append(d.order_id)
            parts.append(part)
            quantities.append(qty)
        out[d.step_row_id] = DEDUCTED
    write_inventory(session, stock, before)
    dialect.insert_rows(
        session,
        _DEDUCTION,
        {"order_id": orders, "part_id": parts, "quantity": quantities},
        constants={"created_at": now},
    )
    if short:
        short_ids = [d.order_id for d in short]
        session.execute(_OUT_OF_STOCK[dialect], {"ids": short_ids})
        notify_cancelled(session, [(d.order_id, d.customer_id) for d in short], now)
        session.execute(_CANCEL_SHIPMENTS[dialect], {"ids": short_ids})
    return out


def notify_cancelled(session: Session, orders: list[tuple[int, int]], now: datetime) -> int:
    """Record a cancellation notice per order, once per (order, kind).

    Args:
        session: the caller's session (nothing committed).
        orders: (order id, customer id) pairs.
        now: creation time (timezone-aware).

    Returns:
        Notices written (orders that already had one are left alone).
    """
    customers = dict(orders)
    return len(
        dialect_of(session).insert_new_rows(
            session,
            _NOTIFICATION,
            {"order_id": list(customers), "customer_id": list(customers.values())},
            unique=("order_id", "kind"),
            returning="order_id",
            constants={"kind": CANCELLATION, "created_at": now},
        )
    )


def send_confirmation(
    session: Session, deliveries: list[Delivery], now: datetime
) -> dict[int, str]:
    """Record each order's confirmation message, once per (order, kind).

    The unique index decides (``Dialect.insert_new_rows``): no read of the rows
    already there comes first.

    Returns:
        step row id -> ``sent``, or ``already_sent`` when the row exists.
    """
    sent = set(
        dialect_of(session).insert_new_rows(
            session,
            _NOTIFICATION,
            {
                "order_id": [d.order_id for d in deliveries],
                "customer_id": [d.customer_id for d in deliveries],
            },
            unique=("order_id", "kind"),
            returning="order_id",
            constants={"kind": CONFIRMATION, "created_at": now},
        )
    )
    return {d.step_row_id: SENT if d.order_id in sent else ALREADY_SENT for d in deliveries}


def credit_points(session: Session, deliveries: list[Delivery], now: datetime) -> dict[int, str]:
    """Credit floor(total price / 10) points per order, once per (order, reason).

    The unique index decides (``Dialect.insert_new_rows``): no read of the rows
    already there comes first.

    Returns:
        step row id -> ``credited``, or ``already_credited`` when the ledger row exists.
    """
    credited = set(
        dialect_of(session).insert_new_rows(
            session,
            _POINTS,
            {
                "order_id": [d.order_id for d in deliveries],
                "customer_id": [d.customer_id for d in deliveries],
                "points": [points_for(d.total_price) for d in deliveries],
            },
            unique=("order_id", "reason"),
            returning="order_id",
            constants={"reason": ORDER_PLACED, "created_at": now},
        )
    )
    return {
        d.step_row_id: CREDITED if d.order_id in credited else ALREADY_CREDITED for d in deliveries
    }


def schedule_shipment(
    session: Session, deliveries: list[Delivery], now: datetime
) -> dict[int, str]:
    """Create each order's one shipment with the most common ship mode of its lines.

    An order already out of stock gets a cancelled shipment; an existing
    shipment is left as it is. The unique index decides which are new
    (``Dialect.insert_new_rows``); the status of those that were there already is
    read after the insert, only when there are some.

    Returns:
        step row id -> the shipment's status: ``scheduled`` or ``cancelled``.

    Raises:
        ValueError: an order without lines (it has no ship mode) and no shipment.
    """
    dialect = dialect_of(session)
    ids = [d.order_id for d in deliveries]
    modes: dict[int, list[str]] = defaultdict(list)
    for oid, mode in session.execute(_MODES[dialect], {"ids": ids}).all():
        modes[oid].append(mode)
    shippable = [d for d in deliveries if modes[d.order_id]]
    status = {
        d.order_id: CANCELLED if d.status == OrderStatus.OUT_OF_STOCK else SCHEDULED
        for d in shippable
    }
    created = set(
        dialect.insert_new_rows(
            session,
            _SHIPMENT,
            {
                "order_id": [d.order_id for d in shippable],
                "ship_mode": [ship_mode_for(modes[d.order_id]) for d in shippable],
                "status": [status[d.order_id] for d in shippable],
            },
            unique=("order_id",),
            returning="order_id",
            constants={"created_at": now},
        )
    )
    left = [oid for oid in ids if oid not in created]
    existing = dict(session.execute(_SHIPMENTS[dialect], {"ids": left}).all()) if left else {}
    out: dict[int, str] = {}
    for d in deliveries:
        if d.order_id in created:
            out[d.step_row_id] = status[d.order_id]
        elif d.order_id in existing:
            out[d.step_row_id] = existing[d.order_id]
        else:
            ship_mode_for(modes[d.order_id])  # no lines: raises
    return out


EFFECTS: dict[str, Effect] = {
    STOCK: deduct_stock,
    NOTIFICATION: send_confirmation,
    POINTS: credit_points,
    LOGISTICS: schedule_shipment,
}
"""Step name -> effect."""


def complete_orders(session: Session, order_ids: list[int]) -> None:
    """Orders whose workflow just finished become ``completed`` (other statuses stay)."""
    if order_ids:
        session.execute(_COMPLETE[dialect_of(session)], {"ids": order_ids})
