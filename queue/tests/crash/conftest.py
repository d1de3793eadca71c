"""Crash tests: real worker processes (queue_worker_process.py), killed for real."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

import pytest

HELPER = Path(__file__).with_name("queue_worker_process.py")


@pytest.fixture
def effects_db(tmp_path: Path) -> Path:
    """Path of the SQLite file the worker processes log deliveries and effects to."""
    return tmp_path / "effects.db"


@pytest.fixture
def spawn_worker(
    redis_url: str, key_prefix: str, effects_db: Path, tmp_path: Path
) -> Iterator[Callable[..., subprocess.Popen]]:
    """Start a worker process on queue ``jobs`` in this test's key space.

    ``spawn_worker(**spec)`` overrides the spec fields (see queue_worker_process.py).
    Every process still alive at teardown is SIGKILLed; their logs are in tmp_path.
    """
    procs: list[subprocess.Popen] = []
    logs: list[BinaryIO] = []

    def spawn(**spec: object) -> subprocess.Popen:
        full = {"url": redis_url, "prefix": key_prefix, "queue": "jobs", "db": str(effects_db)}
        full.update(spec)
        log = (tmp_path / f"worker-{len(procs)}.log").open("wb")
        logs.append(log)
        proc = subprocess.Popen(
            [sys.executable, str(HELPER), json.dumps(full)], stdout=log, stderr=log
        )
        procs.append(proc)
        return proc

    yield spawn
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    for log in logs:
        log.close()
