"""Completion tracker: run a step's effect and record its completion atomically.

Completion is set membership: each step row says done on its own (unique per
workflow and step), never a counter. Every step transition also updates the
workflow row, whose version column makes two steps finishing at once
conflict; the loser reruns its unit of work, sees the winner's row, and
whichever commit finds every step done marks the workflow done.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import case, func, select, update
from sqlalchemy.orm import Session

from workflows.columns import utcnow
from workflows.conflicts import retry_on_conflict
from workflows.dependencies import NO_DEPENDENCIES, StepGraph, release_waiting
from workflows.errors import StepNotFound, StepNotReady, SubjectMismatch
from workflows.models import StepStatus, Workflow, WorkflowStatus, WorkflowStep
from workflows.uow import SessionFactory, UnitOfWork

_ERROR_LIMIT = 4000

Effect = Callable[[Session, Workflow, WorkflowStep], str]
"""Applies a step's effect in the given session and returns its outcome word."""

OnWorkflowDone = Callable[[Session, Workflow], None]
"""Called in the same transaction when a commit completes the workflow."""


@dataclass(frozen=True)
class StepRun:
    """One delivery of one step message.

    Attributes:
        workflow_id: the workflow's id (from the payload).
        step: the step name.
        subject_id: the subject the payload names; checked against the workflow
            when given.
        attempt: 1-based delivery attempt from the queue.
        job_id: the queue's job id.
        fencing_token: the queue's monotonic lease fencing token.
    """

    workflow_id: int
    step: str
    subject_id: int | None = None
    attempt: int = 1
    job_id: str | None = None
    fencing_token: int | None = None


@dataclass(frozen=True)
class StepResult:
    """What ``run_step`` did.

    Attributes:
        outcome: the step's outcome word (for a duplicate, the first run's).
        duplicate: True when the step was already done: no effect was applied
            (a redelivery absorbed).
        workflow_done: True when this commit completed the workflow.
        conflicts: units of work rerun because of concurrent writers.
        released: ids of step rows this commit moved from ``waiting`` to
            ``pending`` (their prerequisites succeeded), for an immediate publish.
    """

    workflow_id: int
    step: str
    outcome: str
    duplicate: bool
    workflow_done: bool
    conflicts: int = 0
    released: tuple[int, ...] = ()


def load_step(session: Session, workflow_id: int, step: str) -> tuple[Workflow, WorkflowStep]:
    """Load a workflow row and one of its step rows.

    Raises:
        StepNotFound: no such workflow or step.
    """
    row = session.execute(
        select(Workflow, WorkflowStep)
        .join(WorkflowStep, WorkflowStep.workflow_id == Workflow.id)
        .where(Workflow.id == workflow_id, WorkflowStep.step == step)
    ).one_or_none()
    if row is None:
        raise StepNotFound(f"workflow {workflow_id} has no step {step!r}")
    return row[0], row[1]


def run_step(
    session_factory: SessionFactory,
    run: StepRun,
    effect: Effect,
    *,
    on_workflow_done: OnWorkflowDone | None = None,
    graph: StepGraph = NO_DEPENDENCIES,
    clock: Callable[[], datetime] = utcnow,
    conflict_attempts: int = 6,
    sleep: Callable[[float], None] = time.sleep,
) -> StepResult:
    """Apply a step's effect and record its completion in one unit of work.

    A step already done (or skipped) returns at once with ``duplicate=True``
    and no effect; a step still waiting for its prerequisites raises
    ``StepNotReady`` with nothing applied. Otherwise ``effect`` runs, the step
    row is marked done with its outcome, attempts and times, the workflow row
    is touched (version bump),
    waiting steps whose prerequisites are now decided are released or skipped
    (``graph``), a blocked workflow with no dead step left resumes, and the
    workflow is marked done when every step row is done or skipped. Races with concurrent writers
    rerun the whole unit of work.

    Args:
        session_factory: makes the session of each unit of work.
        run: identifies the delivery.
        effect: applies the effect; returns the outcome word (<= 50 chars).
        on_workflow_done: extra work in the same transaction when the workflow
            completes (for example setting the order's status).
        graph: the workflow's step dependencies (default: none).
        clock: current time (timezone-aware).
        conflict_attempts: units of work tried before giving up.
        sleep: pause between tries (injectable for tests).

    Returns:
        A ``StepResult``.

    Raises:
        StepNotFound: the workflow or step does not exist (not retryable).
        SubjectMismatch: ``run.subject_id`` is not the workflow's subject.
        StepNotReady: the step still waits for its prerequisites (retryable).
        ConcurrencyConflict: still conflicting after ``conflict_attempts``
            (retryable).
        Exception: whatever ``effect`` raises; nothing is committed.
    """
    started = clock()
    conflicts = 0

    def count_conflict(_exc: BaseException) -> None:
        nonlocal conflicts
        conflicts += 1

    def once() -> StepResult:
        with UnitOfWork(session_factory) as uow:
            session = uow.session
            workflow, step = load_step(session, run.workflow_id, run.step)
            if run.subject_id is not None and run.subject_id != workflow.subject_id:
                raise SubjectMismatch(
                    f"workflow {workflow.id} is about {workflow.subject_id}, not {run.subject_id}"
                )
            if step.status in StepStatus.FINAL:
                return StepResult(
                    workflow.id, step.step, step.outcome or "", True, False, conflicts
                )
            if step.status == StepStatus.WAITING:
                raise StepNotReady(
                    f"workflow {workflow.id} step {step.step!r} waits for its prerequisites"
                )
            outcome = effect(session, workflow, step)
            done, released = _complete(
                session, workflow, step, run, outcome, started, clock(), graph
            )
            if done and on_workflow_done is not None:
                on_workflow_done(session, workflow)
            uow.commit()
            return StepResult(
                workflow.id, step.step, outcome, False, done, conflicts, tuple(released)
            )

    return retry_on_conflict(
        once, attempts=conflict_attempts, sleep=sleep, on_conflict=count_conflict
    )


