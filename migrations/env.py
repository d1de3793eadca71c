"""Alembic environment for orderflow: one history for workflow and domain tables.

The URL comes from, in order: a connection handed in through
``config.attributes["connection"]`` (tests, ``orders.app.migrate``), the
``sqlalchemy.url`` option of a programmatic ``Config``, or the orderflow
settings (``ORDERS_DATABASE_URL`` or the SQLite file in the data dir).
"""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy.engine import Connection

from orders.app.db import make_engine, normalize_url
from orders.app.settings import Settings
from orders.domain.models import Base

config = context.config
target_metadata = Base.metadata

if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _database_url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    return normalize_url(url or Settings().resolved_database_url())


def _configure(**kwargs: object) -> None:
    context.configure(
        target_metadata=target_metadata,
        render_as_batch=True,
        compare_type=True,
        **kwargs,
    )


def run_migrations_offline() -> None:
    """Emit the SQL of the migrations without a database connection."""
    _configure(url=_database_url(), literal_binds=True, dialect_opts={"paramstyle": "named"})
    with context.begin_transaction():
        context.run_migrations()


def _run_on(connection: Connection) -> None:
    sqlite = connection.dialect.name == "sqlite"
    if sqlite:
        _sqlite_before(connection)
    _configure(connection=connection)
    with context.begin_transaction():
        context.run_migrations()
    if sqlite:
        _sqlite_after(connection)


def _sqlite_before(connection: Connection) -> None:
    """Foreign keys off while migrating, and no leftovers of a failed batch.

    A batch migration rebuilds a table (create ``_alembic_tmp_<t>``, copy, drop
    ``<t>``, rename); with foreign keys enforced, dropping a table that others
    reference fails. The pragma is ignored inside a transaction, so any open
    one is ended first. SQLite runs DDL without a transaction here, so a batch
    that failed half-way may have left ``_alembic_tmp_*`` behind: it holds
    nothing the original table lacks, and would make every later run fail.
    """
    if connection.in_transaction():
        connection.commit()
    connection.exec_driver_sql("PRAGMA foreign_keys = OFF")
    tables = connection.exec_driver_sql(
        "SELECT name FROM sqlite_master WHERE type = 'table'"
    ).scalars()
    leftovers = [name for name in tables if name.startswith("_alembic_tmp_")]
    for name in leftovers:
        connection.exec_driver_sql(f'DROP TABLE "{name}"')
    connection.commit()


def _sqlite_after(connection: Connection) -> None:
    """Check every foreign key (``PRAGMA foreign_key_check``), then enforce them again.

    Raises:
        RuntimeError: rows whose references are broken (table, rowid, parent named).
    """
    if connection.in_transaction():
        connection.commit()
    broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    connection.exec_driver_sql("PRAGMA foreign_keys = ON")
    if broken:
        shown = ", ".join(
            f"{table} row {rowid} -> {parent}" for table, rowid, parent, _ in broken[:10]
        )
        raise RuntimeError(f"migration left {len(broken)} broken foreign key reference(s): {shown}")


def run_migrations_online() -> None:
    """Run the migrations on the handed-in connection or a new engine."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_on(connection)
        return
    engine = make_engine(_database_url())
    try:
        with engine.connect() as connection:
            _run_on(connection)
            connection.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
