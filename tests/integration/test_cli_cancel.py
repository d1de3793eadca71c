"""``orders cancel``: the real console script against real Redis and a real database."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest
from cli_processes import app_for, orders_command, start_orders, stop, wait_until
from sqlalchemy import select, update

from orders.app.cancellation import cancel_then_publish
from orders.app.placement import place, place_orders
from orders.domain.handlers import StepRequest, handle_step
from orders.domain.models import Inventory, Order
from orders.domain.steps import RETURN_STOCK, STEPS, STOCK
from orders.sources.drafts import RANDOM
from reliable_queue.embedded import EmbeddedRedis
from workflows.errors import PublisherUnavailable
from workflows.models import StepStatus, Workflow, WorkflowStatus, WorkflowStep
from workflows.relay import sweep
from workflows.uow import UnitOfWork


@pytest.fixture
def env(cli_env, database_url, redis_url, key_prefix) -> dict[str, str]:
    """The CLI on this test's database and Redis keys (the catalog fixture's database)."""
    return dict(
        cli_env,
        ORDERS_DATABASE_URL=database_url,
        ORDERS_REDIS_URL=redis_url,
        ORDERS_QUEUE_PREFIX=key_prefix,
    )


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*orders_command(), *args], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def orders(env, session_factory, catalog, make_draft):
    """Order 1 stocked (in flight), order 2 completed; returns the app's pieces."""
    app = app_for(env)
    with UnitOfWork(app.session_factory) as uow:
        placed = place_orders(uow.session, [make_draft(), make_draft()])
        uow.commit()
    handle_step(app.session_factory, StepRequest(placed[0].workflow_id, 1, STOCK))
    for step in STEPS:
        handle_step(app.session_factory, StepRequest(placed[1].workflow_id, 2, step))
    yield app
    app.close()


def status_of(app, order_id: int) -> str:
    with app.session_factory() as session:
        return session.get(Order, order_id).status


def test_cancel_an_order_in_flight_publishes_its_compensation_and_repeats_harmlessly(env, orders):
    proc = run(env, "cancel", "1")
    assert proc.returncode == 0, proc.stderr
    assert "order 1 cancelled; compensations: return_stock" in proc.stdout
    assert "skipped before they ran: notification, points, logistics" in proc.stdout
    assert status_of(orders, 1) == "cancelled"
    with orders.session_factory() as session:
        row = session.scalar(select(WorkflowStep).where(WorkflowStep.step == RETURN_STOCK))
    assert (row.status, row.compensates) == (StepStatus.DISPATCHED, STOCK)
    assert row.dispatched_at is not None  # marked in the cancellation's own commit
    assert orders.queues[RETURN_STOCK].pending_job_for(f"{row.workflow_id}:{RETURN_STOCK}")

    again = run(env, "cancel", "1", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == {
        "order_id": 1,
        "status": "cancelled",
        "already_cancelled": True,
        "compensations": [RETURN_STOCK],
        "skipped": [],
        "published_steps": 0,
        "deferred_steps": 0,
        "publish_error": None,
    }


def test_cancel_a_completed_order_is_too_late_and_changes_nothing(env, orders):
    proc = run(env, "cancel", "2")
    assert proc.returncode == 1
    assert "order 2 is completed: too late to cancel" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert status_of(orders, 2) == "completed"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("cancel", "99"), 1, "order 99 does not exist"),
        (("cancel", "abc"), 2, "Invalid value for 'ORDER_ID'"),
        (("cancel", "0"), 2, "Invalid value for 'ORDER_ID'"),
        (("cancel",), 2, "ORDER_ID"),
    ],
)
def test_cancel_with_an_unknown_order_or_bad_input_fails_clearly(env, orders, args, code, message):
    proc = run(env, *args)
    assert proc.returncode == code
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert (status_of(orders, 1), status_of(orders, 2)) == ("placed", "completed")


def test_status_and_explain_show_the_compensation_beside_the_forward_steps(env, orders):
    assert run(env, "cancel", "1").returncode == 0
    wide = dict(env, COLUMNS="140")
    status = run(wide, "status", "1")
    assert status.returncode == 0, status.stderr
    assert "undoes stock" in status.stdout and "skipped" in status.stdout
    shown = json.loads(run(wide, "status", "1", "--json").stdout)
    assert [(s["step"], s["compensates"]) for s in shown["steps"]] == [
        *((step, None) for step in STEPS),
        (RETURN_STOCK, STOCK),
    ]  # the compensation after the forward steps
    job = shown["steps"][-1]["job_id"] or orders.queues[RETURN_STOCK].pending_job_for(
        f"{shown['workflow_id']}:{RETURN_STOCK}"
    )

    overview = run(wide, "status")
    assert overview.returncode == 0, overview.stderr
    assert "return_stock" in overview.stdout and "cancel_shipment" in overview.stdout
    assert "steps skipped (out of stock, or cancelled before they ran): notification 1" in (
        overview.stdout
    )

    explained = run(wide, "explain", job, "--json")
    assert explained.returncode == 0, explained.stderr
    steps = json.loads(explained.stdout)["order_steps"]
    assert list(steps) == [*STEPS, RETURN_STOCK]
    assert steps["notification"] == "skipped (skipped: cancelled)"
    assert steps["stock"] == "done (deducted)"
    assert steps[RETURN_STOCK] == "dispatched, undoes stock"


