"""A stalled run says what is wrong: lost queue jobs, refused outbox rows."""

from __future__ import annotations

import random

from sqlalchemy import update

from orders.app.bootstrap import build
from orders.app.placement import place
from orders.app.settings import Settings
from orders.demo.driver import observe
from orders.demo.stall import diagnose
from orders.sources.drafts import RANDOM
from workflows.models import WorkflowStep


def test_a_stall_with_lost_jobs_and_a_refused_row_is_diagnosed(
    engine, session_factory, catalog, database_url, redis_client, key_prefix, tmp_path
):
    app = build(
        Settings(database_url=database_url, queue_prefix=key_prefix),
        redis_override=redis_client,
        engine_override=engine,
    )
    placed = place(session_factory, 3, source=RANDOM, rng=random.Random(8), publisher=app.publisher)
    with session_factory() as session:  # one row the queue would refuse
        session.execute(
            update(WorkflowStep)
            .where(WorkflowStep.id == placed.orders[0].step_ids[0])
            .values(status="pending", publish_attempts=2, publish_error="ValueError: bad\x1b[2J")
        )
        session.commit()
    for queue in app.queues.values():  # Redis lost every job
        redis_client.delete(queue.keys.key("ready"), queue.keys.key("waiting"))
    progress = observe(app, placed.order_ids[0], 3, 0.0)
    log = tmp_path / "worker-stock.log"
    log.write_text("starting\nerror: Redis namespace 'x' belongs to database 1234\n")

    lines = diagnose(
        app,
        stall_seconds=30,
        steps=progress.steps,
        queues=progress.queues,
        duplicates=0,
        worker_restarts=2,
        worker_logs=[log],
    )
    assert lines[0] == "no step finished for 30 s with work pending"
    text = "\n".join(lines)
    assert "worker processes keep exiting (2 restart(s)): error: Redis namespace" in text
    assert "1 outbox row(s) refused by the queue" in text and "\x1b" not in text
    # stock runs first (ADR 0011): 3 stock steps were published, one set back to pending
    assert "2 step(s) dispatched but no queue holds a job" in text
