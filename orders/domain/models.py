"""Domain tables: catalog (customers, products, inventory), the TPC-H order
stream, placed orders and their lines, and one table per step effect.

Uniqueness that makes a handler idempotent is a unique *index* named
``uq_<table>_<columns>`` (not a table constraint), so it can be dropped with
``DROP INDEX`` on SQLite and PostgreSQL alike when a test corrupts a database.
"""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal

from sqlalchemy import Date, ForeignKey, Index, Integer, Numeric, String
from sqlalchemy.orm import Mapped, mapped_column

from orders.domain.access import ApiOrder, ApiToken, OperatorAction
from workflows.columns import UTCDateTime
from workflows.models import Base

__all__ = [
    "ApiOrder",
    "ApiToken",
    "Base",
    "Customer",
    "Inventory",
    "Notification",
    "OperatorAction",
    "Order",
    "OrderLine",
    "OrderStatus",
    "PointsEntry",
    "Product",
    "Shipment",
    "StockDeduction",
    "StockReturn",
    "StreamCursor",
    "TpchLineItem",
    "TpchOrder",
]


class OrderStatus:
    """Values of ``orders.status``.

    placed: steps in progress; completed: every step done (its shipment is
    dispatched: too late to cancel); out_of_stock: the stock step found a part
    short (a business outcome, final); cancelled: called off by the customer
    while placed, its finished steps undone by compensations. Whether an order
    is blocked by a dead step is recorded on its workflow row.
    """

    PLACED = "placed"
    COMPLETED = "completed"
    OUT_OF_STOCK = "out_of_stock"
    CANCELLED = "cancelled"

    ALL = (PLACED, COMPLETED, OUT_OF_STOCK, CANCELLED)
    FINAL = (COMPLETED, OUT_OF_STOCK, CANCELLED)
    """The states an order ends in; exactly one of them once its workflow is done."""


class Customer(Base):
    """A customer (TPC-H CUSTOMER)."""

    __tablename__ = "customers"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(40))
    nation_key: Mapped[int] = mapped_column(Integer)
    market_segment: Mapped[str] = mapped_column(String(20))
    account_balance: Mapped[Decimal] = mapped_column(Numeric(12, 2))


class Product(Base):
    """A part that can be ordered (TPC-H PART)."""

    __tablename__ = "products"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(60))
    brand: Mapped[str] = mapped_column(String(20))
    type: Mapped[str] = mapped_column(String(30))
    size: Mapped[int] = mapped_column(Integer)
    container: Mapped[str] = mapped_column(String(20))
    retail_price: Mapped[Decimal] = mapped_column(Numeric(12, 2))


class Inventory(Base):
    """Stock on hand of one part; ``version`` guards every decrement."""

    __tablename__ = "inventory"

    part_id: Mapped[int] = mapped_column(ForeignKey("products.id"), primary_key=True)
    on_hand: Mapped[int] = mapped_column(Integer)
    initial_on_hand: Mapped[int] = mapped_column(Integer)
    version: Mapped[int] = mapped_column(Integer, default=1)

    __mapper_args__ = {"version_id_col": version}


class TpchOrder(Base):
    """One order of the TPC-H stream; ``seq`` is its 0-based position."""

    __tablename__ = "tpch_orders"
    __table_args__ = (Index("uq_tpch_orders_seq", "seq", unique=True),)

    order_key: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    seq: Mapped[int] = mapped_column(Integer)
    customer_id: Mapped[int] = mapped_column(Integer)
    total_price: Mapped[Decimal] = mapped_column(Numeric(15, 2))
    order_date: Mapped[date] = mapped_column(Date)
    priority: Mapped[str] = mapped_column(String(15))


class TpchLineItem(Base):
    """One line of a TPC-H stream order (TPC-H LINEITEM)."""

    __tablename__ = "tpch_lineitems"

    order_key: Mapped[int] = mapped_column(ForeignKey("tpch_orders.order_key"), primary_key=True)
    line_number: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    part_id: Mapped[int] = mapped_column(Integer)
    supplier_key: Mapped[int] = mapped_column(Integer)
    quantity: Mapped[int] = mapped_column(Integer)
    extended_price: Mapped[Decimal] = mapped_column(Numeric(15, 2))
    discount: Mapped[Decimal] = mapped_column(Numeric(4, 2))
    ship_date: Mapped[date] = mapped_column(Date)
    ship_mode: Mapped[str] = mapped_column(String(10))


