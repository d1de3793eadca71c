"""What differs between the databases orderflow runs on, as one interface (ADR 0027).

The tracker, the effects and the relay hold the rules and the statements; each
statement is built once per dialect from the pieces a :class:`Dialect` gives
(an id list bound as one parameter, rows bound as one parameter, a row lock in
id order), and each unit of work asks its dialect (``workflows.sql.dialect_of``)
which of them to run and when to lock its workflow rows (:class:`LockPlan`).
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

from sqlalchemy import ColumnElement, FromClause, Insert, Select, Table, bindparam, insert, select
from sqlalchemy.orm import Session
from sqlalchemy.types import TypeEngine

from workflows.uow import SessionFactory

__all__ = ["Dialect", "LockPlan"]


class LockPlan(enum.Enum):
    """When a step batch's unit of work locks its workflow rows, relative to its effect.

    Attributes:
        LOCK_BEFORE_READING: lock them (in id order, bumping their version) before
            the step rows are read: nothing the batch reads changes under it.
        FENCE_BEFORE_EFFECT: bump their version under a check of the version read
            (optimistic) as the first write, before the effect; a concurrent writer
            makes the unit of work rerun on a version conflict (SQLite: that first
            write takes the database's write lock, ADR 0005).
        LOCK_BEFORE_MARKING: run the effect with no workflow lock, then lock them
            for the marking only, which checks that every claimed step row is still
            claimable (ADR 0014).
    """

    LOCK_BEFORE_READING = "lock before reading"
    FENCE_BEFORE_EFFECT = "fence before the effect"
    LOCK_BEFORE_MARKING = "lock before the marking"


class Dialect(ABC):
    """One database's forms of what differs: binding, bulk insert, statistics, locking.

    There is one instance per database kind (``workflows.sql.SQLITE``,
    ``workflows.sql.POSTGRESQL``); statements built per dialect are kept in dicts
    keyed by that instance (``workflows.sql.per_dialect``).

    Attributes:
        name: SQLAlchemy's name of the database (``sqlite``, ``postgresql``).
        marking_rechecks: the lock plan may run an effect before the workflow rows
            are locked, so the step marking matches only rows still claimable and
            returns the ids it marked (a row missing means: roll back and rerun).
        writers_at_once: write transactions the database runs at once (SQLite: 1, its
            one write lock), or None (no such bound): a process's writers beyond it
            only wait for their turn, so a caller may queue them in the process.
    """

    name: ClassVar[str]
    marking_rechecks: ClassVar[bool]
    writers_at_once: ClassVar[int | None] = None

    def __init__(self) -> None:
        self._inserts: dict[tuple[Any, ...], Insert] = {}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

    # --- id lists and rows as one bound parameter (ADR 0015, ADR 0019) -------------------

    @abstractmethod
    def one_of(self, column: Any, name: str) -> ColumnElement[bool]:
        """The condition: ``column`` is one of the list bound as ``name`` (built-once statements).

        Args:
            column: the column compared.
            name: the parameter's name; pass the values as a list under it.

        Returns:
            A boolean SQL expression for a ``where`` whose text does not depend on
            the list's length.
        """

    @abstractmethod
    def one_of_again(self, column: Any, name: str) -> tuple[ColumnElement[bool], ...]:
        """The list bound as ``name`` once more, on the other side of a join or an ``IN``.

        Args:
            column: the column of the other side (e.g. ``workflow_steps.workflow_id``
                beside ``workflows.id``).
            name: the same parameter's name.

        Returns:
            Conditions to add to the ``where`` (none where the planner needs no help).
        """

    @abstractmethod
    def among(self, column: Any, ids: Iterable[Any]) -> ColumnElement[bool]:
        """``column IN ids`` for a statement built on the spot (the values bound inside it).

        Args:
            column: an integer (or other scalar) column, e.g. ``WorkflowStep.id``.
            ids: the values; any iterable, consumed once.

        Returns:
            A boolean SQL expression for a ``where``.
        """

    @abstractmethod
    def rows(
        self, name: str, columns: Mapping[str, TypeEngine[Any]], alias: str | None = None
    ) -> FromClause:
        """A batch's rows bound as one parameter (or one per column), as a table to select from.

        Args:
            name: the rows' name; bind the values with :meth:`bind_rows` under it.
            columns: column name -> its SQL type, in row order.
            alias: the table's name in the SQL text (None: the dialect's default).

        Returns:
            A selectable with one column per name.
        """

    @abstractmethod
    def bind_rows(self, name: str, columns: Mapping[str, Sequence[Any]]) -> dict[str, Any]:
        """The parameters of :meth:`rows` named ``name``, from the values column by column.

        Args:
            name: the name given to :meth:`rows`.
            columns: column name -> its values, one per row, in the order given to
                :meth:`rows`; all the same length. Per-row values must be ints,
                strings or None where the rows travel as JSON (SQLite).

        Returns:
            Parameter name -> value, to merge into the statement's parameters.
        """

    def column_of_rows(self, name: str, column: str) -> str:
        """The parameter holding one column of the rows ``name`` as a list, where rows
        are bound one list per column (PostgreSQL); e.g. for :meth:`one_of_again`.

        Args:
            name: the rows' name given to :meth:`rows`.
            column: one of its columns.

        Returns:
            ``<name>_<column>``.
        """
        return f"{name}_{column}"

    @abstractmethod
    def greatest(self, *values: Any) -> ColumnElement[Any]:
        """The largest of ``values`` (SQL expressions), as one expression."""

    @abstractmethod
    def unindexed(self, column: Any) -> ColumnElement[Any]:
        """``column`` as a value the planner cannot find through the column's own index.

        For a condition that must not drive the plan where the planner has no
        statistics (SQLite) and would otherwise walk that index.
        """

    # --- row locks ------------------------------------------------------------------------

    @abstractmethod
    def lock_in_order(self, column: Any, name: str) -> tuple[ColumnElement[bool], ...]:
        """The ``where`` of an ``UPDATE`` of the rows listed under ``name``, locking them in order.

        Args:
            column: the rows' primary key column; the rows are locked in its order,
                so two writers never wait on each other crosswise.
            name: the id list's parameter name.

        Returns:
            Conditions for the ``UPDATE``'s ``where``.
        """

    @abstractmethod
    def for_update(self, statement: Select[Any], *order: Any) -> Select[Any]:
        """``statement`` reading rows to change, locked in ``order`` where rows are locked.

        Args:
            statement: a ``SELECT`` of the rows.
            order: the columns the rows are locked in the order of.

        Returns:
            The statement, ``ORDER BY order FOR UPDATE`` where the database locks
            rows (else unchanged: its first write locks the whole database).
        """

    @abstractmethod
    def not_locked(self, column: Any, ids: Sequence[Any], *criteria: Any) -> ColumnElement[bool]:
        """Rows ``ids`` meeting ``criteria``, leaving out those another transaction holds locked.

        Args:
            column: the rows' primary key column.
            ids: the rows.
            criteria: further conditions.

        Returns:
            A condition for the ``where`` of an ``UPDATE`` that must never wait for
            a row lock (``FOR UPDATE SKIP LOCKED``, in id order, where rows are locked).
        """

    @abstractmethod
    def lock_plan(self, workflows: int, conflicts: int) -> LockPlan:
        """When a step batch locks its workflow rows (see :class:`LockPlan`).

        Args:
            workflows: distinct workflows the batch's deliveries name.
            conflicts: units of work of this batch already rerun after losing a race.

        Returns:
            The plan of this unit of work.
        """

    # --- bulk inserts ---------------------------------------------------------------------

    def insert_rows(
        self,
        session: Session,
        table: Table,
        columns: Mapping[str, Sequence[Any]],
        *,
        constants: Mapping[str, Any] | None = None,
        load: bool = False,
        ids: bool = False,
    ) -> list[int]:
        """Insert rows into ``table`` in the session's transaction (nothing committed).

        Two ways, by ``load``:

        - a batch (``load=False``): one ``INSERT ... SELECT`` from the rows bound as
          one parameter (:meth:`rows`); the text does not depend on the row count and
          no value is processed in Python. Per-row values are ints, strings or None
          (SQLite carries them as JSON): bind a ``datetime`` or ``Decimal`` as a constant.
        - a bulk load (``load=True``): many rows of any column type, by the
          dialect's fastest way in (``COPY`` on PostgreSQL, one ``executemany`` on
          SQLite), optionally handing back the new ids.

        All or nothing either way: a row that breaks a constraint fails the call.

        Args:
            session: the caller's session, inside its transaction.
            table: the table; for ``load`` with ``ids``, one whose integer primary
                key column is ``id`` (with a sequence on PostgreSQL).
            columns: column name -> its values, one per row, all lists the same
                length; columns left out get their scalar Python-side default, or
                the server's.
            constants: column name -> the value every row gets (e.g.
                ``created_at``), bound once with the column's type.
            load: a bulk load (see above).
            ids: return the new rows' ids (``load`` only).

        Returns:
            The new ids, one per row in the same order (ascending), when ``ids``;
            else [].

        Raises:
            ValueError: the column lists differ in length, or ``ids`` without ``load``.
            sqlalchemy.exc.IntegrityError: a row breaks a constraint (nothing of
                this call is kept once the caller rolls back).
            sqlalchemy.exc.StatementError: (SQLite, a batch) a per-row value JSON
                cannot encode.
            sqlalchemy.exc.DBAPIError: any other database error.
        """
        if ids and not load:
            raise ValueError("only a bulk load (load=True) hands back the new ids")
        if not columns:
            return []
        lengths = {len(values) for values in columns.values()}
        if len(lengths) != 1:
            raise ValueError(f"columns of different lengths: {sorted(lengths)}")
        [count] = lengths
        if not count:
            return []
        consts = dict(constants or {})
        if not load:
            statement = self._insert_from_rows(table, tuple(columns), tuple(consts))
            session.execute(statement, {**self.bind_rows("rows", columns), **consts})
            return []
        if not _loadable(table, {*columns, *consts}):
            return _insert_each(session, table, columns, consts, ids)
        return self._load(session, table, columns, consts, ids)

    def insert_new_rows(
        self,
        session: Session,
        table: Table,
        columns: Mapping[str, Sequence[Any]],
        *,
        unique: tuple[str, ...],
        returning: str,
        constants: Mapping[str, Any] | None = None,
    ) -> list[Any]:
        """Insert the rows whose unique key is not in ``table`` yet; leave the others be.

        One ``INSERT ... SELECT ... ON CONFLICT (unique) DO NOTHING RETURNING``, the
        rows bound as in :meth:`insert_rows`: the unique index decides, so no read of
        the rows already there comes first. A row a concurrent transaction is
        inserting with the same key waits for its end: inserted if that one rolled
        back, left out if it committed. Any other constraint a row breaks fails the
        call, as in :meth:`insert_rows`.

        Args:
            session: the caller's session, inside its transaction.
            table: the table.
            columns: column name -> its values, one per row (ints, strings or None),
                all lists the same length.
            unique: the columns of a unique index of ``table`` (rows and constants
                together give their values).
            returning: the column whose value each inserted row hands back.
            constants: column name -> the value every row gets, bound once.

        Returns:
            The ``returning`` value of each row inserted (in no particular order);
            the rows whose key was there already are left out.

        Raises:
            ValueError: the column lists differ in length.
            sqlalchemy.exc.IntegrityError: a row breaks another constraint.
            sqlalchemy.exc.DBAPIError: any other database error.
        """
        lengths = {len(values) for values in columns.values()}
        if len(lengths) > 1:
            raise ValueError(f"columns of different lengths: {sorted(lengths)}")
        if not columns or not lengths.pop():
            return []
        consts = dict(constants or {})
        key = (table, tuple(columns), tuple(consts), unique, returning)
        statement = self._inserts.get(key)
        if statement is None:
            values = self._rows_select(table, tuple(columns), tuple(consts))
            statement = self._skip_existing(table, values, [*columns, *consts], unique).returning(
                table.c[returning]
            )
            self._inserts[key] = statement
        return list(session.scalars(statement, {**self.bind_rows("rows", columns), **consts}).all())

    @abstractmethod
    def _skip_existing(
        self, table: Table, values: Select[Any], names: list[str], unique: tuple[str, ...]
    ) -> Insert:
        """``INSERT INTO table (names) <values> ON CONFLICT (unique) DO NOTHING``."""

    def _rows_select(
        self, table: Table, columns: tuple[str, ...], constants: tuple[str, ...]
    ) -> Select[Any]:
        """The rows bound as ``rows`` (:meth:`rows`) and the constants, as one ``SELECT``."""
        rows = self.rows("rows", {name: table.c[name].type for name in columns}, alias="v")
        return select(
            *(rows.c[name] for name in columns),
            *(bindparam(name, type_=table.c[name].type) for name in constants),
        )

    def _insert_from_rows(
        self, table: Table, columns: tuple[str, ...], constants: tuple[str, ...]
    ) -> Insert:
        """The batch insert's statement, built once per (table, columns, constants)."""
        key = (table, columns, constants)
        statement = self._inserts.get(key)
        if statement is None:
            values = self._rows_select(table, columns, constants)
            statement = insert(table).from_select([*columns, *constants], values)
            self._inserts[key] = statement
        return statement

    @abstractmethod
    def _load(
        self,
        session: Session,
        table: Table,
        columns: Mapping[str, Sequence[Any]],
        constants: dict[str, Any],
        ids: bool,
    ) -> list[int]:
        """The bulk load of :meth:`insert_rows` (rows present, every left-out default scalar)."""

    # --- planner statistics (ADR 0020) ----------------------------------------------------

    @abstractmethod
    def analyze_never_analyzed(
        self, session_factory: SessionFactory, tables: Sequence[Table]
    ) -> list[str]:
        """Give the planner statistics of ``tables`` after their first bulk load.

        Args:
            session_factory: makes the session of the unit of work.
            tables: the tables a bulk load just filled (and committed).

        Returns:
            The names of the tables analyzed, sorted ([] when none needed it).

        Raises:
            sqlalchemy.exc.DBAPIError: the database failed (nothing of the caller's
                is affected: its rows are committed before this runs).
        """


