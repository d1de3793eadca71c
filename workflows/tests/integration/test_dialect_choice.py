"""The application's session factory carries the dialect it chose once (ADR 0027)."""

from __future__ import annotations

from sqlalchemy import event, select
from sqlalchemy.orm import sessionmaker

from orders.app.db import make_engine, make_session_factory
from workflows.models import Workflow
from workflows.sql import INFO_KEY, POSTGRESQL, SQLITE, dialect_for, dialect_of, dialect_of_factory
from workflows.uow import UnitOfWork


def test_the_session_factory_of_the_database_under_test_carries_its_dialect(
    session_factory, database_url
):
    expected = POSTGRESQL if database_url.startswith("postgres") else SQLITE
    assert session_factory.kw["info"][INFO_KEY] is expected
    assert dialect_of_factory(session_factory) is expected
    with UnitOfWork(session_factory) as uow:
        assert dialect_of(uow.session) is expected
        assert uow.session.get_bind().dialect.name == expected.name
        # a statement built for the chosen dialect runs on the database
        statement = select(Workflow.id).where(expected.one_of(Workflow.id, "ids"))
        assert uow.session.scalars(statement, {"ids": [1, 2]}).all() == []


def test_a_sqlite_app_gets_the_sqlite_dialect(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'choice.db'}")
    try:
        factory = make_session_factory(engine)
        assert factory.kw["info"] == {INFO_KEY: SQLITE}
        with factory() as session:
            assert dialect_of(session) is SQLITE
    finally:
        engine.dispose()


def test_a_postgresql_app_gets_the_postgresql_dialect_without_connecting():
    engine = make_engine("postgresql://nobody@127.0.0.1:1/none")  # nothing listens there
    connects: list[object] = []
    event.listen(engine, "connect", lambda *args: connects.append(args))
    try:
        factory = make_session_factory(engine)
        assert factory.kw["info"] == {INFO_KEY: POSTGRESQL}
        assert dialect_of_factory(factory) is POSTGRESQL
        with factory() as session:
            assert dialect_of(session) is POSTGRESQL
    finally:
        engine.dispose()
    assert connects == []


def test_the_dialect_is_read_from_the_factory_not_chosen_again(tmp_path):
    """A session reads the dialect its factory carries; only a session made without
    one (not by the application) falls back to its bind's."""
    engine = make_engine(f"sqlite:///{tmp_path / 'read.db'}")
    try:
        chosen = sessionmaker(bind=engine, info={INFO_KEY: POSTGRESQL})
        with chosen() as session:
            assert dialect_of(session) is POSTGRESQL
        with sessionmaker(bind=engine)() as session:
            assert dialect_of(session) is SQLITE
            assert session.info[INFO_KEY] is SQLITE  # read once, then kept
        assert dialect_for(engine) is SQLITE
    finally:
        engine.dispose()
