"""The four step effects, set-based: a batch of orders in a few statements, one order
being a batch of one.

Each effect runs inside the completion tracker's unit of work and commits nothing:
on SQLite after the batch's workflow rows are locked (a lone delivery: after its
workflow's version was checked and bumped, the write that takes the database's
write lock), on PostgreSQL before the tracker locks them for the marking, which
rolls the effect back with it when a claimed step row was finished meanwhile (ADR
0014). On PostgreSQL a batch's rows go in one statement each (ADR 0015). It takes
the batch's deliveries
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

from sqlalchemy import (
    Insert,
    Integer,
    Select,
    String,
    bindparam,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
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
from workflows.idlists import is_postgresql, json_rows, one_of

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
# statement (and its cache key) costs more than running it. Each is keyed by
# "runs on PostgreSQL": there an id list is one array parameter and a batch's rows
# go in one statement through unnest; on SQLite an id list is one JSON parameter and
# a batch's rows one JSON array read by json_each (workflows.idlists). Either way
# the text does not grow with the batch, and no value is processed in Python.
_PG = (False, True)
_LINE = OrderLine.__table__
_INV = Inventory.__table__
_ORDER = Order.__table__
_SHIPMENT = Shipment.__table__
_NEEDED = {
    pg: select(_LINE.c.order_id, _LINE.c.part_id, func.sum(_LINE.c.quantity))
    .where(one_of(_LINE.c.order_id, "ids", postgresql=pg))
    .group_by(_LINE.c.order_id, _LINE.c.part_id)
    .order_by(_LINE.c.order_id, _LINE.c.part_id)
    for pg in _PG
}
_MODES = {
    pg: select(_LINE.c.order_id, _LINE.c.ship_mode).where(
        one_of(_LINE.c.order_id, "ids", postgresql=pg)
    )
    for pg in _PG
}
_READ_STOCK = select(_INV.c.part_id, _INV.c.on_hand, _INV.c.version).where(
    one_of(_INV.c.part_id, "parts", postgresql=False)
)
_LOCK_STOCK = (
    select(_INV.c.part_id, _INV.c.on_hand, _INV.c.version)
    .where(one_of(_INV.c.part_id, "parts", postgresql=True))
    .order_by(_INV.c.part_id)
    .with_for_update()
)
_NEW_STOCK_JSON = json_rows("stock", ("part_id", "on_hand", "version"), alias="new")
_WRITE_STOCK = (
    update(_INV)
    .where(_INV.c.part_id == _NEW_STOCK_JSON.c.part_id, _INV.c.version == _NEW_STOCK_JSON.c.version)
    .values(on_hand=_NEW_STOCK_JSON.c.on_hand, version=_INV.c.version + 1)
)
"""SQLite: every changed inventory row in one ``UPDATE ... FROM json_each(...)``, each
under its version (the row count says how many versions still matched)."""
_NEW_STOCK = (
    func.unnest(*(bindparam(name, type_=ARRAY(Integer)) for name in ("p", "on_hand", "v")))
    .table_valued("part_id", "on_hand", "version")
    .render_derived(name="new")
)
_WRITE_STOCK_PG = (
    update(_INV)
    .where(_INV.c.part_id == _NEW_STOCK.c.part_id, _INV.c.version == _NEW_STOCK.c.version)
    .values(on_hand=_NEW_STOCK.c.on_hand, version=_INV.c.version + 1)
)
"""PostgreSQL: every changed inventory row in one ``UPDATE ... FROM unnest(...)``, each
under its version (the row count says how many versions still matched)."""
_SHIPMENTS = {
    pg: select(_SHIPMENT.c.order_id, _SHIPMENT.c.status).where(
        one_of(_SHIPMENT.c.order_id, "ids", postgresql=pg)
    )
    for pg in _PG
}
_CANCEL_SHIPMENTS = {
    pg: update(_SHIPMENT)
    .where(one_of(_SHIPMENT.c.order_id, "ids", postgresql=pg), _SHIPMENT.c.status != CANCELLED)
    .values(status=CANCELLED)
    for pg in _PG
}
_OUT_OF_STOCK = {
    pg: update(_ORDER)
    .where(one_of(_ORDER.c.id, "ids", postgresql=pg))
    .values(status=OrderStatus.OUT_OF_STOCK)
    for pg in _PG
}
_COMPLETE = {
    pg: update(_ORDER)
    .where(one_of(_ORDER.c.id, "ids", postgresql=pg), _ORDER.c.status == OrderStatus.PLACED)
    .values(status=OrderStatus.COMPLETED)
    for pg in _PG
}


@functools.cache
def _insert_json(model: Any, columns: tuple[str, ...], constants: tuple[str, ...]) -> Insert:
    table = model.__table__
    rows = json_rows("rows", columns, alias="v")
    values = select(
        *(rows.c[name] for name in columns),
        *(bindparam(name, type_=table.c[name].type) for name in constants),
    )
    return insert(table).from_select([*columns, *constants], values)


def _array_of(column_type: Any) -> ARRAY:
    # An explicit cast to varchar(n)[] cuts a longer text short without a word; cast to
    # varchar[] and the column's own length check refuses it, as a plain insert does.
    if isinstance(column_type, String) and column_type.length is not None:
        column_type = String()
    return ARRAY(column_type)


@functools.cache
def _insert_unnest(model: Any, columns: tuple[str, ...], constants: tuple[str, ...]) -> Insert:
    table = model.__table__
    rows = (
        func.unnest(*(bindparam(name, type_=_array_of(table.c[name].type)) for name in columns))
        .table_valued(*columns)
        .render_derived(name="v")
    )
    values = select(
        *(rows.c[name] for name in columns),
        *(bindparam(name, type_=table.c[name].type) for name in constants),
    )
    return insert(table).from_select([*columns, *constants], values)


def insert_rows(
    session: Session, model: Any, columns: dict[str, list[Any]], **constants: Any
) -> int:
    """Insert rows of ``model`` given column by column, in one statement.

    On PostgreSQL the rows go in one ``INSERT ... SELECT ... FROM unnest(arrays)``,
    on SQLite in one ``INSERT ... SELECT ... FROM json_each(rows)``; either text
    does not depend on the row count (PostgreSQL parses it once and prepares it),
    and no value of a row is processed in Python. All or nothing: a row that
    breaks a constraint (a unique guard) fails the statement.

    Args:
        session: the caller's session (nothing committed).
        model: a mapped class.
        columns: column name -> its values, one per row, all lists the same length;
            on SQLite the values must be ints, strings or None (they travel as
            JSON): bind a ``datetime`` or ``Decimal`` as a constant.
        constants: column name -> the value every row gets (e.g. ``created_at``),
            bound once with the column's type.

    Returns:
        Rows inserted (0 when ``columns`` holds no rows: nothing is sent).

    Raises:
        sqlalchemy.exc.IntegrityError: a row breaks a constraint (nothing inserted).
        ValueError: the column lists differ in length.
        sqlalchemy.exc.StatementError: (SQLite) a per-row value JSON cannot
            encode (a ``datetime``, a ``Decimal``).
    """
    lengths = {len(values) for values in columns.values()}
    if len(lengths) != 1:
        raise ValueError(f"columns of different lengths: {sorted(lengths)}")
    [count] = lengths
    if not count:
        return 0
    if is_postgresql(session):
        statement = _insert_unnest(model, tuple(columns), tuple(constants))
        session.execute(statement, {**columns, **constants})
    else:
        statement = _insert_json(model, tuple(columns), tuple(constants))
        session.execute(statement, {"rows": zip(*columns.values(), strict=True), **constants})
    return count


@functools.cache
def _with_row(model: Any, names: tuple[str, ...], pg: bool) -> Select[Any]:
    table = model.__table__
    return select(table.c.order_id).where(
        one_of(table.c.order_id, "ids", postgresql=pg),
        *(table.c[name] == bindparam(name) for name in names),
    )


@functools.cache
def _parts_with_row(model: Any, pg: bool) -> Select[Any]:
    table = model.__table__
    return select(table.c.order_id, table.c.part_id).where(
        one_of(table.c.order_id, "ids", postgresql=pg)
    )


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
    statement = _with_row(model, tuple(sorted(match)), is_postgresql(session))
    return set(session.scalars(statement, {"ids": list(order_ids), **match}))


def parts_with_row(session: Session, model: Any, order_ids: Sequence[int]) -> set[tuple[int, int]]:
    """The per-part guard: the (order, part) pairs that already have their ``model`` row.

    Args:
        model: a mapped class with ``order_id`` and ``part_id`` columns, unique together.
    """
    return {
        (order_id, part_id)
        for order_id, part_id in session.execute(
            _parts_with_row(model, is_postgresql(session)), {"ids": list(order_ids)}
        )
    }


def read_inventory(session: Session, parts: Iterable[int]) -> dict[int, list[int]]:
    """Read inventory rows to change, PostgreSQL: locked ``FOR UPDATE`` in part order.

    Returns:
        part id -> ``[on hand, version]`` (change the first, then :func:`write_inventory`).
    """
    statement = _LOCK_STOCK if is_postgresql(session) else _READ_STOCK
    return {
        part: [on_hand, version]
        for part, on_hand, version in session.execute(statement, {"parts": sorted(parts)})
    }


def write_inventory(session: Session, stock: dict[int, list[int]], before: dict[int, int]) -> None:
    """Write each changed inventory row once, under its version column.

    One statement for all of them: ``UPDATE ... FROM unnest(parts, on hands,
    versions)`` on PostgreSQL, ``UPDATE ... FROM json_each(rows)`` on SQLite.
    Either way every row's version must still
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
    if is_postgresql(session):
        result = session.execute(
            _WRITE_STOCK_PG,
            {
                "p": changed,
                "on_hand": [stock[part][0] for part in changed],
                "v": [stock[part][1] for part in changed],
            },
        )
        matched = result.rowcount
    else:
        rows = [(part, stock[part][0], stock[part][1]) for part in changed]
        matched = session.execute(_WRITE_STOCK, {"stock": rows}).rowcount
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
    pg = is_postgresql(session)
    ids = [d.order_id for d in deliveries]
    needed: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for oid, part, qty in session.execute(_NEEDED[pg], {"ids": ids}):
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
    insert_rows(
        session,
        StockDeduction,
        {"order_id": orders, "part_id": parts, "quantity": quantities},
        created_at=now,
    )
    if short:
        short_ids = [d.order_id for d in short]
        session.execute(_OUT_OF_STOCK[pg], {"ids": short_ids})
        notify_cancelled(session, [(d.order_id, d.customer_id) for d in short], now)
        session.execute(_CANCEL_SHIPMENTS[pg], {"ids": short_ids})
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
    new = [oid for oid in customers if oid not in sent]
    return insert_rows(
        session,
        Notification,
        {"order_id": new, "customer_id": [customers[oid] for oid in new]},
        kind=CANCELLATION,
        created_at=now,
    )


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
    new = [d for d in deliveries if d.order_id not in sent]
    insert_rows(
        session,
        Notification,
        {"order_id": [d.order_id for d in new], "customer_id": [d.customer_id for d in new]},
        kind=CONFIRMATION,
        created_at=now,
    )
    return {d.step_row_id: ALREADY_SENT if d.order_id in sent else SENT for d in deliveries}


