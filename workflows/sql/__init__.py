"""Everything that differs between SQLite and PostgreSQL, one module per database (ADR 0027).

The dialect is chosen once, when the application builds its session factory
(``orders.app.db.make_session_factory`` stores it in the factory's ``info``,
which every session it makes carries); code holding a session reads it with
:func:`dialect_of`. Statements are built once per dialect with
:func:`per_dialect`, on first use, and looked up by the session's dialect.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import Session

from workflows.sql.base import Dialect, LockPlan
from workflows.sql.postgresql import PostgreSQLDialect
from workflows.sql.sqlite import SQLiteDialect
from workflows.uow import SessionFactory

__all__ = [
    "DIALECTS",
    "INFO_KEY",
    "POSTGRESQL",
    "SQLITE",
    "Dialect",
    "LockPlan",
    "PerDialect",
    "dialect_for",
    "dialect_of",
    "dialect_of_factory",
    "per_dialect",
]

SQLITE: Dialect = SQLiteDialect()
POSTGRESQL: Dialect = PostgreSQLDialect()
DIALECTS: tuple[Dialect, ...] = (SQLITE, POSTGRESQL)
"""Every dialect, each one instance (statements built per dialect are keyed by it)."""

INFO_KEY = "workflows.sql.dialect"
"""The key of the dialect in a session factory's (and its sessions') ``info`` dict."""

_BY_NAME = {d.name: d for d in DIALECTS}

T = TypeVar("T")


def dialect_for(engine_or_url: Engine | Connection | URL | str) -> Dialect:
    """The dialect of a database, by its engine, connection or URL.

    Args:
        engine_or_url: an ``Engine``, a ``Connection``, or a database URL (text
            or ``URL``); ``postgres://`` and any PostgreSQL driver count as PostgreSQL.

    Returns:
        :data:`SQLITE` or :data:`POSTGRESQL`.

    Raises:
        ValueError: another database (orderflow runs on these two only).
        sqlalchemy.exc.ArgumentError: a URL that does not parse.
    """
    if isinstance(engine_or_url, Engine | Connection):
        name = engine_or_url.dialect.name
    else:
        name = make_url(engine_or_url).get_backend_name()
        name = "postgresql" if name == "postgres" else name
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"orderflow runs on SQLite or PostgreSQL, not {name!r}") from None


def dialect_of(session: Session) -> Dialect:
    """The dialect of the database ``session`` runs on.

    Read from the session's ``info`` (put there by the session factory the
    application built); a session made otherwise gets it from its bind once.

    Args:
        session: any session bound to an engine or connection.

    Returns:
        :data:`SQLITE` or :data:`POSTGRESQL`.

    Raises:
        ValueError: another database.
    """
    info = session.info
    dialect = info.get(INFO_KEY)
    if dialect is None:
        dialect = info[INFO_KEY] = dialect_for(session.get_bind())
    return dialect  # type: ignore[no-any-return]


def dialect_of_factory(session_factory: SessionFactory) -> Dialect:
    """The dialect of the sessions ``session_factory`` makes (no connection is opened).

    Raises:
        ValueError: another database.
    """
    with session_factory() as session:
        return dialect_of(session)


class PerDialect(Mapping[Dialect, T]):
    """What :func:`per_dialect` returns: every dialect's form of one thing, each built
    by ``build`` the first time it is looked up, then kept.

    A process serves one database, so the other dialect's form is never built there,
    and none is built before a statement is first run (module import stays cheap: a
    worker's start-up CPU). Two threads looking up an unbuilt form at once may both
    build it; the first one stored is the one every lookup returns.
    """

    def __init__(self, build: Callable[[Dialect], T]) -> None:
        self._build = build
        self._built: dict[Dialect, T] = {}

    def __getitem__(self, dialect: Dialect) -> T:
        """The form of ``dialect``, built now if it is the first lookup.

        Raises:
            KeyError: not one of :data:`DIALECTS`.
        """
        try:
            return self._built[dialect]
        except KeyError:
            if dialect not in DIALECTS:
                raise
        return self._built.setdefault(dialect, self._build(dialect))

    def __iter__(self) -> Iterator[Dialect]:
        return iter(DIALECTS)

    def __len__(self) -> int:
        return len(DIALECTS)


def per_dialect(build: Callable[[Dialect], T]) -> PerDialect[T]:
    """``build`` run for each dialect, at most once, when its form is first looked up:
    dialect -> what it built (e.g. a statement).

    Args:
        build: makes the dialect's form of something from the pieces it gives.

    Returns:
        A mapping to index with :func:`dialect_of`'s answer.
    """
    return PerDialect(build)
