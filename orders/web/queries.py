"""Database reads the dashboard needs beyond ``orders.domain.queries``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, select
from sqlalchemy.orm import Session

from orders.domain.models import Order
from orders.domain.steps import WORKFLOW_KIND
from workflows.models import Workflow, WorkflowStatus


@dataclass(frozen=True)
class OrderRow:
    """One line of the recent-orders list.

    Attributes:
        order_id: the order's id.
        status: shown status (``blocked`` wins over the order's own status).
        placed_at / completed_at: UTC times (completed_at None while running).
        blocked_step: the dead step of a blocked order.
    """

    order_id: int
    status: str
    placed_at: datetime
    completed_at: datetime | None
    blocked_step: str | None


def recent_orders(session: Session, limit: int = 20) -> list[OrderRow]:
    """The ``limit`` newest orders, newest first (primary-key order, no scan).

    Args:
        session: a session (only read).
        limit: rows wanted (>= 1).
    """
    rows = session.execute(
        select(
            Order.id,
            Order.status,
            Order.placed_at,
            Workflow.status,
            Workflow.finished_at,
            Workflow.blocked_step,
        )
        .outerjoin(Workflow, and_(Workflow.kind == WORKFLOW_KIND, Workflow.subject_id == Order.id))
        .order_by(Order.id.desc())
        .limit(limit)
    ).all()
    return [
        OrderRow(
            order_id=oid,
            status="blocked" if wstatus == WorkflowStatus.BLOCKED else status,
            placed_at=placed,
            completed_at=finished,
            blocked_step=blocked,
        )
        for oid, status, placed, wstatus, finished, blocked in rows
    ]
