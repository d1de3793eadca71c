"""Bad input: a clear message and a non-zero exit, never a traceback, nothing written."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis as redis_lib

from reliable_queue import Queue


def orders_command() -> list[str]:
    script = Path(sys.executable).with_name("orders")
    return [str(script)] if script.exists() else [sys.executable, "-m", "orders.cli.main"]


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*orders_command(), *args], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("ORDERS_LEASE_SECONDS", "inf", "ORDERS_LEASE_SECONDS"),
        ("ORDERS_LEASE_SECONDS", "1e308", "ORDERS_LEASE_SECONDS"),
        ("ORDERS_LEASE_SECONDS", "-1", "ORDERS_LEASE_SECONDS"),
        ("ORDERS_REDIS_URL", "nonsense", "not a Redis URL"),
    ],
)
def test_bad_settings_are_refused_with_the_variable_named(
    cli_env: dict[str, str], variable: str, value: str, message: str
) -> None:
    proc = run(dict(cli_env, **{variable: value}), "status")
    assert proc.returncode in (1, 2)
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("prefix", ["a b", "a:b", "{x}", "", "../../escaped", "a/b", ".hidden"])
@pytest.mark.parametrize("command", [("status",), ("place", "--count", "3"), ("worker", "stock")])
def test_a_bad_queue_prefix_is_an_invalid_setting_and_writes_nothing(
    cli_env: dict[str, str], tmp_path: Path, prefix: str, command: tuple[str, ...]
) -> None:
    """Regression: a prefix with a space or colon ended in a traceback (exit 1); with
    a colon ``orders place`` committed orders that no queue could take (exit 0); with
    ``../`` a worker made its metrics folder outside the data dir."""
    (tmp_path / "nested").mkdir()
    data_dir = tmp_path / "nested" / "data"
    env = dict(cli_env, ORDERS_QUEUE_PREFIX=prefix, ORDERS_DATA_DIR=str(data_dir))
    env.pop("ORDERS_DATABASE_URL", None)  # the data dir's own SQLite file, if any were made
    proc = run(env, *command)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "ORDERS_QUEUE_PREFIX" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not data_dir.exists() and list((tmp_path / "nested").iterdir()) == []
    assert not (tmp_path / "escaped").exists()


def test_chaos_with_a_bad_queue_prefix_starts_nothing(cli_env: dict[str, str], tmp_path: Path):
    """Regression: ``orders chaos`` made its temporary folder and started a Redis
    server before it read the settings, then died with a traceback, leaving both."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = dict(cli_env, ORDERS_QUEUE_PREFIX="a:b", TMPDIR=str(scratch))
    proc = run(env, "chaos", "--orders", "5")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "ORDERS_QUEUE_PREFIX" in proc.stderr
    assert list(scratch.iterdir()) == []  # no orders-chaos-* folder, so no Redis in it