class StreamCursor(Base):
    """How far an order source has been consumed; its row marks a loaded stream.

    ``position`` counts orders taken so far; ``size`` is the stream length
    (the stream wraps around); ``scale`` is the TPC-H scale factor loaded.
    """

    __tablename__ = "stream_cursors"

    name: Mapped[str] = mapped_column(String(20), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, default=0)
    size: Mapped[int] = mapped_column(Integer)
    scale: Mapped[str] = mapped_column(String(20))
    loaded_at: Mapped[datetime] = mapped_column(UTCDateTime())


class Order(Base):
    """A placed order; its workflow has ``kind='order'`` and ``subject_id=id``."""

    __tablename__ = "orders"
    __table_args__ = (
        Index("ix_orders_status", "status"),
        # search filters (``orders.domain.search``): a customer's orders, a time range
        Index("ix_orders_customer_id", "customer_id"),
        Index("ix_orders_placed_at", "placed_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    customer_id: Mapped[int] = mapped_column(ForeignKey("customers.id"))
    total_price: Mapped[Decimal] = mapped_column(Numeric(15, 2))
    order_date: Mapped[date] = mapped_column(Date)
    status: Mapped[str] = mapped_column(String(20), default=OrderStatus.PLACED)
    source: Mapped[str] = mapped_column(String(10))
    source_key: Mapped[int | None] = mapped_column(Integer)
    placed_at: Mapped[datetime] = mapped_column(UTCDateTime())
    priority: Mapped[str | None] = mapped_column(String(15))  # TPC-H O_ORDERPRIORITY


class OrderLine(Base):
    """One line of a placed order."""

    __tablename__ = "order_lines"

    order_id: Mapped[int] = mapped_column(ForeignKey("orders.id"), primary_key=True)
    line_number: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    part_id: Mapped[int] = mapped_column(ForeignKey("products.id"))
    quantity: Mapped[int] = mapped_column(Integer)
    extended_price: Mapped[Decimal] = mapped_column(Numeric(15, 2))
    discount: Mapped[Decimal] = mapped_column(Numeric(4, 2))
    ship_mode: Mapped[str] = mapped_column(String(10))


class StockDeduction(Base):
    """Stock taken for one order and part; unique per (order, part)."""

    __tablename__ = "stock_deductions"
    __table_args__ = (
        Index("uq_stock_deductions_order_id_part_id", "order_id", "part_id", unique=True),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    order_id: Mapped[int] = mapped_column(ForeignKey("orders.id"))
    part_id: Mapped[int] = mapped_column(ForeignKey("products.id"))
    quantity: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class StockReturn(Base):
    """Stock given back for one order and part (compensating a deduction); unique per
    (order, part), so a redelivered compensation returns nothing twice."""

    __tablename__ = "stock_returns"
    __table_args__ = (
        Index("uq_stock_returns_order_id_part_id", "order_id", "part_id", unique=True),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    order_id: Mapped[int] = mapped_column(ForeignKey("orders.id"))
    part_id: Mapped[int] = mapped_column(ForeignKey("products.id"))
    quantity: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class Notification(Base):
    """A message sent about an order; unique per (order, kind)."""

    __tablename__ = "notifications"
    __table_args__ = (Index("uq_notifications_order_id_kind", "order_id", "kind", unique=True),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    order_id: Mapped[int] = mapped_column(ForeignKey("orders.id"))
    kind: Mapped[str] = mapped_column(String(40))
    customer_id: Mapped[int] = mapped_column(ForeignKey("customers.id"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class PointsEntry(Base):
    """Loyalty points credited for an order; unique per (order, reason).

    A reversal is its own entry (reason ``order_cancelled``, negative points):
    history is never deleted.
    """

    __tablename__ = "points_ledger"
    __table_args__ = (Index("uq_points_ledger_order_id_reason", "order_id", "reason", unique=True),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    order_id: Mapped[int] = mapped_column(ForeignKey("orders.id"))
    customer_id: Mapped[int] = mapped_column(ForeignKey("customers.id"))
    reason: Mapped[str] = mapped_column(String(40))
    points: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class Shipment(Base):
    """The one shipment of an order; ``status`` is scheduled or cancelled.

    It is dispatched (handed to the carrier) when its order completes; until
    then a cancellation sets it to cancelled.
    """

    __tablename__ = "shipments"
    __table_args__ = (Index("uq_shipments_order_id", "order_id", unique=True),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    order_id: Mapped[int] = mapped_column(ForeignKey("orders.id"))
    ship_mode: Mapped[str] = mapped_column(String(10))
    status: Mapped[str] = mapped_column(String(20))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
