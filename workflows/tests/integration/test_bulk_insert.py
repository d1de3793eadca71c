"""Bulk loads (COPY on PostgreSQL) write the same rows, ids and defaults as an INSERT."""

from __future__ import annotations

import pytest
from sqlalchemy import event, select
from sqlalchemy.exc import IntegrityError

from workflows.columns import utcnow
from workflows.models import StepStatus, Workflow, WorkflowStep
from workflows.sql import dialect_of

_WORKFLOWS = Workflow.__table__
_STEPS = WorkflowStep.__table__


def insert_rows(session, table, rows) -> list[int]:
    """A bulk load of ``rows`` (dicts with the same keys), handing back the new ids."""
    columns = {name: [row[name] for row in rows] for name in (rows[0] if rows else ())}
    return dialect_of(session).insert_rows(session, table, columns, load=True, ids=True)


def test_rows_come_back_with_their_ids_in_order_and_defaults_filled(session_factory):
    now = utcnow()
    with session_factory() as session:
        workflow_ids = insert_rows(
            session,
            _WORKFLOWS,
            [
                {"kind": "k", "subject_id": 100 + i, "status": "running", "created_at": now}
                | {"updated_at": now}
                for i in range(30)
            ],
        )
        step_ids = insert_rows(
            session,
            _STEPS,
            [
                {
                    "workflow_id": wf,
                    "step": "s",
                    "queue": "q",
                    "task": "t",
                    "payload": {"workflow_id": wf, "note": "a\tb\\c\nd 'é'"},
                    "status": StepStatus.PENDING,
                    "created_at": now,
                }
                for wf in workflow_ids
            ],
        )
        assert insert_rows(session, _STEPS, []) == []
        session.commit()
    assert len(set(workflow_ids)) == 30 and len(set(step_ids)) == 30
    with session_factory() as session:
        workflows = {w.id: w for w in session.scalars(select(Workflow))}
        steps = {s.id: s for s in session.scalars(select(WorkflowStep))}
    for i, wf in enumerate(workflow_ids):
        assert workflows[wf].subject_id == 100 + i
        assert workflows[wf].version == 1  # the column's default
        assert workflows[wf].created_at == now
    for wf, step_id in zip(workflow_ids, step_ids, strict=True):
        step = steps[step_id]
        assert step.workflow_id == wf
        assert step.payload == {"workflow_id": wf, "note": "a\tb\\c\nd 'é'"}
        assert (step.attempts, step.publish_attempts, step.next_publish_at) == (0, 0, None)


def test_a_row_breaking_a_constraint_raises_integrity_error_and_keeps_nothing(session_factory):
    now = utcnow()
    row = {"kind": "k", "subject_id": 7, "status": "running", "created_at": now}
    with session_factory() as session:
        with pytest.raises(IntegrityError):
            insert_rows(session, _WORKFLOWS, [row | {"updated_at": now}] * 2)
        session.rollback()
    with session_factory() as session:
        assert session.scalars(select(Workflow)).all() == []


def workflow_rows(subjects, now):
    return [
        {"kind": "k", "subject_id": s, "status": "running", "created_at": now, "updated_at": now}
        for s in subjects
    ]


def test_ids_follow_the_rows_after_the_highest_rows_were_deleted(session_factory):
    """SQLite gives a new row max(rowid) + 1: ids freed at the top are taken again,
    and every id still belongs to the row it was returned for."""
    now = utcnow()
    with session_factory() as session:
        first = insert_rows(session, _WORKFLOWS, workflow_rows(range(10), now))
        session.execute(_WORKFLOWS.delete().where(_WORKFLOWS.c.id.in_(first[-3:])))
        second = insert_rows(session, _WORKFLOWS, workflow_rows(range(10, 20), now))
        session.commit()
    with session_factory() as session:
        subject_of = dict(session.execute(select(_WORKFLOWS.c.id, _WORKFLOWS.c.subject_id)).all())
    assert len(subject_of) == 17
    assert [subject_of[i] for i in first[:-3] + second] == [*range(7), *range(10, 20)]


def test_many_rows_cost_two_statements_on_sqlite(session_factory):
    """Regression: on SQLite a multi-row INSERT ... RETURNING went out as one
    statement per row (SQLAlchemy cannot sort its rows by parameter order there)."""
    engine = session_factory.kw["bind"]
    if engine.dialect.name != "sqlite":
        pytest.skip("PostgreSQL sends the rows by COPY")
    statements: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        statements.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        with session_factory() as session:
            ids = insert_rows(session, _WORKFLOWS, workflow_rows(range(500), utcnow()))
            session.commit()
    finally:
        event.remove(engine, "before_cursor_execute", record)
    assert len(ids) == 500
    assert len([s for s in statements if s.lstrip().upper().startswith("INSERT")]) == 2
