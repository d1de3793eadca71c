"""``python -m benchmarks orderflow ...``: the queue and the application alone."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orders.worker import defaults

from . import report

orderflow_app = typer.Typer(
    help="orderflow alone: scaling, depth, durability, end to end.", no_args_is_help=True
)

Save = Annotated[bool, typer.Option(help="write benchmarks/results/<date>-<name>.json")]


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


@orderflow_app.command()
def scaling(
    n: Annotated[int, typer.Option(help="jobs per drain")] = 20_000,
    processes: Annotated[str, typer.Option(help="worker process counts")] = "1,2,4",
    batches: Annotated[str, typer.Option(help="batch sizes")] = "1,10,100",
    concurrency: Annotated[int, typer.Option(help="lanes per process")] = 1,
    timeout: Annotated[float, typer.Option(help="bound on one drain, seconds")] = 60.0,
    repeat: Annotated[int, typer.Option(min=1, help="runs per cell; median, min and max kept")] = 3,
    save: Save = True,
) -> None:
    """Drain rate (jobs/s) by worker processes x batch size."""
    from .queue_alone import scaling as run

    rows = run(n, _ints(processes), _ints(batches), concurrency, timeout, repeat)
    report.show(
        report.range_table(
            f"Drain rate by processes and batch size (jobs/s, median of {repeat} runs (min-max))",
            rows,
            ["processes", "batch_size", "concurrency"],
            ["drain_rate"],
        )
    )
    if save:
        typer.echo(f"wrote {report.write_results(rows, 'orderflow-scaling')}")


@orderflow_app.command("script-latency")
def script_latency(
    n: Annotated[int, typer.Option(help="entries in each of ready, done and dead")] = 100_000,
) -> None:
    """Longest Redis-side run of each queue script (SLOWLOG) on a full queue; exit 1
    when one is over 50 ms."""
    from .script_latency import main

    if not main(n):
        raise typer.Exit(1)


@orderflow_app.command("startup-cpu")
def startup_cpu(
    runs: Annotated[int, typer.Option(min=1, help="counted starts per checkout")] = 5,
    steps: Annotated[str, typer.Option(help="all, or one step name")] = "all",
    database_url: Annotated[
        str | None, typer.Option(help="PostgreSQL URL (default: SQLite in the data dir)")
    ] = None,
    against: Annotated[
        list[Path] | None, typer.Option(help="another checkout (with .venv) to take turns with")
    ] = None,
    from_source: Annotated[
        bool, typer.Option("--from-source", help="no bytecode: compile every import")
    ] = False,
) -> None:
    """CPU seconds of `orders worker` from process start to its first fetch (median, min,
    max), this checkout and others taking turns, with the load average."""
    from .startup_cpu import run

    for line in run(runs, steps, database_url, against, from_source):
        typer.echo(line)


@orderflow_app.command("scrape-cost")
def scrape_cost(
    waiting: Annotated[int, typer.Option(help="jobs waiting in the queue read")] = 100_000,
    calls: Annotated[int, typer.Option(help="calls of each reading")] = 2000,
) -> None:
    """Cost of the readings behind /metrics (stats, oldest waiting job) and of a worker's
    gauge sample, µs per call."""
    from .scrape_cost import main

    main(waiting, calls)


@orderflow_app.command("presence-cost")
def presence_cost(
    n: Annotated[int, typer.Option(help="jobs per drain")] = 20_000,
    batch: Annotated[int, typer.Option(help="batch size of the draining worker")] = 10,
    repeat: Annotated[int, typer.Option(min=1, help="drains with and without, each")] = 5,
    calls: Annotated[int, typer.Option(help="publishes and readings timed")] = 2000,
    registered: Annotated[int, typer.Option(min=1, help="workers in the view read")] = 50,
    timeout: Annotated[float, typer.Option(help="bound on one drain, seconds")] = 120.0,
) -> None:
    """Drain rate with the workers' presence on and off (interleaved), and the cost of one
    publish and one reading of the workers view, µs per call (ADR 0043)."""
    from .presence_cost import main

    main(n, batch, repeat, calls, registered, timeout)


@orderflow_app.command()
def depth(
    waiting: Annotated[
        str, typer.Option(help="jobs waiting (each at least 2)")
    ] = "1000,100000,1000000",
    probe: Annotated[
        int, typer.Option(help="jobs enqueued (single and bulk) and drained")
    ] = 10_000,
    batch_size: int = 100,
    concurrency: int = 2,
    timeout: float = 120.0,
    repeat: Annotated[
        int, typer.Option(min=1, help="probes per depth; median, min and max kept")
    ] = 3,
    save: Save = True,
) -> None:
    """Per-job enqueue/drain time (µs, median of --repeat probes) and Redis bytes per
    waiting job as the queue grows."""
    from .queue_alone import depth as run

    depths = _ints(waiting)
    if any(d < 2 for d in depths):
        raise typer.BadParameter("every depth must be at least 2 jobs", param_hint="--waiting")
    rows = run(depths, probe, batch_size, concurrency, timeout, repeat)
    report.show(
        report.range_table(
            f"Per-job cost with jobs waiting (µs per job, median of {repeat} probes "
            "(min-max); bytes per waiting job)",
            rows,
            ["waiting", "redis_bytes_per_waiting_job"],
            ["enqueue_us_per_job", "bulk_enqueue_us_per_job", "drain_us_per_job"],
        )
    )
    if save:
        typer.echo(f"wrote {report.write_results(rows, 'orderflow-depth')}")


@orderflow_app.command()
def durability(
    n: Annotated[int, typer.Option(help="jobs per run")] = 20_000,
    batch_size: int = 100,
    concurrency: int = 2,
    timeout: float = 120.0,
    lpush_requests: Annotated[int, typer.Option(help="redis-benchmark -n")] = 200_000,
    save: Save = True,
) -> None:
    """Enqueue and drain (jobs/s) with AOF off / everysec / always, beside redis-benchmark."""
    from .queue_alone import durability as run

    rows = run(n, batch_size, concurrency, timeout, lpush_requests)
    report.show(
        report.generic_table(
            "Durability: orderflow vs redis-benchmark LPUSH (jobs/s, requests/s)",
            rows,
            [
                "appendfsync",
                "enqueue_rate",
                "bulk_enqueue_rate",
                "drain_rate",
                "redis_benchmark_lpush_rps",
                "redis_benchmark_lpush_p16_rps",
                "redis_benchmark_lpush_c1_rps",
            ],
        )
    )
    if save:
        typer.echo(f"wrote {report.write_results(rows, 'orderflow-durability')}")


@orderflow_app.command()
def e2e(
    orders: Annotated[int, typer.Option(help="orders to place")] = 2000,
    databases: Annotated[str, typer.Option(help="sqlite,postgresql")] = "sqlite,postgresql",
    concurrency: Annotated[
        int, typer.Option(help="lanes per worker (default: the CLI's)")
    ] = defaults.CONCURRENCY,
    batch_sizes: Annotated[
        str,
        typer.Option(
            help="jobs per fetch, one run each; 'default' is the CLI's default and is "
            "recorded as the '<database> default' row (above 1 a batch is one transaction)"
        ),
    ] = "default,1",
    metrics: Annotated[
        bool, typer.Option(help="workers record metrics, as `orders worker` does by default")
    ] = True,
    timeout: Annotated[float, typer.Option(help="bound per run, seconds")] = 300.0,
    one_process: Annotated[
        bool,
        typer.Option(
            help="one worker process serves every step (`orders worker --all`), "
            "not one process per step"
        ),
    ] = False,
    warm_up: Annotated[
        int,
        typer.Option(
            min=0,
            help="orders run to completion before the clock starts, then ANALYZE on "
            "PostgreSQL (a server that has been up a minute); 0 = a cold start",
        ),
    ] = 0,
    traces: Annotated[
        str,
        typer.Option(
            help="off, or local: placement and the workers record spans in the data dir "
            "(ORDERS_TRACES=local), to measure what tracing costs per order"
        ),
    ] = "off",
    save: Save = True,
) -> None:
    """Orders/s through all four steps, and DB transactions per order."""
    from .e2e import run_e2e

    rows = [
        run_e2e(
            db.strip(),
            orders,
            concurrency,
            defaults.BATCH_SIZE if batch.strip() == "default" else int(batch),
            timeout,
            label="default" if batch.strip() == "default" else None,
            metrics=metrics,
            one_process=one_process,
            warm_up=warm_up,
            traces=traces,
        )
        for db in databases.split(",")
        if db.strip()
        for batch in batch_sizes.split(",")
        if batch.strip()
    ]
    report.show(
        report.generic_table(
            "End to end: placement to completion"
            + (
                ", one worker process for every step"
                if one_process
                else ", one worker process per step"
            ),
            rows,
            [
                "variant",
                "batch_size",
                "n",
                "orders_done",
                "seconds",
                "orders_per_second",
                "db_commits_per_order",
                "pg_xact_commit_per_order",
                "worker_cpu_ms_per_order",
                "placement_cpu_ms_per_order",
                "redis_cpu_ms_per_order",
                "postgres_cpu_ms_per_order",
                "machine_cpu_ms_per_order",
                "duplicate_runs",
            ],
        )
    )
    if save:
        typer.echo(f"wrote {report.write_results(rows, 'orderflow-e2e')}")
