"""Outbox relay: publish step rows to the queue and mark them dispatched.

Publishing happens before marking, so a crash in between publishes the step
again later; the queue's idempotency key ``<workflow id>:<step>`` absorbs the
duplicate. Marking only touches rows still pending, so a step that a fast
worker already finished keeps its state (only its dispatch time is recorded).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import case, select, update
from sqlalchemy.orm import Session

from workflows.columns import utcnow
from workflows.models import StepStatus, WorkflowStep, idempotency_key
from workflows.uow import SessionFactory, UnitOfWork

_CHUNK = 500


@dataclass(frozen=True)
class StepMessage:
    """One queue message for one step.

    Attributes:
        queue: queue name (the step name).
        task: task name, for example ``orders.stock``.
        payload: JSON-able body; holds ``workflow_id`` and ``step``.
        idempotency_key: ``f"{workflow_id}:{step}"``.
    """

    queue: str
    task: str
    payload: dict[str, Any]
    idempotency_key: str


class Publisher(Protocol):
    """Sends step messages to the queue (adapter: ``workflows.publisher``)."""

    def publish(self, messages: Sequence[StepMessage]) -> None:
        """Enqueue every message, deduplicated by idempotency key.

        Raises:
            Exception: when the queue cannot be reached; nothing is then marked
                dispatched and the sweep tries again.
        """
        ...


@dataclass
class SweepResult:
    """What one relay sweep did.

    Attributes:
        published: pending steps published (never published before, or a
            crash came between commit and publish).
        republished: dispatched steps the queue no longer knew, published again.
        checked: dispatched steps whose presence in the queue was checked.
    """

    published: int = 0
    republished: int = 0
    checked: int = 0
    republished_keys: list[str] = field(default_factory=list)


def message_for(step: WorkflowStep) -> StepMessage:
    """Build the queue message of a step row."""
    return StepMessage(
        queue=step.queue,
        task=step.task,
        payload=dict(step.payload),
        idempotency_key=idempotency_key(step.workflow_id, step.step),
    )


def publish_steps(
    session_factory: SessionFactory,
    publisher: Publisher,
    step_ids: Sequence[int],
    *,
    clock: Callable[[], datetime] = utcnow,
) -> int:
    """Publish the given step rows that are still pending; mark them dispatched.

    Call right after the transaction that wrote the steps has committed.

    Args:
        session_factory: makes the sessions of the units of work.
        publisher: the queue adapter.
        step_ids: ids returned by ``workflows.outbox.add_workflows``.
        clock: current time (timezone-aware).

    Returns:
        Number of steps published.

    Raises:
        Exception: whatever ``publisher.publish`` raises; those steps stay
            pending for the sweep.
    """
    published = 0
    for start in range(0, len(step_ids), _CHUNK):
        chunk = step_ids[start : start + _CHUNK]
        published += _publish_where(
            session_factory,
            publisher,
            lambda s, chunk=chunk: _pending(s, WorkflowStep.id.in_(chunk)),
            clock,
        )
    return published


def publish_pending(
    session_factory: SessionFactory,
    publisher: Publisher,
    *,
    limit: int = 1000,
    clock: Callable[[], datetime] = utcnow,
) -> int:
    """Publish up to ``limit`` pending step rows, oldest first; mark them dispatched.

    Returns:
        Number of steps published.

    Raises:
        Exception: whatever ``publisher.publish`` raises.
    """
    return _publish_where(session_factory, publisher, lambda s: _pending(s, limit=limit), clock)


def sweep(
    session_factory: SessionFactory,
    publisher: Publisher,
    *,
    is_known: Callable[[str], bool],
    republish_after: float,
    limit: int = 1000,
    clock: Callable[[], datetime] = utcnow,
) -> SweepResult:
    """One periodic relay pass: publish pending steps, re-publish lost ones.

    A step counts as lost when it was dispatched (or last failed) more than
    ``republish_after`` seconds ago, is not done or dead, and ``is_known``
    says the queue holds no job for its idempotency key (Redis lost it); the
    steps are read again after that check, so one that finished meanwhile is
    not taken for lost. The database is the source of truth; the re-published
    job carries the same idempotency key.

    Args:
        session_factory: makes the sessions of the units of work.
        publisher: the queue adapter.
        is_known: ``is_known(idempotency_key) -> bool``: does the queue still
            hold a job (ready, delayed, active or dead-lettered) for that key.
        republish_after: seconds since dispatch before a step is checked.
        limit: most rows handled per category in one pass.
        clock: current time (timezone-aware).

    Returns:
        A ``SweepResult`` with the counts.

    Raises:
        Exception: whatever ``publisher.publish`` or ``is_known`` raises.
    """
    result = SweepResult()
    result.published = publish_pending(session_factory, publisher, limit=limit, clock=clock)
    now = clock()
    cutoff = now - timedelta(seconds=republish_after)
    with UnitOfWork(session_factory) as uow:
        rows = uow.session.scalars(
            select(WorkflowStep)
            .where(
                WorkflowStep.status.in_((StepStatus.DISPATCHED, StepStatus.FAILED)),
                WorkflowStep.dispatched_at < cutoff,
            )
            .order_by(WorkflowStep.dispatched_at)
            .limit(limit)
        ).all()
        stale = [(step.id, message_for(step)) for step in rows]
    result.checked = len(stale)
    unknown = [(step_id, m) for step_id, m in stale if not is_known(m.idempotency_key)]
    if not unknown:
        return result
    # A job that finished between the read above and its check is unknown to the
    # queue too, but it committed first (acks follow commits): read again, and
    # keep only the steps that are still open.
    with UnitOfWork(session_factory) as uow:
        still_open = set(
            uow.session.scalars(
                select(WorkflowStep.id).where(
                    WorkflowStep.id.in_([step_id for step_id, _ in unknown]),
                    WorkflowStep.status.in_((StepStatus.DISPATCHED, StepStatus.FAILED)),
                )
            )
        )
    lost = [(step_id, m) for step_id, m in unknown if step_id in still_open]
    if not lost:
        return result
    publisher.publish([message for _, message in lost])
    with UnitOfWork(session_factory) as uow:
        uow.session.execute(
            update(WorkflowStep)
            .where(
                WorkflowStep.id.in_([step_id for step_id, _ in lost]),
                WorkflowStep.status.in_((StepStatus.DISPATCHED, StepStatus.FAILED)),
            )
            .values(dispatched_at=now),
            execution_options={"synchronize_session": False},
        )
        uow.commit()
    result.republished = len(lost)
    result.republished_keys = [message.idempotency_key for _, message in lost]
    return result


def _pending(session: Session, *criteria: Any, limit: int | None = None) -> list[WorkflowStep]:
    query = (
        select(WorkflowStep)
        .where(WorkflowStep.status == StepStatus.PENDING, *criteria)
        .order_by(WorkflowStep.id)
    )
    if limit is not None:
        query = query.limit(limit)
    return list(session.scalars(query).all())


def _publish_where(
    session_factory: SessionFactory,
    publisher: Publisher,
    load: Callable[[Session], list[WorkflowStep]],
    clock: Callable[[], datetime],
) -> int:
    with UnitOfWork(session_factory) as uow:
        steps = [(step.id, message_for(step)) for step in load(uow.session)]
    if not steps:
        return 0
    publisher.publish([message for _, message in steps])
    with UnitOfWork(session_factory) as uow:
        uow.session.execute(
            update(WorkflowStep)
            .where(
                WorkflowStep.id.in_([step_id for step_id, _ in steps]),
                WorkflowStep.dispatched_at.is_(None),
            )
            .values(
                # A worker may have moved the row on already: keep its state.
                status=case(
                    (WorkflowStep.status == StepStatus.PENDING, StepStatus.DISPATCHED),
                    else_=WorkflowStep.status,
                ),
                dispatched_at=clock(),
            ),
            execution_options={"synchronize_session": False},
        )
        uow.commit()
    return len(steps)
