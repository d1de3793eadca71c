"""Command line: ``peers`` (side by side) and ``orderflow`` (the queue and the app alone)."""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from . import report
from .registry import MODULES

app = typer.Typer(
    help="orderflow benchmarks (not tests): figures, not assertions.", no_args_is_help=True
)


@app.callback()
def main(
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress on stderr")] = False,
) -> None:
    """Progress goes to stderr; tables to stdout; JSON to benchmarks/results/."""
    logging.basicConfig(
        level=logging.WARNING if quiet else logging.INFO,
        format="%(asctime)s %(message)s",
        datefmt="%H:%M:%S",
    )


@app.command()
def peers(
    n: Annotated[int, typer.Option(help="no-op jobs per drain")] = 20_000,
    only: Annotated[str, typer.Option(help="comma-separated libraries")] = ",".join(MODULES),
    drain_timeout: Annotated[float, typer.Option(help="bound on one drain, seconds")] = 60.0,
    latency_rate: Annotated[float, typer.Option(help="offered load, jobs/s")] = 1000.0,
    latency_seconds: Annotated[float, typer.Option(help="latency run, seconds (0: skip)")] = 20.0,
    latency_peers: Annotated[int, typer.Option(help="fastest peers also timed")] = 2,
    repeat: Annotated[
        int,
        typer.Option(
            min=1,
            help="rounds: the libraries take turns (A B C, then C B A, ...); every figure "
            "is the median of this many runs, with min and max (3 or more for figures)",
        ),
    ] = 3,
    cpu_hog: Annotated[
        bool,
        typer.Option(
            "--cpu-hog",
            help="run every latency run beside a second CPU-bound process (a busy loop "
            "started just before the run and killed after it)",
        ),
    ] = False,
    save: Annotated[bool, typer.Option(help="write benchmarks/results/<date>.json")] = True,
) -> None:
    """Every library: enqueue and drain N no-op jobs (default and tuned), then latency.

    The libraries take turns, every other round reversed; each figure is the median of
    --repeat runs with min and max, the load average read around every run. With
    --cpu-hog a busy loop in a process of its own competes for the cores during each
    latency run (its rows say `cpu_hog: true` and how much of a core it took).
    """
    from .run_peers import PeerOptions, run_peers

    names = tuple(x.strip() for x in only.split(",") if x.strip())
    unknown = [x for x in names if x not in MODULES]
    if unknown:
        raise typer.BadParameter(f"unknown libraries: {unknown}; known: {list(MODULES)}")
    names = tuple(sorted(names, key=lambda x: x != "orderflow"))
    rows = run_peers(
        PeerOptions(
            names,
            n,
            drain_timeout,
            latency_rate,
            latency_seconds,
            latency_peers,
            repeat=repeat,
            cpu_hog=cpu_hog,
        )
    )
    report.show(report.peers_table(rows), report.latency_table(rows))
    if save:
        typer.echo(f"wrote {report.write_results(rows)}")


