"""The four step effects. Each runs inside the caller's unit of work and
returns its outcome word; none commits. Each is idempotent on its own (a
unique row per order), on top of the tracker's done-step check.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import datetime
from decimal import Decimal

from sqlalchemy import func, insert, select, update
from sqlalchemy.orm import Session

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

Effect = Callable[[Session, Order, datetime], str]


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


def deduct_stock(session: Session, order: Order, now: datetime) -> str:
    """Take every line's parts from inventory, or record that the order is out of stock.

    Inventory rows are decremented in part order under their version column,
    with one ``stock_deductions`` row per (order, part). If any part is short
    nothing is deducted: the order becomes ``out_of_stock`` and the customer
    gets a cancellation notice (the steps after stock are skipped, so no
    confirmation, points or shipment follow; a shipment that exists anyway is
    cancelled).

    Returns:
        ``deducted`` or ``out_of_stock``.
    """
    needed = session.execute(
        select(OrderLine.part_id, func.sum(OrderLine.quantity))
        .where(OrderLine.order_id == order.id)
        .group_by(OrderLine.part_id)
        .order_by(OrderLine.part_id)
    ).all()
    stock = {
        row.part_id: row
        for row in session.scalars(
            select(Inventory)
            .where(Inventory.part_id.in_([part for part, _ in needed]))
            .order_by(Inventory.part_id)
        )
    }
    if any(part not in stock or stock[part].on_hand < quantity for part, quantity in needed):
        order.status = OrderStatus.OUT_OF_STOCK
        notify_cancelled(session, [(order.id, order.customer_id)], now)
        session.execute(
            update(Shipment).where(Shipment.order_id == order.id).values(status=CANCELLED),
            execution_options={"synchronize_session": False},
        )
        return OUT_OF_STOCK
    taken = set(
        session.scalars(select(StockDeduction.part_id).where(StockDeduction.order_id == order.id))
    )
    for part, quantity in needed:
        if part in taken:
            continue
        stock[part].on_hand -= quantity
        session.add(
            StockDeduction(order_id=order.id, part_id=part, quantity=quantity, created_at=now)
        )
    return DEDUCTED


def notify_cancelled(session: Session, orders: list[tuple[int, int]], now: datetime) -> int:
    """Record a cancellation notice per order, once per (order, kind).

    Args:
        session: the caller's session (nothing committed).
        orders: (order id, customer id) pairs.
        now: creation time (timezone-aware).

    Returns:
        Notices written (orders that already had one are left alone).
    """
    if not orders:
        return 0
    sent = set(
        session.scalars(
            select(Notification.order_id).where(
                Notification.order_id.in_([oid for oid, _ in orders]),
                Notification.kind == CANCELLATION,
            )
        )
    )
    new = [
        {"order_id": oid, "kind": CANCELLATION, "customer_id": cid, "created_at": now}
        for oid, cid in dict(orders).items()
        if oid not in sent
    ]
    if new:
        session.execute(insert(Notification), new)
    return len(new)


def send_confirmation(session: Session, order: Order, now: datetime) -> str:
    """Record the order's confirmation message, once per (order, kind).

    Returns:
        ``sent``, or ``already_sent`` when the row exists.
    """
    exists = session.scalar(
        select(Notification.id).where(
            Notification.order_id == order.id, Notification.kind == CONFIRMATION
        )
    )
    if exists is not None:
        return ALREADY_SENT
    session.add(
        Notification(
            order_id=order.id, kind=CONFIRMATION, customer_id=order.customer_id, created_at=now
        )
    )
    return SENT


def credit_points(session: Session, order: Order, now: datetime) -> str:
    """Credit floor(total price / 10) points, once per (order, reason).

    Returns:
        ``credited``, or ``already_credited`` when the ledger row exists.
    """
    exists = session.scalar(
        select(PointsEntry.id).where(
            PointsEntry.order_id == order.id, PointsEntry.reason == ORDER_PLACED
        )
    )
    if exists is not None:
        return ALREADY_CREDITED
    session.add(
        PointsEntry(
            order_id=order.id,
            customer_id=order.customer_id,
            reason=ORDER_PLACED,
            points=points_for(order.total_price),
            created_at=now,
        )
    )
    return CREDITED


def schedule_shipment(session: Session, order: Order, now: datetime) -> str:
    """Create the order's one shipment with the most common ship mode of its lines.

    An order already out of stock gets a cancelled shipment.

    Returns:
        The shipment's status: ``scheduled`` or ``cancelled``.
    """
    existing = session.scalar(select(Shipment).where(Shipment.order_id == order.id))
    if existing is not None:
        return existing.status
    modes = session.scalars(select(OrderLine.ship_mode).where(OrderLine.order_id == order.id))
    status = CANCELLED if order.status == OrderStatus.OUT_OF_STOCK else SCHEDULED
    session.add(
        Shipment(order_id=order.id, ship_mode=ship_mode_for(modes), status=status, created_at=now)
    )
    return status


EFFECTS: dict[str, Effect] = {
    STOCK: deduct_stock,
    NOTIFICATION: send_confirmation,
    POINTS: credit_points,
    LOGISTICS: schedule_shipment,
}
"""Step name -> effect."""
