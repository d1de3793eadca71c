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
    repeat: Annotated[int, typer.Option(help="runs per variant; best kept")] = 1,
    save: Annotated[bool, typer.Option(help="write benchmarks/results/<date>.json")] = True,
) -> None:
    """Every library: enqueue and drain N no-op jobs (default and tuned), then latency."""
    from .run_peers import PeerOptions, run_peers

    names = tuple(x.strip() for x in only.split(",") if x.strip())
    unknown = [x for x in names if x not in MODULES]
    if unknown:
        raise typer.BadParameter(f"unknown libraries: {unknown}; known: {list(MODULES)}")
    names = tuple(sorted(names, key=lambda x: x != "orderflow"))
    rows = run_peers(
        PeerOptions(
            names, n, drain_timeout, latency_rate, latency_seconds, latency_peers, repeat=repeat
        )
    )
    report.show(report.peers_table(rows), report.latency_table(rows))
    if save:
        typer.echo(f"wrote {report.write_results(rows)}")


@app.command()
def api(
    databases: Annotated[str, typer.Option(help="sqlite,postgresql")] = "sqlite,postgresql",
    rates: Annotated[str, typer.Option(help="offered orders/s, one run each")] = "100,250,500",
    seconds: Annotated[float, typer.Option(help="length of one run, seconds")] = 20.0,
    workers: Annotated[bool, typer.Option(help="one worker process per step runs")] = True,
    save: Annotated[bool, typer.Option(help="write benchmarks/results/<date>-api.json")] = True,
) -> None:
    """Orders/s and p50/p99 through POST /api/v1/orders at increasing rates (locust; 10%
    retried with the same key after a client-side timeout), the duplicate orders, and
    `orders place` placing as many in the same run. Needs `uv sync --group bench`."""
    from .api import run_api

    rows = [
        row
        for db in databases.split(",")
        if db.strip()
        for row in run_api(
            db.strip(), [float(r) for r in rates.split(",") if r.strip()], seconds, workers=workers
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
}

from .cli_orderflow import orderflow_app  # noqa: E402

app.add_typer(orderflow_app, name="orderflow")
