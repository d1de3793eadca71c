"""A unit of work that lost a race reruns so that it cannot lose it again."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import select, update

from orders.app.placement import place_orders
from orders.domain.steps import STOCK
from workflows.models import StepStatus, Workflow, WorkflowStep
from workflows.tracker import StepResult, StepRun, run_steps
from workflows.uow import UnitOfWork


def finish_elsewhere(session_factory, workflow_id: int) -> None:
    """What a concurrent delivery of the same step does: lock the workflow row,
    mark the step row done, commit (its own transaction, its own connection)."""
    with UnitOfWork(session_factory) as uow:
        uow.session.execute(
            update(Workflow).where(Workflow.id == workflow_id).values(version=Workflow.version + 1)
        )
        uow.session.execute(
            update(WorkflowStep)
            .where(WorkflowStep.workflow_id == workflow_id, WorkflowStep.step == STOCK)
            .values(status=StepStatus.DONE, outcome="elsewhere")
        )
        uow.commit()


def test_a_postgresql_batch_that_lost_a_race_locks_first_and_cannot_lose_again(
    session_factory, catalog, make_draft
):
    """Regression: a PostgreSQL batch runs its effect before it locks its workflow
    rows (ADR 0014). A batch crossing single deliveries of the same rows lost one
    row per attempt and gave up after its conflict attempts (seen in the
    eight-process race test). Here another delivery finishes one claimed row
    during each attempt's effect: the first attempt loses; the rerun holds the
    workflow rows from its read on, so the second thief waits for its commit and
    the batch wins with two attempts."""
    if session_factory.kw["bind"].dialect.name != "postgresql":
        pytest.skip("SQLite batches hold the write lock from their first statement")
    with UnitOfWork(session_factory) as uow:
        placed = place_orders(uow.session, [make_draft(), make_draft()])
        uow.commit()
    first, second = placed
    thieves: list[threading.Thread] = []

    def effect(session, claims, now):
        victim = [first, second][len(thieves)]
        thief = threading.Thread(
            target=finish_elsewhere, args=(session_factory, victim.workflow_id)
        )
        thieves.append(thief)
        thief.start()
        thief.join(timeout=1.0)  # a thief blocked on this unit of work's lock stays behind
        return {c.step_row_id: "applied" for c in claims}

    runs = [StepRun(p.workflow_id, STOCK, p.order_id, 1, f"job-{p.order_id}", 1) for p in placed]
    try:
        results = run_steps(session_factory, runs, effect, conflict_attempts=2)
    finally:
        for thief in thieves:
            thief.join(timeout=10)
    assert len(thieves) == 2
    assert all(isinstance(r, StepResult) for r in results)
    assert [(r.duplicate, r.outcome, r.conflicts) for r in results] == [
        (True, "elsewhere", 1),
        (False, "applied", 1),
    ]
    with session_factory() as session:
        outcomes = dict(
            session.execute(
                select(WorkflowStep.workflow_id, WorkflowStep.outcome).where(
                    WorkflowStep.step == STOCK
                )
            ).all()
        )
    # the second thief ran after the batch committed and wrote its own outcome over it
    assert outcomes == {first.workflow_id: "elsewhere", second.workflow_id: "elsewhere"}