def test_place_with_redis_unreachable_writes_no_order(cli_env: dict[str, str]) -> None:
    upgraded = run(dict(cli_env), "db", "upgrade")  # a configured database starts empty
    assert upgraded.returncode == 0, upgraded.stderr
    env = dict(cli_env, ORDERS_REDIS_URL="redis://127.0.0.1:1/0")
    proc = run(env, "place", "--count", "3", "--source", "random")
    assert proc.returncode == 1
    assert "nothing was placed" in proc.stderr
    assert "Traceback" not in proc.stderr
    status = run(dict(cli_env), "status", "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["orders"]["orders"] == 0


@pytest.mark.parametrize("source", ["tpch", "random"])
def test_place_before_load_tpch_says_so_before_drawing_a_bar(
    cli_env: dict[str, str], source: str
) -> None:
    """Regression: an empty progress bar (0/3) was drawn before the error."""
    upgraded = run(dict(cli_env), "db", "upgrade")  # a configured database starts empty
    assert upgraded.returncode == 0, upgraded.stderr
    proc = run(dict(cli_env, COLUMNS="120"), "place", "--count", "3", "--source", source)
    assert proc.returncode == 1
    assert "run `orders load-tpch`" in proc.stderr
    assert "0/3" not in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


def test_dead_letter_text_is_shown_as_stored_not_as_markup(
    cli_env: dict[str, str], key_prefix: str
) -> None:
    env = dict(cli_env, ORDERS_QUEUE_PREFIX=key_prefix)
    # dlq commands bind the Redis namespace to the database's id: a configured
    # database (the PostgreSQL pass) must be migrated first
    upgraded = run(env, "db", "upgrade")
    assert upgraded.returncode == 0, upgraded.stderr
    started = run(env, "services", "status", "--json")
    url = env.get("ORDERS_REDIS_URL") or json.loads(started.stdout)["embedded_url"]
    if not env.get("ORDERS_REDIS_URL"):
        assert run(env, "services", "start").returncode == 0
    with redis_lib.Redis.from_url(url) as client:
        queue = Queue(client, "points", prefix=key_prefix)
        queue.client.hset(queue.keys.key("jobs"), "g1", "garbage[/bold] [red]x{{")
        queue.client.lpush(queue.keys.key("ready"), "g1")
        leased = queue.fetch(1).jobs[0]
        assert queue.dead(leased.lease, "invalid_payload", error="bad [/bold] text [i]")
    shown = run(env, "dlq", "show", "g1")
    assert shown.returncode == 0, shown.stderr
    assert "bad [/bold] text [i]" in shown.stdout.replace("\n", "")
    listed = run(env, "dlq", "list", "--step", "points")
    assert listed.returncode == 0, listed.stderr


def test_redrive_of_an_id_not_in_any_dlq_names_it_and_fails(
    cli_env: dict[str, str], key_prefix: str
) -> None:
    env = dict(cli_env, ORDERS_QUEUE_PREFIX=key_prefix)
    assert run(env, "db", "upgrade").returncode == 0  # a configured database starts empty
    proc = run(env, "dlq", "redrive", "no-such-job")
    assert proc.returncode == 1
    assert "not in any dead-letter queue: no-such-job" in proc.stderr


def test_worker_refuses_steps_and_all_together(cli_env: dict[str, str]) -> None:
    proc = run(cli_env, "worker", "--all", "stock")
    assert proc.returncode == 2 and "not both" in proc.stderr


def test_worker_refuses_an_unknown_isolation(cli_env: dict[str, str]) -> None:
    proc = run(cli_env, "worker", "stock", "--isolation", "fork")
    assert proc.returncode == 2 and "--isolation must be thread or process" in proc.stderr
    proc = run(dict(cli_env, ORDERS_STEP_ISOLATION="fork"), "worker", "stock")
    assert proc.returncode == 2 and "ORDERS_STEP_ISOLATION" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.fixture
def two_dead(cli_env: dict[str, str], key_prefix: str) -> tuple[dict[str, str], str, str]:
    """The CLI's env and two dead letters: one on points, then (later) one on stock."""
    from cli_processes import app_for

    env = dict(cli_env, ORDERS_QUEUE_PREFIX=key_prefix, COLUMNS="200")
    app = app_for(env, migrate=True)  # a configured database starts empty
    try:
        ids = []
        for step in ("points", "stock"):  # stock's queue is listed first, its letter is newer
            queue = app.queues[step]
            job_id = queue.enqueue(f"orders.{step}", {"order_id": 1})
            assert queue.dead(queue.fetch(1).jobs[0].lease, "error", error="boom")
            ids.append(job_id)
            time.sleep(0.01)  # dead times are in milliseconds
    finally:
        app.close()
    return env, ids[0], ids[1]


def still_dead(env: dict[str, str]) -> list[str]:
    listed = run(env, "dlq", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    return sorted(d["job_id"] for d in json.loads(listed.stdout))


@pytest.mark.parametrize(
    "args",
    [["list"], ["redrive"], ["redrive", "--dry-run"], ["purge", "--yes"]],
    ids=["list", "redrive", "dry-run", "purge"],
)
def test_dlq_commands_refuse_an_unknown_task_naming_the_known_ones(
    two_dead: tuple[dict[str, str], str, str], args: list[str]
) -> None:
    env, points_job, stock_job = two_dead
    proc = run(env, "dlq", *args, "--task", "nosuch")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "unknown task 'nosuch'" in proc.stderr
    assert "orders.stock" in proc.stderr and "orders.cancel_shipment" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert still_dead(env) == sorted([points_job, stock_job])
    known = run(env, "dlq", *args, "--task", "orders.points")
    assert known.returncode == 0, known.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["explain", "abc"],
        ["dlq", "show", "abc"],
        ["dlq", "redrive", "abc"],
        ["dlq", "purge", "abc", "--yes"],
    ],
    ids=["explain", "dlq show", "dlq redrive", "dlq purge"],
)
def test_a_too_short_job_id_prefix_is_bad_usage_naming_the_minimum(
    two_dead: tuple[dict[str, str], str, str], args: list[str]
) -> None:
    env, points_job, stock_job = two_dead
    proc = run(env, *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "'abc'" in proc.stderr and "at least 6 characters" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert still_dead(env) == sorted([points_job, stock_job])


def test_dlq_redrive_or_purge_of_ids_with_filters_is_refused(
    two_dead: tuple[dict[str, str], str, str],
) -> None:
    env, points_job, stock_job = two_dead
    for args in (
        ["redrive", points_job, "--reason", "worker_lost"],
        ["purge", stock_job, "--yes", "--task", "orders.points"],
    ):
        proc = run(env, "dlq", *args)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "not both" in proc.stderr
    assert still_dead(env) == sorted([points_job, stock_job])


def test_dlq_list_is_oldest_first_across_queues(two_dead: tuple[dict[str, str], str, str]) -> None:
    env, points_job, stock_job = two_dead
    listed = run(env, "dlq", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [d["job_id"] for d in json.loads(listed.stdout)] == [points_job, stock_job]
    table = run(env, "dlq", "list")
    assert table.stdout.index(points_job[:14]) < table.stdout.index(stock_job[:14])


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("ORDERS_DATABASE_URL", "mysql://u:secret@db/orders", "unsupported database 'mysql'"),
        ("ORDERS_DATABASE_URL", "oracle+cx_oracle://db", "unsupported database 'oracle'"),
        ("ORDERS_DATABASE_URL", "orders.db", "not a database URL"),
        ("ORDERS_REDIS_URL", "nonsense", "not a Redis URL"),
        ("ORDERS_REDIS_URL", "http://localhost:6379", "not a Redis URL"),
    ],
)
@pytest.mark.parametrize(
    "command",
    [
        ["status"],
        ["place", "-n", "1"],
        ["services", "status"],
        ["db", "upgrade"],
        ["outbox", "list"],
    ],
    ids=lambda c: " ".join(c),
)
def test_an_unsupported_url_is_invalid_settings_naming_the_variable(
    cli_env: dict[str, str], variable: str, value: str, named: str, command: list[str]
) -> None:
    proc = run(dict(cli_env, **{variable: value}), *command)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"invalid settings: {variable}: {named}" in proc.stderr
    assert "Traceback" not in proc.stderr and "secret" not in proc.stderr
    if variable == "ORDERS_DATABASE_URL":
        assert "sqlite://" in proc.stderr and "postgresql://" in proc.stderr
    data_dir = Path(cli_env["ORDERS_DATA_DIR"])
    assert not data_dir.exists() or not any(data_dir.iterdir())  # nothing written or started


