"""Many processes delivering every step twice at once: every effect still lands once."""

from __future__ import annotations

import multiprocessing
import random
import time

from sqlalchemy import func, select

from orders.app.db import make_engine, make_session_factory
from orders.app.invariants import check_invariants
from orders.app.placement import place
from orders.domain.handlers import StepRequest, handle_step
from orders.domain.models import Order, OrderStatus
from orders.domain.queries import totals
from orders.domain.steps import STEPS
from orders.sources.drafts import RANDOM
from workflows.errors import StepNotReady


def deliver_all(url: str, step: str, orders: list[tuple[int, int]], results) -> None:
    engine = make_engine(url)
    try:
        session_factory = make_session_factory(engine)
        done = duplicates = 0
        for workflow_id, order_id in orders:
            for _ in range(2000):  # a step after stock is retried until stock finished
                try:
                    result = handle_step(
                        session_factory,
                        StepRequest(workflow_id, order_id, step),
                        conflict_attempts=50,
                    )
                    break
                except StepNotReady:
                    time.sleep(0.005)
            else:
                raise AssertionError(f"{step} of order {order_id} never became ready")
            done += result.workflow_done
            duplicates += result.duplicate
        results.put((done, duplicates))
    finally:
        engine.dispose()


def test_concurrent_duplicate_deliveries_from_eight_processes_apply_each_effect_once(
    database_url, session_factory, catalog
):
    orders = [
        (o.workflow_id, o.order_id)
        for o in place(session_factory, 60, source=RANDOM, rng=random.Random(11)).orders
    ]
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    processes = [
        context.Process(target=deliver_all, args=(database_url, step, sequence, results))
        for step in STEPS
        for sequence in (orders, orders[::-1])
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=100)
    assert [p.exitcode for p in processes] == [0] * 8
    counts = [results.get(timeout=5) for _ in processes]
    assert sum(done for done, _ in counts) == 60  # each workflow completed exactly once
    with session_factory() as session:
        short = session.scalar(select(func.count()).where(Order.status == OrderStatus.OUT_OF_STOCK))
    # every second delivery absorbed, and both deliveries of a step skipped for lack of stock
    assert sum(dup for _, dup in counts) == 60 * 4 + 3 * short
    assert check_invariants(session_factory) == []
    with session_factory() as session:
        summary = totals(session)
    assert summary.orders == 60
    assert summary.orders_by_status.get("placed", 0) == 0