def _complete(
    session: Session,
    workflow: Workflow,
    step: WorkflowStep,
    run: StepRun,
    outcome: str,
    started: datetime,
    now: datetime,
    graph: StepGraph,
) -> tuple[bool, list[int]]:
    step.status = StepStatus.DONE
    step.outcome = outcome
    step.attempts = max(step.attempts, run.attempt)
    step.job_id = run.job_id or step.job_id
    step.fencing_token = run.fencing_token or step.fencing_token
    step.started_at = started
    step.finished_at = now
    workflow.updated_at = now  # the version bump that serializes sibling steps
    session.flush()
    released = release_waiting(session, graph, [workflow.id], now)
    states = dict(
        session.execute(
            select(WorkflowStep.status, func.count())
            .where(WorkflowStep.workflow_id == workflow.id)
            .group_by(WorkflowStep.status)
        ).all()
    )
    if workflow.status == WorkflowStatus.BLOCKED and not states.get(StepStatus.DEAD):
        workflow.status = WorkflowStatus.RUNNING
        workflow.blocked_step = None
        workflow.blocked_reason = None
    if set(states) <= set(StepStatus.FINAL):
        workflow.status = WorkflowStatus.DONE
        workflow.finished_at = now
        return True, released
    return False, released


def record_step_failure(
    session_factory: SessionFactory,
    run: StepRun,
    error: str,
    *,
    clock: Callable[[], datetime] = utcnow,
) -> bool:
    """Record a failed attempt (the queue will retry): attempts, last error, state.

    A step already done, skipped or dead is left as it is (a late failure report
    of a step skipped by a compensation must not reopen it).

    Args:
        session_factory: makes the session of the unit of work.
        run: identifies the delivery that failed.
        error: short error text (truncated to 4,000 characters).
        clock: current time (timezone-aware).

    Returns:
        True when the step row was updated.

    Raises:
        ConcurrencyConflict: the database stayed busy (retryable).
    """
    now = clock()

    def once() -> bool:
        with UnitOfWork(session_factory) as uow:
            changed = uow.session.execute(
                update(WorkflowStep)
                .where(
                    WorkflowStep.workflow_id == run.workflow_id,
                    WorkflowStep.step == run.step,
                    WorkflowStep.status.not_in(
                        (StepStatus.DONE, StepStatus.DEAD, StepStatus.SKIPPED)
                    ),
                )
                .values(
                    status=StepStatus.FAILED,
                    attempts=case(
                        (WorkflowStep.attempts < run.attempt, run.attempt),
                        else_=WorkflowStep.attempts,
                    ),
                    last_error=error[:_ERROR_LIMIT],
                    job_id=run.job_id or WorkflowStep.job_id,
                    started_at=now,
                ),
                execution_options={"synchronize_session": False},
            ).rowcount
            uow.commit()
            return bool(changed)

    return retry_on_conflict(once)


def mark_step_dead(
    session_factory: SessionFactory,
    workflow_id: int,
    step: str,
    reason: str,
    *,
    error: str | None = None,
    attempts: int | None = None,
    clock: Callable[[], datetime] = utcnow,
) -> bool:
    """Record that the queue dead-lettered a step: the workflow shows as blocked.

    The step row becomes ``dead`` with ``outcome=reason`` and ``last_error``;
    the workflow row becomes ``blocked`` with ``blocked_step`` and
    ``blocked_reason``. A step already done is left done (its effect
    committed) and nothing is blocked; so is a skipped step (it never runs).

    Args:
        session_factory: makes the session of the unit of work.
        workflow_id: the workflow's id.
        step: the step name.
        reason: the dead-letter reason, for example ``retries_exhausted``.
        error: the last error text, if any.
        attempts: attempts made, if known.
        clock: current time (timezone-aware).

    Returns:
        True when the step was marked dead; False when it was already done or skipped.

    Raises:
        StepNotFound: no such workflow or step.
        ConcurrencyConflict: still conflicting after a few tries (retryable).
    """

    def once() -> bool:
        with UnitOfWork(session_factory) as uow:
            workflow, row = load_step(uow.session, workflow_id, step)
            if row.status in StepStatus.FINAL:
                return False
            now = clock()
            row.status = StepStatus.DEAD
            row.outcome = reason[:50]
            row.last_error = (error or reason)[:_ERROR_LIMIT]
            if attempts is not None:
                row.attempts = max(row.attempts, attempts)
            workflow.status = WorkflowStatus.BLOCKED
            workflow.blocked_step = step
            workflow.blocked_reason = (f"{reason}: {error}" if error else reason)[:_ERROR_LIMIT]
            workflow.updated_at = now
            uow.commit()
            return True

    return retry_on_conflict(once)
