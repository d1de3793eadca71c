"""A fetched batch of step jobs runs through the worker's middleware job by job:
no per-job metric and no injected fault is lost at batch sizes above 1."""

from __future__ import annotations

import random
import time

from prometheus_client import Histogram
from publishing import publish_now
from sqlalchemy import select

from orders.app.bootstrap import build
from orders.app.placement import place_orders
from orders.app.settings import Settings
from orders.domain.steps import STOCK
from orders.observability.worker_metrics import WorkerMetrics
from orders.observability.worker_setup import WorkerObservability
from orders.worker.counters import Counters
from orders.worker.faults import FaultConfig, FaultStore
from orders.worker.runner import build_worker
from reliable_queue import stats
from workflows.models import StepStatus, WorkflowStep
from workflows.uow import UnitOfWork

BATCH = 10


def observed(histogram: Histogram) -> float:
    """The ``_count`` of a histogram's stock series."""
    for metric in histogram.collect():
        for sample in metric.samples:
            if sample.name.endswith("_count") and sample.labels.get("queue") == STOCK:
                return sample.value
    return 0.0


def test_a_batch_of_ten_counts_every_job_and_faults_hit_single_jobs(
    database_url, session_factory, catalog, make_draft, redis_client, key_prefix
):
    app = build(
        Settings(database_url=database_url, queue_prefix=key_prefix), redis_override=redis_client
    )
    try:
        with UnitOfWork(app.session_factory) as uow:
            placed = place_orders(uow.session, [make_draft() for _ in range(BATCH)])
            uow.commit()
        stock_ids = [order.step_ids[0] for order in placed]
        assert publish_now(app.session_factory, app.publisher, stock_ids) == BATCH
        FaultStore(app.redis, key_prefix).set(STOCK, FaultConfig(fail_rate=0.5, permanent=True))
        metrics = WorkerMetrics()
        worker = build_worker(
            app,
            [STOCK],
            batch_size=BATCH,
            observability=WorkerObservability(metrics),
            fault_rng=random.Random(7),
        )
        queue = app.queue(STOCK)
        worker.start()
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                depth = stats(queue)
                if depth.ready == depth.active == 0:
                    break
                time.sleep(0.05)
        finally:
            worker.request_stop()
            worker.join(10)

        counted = Counters(app.redis, key_prefix).read()
        failed = counted.get(f"injected:fail:{STOCK}", 0)
        dead = stats(queue).dead
        with app.session_factory() as session:
            statuses = session.scalars(
                select(WorkflowStep.status).where(WorkflowStep.id.in_(stock_ids))
            ).all()
    finally:
        app.close()

    assert 0 < failed < BATCH  # the seeded dice fail some jobs of the batch, not all
    assert dead == failed  # each failed job alone went to the DLQ (permanent)
    assert statuses.count(StepStatus.DONE) == BATCH - failed  # its batch-mates committed
    assert counted.get(f"applied:{STOCK}") == BATCH - failed  # counted once per batch
    assert observed(metrics.handler_seconds) == BATCH
    assert observed(metrics.start_latency) == BATCH
