"""PostgreSQL: arrays as parameters, row locks in id order, COPY, planner statistics.

- An id list is one array parameter (``column = ANY(:ids)``) and a batch's rows
  one array per column read by ``unnest`` (ADR 0015): a statement's text is the
  same for every batch size, so it is parsed once and prepared by the server.
  The planner does not carry ``= ANY`` across a join or an ``IN``, so the list
  is given to both sides (:meth:`PostgreSQLDialect.one_of_again`, ADR 0020).
- Rows are locked, not the database: a step batch runs its effect before it
  locks its workflow rows, in id order, for the marking only, and a rerun locks
  them first (ADR 0014, :class:`~workflows.sql.base.LockPlan`); writers that
  must never wait skip locked rows.
- A bulk load draws its ids from the table's sequence and sends the rows by
  ``COPY ... FROM STDIN`` on the session's own connection, so they commit or
  roll back with the rest of the transaction. The multi-row ``INSERT ...
  RETURNING`` it replaced was one statement with a bound parameter per value
  (9,000 for 1,000 step rows), 100-200 ms per 1,000 step rows to parse and plan.
- Tables a first bulk load filled are analyzed right after its commit (ADR 0020).
"""

from __future__ import annotations

import json
import logging
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import (
    ARRAY,
    JSON,
    ColumnElement,
    Engine,
    FromClause,
    Insert,
    Select,
    String,
    Table,
    any_,
    bindparam,
    func,
    select,
    text,
)
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session
from sqlalchemy.types import TypeEngine

from workflows.sql.base import Dialect, LockPlan, scalar_defaults
from workflows.uow import SessionFactory, UnitOfWork

__all__ = ["LOCK_TIMEOUT_MS", "PostgreSQLDialect"]

log = logging.getLogger(__name__)

#: longest wait for another ANALYZE or VACUUM of the same table (autovacuum's), ms
LOCK_TIMEOUT_MS = 1000

# per engine, the tables known to have statistics: once a table has them it keeps
# them (autovacuum's and ours), so a process asks the catalog about it once, not at
# every placement (paced placement places a few orders per call)
_HAVE_STATISTICS: weakref.WeakKeyDictionary[Engine, set[str]] = weakref.WeakKeyDictionary()

_NEVER_ANALYZED = text(
    "SELECT c.relname FROM pg_class c WHERE c.oid = ANY(CAST(:names AS regclass[])) "
    "AND c.reltuples < 0 ORDER BY c.relname"
).bindparams(bindparam("names", type_=ARRAY(String)))


def _array_of(column_type: Any) -> ARRAY:
    # An explicit cast to varchar(n)[] cuts a longer text short without a word; cast to
    # varchar[] and the column's own length check refuses it, as a plain insert does.
    if isinstance(column_type, String) and column_type.length is not None:
        column_type = String()
    return ARRAY(column_type)


