"""A revision that rebuilds a referenced table, applied to a database holding data.

On SQLite a batch migration rebuilds ``orders`` (new table, copy, drop the old,
rename); with foreign keys enforced the drop fails because order lines, step
rows and ledger rows reference it. The history here is the real one plus one
test revision that drops a column of ``orders`` (and adds it back on the way
down), forced to rebuild the table on SQLite; it runs up, down and up again on
a populated database (SQLite by default, PostgreSQL with ``TEST_DATABASE_URL``).
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import func, inspect, select, text

from orders.app.db import make_engine, make_session_factory, normalize_url
from orders.app.migrate import MIGRATIONS_DIR, head_revision, upgrade_database
from orders.app.placement import place
from orders.domain.models import Order, OrderLine
from orders.sources.drafts import RANDOM
from workflows.models import WorkflowStep

REBUILD_REVISION = '''"""test only: drop orders.source_key (rebuilds orders on SQLite)"""

import sqlalchemy as sa
from alembic import op

revision = "9999_rebuild_orders"
down_revision = "{head}"
branch_labels = None
depends_on = None


def _recreate() -> str:
    # SQLite rebuilds the table; PostgreSQL alters it in place
    return "always" if op.get_context().dialect.name == "sqlite" else "auto"


def upgrade() -> None:
    with op.batch_alter_table("orders", recreate=_recreate()) as batch:
        batch.drop_column("source_key")


def downgrade() -> None:
    with op.batch_alter_table("orders", recreate=_recreate()) as batch:
        batch.add_column(sa.Column("source_key", sa.Integer(), nullable=True))
'''


@pytest.fixture
def history(tmp_path: Path) -> Path:
    """A copy of the migration history with the table-rebuilding revision on top."""
    copy = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "versions" / "9999_rebuild_orders.py").write_text(
        REBUILD_REVISION.format(head=head_revision())
    )
    return copy


def config_for(history: Path, url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(history))
    config.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    config.attributes["configure_logger"] = False
    return config


def counts(engine) -> tuple[int, int, int]:
    with make_session_factory(engine)() as session:
        return (
            session.scalar(select(func.count()).select_from(Order)),
            session.scalar(select(func.count()).select_from(OrderLine)),
            session.scalar(select(func.count()).select_from(WorkflowStep)),
        )


def orders_columns(engine) -> set[str]:
    return {c["name"] for c in inspect(engine).get_columns("orders")}


def test_rebuilding_a_referenced_table_keeps_the_data_up_down_up(database_url, history, catalog):
    engine = make_engine(database_url)
    try:
        place(make_session_factory(engine), 5, source=RANDOM, rng=random.Random(6))
        before = counts(engine)
        assert before[0] == 5 and before[1] > 0
        config = config_for(history, database_url)

        command.upgrade(config, "head")
        assert "source_key" not in orders_columns(engine)
        assert counts(engine) == before
        command.downgrade(config, "-1")
        assert "source_key" in orders_columns(engine)
        command.upgrade(config, "head")
        assert counts(engine) == before

        tables = set(inspect(engine).get_table_names())
        assert not {t for t in tables if t.startswith("_alembic_tmp_")}
        if engine.dialect.name == "sqlite":
            with engine.connect() as connection:
                assert connection.execute(text("PRAGMA foreign_key_check")).fetchall() == []
                assert connection.execute(text("PRAGMA foreign_keys")).scalar() == 1
    finally:
        engine.dispose()


def test_a_leftover_batch_table_of_a_failed_run_does_not_block_later_upgrades(database_url):
    engine = make_engine(database_url)
    try:
        if engine.dialect.name != "sqlite":
            pytest.skip("only SQLite runs DDL outside a transaction")
        upgrade_database(database_url, "0001")
        with engine.begin() as connection:
            connection.execute(text("CREATE TABLE _alembic_tmp_workflow_steps (id INTEGER)"))
        upgrade_database(database_url)
        assert "_alembic_tmp_workflow_steps" not in inspect(engine).get_table_names()
    finally:
        engine.dispose()
