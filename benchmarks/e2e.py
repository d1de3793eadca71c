"""End to end: orders/s through all four steps and the completion tracker, on a database.

Uses the application as shipped: placement through the outbox, one ``orders``
worker process per step (``orders.worker.runner.run_worker``, CLI defaults), TPC-H input.
"""

from __future__ import annotations

import logging
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import event, func, select, text

from orders.app.bootstrap import build
from orders.app.placement import place
from orders.app.settings import Settings
from orders.domain.steps import STEPS, WORKFLOW_KIND
from orders.observability.tracing import tracer_provider
from orders.sources.tpch import load_tpch
from orders.worker.counters import Counters, total
from workflows.models import Workflow, WorkflowStatus

from .e2e_worker import COMMITS_KEY
from .measure import (
    command_cpu_seconds,
    machine_cpu_seconds,
    process_cpu_seconds,
    start_process,
    stop_process,
)
from .run_peers import REPO, environment
from .server import RedisServer

log = logging.getLogger("benchmarks")
#: the PostgreSQL server the e2e runs use: any database on it, reached by a superuser
#: (``BENCH_POSTGRES_URL``, e.g. a second server with pg_stat_statements loaded)
PG_ADMIN = os.environ.get("BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
#: longest wait for the workers to start serving before the clock starts anyway, seconds
READY_TIMEOUT = 60.0
#: this run's own database: runs on one server at the same time never drop each other's
PG_DB = f"orderflow_bench_{os.getpid()}"


def fresh_pg_database() -> str:
    """Drop and create the benchmark database; returns its SQLAlchemy URL."""
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {PG_DB}")
    server = psycopg.conninfo.conninfo_to_dict(PG_ADMIN)
    return (
        f"postgresql+psycopg://{server.get('user', 'postgres')}@{server.get('host', '127.0.0.1')}"
        f":{server.get('port', 5432)}/{PG_DB}"
    )


def drop_pg_database() -> None:
    """Drop the benchmark database (after a run)."""
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")


def pg_commits() -> int:
    """``xact_commit`` of the benchmark database (after the stats are flushed)."""
    time.sleep(1.2)  # backends flush their counters at most once a second
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (PG_DB,)
        ).fetchone()
    return int(row[0]) if row else 0


def wait_until_serving(client: Any, lanes: int, timeout: float = READY_TIMEOUT) -> float:
    """Wait until ``lanes`` clients of the benchmark's Redis block, waiting for work.

    An idle lane blocks on its queue's wake list, so every lane of every worker
    blocked means the workers have imported, connected and started serving. A
    fixed sleep does not say that: on a loaded machine, or where every process
    compiles its imports from source, start-up outlasts it and its CPU lands in
    the timed run.

    Args:
        client: a client of the benchmark's own Redis server (no other client blocks).
        lanes: lanes in all (worker processes x lanes each).
        timeout: seconds to wait before starting anyway (logged).

    Returns:
        Seconds waited.
    """
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        if int(client.info("clients").get("blocked_clients", 0)) >= lanes:
            return time.perf_counter() - started
        time.sleep(0.05)
    log.warning("workers not all serving after %.0f s; starting the clock anyway", timeout)
    return time.perf_counter() - started


def workers_cpu(procs: list[Any]) -> float | None:
    """CPU seconds the worker processes have used so far (None where /proc is missing)."""
    seconds = [process_cpu_seconds(p.pid) for p in procs]
    return None if any(s is None for s in seconds) else sum(s or 0.0 for s in seconds)


def redis_cpu_seconds(client: Any) -> float:
    """CPU seconds (user + system, main thread and children) the Redis server has used."""
    cpu = client.info("cpu")
    return float(cpu.get("used_cpu_user", 0.0)) + float(cpu.get("used_cpu_sys", 0.0))


def finished(app: Any, first_order: int) -> int:
    """Workflows of this run no longer running (done or blocked)."""
    with app.session_factory() as session:
        return int(
            session.scalar(
                select(func.count())
                .select_from(Workflow)
                .where(
                    Workflow.kind == WORKFLOW_KIND,
                    Workflow.subject_id >= first_order,
                    Workflow.status != WorkflowStatus.RUNNING,
                )
            )
            or 0
        )


def warm_up_run(app: Any, orders: int, timeout: float, *, analyze: bool) -> None:
    """Place ``orders`` orders, wait until all are done or blocked, then ANALYZE if asked.

    Raises:
        TimeoutError: they did not finish within ``timeout`` seconds.
    """
    started = time.perf_counter()
    first = min(place(app.session_factory, orders, publisher=app.publisher).order_ids)
    while finished(app, first) < orders:
        if time.perf_counter() - started > timeout:
            raise TimeoutError(f"warm-up: {orders} orders not done in {timeout:.0f} s")
        time.sleep(0.05)
    if analyze:
        with app.engine.connect() as conn:
            conn.execute(text("ANALYZE"))
            conn.commit()
    log.info("warm-up: %d orders in %.1f s", orders, time.perf_counter() - started)