@pytest.mark.parametrize(
    ("variable", "value"),
    [("ORDERS_WEB_SAMPLE_SECONDS", "nan"), ("ORDERS_WEB_SESSION_HOURS", "inf")],
)
def test_the_web_refuses_a_setting_that_is_not_a_finite_number(
    cli_env: dict[str, str], variable: str, value: str
) -> None:
    # a weak token is refused next: were the setting accepted, nothing would start either
    env = dict(cli_env, ORDERS_WEB_TOKEN="weak", **{variable: value})
    proc = run(env, "web", "--port", "1")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"invalid settings: {variable}:" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "command", [["services", "start"], ["services", "status"], ["db", "upgrade"]]
)
def test_commands_reading_settings_directly_refuse_a_bad_one_without_a_traceback(
    cli_env: dict[str, str], command: list[str]
) -> None:
    proc = run(dict(cli_env, ORDERS_LEASE_SECONDS="inf"), *command)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "invalid settings: ORDERS_LEASE_SECONDS:" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_web_on_a_port_in_use_says_so_naming_port_and_exits_1(cli_env: dict[str, str]) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        proc = run(cli_env, "web", "--port", str(port))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"port {port}" in proc.stderr and "in use" in proc.stderr and "--port" in proc.stderr
    assert "dashboard on" not in proc.stdout
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_web_on_an_invalid_host_is_bad_usage_naming_host(cli_env: dict[str, str]) -> None:
    proc = run(cli_env, "web", "--host", "256.1.1.1", "--port", "0")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--host 256.1.1.1" in proc.stderr
    assert "dashboard on" not in proc.stdout
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_worker_with_an_impossible_metrics_host_names_the_option(cli_env: dict[str, str]) -> None:
    proc = run(cli_env, "worker", "stock", "--metrics-port", "0", "--metrics-host", "999.1.1.1")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--metrics-host 999.1.1.1" in proc.stderr and "gaierror" not in proc.stderr


def test_worker_whose_metrics_port_is_taken_names_the_option(cli_env: dict[str, str]) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert run(cli_env, "db", "upgrade").returncode == 0  # a configured database starts empty
        proc = run(cli_env, "worker", "stock", "--metrics-port", str(port))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "--metrics-port" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("variable", "value"),
    [("ORDERS_DATA_DIR", "/proc/nope"), ("ORDERS_DATABASE_URL", "sqlite:////proc/x/y.db")],
)
def test_an_unusable_path_names_its_setting(
    cli_env: dict[str, str], variable: str, value: str
) -> None:
    env = {k: v for k, v in cli_env.items() if k != "ORDERS_DATABASE_URL"}  # data dir's SQLite
    proc = run(dict(env, **{variable: value}), "status")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"({variable}={value})" in " ".join(proc.stderr.split())
    assert "Traceback" not in proc.stderr


def test_a_sqlite_url_naming_a_missing_file_is_refused_and_creates_nothing(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """Regression: ``orders status`` with a mistyped ``ORDERS_DATABASE_URL`` made the
    missing folders and an empty database file, then said to run ``orders db upgrade``."""
    url = f"sqlite:///{tmp_path / 'typo' / 'dir' / 'orders.db'}"
    env = {k: v for k, v in cli_env.items() if k != "ORDERS_DATABASE_URL"}
    proc = run(dict(env, ORDERS_DATABASE_URL=url), "status")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    said = " ".join(proc.stderr.split())
    assert f"(ORDERS_DATABASE_URL={url})" in said and "orders db upgrade" in said, said
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "typo").exists()
