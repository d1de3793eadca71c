"""A condition "this column is one of these ids" whose SQL text does not grow with the list.

``column.in_(ids)`` renders one bound parameter per id. On PostgreSQL with psycopg 3
that text is new for every list length, and past 50 parameters psycopg parses
the statement's placeholders again on every execution (its parse cache takes
statements of at most 50 parameters): the relay's and the completion tracker's
statements over a batch's 150 released rows spent a fifth of a worker's CPU
there. ``column = ANY(:ids)`` is one array parameter: one text, parsed once,
prepared by the server after a few runs. Elsewhere (SQLite) the plain ``IN``
stays.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import ColumnElement, any_, bindparam
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session


def is_postgresql(session: Session) -> bool:
    """Does ``session`` run on PostgreSQL (which takes :func:`one_of`'s array form)?"""
    return session.get_bind().dialect.name == "postgresql"


def one_of(column: Any, name: str, *, postgresql: bool) -> ColumnElement[bool]:
    """The condition of :func:`among` with a named parameter, for statements built once.

    Args:
        column: the column compared.
        name: the parameter's name; pass the ids as a list under it.
        postgresql: build the ``= ANY(:name)`` form (else an expanding ``IN``).

    Returns:
        A boolean SQL expression for a ``where``.
    """
    if postgresql:
        return column == any_(bindparam(name, type_=ARRAY(column.type)))
    return column.in_(bindparam(name, expanding=True))


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