def credit_points(session: Session, deliveries: list[Delivery], now: datetime) -> dict[int, str]:
    """Credit floor(total price / 10) points per order, once per (order, reason).

    Returns:
        step row id -> ``credited``, or ``already_credited`` when the ledger row exists.
    """
    credited = orders_with_row(
        session, PointsEntry, [d.order_id for d in deliveries], reason=ORDER_PLACED
    )
    new = [d for d in deliveries if d.order_id not in credited]
    insert_rows(
        session,
        PointsEntry,
        {
            "order_id": [d.order_id for d in new],
            "customer_id": [d.customer_id for d in new],
            "points": [points_for(d.total_price) for d in new],
        },
        reason=ORDER_PLACED,
        created_at=now,
    )
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
    pg = is_postgresql(session)
    ids = [d.order_id for d in deliveries]
    existing = dict(session.execute(_SHIPMENTS[pg], {"ids": ids}).all())
    modes: dict[int, list[str]] = defaultdict(list)
    for oid, mode in session.execute(_MODES[pg], {"ids": ids}):
        modes[oid].append(mode)
    out: dict[int, str] = {}
    new: dict[str, list[Any]] = {"order_id": [], "ship_mode": [], "status": []}
    for d in deliveries:
        if d.order_id in existing:
            out[d.step_row_id] = existing[d.order_id]
            continue
        status = CANCELLED if d.status == OrderStatus.OUT_OF_STOCK else SCHEDULED
        new["order_id"].append(d.order_id)
        new["ship_mode"].append(ship_mode_for(modes[d.order_id]))
        new["status"].append(status)
        out[d.step_row_id] = status
    insert_rows(session, Shipment, new, created_at=now)
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
        session.execute(_COMPLETE[is_postgresql(session)], {"ids": order_ids})
