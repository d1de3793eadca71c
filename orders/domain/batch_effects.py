"""The four step effects, set-based: one batch of orders in a few statements.

Each function mirrors its one-order twin in :mod:`orders.domain.effects` (same rows,
same outcome words, same idempotency: an existing unique row means the effect
is already there) and runs inside the batch tracker's transaction, after the
workflow rows are locked. Returns step row id -> outcome word.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import datetime

from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import StaleDataError

from orders.domain.effects import (
    ALREADY_CREDITED,
    ALREADY_SENT,
    CANCELLED,
    CONFIRMATION,
    CREDITED,
    DEDUCTED,
    ORDER_PLACED,
    OUT_OF_STOCK,
    SCHEDULED,
    SENT,
    notify_cancelled,
    points_for,
    ship_mode_for,
)
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
from workflows.batch_tracker import Claim

BatchEffect = Callable[[Session, list[Claim], datetime], dict[int, str]]


def send_confirmations(session: Session, claims: list[Claim], now: datetime) -> dict[int, str]:
    """One ``order_confirmed`` notification per order (unique per order and kind)."""
    ids = [c.subject_id for c in claims]
    sent = set(
        session.scalars(
            select(Notification.order_id).where(
                Notification.order_id.in_(ids), Notification.kind == CONFIRMATION
            )
        )
    )
    customers = dict(
        session.execute(select(Order.id, Order.customer_id).where(Order.id.in_(ids))).all()
    )
    new = [
        {
            "order_id": c.subject_id,
            "kind": CONFIRMATION,
            "customer_id": customers[c.subject_id],
            "created_at": now,
        }
        for c in claims
        if c.subject_id not in sent
    ]
    if new:
        session.execute(insert(Notification), new)
    return {c.step_row_id: ALREADY_SENT if c.subject_id in sent else SENT for c in claims}


def credit_points(session: Session, claims: list[Claim], now: datetime) -> dict[int, str]:
    """floor(total price / 10) points per order, once per (order, reason)."""
    ids = [c.subject_id for c in claims]
    credited = set(
        session.scalars(
            select(PointsEntry.order_id).where(
                PointsEntry.order_id.in_(ids), PointsEntry.reason == ORDER_PLACED
            )
        )
    )
    orders = {
        oid: (customer, total)
        for oid, customer, total in session.execute(
            select(Order.id, Order.customer_id, Order.total_price).where(Order.id.in_(ids))
        )
    }
    new = [
        {
            "order_id": c.subject_id,
            "customer_id": orders[c.subject_id][0],
            "reason": ORDER_PLACED,
            "points": points_for(orders[c.subject_id][1]),
            "created_at": now,
        }
        for c in claims
        if c.subject_id not in credited
    ]
    if new:
        session.execute(insert(PointsEntry), new)
    return {
        c.step_row_id: ALREADY_CREDITED if c.subject_id in credited else CREDITED for c in claims
    }


def schedule_shipments(session: Session, claims: list[Claim], now: datetime) -> dict[int, str]:
    """One shipment per order with its lines' most common ship mode; cancelled if out of stock."""
    ids = [c.subject_id for c in claims]
    existing = dict(
        session.execute(
            select(Shipment.order_id, Shipment.status).where(Shipment.order_id.in_(ids))
        ).all()
    )
    status = dict(session.execute(select(Order.id, Order.status).where(Order.id.in_(ids))).all())
    modes: dict[int, list[str]] = defaultdict(list)
    for oid, mode in session.execute(
        select(OrderLine.order_id, OrderLine.ship_mode).where(OrderLine.order_id.in_(ids))
    ):
        modes[oid].append(mode)
    out: dict[int, str] = {}
    new = []
    for c in claims:
        if c.subject_id in existing:
            out[c.step_row_id] = existing[c.subject_id]
            continue
        state = CANCELLED if status.get(c.subject_id) == OrderStatus.OUT_OF_STOCK else SCHEDULED
        new.append(
            {
                "order_id": c.subject_id,
                "ship_mode": ship_mode_for(modes[c.subject_id]),
                "status": state,
                "created_at": now,
            }
        )
        out[c.step_row_id] = state
    if new:
        session.execute(insert(Shipment), new)
    return out


