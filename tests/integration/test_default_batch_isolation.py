"""At `orders worker`'s default batch size a fetched batch of a step is one handler
call and one transaction; a job that fails or hangs must neither sink nor charge its
batch-mates. (A job that kills its process: the poison-job crash test in
queue/tests/crash leases all its jobs in one batch, as the default does.)"""

from __future__ import annotations

import random
import time

from publishing import publish_now
from sqlalchemy import func, select

from orders.app.bootstrap import App, build
from orders.app.placement import place_orders
from orders.app.settings import Settings
from orders.domain.models import StockDeduction
from orders.domain.steps import STOCK, task_name
from orders.worker import defaults
from orders.worker.counters import Counters
from orders.worker.faults import FaultConfig, FaultStore
from orders.worker.runner import build_worker
from reliable_queue import stats
from workflows.models import StepStatus, WorkflowStep
from workflows.uow import UnitOfWork

BATCH = defaults.BATCH_SIZE
HANG_SEED = 11  # with hang_rate 0.001: the 17th run of the first batch hangs, no later one


def place_stock_steps(app: App, make_draft, n: int) -> list[int]:
    """Place ``n`` one-line orders and publish their stock steps; return the step ids."""
    with UnitOfWork(app.session_factory) as uow:
        placed = place_orders(uow.session, [make_draft(lines=[(10, 1, "AIR")]) for _ in range(n)])
        uow.commit()
    step_ids = [order.step_ids[0] for order in placed]
    assert publish_now(app.session_factory, app.publisher, step_ids) == n
    return step_ids


def drain(app: App, worker, *, timeout: float = 60.0) -> None:
    """Run ``worker`` until the stock queue has nothing ready, delayed or active."""
    queue = app.queue(STOCK)
    worker.start()
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = stats(queue)
            if s.ready == s.active == s.delayed == 0:
                return
            time.sleep(0.05)
        raise AssertionError(f"stock queue not drained in {timeout} s: {stats(queue)}")
    finally:
        worker.request_stop()
        worker.join(15)


def statuses(app: App, step_ids: list[int]) -> list[StepStatus]:
    with app.session_factory() as session:
        return list(
            session.scalars(select(WorkflowStep.status).where(WorkflowStep.id.in_(step_ids)))
        )


def test_a_permanently_failing_job_sinks_none_of_its_default_batch(
    database_url, session_factory, catalog, make_draft, redis_client, key_prefix
):
    app = build(
        Settings(database_url=database_url, queue_prefix=key_prefix), redis_override=redis_client
    )
    try:
        step_ids = place_stock_steps(app, make_draft, BATCH - 1)
        queue = app.queue(STOCK)
        # a delivery naming a workflow that does not exist: its handler raises PermanentError
        bad = queue.enqueue(task_name(STOCK), {"workflow_id": 10**9, "order_id": 1, "step": STOCK})
        assert stats(queue).ready == BATCH  # one lane, one fetch: all of it in one batch
        drain(app, build_worker(app, [STOCK]))

        s = stats(queue)
        letter = queue.dead_letters.show(bad)
        done = statuses(app, step_ids)
        applied = Counters(app.redis, key_prefix).read().get(f"applied:{STOCK}")
    finally:
        app.close()

    assert (s.dead, s.counters.get("retried", 0)) == (1, 0)  # no batch-mate charged a retry
    assert (letter.reason, letter.attempts) == ("error", 1)
    assert "StepNotFound" in letter.error
    assert done.count(StepStatus.DONE) == BATCH - 1  # its batch-mates committed
    assert applied == BATCH - 1


def test_a_job_hung_past_its_time_limit_charges_none_of_its_default_batch(
    database_url, session_factory, catalog, make_draft, redis_client, key_prefix
):
    settings = Settings(
        database_url=database_url,
        queue_prefix=key_prefix,
        step_time_limit_seconds=1.0,
        lease_seconds=1.5,  # heartbeat (and the time-limit check) every 0.5 s
    )
    app = build(settings, redis_override=redis_client)
    try:
        step_ids = place_stock_steps(app, make_draft, BATCH)
        queue = app.queue(STOCK)
        assert stats(queue).ready == BATCH
        FaultStore(app.redis, key_prefix).set(STOCK, FaultConfig(hang_rate=0.001, hang_ms=3000))
        worker = build_worker(app, [STOCK], fault_rng=random.Random(HANG_SEED))
        drain(app, worker)
        time.sleep(3)  # the hung run wakes up, commits late, is absorbed and ignored

        s = stats(queue)
        counted = Counters(app.redis, key_prefix).read()
        done = statuses(app, step_ids)
        with app.session_factory() as session:
            deductions = session.scalar(select(func.count()).select_from(StockDeduction))
    finally:
        app.close()

    assert counted.get(f"injected:hang:{STOCK}") == 1  # one run hung, in the first batch
    assert (s.dead, s.counters.get("retried", 0)) == (0, 0)  # nobody was charged for it
    assert done.count(StepStatus.DONE) == BATCH
    assert deductions == BATCH  # each order's stock taken once
    assert s.counters.get("timed_out") == 1  # the batch's shared call timed out once
    assert worker.counters.counts["timeout_splits"] == 1  # and the batch was split
