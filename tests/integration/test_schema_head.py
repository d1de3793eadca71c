"""The start-up schema check: one query when the database is at the head, Alembic otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from orders.app.bootstrap import build
from orders.app.db import make_engine
from orders.app.errors import SchemaNotMigrated
from orders.app.migrate import MIGRATIONS_DIR, head_revision, upgrade_database
from orders.app.schema_head import VERSIONS_DIR, at_head, read_head, script_head
from orders.app.settings import Settings


def test_the_head_read_from_the_version_files_is_alembics_head() -> None:
    assert script_head() == head_revision()


def _revision(folder: Path, name: str, revision: str, down: str) -> None:
    (folder / f"{name}.py").write_text(
        f'revision: str = "{revision}"\ndown_revision: str | None = {down}\n'
    )


def test_a_history_it_cannot_read_plainly_is_left_to_alembic(tmp_path: Path) -> None:
    _revision(tmp_path, "a", "a", "None")
    _revision(tmp_path, "b", "b", '"a"')
    assert read_head(tmp_path) == "b"
    _revision(tmp_path, "c", "c", '"a"')  # two heads
    assert read_head(tmp_path) is None
    (tmp_path / "c.py").write_text('revision = "c"\ndown_revision = ("a", "b")\n')  # a merge
    assert read_head(tmp_path) is None
    assert read_head(tmp_path / "empty") is None


def test_at_head_only_when_alembic_version_holds_the_head(database_url: str) -> None:
    engine = make_engine(database_url)
    try:
        assert not at_head(engine)  # no alembic_version table
        upgrade_database(database_url)
        assert at_head(engine)
        with engine.begin() as connection:
            connection.execute(text("UPDATE alembic_version SET version_num = '0001'"))
        assert not at_head(engine)
    finally:
        engine.dispose()


def test_a_configured_database_behind_the_head_is_still_refused(database_url: str) -> None:
    upgrade_database(database_url, "0006")
    app = build(Settings(database_url=database_url))
    with pytest.raises(SchemaNotMigrated, match="0006, not"):
        _ = app.engine
    upgrade_database(database_url)
    app = build(Settings(database_url=database_url))
    try:
        assert app.engine is not None
    finally:
        app.close()


def test_the_migrations_folder_is_the_one_alembic_reads() -> None:
    assert MIGRATIONS_DIR / "versions" == VERSIONS_DIR
