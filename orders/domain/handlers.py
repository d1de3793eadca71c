"""Step handlers: what a queue worker calls for one job of an order step.

``handle_step`` runs the step's effect, marks the step done and advances the
order's workflow in one unit of work (see ``workflows.tracker``). A
redelivered step that is already done returns ``duplicate=True`` without a
second effect: ack it. ``mark_step_dead`` and ``record_step_failure`` keep
the database in step with the queue's retries and dead letters.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from orders.domain.batch_effects import BATCH_EFFECTS, complete_orders
from orders.domain.compensations import COMPENSATING_EFFECTS
from orders.domain.effects import EFFECTS
from orders.domain.errors import OrderNotFound
from orders.domain.models import Order, OrderStatus
from orders.domain.steps import ORDER_GRAPH
from workflows import batch_tracker, tracker
from workflows.columns import utcnow
from workflows.errors import StepNotFound
from workflows.models import Workflow, WorkflowStep
from workflows.tracker import StepResult, StepRun
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


def handle_step(
    session_factory: SessionFactory,
    request: StepRequest | StepRun,
    *,
    clock: Callable[[], datetime] = utcnow,
    conflict_attempts: int = 6,
) -> StepResult:
    """Apply one order step exactly once and record it.

    Args:
        session_factory: makes the session of each unit of work.
        request: the delivery; a generic ``StepRun`` must carry the order id
            as ``subject_id``.
        clock: current time (timezone-aware).
        conflict_attempts: units of work tried when racing other writers.

    Returns:
        ``StepResult``: ``outcome`` (``deducted``, ``out_of_stock``, ``sent``,
        ``credited``, ``scheduled``, ``cancelled``, and the compensations'
        ``returned``, ``reversed``...), ``duplicate`` (a
        redelivery absorbed, no effect), ``workflow_done``.

    Raises:
        StepNotFound: unknown step name, workflow or step row (not retryable).
        SubjectMismatch: the payload's order is not the workflow's (not retryable).
        OrderNotFound: the order row is missing (not retryable).
        ConcurrencyConflict: kept losing races (retryable).
    """
    run = request.run() if isinstance(request, StepRequest) else request
    effect = EFFECTS.get(run.step) or COMPENSATING_EFFECTS.get(run.step)
    if effect is None:
        raise StepNotFound(f"no handler for step {run.step!r}")

    def apply(session: Session, workflow: Workflow, _step: WorkflowStep) -> str:
        order = session.get(Order, workflow.subject_id)
        if order is None:
            raise OrderNotFound(f"order {workflow.subject_id} does not exist")
        return effect(session, order, clock())

    return tracker.run_step(
        session_factory,
        run,
        apply,
        on_workflow_done=_complete_order,
        graph=ORDER_GRAPH,
        clock=clock,
        conflict_attempts=conflict_attempts,
    )


def handle_steps(
    session_factory: SessionFactory,
    runs: Sequence[StepRun],
    *,
    clock: Callable[[], datetime] = utcnow,
) -> list[StepResult | Exception]:
    """Apply a batch of deliveries of ONE order step in one transaction, set-based.

    Same guarantees as :func:`handle_step` per delivery (see
    :mod:`workflows.batch_tracker`); each run's ``subject_id`` is its order id.

    Returns:
        Per run, in order: a ``StepResult`` (``duplicate`` for an absorbed
        redelivery, including a second copy inside the batch) or that run's own
        error (``StepNotFound``, ``SubjectMismatch``).

    Raises:
        StepNotFound: the step has no batch effect.
        ConcurrencyConflict / sqlalchemy errors: the whole batch failed, nothing
            committed (the caller may retry it, or run the deliveries one by one).
    """
    if not runs:
        return []
    effect = BATCH_EFFECTS.get(runs[0].step)
    if effect is None:
        raise StepNotFound(f"no handler for step {runs[0].step!r}")
    return batch_tracker.run_steps(
        session_factory,
        runs,
        effect,
        on_workflows_done=complete_orders,
        graph=ORDER_GRAPH,
        clock=clock,
    )


def _complete_order(session: Session, workflow: Workflow) -> None:
    order = session.get(Order, workflow.subject_id)
    if order is not None and order.status == OrderStatus.PLACED:
        order.status = OrderStatus.COMPLETED


def record_step_failure(
    session_factory: SessionFactory,
    request: StepRequest,
    error: str,
    *,
    clock: Callable[[], datetime] = utcnow,
) -> bool:
    """Record a failed attempt of an order step (before the queue retries it).

    Returns:
        True when the step row was updated (False if already done or dead).

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
    clock: Callable[[], datetime] = utcnow,
) -> bool:
    """Record that the queue dead-lettered an order step; the order shows as blocked.

    Args:
        reason: the dead-letter reason (``retries_exhausted``, ``error``...).
        error: the last error text, if any.
        attempts: attempts made, if known.

    Returns:
        True when marked dead; False when the step was already done.

    Raises:
        StepNotFound: no such workflow or step.
        ConcurrencyConflict: kept losing races (retryable).
    """
    return tracker.mark_step_dead(
        session_factory, workflow_id, step, reason, error=error, attempts=attempts, clock=clock
    )
