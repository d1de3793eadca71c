"""Step handlers: what a queue worker calls for the jobs of an order step.

``handle_steps`` runs a step's effect for a batch of deliveries, marks their steps
done and advances their orders' workflows in one unit of work (see
``workflows.tracker``); ``handle_step`` is the same path for one delivery, a batch
of one. A redelivered step that is already done returns ``duplicate=True``
without a second effect: ack it. ``mark_step_dead`` and ``record_step_failure``
keep the database in step with the queue's retries and dead letters.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from orders.domain import compensations, effects
from orders.domain.errors import OrderNotFound
from orders.domain.models import Order
from orders.domain.steps import ORDER_GRAPH
from workflows import tracker
from workflows.columns import utcnow
from workflows.errors import StepNotFound
from workflows.sql import dialect_of, per_dialect
from workflows.tracker import BeforeCommit, Claim, StepResult, StepRun
from workflows.uow import SessionFactory

__all__ = [
    "StepRequest",
    "StepResult",
    "StepRun",
    "handle_step",
    "handle_steps",
    "mark_step_dead",
    "record_step_failure",
]


@dataclass(frozen=True)
class StepRequest:
    """One delivery of an order step, built from the job's payload and context.

    Attributes:
        workflow_id: ``payload["workflow_id"]``.
        order_id: ``payload["order_id"]``.
        step: ``payload["step"]`` (also the queue name).
        attempt: 1-based attempt from the job context.
        job_id: the job's id.
        fencing_token: the lease's fencing token.
    """

    workflow_id: int
    order_id: int
    step: str
    attempt: int = 1
    job_id: str | None = None
    fencing_token: int | None = None

    def run(self) -> StepRun:
        """Return the generic ``StepRun`` of this request."""
        return StepRun(
            self.workflow_id,
            self.step,
            self.order_id,
            self.attempt,
            self.job_id,
            self.fencing_token,
        )


def handle_steps(
    session_factory: SessionFactory,
    runs: Sequence[StepRun],
    *,
    clock: Callable[[], datetime] = utcnow,
    conflict_attempts: int = 6,
    before_commit: BeforeCommit | None = None,
) -> list[StepResult | Exception]:
    """Apply deliveries of ONE order step (one or many) exactly once each, in one transaction.

    A run carrying a fencing token is fenced by it, and one carrying its attempt's
    guard commits inside it (``workflows.tracker.run_steps``, ADR 0023).

    Args:
        session_factory: makes the session of each unit of work.
        runs: the deliveries; each run's ``subject_id`` is its order id.
        clock: current time (timezone-aware).
        conflict_attempts: units of work tried when racing other writers.
        before_commit: called in the unit of work right before its commit (fault
            injection; ``workflows.tracker.BeforeCommit``).

    Returns:
        Per run, in order: a ``StepResult`` (``outcome``: ``deducted``,
        ``out_of_stock``, ``sent``, ``credited``, ``scheduled``, ``cancelled``,
        and the compensations' ``returned``, ``reversed``...; ``duplicate`` for an
        absorbed redelivery, including a second copy inside the batch;
        ``workflow_done``), or that run's own error: ``StepNotFound``,
        ``SubjectMismatch``, ``OrderNotFound`` (not retryable), ``StepNotReady``,
        ``FencedOut`` (retryable), or the error its attempt guard raised
        (``reliable_queue.AttemptLost``: nothing of it applied).

    Raises:
        StepNotFound: the step has no effect (not retryable).
        ConcurrencyConflict: kept losing races (retryable).
        Exception: the batch failed as a whole (a database error, an effect's
            error); nothing committed: retry it, or run the deliveries one by one.
    """
    if not runs:
        return []
    step = runs[0].step
    effect = effects.EFFECTS.get(step) or compensations.COMPENSATING_EFFECTS.get(step)
    if effect is None:
        raise StepNotFound(f"no handler for step {step!r}")
    return tracker.run_steps(
        session_factory,
        runs,
        _of_orders(effect),
        on_workflows_done=effects.complete_orders,
        graph=ORDER_GRAPH,
        clock=clock,
        conflict_attempts=conflict_attempts,
        before_commit=before_commit,
    )


def handle_step(
    session_factory: SessionFactory,
    request: StepRequest | StepRun,
    *,
    clock: Callable[[], datetime] = utcnow,
    conflict_attempts: int = 6,
) -> StepResult:
    """Apply one order step exactly once and record it: :func:`handle_steps` with a batch of one.

    Args:
        session_factory: makes the session of each unit of work.
        request: the delivery; a generic ``StepRun`` must carry the order id
            as ``subject_id``.
        clock: current time (timezone-aware).
        conflict_attempts: units of work tried when racing other writers.

    Returns:
        ``StepResult`` (see :func:`handle_steps`).

    Raises:
        StepNotFound: unknown step name, workflow or step row (not retryable).
        SubjectMismatch: the payload's order is not the workflow's (not retryable).
        OrderNotFound: the order row is missing (not retryable).
        StepNotReady: the step still waits for its prerequisites (retryable).
        ConcurrencyConflict: kept losing races (retryable).
    """
    run = request.run() if isinstance(request, StepRequest) else request
    [result] = handle_steps(
        session_factory, [run], clock=clock, conflict_attempts=conflict_attempts
    )
    if isinstance(result, Exception):
        raise result
    return result


_ORDER = Order.__table__
_ORDERS = per_dialect(
    lambda d: select(
        _ORDER.c.id, _ORDER.c.customer_id, _ORDER.c.total_price, _ORDER.c.status
    ).where(d.one_of(_ORDER.c.id, "ids"))
)
"""The claimed orders' own columns (built once per dialect: cheaper than building it per
batch; the ids are one parameter, ``workflows.sql``)."""


def _of_orders(effect: effects.Effect) -> tracker.Effect:
    """The tracker's effect for an order effect: read the claimed orders once, fail the missing."""

    def apply(session: Session, claims: list[Claim], now: datetime) -> dict[int, str | Exception]:
        found = {
            row[0]: row
            for row in session.execute(
                _ORDERS[dialect_of(session)], {"ids": [c.subject_id for c in claims]}
            ).all()
        }
        out: dict[int, str | Exception] = {
            c.step_row_id: OrderNotFound(f"order {c.subject_id} does not exist")
            for c in claims
            if c.subject_id not in found
        }
        deliveries = [
            effects.Delivery(c.step_row_id, *found[c.subject_id])
            for c in claims
            if c.subject_id in found
        ]
        if deliveries:
            out.update(effect(session, deliveries, now))
        return out

    return apply


