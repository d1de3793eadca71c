"""An id-list condition keeps one SQL text on PostgreSQL and selects the same rows everywhere."""

from __future__ import annotations

import pytest
from sqlalchemy import bindparam, create_engine, func, insert, select
from sqlalchemy.orm import Session

from orders.app.db import make_engine
from orders.app.migrate import upgrade_database
from workflows.columns import utcnow
from workflows.models import Workflow
from workflows.sql import SQLITE, dialect_of
from workflows.sql.sqlite import JSONList


def add_workflows(session, count: int) -> list[int]:
    """Insert ``count`` workflow rows; returns their ids in insert order."""
    now = utcnow()
    return session.scalars(
        insert(Workflow).returning(Workflow.id, sort_by_parameter_order=True),
        [
            {"kind": "k", "subject_id": i, "status": "running", "version": 1}
            | {"created_at": now, "updated_at": now}
            for i in range(count)
        ],
    ).all()


def test_the_postgresql_text_does_not_grow_with_the_list():
    """Regression: ``IN`` rendered a parameter per id, so psycopg re-parsed every
    statement over more than 50 ids (a fifth of a worker's CPU)."""
    engine = create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")  # never connects
    with Session(engine) as session:
        texts = {
            str(
                select(Workflow.id)
                .where(dialect_of(session).among(Workflow.id, range(n)))
                .compile(engine, compile_kwargs={"render_postcompile": True})
            )
            for n in (1, 3, 150, 1000)
        }
    engine.dispose()
    assert len(texts) == 1
    assert "= ANY (" in texts.pop()


def test_among_selects_exactly_the_listed_rows(session_factory):
    with session_factory() as session:
        ids = add_workflows(session, 80)
        wanted = ids[::3]
        for chosen in ([], wanted[:1], wanted):
            got = session.scalars(
                select(Workflow.id).where(dialect_of(session).among(Workflow.id, iter(chosen)))
            ).all()
            assert sorted(got) == sorted(chosen)


def test_the_sqlite_text_does_not_grow_with_the_list():
    """Regression: an expanding ``IN`` rendered a parameter per id on SQLite, so
    SQLAlchemy rendered the statement again for every list length and converted
    every value in Python, inside the write lock."""
    engine = create_engine("sqlite://")
    statement = select(Workflow.id).where(SQLITE.one_of(Workflow.id, "ids"))
    with engine.connect() as conn:
        Workflow.__table__.create(conn)
        texts = set()
        for n in (0, 1, 3, 150, 1000):
            result = conn.execute(statement, {"ids": list(range(n))})
            texts.add(result.context.statement)
            result.close()
    engine.dispose()
    assert len(texts) == 1
    assert "json_each(?)" in texts.pop()


def test_one_of_selects_exactly_the_listed_rows(session_factory):
    with session_factory() as session:
        ids = add_workflows(session, 80)
        statement = select(Workflow.id).where(dialect_of(session).one_of(Workflow.id, "ids"))
        wanted = ids[::3]
        for chosen in ([], wanted[:1], wanted, wanted + wanted[:2], [max(ids) + 1]):
            got = session.scalars(statement, {"ids": chosen}).all()
            assert sorted(got) == sorted(set(chosen) & set(ids))


def test_sqlite_looks_listed_ids_up_through_the_index(tmp_path):
    """The JSON list must not turn a lookup per id into a scan of the table."""
    url = f"sqlite:///{tmp_path / 'plan.db'}"
    upgrade_database(url)
    engine = make_engine(url)
    statement = select(Workflow.id).where(SQLITE.one_of(Workflow.id, "ids"))
    compiled = statement.compile(engine)
    try:
        with engine.connect() as conn:
            plan = [
                row[3]
                for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}", ("[1, 2, 3]",))
            ]
    finally:
        engine.dispose()
    assert any(step.startswith("SEARCH workflows") for step in plan), plan
    assert not any(step.startswith("SCAN workflows") for step in plan), plan


@pytest.mark.parametrize("values", [[1, 2**40, -3], ["a", None, "é\"'"]])
def test_a_list_parameter_round_trips_its_values(values):
    engine = create_engine("sqlite://")
    each = func.json_each(bindparam("v", type_=JSONList())).table_valued("value")
    with engine.connect() as conn:
        got = conn.execute(select(each.c.value), {"v": iter(values)}).scalars().all()
    engine.dispose()
    assert got == values
