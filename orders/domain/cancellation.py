"""Cancel an order by its customer: the order becomes ``cancelled`` and what its
steps did is undone by compensating steps (``workflows.compensation``).

An order may be cancelled while it is ``placed`` (in flight, or blocked by a
dead step). Its shipment is dispatched when the order completes (every
forward step done), so a completed order can no longer be cancelled; an order
that ended out of stock kept nothing, so there is nothing to cancel.
Cancelling an order that is already cancelled changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from orders.domain.effects import notify_cancelled
from orders.domain.errors import OrderNotCancellable, OrderNotFound
from orders.domain.models import Order, OrderStatus
from orders.domain.steps import ORDER_GRAPH, WORKFLOW_KIND, route
from workflows.compensation import compensate_workflow, hold_workflow
from workflows.messages import DispatchedStep
from workflows.models import Workflow, WorkflowStep

CANCELLED_BY_CUSTOMER = "cancelled"
"""The reason word written into forward steps skipped by a cancellation."""


@dataclass(frozen=True)
class CancelResult:
    """What a cancellation did.

    Attributes:
        order_id: the order.
        already: True when the order was already cancelled (nothing changed).
        compensations: every compensating step of the order.
        skipped: forward steps skipped now (they had not run).
        added: ids of compensating step rows written now.
        dispatched: those rows when written ``dispatched`` (``dispatch=True``), with
            their message columns, to publish after the commit.
    """

    order_id: int
    already: bool
    compensations: tuple[str, ...]
    skipped: tuple[str, ...] = ()
    added: tuple[int, ...] = ()
    dispatched: tuple[DispatchedStep, ...] = ()


def cancel_order(
    session: Session, order_id: int, now: datetime, *, dispatch: bool = False
) -> CancelResult:
    """Cancel one order in the caller's unit of work (nothing committed).

    The order's workflow row is locked first (:func:`hold_workflow`: a write,
    which on SQLite takes the database's write lock, where ``FOR UPDATE`` does
    nothing), then the order is read: a step completing the order at the same
    moment either commits first (then this raises ``OrderNotCancellable``) or
    waits for this commit and sees its step skipped.

    Args:
        session: the caller's session.
        order_id: the order to cancel.
        now: the cancellation time (timezone-aware).
        dispatch: write the compensating rows ``dispatched``, for the caller to
            publish after its commit (``workflows.relay.publish_dispatched``); False
            writes them ``pending`` for the relay sweep.

    Returns:
        A :class:`CancelResult`.

    Raises:
        OrderNotFound: no such order (or it has no workflow).
        OrderNotCancellable: the order completed or ended out of stock.
        sqlalchemy.orm.exc.StaleDataError / OperationalError: lost a race
            (retry the unit of work).
    """
    workflow_id = session.scalar(
        select(Workflow.id).where(Workflow.kind == WORKFLOW_KIND, Workflow.subject_id == order_id)
    )
    if workflow_id is not None:
        hold_workflow(session, workflow_id)
    order = session.get(Order, order_id, populate_existing=True)
    if order is None or workflow_id is None:
        raise OrderNotFound(f"order {order_id} does not exist")
    if order.status == OrderStatus.CANCELLED:
        names = session.scalars(
            select(WorkflowStep.step)
            .where(WorkflowStep.workflow_id == workflow_id, WorkflowStep.compensates.is_not(None))
            .order_by(WorkflowStep.id)
        ).all()
        return CancelResult(order_id, True, tuple(names))
    if order.status != OrderStatus.PLACED:
        raise OrderNotCancellable(order_id, order.status)
    done = compensate_workflow(
        session,
        ORDER_GRAPH,
        workflow_id,
        reason=CANCELLED_BY_CUSTOMER,
        route=route,
        now=now,
        dispatch=dispatch,
    )
    order.status = OrderStatus.CANCELLED
    notify_cancelled(session, [(order.id, order.customer_id)], now)
    session.flush()
    return CancelResult(
        order_id, False, done.compensations, done.skipped, done.added, done.dispatched
    )
