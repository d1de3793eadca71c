"""The three compensating effects of a cancelled order: return stock, reverse points,
cancel the shipment.

They have the forward effects' shape (``orders.domain.effects``): set-based over a
batch of deliveries (one is a batch of one), run inside the completion tracker's
unit of work, return step row id -> outcome word and commit nothing. Each is
idempotent on its own, on top of the tracker's done-step check, with the same
guards: stock comes back once per (order, part) (``stock_returns`` is unique on
it; inventory rows change under their version column); points are reversed by
one ledger entry unique per (order, reason) — history is never deleted; a
shipment is cancelled by a conditional update (the status set is natural).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from orders.domain.effects import (
    Delivery,
    Effect,
    orders_with_row,
    parts_with_row,
    read_inventory,
    write_inventory,
)
from orders.domain.models import PointsEntry, Shipment, StockDeduction, StockReturn
from orders.domain.steps import CANCEL_SHIPMENT, RETURN_STOCK, REVERSE_POINTS
from workflows.sql import dialect_of, per_dialect

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

# built once per dialect, as the forward effects' statements (workflows.sql)
_DEDUCTED = per_dialect(
    lambda d: (
        select(StockDeduction.order_id, StockDeduction.part_id, StockDeduction.quantity)
        .where(d.one_of(StockDeduction.order_id, "ids"))
        .order_by(StockDeduction.order_id, StockDeduction.part_id)
    )
)
_NET_POINTS = per_dialect(
    lambda d: (
        select(PointsEntry.order_id, func.sum(PointsEntry.points))
        .where(d.one_of(PointsEntry.order_id, "ids"))
        .group_by(PointsEntry.order_id)
    )
)
_SHIPMENTS = per_dialect(
    lambda d: select(Shipment.order_id, Shipment.status).where(d.one_of(Shipment.order_id, "ids"))
)
_CANCEL = per_dialect(
    lambda d: (
        update(Shipment.__table__)
        .where(d.one_of(Shipment.order_id, "ids"), Shipment.status != SHIPMENT_CANCELLED)
        .values(status=SHIPMENT_CANCELLED)
    )
)


def return_stock(session: Session, deliveries: list[Delivery], now: datetime) -> dict[int, str]:
    """Give back every part deducted for each order that was not given back yet.

    One ``stock_returns`` row per (order, part) records the return; each touched
    inventory row is written once under its version column.

    Returns:
        step row id -> ``returned``, or ``nothing_to_return`` when no deduction
        of the order is left to return.
    """
    ids = [d.order_id for d in deliveries]
    returned = parts_with_row(session, StockReturn, ids)
    due: dict[int, list[tuple[int, int]]] = defaultdict(list)
    dialect = dialect_of(session)
    for oid, part, qty in session.execute(_DEDUCTED[dialect], {"ids": ids}):
        if (oid, part) not in returned:
            due[oid].append((part, qty))
    stock = read_inventory(session, {p for lines in due.values() for p, _ in lines})
    before = {part: values[0] for part, values in stock.items()}
    out: dict[int, str] = {}
    rows: dict[str, list[int]] = {"order_id": [], "part_id": [], "quantity": []}
    for d in deliveries:
        lines = due.get(d.order_id)
        if not lines:
            out[d.step_row_id] = NOTHING_TO_RETURN
            continue
        for part, qty in lines:
            stock[part][0] += qty
            rows["order_id"].append(d.order_id)
            rows["part_id"].append(part)
            rows["quantity"].append(qty)
        out[d.step_row_id] = RETURNED
    write_inventory(session, stock, before)
    dialect.insert_rows(session, StockReturn.__table__, rows, constants={"created_at": now})
    return out


def reverse_points(session: Session, deliveries: list[Delivery], now: datetime) -> dict[int, str]:
    """Add one ledger entry per order that takes back every point credited for it.

    Returns:
        step row id -> ``reversed``, ``already_reversed`` (the entry exists), or
        ``nothing_to_reverse`` (nothing was credited; no entry is written).
    """
    ids = [d.order_id for d in deliveries]
    done = orders_with_row(session, PointsEntry, ids, reason=ORDER_CANCELLED)
    open_ids = [oid for oid in ids if oid not in done]
    net = (
        dict(session.execute(_NET_POINTS[dialect_of(session)], {"ids": open_ids}).all())
        if open_ids
        else {}
    )
    out: dict[int, str] = {}
    rows: dict[str, list[int]] = {"order_id": [], "customer_id": [], "points": []}
    for d in deliveries:
        if d.order_id in done:
            out[d.step_row_id] = ALREADY_REVERSED
        elif not net.get(d.order_id):
            out[d.step_row_id] = NOTHING_TO_REVERSE
        else:
            rows["order_id"].append(d.order_id)
            rows["customer_id"].append(d.customer_id)
            rows["points"].append(-int(net[d.order_id]))
            out[d.step_row_id] = REVERSED
    dialect_of(session).insert_rows(
        session,
        PointsEntry.__table__,
        rows,
        constants={"reason": ORDER_CANCELLED, "created_at": now},
    )
    return out


def cancel_shipment(session: Session, deliveries: list[Delivery], now: datetime) -> dict[int, str]:
    """Set each order's shipment to cancelled.

    Returns:
        step row id -> ``cancelled``, ``already_cancelled``, or ``no_shipment``.
    """
    dialect = dialect_of(session)
    ids = [d.order_id for d in deliveries]
    existing = dict(session.execute(_SHIPMENTS[dialect], {"ids": ids}).all())
    to_cancel = {oid for oid, status in existing.items() if status != SHIPMENT_CANCELLED}
    if to_cancel:
        session.execute(_CANCEL[dialect], {"ids": sorted(to_cancel)})
    return {
        d.step_row_id: (
            NO_SHIPMENT
            if d.order_id not in existing
            else SHIPMENT_CANCELLED
            if d.order_id in to_cancel
            else ALREADY_CANCELLED
        )
        for d in deliveries
    }


COMPENSATING_EFFECTS: dict[str, Effect] = {
    RETURN_STOCK: return_stock,
    REVERSE_POINTS: reverse_points,
    CANCEL_SHIPMENT: cancel_shipment,
}
"""Compensating step name -> effect."""
