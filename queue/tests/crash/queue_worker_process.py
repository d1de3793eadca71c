"""A real worker process for the crash tests: ``python queue_worker_process.py '<json spec>'``.

Spec keys: ``url``, ``prefix``, ``queue``, ``db`` (SQLite file for effects), and
optionally ``queues`` (names served, instead of ``queue`` alone), ``concurrency``
(lanes per queue), ``settings`` (QueueSettings fields), ``batch_size``, ``grace_seconds``,
``retry`` (RetryPolicy fields for every task), ``kill`` (``"after_fetch"`` or
``"before_settle"``: SIGKILL this process at that fault-injection point), ``isolation``
(``"thread"`` or ``"process"``: of the tasks below marked isolatable; with ``process``
their handlers run in child processes that build this registry with
:func:`isolated_registry`, the spec passed down in ``QUEUE_WORKER_SPEC``).

Tasks:
    record {sleep?, fail_times?, fail_deliveries?, die_deliveries?, throttle?}: logs the
        delivery, SIGKILLs its own process while the job has at most
        ``die_deliveries`` deliveries logged, raises ``Throttled(throttle[1])`` while it
        has at most ``throttle[0]``, sleeps, fails its first ``fail_times`` runs (by
        attempt) and while it has at most ``fail_deliveries`` deliveries, then applies
        its effect: one row per job id in ``effects`` (an idempotent handler: a
        redelivery finds the row and adds none), and logs its end in ``ends``.
    suicide {}: logs the delivery, then SIGKILLs its own process.
    c_sleep {seconds} (isolatable): logs the delivery, then sleeps in ONE C call that
        holds the GIL (libc ``sleep`` through ``ctypes.PyDLL``), as a catastrophic
        regex or a stuck extension would; then applies its effect.
    hang_first {} (isolatable): logs the delivery; its first run sleeps a minute;
        then applies its effect.
    batch_record [{c_sleep?, exit?}] (isolatable, a batch task): per job, logs the
        delivery, sleeps ``c_sleep`` s in one C call or exits its process with status
        ``exit``, then applies its effect.
"""

from __future__ import annotations

import ctypes
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
CREATE TABLE IF NOT EXISTS ends (job_id TEXT NOT NULL, pid INTEGER NOT NULL, at REAL NOT NULL);
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


def ends(path: str | Path) -> list[tuple[str, int, float]]:
    """Every logged end of a ``record`` run that applied its effect ``(job_id, pid, at)``."""
    with closing(connect(path)) as conn:
        return conn.execute("SELECT * FROM ends ORDER BY rowid").fetchall()


def effects(path: str | Path) -> list[str]:
    """Job ids whose effect was applied (one row each at most)."""
    with closing(connect(path)) as conn:
        return [r[0] for r in conn.execute("SELECT job_id FROM effects ORDER BY rowid")]


SPEC_ENV = "QUEUE_WORKER_SPEC"


def build_registry(spec: dict):
    """The tasks above, for the worker and for its isolated children."""
    from reliable_queue import RetryPolicy, TaskRegistry, Throttled

    db = spec["db"]
    registry = TaskRegistry()
    retry = RetryPolicy(**spec.get("retry", {}))
    isolation = spec.get("isolation", "thread")

    def log_delivery(task: str, ctx) -> None:
        with closing(connect(db)) as conn:
            conn.execute(
                "INSERT INTO deliveries VALUES (?, ?, ?, ?, ?, ?)",
                (ctx.job_id, task, ctx.attempt, ctx.fencing_token, os.getpid(), time.time()),
            )

    def delivered(job_id: str) -> int:
        with closing(connect(db)) as conn:
            query = "SELECT count(*) FROM deliveries WHERE job_id = ?"
            return int(conn.execute(query, (job_id,)).fetchone()[0])

    @registry.task("record", retry=retry)
    def record(payload: dict, ctx) -> None:
        log_delivery("record", ctx)
        seen = delivered(ctx.job_id)  # this delivery included
        if seen <= payload.get("die_deliveries", 0):
            os.kill(os.getpid(), signal.SIGKILL)
        times, delay = payload.get("throttle", (0, 0.0))
        if seen <= times:
            raise Throttled(delay, f"throttled on purpose ({seen})")
        time.sleep(payload.get("sleep", 0))
        if ctx.attempt <= payload.get("fail_times", 0) or seen <= payload.get("fail_deliveries", 0):
            raise RuntimeError(f"failing on purpose (attempt {ctx.attempt})")
        with closing(connect(db)) as conn:
            conn.execute(
                "INSERT INTO effects VALUES (?, ?) ON CONFLICT (job_id) DO NOTHING",
                (ctx.job_id, os.getpid()),
            )
            conn.execute(
                "INSERT INTO ends VALUES (?, ?, ?)", (ctx.job_id, os.getpid(), time.time())
            )

    @registry.task("suicide", retry=retry)
    def suicide(payload: dict, ctx) -> None:
        log_delivery("suicide", ctx)
        os.kill(os.getpid(), signal.SIGKILL)

    def apply(job_id: str) -> None:
        with closing(connect(db)) as conn:
            conn.execute(
                "INSERT INTO effects VALUES (?, ?) ON CONFLICT (job_id) DO NOTHING",
                (job_id, os.getpid()),
            )

    @registry.task("c_sleep", retry=retry, isolation=isolation)
    def c_sleep(payload: dict, ctx) -> None:
        log_delivery("c_sleep", ctx)
        ctypes.PyDLL(None).sleep(int(payload["seconds"]))  # holds the GIL throughout
        apply(ctx.job_id)

    @registry.task("hang_first", retry=retry, isolation=isolation)
    def hang_first(payload: dict, ctx) -> None:
        log_delivery("hang_first", ctx)
        if ctx.attempt == 1:
            time.sleep(60)
        apply(ctx.job_id)

    @registry.task("batch_record", retry=retry, batch=True, isolation=isolation)
    def batch_record(items: list) -> list:
        for payload, ctx in items:
            log_delivery("batch_record", ctx)
            if payload.get("c_sleep"):
                ctypes.PyDLL(None).sleep(int(payload["c_sleep"]))
            if payload.get("exit") is not None:
                os._exit(int(payload["exit"]))
            apply(ctx.job_id)
        return [None] * len(items)

    return registry


def isolated_registry():
    """The registry of an isolated child: the worker's spec from the environment."""
    return build_registry(json.loads(os.environ[SPEC_ENV]))


def main(spec: dict) -> None:
    import redis

    from reliable_queue import QueueSettings, Worker, WorkerHooks

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(threadName)s %(message)s")
    os.environ[SPEC_ENV] = json.dumps(spec)  # inherited by isolated children
    registry = build_registry(spec)

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
        isolated_registry=(
            "queue_worker_process:isolated_registry" if spec.get("isolation") == "process" else None
        ),
    )
    worker.run()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
