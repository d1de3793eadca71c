"""Attempts that no longer hold their step commit nothing: real `orders worker` processes,
real Redis and the test's database (SQLite, or PostgreSQL with TEST_DATABASE_URL)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_processes import run_orders, start_orders, stop, wait_until
from publishing import publish_now
from sqlalchemy import func, select

from orders.app.bootstrap import App, build
from orders.app.placement import place_orders
from orders.app.settings import Settings
from orders.domain.models import StockDeduction
from orders.domain.steps import STOCK
from orders.worker.counters import Counters
from orders.worker.faults import FaultConfig, FaultStore
from reliable_queue import explain
from reliable_queue.execution import fencing_number
from workflows.models import StepStatus, WorkflowStep
from workflows.uow import UnitOfWork

pytestmark = pytest.mark.chaos  # SIGSTOPs and kills real worker processes


@pytest.fixture
def env(cli_env, database_url, redis_url, key_prefix, session_factory, catalog) -> dict[str, str]:
    """``orders`` processes on the test's own (migrated, stocked) database and Redis."""
    return dict(
        cli_env,
        ORDERS_DATABASE_URL=database_url,
        ORDERS_REDIS_URL=redis_url,
        ORDERS_QUEUE_PREFIX=key_prefix,
        ORDERS_BACKOFF_BASE_SECONDS="0.1",
        ORDERS_BACKOFF_MAX_SECONDS="0.2",
        ORDERS_MAX_ATTEMPTS="2",
    )


@pytest.fixture
def app(env, redis_client) -> Iterator[App]:
    """The application as the test places orders with it (max attempts as the workers')."""
    settings = Settings(
        database_url=env["ORDERS_DATABASE_URL"],
        queue_prefix=env["ORDERS_QUEUE_PREFIX"],
        max_attempts=2,  # the job records carry it: set at enqueue
    )
    app = build(settings, redis_override=redis_client)
    try:
        yield app
    finally:
        app.close()


def place_and_publish(app: App, make_draft, n: int, lines=((10, 1, "AIR"),)) -> list[int]:
    """Place ``n`` orders and publish their stock steps; return the workflow ids."""
    with UnitOfWork(app.session_factory) as uow:
        placed = place_orders(uow.session, [make_draft(lines=list(lines)) for _ in range(n)])
        uow.commit()
    assert publish_now(app.session_factory, app.publisher, [p.step_ids[0] for p in placed]) == n
    return [p.workflow_id for p in placed]


def start_worker(env, log: Path, args: list[str]) -> subprocess.Popen[bytes]:
    return start_orders(["worker", *args], env, log)


def serving(log: Path) -> bool:
    return "serving" in log.read_text()


def stock_rows(app: App, workflow_ids: list[int]) -> list[WorkflowStep]:
    with app.session_factory() as session:
        return list(
            session.scalars(
                select(WorkflowStep)
                .where(WorkflowStep.workflow_id.in_(workflow_ids), WorkflowStep.step == STOCK)
                .order_by(WorkflowStep.workflow_id)
            )
        )


def deductions(app: App) -> int:
    with app.session_factory() as session:
        return session.scalar(select(func.count()).select_from(StockDeduction))


WORKER = ["--no-sweep", "--no-metrics", "--batch-size", "1", "--grace", "1"]


@pytest.mark.slow
def test_a_timed_out_attempt_that_finishes_late_completes_no_order(env, app, make_draft, tmp_path):
    """A stock handler hung past its step time limit at every attempt: each attempt fails
    as timed_out (retried, then dead-lettered) while its abandoned thread goes on and
    reaches its commit. Before, that late commit landed: the orders completed while
    their stock jobs sat in the DLQ as timed_out."""
    env = dict(
        env,
        ORDERS_STEP_TIME_LIMIT_SECONDS="1",
        ORDERS_LEASE_SECONDS="1.5",  # heartbeat and time-limit check every 0.5 s
    )
    FaultStore(app.redis, app.settings.queue_prefix).set(
        STOCK, FaultConfig(hang_rate=1.0, hang_ms=3000)
    )
    workflow_ids = place_and_publish(app, make_draft, 3)
    log = tmp_path / "worker.log"
    proc = start_worker(env, log, ["--all", "--concurrency", "3", *WORKER])
    try:
        queue = app.queue(STOCK)
        wait_until(
            lambda: queue.dead_letters.size() == 3,
            timeout=40,
            what="the three stock jobs dead-lettered",
        )
        # every abandoned attempt (2 per order) wakes up 3 s after it began, runs its unit
        # of work, and returns to a worker that ignores its result
        wait_until(
            lambda: log.read_text().count("late results ignored") >= 6,
            timeout=15,
            what="the six abandoned attempts to return",
        )
        time.sleep(1.0)  # the steps a late commit released would run now
        overview = json.loads(run_orders(["status", "--json"], env))
    finally:
        stop(proc)
    counted = Counters(app.redis, app.settings.queue_prefix).read()
    orders, stock_queue = overview["orders"], overview["queues"][STOCK]
    assert orders["orders_by_status"].get("completed", 0) == 0, log.read_text()[-3000:]
    assert deductions(app) == 0  # no abandoned attempt took stock
    rows = stock_rows(app, workflow_ids)
    assert [(r.status, r.outcome) for r in rows] == [(StepStatus.DEAD, "timed_out")] * 3
    letters = {d.job_id: d for d in queue.dead_letters.list()}
    assert {r.job_id for r in rows} == set(letters)  # the DLQ and the steps agree
    assert {d.reason for d in letters.values()} == {"timed_out"}
    assert orders["steps_by_state"][STOCK].get("dead", 0) == stock_queue["dead"] == 3
    assert orders["orders_by_status"].get("blocked", 0) == 3
    refused = sum(n for k, n in counted.items() if k.startswith("fenced:") and k.endswith(STOCK))
    assert refused == 6, counted
    assert "commit refused" in log.read_text()


