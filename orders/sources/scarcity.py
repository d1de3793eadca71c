"""Make a share of the coming TPC-H orders run out of stock, on purpose.

TPC-H stock (``PARTSUPP.ps_availqty``) is plentiful: left alone, no order of a
demo or chaos run is ever out of stock, and that path would go unexercised.
``make_scarce`` looks at the next orders of the stream (without taking them),
picks parts that few of them order, and empties those parts until about the
wanted share of the coming orders needs one of them.

Stock stays conserved: an emptied part's ``initial_on_hand`` drops by what was
on hand, so ``initial = on hand + deductions`` still holds.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import and_, or_, select, update
from sqlalchemy.orm import Session

from orders.domain.models import Inventory, StreamCursor, TpchLineItem, TpchOrder
from orders.sources.drafts import TPCH


@dataclass(frozen=True)
class Scarcity:
    """What ``make_scarce`` did.

    Attributes:
        parts: part ids emptied.
        orders_short: how many of the coming orders need one of them.
        coming: how many coming orders were looked at.
    """

    parts: tuple[int, ...]
    orders_short: int
    coming: int


def make_scarce(session: Session, count: int, share: float) -> Scarcity:
    """Empty parts so that about ``share`` of the next ``count`` stream orders run short.

    Runs in the caller's transaction (nothing committed). Parts are taken in
    order of how few coming orders need them (ties by part id), so the share is
    met closely; the stream cursor does not move.

    Args:
        session: the caller's session.
        count: coming orders to consider (capped at the stream's length).
        share: wanted fraction of them out of stock, 0..1 (0 changes nothing).

    Returns:
        A :class:`Scarcity`; no parts when the stream is not loaded or empty.

    Raises:
        ValueError: ``share`` is outside 0..1 or ``count`` is negative.
    """
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share must be within 0..1, not {share}")
    if count < 0:
        raise ValueError(f"count must be >= 0, not {count}")
    cursor = session.get(StreamCursor, TPCH)
    if cursor is None or cursor.size == 0 or count == 0 or share == 0.0:
        return Scarcity((), 0, 0)
    count = min(count, cursor.size)
    start = cursor.position % cursor.size
    end = start + count
    ranges = [and_(TpchOrder.seq >= start, TpchOrder.seq < min(end, cursor.size))]
    if end > cursor.size:
        ranges.append(TpchOrder.seq < end - cursor.size)
    orders_of: dict[int, set[int]] = defaultdict(set)
    for part, order_key in session.execute(
        select(TpchLineItem.part_id, TpchLineItem.order_key)
        .join(TpchOrder, TpchOrder.order_key == TpchLineItem.order_key)
        .where(or_(*ranges))
    ):
        orders_of[part].add(order_key)
    target = round(share * count)
    short: set[int] = set()
    parts: list[int] = []
    for part in sorted(orders_of, key=lambda p: (len(orders_of[p]), p)):
        if len(short) >= target:
            break
        if orders_of[part] <= short:
            continue
        parts.append(part)
        short |= orders_of[part]
    if parts:
        session.execute(
            update(Inventory)
            .where(Inventory.part_id.in_(parts))
            .values(
                initial_on_hand=Inventory.initial_on_hand - Inventory.on_hand,
                on_hand=0,
                version=Inventory.version + 1,
            ),
            execution_options={"synchronize_session": False},
        )
    return Scarcity(tuple(sorted(parts)), len(short), count)