def _loadable(table: Table, given: set[str]) -> bool:
    """Every column left out of the rows has a scalar default, a server default or none."""
    for column in table.columns:
        if column.key in given or column.primary_key:
            continue
        default = column.default
        if default is not None and not getattr(default, "is_scalar", False):
            return False
    return True


def scalar_defaults(table: Table, given: Iterable[str]) -> dict[str, Any]:
    """Column key -> scalar Python-side default, for the columns the rows leave out.

    Args:
        table: the table inserted into.
        given: the column keys the rows (and their constants) carry.
    """
    present = set(given)
    return {
        column.key: column.default.arg  # type: ignore[union-attr,attr-defined]
        for column in table.columns
        if column.key not in present
        and not column.primary_key
        and column.default is not None
        and getattr(column.default, "is_scalar", False)
    }


def _insert_each(
    session: Session,
    table: Table,
    columns: Mapping[str, Sequence[Any]],
    constants: dict[str, Any],
    ids: bool,
) -> list[int]:
    """SQLAlchemy's own multi-row insert, for a table with a default computed per row."""
    names = list(columns)
    rows = [
        dict(zip(names, row, strict=True)) | constants
        for row in zip(*columns.values(), strict=True)
    ]
    if not ids:
        session.execute(insert(table), rows)
        return []
    statement = insert(table).returning(table.c.id, sort_by_parameter_order=True)
    return list(session.scalars(statement, rows).all())
