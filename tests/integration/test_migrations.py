"""Migrations: one Alembic history, idempotent upgrade, no drift from the models."""

from __future__ import annotations

import threading

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text

from orders.app.db import make_engine
from orders.app.migrate import current_revision, head_revision, upgrade_database
from orders.domain.models import Base


def test_autogenerate_finds_no_drift_between_models_and_migrations(database_url):
    upgrade_database(database_url)
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            assert compare_metadata(context, Base.metadata) == []
    finally:
        engine.dispose()


def test_upgrade_creates_every_table_and_is_a_noop_the_second_time(database_url):
    assert current_revision(database_url) is None
    upgrade_database(database_url)
    upgrade_database(database_url)
    assert current_revision(database_url) == head_revision()
    engine = make_engine(database_url)
    try:
        tables = set(inspect(engine).get_table_names())
    finally:
        engine.dispose()
    assert set(Base.metadata.tables) <= tables


def test_processes_starting_together_migrate_once(database_url):
    errors: list[BaseException] = []

    def upgrade() -> None:
        try:
            upgrade_database(database_url)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=upgrade) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert current_revision(database_url) == head_revision()


def test_sqlite_connections_use_wal_busy_timeout_and_foreign_keys(database_url):
    engine = make_engine(database_url)
    try:
        if engine.dialect.name != "sqlite":
            pytest.skip("SQLite connection settings")
        with engine.connect() as connection:
            pragma = {
                name: connection.execute(text(f"PRAGMA {name}")).scalar()
                for name in ("journal_mode", "busy_timeout", "foreign_keys", "synchronous")
            }
    finally:
        engine.dispose()
    assert pragma == {
        "journal_mode": "wal",
        "busy_timeout": 30000,
        "foreign_keys": 1,
        "synchronous": 1,
    }
