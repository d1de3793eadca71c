"""End to end beside the peers: the same order workflow on orderflow, Celery and Dramatiq.

Contract: one Redis server (AOF ``everysec``, flushed between turns) and, per database,
one template (``e2e_db``) copied afresh for every turn. The libraries take turns
(``benchmarks.harness``); a turn starts the library's workers, waits until they say
they are ready, runs a warm-up of orders to completion (then ``ANALYZE`` on
PostgreSQL), and times placing ``orders`` orders until all are finished or the
deadline passes. CPU is read from ``/proc`` over that window: the whole machine's
(``cpu_ms_per_order``) and the run's own processes' (workers, Redis, PostgreSQL,
placing). Then the workers' counts of step runs give the runs beyond the first of an
order's step over the turn (``benchmarks.e2e_counts``; "unknown" when they fall short
of the runs the tables say happened), and after the workers stop the tables are checked
for stock that does not add up and for completed orders missing an effect.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import text

from orders.domain.steps import STEPS

from . import e2e_db
from .e2e import redis_cpu_seconds
from .e2e_contenders import CONTENDERS, Contender, TurnContext, make
from .e2e_counts import duplicate_runs
from .harness import group_runs, summarize, take_turns
from .measure import (
    command_cpu_seconds,
    group_cpu_seconds,
    machine_cpu_seconds,
    start_process,
    stop_process,
)
from .peers.base import URL_ENV
from .run_peers import REPO, environment
from .server import RedisServer

log = logging.getLogger("benchmarks")

FIELDS = (
    "orders_done",
    "lost_orders",
    "complete",
    "seconds",
    "placement_seconds",
    "orders_per_second",
    "cpu_ms_per_order",
    "own_cpu_ms_per_order",
    "worker_cpu_ms_per_order",
    "redis_cpu_ms_per_order",
    "postgres_cpu_ms_per_order",
    "placement_cpu_ms_per_order",
    "duplicate_runs",
    "inventory_drift_parts",
    "missing_effects",
    "worker_startup_seconds",
)
"""The measured figures of a run (each summarised as median, min and max)."""


@dataclass(frozen=True)
class E2EPeerOptions:
    """Knobs of ``benchmarks e2e-peers``.

    Attributes:
        libraries: contenders, in the first round's order.
        databases: ``sqlite`` and/or ``postgresql``.
        orders: orders timed per run.
        runs: rounds of turns; every figure is the median of this many runs.
        warm_up: orders run to completion before the clock starts.
        processes: worker processes per library (orderflow: one per step).
        threads: tasks at a time per worker process of the peers (Celery's threads pool,
            Dramatiq's threads); None: each peer's own (``e2e_contenders.CELERY_CONCURRENCY``,
            ``DRAMATIQ_THREADS``).
        timeout: the deadline of one run, seconds; orders not finished by then are lost.
        ready_timeout: longest wait for a library's workers to say they are ready, seconds.
        count_timeout: longest wait for the workers' step-run counts to cover the runs
            the tables say happened, seconds (the peers add theirs every 0.2 s).
        scale: TPC-H scale factor of the template.
        log_dir: where worker logs go.
    """

    libraries: tuple[str, ...] = CONTENDERS
    databases: tuple[str, ...] = e2e_db.DATABASES
    orders: int = 2000
    runs: int = 3
    warm_up: int = 100
    processes: int = len(STEPS)
    threads: int | None = None
    timeout: float = 300.0
    ready_timeout: float = 120.0
    count_timeout: float = 5.0
    scale: float = 0.01
    log_dir: Path = field(default=Path("/tmp/bench-logs/e2e-peers"))


@dataclass
class Clock:
    """CPU and wall clock read at the start of a timed window (seconds)."""

    wall: float
    machine: float | None
    workers: float | None
    redis: float
    postgres: float | None
    placing: float


def read_clock(turn: TurnContext, pgids: list[int], postgres: bool) -> Clock:
    """Read every clock the row needs, now."""
    return Clock(
        time.perf_counter(),
        machine_cpu_seconds(),
        group_cpu_seconds(pgids),
        redis_cpu_seconds(turn.client),
        command_cpu_seconds("postgres") if postgres else None,
        time.process_time(),
    )


def _per_order(seconds: float | None, done: int) -> float | None:
    return round(1000 * seconds / done, 3) if seconds is not None and done else None


def _delta(end: float | None, start: float | None) -> float | None:
    return None if end is None or start is None else end - start


def wait_for(
    condition: Callable[[], bool], timeout: float, what: str, alive: Callable[[], bool]
) -> float:
    """Poll ``condition`` every 50 ms until it holds; returns seconds waited.

    Raises:
        RuntimeError: ``timeout`` seconds passed, or ``alive()`` turned False (a worker
            exited), first.
    """
    started = time.perf_counter()
    while not condition():
        if not alive():
            raise RuntimeError(f"a worker exited while waiting for {what}")
        if time.perf_counter() - started > timeout:
            raise RuntimeError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.05)
    return time.perf_counter() - started


def timed_run(
    contender: Contender, turn: TurnContext, opts: E2EPeerOptions, pgids: list[int], postgres: bool
) -> dict[str, Any]:
    """Place ``opts.orders`` orders and wait for them; the figures of the window."""
    start = read_clock(turn, pgids, postgres)
    ids = contender.place(turn, opts.orders)
    placed_at = time.perf_counter() - start.wall
    placing = time.process_time() - start.placing
    first, done = min(ids), 0
    while time.perf_counter() - start.wall < opts.timeout:
        done = e2e_db.finished_orders(turn.factory, first)
        if done >= len(ids):
            break
        time.sleep(0.05)
    end = read_clock(turn, pgids, postgres)
    seconds = end.wall - start.wall
    machine = _delta(end.machine, start.machine)
    workers = _delta(end.workers, start.workers)
    redis_cpu = end.redis - start.redis
    pg = _delta(end.postgres, start.postgres)
    own = None if workers is None else workers + redis_cpu + (pg or 0.0) + placing
    return {
        "first_order_id": first,
        "orders_done": done,
        "lost_orders": len(ids) - done,
        "complete": done >= len(ids),
        "seconds": round(seconds, 3),
        "placement_seconds": round(placed_at, 3),
        "orders_per_second": round(done / seconds, 1),
        # every process on the machine over the window (all cores): the run's and
        # whatever else ran; with C cores orders/s is at most 1000 * C / this
        "cpu_ms_per_order": _per_order(machine, done),
        # the run's own processes: workers (with their children), Redis, the
        # PostgreSQL server's processes, and placing in this process
        "own_cpu_ms_per_order": _per_order(own, done),
        "worker_cpu_ms_per_order": _per_order(workers, done),
        "redis_cpu_ms_per_order": _per_order(redis_cpu, done),
        "postgres_cpu_ms_per_order": _per_order(pg, done),
        "placement_cpu_ms_per_order": _per_order(placing, done),
    }


def count_duplicate_runs(
    contender: Contender, turn: TurnContext, first: int, timeout: float
) -> int | None:
    """Step runs beyond the first of an order's step over the turn (orders >= ``first``).

    Polls the workers' counts (every 100 ms, up to ``timeout`` seconds) until they cover
    every step run the tables say happened.

    Returns:
        The count, or None when the counts still fall short at the deadline.
    """
    expected = e2e_db.expected_step_runs(turn.factory, first)
    deadline = time.perf_counter() + timeout
    while True:
        counted = duplicate_runs(contender.step_runs(turn), expected)
        if counted is not None or time.perf_counter() > deadline:
            return counted
        time.sleep(0.1)


def checks(factory: Any, first: int) -> dict[str, Any]:
    """What the tables say after the run: parts whose stock does not add up (a stock
    effect applied twice), completed orders missing an effect."""
    return {
        "inventory_drift_parts": e2e_db.inventory_drift(factory),
        "missing_effects": e2e_db.missing_effects(factory, first),
    }


def one_turn(
    server: RedisServer,
    template: e2e_db.TemplateDatabase,
    contender: Contender,
    opts: E2EPeerOptions,
    round_index: int,
) -> dict[str, Any]:
    """One library's run on a fresh copy of the database and a flushed Redis: a row."""
    label = f"{contender.name}_{round_index}"
    server.flush()
    url = template.copy(label)
    engine, factory = e2e_db.open_database(url)
    client = server.client()
    turn = TurnContext(server.url, url, template.work_dir / label / "data", client, factory, REPO)
    opts.log_dir.mkdir(parents=True, exist_ok=True)
    logs = [opts.log_dir / f"{template.kind}-{label}-{i}.log" for i in range(opts.processes)]
    procs = [
        start_process(argv, contender.worker_env(turn), path)
        for argv, path in zip(contender.worker_argvs(), logs, strict=False)
    ]
    postgres = template.kind == "postgresql"

    def alive() -> bool:
        return all(p.poll() is None for p in procs)

    try:
        startup = wait_for(
            lambda: contender.ready(turn), opts.ready_timeout, f"{contender.name} ready", alive
        )
        turn_first: int | None = None
        if opts.warm_up:
            first = turn_first = min(contender.place(turn, opts.warm_up))
            wait_for(
                lambda: e2e_db.finished_orders(factory, first) >= opts.warm_up,
                opts.timeout,
                f"{contender.name} warm-up",
                alive,
            )
            if postgres:  # what autovacuum does within a minute of a table's first rows
                with engine.connect() as conn:
                    conn.execute(text("ANALYZE"))
                    conn.commit()
        row = timed_run(contender, turn, opts, [p.pid for p in procs], postgres)
        row["duplicate_runs"] = count_duplicate_runs(
            contender,
            turn,
            row["first_order_id"] if turn_first is None else turn_first,
            opts.count_timeout,
        )
    finally:
        for p in procs:
            stop_process(p)
        contender.end_turn()
        client.close()
    row.update(checks(factory, row["first_order_id"]))
    engine.dispose()
    template.drop(url)
    row["worker_startup_seconds"] = round(startup, 2)
    log.info(
        "%s %s: %d/%d orders in %.1f s = %.0f orders/s; CPU %s ms/order (own %s); "
        "%s step runs again, %d parts' stock off, %d lost, %d missing effects",
        template.kind,
        contender.name,
        row["orders_done"],
        opts.orders,
        row["seconds"],
        row["orders_per_second"],
        row["cpu_ms_per_order"],
        row["own_cpu_ms_per_order"],
        "unknown" if row["duplicate_runs"] is None else row["duplicate_runs"],
        row["inventory_drift_parts"],
        row["lost_orders"],
        row["missing_effects"],
    )
    return {
        "kind": "e2e-peer",
        "library": contender.name,
        "version": contender.version(),
        "variant": template.kind,
        "database": template.kind,
        "mode": contender.mode,
        "worker": contender.describe(),
        "worker_processes": opts.processes,
        "n": opts.orders,
        "warm_up_orders": opts.warm_up,
        "tpch_scale": template.scale,
        **row,
    }


def run_e2e_peers(opts: E2EPeerOptions) -> list[dict[str, Any]]:
    """The whole run: per database, the libraries take ``opts.runs`` interleaved turns.

    Returns:
        One row per (database, library): medians with min, max and every run
        (``<field>_runs``; ``duplicate_runs`` is None in a run whose counts fell short)
        and each run's load average.

    Raises:
        RuntimeError: a library's workers did not start, or exited, or a warm-up did
            not finish (the worker logs under ``opts.log_dir`` say why).
        ValueError: an unknown library or database.
    """
    for noisy in ("celery", "dramatiq", "kombu", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    rows: list[dict[str, Any]] = []
    with RedisServer(appendfsync="everysec") as server:
        os.environ[URL_ENV] = server.url  # the peers' producers read it when imported
        env = environment(server)
        contenders = {name: make(name, opts.processes, opts.threads) for name in opts.libraries}
        for database in opts.databases:
            template = e2e_db.TemplateDatabase(database, opts.scale)
            try:
                log.info("%s: migrating the template and loading TPC-H", database)
                template.prepare()
                turns = take_turns(
                    list(opts.libraries),
                    opts.runs,
                    lambda name, r: one_turn(server, template, contenders[name], opts, r),  # noqa: B023
                )
            finally:
                template.close()
            runs = [turn.stamp({**turn.result, **env}) for turn in turns]
            for group in group_runs(runs, ["library"]).values():
                row = summarize(group, FIELDS)
                row.pop("first_order_id", None)  # one run's, meaningless for the row
                rows.append(row)
    return rows
