"""Planner statistics after the first bulk load into PostgreSQL tables (ADR 0020).

A table that was never analyzed or vacuumed (``pg_class.reltuples = -1``) has
its row count guessed from its page count and the declared column widths. For
``workflow_steps`` (a JSON payload, text columns) that guess is about a
fourteenth of the real count, so every id-list statement of the tracker (``id
= ANY(:ids)`` on a primary key, ``workflow_id = ANY(:ids)``) is planned as a
sequential scan of the whole table: a few milliseconds per statement at 3,000
orders, growing with the table, until autovacuum's first ANALYZE (it looks once
a minute). The PostgreSQL manual's advice for a bulk load ("Populating a
Database": run ANALYZE afterwards) applies to the first placement: the tables
it filled are analyzed right after its commit, once per database; from then on
the planner scales those statistics with the table's size and autovacuum keeps
them current. SQLite plans by its indexes without statistics: nothing to do.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence

from sqlalchemy import Engine, Table, bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.exc import OperationalError
from sqlalchemy.types import String

from workflows.uow import SessionFactory, UnitOfWork

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


def analyze_never_analyzed(session_factory: SessionFactory, tables: Sequence[Table]) -> list[str]:
    """ANALYZE those of ``tables`` that PostgreSQL has never analyzed or vacuumed.

    Args:
        session_factory: makes the session of the unit of work.
        tables: the tables a bulk load just filled (and committed).

    Returns:
        The names of the tables analyzed, sorted; [] on other databases, when
        every table has statistics already, or when another ANALYZE or VACUUM
        of them held its lock longer than :data:`LOCK_TIMEOUT_MS` (that one
        writes the statistics instead).

    Raises:
        sqlalchemy.exc.DBAPIError: the database failed otherwise (nothing of the
            caller's is affected: its rows are committed before this runs).
    """
    with UnitOfWork(session_factory) as uow:
        session = uow.session
        engine = session.get_bind().engine
        if engine.dialect.name != "postgresql":
            return []
        known = _HAVE_STATISTICS.setdefault(engine, set())
        names = [t.name for t in tables if t.name not in known]
        if not names:
            return []
        never = list(session.scalars(_NEVER_ANALYZED, {"names": names}))
        known.update(set(names) - set(never))
        if not never:
            return []
        session.execute(text(f"SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}"))
        quoted = ", ".join(session.get_bind().dialect.identifier_preparer.quote(n) for n in never)
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
