"""A known Redis password appears nowhere: not in any command's output, not in the
worker's or the dashboard's logs, not on a page, not in /metrics, not in an error."""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_processes import free_port, start_orders, stop, wait_for_http, wait_until
from typer.testing import CliRunner

from orders.cli.main import app as cli
from reliable_queue.embedded import EmbeddedRedis

# What this checks does not depend on the database: the PostgreSQL pass skips it.
pytestmark = pytest.mark.no_database

PAGES = ["/", "/partials/overview", "/queues/stock", "/orders", "/orders/1", "/dlq", "/metrics",
         "/healthz", "/livez", "/readyz", "/login", "/queues/stock/jobs/nosuchjob",
         "/nosuchpage"]  # fmt: skip


@pytest.fixture
def redis_with_password(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(tmp_path / "redis", tcp=True)
    server.ensure_running()
    yield server
    server.stop()


def run(args: list[str], env: dict[str, str]) -> str:
    """Run a command in this process (a subprocess costs seconds of imports each)."""
    result = CliRunner().invoke(cli, args, env=env)
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return f"$ orders {' '.join(args)} -> {result.exit_code}\n{result.output}"


def fetch(url: str) -> str:
    request = urllib.request.Request(url, headers={"Authorization": "Bearer " + "w" * 20})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:  # noqa: S310 - loopback
            return reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.read().decode()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_known_redis_password_is_never_shown(
    redis_with_password: EmbeddedRedis, tmp_path: Path
) -> None:
    secret = redis_with_password.password
    assert secret and len(secret) >= 20
    port = redis_with_password.port_file.read_text().strip()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORDERS_")}
    env["ORDERS_DATA_DIR"] = str(tmp_path / "data")
    env["ORDERS_REDIS_URL"] = f"redis://127.0.0.1:{port}/0?password={secret}"
    env["ORDERS_WEB_TOKEN"] = "t" * 24
    shown: list[str] = []

    shown.append(run(["load-tpch", "--scale", "0.001"], env))
    shown.append(run(["place", "-n", "3", "--source", "random", "--json"], env))
    shown.append(run(["inject", "logistics", "--fail-rate", "1", "--permanent"], env))
    worker_log = tmp_path / "worker.log"
    worker = start_orders(["worker", "--all", "--log-level", "DEBUG"], env, worker_log)
    try:
        # the injected permanent failure dead-letters the logistics jobs
        wait_until(lambda: run(["dlq", "list", "--json"], env).endswith("]\n") and
                   "job_id" in run(["dlq", "list", "--json"], env), 90, "dead letters")  # fmt: skip
    finally:
        stop(worker)
    shown.append(worker_log.read_text())
    shown.append(run(["inject", "--clear"], env))
    listing = run(["dlq", "list", "--json"], env)
    shown.append(listing)
    dead = json.loads(listing.split("\n", 1)[1])
    for args in (
        ["status"], ["status", "--json"], ["status", "1"], ["dlq", "list"], ["watch", "--once"],
        ["services", "status"], ["services", "status", "--json"], ["services", "start"],
        ["db", "upgrade"], ["explain", "nosuchjob"],
        *(
            [["dlq", "show", d["job_id"]], ["explain", d["job_id"]]]
            for d in dead[:1]
        ),
    ):  # fmt: skip
        if args and isinstance(args[0], list):
            shown.extend(run(a, env) for a in args)
        else:
            shown.append(run(args, env))

    web_port = free_port()
    web_log = tmp_path / "web.log"
    web = start_orders(["web", "--port", str(web_port), "--log-level", "DEBUG"], env, web_log)
    try:
        base = f"http://127.0.0.1:{web_port}"
        wait_for_http(base + "/healthz", web, web_log)
        for path in PAGES + [f"/dlq/{d['queue']}/{d['job_id']}" for d in dead[:1]]:
            shown.append(fetch(base + path))
    finally:
        stop(web)
    shown.append(web_log.read_text())

    # errors that name the URL: a closed port, a wrong password
    for bad in (
        f"redis://:{secret}@127.0.0.1:1/0",
        f"redis://:{secret[:5]}/{secret[5:]}@127.0.0.1:{port}/0",
        f"redis://127.0.0.1:{port}/0?password=x{secret}",
        f"redis://:{secret}@127.0.0.1:notaport/0",
    ):
        shown.append(run(["dlq", "list"], {**env, "ORDERS_REDIS_URL": bad}))
        shown.append(run(["services", "status"], {**env, "ORDERS_REDIS_URL": bad}))

    everything = "\n".join(shown)
    assert "orders.stock" in everything or "stock" in everything  # the commands did run
    for fragment in (secret, secret[5:]):
        assert fragment not in everything, everything[everything.find(fragment) - 300 :][:600]
