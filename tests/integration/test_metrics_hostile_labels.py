"""Label values that come from Redis or job records are bounded: a foreign producer's
task name or a stray dead-letter reason becomes ``unknown``, never a series of its own
with raw control bytes in it (cardinality and terminal escapes for whoever curls
``/metrics``)."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, generate_latest

from orders.app.bootstrap import build
from orders.app.settings import Settings
from orders.domain.steps import POINTS, task_name
from orders.observability.collectors import QueueCollector
from orders.observability.worker_metrics import WorkerMetrics
from orders.observability.worker_setup import WorkerObservability
from orders.worker.runner import build_worker
from reliable_queue import stats

HOSTILE = "[red]evil[/red]\x1b[31mRED\x07<script>"


def test_a_foreign_task_is_counted_as_unknown_not_as_its_own_series(
    database_url, session_factory, redis_client, key_prefix
):
    app = build(
        Settings(database_url=database_url, queue_prefix=key_prefix), redis_override=redis_client
    )
    try:
        queue = app.queue(POINTS)
        queue.enqueue(HOSTILE, {"order_id": 1})
        metrics = WorkerMetrics()
        worker = build_worker(app, [POINTS], observability=WorkerObservability(metrics))
        worker.start()
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and stats(queue).dead == 0:
                time.sleep(0.05)
        finally:
            worker.request_stop()
            worker.join(10)
        assert stats(queue).dead == 1
    finally:
        app.close()
    labels = [
        sample.labels
        for family in metrics.failed.collect()
        for sample in family.samples
        if sample.name.endswith("_total")
    ]
    assert labels == [{"queue": POINTS, "task": "unknown", "error": "unknown_task"}]


def test_a_dead_letter_reason_written_by_another_producer_is_folded_into_unknown(
    database_url, session_factory, redis_client, key_prefix
):
    app = build(
        Settings(database_url=database_url, queue_prefix=key_prefix), redis_override=redis_client
    )
    try:
        queue = app.queue(POINTS)
        redis_client.hincrby(queue.keys.key("stats"), f"dead:{HOSTILE}", 2)
        redis_client.hincrby(queue.keys.key("stats"), "dead:also\x1b[2Jnew", 3)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(QueueCollector({POINTS: queue}, task_name, ttl=0))
        text = generate_latest(registry).decode()
    finally:
        app.close()
    assert "\x1b" not in text and "evil" not in text and "also" not in text
    assert (
        f'orderflow_jobs_dead_lettered_total{{queue="{POINTS}",reason="unknown",'
        f'task="{task_name(POINTS)}"}} 5.0'
    ) in text
