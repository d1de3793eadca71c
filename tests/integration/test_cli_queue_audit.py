"""``orders queue audit``: finds an orphan, exits 1; ``--repair`` puts it back; status shows it."""

from __future__ import annotations

import json

import redis as redis_lib
from typer.testing import CliRunner, Result

from orders.cli.main import app
from reliable_queue import Queue, audit


def orders(env: dict[str, str], *args: str) -> Result:
    """The CLI in this process (faster than a subprocess once the services run)."""
    return CliRunner().invoke(app, list(args), env=env)


def test_audit_finds_an_orphan_and_repair_puts_it_back(
    cli_env: dict[str, str], key_prefix: str, redis_url: str
) -> None:
    # the tests' Redis, this test's key prefix: no embedded server to start
    url = cli_env.get("ORDERS_REDIS_URL") or redis_url
    env = dict(cli_env, ORDERS_QUEUE_PREFIX=key_prefix, ORDERS_REDIS_URL=url)
    upgraded = orders(env, "db", "upgrade")
    assert upgraded.exit_code == 0, upgraded.output

    with redis_lib.Redis.from_url(url) as client:
        queue = Queue(client, "points", prefix=key_prefix)
        job_id = queue.enqueue("orders.points", {"order_id": 1})
        client.delete(queue.keys.key("ready"))  # the record stays: an orphan
        audit(queue)  # what a worker's timer does: the finding is stored for the views

        status = orders(env, "status")
        assert status.exit_code == 0, status.output
        assert "1 orphan(s)" in status.stdout

        found = orders(env, "queue", "audit", "--step", "points", "--json")
        assert found.exit_code == 1
        assert json.loads(found.stdout)[0]["examples"]["orphans"] == [job_id]

        repaired = orders(env, "queue", "audit", "--repair", "--json")
        assert repaired.exit_code == 0, repaired.output
        reports = {r["queue"]: r for r in json.loads(repaired.stdout)}
        assert (reports["points"]["orphans"], reports["points"]["repaired"]) == (1, 1)
        assert all(r["orphans"] == 0 for q, r in reports.items() if q != "points")
        assert queue.locate(job_id) == "ready"
        assert "orphan" not in orders(env, "status").stdout