class PostgreSQLDialect(Dialect):
    """PostgreSQL's forms (see the module docstring)."""

    name = "postgresql"
    marking_rechecks = True

    def one_of(self, column: Any, name: str) -> ColumnElement[bool]:
        """See :meth:`Dialect.one_of`: ``column = ANY(:name)``, one array parameter."""
        return column == any_(bindparam(name, type_=ARRAY(column.type)))

    def one_of_again(self, column: Any, name: str) -> tuple[ColumnElement[bool], ...]:
        """See :meth:`Dialect.one_of_again`: the same array, compared with ``column``.

        Without it the other side of a join is found by hashing the whole table,
        and the outer rows of an ``IN`` by scanning it (ADR 0020).
        """
        return (self.one_of(column, name),)

    def among(self, column: Any, ids: Iterable[Any]) -> ColumnElement[bool]:
        """See :meth:`Dialect.among`: ``column = ANY(array)``, the values bound in it."""
        return column == any_(bindparam(None, list(ids), type_=ARRAY(column.type)))

    def rows(
        self, name: str, columns: Mapping[str, TypeEngine[Any]], alias: str | None = None
    ) -> FromClause:
        """See :meth:`Dialect.rows`: ``unnest`` of one array parameter per column.

        Each array is bound as :meth:`Dialect.column_of_rows` names it (never a
        column's own name, which an ``UPDATE`` reserves for its ``SET``); a text
        column's array is ``varchar[]``, so the column's own length check refuses
        a longer text instead of a cast cutting it.
        """
        return (
            func.unnest(
                *(
                    bindparam(self.column_of_rows(name, column), type_=_array_of(type_))
                    for column, type_ in columns.items()
                )
            )
            .table_valued(*columns)
            .render_derived(name=alias)
        )

    def bind_rows(self, name: str, columns: Mapping[str, Sequence[Any]]) -> dict[str, Any]:
        """See :meth:`Dialect.bind_rows`: one array per column (:meth:`Dialect.column_of_rows`)."""
        return {self.column_of_rows(name, column): values for column, values in columns.items()}

    def greatest(self, *values: Any) -> ColumnElement[Any]:
        """See :meth:`Dialect.greatest`: ``greatest(a, b, ...)``."""
        return func.greatest(*values)

    def unindexed(self, column: Any) -> ColumnElement[Any]:
        """See :meth:`Dialect.unindexed`: the column (PostgreSQL plans from statistics)."""
        return column  # type: ignore[no-any-return]

    def lock_in_order(self, column: Any, name: str) -> tuple[ColumnElement[bool], ...]:
        """See :meth:`Dialect.lock_in_order`: the rows selected in order ``FOR UPDATE``.

        The sub-select's ``FOR UPDATE`` locks the rows as the sort returns them, so
        two writers never wait on each other crosswise; the list is given again
        outside it, or the planner scans every row (it does not carry ``= ANY``
        across the ``IN``).
        """
        return (
            self.one_of(column, name),
            column.in_(
                select(column)
                .where(self.one_of(column, name))
                .order_by(column)
                .with_for_update()
                .scalar_subquery()
            ),
        )

    def for_update(self, statement: Select[Any], *order: Any) -> Select[Any]:
        """See :meth:`Dialect.for_update`: ``ORDER BY order FOR UPDATE``."""
        return statement.order_by(*order).with_for_update()

    def not_locked(self, column: Any, ids: Sequence[Any], *criteria: Any) -> ColumnElement[bool]:
        """See :meth:`Dialect.not_locked`: ``IN (... ORDER BY column FOR UPDATE SKIP LOCKED)``."""
        free = (
            select(column)
            .where(self.among(column, ids), *criteria)
            .order_by(column)
            .with_for_update(skip_locked=True)
        )
        return column.in_(free)  # type: ignore[no-any-return]

    def lock_plan(self, workflows: int, conflicts: int) -> LockPlan:
        """See :meth:`Dialect.lock_plan`: lock before the marking; a rerun locks first.

        The first attempt runs its effect before any workflow lock, so the step
        workers of one order run their effects side by side; a unit of work that
        already lost a race locks first, so it cannot lose the same way again
        (ADR 0014 and its amendment).
        """
        return LockPlan.LOCK_BEFORE_READING if conflicts > 0 else LockPlan.LOCK_BEFORE_MARKING

    def _skip_existing(
        self, table: Table, values: Select[Any], names: list[str], unique: tuple[str, ...]
    ) -> Insert:
        """See :meth:`Dialect._skip_existing`: ``ON CONFLICT (unique) DO NOTHING``."""
        from sqlalchemy.dialects.postgresql import insert as upsert  # PostgreSQL's own form

        return (
            upsert(table)
            .from_select(names, values)
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
        """The ids from the table's sequence (one ``nextval`` per row), the rows by ``COPY``."""
        import psycopg  # PostgreSQL only: SQLite processes never load the driver

        defaults = scalar_defaults(table, [*columns, *constants])
        names = [*columns, *constants, *defaults]
        as_json = [isinstance(table.c[name].type, JSON) for name in columns]
        fixed_values = [
            json.dumps(value) if isinstance(table.c[name].type, JSON) else value
            for name, value in constants.items()
        ]
        fixed_values += defaults.values()
        count = len(next(iter(columns.values())))
        new_ids: list[int] = []
        if ids:
            sequence = func.pg_get_serial_sequence(table.name, "id")
            new_ids = sorted(
                session.scalars(
                    select(func.nextval(sequence)).select_from(func.generate_series(1, count))
                ).all()
            )
        statement = f"COPY {table.name} ({', '.join((['id'] if ids else []) + names)}) FROM STDIN"
        connection = session.connection().connection.driver_connection
        try:
            with connection.cursor() as cursor, cursor.copy(statement) as copy:  # type: ignore[union-attr]
                for i, row in enumerate(zip(*columns.values(), strict=True)):
                    values = [
                        json.dumps(value) if is_json else value
                        for value, is_json in zip(row, as_json, strict=True)
                    ]
                    values += fixed_values
                    copy.write_row([new_ids[i], *values] if ids else values)
        except psycopg.Error as exc:  # what callers of an INSERT expect: SQLAlchemy's errors
            raise DBAPIError.instance(statement, None, exc, psycopg.Error) from exc
        return new_ids

    def analyze_never_analyzed(
        self, session_factory: SessionFactory, tables: Sequence[Table]
    ) -> list[str]:
        """ANALYZE those of ``tables`` that PostgreSQL has never analyzed or vacuumed.

        A table never analyzed (``pg_class.reltuples = -1``) has its row count
        guessed from its page count and declared column widths; for
        ``workflow_steps`` about a fourteenth of the real count, so every id-list
        statement of the tracker is planned as a sequential scan until
        autovacuum's first ANALYZE. The manual's advice for a bulk load applies
        ("Populating a Database"): once per database, right after the first load.

        Args:
            session_factory: makes the session of the unit of work.
            tables: the tables a bulk load just filled (and committed).

        Returns:
            The names of the tables analyzed, sorted; [] when every table has
            statistics already, or when another ANALYZE or VACUUM of them held its
            lock longer than :data:`LOCK_TIMEOUT_MS` (that one writes the
            statistics instead).

        Raises:
            sqlalchemy.exc.DBAPIError: the database failed otherwise (nothing of the
                caller's is affected: its rows are committed before this runs).
        """
        with UnitOfWork(session_factory) as uow:
            session = uow.session
            engine = session.get_bind().engine
            known = _HAVE_STATISTICS.setdefault(engine, set())
            names = [t.name for t in tables if t.name not in known]
            if not names:
                return []
            never = list(session.scalars(_NEVER_ANALYZED, {"names": names}))
            known.update(set(names) - set(never))
            if not never:
                return []
            session.execute(text(f"SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}"))
            quote = session.get_bind().dialect.identifier_preparer.quote
            quoted = ", ".join(quote(n) for n in never)
            try:
                session.execute(text(f"ANALYZE {quoted}"))
            except OperationalError as exc:
                if getattr(exc.orig, "sqlstate", None) != "55P03":  # lock_not_available
                    raise
                log.info("tables %s are being analyzed or vacuumed already", never)
                return []
            uow.commit()
        known.update(never)
        log.info("analyzed %s after their first bulk load", never)
        return never
