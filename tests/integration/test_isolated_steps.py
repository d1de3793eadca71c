"""Step handlers in isolated child processes (``ORDERS_STEP_ISOLATION=process``): a real
``orders worker`` on the test's database (SQLite, or PostgreSQL with TEST_DATABASE_URL)
and Redis; each lane's child builds its own application from the environment."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from cli_processes import run_orders, start_orders, stop, wait_until
from publishing import publish_now
from sqlalchemy import func, select

from orders.app.bootstrap import App, build
from orders.app.invariants import check_invariants
from orders.app.placement import place_orders
from orders.app.settings import Settings
from orders.domain.models import Order, OrderStatus
from orders.domain.steps import STEPS
from orders.worker.counters import Counters
from workflows.uow import UnitOfWork

pytestmark = pytest.mark.chaos  # worker processes and their children

ORDERS = 6


@pytest.fixture
def env(cli_env, database_url, redis_url, key_prefix, session_factory, catalog) -> dict[str, str]:
    """``orders`` processes on the test's own (migrated, stocked) database and Redis."""
    return dict(
        cli_env,
        ORDERS_DATABASE_URL=database_url,
        ORDERS_REDIS_URL=redis_url,
        ORDERS_QUEUE_PREFIX=key_prefix,
        ORDERS_STEP_ISOLATION="process",
    )


@pytest.fixture
def app(env, redis_client) -> Iterator[App]:
    settings = Settings(
        database_url=env["ORDERS_DATABASE_URL"], queue_prefix=env["ORDERS_QUEUE_PREFIX"]
    )
    app = build(settings, redis_override=redis_client)
    try:
        yield app
    finally:
        app.close()


def completed(app: App) -> int:
    with app.session_factory() as session:
        return session.scalar(
            select(func.count()).select_from(Order).where(Order.status == OrderStatus.COMPLETED)
        )


def test_placed_orders_complete_with_every_step_run_in_isolated_children(
    env, app, make_draft, tmp_path
):
    """Only the stock steps are published here; the others are released by stock's
    commits in the children, which publish them, count them and record their metrics."""
    with UnitOfWork(app.session_factory) as uow:
        placed = place_orders(uow.session, [make_draft() for _ in range(ORDERS)])
        uow.commit()
    assert publish_now(app.session_factory, app.publisher, [p.step_ids[0] for p in placed])
    log = tmp_path / "worker.log"
    worker = start_orders(
        ["worker", "--all", "--concurrency", "1", "--no-sweep", "--grace", "2"], env, log
    )
    try:
        wait_until(lambda: completed(app) == ORDERS, timeout=120, what="every order completed")
        overview = json.loads(run_orders(["status", "--json"], env))
    finally:
        assert stop(worker) == 0, log.read_text()[-3000:]
    assert check_invariants(app.session_factory) == []
    assert overview["orders"]["orders_by_status"] == {"completed": ORDERS}
    counted = Counters(app.redis, app.settings.queue_prefix).read()
    assert {step: counted.get(f"applied:{step}", 0) for step in STEPS} == dict.fromkeys(
        STEPS, ORDERS
    )  # counted by the children, through Redis
    text = log.read_text()
    children = [line for line in text.splitlines() if "isolated child" in line and "ready" in line]
    assert len(children) == len(STEPS), text[-3000:]  # one child per step lane that ran
    assert "Traceback" not in text
