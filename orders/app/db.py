"""Database adapters: engine factory per URL, session factory, unit of work.

SQLite gets WAL, a busy timeout, foreign keys and ``synchronous=NORMAL`` on
every connection; ``postgresql://`` URLs are rewritten to the psycopg 3
driver. Nothing is created at import time.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from orders.app.errors import SQLiteTooOld
from orders.app.sqlite_writers import WriterTurns
from workflows.sql import INFO_KEY, dialect_for
from workflows.uow import SessionFactory, UnitOfWork

__all__ = [
    "SQLITE_BUSY_TIMEOUT_SECONDS",
    "SessionFactory",
    "UnitOfWork",
    "make_engine",
    "make_session_factory",
    "normalize_url",
    "sqlite_path",
]

SQLITE_BUSY_TIMEOUT_SECONDS = 30.0
#: executions of a statement text on one PostgreSQL connection before psycopg prepares it
PREPARE_THRESHOLD = 1
"""A step worker runs a few statements over and over, each on every connection of its
pool: prepared from the second time on, a statement is parsed once per connection and
its plan may be kept, instead of parsed and planned five times first (psycopg's
default). A statement run once is never prepared."""
#: oldest SQLite library the statements run on: ``UPDATE ... RETURNING`` came in 3.35
SQLITE_MIN_VERSION = (3, 35, 0)


def sqlite_problem(version: tuple[int, ...], has_json: bool) -> str | None:
    """Why a SQLite library cannot run orderflow, or None when it can.

    Args:
        version: the library's version (``sqlite3.sqlite_version_info``).
        has_json: whether it has the JSON functions (``json_each``), which carry a
            batch's ids and rows as one parameter (``workflows.sql.sqlite``).

    Returns:
        One line naming what is missing, or None.
    """
    found = ".".join(map(str, version))
    if tuple(version) < SQLITE_MIN_VERSION:
        wanted = ".".join(map(str, SQLITE_MIN_VERSION))
        return f"SQLite {found} is too old: orderflow needs {wanted} or newer"
    if not has_json:
        return f"SQLite {found} was built without its JSON functions (json_each)"
    return None


def _check_sqlite_library() -> None:
    try:
        with sqlite3.connect(":memory:") as conn:
            has_json = conn.execute("SELECT count(*) FROM json_each('[1]')").fetchone() == (1,)
        conn.close()
    except sqlite3.OperationalError:
        has_json = False
    problem = sqlite_problem(sqlite3.sqlite_version_info, has_json)
    if problem is not None:
        raise SQLiteTooOld(
            f"{problem}; use a Python linked with a newer SQLite, or PostgreSQL "
            "(ORDERS_DATABASE_URL=postgresql://...)"
        )


def normalize_url(url: str) -> str:
    """Return ``url`` with its driver made explicit where orderflow picks one.

    Args:
        url: a SQLAlchemy database URL.

    Returns:
        ``postgresql://`` / ``postgres://`` / ``postgresql+psycopg2://`` rewritten
        to ``postgresql+psycopg://``; other URLs unchanged.

    Raises:
        sqlalchemy.exc.ArgumentError: when ``url`` does not parse.
    """
    parsed = make_url(url)
    if parsed.get_backend_name() in ("postgresql", "postgres") and parsed.drivername != (
        "postgresql+psycopg"
    ):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def sqlite_path(url: str) -> Path | None:
    """Return the database file of a SQLite URL, or None for other URLs and ``:memory:``."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {int(SQLITE_BUSY_TIMEOUT_SECONDS * 1000)}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
    finally:
        cursor.close()


