"""Placing orders writes order, lines, workflow and step rows in one transaction."""

from __future__ import annotations

import random
import re
import time
from datetime import timedelta

import pytest
from sqlalchemy import event, func, select
from sqlalchemy.exc import IntegrityError

from orders.app.placement import place, place_orders, write_orders
from orders.domain.models import Order, OrderLine, OrderStatus
from orders.domain.steps import STEPS, task_name
from orders.sources.drafts import RANDOM, random_drafts
from workflows.columns import utcnow
from workflows.models import StepStatus, Workflow, WorkflowStatus, WorkflowStep
from workflows.relay import message_for, publish_dispatched, sweep
from workflows.uow import UnitOfWork


def counts(session_factory) -> dict[str, int]:
    with session_factory() as session:
        return {
            model.__tablename__: session.scalar(select(func.count()).select_from(model))
            for model in (Order, OrderLine, Workflow, WorkflowStep)
        }


def test_placed_order_has_lines_workflow_and_one_pending_step_per_step(
    session_factory, catalog, make_draft
):
    with UnitOfWork(session_factory) as uow:
        [placed] = place_orders(uow.session, [make_draft()])
        uow.commit()
    with session_factory() as session:
        order = session.get(Order, placed.order_id)
        assert order.status == OrderStatus.PLACED
        workflow = session.get(Workflow, placed.workflow_id)
        assert (workflow.kind, workflow.subject_id) == ("order", order.id)
        assert workflow.status == WorkflowStatus.RUNNING
        steps = session.scalars(
            select(WorkflowStep).where(WorkflowStep.workflow_id == workflow.id)
        ).all()
    assert sorted(s.step for s in steps) == sorted(STEPS)
    for step in steps:  # stock first: the others wait for it
        assert step.status == (StepStatus.PENDING if step.step == "stock" else StepStatus.WAITING)
        assert step.queue == step.step
        assert step.task == task_name(step.step)
        assert step.payload == {"workflow_id": workflow.id, "order_id": order.id, "step": step.step}
        assert step.idempotency_key == f"{workflow.id}:{step.step}"
    assert counts(session_factory) == {
        "orders": 1,
        "order_lines": 3,
        "workflows": 1,
        "workflow_steps": 4,
    }


def test_failure_mid_placement_leaves_nothing_behind(session_factory, catalog, make_draft):
    good = make_draft()
    bad = make_draft(customer_id=999)  # no such customer: the INSERT fails mid-batch
    with pytest.raises(IntegrityError), UnitOfWork(session_factory) as uow:
        place_orders(uow.session, [good, good, bad, good])
        uow.commit()
    assert counts(session_factory) == {
        "orders": 0,
        "order_lines": 0,
        "workflows": 0,
        "workflow_steps": 0,
    }


def test_exception_after_outbox_write_rolls_back_order_and_steps(
    session_factory, catalog, make_draft
):
    with pytest.raises(RuntimeError), UnitOfWork(session_factory) as uow:
        place_orders(uow.session, [make_draft()])
        uow.session.flush()
        raise RuntimeError("crash before commit")
    assert counts(session_factory)["orders"] == 0
    assert counts(session_factory)["workflow_steps"] == 0


def test_place_publishes_every_first_step_once_after_commit(session_factory, catalog, publisher):
    result = place(
        session_factory, 7, source=RANDOM, rng=random.Random(1), batch_size=3, publisher=publisher
    )
    assert len(result.orders) == 7
    assert (result.published, result.deferred) == (7, 0)  # stock; the rest waits for it
    keys = publisher.keys()
    assert len(keys) == len(set(keys)) == 7
    with session_factory() as session:
        states = session.execute(select(WorkflowStep.step, WorkflowStep.status)).all()
    assert {state for step, state in states if step == "stock"} == {StepStatus.DISPATCHED}
    assert {state for step, state in states if step != "stock"} == {StepStatus.WAITING}


def test_random_orders_are_reproducible_from_the_seed(session_factory, catalog):
    first = place(session_factory, 5, source=RANDOM, rng=random.Random(42))
    second = place(session_factory, 5, source=RANDOM, rng=random.Random(42))
    with session_factory() as session:

        def lines(order_ids):
            return [
                session.execute(
                    select(OrderLine.part_id, OrderLine.quantity, OrderLine.ship_mode)
                    .where(OrderLine.order_id == oid)
                    .order_by(OrderLine.line_number)
                ).all()
                for oid in order_ids
            ]

        assert lines(first.order_ids) == lines(second.order_ids)


def test_placing_two_thousand_orders_takes_seconds(session_factory, catalog, publisher):
    started = time.perf_counter()
    result = place(session_factory, 2000, source=RANDOM, rng=random.Random(7), publisher=publisher)
    elapsed = time.perf_counter() - started
    assert len(result.orders) == 2000
    assert len(set(publisher.keys())) == 2000  # the stock steps; the others wait
    assert elapsed < 20, f"placing 2,000 orders took {elapsed:.1f} s"