@pytest.mark.slow
@pytest.mark.parametrize("down", ["embedded_stopped", "unreachable_url"])
def test_cancel_commits_without_redis_and_its_compensation_runs_when_a_worker_comes_back(
    env, orders, catalog, tmp_path: Path, down: str
) -> None:
    """Regression: with Redis down `orders cancel` exited 1 and wrote nothing, so the
    order completed meanwhile and the cancel came back too late."""
    if down == "embedded_stopped":  # the data dir's own Redis, stopped on purpose
        up = {k: v for k, v in env.items() if k not in ("ORDERS_REDIS_URL", "ORDERS_QUEUE_PREFIX")}
        server = EmbeddedRedis(up["ORDERS_DATA_DIR"])
        server.ensure_running()
        server.stop()
        down_env = up
    else:
        up, down_env = env, dict(env, ORDERS_REDIS_URL="redis://127.0.0.1:1/0")

    proc = run(down_env, "cancel", "1")

    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert "order 1 cancelled; compensations: return_stock" in out
    assert "publishing of 1 compensating step(s) is deferred" in out
    assert "Traceback" not in proc.stderr
    assert status_of(orders, 1) == "cancelled"
    with orders.session_factory() as session:
        row = session.scalar(select(WorkflowStep).where(WorkflowStep.step == RETURN_STOCK))
    # written dispatched, put back to pending when the queue could not be asked for
    assert (row.status, row.dispatched_at, row.publish_attempts) == (StepStatus.PENDING, None, 0)
    if down == "embedded_stopped":
        assert not EmbeddedRedis(up["ORDERS_DATA_DIR"]).is_running()  # not started for it

    worker = start_orders(
        ["worker", "--all", "--no-metrics"],
        dict(up, ORDERS_RELAY_SWEEP_INTERVAL_SECONDS="0.5"),
        tmp_path / "worker.log",
    )
    try:

        def undone() -> bool:
            with orders.session_factory() as session:
                workflow = session.get(Workflow, row.workflow_id)
                return workflow.status == WorkflowStatus.DONE

        wait_until(undone, 60, "the compensation to run")
    finally:
        assert stop(worker) == 0, (tmp_path / "worker.log").read_text()[-3000:]
    assert status_of(orders, 1) == "cancelled"
    with orders.session_factory() as session:
        stock = {i.part_id: i.on_hand for i in session.scalars(select(Inventory))}
    taken_by_order_2 = {10: 2, 11: 3, 12: 1}  # the default draft's lines, completed
    assert stock == {p: n - taken_by_order_2.get(p, 0) for p, n in catalog.items()}


def test_a_cancelled_order_whose_first_step_was_put_back_to_pending_is_never_published(
    session_factory, catalog, publisher
):
    """Placement found the queue down (its stock step went back to pending); the
    cancellation skips that step, so the sweep has nothing of the order to publish."""
    publisher.fail = PublisherUnavailable("queue down")
    placed = place(session_factory, 1, source=RANDOM, rng=random.Random(1), publisher=publisher)
    assert placed.deferred == 1
    publisher.fail = None
    done = cancel_then_publish(session_factory, lambda: publisher, placed.order_ids[0])
    assert (done.result.added, done.published, done.deferred) == ((), 0, 0)
    swept = sweep(session_factory, publisher, is_known=lambda _key: False, republish_after=30)
    assert (swept.published, swept.republished) == (0, 0)
    assert publisher.messages == []
    with session_factory() as session:
        assert set(session.scalars(select(WorkflowStep.status))) == {StepStatus.SKIPPED}


def plenty_of_stock(session_factory) -> None:
    with session_factory() as session:
        session.execute(update(Inventory).values(on_hand=10**6, initial_on_hand=10**6))
        session.commit()


def test_compensations_a_cancellation_could_not_publish_go_back_to_pending_for_the_sweep(
    session_factory, catalog, publisher
):
    plenty_of_stock(session_factory)
    placed = place(session_factory, 1, source=RANDOM, rng=random.Random(2), publisher=publisher)
    (order,) = placed.orders
    stocked = handle_step(session_factory, StepRequest(order.workflow_id, order.order_id, STOCK))
    assert stocked.outcome == "deducted"

    def no_queue():
        raise ConnectionError("Redis is not running")

    done = cancel_then_publish(session_factory, no_queue, order.order_id)
    assert (done.published, done.deferred) == (0, 1)
    assert done.publish_error == "ConnectionError: Redis is not running"
    with session_factory() as session:
        row = session.get(WorkflowStep, done.result.added[0])
    assert (row.status, row.dispatched_at, row.publish_attempts) == (StepStatus.PENDING, None, 0)
    publisher.messages.clear()
    swept = sweep(session_factory, publisher, is_known=lambda _key: False, republish_after=30)
    assert swept.published == 1
    assert publisher.keys() == [f"{order.workflow_id}:{RETURN_STOCK}"]


def test_a_cancellation_publishes_its_compensations_once_from_its_own_commit(
    session_factory, catalog, publisher
):
    plenty_of_stock(session_factory)
    placed = place(session_factory, 1, source=RANDOM, rng=random.Random(3), publisher=publisher)
    (order,) = placed.orders
    handle_step(session_factory, StepRequest(order.workflow_id, order.order_id, STOCK))
    publisher.messages.clear()
    done = cancel_then_publish(session_factory, lambda: publisher, order.order_id)
    assert (done.published, done.deferred, done.publish_error) == (1, 0, None)
    assert publisher.keys() == [f"{order.workflow_id}:{RETURN_STOCK}"]
    swept = sweep(session_factory, publisher, is_known=lambda _key: True, republish_after=30)
    assert (swept.published, swept.republished) == (0, 0)
    assert len(publisher.messages) == 1
