"""The four step effects, set-based: a batch of orders in a few statements, one order
being a batch of one.

Each effect runs inside the completion tracker's unit of work, after the batch's
workflow rows are locked (a lone delivery on SQLite: after its workflow's version
was checked and bumped, the write that takes the database's write lock), and
commits nothing. It takes the batch's deliveries
(:class:`Delivery`, in claim order) and returns step row id -> outcome word. Each is
idempotent on its own, on top of the tracker's done-step check: its row is unique per
order (and kind, reason or part), and an existing one means the effect is already
there (:func:`orders_with_row`, :func:`parts_with_row`); inventory changes under its
version column (:func:`read_inventory`, :func:`write_inventory`). The compensating
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

from sqlalchemy import Insert, Select, bindparam, func, insert, select, update
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
from orders.domain.steps import LOGISTICS, NOTIFICATION, POINTS, STOCK

DEDUCTED = "deducted"
OUT_OF_STOCK = "out_of_stock"
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

# The statements of the hot path, built once: on a batch of one, building a
# statement (and its cache key) costs more than running it.
_IDS = bindparam("ids", expanding=True)
_PARTS = bindparam("parts", expanding=True)
_LINE = OrderLine.__table__
_INV = Inventory.__table__
_ORDER = Order.__table__
_SHIPMENT = Shipment.__table__
_NEEDED = (
    select(_LINE.c.order_id, _LINE.c.part_id, func.sum(_LINE.c.quantity))
    .where(_LINE.c.order_id.in_(_IDS))
    .group_by(_LINE.c.order_id, _LINE.c.part_id)
    .order_by(_LINE.c.order_id, _LINE.c.part_id)
)
_MODES = select(_LINE.c.order_id, _LINE.c.ship_mode).where(_LINE.c.order_id.in_(_IDS))
_READ_STOCK = select(_INV.c.part_id, _INV.c.on_hand, _INV.c.version).where(
    _INV.c.part_id.in_(_PARTS)
)
_LOCK_STOCK = _READ_STOCK.order_by(_INV.c.part_id).with_for_update()
_WRITE_STOCK = (
    update(_INV)
    .where(_INV.c.part_id == bindparam("p"), _INV.c.version == bindparam("v"))
    .values(on_hand=bindparam("on_hand"), version=_INV.c.version + 1)
)
_SHIPMENTS = select(_SHIPMENT.c.order_id, _SHIPMENT.c.status).where(_SHIPMENT.c.order_id.in_(_IDS))
_CANCEL_SHIPMENTS = (
    update(_SHIPMENT)
    .where(_SHIPMENT.c.order_id.in_(_IDS), _SHIPMENT.c.status != CANCELLED)
    .values(status=CANCELLED)
)
_OUT_OF_STOCK = update(_ORDER).where(_ORDER.c.id.in_(_IDS)).values(status=OrderStatus.OUT_OF_STOCK)
_COMPLETE = (
    update(_ORDER)
    .where(_ORDER.c.id.in_(_IDS), _ORDER.c.status == OrderStatus.PLACED)
    .values(status=OrderStatus.COMPLETED)
)


@functools.cache
def insert_into(model: Any) -> Insert:
    """The (built once) ``INSERT`` of rows of ``model``, run with a list of row dicts."""
    return insert(model.__table__)


@functools.cache
def _with_row(model: Any, names: tuple[str, ...]) -> Select[Any]:
    table = model.__table__
    return select(table.c.order_id).where(
        table.c.order_id.in_(_IDS), *(table.c[name] == bindparam(name) for name in names)
    )


@functools.cache
def _parts_with_row(model: Any) -> Select[Any]:
    table = model.__table__
    return select(table.c.order_id, table.c.part_id).where(table.c.order_id.in_(_IDS))


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
    statement = _with_row(model, tuple(sorted(match)))
    return set(session.scalars(statement, {"ids": list(order_ids), **match}))


def parts_with_row(session: Session, model: Any, order_ids: Sequence[int]) -> set[tuple[int, int]]:
    """The per-part guard: the (order, part) pairs that already have their ``model`` row.

    Args:
        model: a mapped class with ``order_id`` and ``part_id`` columns, unique together.
    """
    return {
        (order_id, part_id)
        for order_id, part_id in session.execute(_parts_with_row(model), {"ids": list(order_ids)})
    }


def read_inventory(session: Session, parts: Iterable[int]) -> dict[int, list[int]]:
    """Read inventory rows to change, PostgreSQL: locked ``FOR UPDATE`` in part order.

    Returns:
        part id -> ``[on hand, version]`` (change the first, then :func:`write_inventory`).
    """
    statement = _LOCK_STOCK if session.get_bind().dialect.name == "postgresql" else _READ_STOCK
    return {
        part: [on_hand, version]
        for part, on_hand, version in session.execute(statement, {"parts": sorted(parts)})
    }


def write_inventory(session: Session, stock: dict[int, list[int]], before: dict[int, int]) -> None:
    """Write each changed inventory row once, under its version column.

    Args:
        stock: what :func:`read_inventory` returned, with ``on hand`` changed.
        before: part id -> on hand as read.

    Raises:
        StaleDataError: a row's version moved since it was read (the tracker
            reruns the unit of work).
    """
    changed = [
        {"p": part, "on_hand": values[0], "v": values[1]}
        for part, values in stock.items()
        if values[0] != before[part]
    ]
    if not changed:
        return
    result = session.execute(_WRITE_STOCK, changed)
    if result.rowcount not in (-1, len(changed)):
        raise StaleDataError(
            f"inventory changed under the batch ({result.rowcount}/{len(changed)})"
        )


def deduct_stock(session: Session, deliveries: list[Delivery], now: datetime) -> dict[int, str]:
    """Take each order's parts from inventory, all or nothing per order, in delivery order.

    One ``stock_deductions`` row per (order, part); a part already deducted for
    the order is not taken again. An order with any part short takes nothing: it
    becomes ``out_of_stock`` and its customer gets a cancellation notice (the
    steps after stock are skipped; a shipment that exists anyway is cancelled).

    Returns:
        step row id -> ``deducted`` or ``out_of_stock``.
    """
    ids = [d.order_id for d in deliveries]
    needed: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for oid, part, qty in session.execute(_NEEDED, {"ids": ids}):
        needed[oid].append((part, int(qty)))
    stock = read_inventory(session, {p for lines in needed.values() for p, _ in lines})
    before = {part: values[0] for part, values in stock.items()}
    taken = parts_with_row(session, StockDeduction, ids)
    out: dict[int, str] = {}
    rows = []
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
            rows.append(
                {"order_id": d.order_id, "part_id": part, "quantity": qty, "created_at": now}
            )
        out[d.step_row_id] = DEDUCTED
    write_inventory(session, stock, before)
    if rows:
        session.execute(insert_into(StockDeduction), rows)
    if short:
        short_ids = [d.order_id for d in short]
        session.execute(_OUT_OF_STOCK, {"ids": short_ids})
        notify_cancelled(session, [(d.order_id, d.customer_id) for d in short], now)
        session.execute(_CANCEL_SHIPMENTS, {"ids": short_ids})
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
    sent = orders_with_row(session, Notification, list(customers), kind=CANCELLATION)
    new = [
        {"order_id": oid, "kind": CANCELLATION, "customer_id": cid, "created_at": now}
        for oid, cid in customers.items()
        if oid not in sent
    ]
    if new:
        session.execute(insert_into(Notification), new)
    return len(new)


def send_confirmation(
    session: Session, deliveries: list[Delivery], now: datetime
) -> dict[int, str]:
    """Record each order's confirmation message, once per (order, kind).

    Returns:
        step row id -> ``sent``, or ``already_sent`` when the row exists.
    """
    sent = orders_with_row(
        session, Notification, [d.order_id for d in deliveries], kind=CONFIRMATION
    )
    new = [
        {
            "order_id": d.order_id,
            "kind": CONFIRMATION,
            "customer_id": d.customer_id,
            "created_at": now,
        }
        for d in deliveries
        if d.order_id not in sent
    ]
    if new:
        session.execute(insert_into(Notification), new)
    return {d.step_row_id: ALREADY_SENT if d.order_id in sent else SENT for d in deliveries}


def credit_points(session: Session, deliveries: list[Delivery], now: datetime) -> dict[int, str]:
    """Credit floor(total price / 10) points per order, once per (order, reason).

    Returns:
        step row id -> ``credited``, or ``already_credited`` when the ledger row exists.
    """
    credited = orders_with_row(
        session, PointsEntry, [d.order_id for d in deliveries], reason=ORDER_PLACED
    )
    new = [
        {
            "order_id": d.order_id,
            "customer_id": d.customer_id,
            "reason": ORDER_PLACED,
            "points": points_for(d.total_price),
            "created_at": now,
        }
        for d in deliveries
        if d.order_id not in credited
    ]
    if new:
        session.execute(insert_into(PointsEntry), new)
    return {
        d.step_row_id: ALREADY_CREDITED if d.order_id in credited else CREDITED for d in deliveries
    }


def schedule_shipment(
    session: Session, deliveries: list[Delivery], now: datetime
) -> dict[int, str]:
    """Create each order's one shipment with the most common ship mode of its lines.

    An order already out of stock gets a cancelled shipment; an existing
    shipment is left as it is.

    Returns:
        step row id -> the shipment's status: ``scheduled`` or ``cancelled``.

    Raises:
        ValueError: an order without lines (it has no ship mode).
    """
    ids = [d.order_id for d in deliveries]
    existing = dict(session.execute(_SHIPMENTS, {"ids": ids}).all())
    modes: dict[int, list[str]] = defaultdict(list)
    for oid, mode in session.execute(_MODES, {"ids": ids}):
        modes[oid].append(mode)
    out: dict[int, str] = {}
    new = []
    for d in deliveries:
        if d.order_id in existing:
            out[d.step_row_id] = existing[d.order_id]
            continue
        status = CANCELLED if d.status == OrderStatus.OUT_OF_STOCK else SCHEDULED
        new.append(
            {
                "order_id": d.order_id,
                "ship_mode": ship_mode_for(modes[d.order_id]),
                "status": status,
                "created_at": now,
            }
        )
        out[d.step_row_id] = status
    if new:
        session.execute(insert_into(Shipment), new)
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
        session.execute(_COMPLETE, {"ids": order_ids})
