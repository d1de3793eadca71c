"""The databases of the end-to-end peer benchmark, and what it reads back from them.

Contract: :class:`TemplateDatabase` migrates one database and loads TPC-H into it once;
every turn gets a fresh copy of it (PostgreSQL ``CREATE DATABASE ... TEMPLATE``, SQLite
the file's online backup), so every library starts from the same rows and the same
stream position and places the same orders. The checks count, from the tables alone,
orders finished, the step runs they needed, parts whose stock does not add up (a stock
effect applied twice) and completed orders missing an effect.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import ColumnElement, Engine, Exists, and_, exists, func, not_, or_, select
from sqlalchemy.orm import Session, sessionmaker

from orders.app.bootstrap import build
from orders.app.db import make_engine, make_session_factory
from orders.app.settings import Settings
from orders.domain.effects import CONFIRMATION, ORDER_PLACED
from orders.domain.models import (
    Inventory,
    Notification,
    Order,
    OrderStatus,
    PointsEntry,
    Shipment,
    StockDeduction,
    StockReturn,
)
from orders.domain.steps import STEPS, STOCK
from orders.sources.tpch import load_tpch

from .e2e import PG_ADMIN

DATABASES = ("sqlite", "postgresql")


def _pg_url(name: str) -> str:
    server = psycopg.conninfo.conninfo_to_dict(PG_ADMIN)
    return (
        f"postgresql+psycopg://{server.get('user', 'postgres')}@{server.get('host', '127.0.0.1')}"
        f":{server.get('port', 5432)}/{name}"
    )


def _pg_admin(*statements: str) -> None:
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)  # type: ignore[arg-type]


@dataclass
class TemplateDatabase:
    """One migrated, TPC-H-loaded database of a kind, copied for every turn.

    Args:
        kind: ``sqlite`` or ``postgresql`` (on the server of ``BENCH_POSTGRES_URL``).
        scale: TPC-H scale factor loaded.

    Attributes:
        work_dir: a temporary folder holding the SQLite files and each turn's data dir.
    """

    kind: str
    scale: float = 0.01
    work_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="bench-e2ep-")))
    _copies: list[str] = field(default_factory=list)
    _prefix: str = field(default=f"orderflow_bench_{os.getpid()}")

    def __post_init__(self) -> None:
        if self.kind not in DATABASES:
            raise ValueError(f"unknown database {self.kind!r}; use one of {DATABASES}")

    @property
    def template_url(self) -> str:
        """The template's SQLAlchemy URL."""
        if self.kind == "sqlite":
            return f"sqlite:///{self.work_dir / 'template.db'}"
        return _pg_url(f"{self._prefix}_tpl")

    def prepare(self) -> None:
        """Create the template: migrate it to the newest revision and load TPC-H.

        Raises:
            sqlalchemy.exc.SQLAlchemyError / psycopg.Error: the database cannot be made.
            orders.domain.errors.TpchGenerationFailed: TPC-H generation failed.
        """
        if self.kind == "postgresql":
            name = f"{self._prefix}_tpl"
            _pg_admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)", f"CREATE DATABASE {name}")
        data_dir = self.work_dir / "template-data"
        settings = Settings(database_url=self.template_url, data_dir=data_dir)
        app = build(settings, auto_migrate=True)
        try:
            load_tpch(app.session_factory, data_dir, self.scale)
        finally:
            app.close()

    def copy(self, label: str) -> str:
        """A fresh copy of the template for one turn; returns its URL.

        Args:
            label: a short name for the copy (letters, digits, underscores).
        """
        if self.kind == "sqlite":
            path = self.work_dir / label / "orders.db"
            path.parent.mkdir(parents=True, exist_ok=True)
            source = sqlite3.connect(self.work_dir / "template.db")
            target = sqlite3.connect(path)
            try:
                source.backup(target)
            finally:
                target.close()
                source.close()
            url = f"sqlite:///{path}"
        else:
            name = f"{self._prefix}_{label}"
            _pg_admin(
                f"DROP DATABASE IF EXISTS {name} WITH (FORCE)",
                f"CREATE DATABASE {name} TEMPLATE {self._prefix}_tpl",
            )
            url = _pg_url(name)
        self._copies.append(url)
        return url

    def drop(self, url: str) -> None:
        """Remove one turn's copy (its SQLite folder, or its PostgreSQL database)."""
        if self.kind == "sqlite":
            shutil.rmtree(Path(url.removeprefix("sqlite:///")).parent, ignore_errors=True)
        else:
            _pg_admin(f"DROP DATABASE IF EXISTS {url.rsplit('/', 1)[1]} WITH (FORCE)")
        if url in self._copies:
            self._copies.remove(url)

    def close(self) -> None:
        """Drop every copy, the template and the work folder."""
        for url in list(self._copies):
            self.drop(url)
        if self.kind == "postgresql":
            _pg_admin(f"DROP DATABASE IF EXISTS {self._prefix}_tpl WITH (FORCE)")
        shutil.rmtree(self.work_dir, ignore_errors=True)


