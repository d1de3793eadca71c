"""Error tree of the orders package (root: ``OrdersError``).

``retryable`` has the same meaning as in ``workflows.errors``: False sends a
job straight to the dead-letter queue.
"""

from __future__ import annotations


class OrdersError(Exception):
    """Root of every error raised by ``orders``."""

    retryable: bool = False


class OrderNotFound(OrdersError):
    """A message names an order that does not exist."""


class OrderNotCancellable(OrdersError):
    """The order can no longer be cancelled: it completed (its shipment is dispatched)
    or it ended out of stock.

    Attributes:
        order_id: the order.
        status: its status (``completed`` or ``out_of_stock``).
    """

    def __init__(self, order_id: int, status: str) -> None:
        why = (
            "its shipment was dispatched when it completed"
            if status == "completed"
            else "it ended out of stock, nothing is left to undo"
        )
        super().__init__(f"order {order_id} is {status}: too late to cancel ({why})")
        self.order_id = order_id
        self.status = status


class StreamNotLoaded(OrdersError):
    """The TPC-H order stream (or the catalog) is not loaded; run ``orders load-tpch``."""


class UnknownSource(OrdersError):
    """An order source other than ``tpch`` or ``random`` was asked for."""


class TpchGenerationFailed(OrdersError):
    """``tpchgen-cli`` is missing or exited with an error."""


class TpchLoadBusy(OrdersError):
    """Another TPC-H load of the same data dir held its lock for longer than the wait."""
