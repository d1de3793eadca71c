"""An order's steps carry its TPC-H priority, mapped to a queue priority, and its
customer as their fairness key: written on the step rows at placement, kept by every
publish (a re-publish by the sweep, a compensation), so an urgent order overtakes a
backlog of low ones and one customer's backlog cannot hold the others back (ADR 0033)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sqlalchemy import select

from orders.app.cancellation import cancel
from orders.app.placement import write_orders
from orders.domain.models import Order
from orders.domain.steps import ALL_STEPS, STEP_PRIORITY, fairness_key, route
from reliable_queue import Queue, explain
from workflows.models import WorkflowStep
from workflows.publisher import QueuePublisher
from workflows.relay import publish_dispatched, sweep
from workflows.uow import UnitOfWork


@pytest.fixture
def queues(redis_client, key_prefix) -> dict[str, Queue]:
    return {step: Queue(redis_client, step, prefix=key_prefix) for step in ALL_STEPS}


def place(session_factory, publisher, drafts):
    with UnitOfWork(session_factory) as uow:
        placed, first = write_orders(uow.session, drafts)
        uow.commit()
    publish_dispatched(session_factory, publisher, first)
    return placed


def test_the_priority_table_covers_every_tpch_priority():
    assert set(STEP_PRIORITY) == {"1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW"}
    assert STEP_PRIORITY["1-URGENT"] < STEP_PRIORITY["3-MEDIUM"] < STEP_PRIORITY["5-LOW"]


def test_an_urgent_order_overtakes_a_backlog_of_low_ones(
    session_factory, catalog, make_draft, queues
):
    publisher = QueuePublisher(queues.__getitem__)
    lows = place(
        session_factory, publisher, [replace(make_draft(customer_id=2), priority="5-LOW")] * 5
    )
    [urgent] = place(
        session_factory, publisher, [replace(make_draft(customer_id=1), priority="1-URGENT")]
    )
    stock = queues["stock"]
    first = stock.fetch(1).jobs[0]
    assert first.job_id == stock.pending_job_for(f"{urgent.workflow_id}:stock")
    e = explain(stock, first.job_id)
    assert (e.priority, e.fairness_key) == (STEP_PRIORITY["1-URGENT"], fairness_key(1))
    low = stock.pending_job_for(f"{lows[0].workflow_id}:stock")
    assert (explain(stock, low).priority, explain(stock, low).fairness_key) == (7, "customer-2")
    with session_factory() as session:
        assert session.get(Order, urgent.order_id).priority == "1-URGENT"
        rows = session.scalars(
            select(WorkflowStep).where(WorkflowStep.workflow_id == urgent.workflow_id)
        ).all()
    assert {(r.priority, r.fairness_key) for r in rows} == {(1, "customer-1")}


def test_a_republished_step_keeps_its_priority_and_key(
    session_factory, catalog, make_draft, queues
):
    publisher = QueuePublisher(queues.__getitem__)
    [order] = place(
        session_factory, publisher, [replace(make_draft(customer_id=3), priority="2-HIGH")]
    )
    stock = queues["stock"]
    lost = stock.pending_job_for(f"{order.workflow_id}:stock")
    stock.evict_key_for_chaos("waiting")  # Redis loses it: the sweep publishes it again
    assert stock.locate(lost) == "nowhere"
    swept = sweep(session_factory, publisher, known_keys=publisher.known_keys, republish_after=0)
    assert swept.republished == 1
    again = stock.pending_job_for(f"{order.workflow_id}:stock")
    assert again != lost
    e = explain(stock, again)
    assert (e.state, e.priority, e.fairness_key) == ("ready", 3, "customer-3")


def test_a_compensation_carries_the_orders_priority_and_key(
    session_factory, catalog, make_draft, queues
):
    publisher = QueuePublisher(queues.__getitem__)
    [order] = place(
        session_factory, publisher, [replace(make_draft(customer_id=1), priority="1-URGENT")]
    )
    with UnitOfWork(session_factory) as uow:  # the stock step finished
        row = uow.session.scalars(
            select(WorkflowStep).where(
                WorkflowStep.workflow_id == order.workflow_id, WorkflowStep.step == "stock"
            )
        ).one()
        row.status = "done"
        uow.commit()
    cancel(session_factory, publisher, order.order_id)
    queue, _ = route("return_stock")
    job = queues[queue].pending_job_for(f"{order.workflow_id}:return_stock")
    assert job is not None
    assert (explain(queues[queue], job).priority, explain(queues[queue], job).fairness_key) == (
        1,
        "customer-1",
    )