@app.command("e2e-peers")
def e2e_peers(
    orders: Annotated[int, typer.Option(min=1, help="orders timed per run")] = 2000,
    databases: Annotated[str, typer.Option(help="sqlite,postgresql")] = "sqlite,postgresql",
    only: Annotated[
        str, typer.Option(help="comma-separated libraries, in the first round's order")
    ] = "orderflow,celery,dramatiq",
    runs: Annotated[
        int,
        typer.Option(
            min=1,
            help="rounds: the libraries take turns (A B C, then C B A, ...); every figure "
            "is the median of this many runs, with min and max (3 or more for figures)",
        ),
    ] = 3,
    warm_up: Annotated[
        int, typer.Option(min=0, help="orders run to completion before the clock starts")
    ] = 100,
    threads: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="tasks at a time per peer worker process, Celery's threads pool and "
            "Dramatiq's threads (default: each peer's better of 2 and 8 on two cores: "
            "Celery 8, Dramatiq 2)",
        ),
    ] = None,
    timeout: Annotated[
        float, typer.Option(min=1.0, help="deadline of one run, seconds (unfinished = lost)")
    ] = 300.0,
    save: Annotated[
        bool, typer.Option(help="write benchmarks/results/<date>-e2e-peers.json")
    ] = True,
) -> None:
    """The same order workflow on orderflow, Celery and Dramatiq: orders/s, CPU per order,
    effects applied twice and orders lost, each library with 4 worker processes on the
    same Redis and the same database, taking turns."""
    from .e2e_contenders import CONTENDERS
    from .e2e_db import DATABASES
    from .e2e_peers import E2EPeerOptions, run_e2e_peers

    names = tuple(x.strip() for x in only.split(",") if x.strip())
    unknown = [x for x in names if x not in CONTENDERS]
    if unknown or not names:
        raise typer.BadParameter(f"unknown libraries: {unknown}; known: {list(CONTENDERS)}")
    chosen = tuple(x.strip() for x in databases.split(",") if x.strip())
    wrong = [x for x in chosen if x not in DATABASES]
    if wrong or not chosen:
        raise typer.BadParameter(f"unknown databases: {wrong}; known: {list(DATABASES)}")
    rows = run_e2e_peers(
        E2EPeerOptions(
            libraries=names,
            databases=chosen,
            orders=orders,
            runs=runs,
            warm_up=warm_up,
            threads=threads,
            timeout=timeout,
        )
    )
    report.show(*report.e2e_peers_tables(rows))
    for line in report.e2e_peers_summary(rows):
        typer.echo(line)
    if save:
        typer.echo(f"wrote {report.write_results(rows, 'e2e-peers')}")


@app.command()
def soak(
    minutes: Annotated[float, typer.Option(min=0.5, help="length of the paced run")] = 30.0,
    rate: Annotated[
        float | None,
        typer.Option(
            min=0.1, help="orders/s to place (default: --load-fraction of the measured drain rate)"
        ),
    ] = None,
    load_fraction: Annotated[
        float, typer.Option(min=0.01, max=1.0, help="share of the measured drain rate placed")
    ] = 0.5,
    probe: Annotated[
        int, typer.Option(min=100, help="orders placed at once to measure the drain rate")
    ] = 2000,
    database: Annotated[str, typer.Option(help="sqlite or postgresql")] = "sqlite",
    scale: Annotated[float, typer.Option(min=0.01, help="TPC-H scale factor")] = 0.1,
    interval: Annotated[
        float | None,
        typer.Option(
            min=5.0, help="seconds between samples (default: 60; an eighth of a shorter run)"
        ),
    ] = None,
    retention: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="seconds finished-job records and idempotency keys are kept (default: a "
            "sixth of the run, at least 30)",
        ),
    ] = None,
    save: Annotated[bool, typer.Option(help="write benchmarks/results/<date>-soak.json")] = True,
) -> None:
    """orderflow at half its measured drain rate for --minutes: each worker's RSS and open
    files and Redis's used_memory every minute (--interval), and whether their growth
    stays within the documented bounds (benchmarks/soak_bounds.py). Exit 1 when it does not.
    """
    from .e2e_db import DATABASES
    from .soak import SoakOptions, run_soak

    if database not in DATABASES:
        raise typer.BadParameter(f"use one of {list(DATABASES)}", param_hint="--database")
    rows, verdict = run_soak(
        SoakOptions(
            minutes=minutes,
            rate=rate,
            load_fraction=load_fraction,
            probe=probe,
            database=database,
            scale=scale,
            interval=interval,
            retention=retention,
        )
    )
    report.show(report.soak_table(rows))
    outcome = {True: "within the bounds", False: "OVER a bound", None: "not judged"}
    typer.echo(f"growth {outcome[verdict.within]}:")
    for line in verdict.lines:
        typer.echo(f"  {line}")
    if save:
        typer.echo(f"wrote {report.write_results(rows, 'soak')}")
    if verdict.within is False:
        raise typer.Exit(1)


