"""Cancelled orders are undone step by step by compensating steps, each exactly once."""

from __future__ import annotations

import random
import threading
import time

import pytest
from sqlalchemy import func, select

from orders.app.bootstrap import build
from orders.app.cancellation import cancel, cancel_in_flight
from orders.app.invariants import check_invariants
from orders.app.migrate import upgrade_database
from orders.app.placement import PlacedOrder, place_orders
from orders.app.settings import Settings
from orders.domain.compensations import ORDER_CANCELLED
from orders.domain.effects import CANCELLATION, ORDER_PLACED
from orders.domain.errors import OrderNotCancellable, OrderNotFound
from orders.domain.handlers import (
    StepRequest,
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
    StockReturn,
)
from orders.domain.steps import (
    ALL_STEPS,
    CANCEL_SHIPMENT,
    LOGISTICS,
    NOTIFICATION,
    POINTS,
    RETURN_STOCK,
    REVERSE_POINTS,
    STEPS,
    STOCK,
)
from orders.worker.faults import FaultConfig, FaultStore
from orders.worker.runner import build_worker
from reliable_queue import stats
from workflows.models import StepStatus, Workflow, WorkflowStatus, WorkflowStep
from workflows.uow import UnitOfWork


class Recorder:
    """A publisher that keeps what it was given (the relay is tested elsewhere)."""

    def __init__(self) -> None:
        self.messages: list = []

    def publish(self, messages) -> None:
        self.messages.extend(messages)


def place_one(session_factory, order_draft) -> PlacedOrder:
    with UnitOfWork(session_factory) as uow:
        [placed] = place_orders(uow.session, [order_draft])
        uow.commit()
    return placed


def run(session_factory, placed: PlacedOrder, step: str, attempt: int = 1):
    return handle_step(
        session_factory, StepRequest(placed.workflow_id, placed.order_id, step, attempt)
    )


def steps_of(session_factory, workflow_id: int) -> dict[str, tuple[str, str | None, str | None]]:
    with session_factory() as session:
        return {
            s.step: (s.status, s.outcome, s.compensates)
            for s in session.scalars(
                select(WorkflowStep).where(WorkflowStep.workflow_id == workflow_id)
            )
        }


def on_hand(session_factory) -> dict[int, int]:
    with session_factory() as session:
        return dict(session.execute(select(Inventory.part_id, Inventory.on_hand)).all())


def points_rows(session_factory, order_id: int) -> list[tuple[str, int]]:
    with session_factory() as session:
        return sorted(
            session.execute(
                select(PointsEntry.reason, PointsEntry.points).where(
                    PointsEntry.order_id == order_id
                )
            ).all()
        )


def order_and_workflow(session_factory, placed: PlacedOrder) -> tuple[str, str]:
    with session_factory() as session:
        return (
            session.get(Order, placed.order_id).status,
            session.get(Workflow, placed.workflow_id).status,
        )


def test_cancel_before_any_step_ran_skips_every_step_and_needs_no_compensation(
    session_factory, catalog, make_draft
):
    placed = place_one(session_factory, make_draft())
    publisher = Recorder()
    result = cancel(session_factory, publisher, placed.order_id)
    assert (result.already, result.compensations, result.added) == (False, (), ())
    assert set(result.skipped) == set(STEPS)
    assert order_and_workflow(session_factory, placed) == ("cancelled", "done")
    assert {s: v[0] for s, v in steps_of(session_factory, placed.workflow_id).items()} == {
        s: StepStatus.SKIPPED for s in STEPS
    }
    # the stock job still in the queue is absorbed: nothing deducted
    assert run(session_factory, placed, STOCK).duplicate
    assert on_hand(session_factory) == catalog
    with session_factory() as session:
        kinds = session.scalars(
            select(Notification.kind).where(Notification.order_id == placed.order_id)
        ).all()
    assert kinds == [CANCELLATION]
    assert publisher.messages == []
    assert check_invariants(session_factory) == []


