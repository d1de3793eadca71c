"""Orders by status and the outbox backlog, from indexed columns (cheap counts)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from orders.domain.models import Order, OrderStatus
from orders.domain.steps import WORKFLOW_KIND
from workflows.models import StepStatus, Workflow, WorkflowStatus, WorkflowStep

SHOWN_STATUSES = ("in_progress", "completed", "out_of_stock", "cancelled", "blocked")
"""The statuses an operator sees; ``blocked`` wins over the order's own status."""


@dataclass(frozen=True)
class OrderCounts:
    """Counts over every order.

    Attributes:
        placed: orders ever placed (the sum of the four statuses below).
        in_progress: steps still running (status placed, workflow not blocked).
        completed: every step done.
        out_of_stock: the stock step found a part short (final).
        cancelled: cancelled by the customer (its compensations may still run).
        blocked: a step was dead-lettered; the order waits for a redrive.
        outbox_backlog: step records written but not yet published to a queue.
        outbox_unpublishable: step records the relay gave up publishing (their
            orders are blocked; ``orders outbox list`` says why).
        steps_waiting: step records waiting for their prerequisites (stock first).
        steps_skipped: step records that will never run (a prerequisite ran out of
            stock, or the order was cancelled before they ran).
    """

    placed: int
    in_progress: int
    completed: int
    out_of_stock: int
    blocked: int
    outbox_backlog: int
    outbox_unpublishable: int = 0
    cancelled: int = 0
    steps_waiting: int = 0
    steps_skipped: int = 0

    def by_status(self) -> dict[str, int]:
        """``{status: count}`` for :data:`SHOWN_STATUSES`."""
        return {s: getattr(self, s) for s in SHOWN_STATUSES}

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON output."""
        return asdict(self)


def order_counts(session: Session) -> OrderCounts:
    """Count orders by shown status and the unpublished step records.

    Three grouped counts on indexed columns (``orders.status``,
    ``workflows.status``, ``workflow_steps.status``); the blocked ones are read
    from the few blocked workflows, not from a join over every order.

    Args:
        session: a session (only read).

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database failed.
    """
    own: dict[str, int] = dict(
        session.execute(select(Order.status, func.count()).group_by(Order.status)).all()
    )
    blocked: dict[str, int] = dict(
        session.execute(
            select(Order.status, func.count())
            .select_from(Workflow)
            .join(Order, Order.id == Workflow.subject_id)
            .where(Workflow.kind == WORKFLOW_KIND, Workflow.status == WorkflowStatus.BLOCKED)
            .group_by(Order.status)
        ).all()
    )
    outbox: dict[str, int] = dict(
        session.execute(
            select(WorkflowStep.status, func.count())
            .where(
                WorkflowStep.status.in_(
                    (
                        StepStatus.PENDING,
                        StepStatus.UNPUBLISHABLE,
                        StepStatus.WAITING,
                        StepStatus.SKIPPED,
                    )
                )
            )
            .group_by(WorkflowStep.status)
        ).all()
    )

    def unblocked(status: str) -> int:
        return own.get(status, 0) - blocked.get(status, 0)

    return OrderCounts(
        placed=sum(own.values()),
        in_progress=unblocked(OrderStatus.PLACED),
        completed=unblocked(OrderStatus.COMPLETED),
        out_of_stock=unblocked(OrderStatus.OUT_OF_STOCK),
        blocked=sum(blocked.values()),
        outbox_backlog=outbox.get(StepStatus.PENDING, 0),
        outbox_unpublishable=outbox.get(StepStatus.UNPUBLISHABLE, 0),
        cancelled=unblocked(OrderStatus.CANCELLED),
        steps_waiting=outbox.get(StepStatus.WAITING, 0),
        steps_skipped=outbox.get(StepStatus.SKIPPED, 0),
    )
