"""Batch step handling: a fetched batch of one step in one transaction, set-based,
with the same guarantees as one delivery at a time."""

from __future__ import annotations

import multiprocessing
import random

from sqlalchemy import event, func, select

from orders.app.db import make_engine, make_session_factory
from orders.app.invariants import check_deductions, check_invariants, check_stock_conservation
from orders.app.placement import PlacedOrder, place, place_orders
from orders.domain.handlers import StepRequest, handle_step, handle_steps
from orders.domain.models import (
    Inventory,
    Order,
    OrderStatus,
    PointsEntry,
    Shipment,
    StockDeduction,
)
from orders.domain.steps import LOGISTICS, NOTIFICATION, POINTS, STEPS, STOCK
from orders.sources.drafts import RANDOM
from workflows.errors import StepNotFound, StepNotReady, SubjectMismatch
from workflows.models import StepStatus, Workflow, WorkflowStatus, WorkflowStep
from workflows.tracker import StepResult, StepRun
from workflows.uow import UnitOfWork


def place_many(session_factory, drafts) -> list[PlacedOrder]:
    with UnitOfWork(session_factory) as uow:
        placed = place_orders(uow.session, drafts)
        uow.commit()
    return placed


def run(placed: PlacedOrder, step: str, attempt: int = 1) -> StepRun:
    return StepRun(
        placed.workflow_id, step, placed.order_id, attempt, f"job-{placed.order_id}-{step}", 9
    )


def test_a_batch_of_each_step_completes_every_workflow(session_factory, catalog, make_draft):
    orders = place_many(session_factory, [make_draft(total="99.99") for _ in range(5)])
    for step in STEPS:
        results = handle_steps(session_factory, [run(p, step) for p in orders])
        assert all(isinstance(r, StepResult) and not r.duplicate for r in results)
        assert [r.workflow_done for r in results] == [step == LOGISTICS] * 5
    with session_factory() as session:
        assert set(session.scalars(select(Workflow.status))) == {WorkflowStatus.DONE}
        assert set(session.scalars(select(Order.status))) == {OrderStatus.COMPLETED}
        assert set(session.scalars(select(PointsEntry.points))) == {9}  # floor(99.99 / 10)
        finished = session.scalars(select(WorkflowStep)).all()
    assert {s.status for s in finished} == {StepStatus.DONE}
    assert {s.attempts for s in finished} == {1}
    assert all(s.job_id and s.fencing_token == 9 and s.finished_at for s in finished)
    assert check_invariants(session_factory) == []


def test_the_commit_that_completes_a_workflow_says_how_long_it_took(
    session_factory, catalog, make_draft
):
    """The completing run carries creation-to-finish seconds of its workflow, as the
    rows say, so an order's completion time needs no read of the rows afterwards."""
    orders = place_many(session_factory, [make_draft() for _ in range(2)])
    for step in STEPS:
        results = handle_steps(session_factory, [run(p, step) for p in orders])
        if step != LOGISTICS:
            assert [r.workflow_seconds for r in results] == [None, None]
    with session_factory() as session:
        rows = dict(
            session.execute(select(Workflow.id, Workflow.finished_at - Workflow.created_at)).all()
            if session.get_bind().dialect.name == "postgresql"
            else [
                (wf, (finished - created))
                for wf, created, finished in session.execute(
                    select(Workflow.id, Workflow.created_at, Workflow.finished_at)
                )
            ]
        )
    assert [r.workflow_seconds for r in results] == [
        rows[p.workflow_id].total_seconds() for p in orders
    ]


WAITING_STEPS_READ = "SELECT workflow_steps.id, workflow_steps.workflow_id, workflow_steps.step,"
"""The head of ``workflows.dependencies``' read of a batch's steps with a waiting one."""


def test_a_step_nothing_waits_for_reads_no_waiting_steps(session_factory, catalog, make_draft):
    """Regression: every batch read its workflows' waiting steps, though only the
    finish of a step that others wait for (stock) can release or skip one."""
    orders = place_many(session_factory, [make_draft() for _ in range(2)])
    sent: list[str] = []

    def capture(conn, cursor, sql, parameters, context, executemany):
        sent.append(sql)

    engine = session_factory.kw["bind"]
    event.listen(engine, "before_cursor_execute", capture)
    try:
        for step in STEPS:
            sent.clear()
            handle_steps(session_factory, [run(p, step) for p in orders])
            reads = [s for s in sent if s.startswith(WAITING_STEPS_READ)]
            assert bool(reads) == (step == STOCK), (step, reads)
    finally:
        event.remove(engine, "before_cursor_execute", capture)
    with session_factory() as session:
        assert set(session.scalars(select(WorkflowStep.status))) == {StepStatus.DONE}


def test_a_second_copy_in_the_same_batch_is_absorbed(session_factory, catalog, make_draft):
    [placed] = place_many(session_factory, [make_draft()])
    results = handle_steps(session_factory, [run(placed, STOCK), run(placed, STOCK, attempt=2)])
    assert [r.duplicate for r in results] == [False, True]
    with session_factory() as session:
        assert session.scalar(select(func.count()).select_from(StockDeduction)) == 3
        assert dict(session.execute(select(Inventory.part_id, Inventory.on_hand)).all())[10] == 98


