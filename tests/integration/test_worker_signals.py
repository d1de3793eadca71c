"""`orders worker` stopped the way `timeout`, systemd and container runtimes stop it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from cli_processes import start_orders, wait_until


def test_one_sigterm_to_the_process_group_delivered_twice_drains_gracefully(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    worker = start_orders(["worker", "--all", "--concurrency", "1"], cli_env, log)
    try:
        wait_until(lambda: "serving" in log.read_text(), timeout=60, what="the worker to serve")

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