def record_step_failure(
    session_factory: SessionFactory,
    request: StepRequest,
    error: str,
    *,
    clock: Callable[[], datetime] = utcnow,
) -> bool:
    """Record a failed attempt of an order step (before the queue retries it).

    Returns:
        True when the step row was updated (False if done, skipped, dead or
        still waiting for its prerequisites).

    Raises:
        ConcurrencyConflict: the database stayed busy (retryable).
    """
    return tracker.record_step_failure(session_factory, request.run(), error, clock=clock)


def mark_step_dead(
    session_factory: SessionFactory,
    workflow_id: int,
    step: str,
    reason: str,
    *,
    error: str | None = None,
    attempts: int | None = None,
    fencing_token: int | None = None,
    clock: Callable[[], datetime] = utcnow,
) -> bool:
    """Record that the queue dead-lettered an order step; the order shows as blocked.

    Args:
        reason: the dead-letter reason (``retries_exhausted``, ``error``...).
        error: the last error text, if any.
        attempts: attempts made, if known.
        fencing_token: the dead job's last fencing token, if known (the step row's
            is advanced to it).

    Returns:
        True when marked dead; False when the step was done, skipped or still
        waiting for its prerequisites (a stale message: never published).

    Raises:
        StepNotFound: no such workflow or step.
        ConcurrencyConflict: kept losing races (retryable).
    """
    return tracker.mark_step_dead(
        session_factory,
        workflow_id,
        step,
        reason,
        error=error,
        attempts=attempts,
        fencing_token=fencing_token,
        clock=clock,
    )
