"""Schema migrations: run the Alembic history in ``migrations/`` from code.

Several processes may start at once on one database (workers and the CLI);
``upgrade_database`` serializes them with a file lock beside a SQLite file or
a PostgreSQL advisory lock, so the history is applied exactly once.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from filelock import FileLock
from sqlalchemy import Connection, text

from orders.app.db import make_engine, normalize_url, sqlite_path

__all__ = [
    "MIGRATIONS_DIR",
    "alembic_config",
    "current_revision",
    "head_revision",
    "upgrade_database",
]

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"
_PG_LOCK_KEY = 0x6F726466  # "ordf": advisory lock id held while migrating


def alembic_config(url: str | None = None, connection: Connection | None = None) -> Config:
    """Build an Alembic ``Config`` for orderflow's migrations without an ini file.

    Args:
        url: database URL; when None, ``migrations/env.py`` reads the settings.
        connection: an open connection for ``env.py`` to use instead of a new engine.

    Returns:
        A ``Config`` for ``alembic.command`` functions.
    """
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url is not None:
        config.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    config.attributes["configure_logger"] = False
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """Return the newest revision id of the migration history."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise RuntimeError(f"no migrations found in {MIGRATIONS_DIR}")
    return head


def current_revision(url: str) -> str | None:
    """Return the revision the database at ``url`` is at, or None if never migrated.

    Raises:
        sqlalchemy.exc.OperationalError: when the database cannot be reached.
    """
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()


def upgrade_database(url: str, revision: str = "head") -> None:
    """Bring the database at ``url`` to ``revision``; a no-op when already there.

    Safe to call from many processes at once: SQLite is guarded by a file
    lock ``<db file>.migrate.lock``, PostgreSQL by an advisory lock.

    Args:
        url: SQLAlchemy URL; a SQLite file and its directory are created.
        revision: target revision (default the newest).

    Raises:
        sqlalchemy.exc.OperationalError: when the database cannot be reached.
        filelock.Timeout: when another process holds the SQLite lock over 120 s.
    """
    path = sqlite_path(normalize_url(url))
    engine = make_engine(url)
    try:
        if path is not None:
            with FileLock(f"{path}.migrate.lock", timeout=120):
                _upgrade_on(engine.connect(), revision, postgres=False)
        else:
            _upgrade_on(engine.connect(), revision, postgres=engine.dialect.name == "postgresql")
    finally:
        engine.dispose()


def _upgrade_on(connection: Connection, revision: str, *, postgres: bool) -> None:
    with connection:
        if postgres:
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
        command.upgrade(alembic_config(connection=connection), revision)
        connection.commit()
