"""Invariants of placed orders, checked from the database alone.

Every check is a SQL query that finds violations by counting rows (GROUP BY
... HAVING), so it still detects a doubled effect when the unique index that
should prevent it is missing. Run the checks once the system is quiescent:
an order still in progress is reported as unsettled.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import ColumnElement, Join, Subquery, and_, func, or_, select
from sqlalchemy.orm import Session, aliased

from orders.domain.compensations import ORDER_CANCELLED
from orders.domain.effects import CANCELLATION, CONFIRMATION, ORDER_PLACED, SCHEDULED, points_for
from orders.domain.models import (
    Inventory,
    Notification,
    Order,
    OrderLine,
    OrderStatus,
    PointsEntry,
    Shipment,
    StockDeduction,
    StockReturn,
)
from orders.domain.steps import ORDER_GRAPH, WORKFLOW_KIND
from workflows.models import StepStatus, Workflow, WorkflowStatus, WorkflowStep
from workflows.uow import SessionFactory


@dataclass(frozen=True)
class Violation:
    """One broken invariant.

    Attributes:
        invariant: the invariant's name (a key of ``INVARIANTS``).
        order_id: the order concerned, if any.
        part_id: the part concerned (stock conservation), if any.
        detail: what is wrong, in words.
    """

    invariant: str
    order_id: int | None
    detail: str
    part_id: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """Return the violation as a JSON-ready dictionary."""
        return asdict(self)

    def __str__(self) -> str:
        subject = f"order {self.order_id}" if self.order_id is not None else f"part {self.part_id}"
        return f"{self.invariant}: {subject}: {self.detail}"


SETTLED = "order_settled"
CONSERVATION = "stock_conservation"
ONE_DEDUCTION = "one_deduction_per_order_part"
ONE_SHIPMENT = "one_shipment_per_completed_order"
ONE_POINTS = "one_points_entry_per_order"
ONE_NOTIFICATION = "at_most_one_notification_per_kind"
COMPLETION_TIME = "completion_after_steps"
POINTS_BALANCE = "points_from_completed_orders_only"
NO_SHIPMENT_UNLESS_COMPLETED = "no_scheduled_shipment_unless_completed"
ONE_FINAL_STATE = "one_final_state_per_order"
COMPENSATED = "compensations_done_once"

INVARIANTS: dict[str, str] = {
    SETTLED: "every placed order is completed, out of stock, cancelled, or blocked by dead "
    "steps with a reason",
    CONSERVATION: "for every part, initial on hand = current on hand + sum of deductions "
    "- sum of returns",
    ONE_DEDUCTION: "exactly one deduction per (order, part) of a completed order; "
    "none for an order out of stock",
    ONE_SHIPMENT: "one shipment per completed order; none for an order out of stock",
    ONE_POINTS: "one points entry per completed order; none for an order out of stock",
    ONE_NOTIFICATION: "at most one notification per (order, kind); a completed order has "
    "its confirmation, an order out of stock a cancellation notice and no confirmation, a "
    "cancelled order a cancellation notice",
    COMPLETION_TIME: "a completed order's completion time is at or after every step's finish",
    POINTS_BALANCE: "per customer and order, net points = floor(total / 10) for a completed "
    "order and 0 for any other (reversals are ledger entries, never deletes); a cancelled "
    "order blocked on a dead compensation is exempt",
    NO_SHIPMENT_UNLESS_COMPLETED: "no scheduled shipment for an order that ended without "
    "completing (out of stock, or cancelled and not blocked on a dead compensation)",
    ONE_FINAL_STATE: "each order is in exactly one known state, and a final one once its "
    "workflow is done",
    COMPENSATED: "a cancelled order has one compensation per finished step that has one, "
    "each done (or dead with a reason); stock returned once per (order, part) matching its "
    "deduction, points reversed by one ledger entry; no compensation, return or reversal "
    "for an order that was not cancelled",
}
"""Invariant name -> what it states."""


def _order_workflows() -> Join:
    return Order.__table__.join(
        Workflow.__table__,
        and_(Workflow.kind == WORKFLOW_KIND, Workflow.subject_id == Order.id),
        isouter=True,
    )


def _blocked_cancellation() -> ColumnElement[bool]:
    """A cancelled order whose workflow is blocked (a compensation is in the DLQ)."""
    return and_(
        Order.status == OrderStatus.CANCELLED,
        func.coalesce(Workflow.status, "") == WorkflowStatus.BLOCKED,
    )


def _waits_behind_a_step_not_done(step: type[WorkflowStep]) -> ColumnElement[bool]:
    """``step`` is waiting and one of the steps it waits for (``ORDER_GRAPH.after``) is
    not done: in a blocked workflow it stays waiting until that step is redriven (a
    dead stock step holds back notification, points and logistics). A waiting step
    whose prerequisites are all done is not covered: it should have been released."""
    before = aliased(WorkflowStep)
    return and_(
        step.status == StepStatus.WAITING,
        or_(
            *(
                and_(
                    step.step == name,
                    select(before.id)
                    .where(
                        before.workflow_id == step.workflow_id,
                        before.step.in_(prerequisites),
                        before.status != StepStatus.DONE,
                    )
                    .exists(),
                )
                for name, prerequisites in sorted(ORDER_GRAPH.after.items())
            )
        ),
    )


def check_settled(session: Session) -> list[Violation]:
    """Every order is settled: done (completed / out of stock) or blocked by dead steps
    (with the steps that wait behind a dead one still waiting).

    Returns:
        Violations of ``order_settled``.
    """
    found: list[Violation] = []
    rows = session.execute(
        select(Order.id, Order.status, Workflow.id, Workflow.status)
        .select_from(_order_workflows())
        .where(
            or_(
                Workflow.id.is_(None),
                Workflow.status.not_in((WorkflowStatus.DONE, WorkflowStatus.BLOCKED)),
                and_(
                    Workflow.status == WorkflowStatus.DONE,
                    Order.status.not_in(OrderStatus.FINAL),
                ),
                and_(
                    Workflow.status != WorkflowStatus.DONE,
                    Order.status == OrderStatus.COMPLETED,
                ),
            )
        )
        .order_by(Order.id)
    ).all()
    for order_id, order_status, workflow_id, workflow_status in rows:
        if workflow_id is None:
            detail = "has no workflow"
        else:
            detail = f"order is {order_status} but its workflow is {workflow_status}"
        found.append(Violation(SETTLED, order_id, detail))
    step = aliased(WorkflowStep)
    unsettled_steps = session.execute(
        select(Order.id, Workflow.status, step.step, step.status, step.outcome, step.last_error)
        .select_from(_order_workflows())
        .join(step, step.workflow_id == Workflow.id)
        .where(
            Workflow.status.in_((WorkflowStatus.DONE, WorkflowStatus.BLOCKED)),
            or_(
                and_(Workflow.status == WorkflowStatus.DONE, step.status.not_in(StepStatus.FINAL)),
                and_(
                    step.status.not_in((*StepStatus.FINAL, StepStatus.DEAD)),
                    ~_waits_behind_a_step_not_done(step),
                ),
                and_(
                    step.status == StepStatus.DEAD,
                    or_(step.outcome.is_(None), step.last_error.is_(None)),
                ),
            ),
        )
        .order_by(Order.id, step.step)
    ).all()
    for order_id, workflow_status, name, status, outcome, error in unsettled_steps:
        if status == StepStatus.DEAD:
            detail = f"step {name} is dead without a reason ({outcome!r}, {error!r})"
        else:
            detail = f"step {name} is {status} while the workflow is {workflow_status}"
        found.append(Violation(SETTLED, order_id, detail))
    blocked_without_dead = session.execute(
        select(Order.id, Workflow.blocked_step, Workflow.blocked_reason)
        .select_from(_order_workflows())
        .where(
            Workflow.status == WorkflowStatus.BLOCKED,
            or_(
                Workflow.blocked_reason.is_(None),
                ~select(WorkflowStep.id)
                .where(
                    WorkflowStep.workflow_id == Workflow.id,
                    WorkflowStep.status == StepStatus.DEAD,
                )
                .exists(),
            ),
        )
        .order_by(Order.id)
    ).all()
    for order_id, blocked_step, reason in blocked_without_dead:
        found.append(
            Violation(
                SETTLED,
                order_id,
                f"blocked on {blocked_step!r} ({reason!r}) without a dead step and a reason",
            )
        )
    return found


def check_stock_conservation(session: Session) -> list[Violation]:
    """For every part: initial on hand = on hand + deductions - returns, and on hand >= 0.

    Returns:
        Violations of ``stock_conservation`` (naming the part).
    """
    deducted = (
        select(StockDeduction.part_id, func.sum(StockDeduction.quantity).label("quantity"))
        .group_by(StockDeduction.part_id)
        .subquery()
    )
    returned = (
        select(StockReturn.part_id, func.sum(StockReturn.quantity).label("quantity"))
        .group_by(StockReturn.part_id)
        .subquery()
    )
    total = func.coalesce(deducted.c.quantity, 0)
    back = func.coalesce(returned.c.quantity, 0)
    rows = session.execute(
        select(Inventory.part_id, Inventory.initial_on_hand, Inventory.on_hand, total, back)
        .outerjoin(deducted, deducted.c.part_id == Inventory.part_id)
        .outerjoin(returned, returned.c.part_id == Inventory.part_id)
        .where(
            or_(
                Inventory.initial_on_hand != Inventory.on_hand + total - back,
                Inventory.on_hand < 0,
            )
        )
        .order_by(Inventory.part_id)
    ).all()
    found = [
        Violation(
            CONSERVATION,
            None,
            f"initial {initial} != on hand {on_hand} + deducted {quantity} - returned {back_}",
            part_id=part,
        )
        for part, initial, on_hand, quantity, back_ in rows
    ]
    orphans = session.execute(
        select(StockDeduction.part_id, func.sum(StockDeduction.quantity))
        .outerjoin(Inventory, Inventory.part_id == StockDeduction.part_id)
        .where(Inventory.part_id.is_(None))
        .group_by(StockDeduction.part_id)
    ).all()
    found += [
        Violation(
            CONSERVATION, None, f"{quantity} deducted from a part with no inventory", part_id=part
        )
        for part, quantity in orphans
    ]
    return found


def check_deductions(session: Session) -> list[Violation]:
    """One deduction per (order, part), matching the lines, for completed orders only.

    Returns:
        Violations of ``one_deduction_per_order_part``.
    """
    found = [
        Violation(ONE_DEDUCTION, order_id, f"{count} deductions of part {part}", part_id=part)
        for order_id, part, count in session.execute(
            select(StockDeduction.order_id, StockDeduction.part_id, func.count())
            .group_by(StockDeduction.order_id, StockDeduction.part_id)
            .having(func.count() > 1)
            .order_by(StockDeduction.order_id, StockDeduction.part_id)
        )
    ]
    needed = (
        select(OrderLine.order_id, OrderLine.part_id, func.sum(OrderLine.quantity).label("qty"))
        .group_by(OrderLine.order_id, OrderLine.part_id)
        .subquery()
    )
    taken = _per_order_part(StockDeduction)
    mismatched = session.execute(
        select(needed.c.order_id, needed.c.part_id, needed.c.qty, taken.c.qty)
        .join(Order, Order.id == needed.c.order_id)
        .outerjoin(
            taken,
            and_(taken.c.order_id == needed.c.order_id, taken.c.part_id == needed.c.part_id),
        )
        .where(
            Order.status == OrderStatus.COMPLETED,
            or_(taken.c.qty.is_(None), taken.c.qty != needed.c.qty),
        )
        .order_by(needed.c.order_id, needed.c.part_id)
    ).all()
    found += [
        Violation(
            ONE_DEDUCTION,
            order_id,
            f"part {part}: ordered {want}, deducted {got or 0}",
            part_id=part,
        )
        for order_id, part, want, got in mismatched
    ]
    found += [
        Violation(ONE_DEDUCTION, order_id, f"out of stock yet {count} deduction(s)")
        for order_id, count in session.execute(
            select(StockDeduction.order_id, func.count())
            .join(Order, Order.id == StockDeduction.order_id)
            .where(Order.status == OrderStatus.OUT_OF_STOCK)
            .group_by(StockDeduction.order_id)
            .order_by(StockDeduction.order_id)
        )
    ]
    return found


def _per_order_part(model: Any) -> Subquery:
    """Sum of ``model.quantity`` per (order, part): columns ``order_id``, ``part_id``, ``qty``.

    Args:
        model: a mapped class with ``order_id``, ``part_id`` and ``quantity`` columns
            (``StockDeduction``, ``StockReturn``).
    """
    return (
        select(model.order_id, model.part_id, func.sum(model.quantity).label("qty"))
        .group_by(model.order_id, model.part_id)
        .subquery()
    )


def _per_order_count(model: Any, *where: ColumnElement[bool]) -> Subquery:
    return (
        select(model.order_id, func.count().label("n"))
        .where(*where)
        .group_by(model.order_id)
        .subquery()
    )


def _exactly_one_when_done(
    session: Session, name: str, counted: Subquery, what: str
) -> list[Violation]:
    n = func.coalesce(counted.c.n, 0)
    rows = session.execute(
        select(Order.id, Order.status, Workflow.status, n)
        .select_from(_order_workflows())
        .outerjoin(counted, counted.c.order_id == Order.id)
        .where(
            or_(
                n > 1,
                and_(Order.status == OrderStatus.COMPLETED, n != 1),
                and_(Order.status == OrderStatus.OUT_OF_STOCK, n != 0),
            )
        )
        .order_by(Order.id)
    ).all()
    return [
        Violation(name, order_id, f"{count} {what} ({order_status}, workflow {status})")
        for order_id, order_status, status, count in rows
    ]


def check_shipments(session: Session) -> list[Violation]:
    """Exactly one shipment per completed order, none out of stock, never two per order.

    Returns:
        Violations of ``one_shipment_per_completed_order``.
    """
    return _exactly_one_when_done(session, ONE_SHIPMENT, _per_order_count(Shipment), "shipments")


def check_points(session: Session) -> list[Violation]:
    """Exactly one points entry per completed order, none out of stock, never two per order.

    Returns:
        Violations of ``one_points_entry_per_order``.
    """
    counted = _per_order_count(PointsEntry, PointsEntry.reason == ORDER_PLACED)
    return _exactly_one_when_done(session, ONE_POINTS, counted, "points entries")


def check_notifications(session: Session) -> list[Violation]:
    """At most one notification per (order, kind); the right notice per final state.

    A completed order has its confirmation; an order out of stock has a
    cancellation notice and no confirmation.

    Returns:
        Violations of ``at_most_one_notification_per_kind``.
    """
    found = [
        Violation(ONE_NOTIFICATION, order_id, f"{count} notifications of kind {kind}")
        for order_id, kind, count in session.execute(
            select(Notification.order_id, Notification.kind, func.count())
            .group_by(Notification.order_id, Notification.kind)
            .having(func.count() > 1)
            .order_by(Notification.order_id, Notification.kind)
        )
    ]
    confirmed = _per_order_count(Notification, Notification.kind == CONFIRMATION)
    found += [
        Violation(ONE_NOTIFICATION, order_id, "completed without its confirmation")
        for (order_id,) in session.execute(
            select(Order.id)
            .select_from(_order_workflows())
            .outerjoin(confirmed, confirmed.c.order_id == Order.id)
            .where(Order.status == OrderStatus.COMPLETED, confirmed.c.n.is_(None))
            .order_by(Order.id)
        )
    ]
    cancelled = _per_order_count(Notification, Notification.kind == CANCELLATION)
    found += [
        Violation(
            ONE_NOTIFICATION,
            order_id,
            f"out of stock with {confirms or 0} confirmation(s), "
            f"{notices or 0} cancellation notice(s)",
        )
        for order_id, confirms, notices in session.execute(
            select(Order.id, confirmed.c.n, cancelled.c.n)
            .outerjoin(confirmed, confirmed.c.order_id == Order.id)
            .outerjoin(cancelled, cancelled.c.order_id == Order.id)
            .where(
                Order.status == OrderStatus.OUT_OF_STOCK,
                or_(confirmed.c.n.is_not(None), cancelled.c.n.is_(None)),
            )
            .order_by(Order.id)
        )
    ]
    found += [
        Violation(ONE_NOTIFICATION, order_id, "cancelled without a cancellation notice")
        for (order_id,) in session.execute(
            select(Order.id)
            .outerjoin(cancelled, cancelled.c.order_id == Order.id)
            .where(Order.status == OrderStatus.CANCELLED, cancelled.c.n.is_(None))
            .order_by(Order.id)
        )
    ]
    return found


def check_completion_time(session: Session) -> list[Violation]:
    """A done workflow finished at or after every one of its steps.

    Returns:
        Violations of ``completion_after_steps``.
    """
    rows = session.execute(
        select(Order.id, WorkflowStep.step, WorkflowStep.finished_at, Workflow.finished_at)
        .select_from(_order_workflows())
        .join(WorkflowStep, WorkflowStep.workflow_id == Workflow.id)
        .where(
            Workflow.status == WorkflowStatus.DONE,
            or_(
                Workflow.finished_at.is_(None),
                WorkflowStep.finished_at.is_(None),
                WorkflowStep.finished_at > Workflow.finished_at,
            ),
        )
        .order_by(Order.id, WorkflowStep.step)
    ).all()
    return [
        Violation(
            COMPLETION_TIME,
            order_id,
            f"step {step} finished {step_done} but the order completed {done}",
        )
        for order_id, step, step_done, done in rows
    ]


def check_points_balance(session: Session) -> list[Violation]:
    """Net points per order: floor(total / 10) when completed, 0 otherwise (so per customer
    the balance is the sum over completed orders only). Orders still placed are left to
    ``order_settled``.

    Returns:
        Violations of ``points_from_completed_orders_only``.
    """
    net = (
        select(PointsEntry.order_id, func.sum(PointsEntry.points).label("points"))
        .group_by(PointsEntry.order_id)
        .subquery()
    )
    rows = session.execute(
        select(Order.id, Order.customer_id, Order.status, Order.total_price, net.c.points)
        .select_from(_order_workflows())
        .outerjoin(net, net.c.order_id == Order.id)
        .where(Order.status != OrderStatus.PLACED, ~_blocked_cancellation())
        .order_by(Order.id)
    ).all()
    found: list[Violation] = []
    for order_id, customer, status, total, points in rows:
        want = points_for(total) if status == OrderStatus.COMPLETED else 0
        if (points or 0) != want:
            found.append(
                Violation(
                    POINTS_BALANCE,
                    order_id,
                    f"customer {customer}: {status} order nets {points or 0} points, not {want}",
                )
            )
    return found


def check_no_shipment_unless_completed(session: Session) -> list[Violation]:
    """No scheduled shipment for an order that ended without completing.

    Returns:
        Violations of ``no_scheduled_shipment_unless_completed``.
    """
    return [
        Violation(
            NO_SHIPMENT_UNLESS_COMPLETED, order_id, f"{status} order has a scheduled shipment"
        )
        for order_id, status in session.execute(
            select(Order.id, Order.status)
            .select_from(_order_workflows())
            .join(Shipment, Shipment.order_id == Order.id)
            .where(
                Shipment.status == SCHEDULED,
                Order.status.in_([s for s in OrderStatus.FINAL if s != OrderStatus.COMPLETED]),
                ~_blocked_cancellation(),
            )
            .order_by(Order.id)
        )
    ]


def check_one_final_state(session: Session) -> list[Violation]:
    """Every order is in a known state, and in a final one once its workflow is done.

    Returns:
        Violations of ``one_final_state_per_order``.
    """
    return [
        Violation(ONE_FINAL_STATE, order_id, f"state {status!r} (workflow {workflow_status})")
        for order_id, status, workflow_status in session.execute(
            select(Order.id, Order.status, Workflow.status)
            .select_from(_order_workflows())
            .where(
                or_(
                    Order.status.not_in(OrderStatus.ALL),
                    and_(
                        Workflow.status == WorkflowStatus.DONE,
                        Order.status.not_in(OrderStatus.FINAL),
                    ),
                )
            )
            .order_by(Order.id)
        )
    ]


def check_compensations(session: Session) -> list[Violation]:
    """Compensations of cancelled orders are done exactly once; nobody else has any.

    For each order: every finished forward step whose definition names a
    compensation has exactly one compensating step row, done — or dead (then
    ``order_settled`` wants the workflow blocked with a reason). Counted, not
    trusted to unique indexes: at most one stock return per (order, part), equal
    to its deduction; at most one points reversal per order, equal to minus the
    points credited; none of these for an order that was not cancelled.

    Returns:
        Violations of ``compensations_done_once``.
    """
    found: list[Violation] = []
    rows = session.execute(
        select(Order.id, Order.status, WorkflowStep.step, WorkflowStep.status,
               WorkflowStep.outcome, WorkflowStep.compensates)
        .select_from(_order_workflows())
        .join(WorkflowStep, WorkflowStep.workflow_id == Workflow.id)
        .order_by(Order.id, WorkflowStep.id)
    ).all()  # fmt: skip
    per_order: dict[int, tuple[str, list[tuple[str, str, str | None, str | None]]]] = {}
    for order_id, order_status, step, status, outcome, compensates in rows:
        per_order.setdefault(order_id, (order_status, []))[1].append(
            (step, status, outcome, compensates)
        )
    for order_id, (order_status, steps) in per_order.items():
        undo = [s for s in steps if s[3] is not None]
        if order_status != OrderStatus.CANCELLED:
            found += [
                Violation(COMPENSATED, order_id, f"{order_status} order has compensation {s[0]}")
                for s in undo
            ]
            continue
        for step, status, outcome, _ in steps:
            name = ORDER_GRAPH.compensations.get(step)
            if name is None or status != StepStatus.DONE or outcome in ORDER_GRAPH.halting:
                continue
            mine = [s for s in undo if s[3] == step]
            if len(mine) != 1:
                found.append(
                    Violation(COMPENSATED, order_id, f"step {step} has {len(mine)} compensations")
                )
            elif mine[0][1] not in (StepStatus.DONE, StepStatus.DEAD):
                found.append(
                    Violation(COMPENSATED, order_id, f"compensation {mine[0][0]} is {mine[0][1]}")
                )
    found += _check_returns(session)
    found += _check_reversals(session)
    return found


def _check_returns(session: Session) -> list[Violation]:
    found = [
        Violation(COMPENSATED, order_id, f"{count} returns of part {part}", part_id=part)
        for order_id, part, count in session.execute(
            select(StockReturn.order_id, StockReturn.part_id, func.count())
            .group_by(StockReturn.order_id, StockReturn.part_id)
            .having(func.count() > 1)
            .order_by(StockReturn.order_id, StockReturn.part_id)
        )
    ]
    back = _per_order_part(StockReturn)
    taken = _per_order_part(StockDeduction)
    found += [
        Violation(
            COMPENSATED,
            order_id,
            f"{status} order: part {part} returned {got} of {want or 0} deducted",
            part_id=part,
        )
        for order_id, part, got, want, status in session.execute(
            select(back.c.order_id, back.c.part_id, back.c.qty, taken.c.qty, Order.status)
            .join(Order, Order.id == back.c.order_id)
            .outerjoin(
                taken,
                and_(taken.c.order_id == back.c.order_id, taken.c.part_id == back.c.part_id),
            )
            .where(
                or_(
                    Order.status != OrderStatus.CANCELLED,
                    taken.c.qty.is_(None),
                    taken.c.qty != back.c.qty,
                )
            )
            .order_by(back.c.order_id, back.c.part_id)
        )
    ]
    undo = aliased(WorkflowStep)
    found += [
        Violation(COMPENSATED, order_id, f"part {part} deducted and never returned", part_id=part)
        for order_id, part in session.execute(
            select(taken.c.order_id, taken.c.part_id)
            .join(Order, Order.id == taken.c.order_id)
            .join(
                Workflow,
                and_(Workflow.kind == WORKFLOW_KIND, Workflow.subject_id == Order.id),
            )
            .join(undo, and_(undo.workflow_id == Workflow.id, undo.compensates.is_not(None)))
            .outerjoin(
                back,
                and_(back.c.order_id == taken.c.order_id, back.c.part_id == taken.c.part_id),
            )
            .where(
                Order.status == OrderStatus.CANCELLED,
                undo.step == ORDER_GRAPH.compensations.get("stock", ""),
                undo.status == StepStatus.DONE,
                back.c.qty.is_(None),
            )
            .order_by(taken.c.order_id, taken.c.part_id)
        )
    ]
    return found


def _check_reversals(session: Session) -> list[Violation]:
    credited = (
        select(PointsEntry.order_id, func.sum(PointsEntry.points).label("points"))
        .where(PointsEntry.reason != ORDER_CANCELLED)
        .group_by(PointsEntry.order_id)
        .subquery()
    )
    rows = session.execute(
        select(
            PointsEntry.order_id,
            Order.status,
            func.count(),
            func.sum(PointsEntry.points),
            func.max(credited.c.points),
        )
        .join(Order, Order.id == PointsEntry.order_id)
        .outerjoin(credited, credited.c.order_id == PointsEntry.order_id)
        .where(PointsEntry.reason == ORDER_CANCELLED)
        .group_by(PointsEntry.order_id, Order.status)
        .order_by(PointsEntry.order_id)
    ).all()
    return [
        Violation(
            COMPENSATED,
            order_id,
            f"{status} order: {count} reversal(s) of {points} points for {credit or 0} credited",
        )
        for order_id, status, count, points, credit in rows
        if status != OrderStatus.CANCELLED or count != 1 or points != -(credit or 0)
    ]


CHECKS: dict[str, Callable[[Session], list[Violation]]] = {
    SETTLED: check_settled,
    CONSERVATION: check_stock_conservation,
    ONE_DEDUCTION: check_deductions,
    ONE_SHIPMENT: check_shipments,
    ONE_POINTS: check_points,
    ONE_NOTIFICATION: check_notifications,
    COMPLETION_TIME: check_completion_time,
    POINTS_BALANCE: check_points_balance,
    NO_SHIPMENT_UNLESS_COMPLETED: check_no_shipment_unless_completed,
    ONE_FINAL_STATE: check_one_final_state,
    COMPENSATED: check_compensations,
}
"""Invariant name -> its check."""


def check_invariants(database: Session | SessionFactory) -> list[Violation]:
    """Run every check; an empty list means every invariant holds.

    Args:
        database: a session, or a session factory to open one with (only read).

    Returns:
        Every violation, grouped by invariant in ``INVARIANTS`` order.
    """
    if not isinstance(database, Session):
        with database() as session:
            return check_invariants(session)
    return [violation for check in CHECKS.values() for violation in check(database)]
