"""Marking a batch's claimed steps done: what each row keeps, on every database.

On PostgreSQL the marking is one ``UPDATE ... FROM unnest(...)``, on SQLite one
``UPDATE ... FROM json_each(...)`` (workflows.sql.sqlite); both must write what the
row-by-row marking wrote.
"""

from __future__ import annotations

from sqlalchemy import select, update

from orders.app.placement import PlacedOrder, place_orders
from orders.domain.handlers import handle_steps
from orders.domain.steps import STOCK
from workflows.models import StepStatus, WorkflowStep
from workflows.tracker import StepResult, StepRun
from workflows.uow import UnitOfWork


def place_many(session_factory, drafts) -> list[PlacedOrder]:
    with UnitOfWork(session_factory) as uow:
        placed = place_orders(uow.session, drafts)
        uow.commit()
    return placed


def stock_rows(session_factory) -> dict[int, WorkflowStep]:
    with session_factory() as session:
        return {
            row.workflow_id: row
            for row in session.scalars(select(WorkflowStep).where(WorkflowStep.step == STOCK))
        }


def test_marking_keeps_the_highest_attempt_and_a_known_job(session_factory, catalog, make_draft):
    """A delivery may name an older attempt than the row counted (its failures were
    recorded by later attempts) or no job at all: the row keeps what it knew."""
    first, second, third = place_many(session_factory, [make_draft() for _ in range(3)])
    with UnitOfWork(session_factory) as uow:
        uow.session.execute(
            update(WorkflowStep)
            .where(WorkflowStep.workflow_id == first.workflow_id, WorkflowStep.step == STOCK)
            .values(attempts=4, job_id="job-known", fencing_token=77)
        )
        uow.commit()
    runs = [
        StepRun(first.workflow_id, STOCK, first.order_id, 2, None, None),
        StepRun(second.workflow_id, STOCK, second.order_id, 3, "job-second", 2**40),
        StepRun(third.workflow_id, STOCK, third.order_id, 1, "job-third", 5),
    ]
    results = handle_steps(session_factory, runs)
    assert all(isinstance(r, StepResult) and not r.duplicate for r in results)
    rows = stock_rows(session_factory)
    assert (rows[first.workflow_id].attempts, rows[first.workflow_id].job_id) == (4, "job-known")
    assert rows[first.workflow_id].fencing_token == 77
    assert (rows[second.workflow_id].attempts, rows[second.workflow_id].job_id) == (
        3,
        "job-second",
    )
    assert rows[second.workflow_id].fencing_token == 2**40  # a 64-bit token survives JSON
    assert rows[third.workflow_id].fencing_token == 5
    for row in rows.values():
        assert row.status == StepStatus.DONE
        assert row.outcome == "deducted"
        assert row.started_at is not None and row.finished_at is not None
        assert row.started_at <= row.finished_at