def test_redelivery_after_the_batch_committed_is_absorbed(session_factory, catalog, make_draft):
    orders = place_many(session_factory, [make_draft() for _ in range(3)])
    handle_steps(session_factory, [run(p, STOCK) for p in orders])
    handle_steps(session_factory, [run(p, POINTS) for p in orders])
    again = handle_steps(session_factory, [run(p, POINTS, attempt=2) for p in orders])
    assert all(r.duplicate for r in again)
    one_by_one = handle_step(
        session_factory, StepRequest(orders[0].workflow_id, orders[0].order_id, POINTS)
    )
    assert one_by_one.duplicate
    with session_factory() as session:
        assert session.scalar(select(func.count()).select_from(PointsEntry)) == 3


def test_a_bad_delivery_fails_alone(session_factory, catalog, make_draft):
    orders = place_many(session_factory, [make_draft() for _ in range(2)])
    handle_steps(session_factory, [run(p, STOCK) for p in orders])
    bogus_workflow = StepRun(10_000, NOTIFICATION, 1)
    wrong_order = StepRun(orders[1].workflow_id, NOTIFICATION, orders[0].order_id)
    results = handle_steps(
        session_factory, [run(orders[0], NOTIFICATION), bogus_workflow, wrong_order]
    )
    assert isinstance(results[0], StepResult) and results[0].outcome == "sent"
    assert isinstance(results[1], StepNotFound)
    assert isinstance(results[2], SubjectMismatch)


def test_orders_competing_for_the_last_units_in_one_batch(session_factory, catalog, make_draft):
    """Part 13 has 5 units: the first order takes 3, the second wants 3 and is out of stock."""
    first, second = place_many(
        session_factory,
        [make_draft(lines=((13, 3, "AIR"),)), make_draft(lines=((13, 3, "AIR"), (10, 1, "AIR")))],
    )
    (early,) = handle_steps(session_factory, [run(second, LOGISTICS)])  # before stock
    assert isinstance(early, StepNotReady)
    results = handle_steps(session_factory, [run(first, STOCK), run(second, STOCK)])
    assert [r.outcome for r in results] == ["deducted", "out_of_stock"]
    assert results[1].workflow_done and results[1].released == ()
    assert len(results[0].released) == 3
    (late,) = handle_steps(session_factory, [run(second, LOGISTICS)])  # a stale redelivery
    assert late.duplicate and late.outcome.startswith("skipped")
    with session_factory() as session:
        stock = dict(session.execute(select(Inventory.part_id, Inventory.on_hand)).all())
        assert stock[13] == 2 and stock[10] == 100  # nothing of the short order was taken
        assert session.get(Order, second.order_id).status == OrderStatus.OUT_OF_STOCK
        assert (
            session.scalar(select(Shipment.id).where(Shipment.order_id == second.order_id)) is None
        )
    with session_factory() as session:
        assert check_stock_conservation(session) == []
        assert check_deductions(session) == []


def _deliver(url: str, step: str, orders: list[tuple[int, int]], batch: int, results) -> None:
    engine = make_engine(url)
    try:
        sf = make_session_factory(engine)
        done = dups = 0
        for i in range(0, len(orders), batch):
            chunk = [StepRun(w, step, o) for w, o in orders[i : i + batch]]
            if batch == 1:
                out = [handle_step(sf, chunk[0], conflict_attempts=50)]
            else:
                out = handle_steps(sf, chunk)
            for r in out:
                assert isinstance(r, StepResult), r
                done += r.workflow_done
                dups += r.duplicate
        results.put((done, dups))
    finally:
        engine.dispose()


def test_batches_and_single_deliveries_racing_from_eight_processes_apply_each_effect_once(
    database_url, session_factory, catalog
):
    orders = [
        (o.workflow_id, o.order_id)
        for o in place(session_factory, 60, source=RANDOM, rng=random.Random(5)).orders
    ]
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    counts = []
    for steps in ((STOCK,), tuple(s for s in STEPS if s != STOCK)):  # stock first: the others wait
        processes = [
            context.Process(target=_deliver, args=(database_url, step, sequence, batch, results))
            for step in steps
            for sequence, batch in ((orders, 16), (orders[::-1], 1))
        ]
        for process in processes:
            process.start()
        for process in processes:
            process.join(timeout=100)
        assert [p.exitcode for p in processes] == [0] * len(processes)
        counts += [results.get(timeout=5) for _ in processes]
    assert sum(done for done, _ in counts) == 60
    with session_factory() as session:
        short = session.scalar(select(func.count()).where(Order.status == OrderStatus.OUT_OF_STOCK))
    # one copy of each delivery is a duplicate; both copies of a skipped step are
    assert sum(dup for _, dup in counts) == 60 * 4 + 3 * short
    assert check_invariants(session_factory) == []