def make_engine(
    url: str,
    *,
    echo: bool = False,
    pool_size: int = 5,
    max_overflow: int = 5,
    statement_timeout_ms: int = 0,
    lock_timeout_ms: int = 0,
    lease_seconds: float | None = None,
) -> Engine:
    """Create an engine for ``url`` with orderflow's connection settings.

    For SQLite the parent directory of the file is created. Connections run
    WAL, ``busy_timeout`` of ``SQLITE_BUSY_TIMEOUT_SECONDS`` (30 s), foreign
    keys on and ``synchronous=NORMAL``. PostgreSQL uses psycopg 3 with
    ``pool_pre_ping`` (a connection the server dropped is replaced, not handed out),
    preparing a statement from its second run on a connection (:data:`PREPARE_THRESHOLD`).

    Args:
        url: SQLAlchemy URL (``sqlite:///path``, ``postgresql://...``).
        echo: log every statement.
        pool_size: connections kept open per process (not for SQLite); a worker
            process sizes it from its lanes (:func:`worker_pool_size`).
        max_overflow: extra connections opened under a burst, closed when returned.
        statement_timeout_ms: PostgreSQL ``statement_timeout`` of every connection
            (``-c statement_timeout=...``), milliseconds; 0 leaves the server's. A
            statement past it fails with ``sqlalchemy.exc.OperationalError``
            (``QueryCanceled``). Not applied to SQLite.
        lock_timeout_ms: PostgreSQL ``lock_timeout`` (a wait for a row or table lock),
            milliseconds; 0 leaves the server's. Past it the statement fails with
            ``OperationalError`` (``LockNotAvailable``). Not applied to SQLite.
        lease_seconds: the lease this process's transactions are bound to (a
            worker's), seconds; None (a command) binds them to nothing. No lock of
            such a transaction outlives the lease (ADR 0023): on PostgreSQL every
            connection sets ``idle_in_transaction_session_timeout`` to the lease,
            so the server ends a session left idle inside a transaction (a frozen
            process) and frees its locks; on SQLite a writers' turn held longer
            than the lease plus a margin is taken by killing its process
            (``orders.app.sqlite_writers``).

    Returns:
        A new ``Engine``; dispose it when done.

    Raises:
        sqlalchemy.exc.ArgumentError: when ``url`` does not parse.
        SQLiteTooOld: a SQLite URL, and Python's SQLite library is older than
            3.35 or has no JSON functions.
    """
    url = normalize_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        _check_sqlite_library()
        path = sqlite_path(url)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            url,
            echo=echo,
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS, "check_same_thread": False},
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        if path is not None:
            # writers of every process take turns instead of sleeping in the busy handler
            WriterTurns(
                path.with_name(path.name + "-writers"),
                SQLITE_BUSY_TIMEOUT_SECONDS,
                lease_seconds=lease_seconds,
            ).install(engine)
        return engine
    connect_args: dict[str, Any] = {"prepare_threshold": PREPARE_THRESHOLD}
    options = []
    if statement_timeout_ms > 0:
        options.append(f"-c statement_timeout={int(statement_timeout_ms)}")
    if lock_timeout_ms > 0:
        options.append(f"-c lock_timeout={int(lock_timeout_ms)}")
    if lease_seconds is not None:
        idle_ms = max(int(lease_seconds * 1000), 1)
        options.append(f"-c idle_in_transaction_session_timeout={idle_ms}")
    if options:
        connect_args["options"] = " ".join(options)
    return create_engine(
        url,
        echo=echo,
        pool_pre_ping=True,
        pool_size=pool_size,
        max_overflow=max_overflow,
        connect_args=connect_args,
    )


def worker_pool_size(lanes: int) -> int:
    """Connections a worker process needs: one per lane (a lane holds at most one
    unit of work at a time) plus one for the relay sweep and outcome records.

    Args:
        lanes: lanes (threads) of the process, all steps together.
    """
    return max(lanes, 1) + 1


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    """Return a session factory bound to ``engine``.

    Sessions do not expire objects on commit, so values read in a unit of
    work stay readable after it commits. The database's dialect is chosen here,
    once (``workflows.sql.dialect_for``), and carried in the factory's ``info``
    by every session it makes (``workflows.sql.dialect_of``).

    Args:
        engine: the engine from ``make_engine``.

    Returns:
        A ``sessionmaker`` usable wherever a ``SessionFactory`` is expected.

    Raises:
        ValueError: the engine is neither SQLite nor PostgreSQL.
    """
    return sessionmaker(bind=engine, expire_on_commit=False, info={INFO_KEY: dialect_for(engine)})