def deduct_stock(session: Session, claims: list[Claim], now: datetime) -> dict[int, str]:
    """Take each order's parts from inventory, all or nothing per order, in claim order.

    Inventory rows are read (PostgreSQL: locked ``FOR UPDATE`` in part order),
    the deductions are worked out in memory order by order, then each touched
    row is written once under its version column; a version mismatch raises
    ``StaleDataError`` and the whole batch is retried.
    """
    ids = [c.subject_id for c in claims]
    needed: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for oid, part, qty in session.execute(
        select(OrderLine.order_id, OrderLine.part_id, func.sum(OrderLine.quantity))
        .where(OrderLine.order_id.in_(ids))
        .group_by(OrderLine.order_id, OrderLine.part_id)
        .order_by(OrderLine.order_id, OrderLine.part_id)
    ):
        needed[oid].append((part, int(qty)))
    parts = sorted({p for lines in needed.values() for p, _ in lines})
    query = select(Inventory.part_id, Inventory.on_hand, Inventory.version).where(
        Inventory.part_id.in_(parts)
    )
    if session.get_bind().dialect.name == "postgresql":
        query = query.order_by(Inventory.part_id).with_for_update()
    stock = {part: [on_hand, version] for part, on_hand, version in session.execute(query)}
    original = {part: values[0] for part, values in stock.items()}
    taken = {
        (order_id, part_id)
        for order_id, part_id in session.execute(
            select(StockDeduction.order_id, StockDeduction.part_id).where(
                StockDeduction.order_id.in_(ids)
            )
        )
    }
    out: dict[int, str] = {}
    deductions = []
    short_orders = []
    for c in claims:
        lines = needed[c.subject_id]
        if any(part not in stock or stock[part][0] < qty for part, qty in lines):
            out[c.step_row_id] = OUT_OF_STOCK
            short_orders.append(c.subject_id)
            continue
        for part, qty in lines:
            if (c.subject_id, part) in taken:
                continue
            stock[part][0] -= qty
            deductions.append(
                {"order_id": c.subject_id, "part_id": part, "quantity": qty, "created_at": now}
            )
        out[c.step_row_id] = DEDUCTED
    changed = [
        {"p": part, "on_hand": values[0], "v": values[1]}
        for part, values in stock.items()
        if values[0] != original[part]
    ]
    if changed:
        table = Inventory.__table__
        result = session.execute(
            update(table)
            .where(table.c.part_id == bindparam("p"), table.c.version == bindparam("v"))
            .values(on_hand=bindparam("on_hand"), version=table.c.version + 1),
            changed,
            execution_options={"synchronize_session": False},
        )
        if result.rowcount not in (-1, len(changed)):
            raise StaleDataError(
                f"inventory changed under the batch ({result.rowcount}/{len(changed)} rows)"
            )
    if deductions:
        session.execute(insert(StockDeduction), deductions)
    if short_orders:
        session.execute(
            update(Order).where(Order.id.in_(short_orders)).values(status=OrderStatus.OUT_OF_STOCK),
            execution_options={"synchronize_session": False},
        )
        customers = session.execute(
            select(Order.id, Order.customer_id).where(Order.id.in_(short_orders))
        ).all()
        notify_cancelled(session, [(oid, cid) for oid, cid in customers], now)
        session.execute(
            update(Shipment).where(Shipment.order_id.in_(short_orders)).values(status=CANCELLED),
            execution_options={"synchronize_session": False},
        )
    return out


BATCH_EFFECTS: dict[str, BatchEffect] = {
    STOCK: deduct_stock,
    NOTIFICATION: send_confirmations,
    POINTS: credit_points,
    LOGISTICS: schedule_shipments,
}
"""Step name -> set-based effect."""


def complete_orders(session: Session, order_ids: list[int]) -> None:
    """Orders whose workflow just finished become ``completed`` (out of stock stays)."""
    if order_ids:
        session.execute(
            update(Order)
            .where(Order.id.in_(order_ids), Order.status == OrderStatus.PLACED)
            .values(status=OrderStatus.COMPLETED),
            execution_options={"synchronize_session": False},
        )
