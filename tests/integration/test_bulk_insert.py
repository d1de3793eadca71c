"""Bulk inserts (COPY on PostgreSQL) write the same rows, ids and defaults as an INSERT."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from workflows.bulk import insert_rows
from workflows.columns import utcnow
from workflows.models import StepStatus, Workflow, WorkflowStep

_WORKFLOWS = Workflow.__table__
_STEPS = WorkflowStep.__table__


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
