"""SQLite: one writer at a time, lists and rows as one JSON parameter (ADR 0005, 0018, 0019).

- An id list is one JSON text: ``column IN (SELECT value FROM json_each(:ids))``;
  SQLite looks each value up through the column's index, as for a plain ``IN``.
  A batch's rows are one JSON array of arrays, read back with :func:`json_rows`
  (``json_each`` / ``json_extract``, built into SQLite since 3.38 and in every
  common build before that). Per-row values are ints, strings and None, which
  JSON carries exactly.
- The first write of a transaction takes the database's write lock, so nothing
  changes under a writer from then on: a batch locks its workflow rows first,
  and a lone delivery bumps its workflow's version under a version check as
  its first write (:class:`~workflows.sql.base.LockPlan`). There are no row
  locks to order or to skip.
- A bulk load inserts its first row with ``INSERT ... RETURNING`` and the rest,
  with the ids that follow it, by one ``executemany``.
- The planner works from the indexes without statistics: nothing to analyze.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from itertools import repeat
from typing import Any

from sqlalchemy import (
    ColumnElement,
    FromClause,
    Insert,
    Select,
    String,
    Table,
    and_,
    bindparam,
    func,
    insert,
    literal_column,
    select,
    true,
)
from sqlalchemy.engine import Dialect as EngineDialect
from sqlalchemy.orm import Session
from sqlalchemy.sql.selectable import Subquery
from sqlalchemy.types import TypeDecorator, TypeEngine

from workflows.sql.base import Dialect, LockPlan, scalar_defaults
from workflows.uow import SessionFactory

__all__ = ["JSONList", "SQLiteDialect", "json_rows"]


class JSONList(TypeDecorator[Any]):
    """A bound parameter holding a list (or rows, a list of lists) sent as one JSON text.

    Binding takes any iterable of JSON values (ints, strings, None, or lists of
    them) and sends ``json.dumps(list(value))``.

    Raises:
        TypeError: a value JSON cannot encode (a ``Decimal``, a ``datetime``):
            bind such columns as constants, not per row.
    """

    impl = String
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: EngineDialect) -> str | None:
        if value is None:
            return None
        return json.dumps(list(value), separators=(",", ":"))


def json_rows(name: str, columns: Sequence[str], alias: str = "rows") -> Subquery:
    """The rows bound as ``name`` (a JSON array of arrays) as a table to select from.

    Pass the rows as a list of lists (or tuples), one value per column in the
    order of ``columns``; only values JSON encodes exactly (ints, strings,
    None) belong there.

    Args:
        name: the parameter's name.
        columns: the names of the subquery's columns, in row order.
        alias: the subquery's name in the SQL text.

    Returns:
        A subquery with one column per name (``json_extract(value, '$[i]')``).
    """
    each = func.json_each(bindparam(name, type_=JSONList())).table_valued("value").alias("each")
    return select(
        *(
            func.json_extract(each.c.value, literal_column(f"'$[{i}]'")).label(column)
            for i, column in enumerate(columns)
        )
    ).subquery(alias)


class SQLiteDialect(Dialect):
    """SQLite's forms (see the module docstring)."""

    name = "sqlite"
    marking_rechecks = False
    writers_at_once = 1

    def one_of(self, column: Any, name: str) -> ColumnElement[bool]:
        """See :meth:`Dialect.one_of`: ``column IN (SELECT value FROM json_each(:name))``."""
        values = func.json_each(bindparam(name, type_=JSONList())).table_valued("value")
        return column.in_(select(values.c.value).scalar_subquery())

    def one_of_again(self, column: Any, name: str) -> tuple[ColumnElement[bool], ...]:
        """See :meth:`Dialect.one_of_again`: nothing (SQLite plans by its indexes)."""
        return ()

    def among(self, column: Any, ids: Iterable[Any]) -> ColumnElement[bool]:
        """See :meth:`Dialect.among`: a plain ``IN`` list."""
        return column.in_(list(ids))

    def rows(
        self, name: str, columns: Mapping[str, TypeEngine[Any]], alias: str | None = None
    ) -> FromClause:
        """See :meth:`Dialect.rows`: :func:`json_rows` (its default alias: ``rows``)."""
        return json_rows(name, tuple(columns), alias=alias or "rows")

    def bind_rows(self, name: str, columns: Mapping[str, Sequence[Any]]) -> dict[str, Any]:
        """See :meth:`Dialect.bind_rows`: the rows as one JSON array of arrays under ``name``."""
        return {name: list(zip(*columns.values(), strict=True))}

    def greatest(self, *values: Any) -> ColumnElement[Any]:
        """See :meth:`Dialect.greatest`: SQLite's scalar ``max(a, b, ...)``."""
        return func.max(*values)

    def unindexed(self, column: Any) -> ColumnElement[Any]:
        """See :meth:`Dialect.unindexed`: ``column || ''``."""
        return column.concat(literal_column("''"))  # type: ignore[no-any-return]

    def lock_in_order(self, column: Any, name: str) -> tuple[ColumnElement[bool], ...]:
        """See :meth:`Dialect.lock_in_order`: the list alone (the write locks the database)."""
        return (self.one_of(column, name),)

    def for_update(self, statement: Select[Any], *order: Any) -> Select[Any]:
        """See :meth:`Dialect.for_update`: unchanged (no row locks)."""
        return statement

    def not_locked(self, column: Any, ids: Sequence[Any], *criteria: Any) -> ColumnElement[bool]:
        """See :meth:`Dialect.not_locked`: every row (no row locks)."""
        return and_(self.among(column, ids), *criteria)

    def lock_plan(self, workflows: int, conflicts: int) -> LockPlan:
        """See :meth:`Dialect.lock_plan`: a batch locks first, a lone delivery fences.

        A batch's first statement (the lock) takes the database's write lock, so
        nothing changes under it; a lone delivery reads its step row first and
        bumps its workflow's version only when it claims it, so a duplicate takes
        no lock at all.
        """
        return LockPlan.LOCK_BEFORE_READING if workflows > 1 else LockPlan.FENCE_BEFORE_EFFECT

    def _skip_existing(
        self, table: Table, values: Select[Any], names: list[str], unique: tuple[str, ...]
    ) -> Insert:
        """See :meth:`Dialect._skip_existing`: ``ON CONFLICT (unique) DO NOTHING``.

        SQLite would read the ``ON`` after a ``SELECT ... FROM`` without a ``WHERE``
        as the start of a join constraint, so the rows' ``SELECT`` gets ``WHERE true``
        (the parsing ambiguity its upsert documentation names).
        """
        from sqlalchemy.dialects.sqlite import insert as upsert

        return (
            upsert(table)
            .from_select(names, values.where(true()))
            .on_conflict_do_nothing(index_elements=list(unique))
        )

    def _load(
        self,
        session: Session,
        table: Table,
        columns: Mapping[str, Sequence[Any]],
        constants: dict[str, Any],
        ids: bool,
    ) -> list[int]:
        """The first row alone with RETURNING, the rest with the ids that follow it.

        ``INSERT ... RETURNING`` of many rows cannot promise its rows in parameter
        order on SQLite, so SQLAlchemy sends one statement per row for it (18,000
        statements to place 3,000 orders, most of placement's time and all of it
        inside the write lock). The first row's insert takes SQLite's write lock
        (nothing else writes until this transaction ends) and gets ``max(rowid) +
        1``; no other row can then be above it, so the rows after it take the ids
        that follow, in order, by one ``executemany``.
        """
        if not ids:
            _executemany(session, table, columns, constants, None)
            return []
        count = len(next(iter(columns.values())))
        first_row = {name: values[0] for name, values in columns.items()} | constants
        first = session.scalars(insert(table).returning(table.c.id), [first_row]).one()
        if count > 1:
            rest = {name: values[1:] for name, values in columns.items()}
            _executemany(session, table, rest, constants, first + 1)
        return list(range(first, first + count))

    def analyze_never_analyzed(
        self, session_factory: SessionFactory, tables: Sequence[Table]
    ) -> list[str]:
        """See :meth:`Dialect.analyze_never_analyzed`: [] (SQLite plans by its indexes)."""
        return []


