"""The first placement leaves PostgreSQL's planner statistics of the tables it filled.

Without them the tracker's id-list statements are planned as scans of the whole
``workflow_steps`` table (ADR 0020).
"""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest
from sqlalchemy import event, text

from orders.app.placement import place
from workflows import dependencies, tracker
from workflows.models import Workflow, WorkflowStep
from workflows.sql import POSTGRESQL

analyze_never_analyzed = POSTGRESQL.analyze_never_analyzed

TABLES = ("orders", "order_lines", "workflows", "workflow_steps")


def never_analyzed(session_factory) -> set[str]:
    with session_factory() as session:
        return set(
            session.scalars(
                text("SELECT relname FROM pg_class WHERE relname = ANY(:names) AND reltuples < 0"),
                {"names": list(TABLES)},
            )
        )


def explain(session_factory, statement, params) -> str:
    """The plan PostgreSQL chooses for ``statement`` as the tracker runs it."""

    def prefix(conn, cursor, sql, parameters, context, executemany):
        return f"EXPLAIN {sql}", parameters

    with session_factory() as session:  # never committed: an EXPLAIN of an UPDATE writes nothing
        connection = session.connection()
        event.listen(connection, "before_cursor_execute", prefix, retval=True)
        try:
            return "\n".join(row[0] for row in connection.execute(statement, params))
        finally:
            event.remove(connection, "before_cursor_execute", prefix)


def require_postgresql(session_factory) -> None:
    if session_factory.kw["bind"].dialect.name != "postgresql":
        pytest.skip("SQLite plans by its indexes without statistics")


def test_the_first_placement_analyzes_the_tables_it_filled(session_factory, catalog):
    """Regression: placing into a fresh PostgreSQL database left every table it
    filled without statistics until autovacuum came round (a minute)."""
    require_postgresql(session_factory)
    assert never_analyzed(session_factory) == set(TABLES)

    place(session_factory, 3, source="random", rng=random.Random(7))

    assert never_analyzed(session_factory) == set()
    # once per database: later placements find the statistics and analyze nothing
    assert (
        analyze_never_analyzed(session_factory, [Workflow.__table__, WorkflowStep.__table__]) == []
    )


def test_later_placements_ask_the_catalog_nothing(session_factory, catalog):
    """Paced placement places a few orders per call: once the tables are known to
    have statistics, a placement sends no catalog query for them."""
    require_postgresql(session_factory)
    place(session_factory, 1, source="random", rng=random.Random(8))
    engine = session_factory.kw["bind"]
    statements: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        statements.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        place(session_factory, 1, source="random", rng=random.Random(9))
    finally:
        event.remove(engine, "before_cursor_execute", record)
    assert statements and not [s for s in statements if "pg_class" in s or "ANALYZE" in s]


IDS = list(range(1001, 1051))  # 50 of the 3,000 workflows
STOCK_ROWS = [(w - 1) * 4 + 1 for w in IDS]  # their first step rows
NOW = datetime(2026, 12, 1, tzinfo=UTC)
# the tracker's id-list statements, with the parameters of a batch of 50
STATEMENTS = {
    "lock": (tracker._LOCK[POSTGRESQL], {"ids": IDS, "now": NOW}),
    "step rows": (tracker._STEP_ROWS[POSTGRESQL], {"ids": IDS, "step": "stock"}),
    "mark done": (
        tracker._MARK_DONE[POSTGRESQL],
        {
            "claims_row_id": STOCK_ROWS,
            "claims_outcome": ["ok"] * 50,
            "claims_attempt": [1] * 50,
            "claims_job_id": [None] * 50,
            "claims_fencing": [None] * 50,
            "started": NOW,
            "now": NOW,
        },
    ),
    "waiting steps": (dependencies._STEPS_OF[POSTGRESQL], {"ids": IDS}),
    "step counts": (tracker._STEP_COUNTS[POSTGRESQL], {"ids": IDS}),
}


@pytest.mark.parametrize("name", list(STATEMENTS))
def test_the_tracker_statements_use_indexes_once_analyzed(session_factory, name):
    """With statistics, a batch of 50 reads and writes its own rows by index, not
    by scanning all 3,000 workflow rows or 12,000 step rows (the planner does not
    carry an "= ANY" list across a join or an IN, so the statements give it to
    both sides)."""
    require_postgresql(session_factory)
    with session_factory() as session:
        session.execute(
            text(
                "INSERT INTO workflows (id, kind, subject_id, status, created_at, updated_at,"
                " version) SELECT g, 'order', g, 'running', now(), now(), 1"
                " FROM generate_series(1, 3000) g"
            )
        )
        session.execute(
            text(
                "INSERT INTO workflow_steps (id, workflow_id, step, queue, task, payload, status,"
                " attempts, created_at) SELECT (g - 1) * 4 + s, g,"
                " (ARRAY['stock', 'notification', 'points', 'logistics'])[s], 'q', 'step', '{}',"
                " CASE WHEN s = 1 THEN 'dispatched' ELSE 'waiting' END, 0, now()"
                " FROM generate_series(1, 3000) g, generate_series(1, 4) s"
            )
        )
        session.commit()
    assert analyze_never_analyzed(
        session_factory, [Workflow.__table__, WorkflowStep.__table__]
    ) == [
        "workflow_steps",
        "workflows",
    ]

    statement, params = STATEMENTS[name]
    plan = explain(session_factory, statement, params)
    assert "Seq Scan" not in plan, plan
