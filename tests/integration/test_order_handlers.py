"""Step handlers: one effect per step however often a job is delivered."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.orm.exc import StaleDataError

import workflows.tracker as tracker
from orders.app.invariants import check_invariants
from orders.app.placement import PlacedOrder, place_orders
from orders.domain.cancellation import cancel_order
from orders.domain.effects import CANCELLATION, CONFIRMATION, EFFECTS, ORDER_PLACED, credit_points
from orders.domain.errors import OrderNotFound
from orders.domain.handlers import (
    StepRequest,
    StepResult,
    StepRun,
    handle_step,
    handle_steps,
    mark_step_dead,
    record_step_failure,
)
from orders.domain.models import (
    Inventory,
    Notification,
    Order,
    OrderStatus,
    PointsEntry,
    Shipment,
    StockDeduction,
)
from orders.domain.steps import LOGISTICS, NOTIFICATION, POINTS, STEPS, STOCK
from workflows.columns import utcnow
from workflows.errors import StepNotFound, StepNotReady, SubjectMismatch
from workflows.models import StepStatus, Workflow, WorkflowStatus, WorkflowStep
from workflows.tracker import load_step
from workflows.uow import UnitOfWork


def place_one(session_factory, order_draft) -> PlacedOrder:
    with UnitOfWork(session_factory) as uow:
        [placed] = place_orders(uow.session, [order_draft])
        uow.commit()
    return placed


def request(placed: PlacedOrder, step: str, attempt: int = 1, token: int = 7) -> StepRequest:
    return StepRequest(placed.workflow_id, placed.order_id, step, attempt, f"job-{step}", token)


def effect_rows(session_factory, order_id: int) -> dict[str, int]:
    with session_factory() as session:
        return {
            model.__tablename__: session.scalar(
                select(func.count()).select_from(model).where(model.order_id == order_id)
            )
            for model in (StockDeduction, Notification, PointsEntry, Shipment)
        }


def on_hand(session_factory) -> dict[int, int]:
    with session_factory() as session:
        return dict(session.execute(select(Inventory.part_id, Inventory.on_hand)).all())


def test_all_four_steps_complete_the_workflow_and_the_order(session_factory, catalog, make_draft):
    placed = place_one(session_factory, make_draft(total="1234.56"))
    results = [handle_step(session_factory, request(placed, step)) for step in STEPS]
    assert [r.outcome for r in results] == ["deducted", "sent", "credited", "scheduled"]
    assert [r.workflow_done for r in results] == [False, False, False, True]
    assert not any(r.duplicate for r in results)
    with session_factory() as session:
        order = session.get(Order, placed.order_id)
        workflow = session.get(Workflow, placed.workflow_id)
        steps = session.scalars(
            select(WorkflowStep).where(WorkflowStep.workflow_id == workflow.id)
        ).all()
        points = session.scalar(select(PointsEntry.points))
        shipment = session.scalar(select(Shipment))
    assert order.status == OrderStatus.COMPLETED
    assert workflow.status == WorkflowStatus.DONE
    assert all(s.status == StepStatus.DONE for s in steps)
    assert all(s.finished_at <= workflow.finished_at for s in steps)
    assert all(s.job_id == f"job-{s.step}" and s.fencing_token == 7 for s in steps)
    assert points == 123  # floor(1234.56 / 10)
    assert (shipment.ship_mode, shipment.status) == ("AIR", "scheduled")  # 2 AIR lines, 1 MAIL
    assert on_hand(session_factory) == {10: 98, 11: 97, 12: 99, 13: 5, 14: 100}
    assert effect_rows(session_factory, placed.order_id) == {
        "stock_deductions": 3,
        "notifications": 1,
        "points_ledger": 1,
        "shipments": 1,
    }


@pytest.mark.parametrize("step", STEPS)
def test_redelivered_step_is_absorbed_without_a_second_effect(
    session_factory, catalog, make_draft, step
):
    placed = place_one(session_factory, make_draft())
    if step != STOCK:  # the others wait for stock
        handle_step(session_factory, request(placed, STOCK))
    first = handle_step(session_factory, request(placed, step))
    before = (effect_rows(session_factory, placed.order_id), on_hand(session_factory))
    again = handle_step(session_factory, request(placed, step, attempt=2))
    assert not first.duplicate
    assert again.duplicate
    assert again.outcome == first.outcome
    assert (effect_rows(session_factory, placed.order_id), on_hand(session_factory)) == before
    with session_factory() as session:
        _, row = load_step(session, placed.workflow_id, step)
        assert row.attempts == 1


def test_effects_are_idempotent_on_their_own_unique_rows(session_factory, catalog, make_draft):
    """Even with the step row forced back to pending, no effect row is doubled."""
    placed = place_one(session_factory, make_draft())
    for step in STEPS:
        handle_step(session_factory, request(placed, step))
    with session_factory() as session:
        for row in session.scalars(select(WorkflowStep)):
            row.status = StepStatus.DISPATCHED
        session.commit()
    # a later delivery (a higher fencing token) runs each effect again
    outcomes = [handle_step(session_factory, request(placed, s, token=8)).outcome for s in STEPS]
    assert outcomes == ["deducted", "already_sent", "already_credited", "scheduled"]
    assert effect_rows(session_factory, placed.order_id) == {
        "stock_deductions": 3,
        "notifications": 1,
        "points_ledger": 1,
        "shipments": 1,
    }
    assert on_hand(session_factory) == {10: 98, 11: 97, 12: 99, 13: 5, 14: 100}


def test_out_of_stock_is_a_finished_business_outcome(session_factory, catalog, make_draft):
    """Stock first: an order out of stock keeps nothing and gets a cancellation notice."""
    placed = place_one(session_factory, make_draft([(10, 2, "AIR"), (13, 6, "SHIP")]))
    with pytest.raises(StepNotReady):  # logistics waits for stock: nothing applied
        handle_step(session_factory, request(placed, LOGISTICS))
    stock = handle_step(session_factory, request(placed, STOCK))
    assert stock.outcome == "out_of_stock"
    assert stock.workflow_done and stock.released == ()
    late = [handle_step(session_factory, request(placed, s)) for s in (NOTIFICATION, POINTS)]
    assert all(r.duplicate and r.outcome == "skipped: stock" for r in late)
    with session_factory() as session:
        order = session.get(Order, placed.order_id)
        workflow = session.get(Workflow, placed.workflow_id)
        steps = dict(
            session.execute(
                select(WorkflowStep.step, WorkflowStep.status).where(
                    WorkflowStep.workflow_id == placed.workflow_id
                )
            ).all()
        )
        kinds = session.scalars(select(Notification.kind)).all()
    assert order.status == OrderStatus.OUT_OF_STOCK
    assert workflow.status == WorkflowStatus.DONE
    assert steps == {
        STOCK: StepStatus.DONE,
        NOTIFICATION: StepStatus.SKIPPED,
        POINTS: StepStatus.SKIPPED,
        LOGISTICS: StepStatus.SKIPPED,
    }
    assert kinds == [CANCELLATION]
    assert on_hand(session_factory) == {10: 100, 11: 100, 12: 100, 13: 5, 14: 100}
    assert effect_rows(session_factory, placed.order_id) == {
        "stock_deductions": 0,
        "notifications": 1,
        "points_ledger": 0,
        "shipments": 0,
    }
    again = handle_step(session_factory, request(placed, STOCK, attempt=2))
    assert again.duplicate and again.outcome == "out_of_stock"
    assert check_invariants(session_factory) == []


def test_steps_after_stock_are_released_only_when_stock_succeeded(
    session_factory, catalog, make_draft
):
    placed = place_one(session_factory, make_draft())
    with session_factory() as session:
        states = set(session.execute(select(WorkflowStep.step, WorkflowStep.status)).all())
    assert states == {
        (STOCK, StepStatus.PENDING),
        (NOTIFICATION, StepStatus.WAITING),
        (POINTS, StepStatus.WAITING),
        (LOGISTICS, StepStatus.WAITING),
    }
    stock = handle_step(session_factory, request(placed, STOCK))
    with session_factory() as session:
        released = set(
            session.scalars(
                select(WorkflowStep.id).where(WorkflowStep.status == StepStatus.DISPATCHED)
            )
        )
    assert set(stock.released) == released and len(released) == 3


def test_dead_step_blocks_the_workflow_with_step_and_reason(session_factory, catalog, make_draft):
    placed = place_one(session_factory, make_draft())
    for step in (STOCK, NOTIFICATION, LOGISTICS):
        handle_step(session_factory, request(placed, step))
    assert record_step_failure(session_factory, request(placed, POINTS, 1), "boom 1")
    assert record_step_failure(session_factory, request(placed, POINTS, 2), "boom 2")
    assert mark_step_dead(
        session_factory,
        placed.workflow_id,
        POINTS,
        "retries_exhausted",
        error="ValueError: boom",
        attempts=5,
    )
    with session_factory() as session:
        workflow, row = load_step(session, placed.workflow_id, POINTS)
        order = session.get(Order, placed.order_id)
    assert workflow.status == WorkflowStatus.BLOCKED
    assert workflow.blocked_step == POINTS
    assert workflow.blocked_reason == "retries_exhausted: ValueError: boom"
    assert (row.status, row.outcome, row.attempts, row.last_error) == (
        StepStatus.DEAD,
        "retries_exhausted",
        5,
        "ValueError: boom",
    )
    assert order.status == OrderStatus.PLACED
    # A late failure report does not resurrect a dead step.
    assert not record_step_failure(session_factory, request(placed, POINTS, 6), "late")


def test_redriven_dead_step_unblocks_and_completes_the_workflow(
    session_factory, catalog, make_draft
):
    placed = place_one(session_factory, make_draft())
    handle_step(session_factory, request(placed, STOCK))  # releases points
    assert mark_step_dead(session_factory, placed.workflow_id, POINTS, "error", error="bad luck")
    for step in (NOTIFICATION, LOGISTICS):
        assert not handle_step(session_factory, request(placed, step)).workflow_done
    assert handle_step(session_factory, request(placed, POINTS, attempt=6)).workflow_done
    with session_factory() as session:
        workflow = session.get(Workflow, placed.workflow_id)
        order = session.get(Order, placed.order_id)
    assert (workflow.status, workflow.blocked_step, workflow.blocked_reason) == (
        WorkflowStatus.DONE,
        None,
        None,
    )
    assert order.status == OrderStatus.COMPLETED


def test_a_failed_or_dead_stale_delivery_leaves_a_waiting_step_waiting(
    session_factory, catalog, make_draft
):
    """ADR 0011: a delivery of a waiting step raises StepNotReady and the queue
    retries it (and may dead-letter it). Recording that must not turn the step
    into a runnable state: the next delivery would run points before stock,
    and a stock that ends out of stock could no longer skip it."""
    placed = place_one(session_factory, make_draft([(10, 2, "AIR"), (13, 6, "SHIP")]))
    for attempt in (1, 2):
        with pytest.raises(StepNotReady):
            handle_step(session_factory, request(placed, POINTS, attempt))
        assert not record_step_failure(
            session_factory, request(placed, POINTS, attempt), "StepNotReady"
        )
    assert not mark_step_dead(
        session_factory, placed.workflow_id, LOGISTICS, "retries_exhausted", attempts=5
    )
    with session_factory() as session:
        workflow, row = load_step(session, placed.workflow_id, POINTS)
        _, logistics = load_step(session, placed.workflow_id, LOGISTICS)
    assert (row.status, row.attempts, row.last_error) == (StepStatus.WAITING, 0, None)
    assert logistics.status == StepStatus.WAITING
    assert workflow.status == WorkflowStatus.RUNNING
    assert handle_step(session_factory, request(placed, STOCK)).outcome == "out_of_stock"
    late = handle_step(session_factory, request(placed, POINTS, attempt=3))
    assert late.duplicate and late.outcome == "skipped: stock"
    with session_factory() as session:
        order = session.get(Order, placed.order_id)
        steps = set(
            session.scalars(
                select(WorkflowStep.status).where(WorkflowStep.workflow_id == placed.workflow_id)
            )
        )
    assert order.status == OrderStatus.OUT_OF_STOCK
    assert steps == {StepStatus.DONE, StepStatus.SKIPPED}
    assert effect_rows(session_factory, placed.order_id)["points_ledger"] == 0
    assert check_invariants(session_factory) == []


def test_dead_letter_of_a_finished_step_changes_nothing(session_factory, catalog, make_draft):
    placed = place_one(session_factory, make_draft())
    handle_step(session_factory, request(placed, STOCK))
    handle_step(session_factory, request(placed, POINTS))
    assert not mark_step_dead(session_factory, placed.workflow_id, POINTS, "worker_lost")
    with session_factory() as session:
        workflow, row = load_step(session, placed.workflow_id, POINTS)
    assert (workflow.status, row.status) == (WorkflowStatus.RUNNING, StepStatus.DONE)


def test_message_for_another_order_or_unknown_step_is_refused(session_factory, catalog, make_draft):
    placed = place_one(session_factory, make_draft())
    with pytest.raises(SubjectMismatch):
        handle_step(session_factory, StepRequest(placed.workflow_id, placed.order_id + 1, STOCK))
    with pytest.raises(StepNotFound):
        handle_step(session_factory, StepRequest(placed.workflow_id, placed.order_id, "refund"))
    with pytest.raises(StepNotFound):
        handle_step(session_factory, StepRequest(placed.workflow_id + 99, placed.order_id, STOCK))
    assert effect_rows(session_factory, placed.order_id)["stock_deductions"] == 0


def test_steps_finishing_concurrently_all_end_done_and_the_workflow_once(
    session_factory, catalog, make_draft
):
    """Three threads finish the three steps after stock of each order at the same moment."""
    orders = [place_one(session_factory, make_draft()) for _ in range(5)]
    after_stock = [s for s in STEPS if s != STOCK]
    results = []
    errors = []
    lock = threading.Lock()
    for placed in orders:
        results.append(handle_step(session_factory, request(placed, STOCK)))
        barrier = threading.Barrier(len(after_stock))

        def run(step: str, placed: PlacedOrder = placed, barrier=barrier) -> None:
            barrier.wait()
            try:
                result = handle_step(session_factory, request(placed, step), conflict_attempts=20)
            except Exception as exc:  # pragma: no cover - reported below
                with lock:
                    errors.append(exc)
                return
            with lock:
                results.append(result)

        threads = [threading.Thread(target=run, args=(step,)) for step in after_stock]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == []
    assert len(results) == 20
    assert sum(r.workflow_done for r in results) == 5  # exactly one completer per order
    with session_factory() as session:
        assert set(session.scalars(select(Workflow.status))) == {WorkflowStatus.DONE}
        assert set(session.scalars(select(WorkflowStep.status))) == {StepStatus.DONE}
        assert set(session.scalars(select(Order.status))) == {OrderStatus.COMPLETED}


def test_a_unit_of_work_that_loses_a_race_after_its_effect_is_rolled_back_and_rerun(
    session_factory, catalog, make_draft
):
    """A conflict raised after the effect ran (what a concurrent writer causes: a
    version mismatch) rolls the whole unit of work back; the rerun applies the
    effect once and completes the workflow."""
    placed = place_one(session_factory, make_draft())
    for step in (STOCK, NOTIFICATION, POINTS):
        handle_step(session_factory, request(placed, step))
    calls = []

    def losing_clock():
        # Call 1 is the start time; call 2 comes after the effect, inside the
        # first unit of work: that one loses its race.
        calls.append(1)
        if len(calls) == 2:
            raise StaleDataError("workflow row changed under the unit of work")
        return utcnow()

    result = handle_step(session_factory, request(placed, LOGISTICS), clock=losing_clock)
    assert result.conflicts == 1
    assert result.workflow_done and not result.duplicate
    with session_factory() as session:
        assert session.get(Workflow, placed.workflow_id).status == WorkflowStatus.DONE
        assert session.scalar(select(func.count()).select_from(Shipment)) == 1


def points_with_a_commit_after_the_read(session_factory, placed, monkeypatch, writer):
    """Deliver the points step once; right after its first read of the step row,
    another unit of work commits: ``cancel`` cancels the order, ``sibling`` bumps
    the workflow's version as a sibling step's commit does.

    Returns:
        (result, step row reads, batch sizes the points effect ran with,
        points ledger rows, the step row's status, the order's status).
    """
    real = tracker.step_rows
    reads: list[int] = []

    def step_rows_then_a_concurrent_commit(session, workflow_ids, step):
        rows = real(session, workflow_ids, step)
        reads.append(1)
        if len(reads) == 1:
            with UnitOfWork(session_factory) as uow:
                if writer == "cancel":
                    cancel_order(uow.session, placed.order_id, utcnow())
                else:
                    uow.session.execute(
                        update(Workflow)
                        .where(Workflow.id == placed.workflow_id)
                        .values(version=Workflow.version + 1),
                        execution_options={"synchronize_session": False},
                    )
                uow.commit()
        return rows

    effect_calls: list[int] = []

    def counted_points(session, deliveries, now):
        effect_calls.append(len(deliveries))
        return credit_points(session, deliveries, now)

    monkeypatch.setattr(tracker, "step_rows", step_rows_then_a_concurrent_commit)
    monkeypatch.setitem(EFFECTS, POINTS, counted_points)
    result = handle_step(session_factory, request(placed, POINTS))
    points = effect_rows(session_factory, placed.order_id)["points_ledger"]
    with session_factory() as session:
        _, row = load_step(session, placed.workflow_id, POINTS)
        order = session.get(Order, placed.order_id)
    return result, len(reads), effect_calls, points, row.status, order.status


@pytest.mark.parametrize("writer", ["cancel", "sibling"])
def test_a_lone_sqlite_delivery_reruns_when_its_workflow_changes_after_its_read(
    session_factory, catalog, make_draft, monkeypatch, writer
):
    """ADR 0005: a lone delivery on SQLite reads its step row without a lock and
    fences its writes with the workflow version it read (fence_workflows). Another
    writer commits right after that read: a cancellation (points must then be
    skipped, never credited on a cancelled order) or a sibling step's version bump
    (points are credited once). Either way the unit of work conflicts once and
    reruns on what was committed. The version check is its first write, before
    the effect: the losing attempt never runs the effect on its stale read."""
    if session_factory.kw["bind"].dialect.name != "sqlite":
        pytest.skip("PostgreSQL checks the claimed rows when it marks them (the test below)")
    placed = place_one(session_factory, make_draft(total="1234.56"))
    handle_step(session_factory, request(placed, STOCK))
    result, reads, effect_calls, points, step_status, order_status = (
        points_with_a_commit_after_the_read(session_factory, placed, monkeypatch, writer)
    )
    assert (result.conflicts, reads) == (1, 2)
    assert effect_calls == ([] if writer == "cancel" else [1])
    if writer == "cancel":
        assert result.duplicate and result.outcome == "skipped: cancelled"
        assert (step_status, points, order_status) == (StepStatus.SKIPPED, 0, "cancelled")
    else:
        assert not result.duplicate and result.outcome == "credited"
        assert (step_status, points, order_status) == (StepStatus.DONE, 1, "placed")


def test_a_postgresql_delivery_reruns_when_a_cancel_commits_after_its_read(
    session_factory, catalog, make_draft, monkeypatch
):
    """ADR 0014: on PostgreSQL a delivery runs its effect before it locks the
    workflow rows, and its marking checks that each claimed step row is still
    open. A cancellation commits right after the delivery read its step row (it
    skips the step): the effect has run on the stale read, the marking finds the
    row skipped, and the unit of work, the effect with it, rolls back and reruns
    on what was committed. Points are never credited on the cancelled order."""
    if session_factory.kw["bind"].dialect.name != "postgresql":
        pytest.skip("SQLite takes its write lock before the effect (the test above)")
    placed = place_one(session_factory, make_draft(total="1234.56"))
    handle_step(session_factory, request(placed, STOCK))
    result, reads, effect_calls, points, step_status, order_status = (
        points_with_a_commit_after_the_read(session_factory, placed, monkeypatch, "cancel")
    )
    assert (result.conflicts, reads) == (1, 2)
    assert effect_calls == [1]  # on the stale read only; rolled back with its unit of work
    assert result.duplicate and result.outcome == "skipped: cancelled"
    assert (step_status, points, order_status) == (StepStatus.SKIPPED, 0, "cancelled")


def test_a_missing_order_fails_its_own_delivery_only(session_factory, catalog, make_draft):
    """A workflow whose order row is gone: its delivery fails as OrderNotFound (not
    retryable), and a batch-mate's effect still commits."""
    orders = [place_one(session_factory, make_draft()) for _ in range(2)]
    with session_factory() as session:
        session.execute(
            update(Workflow).where(Workflow.id == orders[0].workflow_id).values(subject_id=10_000)
        )
        session.commit()
    with pytest.raises(OrderNotFound):
        handle_step(session_factory, StepRun(orders[0].workflow_id, STOCK))
    results = handle_steps(session_factory, [StepRun(p.workflow_id, STOCK) for p in orders])
    assert isinstance(results[0], OrderNotFound) and not results[0].retryable
    assert isinstance(results[1], StepResult) and results[1].outcome == "deducted"
    with session_factory() as session:
        _, row = load_step(session, orders[0].workflow_id, STOCK)
    assert row.status == StepStatus.PENDING


def test_notification_kind_is_the_confirmation(session_factory, catalog, make_draft):
    placed = place_one(session_factory, make_draft())
    handle_step(session_factory, request(placed, STOCK))
    handle_step(session_factory, request(placed, NOTIFICATION))
    handle_step(session_factory, request(placed, POINTS))
    with session_factory() as session:
        assert session.scalar(select(Notification.kind)) == CONFIRMATION
        assert session.scalar(select(PointsEntry.reason)) == ORDER_PLACED
