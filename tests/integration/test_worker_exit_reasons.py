"""`orders worker` says why it exits in its last log line: an injected crash, a signal, a
fatal error (real processes; their stderr is JSON lines, as under any supervisor)."""

from __future__ import annotations

import json
import signal
import socket
from pathlib import Path

import pytest
from cli_processes import app_for, start_orders, stop, wait_until

from orders.app.placement import place
from orders.sources.tpch import load_tpch
from orders.worker.faults import FaultConfig, FaultStore

pytestmark = pytest.mark.slow


def log_lines(log: Path) -> list[str]:
    return log.read_text(errors="replace").rstrip().splitlines()


def last_record(log: Path) -> dict:
    """The last JSON log line of ``log`` (a command's own ``error:`` line may follow)."""
    for line in reversed(log_lines(log)):
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"no log line in {log.read_text()[-3000:]}")


def serving(log: Path) -> bool:
    return "serving" in log.read_text(errors="replace")


def test_an_injected_crash_is_the_last_line_before_the_process_dies(
    cli_env: dict[str, str], key_prefix: str, tmp_path: Path
) -> None:
    env = dict(cli_env, ORDERS_QUEUE_PREFIX=key_prefix)
    app = app_for(env)  # migrated; in this process: fewer commands to start on a busy machine
    log = tmp_path / "worker.log"
    try:
        load_tpch(app.session_factory, app.settings.resolved_data_dir(), scale=0.001)
        # what `orders inject stock --crash-rate 1` writes
        FaultStore(app.redis, app.settings.queue_prefix).set("stock", FaultConfig(crash_rate=1))
        worker = start_orders(["worker", "--all", "--concurrency", "1"], env, log)
        try:
            wait_until(lambda: serving(log) or worker.poll() is not None, 60, "the worker")
            place(app.session_factory, 1, source="random", publisher=app.publisher)
            assert worker.wait(timeout=60) == -signal.SIGKILL
        finally:
            stop(worker)
    finally:
        app.close()

    last = json.loads(log_lines(log)[-1])  # the very last line, and it is a log record
    assert last["exit_reason"] == "injected crash"
    assert "injected crash on step stock (crash rate 1, orders inject)" in last["msg"]
    assert "kills itself (SIGKILL)" in last["msg"]
    assert last["queue"] == "stock" and last["order_id"] >= 1  # the job it was running


def test_a_signal_and_a_fatal_error_are_named_in_the_last_log_line(
    cli_env: dict[str, str], key_prefix: str, tmp_path: Path
) -> None:
    env = dict(cli_env, ORDERS_QUEUE_PREFIX=key_prefix)
    app = app_for(env)  # a configured database (PostgreSQL) starts empty: migrated here,
    try:  # on the engine's first use
        assert app.engine is not None
    finally:
        app.close()
    log = tmp_path / "worker.log"
    worker = start_orders(["worker", "stock", "--concurrency", "1"], env, log)
    try:
        wait_until(lambda: serving(log) or worker.poll() is not None, 60, "the worker to serve")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, log.read_text()[-3000:]
    finally:
        stop(worker)
    last = json.loads(log_lines(log)[-1])
    assert last["exit_reason"] == "signal SIGTERM" and "stopped (signal SIGTERM)" in last["msg"]

    with socket.socket() as taken:  # the metrics port is taken: the worker cannot start
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        failed_log = tmp_path / "failed.log"
        failed = start_orders(["worker", "stock", "--metrics-port", str(port)], env, failed_log)
        try:
            assert failed.wait(timeout=60) == 1
        finally:
            stop(failed)
    record = last_record(failed_log)
    assert record["exit_reason"] == "fatal error"
    assert "exits: fatal error: MetricsServerError: cannot serve /metrics" in record["msg"]
    assert log_lines(failed_log)[-1].startswith("error: cannot serve /metrics")
