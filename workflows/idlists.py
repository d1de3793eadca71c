"""Lists and rows as ONE bound parameter, so a statement's SQL text never grows with a batch.

``column.in_(ids)`` renders one bound parameter per id, and an executemany runs
the statement once per row. Either way SQLAlchemy processes every value in
Python (an expanding ``IN`` is re-rendered for each list length; an executemany
builds and converts one parameter dict per row), and the driver sees a new
text per length: on PostgreSQL, past 50 parameters psycopg parses the
placeholders again on every execution; on SQLite, the step workers spent a
quarter of their time in that processing, inside the database's one write lock.

- PostgreSQL: a list is one array parameter (``column = ANY(:ids)``), rows are
  one array per column (``unnest``, see ``orders.domain.effects``).
- SQLite: a list is one JSON text (``column IN (SELECT value FROM
  json_each(:ids))``) and rows are one JSON array of arrays, read back with
  :func:`json_rows` (``json_each`` / ``json_extract``, built into SQLite since
  3.38 and in every common build before that). SQLite looks each value up
  through the column's index, as for a plain ``IN``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import ColumnElement, String, any_, bindparam, func, literal_column, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import Session
from sqlalchemy.sql.selectable import Subquery
from sqlalchemy.types import TypeDecorator

__all__ = ["JSONList", "among", "is_postgresql", "json_rows", "one_of"]


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

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        if value is None:
            return None
        return json.dumps(list(value), separators=(",", ":"))


def is_postgresql(session: Session) -> bool:
    """Does ``session`` run on PostgreSQL (which takes :func:`one_of`'s array form)?"""
    return session.get_bind().dialect.name == "postgresql"


def one_of(column: Any, name: str, *, postgresql: bool) -> ColumnElement[bool]:
    """The condition "``column`` is one of the list bound as ``name``", for statements built once.

    Args:
        column: the column compared.
        name: the parameter's name; pass the values as a list under it.
        postgresql: build the ``= ANY(:name)`` form; else (SQLite) ``IN (SELECT
            value FROM json_each(:name))``.

    Returns:
        A boolean SQL expression for a ``where``.
    """
    if postgresql:
        return column == any_(bindparam(name, type_=ARRAY(column.type)))
    values = func.json_each(bindparam(name, type_=JSONList())).table_valued("value")
    return column.in_(select(values.c.value).scalar_subquery())


def json_rows(name: str, columns: Sequence[str], alias: str = "rows") -> Subquery:
    """SQLite: the rows bound as ``name`` (a JSON array of arrays) as a table to select from.

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


def among(session: Session, column: Any, ids: Iterable[Any]) -> ColumnElement[bool]:
    """``column IN ids``, as ``column = ANY(array)`` on PostgreSQL.

    Args:
        session: the session the statement runs in (its bind says the dialect).
        column: an integer (or other scalar) column, e.g. ``WorkflowStep.id``.
        ids: the values; any iterable, consumed once.

    Returns:
        A boolean SQL expression for a ``where``.
    """
    values = list(ids)
    if is_postgresql(session):
        return column == any_(bindparam(None, values, type_=ARRAY(column.type)))
    return column.in_(values)
