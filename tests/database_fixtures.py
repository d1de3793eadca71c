"""Fixtures for the database-backed tests of ``workflows`` and ``orders`` (a pytest plugin).

Loaded by ``pytest_plugins`` in ``tests/conftest.py`` and ``workflows/tests/conftest.py``
(the queue's tests need no database). Each test gets a fresh database from the shared
``database_url`` fixture (SQLite file by default, PostgreSQL with ``TEST_DATABASE_URL``),
migrated to the newest revision.

Fixtures:
    engine (function) -> sqlalchemy.Engine on that database, disposed after the test
    session_factory (function) -> sessionmaker on :func:`engine`
    catalog (function) -> dict[int, int], a small catalog: part id -> units on hand
    make_draft (function) -> the :func:`draft` builder of order drafts
    publisher (function) -> MemoryPublisher, an in-memory step publisher
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import date
from decimal import Decimal

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from orders.app.db import make_engine, make_session_factory
from orders.app.migrate import upgrade_database
from orders.sources.catalog import load_catalog
from orders.sources.drafts import LineDraft, OrderDraft
from workflows.relay import StepMessage


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    """An engine on a fresh database migrated to head; disposed after the test."""
    upgrade_database(database_url)
    engine = make_engine(database_url)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def session_factory(engine: Engine) -> sessionmaker[Session]:
    """A session factory on :func:`engine`."""
    return make_session_factory(engine)


CUSTOMERS = (1, 2, 3)
PARTS = {10: 100, 11: 100, 12: 100, 13: 5, 14: 100}
"""Part id -> units on hand in the small catalog."""


@pytest.fixture
def catalog(session_factory: sessionmaker[Session]) -> dict[int, int]:
    """A small catalog: customers 1-3, parts 10-14 (part 13 has only 5 units).

    Returns:
        Part id -> initial on hand.
    """
    load_catalog(session_factory, CUSTOMERS, PARTS)
    return dict(PARTS)


def draft(
    lines: Sequence[tuple[int, int, str]] = ((10, 2, "AIR"), (11, 3, "MAIL"), (12, 1, "AIR")),
    *,
    customer_id: int = 1,
    total: str = "1234.56",
) -> OrderDraft:
    """An order draft; ``lines`` are (part id, quantity, ship mode)."""
    return OrderDraft(
        customer_id=customer_id,
        total_price=Decimal(total),
        order_date=date(1996, 1, 2),
        source="random",
        source_key=None,
        lines=tuple(
            LineDraft(n, part, qty, Decimal("9.50") * qty, Decimal("0.00"), mode)
            for n, (part, qty, mode) in enumerate(lines, start=1)
        ),
    )


@pytest.fixture
def make_draft() -> Callable[..., OrderDraft]:
    """The :func:`draft` builder: ``make_draft(lines=[(part, qty, mode)], total="...")``."""
    return draft


class MemoryPublisher:
    """An in-memory ``workflows.relay.Publisher`` (our own protocol, not Redis).

    Attributes:
        messages: every message published, in order.
        fail: when set, ``publish`` raises it (the queue is down).
    """

    def __init__(self) -> None:
        self.messages: list[StepMessage] = []
        self.fail: Exception | None = None

    def publish(self, messages: Sequence[StepMessage]) -> None:
        if self.fail is not None:
            raise self.fail
        self.messages.extend(messages)

    def keys(self) -> list[str]:
        """Idempotency keys published, in order (duplicates kept)."""
        return [m.idempotency_key for m in self.messages]


@pytest.fixture
def publisher() -> MemoryPublisher:
    """A fresh :class:`MemoryPublisher`."""
    return MemoryPublisher()
