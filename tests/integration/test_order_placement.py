"""Placing orders writes order, lines, workflow and step rows in one transaction."""

from __future__ import annotations

import random
import time

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from orders.app.placement import place, place_orders, write_orders
from orders.domain.models import Order, OrderLine, OrderStatus
from orders.domain.steps import STEPS, task_name
from orders.sources.drafts import RANDOM, random_drafts
from workflows.models import StepStatus, Workflow, WorkflowStatus, WorkflowStep
from workflows.relay import message_for, publish_pending, publish_steps
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


def test_a_step_published_before_placement_publishes_it_is_not_published_again(
    session_factory, catalog, publisher
):
    """The messages placement holds do not skip the check that a row is still pending."""
    with UnitOfWork(session_factory) as uow:
        drafts = random_drafts(uow.session, 2, random.Random(5))
        placed, first = write_orders(uow.session, drafts)
        uow.commit()
    assert publish_pending(session_factory, publisher) == 2  # a sweep got there first
    assert publish_steps(session_factory, publisher, list(first), known=first) == 0
    assert len(publisher.messages) == 2
    assert len(placed) == 2
