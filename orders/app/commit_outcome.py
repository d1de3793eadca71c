"""Did a placement whose unit of work failed commit? The store's own answer, per store.

A connection that drops (or a Ctrl-C that lands) while a transaction commits leaves
its outcome unknown to the client: re-running it blindly could place the orders
twice. Each store answers in its own way, chosen once per placement run:

- PostgreSQL: the transaction's id is read at its start (``txid_current()``) and
  asked for afterwards on another connection (``txid_status``): committed, aborted
  (a transaction the server saw no COMMIT for is rolled back when its session
  ends), or still in progress (asked again after a pause).
- SQLite: a file, not a connection: the batch's order rows are read back by their
  ids and placement time; present, it committed.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import func, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from orders.domain.models import Order
from workflows.sql import POSTGRESQL, dialect_of_factory
from workflows.uow import SessionFactory


class Outcome(enum.Enum):
    """What the store says of one attempt's transaction."""

    COMMITTED = "committed"
    ABORTED = "aborted"
    IN_PROGRESS = "in progress"  # ask again later
    UNKNOWN = "unknown"  # the store cannot say (transaction id too old)


@dataclass
class Attempt:
    """What one attempt of a batch wrote so far, to ask the store about it.

    Attributes:
        xid: PostgreSQL transaction id, read before the first write (None before).
        order_ids: ids of the orders it inserted (known before the commit).
        placed_at: their placement time.
    """

    xid: int | None = None
    order_ids: list[int] = field(default_factory=list)
    placed_at: datetime | None = None


class Store:
    """The SQLite room; :class:`PostgresStore` overrides what differs."""

    def mark(self, session: Session, attempt: Attempt) -> None:
        """Note what the store needs to answer later, inside the transaction, before
        its first write (nothing on SQLite)."""

    def outcome(self, session_factory: SessionFactory, attempt: Attempt) -> Outcome:
        """Ask the store, on a new session, whether ``attempt`` committed.

        Raises:
            sqlalchemy.exc.DBAPIError: the database cannot be reached (ask again).
        """
        if not attempt.order_ids:
            return Outcome.ABORTED  # nothing was written
        ends = {attempt.order_ids[0], attempt.order_ids[-1]}
        with session_factory() as session:
            found = session.scalar(
                select(func.count()).where(
                    Order.id.in_(sorted(ends)), Order.placed_at == attempt.placed_at
                )
            )
        return Outcome.COMMITTED if found == len(ends) else Outcome.ABORTED

    def dropped(self, exc: BaseException) -> bool:
        """True when ``exc`` is a lost connection to the database (worth a retry)."""
        return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)


class PostgresStore(Store):
    """PostgreSQL: transaction ids and ``txid_status``."""

    def mark(self, session: Session, attempt: Attempt) -> None:
        attempt.xid = int(session.execute(text("SELECT txid_current()")).scalar_one())

    def outcome(self, session_factory: SessionFactory, attempt: Attempt) -> Outcome:
        if attempt.xid is None:
            return Outcome.ABORTED  # failed before its first statement: nothing written
        with session_factory() as session:
            status = session.execute(
                text("SELECT txid_status(:xid)"), {"xid": attempt.xid}
            ).scalar_one_or_none()
        return {
            "committed": Outcome.COMMITTED,
            "aborted": Outcome.ABORTED,
            "in progress": Outcome.IN_PROGRESS,
        }.get(status, Outcome.UNKNOWN)

    def dropped(self, exc: BaseException) -> bool:
        import psycopg  # the driver of every PostgreSQL URL (orders.app.db)

        # a server gone, restarting or terminating our session (57P01), or unreachable
        return super().dropped(exc) or (
            isinstance(exc, DBAPIError) and isinstance(exc.orig, psycopg.OperationalError)
        )


def store_of(session_factory: SessionFactory) -> Store:
    """The room of the database ``session_factory`` writes to (no connection opened)."""
    return PostgresStore() if dialect_of_factory(session_factory) is POSTGRESQL else Store()
