"""Order sources: the TPC-H order stream and random orders.

Both return ``OrderDraft`` values for ``orders.app.placement`` to write. Reading
the stream advances its cursor in the caller's transaction, so a placement
that rolls back also gives its orders back to the stream.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from orders.domain.errors import StreamNotLoaded
from orders.domain.models import Customer, Product, StreamCursor, TpchLineItem, TpchOrder
from orders.domain.steps import NOT_SPECIFIED

TPCH = "tpch"
RANDOM = "random"
SOURCES = (TPCH, RANDOM)
SHIP_MODES = ("AIR", "FOB", "MAIL", "RAIL", "REG AIR", "SHIP", "TRUCK")


@dataclass(frozen=True)
class LineDraft:
    """One line of an order about to be placed; money in currency units."""

    line_number: int
    part_id: int
    quantity: int
    extended_price: Decimal
    discount: Decimal
    ship_mode: str


@dataclass(frozen=True)
class OrderDraft:
    """An order about to be placed.

    Attributes:
        source: ``tpch`` or ``random``.
        source_key: the TPC-H order key, or None for random orders.
        priority: the TPC-H order priority (``1-URGENT`` .. ``5-LOW``); random orders
            say ``4-NOT SPECIFIED``.
        queue_priority: the queue priority of the order's steps (0..9, lower runs
            sooner) when the caller names it (the API's ``priority``); None maps
            ``priority`` (``orders.domain.steps.STEP_PRIORITY``).
    """

    customer_id: int
    total_price: Decimal
    order_date: date
    source: str
    source_key: int | None
    lines: tuple[LineDraft, ...]
    priority: str = NOT_SPECIFIED
    queue_priority: int | None = None


def next_tpch_drafts(session: Session, count: int) -> list[OrderDraft]:
    """Take the next ``count`` orders of the TPC-H stream and advance its cursor.

    The stream wraps around after its last order. The cursor moves in the
    caller's transaction (an atomic increment), so concurrent placers never
    take the same position and a rollback gives the orders back.

    Args:
        session: the caller's session, inside its transaction.
        count: orders wanted (>= 0).

    Returns:
        ``count`` drafts in stream order.

    Raises:
        StreamNotLoaded: ``load_tpch`` has not run on this database.
    """
    if count <= 0:
        return []
    end = session.execute(
        update(StreamCursor)
        .where(StreamCursor.name == TPCH)
        .values(position=StreamCursor.position + count)
        .returning(StreamCursor.position, StreamCursor.size)
    ).one_or_none()
    if end is None or end.size == 0:
        raise StreamNotLoaded("the TPC-H order stream is not loaded; run `orders load-tpch`")
    positions = [(end.position - count + i) % end.size for i in range(count)]
    wanted = set(positions)
    low, high = min(positions), max(positions)
    # Plain rows, not ORM entities: loading objects was a fifth of placement's time.
    headers = {
        row.seq: row
        for row in session.execute(
            select(
                TpchOrder.seq,
                TpchOrder.order_key,
                TpchOrder.customer_id,
                TpchOrder.total_price,
                TpchOrder.order_date,
                TpchOrder.priority,
            ).where(TpchOrder.seq >= low, TpchOrder.seq <= high)
        )
        if row.seq in wanted
    }
    keys = [headers[seq].order_key for seq in positions]
    lines: dict[int, list[LineDraft]] = {key: [] for key in keys}
    for order_key, *line in session.execute(
        select(
            TpchLineItem.order_key,
            TpchLineItem.line_number,
            TpchLineItem.part_id,
            TpchLineItem.quantity,
            TpchLineItem.extended_price,
            TpchLineItem.discount,
            TpchLineItem.ship_mode,
        )
        .where(TpchLineItem.order_key.in_(keys))
        .order_by(TpchLineItem.order_key, TpchLineItem.line_number)
    ):
        lines[order_key].append(LineDraft(*line))
    return [
        OrderDraft(
            customer_id=headers[seq].customer_id,
            total_price=headers[seq].total_price,
            order_date=headers[seq].order_date,
            source=TPCH,
            source_key=headers[seq].order_key,
            lines=tuple(lines[headers[seq].order_key]),
            priority=headers[seq].priority,
        )
        for seq in positions
    ]


def random_drafts(
    session: Session,
    count: int,
    rng: random.Random,
    *,
    max_lines: int = 7,
    max_quantity: int = 50,
    today: date | None = None,
) -> list[OrderDraft]:
    """Make ``count`` random orders from the loaded catalog.

    Customers, parts (distinct within an order), quantities, discounts and
    ship modes are drawn from ``rng``; the total is the sum of the discounted
    line prices.

    Args:
        session: a session on the database holding the catalog.
        count: orders wanted (>= 0).
        rng: the random source (seed it for reproducible orders).
        max_lines: most lines per order (>= 1).
        max_quantity: largest quantity per line (>= 1).
        today: order date; default today.

    Returns:
        ``count`` drafts.

    Raises:
        StreamNotLoaded: no customers or products are loaded.
    """
    if count <= 0:
        return []
    customers = list(session.scalars(select(Customer.id).order_by(Customer.id)))
    products = list(session.execute(select(Product.id, Product.retail_price).order_by(Product.id)))
    if not customers or not products:
        raise StreamNotLoaded("no customers or products loaded; run `orders load-tpch`")
    order_date = today or date.today()
    drafts = []
    for _ in range(count):
        picked = rng.sample(products, rng.randint(1, min(max_lines, len(products))))
        lines = []
        for number, (part_id, price) in enumerate(picked, start=1):
            quantity = rng.randint(1, max_quantity)
            lines.append(
                LineDraft(
                    number,
                    part_id,
                    quantity,
                    price * quantity,
                    Decimal(rng.randint(0, 10)) / 100,
                    rng.choice(SHIP_MODES),
                )
            )
        total = sum((line.extended_price * (1 - line.discount) for line in lines), Decimal(0))
        drafts.append(
            OrderDraft(
                rng.choice(customers),
                total.quantize(Decimal("0.01")),
                order_date,
                RANDOM,
                None,
                tuple(lines),
            )
        )
    return drafts


def require_loaded(session: Session, source: str) -> None:
    """Check, reading only, that ``source`` can draw orders on this database.

    Args:
        session: any session (nothing is written).
        source: ``tpch`` (the order stream) or ``random`` (customers and products).

    Raises:
        StreamNotLoaded: the stream (``tpch``) or the catalog (both) is empty: the
            same error the drawing itself raises, before anything is drawn.
    """
    if source == "tpch":
        size = session.scalar(select(StreamCursor.size).where(StreamCursor.name == TPCH))
        if not size:
            raise StreamNotLoaded("the TPC-H order stream is not loaded; run `orders load-tpch`")
        return
    if session.scalar(select(Customer.id).limit(1)) is None or (
        session.scalar(select(Product.id).limit(1)) is None
    ):
        raise StreamNotLoaded("no customers or products loaded; run `orders load-tpch`")
