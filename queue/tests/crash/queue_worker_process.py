"""A real worker process for the crash tests: ``python queue_worker_process.py '<json spec>'``.

Spec keys: ``url``, ``prefix``, ``queue``, ``db`` (SQLite file for effects), and
optionally ``queues`` (names served, instead of ``queue`` alone), ``concurrency``
(lanes per queue), ``settings`` (QueueSettings fields), ``batch_size``, ``grace_seconds``,
``retry`` (RetryPolicy fields for every task), ``kill`` (``"after_fetch"`` or
``"before_settle"``: SIGKILL this process at that fault-injection point).

Tasks:
    record {sleep?, fail_times?}: logs the delivery, sleeps, fails its first
        ``fail_times`` runs, then applies its effect: one row per job id in
        ``effects`` (an idempotent handler: a redelivery finds the row and adds none).
    suicide {}: logs the delivery, then SIGKILLs its own process.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sqlite3
import sys
import time
from contextlib import closing
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS deliveries (
    job_id TEXT NOT NULL, task TEXT NOT NULL, attempt INTEGER NOT NULL,
    fencing INTEGER NOT NULL, pid INTEGER NOT NULL, at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS effects (job_id TEXT PRIMARY KEY, pid INTEGER NOT NULL);
"""


def connect(path: str | Path) -> sqlite3.Connection:
    """A connection to the effects database (created with its tables if missing)."""
    conn = sqlite3.connect(str(path), timeout=10, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(SCHEMA)
    return conn


def deliveries(path: str | Path) -> list[tuple[str, str, int, int, int, float]]:
    """Every logged delivery ``(job_id, task, attempt, fencing, pid, at)`` in order."""
    with closing(connect(path)) as conn:
        return conn.execute("SELECT * FROM deliveries ORDER BY rowid").fetchall()


def effects(path: str | Path) -> list[str]:
    """Job ids whose effect was applied (one row each at most)."""
    with closing(connect(path)) as conn:
        return [r[0] for r in conn.execute("SELECT job_id FROM effects ORDER BY rowid")]


def main(spec: dict) -> None:
    import redis

    from reliable_queue import QueueSettings, RetryPolicy, TaskRegistry, Worker, WorkerHooks

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(threadName)s %(message)s")
    db = spec["db"]
    registry = TaskRegistry()
    retry = RetryPolicy(**spec.get("retry", {}))

    def log_delivery(task: str, ctx) -> None:
        with closing(connect(db)) as conn:
            conn.execute(
                "INSERT INTO deliveries VALUES (?, ?, ?, ?, ?, ?)",
                (ctx.job_id, task, ctx.attempt, ctx.fencing_token, os.getpid(), time.time()),
            )

    @registry.task("record", retry=retry)
    def record(payload: dict, ctx) -> None:
        log_delivery("record", ctx)
        time.sleep(payload.get("sleep", 0))
        if ctx.attempt <= payload.get("fail_times", 0):
            raise RuntimeError(f"failing on purpose (attempt {ctx.attempt})")
        with closing(connect(db)) as conn:
            conn.execute(
                "INSERT INTO effects VALUES (?, ?) ON CONFLICT (job_id) DO NOTHING",
                (ctx.job_id, os.getpid()),
            )

    @registry.task("suicide", retry=retry)
    def suicide(payload: dict, ctx) -> None:
        log_delivery("suicide", ctx)
        os.kill(os.getpid(), signal.SIGKILL)

    def die(*_: object) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    hooks = WorkerHooks()
    if spec.get("kill") == "after_fetch":
        hooks.after_fetch = die
    elif spec.get("kill") == "before_settle":
        hooks.before_settle = lambda calls: any(c.script == "ack" for c in calls) and die()

    client = redis.Redis.from_url(spec["url"], socket_timeout=10)
    worker = Worker(
        client,
        spec.get("queues", [spec["queue"]]),
        registry,
        prefix=spec["prefix"],
        concurrency=spec.get("concurrency", 1),
        batch_size=spec.get("batch_size", 10),
        settings=QueueSettings(**spec.get("settings", {})),
        grace_seconds=spec.get("grace_seconds", 10.0),
        hooks=hooks,
    )
    worker.run()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
