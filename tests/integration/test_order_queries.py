"""Status queries: one order's steps, totals, step latencies."""

from __future__ import annotations

import json

from orders.app.placement import place_orders
from orders.domain.handlers import StepRequest, handle_step, mark_step_dead, record_step_failure
from orders.domain.queries import order_status, step_latencies, totals
from orders.domain.steps import LOGISTICS, NOTIFICATION, POINTS, STEPS, STOCK
from workflows.uow import UnitOfWork


def place(session_factory, drafts):
    with UnitOfWork(session_factory) as uow:
        placed = place_orders(uow.session, drafts)
        uow.commit()
    return placed


def test_order_status_shows_each_step_and_the_completion_time(session_factory, catalog, make_draft):
    [p] = place(session_factory, [make_draft()])
    handle_step(session_factory, StepRequest(p.workflow_id, p.order_id, STOCK))  # releases points
    record_step_failure(
        session_factory, StepRequest(p.workflow_id, p.order_id, POINTS, 1), "TimeoutError: slow"
    )
    for step in STEPS:
        handle_step(session_factory, StepRequest(p.workflow_id, p.order_id, step, attempt=2))
    with session_factory() as session:
        view = order_status(session, p.order_id)
        assert order_status(session, 999) is None
    assert view.status == "completed" and view.workflow_status == "done"
    assert [s.step for s in view.steps] == list(STEPS)
    points = view.steps[2]
    assert (points.status, points.attempts, points.last_error) == ("done", 2, "TimeoutError: slow")
    assert view.completed_at == max(s.finished_at for s in view.steps)
    encoded = json.loads(json.dumps(view.to_dict()))
    assert encoded["steps"][0]["step"] == "stock"
    assert encoded["total_price"] == "1234.56"


def test_totals_count_orders_by_status_and_steps_by_state(session_factory, catalog, make_draft):
    done, short, blocked, fresh = place(
        session_factory, [make_draft(), make_draft([(13, 9, "AIR")]), make_draft(), make_draft()]
    )
    for p in (done, short):
        for step in STEPS:
            handle_step(session_factory, StepRequest(p.workflow_id, p.order_id, step, attempt=1))
    handle_step(session_factory, StepRequest(blocked.workflow_id, blocked.order_id, STOCK, 3))
    mark_step_dead(
        session_factory,
        blocked.workflow_id,
        LOGISTICS,
        "retries_exhausted",
        error="boom",
        attempts=5,
    )
    with session_factory() as session:
        result = totals(session)
        later = totals(session, first_order_id=fresh.order_id)
        latencies = step_latencies(session)
    assert result.orders == 4
    assert result.orders_by_status == {"completed": 1, "out_of_stock": 1, "blocked": 1, "placed": 1}
    assert result.steps_by_state[STOCK] == {
        "waiting": 0,
        "pending": 1,
        "dispatched": 0,
        "failed": 0,
        "done": 3,
        "skipped": 0,
        "dead": 0,
        "unpublishable": 0,
    }
    assert result.steps_by_state[LOGISTICS]["dead"] == 1
    # released (dispatched) after the blocked order's stock; waiting on the fresh one's;
    # skipped when short
    assert result.steps_by_state[NOTIFICATION]["dispatched"] == 1
    assert result.steps_by_state[NOTIFICATION]["waiting"] == 1
    assert result.steps_by_state[NOTIFICATION]["skipped"] == 1
    assert result.retries_by_step == {STOCK: 2, NOTIFICATION: 0, POINTS: 0, LOGISTICS: 4}
    assert later.orders == 1 and later.orders_by_status == {"placed": 1}
    assert latencies[STOCK].count == 3
    assert 0 <= latencies[STOCK].p50_seconds <= latencies[STOCK].p95_seconds
    assert json.loads(json.dumps(result.to_dict()))["orders"] == 4