def test_placement_publishes_the_messages_the_relay_would_read_from_the_rows(
    session_factory, catalog, publisher
):
    """Placement publishes from what it wrote, without reading the rows back: the
    messages must be exactly those of the committed rows."""
    place(session_factory, 4, source=RANDOM, rng=random.Random(3), publisher=publisher)
    with session_factory() as session:
        rows = session.scalars(
            select(WorkflowStep).where(WorkflowStep.step == "stock").order_by(WorkflowStep.id)
        ).all()
        expected = [message_for(row) for row in rows]
    assert publisher.messages == expected


def test_placement_publishes_without_reading_or_marking_its_step_rows(
    session_factory, catalog, publisher, engine
):
    """The batch's commit wrote the first steps dispatched, with what their messages
    need: after it, nothing reads or writes a step row (one unit of work per batch)."""
    place(session_factory, 1, source=RANDOM, rng=random.Random(2))  # the first-batch ANALYZE
    statements: list[str] = []
    published_after: list[int] = []

    def executed(conn, cursor, statement, parameters, context, executemany) -> None:
        statements.append(statement)

    class Recording:
        def publish(self, messages):
            published_after.append(len(statements))
            publisher.publish(messages)

    event.listen(engine, "before_cursor_execute", executed)
    try:
        result = place(
            session_factory, 6, source=RANDOM, rng=random.Random(3), batch_size=3,
            publisher=Recording(),
        )  # fmt: skip
    finally:
        event.remove(engine, "before_cursor_execute", executed)
    assert (result.published, result.deferred) == (6, 0)
    assert len(published_after) == 2  # one publish per batch
    touching_steps = re.compile(r"(FROM|UPDATE|JOIN)\s+workflow_steps\b", re.IGNORECASE)
    assert [s for s in statements if touching_steps.search(s)] == []
    # the second batch's statements come right after the first batch's publish
    assert 0 < published_after[0] < published_after[1]
    with session_factory() as session:
        rows = [session.get(WorkflowStep, p.step_ids[0]) for p in result.orders]
    assert all(r.status == StepStatus.DISPATCHED and r.dispatched_at for r in rows)


def test_a_sweep_between_placement_commit_and_publish_leaves_the_steps_to_placement(
    session_factory, catalog, publisher
):
    """The first steps are never pending: a sweep cannot publish them beside placement."""
    swept = []

    class SweepFirst:
        def publish(self, messages):
            swept.append(
                sweep(
                    session_factory,
                    publisher,
                    known_keys=lambda keys: set(publisher.keys()) & set(keys),
                    republish_after=30,
                )
            )
            publisher.publish(messages)

    result = place(session_factory, 2, source=RANDOM, rng=random.Random(5), publisher=SweepFirst())
    assert (result.published, result.deferred) == (2, 0)
    assert [(s.published, s.checked, s.republished) for s in swept] == [(0, 0, 0)]
    assert len(publisher.messages) == 2


def test_steps_a_crash_left_unpublished_after_placement_commit_are_republished_by_the_sweep(
    session_factory, catalog, publisher
):
    """The process died between the batch's commit and its publish: the first steps
    are dispatched and the queue holds none of them; the sweep's check of dispatched
    steps publishes them once they are ``republish_after`` old, once each."""
    with UnitOfWork(session_factory) as uow:
        drafts = random_drafts(uow.session, 3, random.Random(6))
        placed, first = write_orders(uow.session, drafts)
        uow.commit()  # ... and the process dies: nothing published
    assert len(first) == 3
    with session_factory() as session:
        states = session.execute(select(WorkflowStep.step, WorkflowStep.status)).all()
    assert {state for step, state in states if step == "stock"} == {StepStatus.DISPATCHED}
    now = utcnow()

    def sweep_at(seconds: float):
        return sweep(
            session_factory,
            publisher,
            known_keys=lambda keys: set(publisher.keys()) & set(keys),  # the queue
            republish_after=30,
            clock=lambda: now + timedelta(seconds=seconds),
        )

    young = sweep_at(1)
    assert (young.published, young.checked, young.republished) == (0, 0, 0)
    old = sweep_at(31)
    assert (old.published, old.checked, old.republished) == (0, 3, 3)
    assert sorted(publisher.keys()) == sorted(f"{p.workflow_id}:stock" for p in placed)
    again = sweep_at(62)  # the queue holds them now: nothing is published twice
    assert (again.checked, again.republished) == (3, 0)
    assert len(publisher.messages) == 3


def test_placement_without_a_queue_writes_pending_steps_for_the_sweep(
    session_factory, catalog, publisher
):
    result = place(session_factory, 2, source=RANDOM, rng=random.Random(7))
    assert (result.published, result.deferred) == (0, 2)
    with session_factory() as session:
        states = session.execute(select(WorkflowStep.step, WorkflowStep.status)).all()
    assert {state for step, state in states if step == "stock"} == {StepStatus.PENDING}
    swept = sweep(session_factory, publisher, known_keys=lambda keys: (), republish_after=30)
    assert swept.published == 2
    # the writer's protocol: the rows were marked before the publish
    assert publish_dispatched(session_factory, publisher, []) == 0
