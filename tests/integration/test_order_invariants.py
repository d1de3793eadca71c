"""Invariant checks: silent on a sound database, firing on each kind of damage."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import delete, insert, select, text, update

from orders.app.invariants import (
    COMPENSATED,
    COMPLETION_TIME,
    CONSERVATION,
    INVARIANTS,
    NO_SHIPMENT_UNLESS_COMPLETED,
    ONE_DEDUCTION,
    ONE_FINAL_STATE,
    ONE_NOTIFICATION,
    ONE_POINTS,
    ONE_SHIPMENT,
    POINTS_BALANCE,
    SETTLED,
    check_invariants,
)
from orders.app.placement import place_orders
from orders.domain.cancellation import cancel_order
from orders.domain.compensations import ORDER_CANCELLED
from orders.domain.handlers import StepRequest, handle_step, mark_step_dead
from orders.domain.models import (
    Inventory,
    Notification,
    Order,
    PointsEntry,
    Shipment,
    StockDeduction,
    StockReturn,
)
from orders.domain.steps import LOGISTICS, POINTS, RETURN_STOCK, STEPS, STOCK
from workflows.columns import utcnow
from workflows.models import StepStatus, Workflow, WorkflowStatus, WorkflowStep
from workflows.uow import UnitOfWork


@pytest.fixture
def sound(session_factory, catalog, make_draft):
    """Orders 1-3 completed, 4 out of stock, 5 blocked on a dead points step, 6 cancelled
    after its stock, points and logistics ran (all three compensated)."""
    drafts = [
        make_draft(),
        make_draft(),
        make_draft([(14, 4, "RAIL")]),
        make_draft([(13, 50, "SHIP")]),
        make_draft(),
        make_draft(),
    ]
    with UnitOfWork(session_factory) as uow:
        placed = place_orders(uow.session, drafts)
        uow.commit()
    for p in placed[:4]:
        for step in STEPS:
            handle_step(session_factory, StepRequest(p.workflow_id, p.order_id, step))
    blocked = placed[4]
    for step in STEPS:
        if step != POINTS:
            handle_step(session_factory, StepRequest(blocked.workflow_id, blocked.order_id, step))
    mark_step_dead(
        session_factory, blocked.workflow_id, POINTS, "retries_exhausted", error="ValueError: boom"
    )
    called_off = placed[5]
    for step in (STOCK, POINTS, LOGISTICS):
        handle_step(session_factory, StepRequest(called_off.workflow_id, called_off.order_id, step))
    with UnitOfWork(session_factory) as uow:
        result = cancel_order(uow.session, called_off.order_id, utcnow())
        uow.commit()
    for step in result.compensations:
        handle_step(session_factory, StepRequest(called_off.workflow_id, called_off.order_id, step))
    return {p.order_id: p for p in placed}


def violations(session_factory) -> list:
    with session_factory() as session:
        return check_invariants(session)


def fired(session_factory) -> set[tuple[str, int | None]]:
    return {(v.invariant, v.order_id) for v in violations(session_factory)}


def execute(session_factory, *statements) -> None:
    with session_factory() as session:
        for statement in statements:
            session.execute(statement)
        session.commit()


def drop_index(name: str):
    """Uniqueness is a named unique index: DROP INDEX works on SQLite and PostgreSQL."""
    return text(f"DROP INDEX {name}")


def test_sound_database_has_no_violations(session_factory, sound):
    assert violations(session_factory) == []
    assert check_invariants(session_factory) == []
    assert len(INVARIANTS) == 11


def test_violation_names_order_and_invariant(session_factory, sound):
    execute(session_factory, delete(Shipment).where(Shipment.order_id == 2))
    [violation] = check_invariants(session_factory)
    assert violation.as_dict() == {
        "invariant": ONE_SHIPMENT,
        "order_id": 2,
        "detail": "0 shipments (completed, workflow done)",
        "part_id": None,
    }
    assert (
        str(violation)
        == "one_shipment_per_completed_order: order 2: 0 shipments (completed, workflow done)"
    )


def test_order_still_in_progress_is_unsettled(session_factory, catalog, make_draft):
    with UnitOfWork(session_factory) as uow:
        [placed] = place_orders(uow.session, [make_draft()])
        uow.commit()
    handle_step(session_factory, StepRequest(placed.workflow_id, placed.order_id, "stock"))
    assert fired(session_factory) == {(SETTLED, placed.order_id)}


def test_blocked_order_without_a_dead_step_is_unsettled(session_factory, sound):
    execute(
        session_factory,
        update(WorkflowStep)
        .where(WorkflowStep.workflow_id == sound[5].workflow_id, WorkflowStep.step == POINTS)
        .values(status=StepStatus.DISPATCHED),
    )
    assert (SETTLED, 5) in fired(session_factory)


def test_an_order_blocked_on_its_dead_stock_step_is_settled_with_the_rest_waiting(
    session_factory, sound, make_draft
):
    """Notification, points and logistics wait behind the stock step: while it is in the
    DLQ they stay waiting, and the order counts as blocked (settled), not in progress."""
    with UnitOfWork(session_factory) as uow:
        [placed] = place_orders(uow.session, [make_draft()])
        uow.commit()
    mark_step_dead(
        session_factory, placed.workflow_id, STOCK, "retries_exhausted", error="ValueError: boom"
    )
    with session_factory() as session:
        states = dict(
            session.execute(
                select(WorkflowStep.step, WorkflowStep.status).where(
                    WorkflowStep.workflow_id == placed.workflow_id
                )
            ).all()
        )
        workflow = session.get(Workflow, placed.workflow_id)
        assert workflow is not None and workflow.status == WorkflowStatus.BLOCKED
    assert states == {
        STOCK: StepStatus.DEAD,
        **{step: StepStatus.WAITING for step in STEPS if step != STOCK},
    }
    assert violations(session_factory) == []


def test_a_waiting_step_whose_prerequisites_are_done_is_unsettled(session_factory, sound):
    """Order 5 is blocked on its dead points step, its stock step done: a logistics step
    still waiting there was never released, and a blocked workflow does not excuse it."""
    execute(
        session_factory,
        update(WorkflowStep)
        .where(WorkflowStep.workflow_id == sound[5].workflow_id, WorkflowStep.step == LOGISTICS)
        .values(status=StepStatus.WAITING),
    )
    assert (SETTLED, 5) in fired(session_factory)


def test_completed_order_with_an_unfinished_step_is_unsettled(session_factory, sound):
    execute(
        session_factory,
        update(WorkflowStep)
        .where(WorkflowStep.workflow_id == sound[1].workflow_id, WorkflowStep.step == LOGISTICS)
        .values(status=StepStatus.FAILED),
    )
    assert (SETTLED, 1) in fired(session_factory)


def test_changed_stock_breaks_conservation(session_factory, sound):
    execute(
        session_factory,
        update(Inventory).where(Inventory.part_id == 11).values(on_hand=Inventory.on_hand - 1),
    )
    found = violations(session_factory)
    assert [(v.invariant, v.part_id) for v in found] == [(CONSERVATION, 11)]


def test_duplicate_deduction_is_found_without_the_unique_index(session_factory, sound):
    execute(
        session_factory,
        drop_index("uq_stock_deductions_order_id_part_id"),
        insert(StockDeduction).values(order_id=2, part_id=10, quantity=0, created_at=utcnow()),
    )
    assert fired(session_factory) == {(ONE_DEDUCTION, 2)}


def test_stock_deducted_twice_is_found(session_factory, sound):
    execute(
        session_factory,
        drop_index("uq_stock_deductions_order_id_part_id"),
        insert(StockDeduction).values(order_id=3, part_id=14, quantity=4, created_at=utcnow()),
        update(Inventory).where(Inventory.part_id == 14).values(on_hand=Inventory.on_hand - 4),
    )
    found = violations(session_factory)
    assert {(v.invariant, v.order_id) for v in found} == {(ONE_DEDUCTION, 3)}
    assert len(found) == 2  # two rows for (3, 14), and 8 taken where 4 were ordered


def test_missing_deduction_is_found(session_factory, sound):
    execute(
        session_factory,
        delete(StockDeduction).where(StockDeduction.order_id == 1, StockDeduction.part_id == 12),
        update(Inventory).where(Inventory.part_id == 12).values(on_hand=Inventory.on_hand + 1),
    )
    assert fired(session_factory) == {(ONE_DEDUCTION, 1)}


def test_deduction_for_an_order_out_of_stock_is_found(session_factory, sound):
    execute(
        session_factory,
        insert(StockDeduction).values(order_id=4, part_id=13, quantity=0, created_at=utcnow()),
    )
    assert fired(session_factory) == {(ONE_DEDUCTION, 4)}


def test_second_shipment_is_found_without_the_unique_index(session_factory, sound):
    execute(
        session_factory,
        drop_index("uq_shipments_order_id"),
        insert(Shipment).values(
            order_id=1, ship_mode="AIR", status="scheduled", created_at=utcnow()
        ),
    )
    assert fired(session_factory) == {(ONE_SHIPMENT, 1)}


def test_completed_order_without_shipment_is_found(session_factory, sound):
    execute(session_factory, delete(Shipment).where(Shipment.order_id == 2))
    assert fired(session_factory) == {(ONE_SHIPMENT, 2)}


def test_second_points_entry_is_found_without_the_unique_index(session_factory, sound):
    execute(
        session_factory,
        drop_index("uq_points_ledger_order_id_reason"),
        insert(PointsEntry).values(
            order_id=3, customer_id=1, reason="order_placed", points=1, created_at=utcnow()
        ),
    )
    assert fired(session_factory) == {(ONE_POINTS, 3), (POINTS_BALANCE, 3)}


def test_completed_order_without_points_is_found(session_factory, sound):
    execute(session_factory, delete(PointsEntry).where(PointsEntry.order_id == 1))
    assert fired(session_factory) == {(ONE_POINTS, 1), (POINTS_BALANCE, 1)}


def test_points_kept_by_an_order_out_of_stock_are_found(session_factory, sound):
    execute(
        session_factory,
        insert(PointsEntry).values(
            order_id=4, customer_id=1, reason="order_placed", points=7, created_at=utcnow()
        ),
    )
    found = violations(session_factory)
    assert {(v.invariant, v.order_id) for v in found} == {(ONE_POINTS, 4), (POINTS_BALANCE, 4)}
    assert "out_of_stock order nets 7 points, not 0" in str(found[-1])


def test_points_balance_counts_every_ledger_entry_of_the_order(session_factory, sound):
    """A stray entry under another reason still changes the customer's balance."""
    execute(
        session_factory,
        insert(PointsEntry).values(
            order_id=2, customer_id=1, reason="goodwill", points=5, created_at=utcnow()
        ),
    )
    assert fired(session_factory) == {(POINTS_BALANCE, 2)}


