"""`orders worker` stopped the way `timeout`, systemd and container runtimes stop it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from cli_processes import run_orders, start_orders, wait_until


def test_one_sigterm_to_the_process_group_delivered_twice_drains_gracefully(
    cli_env: dict[str, str], tmp_path: Path, key_prefix: str
) -> None:
    env = dict(cli_env, ORDERS_QUEUE_PREFIX=key_prefix)
    run_orders(["db", "upgrade"], env)  # a configured database (PostgreSQL) starts empty
    log = tmp_path / "worker.log"
    worker = start_orders(["worker", "--all", "--concurrency", "1"], env, log)
    try:
        wait_until(
            lambda: "serving" in log.read_text() or worker.poll() is not None,
            timeout=60,
            what="the worker to serve",
        )
        assert worker.poll() is None, log.read_text()[-3000:]

        # the group gets the signal, and `uv run` in it forwards the same one ~1 ms later
        os.killpg(worker.pid, signal.SIGTERM)
        time.sleep(0.001)
        os.killpg(worker.pid, signal.SIGTERM)

        assert worker.wait(timeout=30) == 0, log.read_text()[-3000:]
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(10)
    text = log.read_text()
    assert "finishing in-flight jobs" in text
    assert "exiting now" not in text, text[-3000:]