def test_cancel_mid_flight_undoes_stock_points_and_shipment_once_each(
    session_factory, catalog, make_draft
):
    placed = place_one(session_factory, make_draft(total="1234.56"))
    for step in (STOCK, POINTS, LOGISTICS):
        run(session_factory, placed, step)
    publisher = Recorder()

    result = cancel(session_factory, publisher, placed.order_id)

    assert set(result.compensations) == {RETURN_STOCK, REVERSE_POINTS, CANCEL_SHIPMENT}
    assert result.skipped == (NOTIFICATION,)
    assert sorted(m.payload["step"] for m in publisher.messages) == sorted(result.compensations)
    assert all(m.payload["order_id"] == placed.order_id for m in publisher.messages)
    steps = steps_of(session_factory, placed.workflow_id)
    assert steps[RETURN_STOCK] == (StepStatus.DISPATCHED, None, STOCK)
    assert steps[REVERSE_POINTS][2] == POINTS and steps[CANCEL_SHIPMENT][2] == LOGISTICS
    assert order_and_workflow(session_factory, placed) == ("cancelled", "running")
    # the confirmation job still queued is absorbed: the notice replaces it
    assert run(session_factory, placed, NOTIFICATION).duplicate

    outcomes = {s: run(session_factory, placed, s).outcome for s in result.compensations}

    assert outcomes == {
        RETURN_STOCK: "returned",
        REVERSE_POINTS: "reversed",
        CANCEL_SHIPMENT: "cancelled",
    }
    assert on_hand(session_factory) == catalog
    assert points_rows(session_factory, placed.order_id) == [
        (ORDER_CANCELLED, -123),
        (ORDER_PLACED, 123),
    ]
    with session_factory() as session:
        assert session.scalar(select(Shipment.status)) == "cancelled"
        assert session.scalar(select(func.count()).select_from(StockReturn)) == 3
        assert session.scalar(select(func.count()).select_from(StockDeduction)) == 3
    assert order_and_workflow(session_factory, placed) == ("cancelled", "done")
    assert check_invariants(session_factory) == []


def test_cancelling_twice_changes_nothing_the_second_time(session_factory, catalog, make_draft):
    placed = place_one(session_factory, make_draft())
    run(session_factory, placed, STOCK)
    first = cancel(session_factory, Recorder(), placed.order_id)
    publisher = Recorder()
    again = cancel(session_factory, publisher, placed.order_id)
    assert (again.already, again.compensations, again.added) == (True, first.compensations, ())
    assert publisher.messages == []
    assert list(steps_of(session_factory, placed.workflow_id)).count(RETURN_STOCK) == 1


def test_a_completed_order_is_too_late_to_cancel_and_keeps_everything(
    session_factory, catalog, make_draft
):
    placed = place_one(session_factory, make_draft())
    for step in STEPS:
        run(session_factory, placed, step)
    before = steps_of(session_factory, placed.workflow_id)
    with pytest.raises(OrderNotCancellable, match="dispatched"):
        cancel(session_factory, Recorder(), placed.order_id)
    assert steps_of(session_factory, placed.workflow_id) == before
    assert order_and_workflow(session_factory, placed) == ("completed", "done")
    assert check_invariants(session_factory) == []


def test_an_out_of_stock_order_cannot_be_cancelled_and_an_unknown_one_is_not_found(
    session_factory, catalog, make_draft
):
    placed = place_one(session_factory, make_draft(lines=[(13, 6, "AIR")]))
    assert run(session_factory, placed, STOCK).outcome == "out_of_stock"
    with pytest.raises(OrderNotCancellable, match="out_of_stock"):
        cancel(session_factory, Recorder(), placed.order_id)
    with pytest.raises(OrderNotFound):
        cancel(session_factory, Recorder(), 987654)
    assert order_and_workflow(session_factory, placed) == ("out_of_stock", "done")
    assert check_invariants(session_factory) == []


def test_a_redelivered_compensation_is_absorbed_without_a_second_effect(
    session_factory, catalog, make_draft
):
    placed = place_one(session_factory, make_draft())
    run(session_factory, placed, STOCK)
    run(session_factory, placed, POINTS)
    cancel(session_factory, Recorder(), placed.order_id)
    first = run(session_factory, placed, RETURN_STOCK)
    again = run(session_factory, placed, RETURN_STOCK, attempt=2)
    assert (first.duplicate, again.duplicate) == (False, True)
    assert run(session_factory, placed, REVERSE_POINTS, attempt=3).outcome == "reversed"
    assert run(session_factory, placed, REVERSE_POINTS).duplicate
    assert on_hand(session_factory) == catalog
    assert len(points_rows(session_factory, placed.order_id)) == 2
    assert check_invariants(session_factory) == []


