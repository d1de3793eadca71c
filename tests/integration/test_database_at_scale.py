"""PostgreSQL at scale: statement timeouts, prepared statements and a connection pool
sized per worker process.

The timeout tests need PostgreSQL (``TEST_DATABASE_URL``); on the SQLite default
they are skipped, saying so. Pool sizing is checked on both.
"""

from __future__ import annotations

import time

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from orders.app.bootstrap import build, build_worker_app
from orders.app.db import make_engine, worker_pool_size
from orders.app.migrate import upgrade_database
from orders.app.settings import Settings
from orders.worker.runner import build_worker


def _postgres_only(url: str) -> None:
    if make_url(url).get_backend_name() != "postgresql":
        pytest.skip("statement_timeout is a PostgreSQL setting: set TEST_DATABASE_URL")


def test_statement_timeout_cancels_a_statement_that_runs_too_long(database_url):
    _postgres_only(database_url)
    engine = make_engine(database_url, statement_timeout_ms=200)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SHOW statement_timeout")).scalar() == "200ms"
            started = time.monotonic()
            with pytest.raises(OperationalError, match="statement timeout"):
                conn.execute(text("SELECT pg_sleep(3)"))
            assert time.monotonic() - started < 2.0
    finally:
        engine.dispose()


def test_orders_db_statement_timeout_ms_reaches_every_connection(database_url, monkeypatch):
    _postgres_only(database_url)
    upgrade_database(database_url)
    monkeypatch.setenv("ORDERS_DATABASE_URL", database_url)
    monkeypatch.setenv("ORDERS_DB_STATEMENT_TIMEOUT_MS", "1500")
    app = build(Settings())
    try:
        with app.engine.connect() as conn:
            assert conn.execute(text("SHOW statement_timeout")).scalar() == "1500ms"
    finally:
        app.close()


def test_the_step_time_limit_sets_statement_and_lock_timeouts_by_default(database_url, monkeypatch):
    _postgres_only(database_url)
    upgrade_database(database_url)
    monkeypatch.setenv("ORDERS_DATABASE_URL", database_url)
    monkeypatch.delenv("ORDERS_DB_STATEMENT_TIMEOUT_MS", raising=False)
    monkeypatch.setenv("ORDERS_STEP_TIME_LIMIT_SECONDS", "2.5")
    app = build(Settings())
    try:
        with app.engine.connect() as conn:
            assert conn.execute(text("SHOW statement_timeout")).scalar() == "2500ms"
            assert conn.execute(text("SHOW lock_timeout")).scalar() == "2500ms"
    finally:
        app.close()


def test_a_worker_process_sizes_its_pool_from_its_lanes(database_url, redis_client, key_prefix):
    upgrade_database(database_url)
    settings = Settings(database_url=database_url, queue_prefix=key_prefix)
    app = build_worker_app(settings, lanes=6, redis_override=redis_client)  # as `orders worker`
    command = build(settings, redis_override=redis_client)
    try:
        build_worker(app, ["stock", "points"], concurrency=3)
        assert app.pool_size == worker_pool_size(6) == 7
        assert app.lease_bound and not command.lease_bound
        if make_url(database_url).get_backend_name() == "postgresql":
            assert app.engine.pool.size() == 7
            assert command.engine.pool.size() == 5
    finally:
        app.close()
        command.close()


def test_a_statement_is_prepared_from_its_second_run_on_a_connection(database_url):
    """Regression: psycopg parsed and planned a statement five times on every connection
    before preparing it; a step worker's few statements, each on every connection of its
    pool, spent a run of 2,000 orders mostly unprepared. A statement run once is not
    prepared."""
    _postgres_only(database_url)
    engine = make_engine(database_url)
    once, twice = text("SELECT CAST(:a AS integer) + 1"), text("SELECT CAST(:a AS integer) + 2")
    prepared = text("SELECT statement FROM pg_prepared_statements")
    try:
        with engine.connect() as conn:
            conn.execute(once, {"a": 1})
            conn.execute(twice, {"a": 1})
            conn.execute(twice, {"a": 2})
            statements = conn.execute(prepared).scalars().all()
    finally:
        engine.dispose()
    assert [s for s in statements if "+ 2" in s]
    assert not [s for s in statements if "+ 1" in s]
