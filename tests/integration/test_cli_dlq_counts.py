"""``orders dlq list`` says when it shows fewer than are held; ``dlq redrive`` counts
a job named twice once."""

from __future__ import annotations

import json

import pytest
from cli_processes import app_for
from test_cli_bad_input import run

from orders.domain.steps import POINTS


@pytest.fixture
def four_dead(cli_env: dict[str, str], key_prefix: str, database_url: str) -> dict[str, str]:
    """Four dead letters on the points queue (no orders behind them); the CLI env."""
    env = dict(
        cli_env, ORDERS_QUEUE_PREFIX=key_prefix, ORDERS_DATABASE_URL=database_url, COLUMNS="200"
    )
    app = app_for(env, migrate=True)
    try:
        points = app.queues[POINTS]
        for n in range(4):
            points.enqueue("orders.points", {"order_id": 1000 + n})
        for job in points.fetch(4).jobs:
            assert points.dead(job.lease, "error", error="PermanentError: boom")
    finally:
        app.close()
    return env


def test_a_limited_list_says_how_many_are_held(four_dead: dict[str, str]) -> None:
    listed = run(four_dead, "dlq", "list", "--limit", "2")
    assert listed.returncode == 0, listed.stderr
    assert "dead letters (2 shown of 4)" in listed.stdout
    whole = run(four_dead, "dlq", "list")
    assert "dead letters (4)" in whole.stdout


def test_a_job_named_twice_is_redriven_once_and_not_skipped(four_dead: dict[str, str]) -> None:
    listed = run(four_dead, "dlq", "list", "--json")
    job_id = json.loads(listed.stdout)[0]["job_id"]
    done = run(four_dead, "dlq", "redrive", job_id, job_id[:-2], job_id, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["redriven"] == [job_id]
    assert report["skipped"] == []
