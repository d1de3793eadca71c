"""No lock outlives its lease: a worker frozen (SIGSTOP) inside its write transaction
delays the other workers of its step by about one lease, not for as long as it is
frozen. Real `orders worker` processes, real Redis, SQLite (the writers' turn and
SQLite's write lock) or PostgreSQL with TEST_DATABASE_URL (inventory row locks held by
an idle-in-transaction session)."""

from __future__ import annotations

import os
import signal
import time

import pytest
from cli_processes import start_orders, stop, wait_until
from publishing import publish_now
from sqlalchemy import func, select

from orders.app.bootstrap import build
from orders.app.placement import place_orders
from orders.app.settings import Settings
from orders.domain.models import Inventory, StockDeduction
from orders.domain.steps import STOCK
from orders.worker.faults import FaultConfig, FaultStore
from workflows.models import StepStatus, WorkflowStep
from workflows.uow import UnitOfWork

LEASE = 3.0
HANG_MS = 40_000  # far longer than the test: only the lease may end the freeze's hold


def stock_done(app, workflow_ids: list[int]) -> int:
    with app.session_factory() as session:
        return session.scalar(
            select(func.count()).where(
                WorkflowStep.workflow_id.in_(workflow_ids),
                WorkflowStep.step == STOCK,
                WorkflowStep.status == StepStatus.DONE,
            )
        )


def place(app, make_draft, n: int) -> list[int]:
    """``n`` orders of one unit of part 10 each (they all change one inventory row)."""
    with UnitOfWork(app.session_factory) as uow:
        placed = place_orders(uow.session, [make_draft(lines=[(10, 1, "AIR")]) for _ in range(n)])
        uow.commit()
    assert publish_now(app.session_factory, app.publisher, [p.step_ids[0] for p in placed]) == n
    return [p.workflow_id for p in placed]


@pytest.mark.chaos  # SIGSTOPs and kills real workers
@pytest.mark.slow
def test_a_worker_frozen_inside_its_write_transaction_holds_the_others_up_one_lease_at_most(
    cli_env,
    database_url,
    redis_url,
    redis_client,
    key_prefix,
    session_factory,
    catalog,
    make_draft,
    tmp_path,
):
    env = dict(
        cli_env,
        ORDERS_DATABASE_URL=database_url,
        ORDERS_REDIS_URL=redis_url,
        ORDERS_QUEUE_PREFIX=key_prefix,
        ORDERS_LEASE_SECONDS=str(LEASE),
    )
    app = build(
        Settings(database_url=database_url, queue_prefix=key_prefix), redis_override=redis_client
    )
    args = ["worker", "stock", "--no-sweep", "--no-metrics", "--batch-size", "1", "--grace", "1"]
    logs = [tmp_path / "worker-0.log", tmp_path / "worker-1.log"]
    procs = [start_orders(args, env, log) for log in logs]
    frozen = None
    try:
        for log in logs:
            wait_until(lambda log=log: "serving" in log.read_text(), 60, "the workers to serve")
        faults = FaultStore(app.redis, key_prefix)
        faults.set(STOCK, FaultConfig(hang_in_tx_ms=HANG_MS))
        time.sleep(1.2)  # both workers have read the fault config
        [victim] = place(app, make_draft, 1)
        wait_until(lambda: faults.hung_in_tx(STOCK), 20, "a unit of work to hang before commit")
        time.sleep(0.2)  # it is in its hang, its locks held
        pid = faults.hung_in_tx(STOCK)
        frozen = next(p for p in procs if p.pid == pid)
        os.kill(pid, signal.SIGSTOP)  # a GC pause, a VM stall, a debugger
        stopped_at = time.monotonic()
        others = place(app, make_draft, 5)

        wait_until(lambda: stock_done(app, others) == 5, 4 * LEASE, "the others' stock steps")
        waited = time.monotonic() - stopped_at
        # the frozen worker's job was reaped when its lease expired and ran elsewhere
        wait_until(lambda: stock_done(app, [victim]) == 1, 4 * LEASE, "the frozen job, redone")
        frozen_exit = frozen.poll()
    finally:
        for proc in procs:
            if proc is frozen and proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)  # still frozen (PostgreSQL) or hung
                proc.wait(10)
            else:
                stop(proc)
        app.close()

    # SQLite: the writers' turn is taken from its holder at its lease plus a margin (1 s);
    # PostgreSQL: the server ends the idle-in-transaction session after one lease
    assert waited < 2.5 * LEASE, f"the others waited {waited:.1f} s behind a frozen worker"
    with session_factory() as session:
        deducted = session.scalar(select(func.count()).select_from(StockDeduction))
        on_hand = session.scalar(select(Inventory.on_hand).where(Inventory.part_id == 10))
    assert deducted == 6 and on_hand == catalog[10] - 6  # each order's unit taken once
    if session_factory.kw["bind"].dialect.name == "sqlite":
        assert frozen_exit == -signal.SIGKILL  # a waiter took its turn: it is gone
    else:
        assert frozen_exit is None  # still frozen: the server ended its session


def test_only_a_worker_binds_its_postgresql_sessions_to_its_lease(database_url, engine):
    if engine.dialect.name != "postgresql":
        pytest.skip("a PostgreSQL setting (SQLite: the writers' turn, tests above and beside)")
    from sqlalchemy import text

    from orders.app.db import make_engine

    worker = make_engine(database_url, statement_timeout_ms=60_000, lease_seconds=LEASE)
    try:
        with worker.connect() as conn:
            shown = [
                conn.execute(text(f"SHOW {name}")).scalar()
                for name in ("idle_in_transaction_session_timeout", "statement_timeout")
            ]
        with engine.connect() as conn:  # a command's engine: the server's setting
            command = conn.execute(text("SHOW idle_in_transaction_session_timeout")).scalar()
    finally:
        worker.dispose()
    assert shown == ["3s", "1min"]
    assert command == "0"