def holder_pid(app: App, job_id: str) -> int | None:
    """The pid of the worker that holds ``job_id``'s lease now (None: not active)."""
    info = explain(app.queue(STOCK), job_id)
    if info is None or info.state != "active" or not info.lease_owner:
        return None
    return int(info.lease_owner.split(":")[1])


@pytest.mark.slow
def test_a_superseded_attempt_thawed_after_its_lease_commits_nothing(
    env, app, make_draft, tmp_path
):
    """Worker A leases a stock job and is frozen (SIGSTOP) before its transaction, past
    its lease; the job is redelivered to worker B. A thaws while B's run is still on its
    way: A's late commit is refused (counted), B commits the one effect."""
    env = dict(env, ORDERS_LEASE_SECONDS="2")
    faults = FaultStore(app.redis, app.settings.queue_prefix)
    faults.set(STOCK, FaultConfig(delay_ms=3000))  # every run starts 3 s after its fetch
    [workflow_id] = place_and_publish(app, make_draft, 1, lines=((10, 1, "AIR"), (11, 2, "AIR")))
    queue = app.queue(STOCK)
    job_id = queue.pending_job_for(f"{workflow_id}:{STOCK}")
    assert job_id is not None
    a_log, b_log = tmp_path / "a.log", tmp_path / "b.log"
    a = start_worker(env, a_log, ["stock", *WORKER])
    b = None
    try:
        wait_until(lambda: holder_pid(app, job_id) == a.pid, timeout=30, what="A to lease it")
        os.kill(a.pid, signal.SIGSTOP)  # inside its 3 s delay: no transaction open
        b = start_worker(env, b_log, ["stock", *WORKER])
        wait_until(lambda: holder_pid(app, job_id) == b.pid, timeout=30, what="B to lease it")
        b_token = fencing_number(explain(queue, job_id).lease_token or "")
        os.kill(a.pid, signal.SIGCONT)  # A's delay is over: it runs its unit of work now
        counters = Counters(app.redis, app.settings.queue_prefix)
        wait_until(lambda: explain(queue, job_id).state == "done", timeout=20, what="B to commit")
        refused = {k: n for k, n in counters.read().items() if k.startswith("fenced:")}
    finally:
        os.kill(a.pid, signal.SIGCONT)
        stop(a)
        if b is not None:
            stop(b)
    [row] = stock_rows(app, [workflow_id])
    assert row.status == StepStatus.DONE
    assert row.fencing_token == b_token, a_log.read_text()[-3000:]  # B's commit, not A's
    assert deductions(app) == 2  # one per (order, part): no second effect
    # one refusal: its heartbeat's extend was refused, or it found its lease past
    assert refused in ({f"fenced:lease_lost:{STOCK}": 1}, {f"fenced:lease_expired:{STOCK}": 1})
    assert "commit refused" in a_log.read_text()


def test_a_token_the_database_has_seen_raises_the_queue_floor(env, app, make_draft, tmp_path):
    """Redis lost its fencing counter (an AOF rollback, a restore): the step row has seen a
    token above every number the queue hands out now. The first attempt is fenced out;
    the refusal raises the queue's fencing floor past the row's token, so the retry's
    token is above it and the step commits. Without the floor every retry is fenced out
    again until the job is dead-lettered."""
    seen = 4 * 10**15  # above queue-ms * 1000 until the 2090s; the floor takes up to 2**52
    [workflow_id] = place_and_publish(app, make_draft, 1)
    with UnitOfWork(app.session_factory) as uow:
        [row] = uow.session.scalars(
            select(WorkflowStep).where(
                WorkflowStep.workflow_id == workflow_id, WorkflowStep.step == STOCK
            )
        )
        row.fencing_token = seen
        uow.commit()
    log = tmp_path / "worker.log"
    proc = start_worker(env, log, ["stock", *WORKER])
    try:
        wait_until(
            lambda: stock_rows(app, [workflow_id])[0].status == StepStatus.DONE,
            timeout=30,
            what="the stock step to commit",
        )
    finally:
        stop(proc)
    [row] = stock_rows(app, [workflow_id])
    assert row.fencing_token > seen, log.read_text()[-3000:]
    assert deductions(app) == 1
    counted = Counters(app.redis, app.settings.queue_prefix).read()
    assert counted.get(f"fenced:fenced_out:{STOCK}") == 1, counted
