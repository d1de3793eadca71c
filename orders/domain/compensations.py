"""The three compensating effects of a cancelled order: return stock, reverse points,
cancel the shipment.

Each runs inside the completion tracker's unit of work (like a forward step's
effect), returns its outcome word and commits nothing. Each is idempotent on
its own, on top of the tracker's done-step check: stock comes back once per
(order, part) (``stock_returns`` is unique on it, inventory rows change under
their version column); points are reversed by one ledger entry unique per
(order, reason) — history is never deleted; a shipment is cancelled by a
conditional update (the status set is natural).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from orders.domain.models import (
    Inventory,
    Order,
    PointsEntry,
    Shipment,
    StockDeduction,
    StockReturn,
)
from orders.domain.steps import CANCEL_SHIPMENT, RETURN_STOCK, REVERSE_POINTS

RETURNED = "returned"
NOTHING_TO_RETURN = "nothing_to_return"
REVERSED = "reversed"
NOTHING_TO_REVERSE = "nothing_to_reverse"
ALREADY_REVERSED = "already_reversed"
SHIPMENT_CANCELLED = "cancelled"
NO_SHIPMENT = "no_shipment"
ALREADY_CANCELLED = "already_cancelled"

ORDER_CANCELLED = "order_cancelled"
"""``points_ledger.reason`` of the entry reversing a cancelled order's points."""

Effect = Callable[[Session, Order, datetime], str]


def return_stock(session: Session, order: Order, now: datetime) -> str:
    """Give back every part deducted for the order that was not given back yet.

    Inventory rows change through the ORM under their version column (a
    concurrent deduction makes one of the two rerun); one ``stock_returns`` row
    per (order, part) records the return.

    Returns:
        ``returned``, or ``nothing_to_return`` when no deduction is left to return.
    """
    returned = set(
        session.scalars(select(StockReturn.part_id).where(StockReturn.order_id == order.id))
    )
    deductions = [
        (part, qty)
        for part, qty in session.execute(
            select(StockDeduction.part_id, StockDeduction.quantity)
            .where(StockDeduction.order_id == order.id)
            .order_by(StockDeduction.part_id)
        )
        if part not in returned
    ]
    if not deductions:
        return NOTHING_TO_RETURN
    stock = {
        row.part_id: row
        for row in session.scalars(
            select(Inventory)
            .where(Inventory.part_id.in_([p for p, _ in deductions]))
            .order_by(Inventory.part_id)
        )
    }
    for part, qty in deductions:
        stock[part].on_hand += qty
        session.add(StockReturn(order_id=order.id, part_id=part, quantity=qty, created_at=now))
    return RETURNED


def reverse_points(session: Session, order: Order, now: datetime) -> str:
    """Add one ledger entry that takes back every point credited for the order.

    Returns:
        ``reversed``, ``already_reversed`` (the entry exists), or
        ``nothing_to_reverse`` (nothing was credited; no entry is written).
    """
    if session.scalar(
        select(PointsEntry.id).where(
            PointsEntry.order_id == order.id, PointsEntry.reason == ORDER_CANCELLED
        )
    ):
        return ALREADY_REVERSED
    net = session.scalar(
        select(func.coalesce(func.sum(PointsEntry.points), 0)).where(
            PointsEntry.order_id == order.id
        )
    )
    if not net:
        return NOTHING_TO_REVERSE
    session.add(
        PointsEntry(
            order_id=order.id,
            customer_id=order.customer_id,
            reason=ORDER_CANCELLED,
            points=-int(net),
            created_at=now,
        )
    )
    return REVERSED


def cancel_shipment(session: Session, order: Order, now: datetime) -> str:
    """Set the order's scheduled shipment to cancelled.

    Returns:
        ``cancelled``, ``already_cancelled``, or ``no_shipment``.
    """
    changed = session.execute(
        update(Shipment)
        .where(Shipment.order_id == order.id, Shipment.status != SHIPMENT_CANCELLED)
        .values(status=SHIPMENT_CANCELLED),
        execution_options={"synchronize_session": False},
    ).rowcount
    if changed:
        return SHIPMENT_CANCELLED
    exists = session.scalar(select(Shipment.id).where(Shipment.order_id == order.id))
    return ALREADY_CANCELLED if exists is not None else NO_SHIPMENT


COMPENSATING_EFFECTS: dict[str, Effect] = {
    RETURN_STOCK: return_stock,
    REVERSE_POINTS: reverse_points,
    CANCEL_SHIPMENT: cancel_shipment,
}
"""Compensating step name -> effect."""
