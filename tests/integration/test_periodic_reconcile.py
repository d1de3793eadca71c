"""The workers' sweep reconciles with the dead-letter queues on its own.

A job the reaper dead-letters (its worker was lost every time) reaches the
DLQ inside Redis, where no worker tells the database. Every view (watch, web,
metrics) reads ``order_counts`` from the database; the sweep must bring the
database in line without anyone running ``orders status``.
"""

from __future__ import annotations

import random
import threading
import time

from orders.app.bootstrap import build
from orders.app.placement import place
from orders.app.settings import Settings
from orders.observability.order_counts import order_counts
from orders.sources.drafts import RANDOM
from orders.worker.relay_loop import SweepLoop


def test_the_sweep_marks_a_reaper_dead_letter_blocked_without_orders_status(
    engine, session_factory, catalog, database_url, redis_client, key_prefix
):
    settings = Settings(
        database_url=database_url,
        queue_prefix=key_prefix,
        relay_sweep_interval_seconds=0.1,
        relay_reconcile_interval_seconds=0.3,
    )
    app = build(settings, redis_override=redis_client, engine_override=engine)
    place(session_factory, 2, source=RANDOM, rng=random.Random(4), publisher=app.publisher)
    stock = app.queues["stock"]
    fetched = stock.fetch(1, lease_seconds=30, worker_id="lost")
    assert stock.dead(fetched.jobs[0].lease, "worker_lost", error="lost 5 times")
    with session_factory() as session:
        assert order_counts(session).blocked == 0

    stop = threading.Event()
    loop = SweepLoop(app, stop, use_lock=False)
    loop.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with session_factory() as session:
                counts = order_counts(session)
            if counts.blocked:
                break
            time.sleep(0.1)
    finally:
        stop.set()
        loop.join(timeout=10)
    assert (counts.blocked, counts.in_progress) == (1, 1)
    assert loop.totals["reconciled"] == 1