def open_database(url: str) -> tuple[Engine, sessionmaker[Session]]:
    """An engine (orderflow's connection settings) and session factory on ``url``."""
    engine = make_engine(url)
    return engine, make_session_factory(engine)


def finished_orders(factory: sessionmaker[Session], first_id: int) -> int:
    """Orders with id >= ``first_id`` in a final status (completed, out of stock, cancelled)."""
    with factory() as session:
        return int(
            session.scalar(
                select(func.count())
                .select_from(Order)
                .where(Order.id >= first_id, Order.status.in_(OrderStatus.FINAL))
            )
            or 0
        )


def expected_step_runs(factory: sessionmaker[Session], first_id: int) -> dict[str, int]:
    """Step -> orders (id >= ``first_id``) that must have run it: stock for the completed
    and the out-of-stock ones, the other steps for the completed ones (an order out of
    stock skips them)."""
    with factory() as session:
        by_status = dict(
            session.execute(
                select(Order.status, func.count())
                .where(
                    Order.id >= first_id,
                    Order.status.in_((OrderStatus.COMPLETED, OrderStatus.OUT_OF_STOCK)),
                )
                .group_by(Order.status)
            ).all()
        )
    completed = int(by_status.get(OrderStatus.COMPLETED, 0))
    stocked = completed + int(by_status.get(OrderStatus.OUT_OF_STOCK, 0))
    return {step: stocked if step == STOCK else completed for step in STEPS}


def inventory_drift(factory: sessionmaker[Session]) -> int:
    """Parts whose stock does not add up: taken from inventory != deducted - returned.

    A stock effect applied twice without a second deduction row shows here.
    """
    deducted = (
        select(StockDeduction.part_id, func.sum(StockDeduction.quantity).label("q"))
        .group_by(StockDeduction.part_id)
        .subquery()
    )
    returned = (
        select(StockReturn.part_id, func.sum(StockReturn.quantity).label("q"))
        .group_by(StockReturn.part_id)
        .subquery()
    )
    taken = Inventory.initial_on_hand - Inventory.on_hand
    booked = func.coalesce(deducted.c.q, 0) - func.coalesce(returned.c.q, 0)
    with factory() as session:
        return int(
            session.scalar(
                select(func.count())
                .select_from(Inventory)
                .outerjoin(deducted, deducted.c.part_id == Inventory.part_id)
                .outerjoin(returned, returned.c.part_id == Inventory.part_id)
                .where(taken != booked)
            )
            or 0
        )


def missing_effects(factory: sessionmaker[Session], first_id: int) -> int:
    """Completed orders (id >= ``first_id``) without one of their effects: a stock
    deduction, the confirmation, the points entry or a shipment."""

    def has(model: Any, *match: ColumnElement[bool]) -> Exists:
        return exists().where(model.order_id == Order.id, *match)

    lacking = or_(
        not_(has(StockDeduction)),
        not_(has(Notification, Notification.kind == CONFIRMATION)),
        not_(has(PointsEntry, PointsEntry.reason == ORDER_PLACED)),
        not_(has(Shipment)),
    )
    with factory() as session:
        return int(
            session.scalar(
                select(func.count())
                .select_from(Order)
                .where(and_(Order.id >= first_id, Order.status == OrderStatus.COMPLETED, lacking))
            )
            or 0
        )
