"""Running the real ``orders`` console script in tests: commands, servers, waiting.

Importable from any test tree (``tests/`` is on pytest's ``pythonpath``).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from orders.app.bootstrap import App, build
from orders.app.settings import Settings


def orders_command() -> list[str]:
    """The installed console script, or the module when PATH lacks it."""
    script = Path(sys.executable).with_name("orders")
    return [str(script)] if script.exists() else [sys.executable, "-m", "orders.cli.main"]


def run_orders(args: Sequence[str], env: Mapping[str, str], timeout: float = 120) -> str:
    """Run ``orders ARGS`` to completion; return its stdout.

    Raises:
        AssertionError: it exited non-zero (its output is in the message).
    """
    proc = subprocess.run(
        [*orders_command(), *args], env=dict(env), capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, (
        f"orders {' '.join(args)}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    )
    return proc.stdout


def start_orders(args: Sequence[str], env: Mapping[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start ``orders ARGS`` in the background, output to ``log``, in its own session."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            [*orders_command(), *args],
            env=dict(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def stop(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> int:
    """SIGTERM, wait up to ``timeout`` s, then SIGKILL; return the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
    return proc.returncode


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_get(url: str, timeout: float = 5.0) -> str:
    """GET ``url``; the body as text.

    Raises:
        urllib.error.URLError: not answering (yet).
    """
    with urllib.request.urlopen(url, timeout=timeout) as reply:  # noqa: S310 - loopback only
        return reply.read().decode()


def wait_until(check: Callable[[], bool], timeout: float, what: str, every: float = 0.25) -> None:
    """Call ``check`` until it is true.

    Raises:
        AssertionError: still false after ``timeout`` seconds (``what`` says what was awaited).
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:  # not ready yet (server starting, table missing)
            pass
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def wait_for_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 30) -> None:
    """Wait until ``url`` answers; fail with the server's log if it died first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited {proc.returncode}: {log.read_text()[-3000:]}")
        try:
            http_get(url, timeout=2)
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{url} did not answer in {timeout}s: {log.read_text()[-3000:]}")


def app_for(env: Mapping[str, str], *, migrate: bool = True) -> App:
    """The application the CLI processes of ``env`` use, built in the test process
    (its database migrated on first use when ``migrate``)."""
    return build(
        Settings(
            data_dir=Path(env["ORDERS_DATA_DIR"]),
            queue_prefix=env.get("ORDERS_QUEUE_PREFIX", "orderflow"),
            redis_url=env.get("ORDERS_REDIS_URL"),
            database_url=env.get("ORDERS_DATABASE_URL"),
        ),
        auto_migrate=migrate,
    )
