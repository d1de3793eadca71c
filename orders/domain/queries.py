"""Read-only status queries for the CLI: one order's steps, and totals.

Every function takes a session and returns plain dataclasses; ``to_dict``
gives JSON-ready dictionaries (times as ISO 8601 strings, money as strings).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import and_, case, func, select
from sqlalchemy.orm import Session

from orders.domain.models import Order, OrderStatus
from orders.domain.steps import ALL_STEPS, STEPS, WORKFLOW_KIND
from workflows.models import StepStatus, Workflow, WorkflowStatus, WorkflowStep

BLOCKED = "blocked"
"""Pseudo order status in ``Totals.orders_by_status``: the order's workflow is blocked."""


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


@dataclass(frozen=True)
class StepView:
    """One step of an order: state, attempts, last error and times (UTC).

    ``compensates`` names the forward step a compensating step undoes (None for
    a forward step).
    """

    step: str
    status: str
    outcome: str | None
    attempts: int
    last_error: str | None
    job_id: str | None
    created_at: datetime
    dispatched_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    compensates: str | None = None


@dataclass(frozen=True)
class OrderView:
    """One order with its workflow and steps.

    Attributes:
        status: the order's status (placed, completed, out_of_stock, cancelled).
        workflow_status: running, done or blocked.
        blocked_step / blocked_reason: set while blocked by a dead step.
        completed_at: the workflow's finish time (the order's completion time).
    """

    order_id: int
    status: str
    source: str
    source_key: int | None
    customer_id: int
    total_price: Decimal
    placed_at: datetime
    workflow_id: int | None
    workflow_status: str | None
    blocked_step: str | None
    blocked_reason: str | None
    completed_at: datetime | None
    steps: tuple[StepView, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dictionary of the order and its steps."""
        return _jsonable(asdict(self))

    def end_label(self) -> str:
        """What its workflow's finish time (``completed_at``) is called, by the order's
        status: ``completed``, ``cancellation finished`` (a cancelled order did not
        complete: its skipped steps and compensations finished), ``ended out of stock``,
        else ``finished``; ``not finished yet`` while it runs."""
        if self.completed_at is None:
            return "not finished yet"
        return END_LABELS.get(self.status, "finished")


END_LABELS = {
    OrderStatus.COMPLETED: "completed",
    OrderStatus.CANCELLED: "cancellation finished",
    OrderStatus.OUT_OF_STOCK: "ended out of stock",
}
"""The name of an order's finish time by its status (:meth:`OrderView.end_label`)."""


def order_status(session: Session, order_id: int) -> OrderView | None:
    """Return one order with its steps in workflow order (forward steps, then the
    compensating ones), or None if unknown.

    Args:
        session: a session (only read).
        order_id: the order's id.
    """
    row = session.execute(
        select(Order, Workflow)
        .outerjoin(Workflow, and_(Workflow.kind == WORKFLOW_KIND, Workflow.subject_id == Order.id))
        .where(Order.id == order_id)
    ).one_or_none()
    if row is None:
        return None
    order, workflow = row
    steps: list[StepView] = []
    if workflow is not None:
        rows = session.scalars(
            select(WorkflowStep).where(WorkflowStep.workflow_id == workflow.id)
        ).all()
        rank = {name: i for i, name in enumerate(ALL_STEPS)}  # forward, then compensations
        for s in sorted(rows, key=lambda s: (rank.get(s.step, len(rank)), s.step)):
            steps.append(
                StepView(
                    s.step,
                    s.status,
                    s.outcome,
                    s.attempts,
                    s.last_error,
                    s.job_id,
                    s.created_at,
                    s.dispatched_at,
                    s.started_at,
                    s.finished_at,
                    s.compensates,
                )
            )
    return OrderView(
        order_id=order.id,
        status=order.status,
        source=order.source,
        source_key=order.source_key,
        customer_id=order.customer_id,
        total_price=order.total_price,
        placed_at=order.placed_at,
        workflow_id=workflow.id if workflow else None,
        workflow_status=workflow.status if workflow else None,
        blocked_step=workflow.blocked_step if workflow else None,
        blocked_reason=workflow.blocked_reason if workflow else None,
        completed_at=workflow.finished_at if workflow else None,
        steps=tuple(steps),
    )


@dataclass(frozen=True)
class Totals:
    """Counts over all orders (or those from ``first_order_id`` on).

    Attributes:
        orders: orders counted.
        orders_by_status: placed / completed / out_of_stock / blocked -> count
            (``blocked`` wins over the order's own status).
        steps_by_state: step -> {pending, dispatched, failed, done, dead -> count}.
        retries_by_step: step -> attempts beyond the first, summed.
    """

    orders: int
    orders_by_status: dict[str, int] = field(default_factory=dict)
    steps_by_state: dict[str, dict[str, int]] = field(default_factory=dict)
    retries_by_step: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dictionary."""
        return _jsonable(asdict(self))


def order_trace_ids(session: Session, order_id: int) -> list[str] | None:
    """The trace ids the order's step rows carry (from their W3C ``traceparent``).

    Args:
        session: a session (only read).
        order_id: the order.

    Returns:
        The distinct trace ids (32 hex digits, sorted; one for an order placed with
        tracing on; none without), or None when the order has no workflow.
    """
    workflow_id = session.scalar(
        select(Workflow.id).where(Workflow.kind == WORKFLOW_KIND, Workflow.subject_id == order_id)
    )
    if workflow_id is None:
        return None
    parents = session.scalars(
        select(WorkflowStep.traceparent)
        .where(WorkflowStep.workflow_id == workflow_id, WorkflowStep.traceparent.is_not(None))
        .distinct()
    )
    return sorted({p[3:35] for p in parents if p and len(p) >= 35})


def totals(session: Session, *, first_order_id: int | None = None) -> Totals:
    """Count orders by status and steps by state.

    Args:
        session: a session (only read).
        first_order_id: count only orders with this id or above (one run's orders).
    """
    joined = and_(Workflow.kind == WORKFLOW_KIND, Workflow.subject_id == Order.id)
    since = [Order.id >= first_order_id] if first_order_id is not None else []
    shown = case((Workflow.status == WorkflowStatus.BLOCKED, BLOCKED), else_=Order.status)
    by_status = dict(
        session.execute(
            select(shown, func.count())
            .select_from(Order)
            .outerjoin(Workflow, joined)
            .where(*since)
            .group_by(shown)
        ).all()
    )
    steps: dict[str, dict[str, int]] = {step: {} for step in STEPS}
    retries: dict[str, int] = defaultdict(int)
    for step, status, count, extra in session.execute(
        select(
            WorkflowStep.step,
            WorkflowStep.status,
            func.count(),
            func.sum(case((WorkflowStep.attempts > 1, WorkflowStep.attempts - 1), else_=0)),
        )
        .join(Workflow, Workflow.id == WorkflowStep.workflow_id)
        .join(Order, joined)
        .where(*since)
        .group_by(WorkflowStep.step, WorkflowStep.status)
    ):
        steps.setdefault(step, {})[status] = count
        retries[step] += int(extra or 0)
    for states in steps.values():
        for state in StepStatus.ALL:
            states.setdefault(state, 0)
    return Totals(
        orders=sum(by_status.values()),
        orders_by_status=by_status,
        steps_by_state=steps,
        retries_by_step={step: retries.get(step, 0) for step in steps},
    )


@dataclass(frozen=True)
class StepLatency:
    """Time from placement to a step's completion, in seconds."""

    step: str
    count: int
    p50_seconds: float
    p95_seconds: float
    max_seconds: float


def percentile(values: Sequence[float], fraction: float) -> float:
    """Return the nearest-rank percentile of ``values``.

    Args:
        values: samples (any order).
        fraction: 0 < fraction <= 1 (0.5 for the median, 0.95 for p95).

    Returns:
        The smallest sample with at least ``fraction`` of the samples at or
        below it; 0.0 for no samples.

    Raises:
        ValueError: ``fraction`` is outside (0, 1].
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], not {fraction}")
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def step_latencies(
    session: Session, *, first_order_id: int | None = None
) -> dict[str, StepLatency]:
    """Return p50 / p95 / max of (step finished - order placed) per step, done steps only.

    Args:
        session: a session (only read).
        first_order_id: only orders with this id or above.
    """
    since = [Order.id >= first_order_id] if first_order_id is not None else []
    samples: dict[str, list[float]] = defaultdict(list)
    for step, created, finished in session.execute(
        select(WorkflowStep.step, WorkflowStep.created_at, WorkflowStep.finished_at)
        .join(Workflow, Workflow.id == WorkflowStep.workflow_id)
        .join(Order, and_(Workflow.kind == WORKFLOW_KIND, Workflow.subject_id == Order.id))
        .where(WorkflowStep.status == StepStatus.DONE, *since)
    ):
        samples[step].append((finished - created).total_seconds())
    return {
        step: StepLatency(
            step, len(values), percentile(values, 0.5), percentile(values, 0.95), max(values)
        )
        for step, values in samples.items()
    }