def run_e2e(
    database: str,
    orders: int,
    concurrency: int,
    batch_size: int,
    timeout: float,
    *,
    label: str | None = None,
    metrics: bool = True,
    one_process: bool = False,
    warm_up: int = 0,
    traces: str = "off",
) -> dict[str, Any]:
    """Place ``orders`` TPC-H orders and time them through every step.

    Args:
        database: ``sqlite`` or ``postgresql``.
        orders: orders to place.
        concurrency: lanes per worker process (one process per step).
        batch_size: jobs per fetch.
        timeout: bound on the run, seconds.
        label: the variant's name after the database (default ``batch <size>``;
            ``default`` for the row measured at the CLI's defaults).
        metrics: workers record metrics in the data dir (``orders worker``'s default).
        one_process: one worker process serves every step (``orders worker --all``),
            ``concurrency`` lanes per step, instead of one process per step.
        warm_up: orders placed and run to completion before the clock starts,
            followed on PostgreSQL by ``ANALYZE`` (what autovacuum does within
            a minute of a table's first changes): the timed orders then meet
            the plans of a server that has been running, not those of tables
            the planner has never seen filled. 0: none (a cold start).
        traces: ``off``, or ``local``: placement and every worker record their spans
            in the data dir's span files (``ORDERS_TRACES=local``).

    Returns:
        A row with ``orders_per_second`` and DB transactions per order.
    """
    data_dir = Path(tempfile.mkdtemp(prefix="bench-e2e-"))
    url = (
        fresh_pg_database() if database == "postgresql" else (f"sqlite:///{data_dir / 'orders.db'}")
    )
    with RedisServer(appendfsync="everysec") as server:
        env = environment(server)
        settings = Settings(redis_url=server.url, database_url=url, data_dir=data_dir)
        tracing = {"ORDERS_TRACES": traces} if traces != "off" else {}
        provider = tracer_provider(data_dir, tracing) if tracing else None
        app = build(settings, auto_migrate=True, tracer_provider=provider)
        log.info("%s: loading TPC-H (scale 0.01)", database)
        load_tpch(app.session_factory, data_dir)
        client = server.client()
        placement_commits = [0]
        event.listen(
            app.engine,
            "commit",
            lambda conn: placement_commits.__setitem__(0, placement_commits[0] + 1),
        )
        worker_env = {
            "ORDERS_REDIS_URL": server.url,
            "ORDERS_DATABASE_URL": url,
            "ORDERS_DATA_DIR": str(data_dir),
            "PYTHONPATH": REPO,
            **tracing,
        }
        children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        groups = [list(STEPS)] if one_process else [[step] for step in STEPS]
        procs = [
            start_process(
                [
                    "python",
                    "-m",
                    "benchmarks.e2e_worker",
                    *steps,
                    "--concurrency",
                    str(concurrency),
                    "--batch-size",
                    str(batch_size),
                    *(["--metrics"] if metrics else []),
                ],
                worker_env,
                data_dir / f"worker-{'-'.join(steps)}.log",
            )
            for steps in groups
        ]
        try:
            # workers import, connect and block waiting for work before the clock starts
            startup_wait = wait_until_serving(client, len(STEPS) * concurrency)
            if warm_up:
                warm_up_run(app, warm_up, timeout, analyze=database == "postgresql")
            client.delete(COMMITS_KEY)
            duplicates_before = total(Counters(client, settings.queue_prefix).read(), "duplicate")
            cpu_at_start = workers_cpu(procs)
            xact_before = pg_commits() if database == "postgresql" else 0
            redis_cpu_at_start = redis_cpu_seconds(client)
            machine_at_start = machine_cpu_seconds()
            pg_at_start = command_cpu_seconds("postgres") if database == "postgresql" else None
            started = time.perf_counter()
            placing_cpu = time.process_time()
            result = place(
                app.session_factory,
                orders,
                publisher=app.publisher,
                tracer=app.tracer("orders.placement"),
            )
            placed_at = time.perf_counter() - started
            placing_cpu = time.process_time() - placing_cpu
            first = min(result.order_ids)
            done = 0
            while time.perf_counter() - started < timeout:
                done = finished(app, first)
                if done >= orders:
                    break
                time.sleep(0.05)
            seconds = time.perf_counter() - started
            machine_at_end = machine_cpu_seconds()
            pg_at_end = command_cpu_seconds("postgres") if database == "postgresql" else None
            cpu_at_end = workers_cpu(procs)
            redis_cpu = redis_cpu_seconds(client) - redis_cpu_at_start
        finally:
            for p in procs:
                stop_process(p)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        worker_cpu = (children.ru_utime + children.ru_stime) - (
            children_before.ru_utime + children_before.ru_stime
        )
        run_cpu = None if cpu_at_start is None or cpu_at_end is None else cpu_at_end - cpu_at_start
        machine_cpu = (
            None
            if machine_at_start is None or machine_at_end is None
            else machine_at_end - machine_at_start
        )
        pg_cpu = None if pg_at_start is None or pg_at_end is None else pg_at_end - pg_at_start
        worker_commits = int(client.get(COMMITS_KEY) or 0)
        counted = Counters(client, settings.queue_prefix).read()
        xact = pg_commits() - xact_before if database == "postgresql" else None
        app.close()
        if database == "postgresql":
            drop_pg_database()
    row = {
        "kind": "e2e",
        "library": "orderflow",
        "version": "app",
        "variant": f"{database} {label or f'batch {batch_size}'}"
        + (", one process" if one_process else "")
        + (f", traces {traces}" if traces != "off" else ""),
        "mode": "outbox + idempotent handlers + unit of work per job (batch 1) or per batch",
        "n": orders,
        "enqueue_rate": None,
        "drain_rate": None,
        "orders_done": done,
        "complete": done >= orders,
        "seconds": round(seconds, 2),
        "placement_seconds": round(placed_at, 2),
        # CPU time is what a loaded, shared machine cannot blur: the placing
        # process's while it placed, and the worker processes' over their whole
        # life (start-up imports included), seconds
        "placement_cpu_seconds": round(placing_cpu, 2),
        "worker_cpu_seconds": round(worker_cpu, 2),
        # the workers' CPU from the clock's start to the last order done (start-up
        # and shutdown left out), and per order, milliseconds
        "worker_startup_cpu_seconds": round(cpu_at_start, 2) if cpu_at_start is not None else None,
        "worker_startup_wait_seconds": round(startup_wait, 2),
        "worker_run_cpu_seconds": round(run_cpu, 2) if run_cpu is not None else None,
        "worker_cpu_ms_per_order": round(1000 * run_cpu / done, 3) if run_cpu and done else None,
        # every process's CPU over the same window, per order (all cores; the
        # machine's busy time from /proc/stat): workers + placing + Redis + the
        # database server + anything else that ran; milliseconds. With C cores,
        # orders/s can be at most 1000 * C / this figure.
        "machine_cpu_ms_per_order": (
            round(1000 * machine_cpu / done, 3) if machine_cpu and done else None
        ),
        "placement_cpu_ms_per_order": round(1000 * placing_cpu / orders, 3),
        "redis_cpu_ms_per_order": round(1000 * redis_cpu / done, 3) if done else None,
        # the PostgreSQL server's processes on this machine (postmaster and every
        # backend alive at the end; a server shared with other work counts it too)
        "postgres_cpu_ms_per_order": (
            round(1000 * pg_cpu / done, 3) if pg_cpu is not None and done else None
        ),
        "orders_per_second": round(done / seconds, 1),
        "worker_processes": len(procs),
        "concurrency": concurrency,
        "batch_size": batch_size,
        "worker_metrics": metrics,
        "db_commits_per_order": round((worker_commits + placement_commits[0]) / orders, 2),
        "worker_commits_per_order": round(worker_commits / orders, 2),
        "placement_commits": placement_commits[0],
        "pg_xact_commit_per_order": round(xact / orders, 2) if xact is not None else None,
        # redeliveries absorbed by the handlers (a step run twice costs a second run)
        "duplicate_runs": total(counted, "duplicate") - duplicates_before,
        "warm_up_orders": warm_up,
        "sweep_published": counted.get("sweep:published", 0),
        **env,
    }
    log.info(
        "%s, batch %d: %d orders in %.1f s (placing %.1f s, cpu %.1f s; workers cpu %.1f s, "
        "%.1f of it in the run = %s ms/order; machine %s ms/order, Redis %s, PostgreSQL %s) "
        "= %.0f orders/s, "
        "%.1f commits/order, %d duplicate runs",
        database,
        batch_size,
        done,
        seconds,
        placed_at,
        placing_cpu,
        worker_cpu,
        run_cpu if run_cpu is not None else float("nan"),
        row["worker_cpu_ms_per_order"],
        row["machine_cpu_ms_per_order"],
        row["redis_cpu_ms_per_order"],
        row["postgres_cpu_ms_per_order"],
        row["orders_per_second"],
        row["db_commits_per_order"],
        row["duplicate_runs"],
    )
    return row
