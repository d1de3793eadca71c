"""Operator actions on outbox rows the queue refused: list them, put them back.

A refused row carries ``publish_attempts`` and ``publish_error``; after its
last attempt it is ``unpublishable`` and its workflow is blocked on it.
``retry_rows`` makes such rows pending again (attempts reset, no backoff) and
unblocks their workflows, so the next relay pass publishes them.

A ``dead`` row is normally the queue's business (``orders dlq redrive``). But
when Redis lost its data (a flush, a restore without the dead-letter keys) the
database still says dead and blocked while the queue holds no dead letter to
redrive: the order could only be cancelled. Given the queue's own answer to
"do you hold a job for this key" (``held_keys``), ``retry_rows`` takes such a
row back to pending too, and the relay publishes it again under the same
idempotency key. A row whose dead letter the queue still holds is refused,
pointing at ``orders dlq redrive``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session, defer

from workflows.columns import utcnow
from workflows.conflicts import retry_on_conflict
from workflows.errors import RowsNotRetryable
from workflows.models import StepStatus, Workflow, WorkflowStatus, WorkflowStep
from workflows.uow import SessionFactory, UnitOfWork

HeldKeys = Callable[[Sequence[str]], Collection[str]]
"""``held_keys(idempotency keys) -> the keys the queue holds a job for`` (ready,
delayed, active or dead-lettered): ``QueuePublisher.known_keys``."""


def idempotency_key(workflow_id: int, step: str) -> str:
    """The queue's idempotency key of a step row: ``"<workflow id>:<step>"``."""
    return f"{workflow_id}:{step}"


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
    held_keys: HeldKeys | None = None,
    limit: int = 10_000,
    clock: Callable[[], datetime] = utcnow,
) -> list[int]:
    """Put unpublishable rows (and dead rows whose dead letter is gone) back to pending.

    Args:
        session_factory: makes the session of the unit of work.
        step_ids: the rows to retry; None retries every unpublishable row, and
            with ``held_keys`` every dead row the queue holds no job for (up to
            ``limit`` of each).
        held_keys: asks the queue which idempotency keys it holds a job for;
            None leaves dead rows out (they are refused by id).
        limit: most rows of each kind changed in one call.
        clock: current time (timezone-aware).

    Returns:
        Ids of the rows made pending, ascending. Their workflows, blocked on
        them, run again unless another of their steps is still dead or
        unpublishable.

    Raises:
        RowsNotRetryable: one of ``step_ids`` names no row, or a row that is
            neither unpublishable nor dead without its dead letter (the reason
            per id); nothing was changed.
        ConcurrencyConflict: a workflow kept changing under the update.
        Exception: whatever ``held_keys`` raises (Redis unreachable); nothing
            was changed.
    """

    def once() -> list[int]:
        with UnitOfWork(session_factory) as uow:
            session = uow.session
            lost = lost_dead_letters(session, held_keys, step_ids, limit=limit)
            if step_ids is not None:
                refused = not_retryable(session, step_ids, lost_letters=lost)
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
            rows = list(session.scalars(query).all())
            if lost:
                rows += session.scalars(
                    select(WorkflowStep)
                    .options(defer(WorkflowStep.payload))
                    .where(WorkflowStep.id.in_(sorted(lost)))
                ).all()
            now = clock()
            for row in rows:
                row.status = StepStatus.PENDING
                row.publish_attempts = 0
                row.next_publish_at = None
                row.dispatched_at = None
            session.flush()
            for row in rows:
                _unblock(session, row, now)
            uow.commit()
            return sorted(row.id for row in rows)

    return retry_on_conflict(once)


def lost_dead_letters(
    session: Session,
    held_keys: HeldKeys | None,
    step_ids: Sequence[int] | None = None,
    *,
    limit: int = 10_000,
) -> set[int]:
    """Dead step rows whose job the queue does not hold: their dead letter is gone.

    Args:
        session: a session (only read).
        held_keys: the queue's answer (see :data:`HeldKeys`); None: none are looked for.
        step_ids: only among these rows; None: the oldest ``limit`` dead rows.
        limit: most dead rows asked about.

    Returns:
        Their step ids.

    Raises:
        Exception: whatever ``held_keys`` raises (Redis unreachable).
    """
    if held_keys is None:
        return set()
    query = (
        select(WorkflowStep.id, WorkflowStep.workflow_id, WorkflowStep.step)
        .where(WorkflowStep.status == StepStatus.DEAD)
        .order_by(WorkflowStep.id)
        .limit(limit)
    )
    if step_ids is not None:
        query = query.where(WorkflowStep.id.in_(list(step_ids)))
    dead = {idempotency_key(wf, step): step_id for step_id, wf, step in session.execute(query)}
    if not dead:
        return set()
    held = set(held_keys(list(dead)))
    return {step_id for key, step_id in dead.items() if key not in held}


def _unblock(session: Session, row: WorkflowStep, now: datetime) -> None:
    """Let the workflow blocked on ``row`` run again, unless another step still blocks it."""
    workflow = session.get_one(Workflow, row.workflow_id)
    if workflow.status != WorkflowStatus.BLOCKED or workflow.blocked_step != row.step:
        return
    still_blocked = session.scalar(
        select(WorkflowStep.id)
        .where(
            WorkflowStep.workflow_id == row.workflow_id,
            WorkflowStep.status.in_((StepStatus.DEAD, StepStatus.UNPUBLISHABLE)),
        )
        .limit(1)
    )
    if still_blocked is not None:
        return
    workflow.status = WorkflowStatus.RUNNING
    workflow.blocked_step = None
    workflow.blocked_reason = None
    workflow.updated_at = now


_WHY_NOT = {
    StepStatus.PENDING: "pending: not given up, the relay is still publishing it",
    StepStatus.DISPATCHED: "already published",
    StepStatus.FAILED: "already published (its job failed; the queue retries it)",
    StepStatus.DONE: "already published and done",
    StepStatus.DEAD: "already published; its job is dead-lettered (`orders dlq redrive`)",
    # (a dead row whose dead letter the queue lost is retryable: see lost_dead_letters)
    StepStatus.WAITING: "waiting for the steps it depends on; it is published after them",
    StepStatus.SKIPPED: "skipped: a step it depends on did not succeed, so it never runs",
}


def not_retryable(
    session: Session, step_ids: Sequence[int], *, lost_letters: Collection[int] = ()
) -> dict[int, str]:
    """Why each of ``step_ids`` that cannot be retried cannot be.

    Args:
        session: a session (only read).
        step_ids: step row ids, as given by the operator.
        lost_letters: dead rows whose dead letter the queue lost
            (:func:`lost_dead_letters`): retryable.

    Returns:
        Step id -> reason (``no such step record``, ``already published``, ...),
        in the order given; empty when every id is an unpublishable row or a
        dead row in ``lost_letters``.
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
        if status == StepStatus.UNPUBLISHABLE or step_id in lost_letters:
            continue
        if status is None:
            reasons[step_id] = "no such step record"
        else:
            reasons[step_id] = _WHY_NOT.get(status, f"in state {status}, not unpublishable")
    return reasons
