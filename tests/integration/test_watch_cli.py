"""``orders watch``: one view on demand, and a live view in a terminal that Ctrl-C ends cleanly."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest
from cli_processes import app_for, orders_command
from typer.testing import CliRunner

from orders.cli.main import app as main
from orders.domain.steps import ALL_STEPS


@pytest.fixture
def env(cli_env: dict[str, str], key_prefix: str) -> dict[str, str]:
    """The CLI's environment, its database migrated and one job ready on points."""
    env = dict(cli_env, ORDERS_QUEUE_PREFIX=key_prefix, COLUMNS="140")
    app = app_for(env, migrate=True)
    try:
        assert app.engine is not None
        app.queues["points"].enqueue("orders.points", {"order_id": 1, "workflow_id": 1})
    finally:
        app.close()
    return env


def test_watch_once_prints_queues_orders_and_dead_letters(env: dict[str, str]) -> None:
    result = CliRunner().invoke(main, ["watch", "--once", "--interval", "0.3"], env=env)
    assert result.exit_code == 0, result.output
    out = result.stdout
    for word in ("queues", "jobs/s", "p95 ms", "retry/min", "orders", "in progress", "cancelled"):
        assert word in out
    assert "newest dead letters" in out and "dead-letter queues are empty" in out
    for step in ALL_STEPS:  # the compensating steps' queues beside the forward ones
        assert step in out
    assert "waiting for prerequisites" in out and "skipped (out of stock or cancelled)" in out
    points = next(line for line in out.splitlines() if "points" in line)
    assert "1" in points.split()  # one job ready


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_watch_live_exits_130_cleanly_on_ctrl_c(env: dict[str, str], tmp_path: Path) -> None:
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*orders_command(), "watch", "--interval", "0.3"],
        env=env,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        # As a terminal gives it: a test run started in the background by a
        # non-interactive shell ignores SIGINT, a child inherits that, and Python then
        # installs no KeyboardInterrupt handler, so Ctrl-C would do nothing at all.
        preexec_fn=_default_sigint,
    )
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + 60
        while b"newest dead letters" not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    seen += os.read(master, 65536)
                except OSError:
                    break
        assert b"newest dead letters" in seen, seen[-2000:]
        proc.send_signal(signal.SIGINT)
        # Keep reading while it exits: a live view that has filled the pty's buffer
        # blocks in write() and cannot finish its way out until someone reads.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            chunk = b""
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    chunk = b""
            seen += chunk
            if not chunk and proc.poll() is not None:
                break
        code = proc.wait(1)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        os.close(master)
    assert code == 130, seen[-2000:]  # the convention for an interrupted command
    assert b"Traceback" not in seen and b"Aborted" not in seen


def test_watch_not_on_a_terminal_prints_one_view_after_another(env: dict[str, str]) -> None:
    """Piped, the live view drew nothing at all until it was stopped; each view is now
    printed in turn, and SIGTERM ends it with status 0."""
    with subprocess.Popen(
        [*orders_command(), "watch", "--interval", "0.3"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            seen = b""
            deadline = time.monotonic() + 60
            while seen.count(b"newest dead letters") < 2 and time.monotonic() < deadline:
                ready, _, _ = select.select([proc.stdout], [], [], 0.5)
                if ready:
                    chunk = os.read(proc.stdout.fileno(), 65536)
                    if not chunk:
                        break
                    seen += chunk
            assert seen.count(b"newest dead letters") >= 2, seen[-2000:]
            proc.terminate()
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
