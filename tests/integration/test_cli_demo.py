"""End to end: the real `orders` console script runs the demo on a fresh data dir."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from orders.app.db import make_engine


def orders_command() -> list[str]:
    """The installed console script, or the module when PATH lacks it."""
    script = Path(sys.executable).with_name("orders")
    return [str(script)] if script.exists() else [sys.executable, "-m", "orders.cli.main"]


@pytest.mark.timeout(300)
def test_demo_runs_200_orders_end_to_end_and_every_invariant_holds(
    cli_env: dict[str, str], tmp_path: Path, key_prefix: str
) -> None:
    env = dict(cli_env, ORDERS_QUEUE_PREFIX=key_prefix)
    proc = subprocess.run(
        [*orders_command(), "demo", "--orders", "200", "--json", "--timeout", "240"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=290,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout[proc.stdout.index("{") :])
    assert report["ok"] is True
    assert report["quiescent"] is True
    assert report["violations"] == []
    assert report["orders_placed"] == 200
    # every order is accounted for: completed, out of stock, cancelled, or blocked with a reason
    settled = report["completed"] + report["out_of_stock"] + report["cancelled"]
    assert settled + report["blocked"] == 200
    # a few orders are cancelled in flight (--cancel, 10 by default) and compensated:
    # the demo cancels once stock steps are done, so there is something to undo
    assert 0 < report["cancelled"] <= 10
    url = env.get("ORDERS_DATABASE_URL") or f"sqlite:///{Path(env['ORDERS_DATA_DIR'])}/orders.db"
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            undone = conn.execute(
                text(
                    "SELECT count(*) FROM workflow_steps"
                    " WHERE compensates IS NOT NULL AND status = 'done'"
                )
            ).scalar_one()
    finally:
        engine.dispose()
    assert undone > 0
    # about 5% of the TPC-H orders are made to run out of stock (--out-of-stock-share)
    assert 5 <= report["out_of_stock"] <= 25
    assert sum(report["blocked_reasons"].values()) == report["blocked"]
    # the injected transient failures really happened and were retried
    assert report["retries_per_step"]["notification"] > 0
    assert report["retries_per_step"]["points"] > 0
    assert report["retries_per_step"]["stock"] == 0
    # the worker logs stay under the data dir, not in the system temp dir
    logs = list((Path(env["ORDERS_DATA_DIR"]) / "logs").glob("demo-*/worker-*.log"))
    assert len(logs) == 5, logs  # one per step, one for the compensating steps


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_demo_via_the_api_places_each_order_once_and_every_invariant_holds(
    cli_env: dict[str, str], tmp_path: Path, key_prefix: str
) -> None:
    env = dict(cli_env, ORDERS_QUEUE_PREFIX=key_prefix)
    proc = subprocess.run(
        [*orders_command(), "demo", "--orders", "60", "--via-api", "--cancel", "3", "--json"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=290,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout[proc.stdout.index("{") :])
    assert report["ok"] is True and report["violations"] == []
    assert report["orders_placed"] == 60  # one in ten posted twice: still 60 orders
    url = env.get("ORDERS_DATABASE_URL") or f"sqlite:///{Path(env['ORDERS_DATA_DIR'])}/orders.db"
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            counts = conn.execute(
                text("SELECT count(*), count(DISTINCT idempotency_key) FROM api_orders")
            ).one()
    finally:
        engine.dispose()
    assert tuple(counts) == (60, 60)


def test_orders_help_lists_every_command(cli_env: dict[str, str]) -> None:
    proc = subprocess.run(
        [*orders_command(), "--help"], env=cli_env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    for command in (
        "demo",
        "load-tpch",
        "place",
        "cancel",
        "worker",
        "status",
        "inject",
        "dlq",
        "services",
        "db",
    ):
        assert command in proc.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["worker", "shipping"], "unknown step"),
        (["worker"], "at least one step"),
        (["inject", "points", "--fail-rate", "2"], "fail-rate"),
        (["inject"], "name a step"),
        (["dlq", "list", "--reason", "bogus"], "unknown reason"),
        (["place", "--source", "nowhere"], "tpch or random"),
    ],
)
def test_bad_arguments_exit_nonzero_with_a_clear_message(
    cli_env: dict[str, str], args: list[str], message: str
) -> None:
    proc = subprocess.run(
        [*orders_command(), *args], env=cli_env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0
    assert message in (proc.stdout + proc.stderr)


def test_a_configured_database_without_migrations_is_refused_with_the_fix(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    env = dict(cli_env, ORDERS_DATABASE_URL=f"sqlite:///{tmp_path / 'unmigrated.db'}")
    proc = subprocess.run(
        [*orders_command(), "status"], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 1
    assert "orders db upgrade" in proc.stderr
    upgrade = subprocess.run(
        [*orders_command(), "db", "upgrade"], env=env, capture_output=True, text=True, timeout=60
    )
    assert upgrade.returncode == 0, upgrade.stderr
    again = subprocess.run(
        [*orders_command(), "status", "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["orders"]["orders"] == 0


def test_explain_shows_a_job_and_refuses_an_unknown_id(
    cli_env: dict[str, str], key_prefix: str, redis_url: str
) -> None:
    import redis as redis_lib

    from reliable_queue import Queue

    env = dict(cli_env, ORDERS_QUEUE_PREFIX=key_prefix)
    upgraded = subprocess.run(  # a configured database starts empty
        [*orders_command(), "db", "upgrade"], env=env, capture_output=True, text=True, timeout=120
    )
    assert upgraded.returncode == 0, upgraded.stderr
    proc = subprocess.run(
        [*orders_command(), "services", "start"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    status = subprocess.run(
        [*orders_command(), "services", "status", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    url = env.get("ORDERS_REDIS_URL") or json.loads(status.stdout)["embedded_url"]
    with redis_lib.Redis.from_url(url) as client:
        job_id = Queue(client, "points", prefix=key_prefix).enqueue(
            "orders.points", {"workflow_id": 1, "order_id": 1, "step": "points"}, delay=60
        )
    shown = subprocess.run(
        [*orders_command(), "explain", job_id, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    info = json.loads(shown.stdout)
    assert (info["state"], info["queue"], info["task"]) == ("delayed", "points", "orders.points")
    missing = subprocess.run(
        [*orders_command(), "explain", "nosuchjob"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 1 and "no job" in missing.stderr, missing.stderr


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_second_demo_or_chaos_run_in_a_busy_data_dir_is_refused_at_once(
    cli_env: dict[str, str], tmp_path: Path, key_prefix: str
) -> None:
    """Regression: two `orders demo` runs at once in one data dir both exited 0, and the
    first reported more orders completed (424-440) than it had placed (300)."""
    from cli_processes import start_orders, stop, wait_until

    env = dict(cli_env, ORDERS_QUEUE_PREFIX=key_prefix)
    log = tmp_path / "first.log"
    args = ["demo", "--orders", "60", "--rate", "20", "--cancel", "0", "--json"]
    first = start_orders(args, env, log)
    try:
        logs = Path(env["ORDERS_DATA_DIR"]) / "logs"
        wait_until(lambda: any(logs.glob("demo-*/worker-*.log")), 120, "the first demo's workers")
        for second in (
            ["demo", "--orders", "60", "--json"],
            ["chaos", "--data-dir", env["ORDERS_DATA_DIR"]],
        ):
            proc = subprocess.run(
                [*orders_command(), *second],
                env=env,
                capture_output=True,
                text=True,
                # the refusal comes before any work, but the interpreter's start-up
                # competes with the first demo's workers on a loaded machine
                timeout=120,
            )
            assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
            message = " ".join(proc.stderr.split())
            assert f"another `orders demo` (pid {first.pid}) is running in data dir" in message
            assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
        assert first.wait(240) == 0, log.read_text()[-3000:]
    finally:
        stop(first)
    text = log.read_text()
    report = json.loads(text[text.index("{") :])
    assert report["orders_placed"] == 60
    settled = report["completed"] + report["out_of_stock"] + report["cancelled"]
    assert settled + report["blocked"] == 60  # its own orders, no one else's
