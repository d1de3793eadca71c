"""Start and stop `orders worker` processes (for the demo and chaos runs)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path


def worker_command(
    steps: Sequence[str], *, concurrency: int = 2, extra: Sequence[str] = ()
) -> list[str]:
    """The argv of a worker process serving ``steps`` (this interpreter, no PATH lookup)."""
    return [
        sys.executable,
        "-m",
        "orders.cli.main",
        "worker",
        *steps,
        "--concurrency",
        str(concurrency),
        *extra,
    ]


def start_worker(
    steps: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    log_path: Path | None = None,
    concurrency: int = 2,
    extra: Sequence[str] = (),
) -> subprocess.Popen[bytes]:
    """Start one worker process in its own session (a Ctrl-C of ours is not sent to it).

    Args:
        steps: steps it serves.
        env: its environment (default: ours).
        log_path: file its stderr/stdout go to (default: discarded).
        concurrency: lanes per step.
        extra: more CLI options.
    """
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 - owned by the child
    try:
        return subprocess.Popen(
            worker_command(steps, concurrency=concurrency, extra=extra),
            env=dict(env) if env is not None else None,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    finally:
        if log_path:
            out.close()  # type: ignore[union-attr]


def stop_workers(procs: Sequence[subprocess.Popen[bytes]], *, timeout: float = 15.0) -> None:
    """SIGTERM every live process, wait up to ``timeout`` seconds, then SIGKILL the rest."""
    for proc in procs:
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(5)
