"""An id-list condition keeps one SQL text on PostgreSQL and selects the same rows everywhere."""

from __future__ import annotations

import pytest
from sqlalchemy import (
    BigInteger,
    Integer,
    String,
    bindparam,
    create_engine,
    event,
    func,
    insert,
    select,
)
from sqlalchemy.exc import DataError
from sqlalchemy.orm import Session

from orders.app.db import make_engine
from orders.app.migrate import upgrade_database
from workflows.columns import utcnow
from workflows.models import Workflow
from workflows.sql import POSTGRESQL, SQLITE, dialect_of
from workflows.sql.postgresql import array_literal
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


def require_postgresql(session_factory) -> None:
    if session_factory.kw["bind"].dialect.name != "postgresql":
        pytest.skip("PostgreSQL's array parameters")


def test_postgresql_sends_an_id_list_as_one_text(session_factory):
    """Regression: psycopg adapted a list value by value in Python (a type check, a
    dumper call and a search for characters to escape each), most of a step worker's
    parameter conversion; the list now travels as its array literal, cast by the server."""
    require_postgresql(session_factory)
    sent = []

    def capture(conn, cursor, sql, parameters, context, executemany):
        sent.append(parameters)

    with session_factory() as session:
        ids = add_workflows(session, 5)
        connection = session.connection()
        event.listen(connection, "before_cursor_execute", capture)
        try:
            statement = select(Workflow.id).where(dialect_of(session).one_of(Workflow.id, "ids"))
            got = session.scalars(statement, {"ids": ids[1:4]}).all()
        finally:
            event.remove(connection, "before_cursor_execute", capture)
    assert sorted(got) == ids[1:4]
    assert list(sent[-1].values()) == ["{" + ",".join(map(str, ids[1:4])) + "}"]


@pytest.mark.parametrize(
    ("column_type", "values"),
    [
        (Integer(), [3, -1, 0, None, 2**31 - 1]),
        (BigInteger(), [2**40, None, -(2**40)]),
        (Integer(), []),
        (
            String(),
            [
                "a",
                None,
                "",
                "NULL",
                "null",
                "é\"'",
                "a,b",
                "{x}",
                "}",
                "back\\slash",
                '\\"',
                " spaced ",
            ],
        ),
    ],
)
def test_a_postgresql_array_parameter_round_trips_its_values(session_factory, column_type, values):
    """Every value comes back as itself, in order: no text can add an element, nest an
    array, end the literal or turn into NULL."""
    require_postgresql(session_factory)
    rows = POSTGRESQL.rows("v", {"value": column_type})
    with session_factory() as session:
        got = session.scalars(select(rows.c.value), POSTGRESQL.bind_rows("v", {"value": values}))
        assert list(got) == values


def test_a_postgresql_int_array_refuses_what_is_not_an_int(session_factory):
    """A text among ints is sent quoted: it cannot pass for several elements."""
    require_postgresql(session_factory)
    statement = select(Workflow.id).where(POSTGRESQL.one_of(Workflow.id, "ids"))
    for bad in (["1,2"], [True], [1.5]):
        with session_factory() as session, pytest.raises(DataError):
            session.execute(statement, {"ids": bad})


def test_array_literal_quotes_every_value_that_is_not_an_int():
    assert array_literal([1, None, 22]) == "{1,NULL,22}"
    assert array_literal(iter([5])) == "{5}"
    assert array_literal(["a", None, 'b"c', "d\\e", 7]) == '{"a",NULL,"b\\"c","d\\\\e","7"}'