def test_scheduled_shipment_of_an_order_out_of_stock_is_found(session_factory, sound):
    execute(
        session_factory,
        insert(Shipment).values(
            order_id=4, ship_mode="SHIP", status="scheduled", created_at=utcnow()
        ),
    )
    assert fired(session_factory) == {(ONE_SHIPMENT, 4), (NO_SHIPMENT_UNLESS_COMPLETED, 4)}


def test_an_order_in_an_unknown_state_is_found(session_factory, sound):
    execute(session_factory, update(Order).where(Order.id == 2).values(status="shipped?"))
    assert (ONE_FINAL_STATE, 2) in fired(session_factory)


def test_second_notification_of_a_kind_is_found_without_the_unique_index(session_factory, sound):
    execute(
        session_factory,
        drop_index("uq_notifications_order_id_kind"),
        insert(Notification).values(
            order_id=5, kind="order_confirmed", customer_id=1, created_at=utcnow()
        ),
    )
    assert fired(session_factory) == {(ONE_NOTIFICATION, 5)}


def test_completion_before_a_step_finished_is_found(session_factory, sound):
    with session_factory() as session:
        last = max(
            session.scalars(
                select(WorkflowStep.finished_at).where(
                    WorkflowStep.workflow_id == sound[2].workflow_id
                )
            )
        )
    execute(
        session_factory,
        update(Workflow)
        .where(Workflow.id == sound[2].workflow_id)
        .values(finished_at=last - timedelta(milliseconds=1)),
    )
    assert fired(session_factory) == {(COMPLETION_TIME, 2)}


