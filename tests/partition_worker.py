"""A queue worker process for the partition test, run inside a network namespace.

    python partition_worker.py REDIS_URL PREFIX DB_FILE SIDE

Serves queue ``part`` with task ``effect``: it stalls ``payload["stall"]`` seconds
when ``payload["stall_on"]`` names its SIDE, then applies the job's effect to a
SQLite file with the idempotent-handler technique of the orders steps (a row
unique per job: a second delivery inserts nothing and is recorded as absorbed).
"""

from __future__ import annotations

import logging
import sqlite3
import sys
import time
from typing import Any

import redis

from reliable_queue import JobContext, QueueSettings, TaskRegistry, Worker

#: Short lease, so a partition of a few seconds outlasts it.
SETTINGS = QueueSettings(lease_seconds=1.5, max_block_seconds=0.5)


def prepare(db: str) -> None:
    """Create the effect tables (idempotent)."""
    with sqlite3.connect(db, timeout=30) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS effects (n INTEGER PRIMARY KEY, side TEXT)")
        conn.execute("CREATE TABLE IF NOT EXISTS deliveries (n INTEGER, side TEXT, applied INT)")


def apply_effect(db: str, n: int, side: str) -> bool:
    """Apply job ``n``'s effect once; record the delivery. Returns True if applied now."""
    with sqlite3.connect(db, timeout=30) as conn:
        applied = conn.execute(
            "INSERT OR IGNORE INTO effects (n, side) VALUES (?, ?)", (n, side)
        ).rowcount
        conn.execute("INSERT INTO deliveries VALUES (?, ?, ?)", (n, side, applied))
    return bool(applied)


def registry_for(db: str, side: str) -> TaskRegistry:
    """The ``effect`` task as run on ``side``."""
    registry = TaskRegistry()

    @registry.task("effect")
    def effect(payload: dict[str, Any], ctx: JobContext) -> None:
        if payload.get("stall_on") == side:
            time.sleep(float(payload.get("stall", 0)))
        apply_effect(db, int(payload["n"]), side)

    return registry


def main() -> None:
    """Run the worker until SIGTERM."""
    url, prefix, db, side = sys.argv[1:5]
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    client = redis.Redis.from_url(url, socket_timeout=2.0, socket_connect_timeout=1.0)
    worker = Worker(
        client,
        ["part"],
        registry_for(db, side),
        prefix=prefix,
        settings=SETTINGS,
        concurrency=1,
        batch_size=1,
        worker_id=side,
    )
    worker.run()


if __name__ == "__main__":
    main()