def test_concurrent_deliveries_of_a_compensation_apply_it_once(
    session_factory, catalog, make_draft
):
    placed = place_one(session_factory, make_draft())
    run(session_factory, placed, STOCK)
    cancel(session_factory, Recorder(), placed.order_id)
    results: list = []
    errors: list = []
    barrier = threading.Barrier(4)

    def deliver() -> None:
        barrier.wait()
        try:
            results.append(run(session_factory, placed, RETURN_STOCK))
        except Exception as exc:  # a conflict that outlived its retries would show here
            errors.append(exc)

    threads = [threading.Thread(target=deliver) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    assert sorted(r.duplicate for r in results) == [False, True, True, True]
    assert on_hand(session_factory) == catalog
    with session_factory() as session:
        assert session.scalar(select(func.count()).select_from(StockReturn)) == 3
    assert check_invariants(session_factory) == []


def test_a_step_finishing_while_the_order_is_cancelled_is_compensated_or_skipped(
    session_factory, catalog, make_draft
):
    placed = place_one(session_factory, make_draft(total="500.00"))
    run(session_factory, placed, STOCK)
    barrier = threading.Barrier(2)
    errors: list = []

    def points() -> None:
        barrier.wait()
        try:
            run(session_factory, placed, POINTS)
        except Exception as exc:
            errors.append(exc)

    thread = threading.Thread(target=points)
    thread.start()
    barrier.wait()
    result = cancel(session_factory, Recorder(), placed.order_id)
    thread.join(30)
    assert errors == []
    steps = steps_of(session_factory, placed.workflow_id)
    if steps[POINTS][0] == StepStatus.DONE:  # points won: its credit is reversed
        assert REVERSE_POINTS in result.compensations
    else:  # the cancellation won: points never ran
        assert steps[POINTS][0] == StepStatus.SKIPPED
        assert REVERSE_POINTS not in result.compensations
    for step in result.compensations:
        run(session_factory, placed, step)
    assert sum(p for _, p in points_rows(session_factory, placed.order_id)) == 0
    assert order_and_workflow(session_factory, placed) == ("cancelled", "done")
    assert check_invariants(session_factory) == []


def test_the_last_step_committing_while_a_cancel_checks_the_order_is_refused_or_skipped(
    session_factory, catalog, make_draft, monkeypatch
):
    """ADR 0012: a completed order is too late to cancel. The last step commits
    right after the cancel read the order as placed (just before it calls the
    workflow off). The cancel's lock must hold that commit back until the
    cancel commits (SQLite ignores FOR UPDATE: the lock is the first write), so
    the step finds itself skipped; a cancel that did not lock would compensate
    an order that completed and has its shipment scheduled."""
    import orders.domain.cancellation as cancellation

    placed = place_one(session_factory, make_draft(total="500.00"))
    for step in (STOCK, NOTIFICATION, POINTS):
        run(session_factory, placed, step)
    real = cancellation.compensate_workflow
    finished: list = []

    def logistics() -> None:
        try:
            finished.append(run(session_factory, placed, LOGISTICS))
        except Exception as exc:
            finished.append(exc)

    def compensate_after_the_last_step(*args, **kwargs):
        thread = threading.Thread(target=logistics)
        thread.start()
        thread.join(3)  # it commits at once unless the cancel holds the lock
        held.append(thread)
        return real(*args, **kwargs)

    held: list[threading.Thread] = []
    monkeypatch.setattr(cancellation, "compensate_workflow", compensate_after_the_last_step)
    result = cancel(session_factory, Recorder(), placed.order_id)
    held[0].join(30)
    [late] = finished
    assert not isinstance(late, Exception), late
    assert late.duplicate and late.outcome == "skipped: cancelled"
    assert result.skipped == (LOGISTICS,)
    assert set(result.compensations) == {RETURN_STOCK, REVERSE_POINTS}
    with session_factory() as session:
        assert session.scalar(select(func.count()).select_from(Shipment)) == 0
    assert order_and_workflow(session_factory, placed) == ("cancelled", "running")
    for step in result.compensations:
        run(session_factory, placed, step)
    assert sum(p for _, p in points_rows(session_factory, placed.order_id)) == 0
    assert order_and_workflow(session_factory, placed) == ("cancelled", "done")
    assert check_invariants(session_factory) == []


@pytest.fixture
def worker_app(database_url, redis_client, key_prefix):
    """An app whose queue retries fast (0.1-0.3 s backoff, 30 attempts), on this test's
    database and keys (workers re-read injected faults about once a second)."""
    upgrade_database(database_url)
    app = build(
        Settings(
            database_url=database_url,
            queue_prefix=key_prefix,
            max_attempts=30,
            backoff_base_seconds=0.1,
            backoff_max_seconds=0.3,
        ),
        redis_override=redis_client,
    )
    try:
        yield app
    finally:
        app.close()


def wait_for(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_failing_compensation_is_retried_with_backoff_until_it_succeeds(
    worker_app, catalog, make_draft
):
    app = worker_app
    sf = app.session_factory
    placed = place_one(sf, make_draft(total="250.00"))
    run(sf, placed, STOCK)
    run(sf, placed, POINTS)
    faults = FaultStore(app.redis, app.settings.queue_prefix)
    faults.set(REVERSE_POINTS, FaultConfig(fail_rate=1.0))
    worker = build_worker(app, list(ALL_STEPS))
    worker.start()
    try:
        cancel(sf, app.publisher, placed.order_id)

        def failed_twice() -> bool:
            status, _, _ = steps_of(sf, placed.workflow_id)[REVERSE_POINTS]
            with sf() as session:
                attempts = session.scalar(
                    select(WorkflowStep.attempts).where(WorkflowStep.step == REVERSE_POINTS)
                )
            return status == StepStatus.FAILED and attempts >= 2

        wait_for(failed_twice)
        assert sum(p for _, p in points_rows(sf, placed.order_id)) == 25  # not reversed yet
        faults.clear()
        wait_for(lambda: order_and_workflow(sf, placed)[1] == WorkflowStatus.DONE)
    finally:
        worker.request_stop()
        worker.join(15)
    assert points_rows(sf, placed.order_id) == [(ORDER_CANCELLED, -25), (ORDER_PLACED, 25)]
    assert steps_of(sf, placed.workflow_id)[REVERSE_POINTS][:2] == (StepStatus.DONE, "reversed")
    assert on_hand(sf) == catalog
    assert check_invariants(sf) == []


def test_a_compensation_that_keeps_failing_is_dead_lettered_and_blocks_with_a_reason(
    worker_app, catalog, make_draft
):
    app = worker_app
    sf = app.session_factory
    placed = place_one(sf, make_draft())
    run(sf, placed, STOCK)
    FaultStore(app.redis, app.settings.queue_prefix).set(
        RETURN_STOCK, FaultConfig(fail_rate=1.0, permanent=True)
    )
    worker = build_worker(app, list(ALL_STEPS))
    worker.start()
    try:
        cancel(sf, app.publisher, placed.order_id)
        wait_for(lambda: order_and_workflow(sf, placed)[1] == WorkflowStatus.BLOCKED)
    finally:
        worker.request_stop()
        worker.join(15)
    with sf() as session:
        workflow = session.get(Workflow, placed.workflow_id)
        assert workflow.blocked_step == RETURN_STOCK and workflow.blocked_reason
    assert steps_of(sf, placed.workflow_id)[RETURN_STOCK][0] == StepStatus.DEAD
    assert stats(app.queues[RETURN_STOCK]).as_dict()["dead"] == 1
    assert order_and_workflow(sf, placed)[0] == OrderStatus.CANCELLED
    assert check_invariants(sf) == []


def test_cancelling_in_flight_prefers_an_order_with_something_to_undo(
    session_factory, catalog, make_draft
):
    placed = [place_one(session_factory, make_draft()) for _ in range(3)]
    run(session_factory, placed[1], STOCK)
    for step in STEPS:
        run(session_factory, placed[2], step)  # completed: never a candidate
    rng = random.Random(3)
    first = cancel_in_flight(session_factory, Recorder(), placed[0].order_id, rng)
    assert first == placed[1].order_id
    assert cancel_in_flight(session_factory, Recorder(), placed[0].order_id, rng) == (
        placed[0].order_id
    )
    assert cancel_in_flight(session_factory, Recorder(), placed[0].order_id, rng) is None
    assert order_and_workflow(session_factory, placed[2]) == ("completed", "done")


def test_a_late_failure_report_or_dead_letter_cannot_reopen_a_skipped_step(
    session_factory, catalog, make_draft
):
    placed = place_one(session_factory, make_draft())
    run(session_factory, placed, STOCK)
    cancel(session_factory, Recorder(), placed.order_id)
    request = StepRequest(placed.workflow_id, placed.order_id, POINTS, 2)
    assert not record_step_failure(session_factory, request, "boom")
    assert not mark_step_dead(session_factory, placed.workflow_id, POINTS, "retries_exhausted")
    assert steps_of(session_factory, placed.workflow_id)[POINTS][0] == StepStatus.SKIPPED
    with session_factory() as session:
        assert session.get(Workflow, placed.workflow_id).status == WorkflowStatus.RUNNING


def test_a_batch_holding_a_skipped_step_absorbs_it(session_factory, catalog, make_draft):
    placed = [place_one(session_factory, make_draft([(14, 1, "AIR")])) for _ in range(2)]
    for p in placed:
        run(session_factory, p, STOCK)
    cancel(session_factory, Recorder(), placed[0].order_id)
    results = handle_steps(
        session_factory,
        [StepRun(p.workflow_id, POINTS, p.order_id) for p in placed],
    )
    assert [r.duplicate for r in results] == [True, False]
    assert points_rows(session_factory, placed[0].order_id) == []


def test_a_batch_of_compensations_undoes_each_cancelled_order_once(
    session_factory, catalog, make_draft
):
    """Compensations take the one delivery path too: a batch of them, sharing parts,
    with a second copy inside the batch, undoes each order exactly once."""
    placed = [place_one(session_factory, make_draft(total="250.00")) for _ in range(3)]

    def batch(step: str, orders: list[PlacedOrder]) -> list:
        return handle_steps(
            session_factory, [StepRun(p.workflow_id, step, p.order_id) for p in orders]
        )

    for step in (STOCK, POINTS, LOGISTICS):
        batch(step, placed)
    for p in placed[:2]:
        cancel(session_factory, Recorder(), p.order_id)
    assert [r.duplicate for r in batch(NOTIFICATION, placed)] == [True, True, False]

    returned = batch(RETURN_STOCK, [placed[0], placed[1], placed[0]])
    assert [(r.outcome, r.duplicate) for r in returned] == [
        ("returned", False),
        ("returned", False),
        ("returned", True),
    ]
    assert [r.outcome for r in batch(REVERSE_POINTS, placed[:2])] == ["reversed"] * 2
    assert [r.outcome for r in batch(CANCEL_SHIPMENT, placed[:2])] == ["cancelled"] * 2
    again = batch(RETURN_STOCK, placed[:2]) + batch(REVERSE_POINTS, placed[:2])
    assert all(r.duplicate for r in again)

    kept = {10: 2, 11: 3, 12: 1}  # the third order's deductions, the only ones left
    assert on_hand(session_factory) == {p: n - kept.get(p, 0) for p, n in catalog.items()}
    assert [sum(n for _, n in points_rows(session_factory, p.order_id)) for p in placed] == [
        0,
        0,
        25,
    ]
    with session_factory() as session:
        shipments = dict(session.execute(select(Shipment.order_id, Shipment.status)).all())
        assert session.scalar(select(func.count()).select_from(StockReturn)) == 6
    assert [shipments[p.order_id] for p in placed] == ["cancelled", "cancelled", "scheduled"]
    assert [order_and_workflow(session_factory, p) for p in placed] == [
        ("cancelled", "done"),
        ("cancelled", "done"),
        ("completed", "done"),
    ]
    assert check_invariants(session_factory) == []
