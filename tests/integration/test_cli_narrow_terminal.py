"""On a narrow terminal job ids are never cut: a cut id can be an ambiguous prefix.

Tables give way by dropping less important columns (times, attempts) first.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from cli_processes import app_for, orders_command

from orders.app.pacing import place_paced
from orders.cli.render import SHORT_ID
from orders.domain.queries import order_status
from orders.domain.steps import STOCK
from orders.sources.tpch import load_tpch
from workflows.uow import UnitOfWork

WIDTH = 60


def run(env: dict[str, str], *args: str) -> str:
    proc = subprocess.run(
        [*orders_command(), *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.fixture
def env(cli_env: dict[str, str], key_prefix: str) -> dict[str, str]:
    return dict(cli_env, ORDERS_QUEUE_PREFIX=key_prefix, COLUMNS=str(WIDTH))


def one_queued_order(env: dict[str, str]) -> tuple[int, str]:
    """One order placed in the configured (empty) database: its stock job queued, no
    worker running it, the other steps waiting. Returns (order id, stock job id)."""
    app = app_for(env, migrate=True)
    try:
        load_tpch(app.session_factory, Path(env["ORDERS_DATA_DIR"]), scale=0.001)
        [order_id] = place_paced(app, 1, source="random").order_ids
        with UnitOfWork(app.session_factory) as uow:
            workflow_id = order_status(uow.session, order_id).workflow_id
        job_id = app.queues[STOCK].pending_job_for(f"{workflow_id}:{STOCK}")
    finally:
        app.close()
    assert job_id
    return order_id, job_id


def test_order_status_keeps_the_job_id_whole_at_60_columns(env: dict[str, str]) -> None:
    order_id, job_id = one_queued_order(env)

    text = run(env, "status", str(order_id))

    assert job_id[:SHORT_ID] in text, text
    assert "notification" in text and "waiting" in text
    # the caption explains "att" only where the column is shown
    header = next(line for line in text.splitlines() if "step" in line and "state" in line)
    assert ("att" in header.split()) == ("att = attempts" in text), text


def test_dead_letter_list_and_watch_keep_job_ids_whole_at_60_columns(
    env: dict[str, str],
) -> None:
    app = app_for(env, migrate=True)
    try:
        # the longest queue name and reason: the columns cannot all fit 60 columns
        queue = app.queues["cancel_shipment"]
        job_id = queue.enqueue("orders.cancel_shipment", {"order_id": 7})
        lease = queue.fetch(1).jobs[0].lease
        assert queue.dead(lease, "retries_exhausted", error="boom " * 30)
    finally:
        app.close()

    listed = run(env, "dlq", "list")
    watched = run(env, "watch", "--once", "--interval", "0.2")

    assert job_id[:SHORT_ID] in listed, listed
    assert job_id[:SHORT_ID] in watched, watched


def test_order_status_json_gives_the_job_id_the_table_shows(env: dict[str, str]) -> None:
    # a step not run yet has no job id recorded in the database; the table finds its
    # queued job in Redis, and the JSON must say the same
    order_id, job_id = one_queued_order(env)

    shown = json.loads(run(env, "status", str(order_id), "--json"))

    [stock] = [s for s in shown["steps"] if s["step"] == STOCK]
    assert stock["job_id"] == job_id