def test_order_marked_completed_while_its_workflow_runs_is_found(session_factory, sound):
    execute(
        session_factory,
        update(Workflow)
        .where(Workflow.id == sound[5].workflow_id)
        .values(status=WorkflowStatus.RUNNING),
    )
    assert (SETTLED, 5) in fired(session_factory)
    with session_factory() as session:
        assert session.get(Order, 5).status == "placed"


def test_stock_returned_twice_breaks_conservation_and_the_compensation(session_factory, sound):
    execute(
        session_factory,
        drop_index("uq_stock_returns_order_id_part_id"),
        insert(StockReturn).values(order_id=6, part_id=10, quantity=2, created_at=utcnow()),
        update(Inventory).where(Inventory.part_id == 10).values(on_hand=Inventory.on_hand + 2),
    )
    found = violations(session_factory)
    assert {(v.invariant, v.order_id) for v in found} == {(COMPENSATED, 6)}
    assert any("2 returns of part 10" in v.detail for v in found)
    execute(
        session_factory,
        update(Inventory).where(Inventory.part_id == 10).values(on_hand=Inventory.on_hand + 1),
    )
    assert (CONSERVATION, None) in fired(session_factory)


def test_a_reversal_deleted_from_the_ledger_leaves_points_on_a_cancelled_order(
    session_factory, sound
):
    execute(
        session_factory,
        delete(PointsEntry).where(PointsEntry.order_id == 6, PointsEntry.reason == ORDER_CANCELLED),
    )
    assert fired(session_factory) == {(POINTS_BALANCE, 6)}