@app.command()
def api(
    databases: Annotated[str, typer.Option(help="sqlite,postgresql")] = "sqlite,postgresql",
    rates: Annotated[str, typer.Option(help="offered orders/s, one run each")] = "100,250,500",
    seconds: Annotated[float, typer.Option(help="length of one run, seconds")] = 20.0,
    workers: Annotated[bool, typer.Option(help="one worker process per step runs")] = True,
    save: Annotated[bool, typer.Option(help="write benchmarks/results/<date>-api.json")] = True,
    client: Annotated[
        str,
        typer.Option(
            help="load generator: wrk (Debian package wrk; the retried 10% from threads "
            "of this process) or locust"
        ),
    ] = "wrk",
) -> None:
    """Orders/s and p50/p99 through POST /api/v1/orders at increasing rates (wrk or locust;
    10% retried with the same key after a client-side timeout), the duplicate orders, and
    `orders place` placing as many in the same run. Needs `uv sync --group bench`."""
    from .api import CLIENTS, run_api

    if client not in CLIENTS:
        raise typer.BadParameter(f"one of {', '.join(CLIENTS)}", param_hint="--client")

    rows = [
        row
        for db in databases.split(",")
        if db.strip()
        for row in run_api(
            db.strip(),
            [float(r) for r in rates.split(",") if r.strip()],
            seconds,
            workers=workers,
            client=client,
        )
    ]
    report.show(
        report.generic_table(
            "HTTP API: orders placed over POST /api/v1/orders", rows, COLUMNS["api"]
        )
    )
    if save:
        typer.echo(f"wrote {report.write_results(rows, 'api')}")


@app.command()
def markdown(
    files: Annotated[list[str], typer.Argument(help="results JSON files")],
) -> None:
    """Print saved results as Markdown tables (for docs/performance.md)."""
    import json

    from . import markdown as md

    for name in files:
        with open(name) as fh:
            rows = json.load(fh)
        kinds = {r["kind"] for r in rows}
        if "throughput" in kinds:
            typer.echo(md.peers_markdown(rows) + "\n")
        if "latency" in kinds:
            typer.echo(md.latency_markdown(rows) + "\n")
        for kind in sorted(kinds - {"throughput", "latency"}):
            chosen = [r for r in rows if r["kind"] == kind]
            typer.echo(md.fields_markdown(chosen, COLUMNS[kind]) + "\n")


COLUMNS = {
    "api": [
        "variant",
        "accepted_per_second",
        "p50_ms",
        "p99_ms",
        "failures",
        "retried_after_timeout",
        "duplicate_orders",
        "keys_given_up",
        "web_cpu_ms_per_order",
        "workers_cpu_ms_per_order",
        "machine_cpu_ms_per_order",
        "machine_busy_share",
        "cli_place_per_second",
    ],
    "scaling": ["processes", "batch_size", "concurrency", "drain_rate"],
    "depth": [
        "waiting",
        "enqueue_us_per_job",
        "bulk_enqueue_us_per_job",
        "drain_us_per_job",
        "redis_bytes_per_waiting_job",
    ],
    "durability": [
        "appendfsync",
        "enqueue_rate",
        "bulk_enqueue_rate",
        "drain_rate",
        "redis_benchmark_lpush_c1_rps",
        "redis_benchmark_lpush_rps",
        "redis_benchmark_lpush_p16_rps",
    ],
    "e2e": [
        "variant",
        "n",
        "orders_done",
        "seconds",
        "orders_per_second",
        "db_commits_per_order",
        "pg_xact_commit_per_order",
    ],
    "e2e-peer": [
        "database",
        "library",
        "version",
        "runs",
        "orders_per_second",
        "orders_per_second_min",
        "orders_per_second_max",
        "cpu_ms_per_order",
        "own_cpu_ms_per_order",
        "duplicate_runs_max",
        "lost_orders_max",
        "missing_effects_max",
        "loadavg_1m_before",
        "loadavg_1m_after",
    ],
    "soak": [
        "database",
        "minutes",
        "drain_rate",
        "rate",
        "achieved_rate",
        "retention_seconds",
        "placed",
        "max_backlog",
        "within_bounds",
        "loadavg_1m_before",
        "loadavg_1m_after",
    ],
    "soak-sample": [
        "elapsed_seconds",
        "placed",
        "backlog",
        "redis_used_memory_mb",
        "redis_keys",
        "loadavg_1m",
    ],
}

from .cli_orderflow import orderflow_app  # noqa: E402

app.add_typer(orderflow_app, name="orderflow")
