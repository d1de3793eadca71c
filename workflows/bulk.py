"""Multi-row inserts that hand back the new ids: COPY on PostgreSQL, INSERT elsewhere.

Placement writes four rows' kinds per order (orders, lines, workflows, steps) in
one transaction. On PostgreSQL the multi-row ``INSERT ... RETURNING`` that
SQLAlchemy renders for it is one statement with a bound parameter per value
(9,000 for 1,000 step rows): psycopg parses its placeholders on the client and
the server parses and plans it, about 100-200 ms per 1,000 step rows, which made
placing 2,000 orders take 2-4 s of wall clock for 0.8 s of CPU. There the ids are
drawn from the table's sequence first (one ``nextval`` per row in one query) and
the rows sent by ``COPY ... FROM STDIN`` on the session's own connection, so
they commit or roll back with the rest of the transaction. SQLite inserts the
first row with ``INSERT ... RETURNING`` and the rest, with the ids that follow
it, by one ``executemany`` (:func:`_insert_sqlite`); other databases keep
``INSERT ... RETURNING``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import JSON, Table, func, insert, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session


def insert_rows(
    session: Session, table: Table, rows: Sequence[Mapping[str, Any]], *, ids: bool = True
) -> list[int]:
    """Insert ``rows`` into ``table`` in the session's transaction.

    Args:
        session: the caller's session, inside its transaction (nothing is committed).
        table: a table whose integer primary key column is ``id`` (with a sequence
            on PostgreSQL).
        rows: column name -> value, every row with the same keys; columns left out
            get their scalar Python-side default, or the server's.
        ids: return the new rows' ids (False: return an empty list).

    Returns:
        The new ids, one per row in the same order (ascending on PostgreSQL), or [].

    Raises:
        sqlalchemy.exc.IntegrityError: a row breaks a constraint (nothing of this call
            is kept once the caller rolls back).
        sqlalchemy.exc.DBAPIError: any other database error.
    """
    if not rows:
        return []
    dialect = session.get_bind().dialect.name
    copyable = _copyable(table, rows[0])
    if dialect == "sqlite" and copyable:
        if not ids:
            _executemany_sqlite(session, table, rows, None)
            return []
        return _insert_sqlite(session, table, rows)
    if dialect != "postgresql" or not copyable:
        if not ids:
            session.execute(insert(table), list(rows))
            return []
        statement = insert(table).returning(table.c.id, sort_by_parameter_order=True)
        return list(session.scalars(statement, list(rows)).all())
    return _copy(session, table, rows, ids)


def _insert_sqlite(session: Session, table: Table, rows: Sequence[Mapping[str, Any]]) -> list[int]:
    """SQLite: the first row alone with RETURNING, the rest with the ids that follow it.

    ``INSERT ... RETURNING`` of many rows cannot promise its rows in parameter
    order on SQLite, so SQLAlchemy sends one statement per row for it (18,000
    statements to place 3,000 orders, most of placement's time and all of it
    inside the write lock). The first row's insert takes SQLite's write lock
    (nothing else writes until this transaction ends) and gets ``max(rowid) +
    1``; no other row can then be above it, so the rows after it take the ids
    that follow, in order, by one ``executemany``.
    """
    first = session.scalars(insert(table).returning(table.c.id), [dict(rows[0])]).one()
    if len(rows) > 1:
        _executemany_sqlite(session, table, rows[1:], first + 1)
    return list(range(first, first + len(rows)))


def _executemany_sqlite(
    session: Session, table: Table, rows: Sequence[Mapping[str, Any]], first_id: int | None
) -> None:
    """SQLite: one ``executemany`` of the rows, their values converted column by column.

    SQLAlchemy's executemany builds and converts a parameter dict per row (about
    two thirds of placing's CPU); here each column's bind processor (the same
    conversions: JSON text, UTC timestamps) is looked up once and the rows go to
    the driver as tuples. Columns left out get their scalar defaults, as
    SQLAlchemy would give them. ``first_id``: ids ``first_id, first_id + 1, ...``
    for the rows in order; None leaves the id to SQLite.
    """
    dialect = session.get_bind().dialect
    names = list(rows[0])
    defaults = _scalar_defaults(table, rows[0])
    columns = [table.c[name] for name in [*names, *defaults]]
    processors = [c.type.dialect_impl(dialect).bind_processor(dialect) for c in columns]
    row_processors = processors[: len(names)]
    default_values = tuple(
        value if process is None else process(value)
        for value, process in zip(defaults.values(), processors[len(names) :], strict=True)
    )
    quote = dialect.identifier_preparer.quote
    column_names = (["id"] if first_id is not None else []) + [c.name for c in columns]
    statement = (
        f"INSERT INTO {quote(table.name)} ({', '.join(quote(n) for n in column_names)}) "
        f"VALUES ({', '.join('?' for _ in column_names)})"
    )
    parameters = []
    for i, row in enumerate(rows):
        values = tuple(
            row[name] if process is None else process(row[name])
            for name, process in zip(names, row_processors, strict=True)
        )
        head = (first_id + i,) if first_id is not None else ()
        parameters.append(head + values + default_values)
    session.connection().exec_driver_sql(statement, parameters)


def _copyable(table: Table, first: Mapping[str, Any]) -> bool:
    """Every column left out of the rows has a scalar default, a server default or none."""
    for column in table.columns:
        if column.key in first or column.primary_key:
            continue
        default = column.default
        if default is not None and not getattr(default, "is_scalar", False):
            return False
    return True


def _scalar_defaults(table: Table, first: Mapping[str, Any]) -> dict[str, Any]:
    """Column key -> scalar Python-side default, for the columns the rows leave out."""
    return {
        column.key: column.default.arg  # type: ignore[union-attr]
        for column in table.columns
        if column.key not in first
        and not column.primary_key
        and column.default is not None
        and getattr(column.default, "is_scalar", False)
    }


def _copy(
    session: Session, table: Table, rows: Sequence[Mapping[str, Any]], ids: bool
) -> list[int]:
    import psycopg  # PostgreSQL only: SQLite processes never load the driver

    names = list(rows[0])
    defaults = _scalar_defaults(table, rows[0])
    names += list(defaults)
    as_json = {name for name in names if isinstance(table.c[name].type, JSON)}
    new_ids: list[int] = []
    if ids:
        sequence = func.pg_get_serial_sequence(table.name, "id")
        new_ids = sorted(
            session.scalars(
                select(func.nextval(sequence)).select_from(func.generate_series(1, len(rows)))
            ).all()
        )
    columns = (["id"] if ids else []) + names
    statement = f"COPY {table.name} ({', '.join(columns)}) FROM STDIN"
    connection = session.connection().connection.driver_connection
    try:
        with connection.cursor() as cursor, cursor.copy(statement) as copy:  # type: ignore[union-attr]
            for i, row in enumerate(rows):
                values = [
                    json.dumps(row[name]) if name in as_json else row[name] for name in rows[0]
                ]
                values += defaults.values()
                copy.write_row([new_ids[i], *values] if ids else values)
    except psycopg.Error as exc:  # what callers of an INSERT expect: SQLAlchemy's errors
        raise DBAPIError.instance(statement, None, exc, psycopg.Error) from exc
    return new_ids
