"""A running worker serves its Redis namespace only while it is bound to its database."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cli_processes import app_for, run_orders, start_orders, stop, wait_until
from publishing import publish_now
from sqlalchemy import func, select

from orders.app.bootstrap import App
from orders.app.migrate import upgrade_database
from orders.app.namespace import claim_key
from orders.app.placement import place_orders
from orders.domain.models import Order, OrderStatus
from orders.sources.catalog import load_catalog as insert_catalog
from orders.sources.drafts import OrderDraft
from orders.worker.binding import NamespaceGuard
from orders.worker.runner import build_worker
from reliable_queue import stats
from workflows.models import WorkflowStep
from workflows.uow import UnitOfWork

pytestmark = pytest.mark.slow


@pytest.fixture
def other_database_url(tmp_path: Path) -> Iterator[str]:
    """A second fresh database beside :func:`database_url` (same kind)."""
    external = os.environ.get("TEST_DATABASE_URL")
    if not external:
        yield f"sqlite:///{tmp_path / 'other.db'}"
        return
    from orderflow_fixtures import _PostgresDatabase

    with _PostgresDatabase(external) as url:
        yield url


def load_catalog(app: App) -> None:
    """Customers 1-3 and parts 10-14, plenty of stock (as the ``catalog`` fixture)."""
    insert_catalog(app.session_factory, (1, 2, 3), dict.fromkeys(range(10, 15), 10_000))


def place(app: App, drafts: list[OrderDraft]) -> None:
    with UnitOfWork(app.session_factory) as uow:
        placed = place_orders(uow.session, drafts)
        uow.commit()
    ids = [step for order in placed for step in order.step_ids]
    assert publish_now(app.session_factory, app.publisher, ids) == len(placed)


def settled(app: App) -> int:
    """Orders completed or out of stock (the catalog fixture's stock runs short)."""
    with app.session_factory() as session:
        return int(
            session.scalar(select(func.count()).where(Order.status != OrderStatus.PLACED)) or 0
        )


def step_rows(app: App) -> list[tuple[int, str, str, int, str | None]]:
    """Every step row's (workflow, step, status, attempts, last error)."""
    with app.session_factory() as session:
        return [
            tuple(row)
            for row in session.execute(
                select(
                    WorkflowStep.workflow_id,
                    WorkflowStep.step,
                    WorkflowStep.status,
                    WorkflowStep.attempts,
                    WorkflowStep.last_error,
                ).order_by(WorkflowStep.id)
            )
        ]


@pytest.fixture
def two_databases(
    cli_env: dict[str, str],
    database_url: str,
    other_database_url: str,
    catalog: dict[int, int],
) -> Iterator[tuple[dict[str, str], dict[str, str], App, App]]:
    """Environments and apps of database A (the catalog fixture's) and database B, both
    on the same Redis namespace."""
    env_a = dict(cli_env, ORDERS_DATABASE_URL=database_url)
    env_b = dict(cli_env, ORDERS_DATABASE_URL=other_database_url)
    upgrade_database(other_database_url)
    a, b = app_for(env_a, migrate=False), app_for(env_b, migrate=False)
    load_catalog(b)
    try:
        yield env_a, env_b, a, b
    finally:
        a.close()
        b.close()


def test_a_worker_whose_namespace_is_handed_over_hands_back_the_jobs_and_exits(
    two_databases: tuple[dict[str, str], dict[str, str], App, App],
    make_draft: Callable[..., OrderDraft],
    tmp_path: Path,
) -> None:
    """Regression: after `orders db rebind-redis` handed the namespace to database B,
    A's worker, still running, consumed B's jobs: it acked those whose ids A had
    finished as duplicates and dead-lettered the rest as naming no step."""
    env_a, env_b, a, b = two_databases
    log = tmp_path / "worker-a.log"
    # a long sweep interval: the worker meets B's jobs before its periodic check
    worker = start_orders(
        ["worker", "--all", "--no-metrics"],
        dict(env_a, ORDERS_RELAY_SWEEP_INTERVAL_SECONDS="600"),
        log,
    )
    try:
        place(a, [make_draft() for _ in range(50)])
        wait_until(lambda: settled(a) == 50, 60, "A's 50 orders")
        before = step_rows(a)

        run_orders(["db", "rebind-redis", "--yes"], env_b)
        place(b, [make_draft() for _ in range(80)])  # ids 1..50 are done in A

        assert worker.wait(30) == 1, log.read_text()[-3000:]
    finally:
        stop(worker)
    lines = [line for line in log.read_text().splitlines() if line.startswith("error:")]
    assert len(lines) == 1, log.read_text()[-3000:]
    assert a.database_label.id[:8] in lines[0] and b.database_label.id[:8] in lines[0]

    queues = {step: stats(queue) for step, queue in b.queues.items()}
    assert queues["stock"].ready == 80  # every one of B's jobs is still B's to run
    assert all(q.dead == 0 and q.active == 0 for q in queues.values())
    assert all(q.counters.get("succeeded", 0) == 0 for q in queues.values())
    assert step_rows(a) == before  # and A's own step rows were not touched

    finisher = start_orders(["worker", "--all", "--no-metrics"], env_b, tmp_path / "b.log")
    try:
        wait_until(lambda: settled(b) == 80, 90, "B's 80 orders")
    finally:
        assert stop(finisher) == 0
    assert settled(a) == 50


def test_an_idle_worker_learns_at_its_sweep_interval_that_its_namespace_was_handed_over(
    two_databases: tuple[dict[str, str], dict[str, str], App, App], tmp_path: Path
) -> None:
    env_a, env_b, a, b = two_databases
    log = tmp_path / "worker-a.log"
    worker = start_orders(
        ["worker", "--all", "--no-metrics", "--no-sweep"],
        dict(env_a, ORDERS_RELAY_SWEEP_INTERVAL_SECONDS="0.5"),
        log,
    )
    try:
        wait_until(lambda: "serving" in log.read_text(), 60, "the worker to serve")
        run_orders(["db", "rebind-redis", "--yes"], env_b)
        started = time.monotonic()
        assert worker.wait(30) == 1, log.read_text()[-3000:]
        assert time.monotonic() - started < 10
    finally:
        stop(worker)
    assert f"now belongs to database {b.database_label.id[:8]}" in " ".join(log.read_text().split())


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_a_job_naming_no_step_is_handed_back_while_the_binding_is_in_doubt(
    database_url: str,
    cli_env: dict[str, str],
    catalog: dict[int, int],
    isolation: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A job whose step this database does not know is dead-lettered only once a fresh
    read of the namespace's claim confirms this database holds it; also when the step
    ran in an isolated child, whose error names its cause by type name only."""
    env = dict(cli_env, ORDERS_DATABASE_URL=database_url)
    for name, value in env.items():  # an isolated child builds its app from them
        if name.startswith("ORDERS_"):
            monkeypatch.setenv(name, value)
    app = app_for(env, migrate=False)
    guard = NamespaceGuard(app)
    try:
        app.bind_namespace()
        stock = app.queues["stock"]
        job_id = stock.enqueue(
            "orders.stock", {"workflow_id": 987, "order_id": 987, "step": "stock"}
        )
        claim = claim_key(app.settings.queue_prefix)
        app.redis.delete(claim)
        app.redis.rpush(claim, "not a claim")  # every read of it fails: in doubt
        worker = build_worker(app, ["stock"], guard=guard, batch_size=1, isolation=isolation)
        runner = threading.Thread(
            target=worker.run, kwargs={"install_signals": False, "freeze_gc": False}
        )
        runner.start()
        try:
            wait_until(lambda: stats(stock).counters.get("released", 0) >= 2, 20, "hand-backs")
            assert stats(stock).dead == 0  # never dead-lettered while in doubt
            app.redis.delete(claim)  # readable again: this database takes the claim back
            wait_until(lambda: stats(stock).dead == 1, 20, "the dead letter")
        finally:
            worker.request_stop()
            runner.join(30)
        letter = stock.dead_letters.show(job_id)
        assert letter is not None and "StepNotFound" in (letter.error or "")
        assert guard.lost is None
    finally:
        app.close()