def test_a_reversal_on_an_order_that_was_not_cancelled_is_caught(session_factory, sound):
    execute(
        session_factory,
        insert(PointsEntry).values(
            order_id=1, customer_id=1, reason=ORDER_CANCELLED, points=-123, created_at=utcnow()
        ),
    )
    assert (COMPENSATED, 1) in fired(session_factory)


def test_a_compensation_left_pending_or_missing_is_caught(session_factory, sound):
    execute(
        session_factory,
        update(WorkflowStep)
        .where(WorkflowStep.workflow_id == sound[6].workflow_id, WorkflowStep.step == RETURN_STOCK)
        .values(status=StepStatus.PENDING),
    )
    assert {(COMPENSATED, 6), (SETTLED, 6)} <= fired(session_factory)
    execute(
        session_factory,
        delete(WorkflowStep).where(
            WorkflowStep.workflow_id == sound[6].workflow_id, WorkflowStep.step == RETURN_STOCK
        ),
    )
    assert any(
        v.invariant == COMPENSATED and "step stock has 0 compensations" in v.detail
        for v in violations(session_factory)
    )


def test_a_compensation_on_a_completed_order_is_caught(session_factory, sound):
    with session_factory() as session:
        session.add(
            WorkflowStep(
                workflow_id=sound[1].workflow_id,
                step=RETURN_STOCK,
                queue=RETURN_STOCK,
                task="orders.return_stock",
                payload={},
                status=StepStatus.DONE,
                attempts=1,
                created_at=utcnow() - timedelta(days=1),
                finished_at=utcnow() - timedelta(days=1),
                compensates=STOCK,
            )
        )
        session.commit()
    assert (COMPENSATED, 1) in fired(session_factory)


def test_a_cancelled_order_with_a_scheduled_shipment_or_no_notice_is_caught(session_factory, sound):
    execute(
        session_factory, update(Shipment).where(Shipment.order_id == 6).values(status="scheduled")
    )
    assert fired(session_factory) == {(NO_SHIPMENT_UNLESS_COMPLETED, 6)}
    execute(
        session_factory,
        update(Shipment).where(Shipment.order_id == 6).values(status="cancelled"),
        delete(Notification).where(Notification.order_id == 6),
    )
    assert fired(session_factory) == {(ONE_NOTIFICATION, 6)}
