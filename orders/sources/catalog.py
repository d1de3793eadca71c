"""A small synthetic catalog (customers, parts and their stock) for tests and benchmarks.

The demo and ``orders place --source tpch`` use TPC-H (``orders.sources.tpch``); code
that needs a few known customers and parts with a chosen stock, and no generator,
loads them with :func:`load_catalog`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal

from sqlalchemy import insert

from orders.domain.models import Customer, Inventory, Product
from workflows.uow import SessionFactory

RETAIL_PRICE = Decimal("9.50")
"""Every part's retail price."""


def load_catalog(
    session_factory: SessionFactory, customers: Iterable[int], parts: Mapping[int, int]
) -> None:
    """Insert customers and parts (with their inventory rows) and commit.

    Args:
        session_factory: makes the session (one transaction).
        customers: the customer ids (named ``Customer#<id>``).
        parts: part id -> units on hand (also the initial units); each part costs
            :data:`RETAIL_PRICE`.

    Raises:
        sqlalchemy.exc.IntegrityError: an id is already there (nothing is written).
    """
    with session_factory() as session:
        session.execute(
            insert(Customer),
            [
                {
                    "id": c,
                    "name": f"Customer#{c}",
                    "nation_key": 1,
                    "market_segment": "BUILDING",
                    "account_balance": Decimal("10.00"),
                }
                for c in customers
            ],
        )
        session.execute(
            insert(Product),
            [
                {
                    "id": p,
                    "name": f"part {p}",
                    "brand": "Brand#1",
                    "type": "STANDARD",
                    "size": 1,
                    "container": "SM BOX",
                    "retail_price": RETAIL_PRICE,
                }
                for p in parts
            ],
        )
        session.execute(
            insert(Inventory),
            [
                {"part_id": p, "on_hand": n, "initial_on_hand": n, "version": 1}
                for p, n in parts.items()
            ],
        )
        session.commit()
