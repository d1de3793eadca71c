"""Operator actions on outbox rows the queue refused: list them, put them back.

A refused row carries ``publish_attempts`` and ``publish_error``; after its
last attempt it is ``unpublishable`` and its workflow is blocked on it.
``retry_rows`` makes such rows pending again (attempts reset, no backoff) and
unblocks their workflows, so the next relay pass publishes them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session, defer

from workflows.columns import utcnow
from workflows.conflicts import retry_on_conflict
from workflows.errors import RowsNotRetryable
from workflows.models import StepStatus, Workflow, WorkflowStatus, WorkflowStep
from workflows.relay import BLOCKED_PREFIX
from workflows.uow import SessionFactory, UnitOfWork


@dataclass(frozen=True)
class RefusedRow:
    """One outbox row the queue refused at least once.

    Attributes:
        step_id: the row's id.
        workflow_id: its workflow.
        step: the step name.
        status: ``pending`` (being retried with backoff) or ``unpublishable`` (given up).
        attempts: refusals so far.
        next_attempt_at: when the relay tries it again (None when given up).
        error: the last refusal's text (untrusted: it may quote Redis or a payload).
    """

    step_id: int
    workflow_id: int
    step: str
    status: str
    attempts: int
    next_attempt_at: datetime | None
    error: str


def refused_rows(
    session: Session, *, only_unpublishable: bool = False, limit: int = 100
) -> list[RefusedRow]:
    """Rows the queue refused and that are not published yet, unpublishable first.

    Args:
        session: a session (only read).
        only_unpublishable: leave out the rows still being retried.
        limit: most rows returned (>= 1).

    Returns:
        Up to ``limit`` rows, given-up rows first, then by id.
    """
    statuses = (
        (StepStatus.UNPUBLISHABLE,)
        if only_unpublishable
        else (
            StepStatus.UNPUBLISHABLE,
            StepStatus.PENDING,
        )
    )
    rows = session.execute(
        select(
            WorkflowStep.id,
            WorkflowStep.workflow_id,
            WorkflowStep.step,
            WorkflowStep.status,
            WorkflowStep.publish_attempts,
            WorkflowStep.next_publish_at,
            WorkflowStep.publish_error,
        )
        .where(WorkflowStep.status.in_(statuses), WorkflowStep.publish_attempts > 0)
        .order_by((WorkflowStep.status == StepStatus.UNPUBLISHABLE).desc(), WorkflowStep.id)
        .limit(limit)
    ).all()
    return [RefusedRow(*row[:6], error=row[6] or "") for row in rows]


def retry_rows(
    session_factory: SessionFactory,
    step_ids: Sequence[int] | None = None,
    *,
    limit: int = 10_000,
    clock: Callable[[], datetime] = utcnow,
) -> list[int]:
    """Put unpublishable rows back to pending and unblock their workflows.

    Args:
        session_factory: makes the session of the unit of work.
        step_ids: the rows to retry; None retries every unpublishable row (up to ``limit``).
        limit: most rows changed in one call.
        clock: current time (timezone-aware).

    Returns:
        Ids of the rows made pending.

    Raises:
        RowsNotRetryable: one of ``step_ids`` names no row, or a row that is not
            unpublishable (the reason per id); nothing was changed.
        ConcurrencyConflict: a workflow kept changing under the update.
    """

    def once() -> list[int]:
        with UnitOfWork(session_factory) as uow:
            if step_ids is not None:
                refused = not_retryable(uow.session, step_ids)
                if refused:
                    raise RowsNotRetryable(refused)
            query = (
                select(WorkflowStep)
                .options(defer(WorkflowStep.payload))
                .where(WorkflowStep.status == StepStatus.UNPUBLISHABLE)
                .order_by(WorkflowStep.id)
                .limit(limit)
            )
            if step_ids is not None:
                query = query.where(WorkflowStep.id.in_(list(step_ids)))
            rows = uow.session.scalars(query).all()
            now = clock()
            for row in rows:
                row.status = StepStatus.PENDING
                row.publish_attempts = 0
                row.next_publish_at = None
                row.dispatched_at = None
                workflow = uow.session.get_one(Workflow, row.workflow_id)
                if (
                    workflow.status == WorkflowStatus.BLOCKED
                    and workflow.blocked_step == row.step
                    and (workflow.blocked_reason or "").startswith(BLOCKED_PREFIX)
                ):
                    workflow.status = WorkflowStatus.RUNNING
                    workflow.blocked_step = None
                    workflow.blocked_reason = None
                    workflow.updated_at = now
            uow.commit()
            return [row.id for row in rows]

    return retry_on_conflict(once)


_WHY_NOT = {
    StepStatus.PENDING: "pending: not given up, the relay is still publishing it",
    StepStatus.DISPATCHED: "already published",
    StepStatus.FAILED: "already published (its job failed; the queue retries it)",
    StepStatus.DONE: "already published and done",
    StepStatus.DEAD: "already published; its job is dead-lettered (`orders dlq redrive`)",
    StepStatus.WAITING: "waiting for the steps it depends on; it is published after them",
    StepStatus.SKIPPED: "skipped: a step it depends on did not succeed, so it never runs",
}


def not_retryable(session: Session, step_ids: Sequence[int]) -> dict[int, str]:
    """Why each of ``step_ids`` that is not an unpublishable row cannot be retried.

    Args:
        session: a session (only read).
        step_ids: step row ids, as given by the operator.

    Returns:
        Step id -> reason (``no such step record``, ``already published``, ...),
        in the order given; empty when every id is an unpublishable row.
    """
    wanted = list(dict.fromkeys(step_ids))
    found = dict(
        session.execute(
            select(WorkflowStep.id, WorkflowStep.status).where(WorkflowStep.id.in_(wanted))
        ).all()
    )
    reasons: dict[int, str] = {}
    for step_id in wanted:
        status = found.get(step_id)
        if status == StepStatus.UNPUBLISHABLE:
            continue
        if status is None:
            reasons[step_id] = "no such step record"
        else:
            reasons[step_id] = _WHY_NOT.get(status, f"in state {status}, not unpublishable")
    return reasons