def _executemany(
    session: Session,
    table: Table,
    rows: Mapping[str, Sequence[Any]],
    constants: dict[str, Any],
    first_id: int | None,
) -> None:
    """One ``executemany`` of the rows (column name -> its values), converted column by
    column.

    SQLAlchemy's executemany builds and converts a parameter dict per row (about
    two thirds of placing's CPU); here each column's bind processor (the same
    conversions: JSON text, UTC timestamps) is looked up once, run over the column's
    values (a column without one is passed as it is), and the rows go to the driver
    as tuples. Constants and the scalar defaults of the columns left out are
    converted once. ``first_id``: ids ``first_id, first_id + 1, ...`` for the rows in
    order; None leaves the id to SQLite.
    """
    dialect = session.get_bind().dialect
    names = list(rows)
    fixed = constants | scalar_defaults(table, [*names, *constants])
    columns = [table.c[name] for name in [*names, *fixed]]
    processors = [c.type.dialect_impl(dialect).bind_processor(dialect) for c in columns]
    converted: list[Iterable[Any]] = [
        values if process is None else list(map(process, values))
        for values, process in zip(rows.values(), processors[: len(names)], strict=True)
    ]
    count = len(next(iter(rows.values())))
    if first_id is not None:
        converted.insert(0, range(first_id, first_id + count))
    for value, process in zip(fixed.values(), processors[len(names) :], strict=True):
        converted.append(repeat(value if process is None else process(value), count))
    quote = dialect.identifier_preparer.quote
    column_names = (["id"] if first_id is not None else []) + [c.name for c in columns]
    statement = (
        f"INSERT INTO {quote(table.name)} ({', '.join(quote(n) for n in column_names)}) "
        f"VALUES ({', '.join('?' for _ in column_names)})"
    )
    session.connection().exec_driver_sql(statement, list(zip(*converted, strict=True)))
