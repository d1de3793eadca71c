"""``orders worker``: serve step queues in this process."""

from __future__ import annotations

import socket
from typing import Annotated

import typer

from orders.cli.context import fail, handle_errors, make_app, setup_logging
from orders.cli.options import log_level_option, number_option
from orders.domain.steps import ALL_STEPS
from orders.worker import defaults
from orders.worker.runner import run_worker


@handle_errors
def worker(
    steps: Annotated[
        list[str] | None, typer.Argument(help=f"Steps to serve: {', '.join(ALL_STEPS)}.")
    ] = None,
    all_steps: Annotated[bool, typer.Option("--all", help="Serve every step.")] = False,
    concurrency: Annotated[
        int, typer.Option(min=1, max=64, help="Threads (lanes) per step.")
    ] = defaults.CONCURRENCY,
    batch_size: Annotated[
        int,
        typer.Option(
            min=1,
            max=1000,
            help="Jobs leased per fetch per lane; a fetched batch is one transaction. "
            "A job that fails, hangs past its time limit or kills the worker is charged "
            "alone, never its batch-mates.",
        ),
    ] = defaults.BATCH_SIZE,
    sweep: Annotated[bool, typer.Option(help="Also run the periodic outbox sweep.")] = True,
    grace: Annotated[
        float, number_option(min=0, max=3600.0, help="Seconds in-flight jobs get on SIGTERM.")
    ] = 10.0,
    log_level: Annotated[str, log_level_option()] = "INFO",
    metrics_port: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=65535,
            help="Serve Prometheus /metrics, and the health probes /livez and /readyz, "
            "on this port.",
        ),
    ] = None,
    metrics_host: Annotated[
        str, typer.Option(help="Address the /metrics server binds.")
    ] = "127.0.0.1",
    metrics: Annotated[
        bool, typer.Option(help="Record metrics in the data dir (for /metrics, watch, web).")
    ] = True,
    isolation: Annotated[
        str | None,
        typer.Option(
            help="Where the step handlers run: thread, or process (a child process per "
            "lane, killed at the step time limit). Default: ORDERS_STEP_ISOLATION (thread).",
        ),
    ] = None,
) -> None:
    """Run a worker for STEP... (or --all) until SIGTERM / Ctrl-C.

    Several worker processes may serve the same step. The first signal stops
    fetching and lets in-flight jobs finish within --grace seconds; a second
    signal exits at once (held jobs are reaped when their lease expires). The
    same signal again within 0.5 s is a copy (`uv run` forwards the signal its
    process group got), not a second one.

    Every worker of one data dir records its metrics in the data dir's `metrics` folder;
    --metrics-port serves all of them (and the queue and order gauges) at /metrics, with
    /livez (this worker's lanes progress) and /readyz (Redis and the database answer).

    A time limit frees a lane but cannot stop a handler stuck in one C call that holds
    the GIL; with --isolation process each lane runs its handler calls in a child
    process that is killed at the limit (docs/reliability.md).
    """
    if all_steps and steps:
        fail("give step names or --all, not both", code=2)
    chosen = list(ALL_STEPS) if all_steps else list(steps or [])
    if not chosen:
        fail("name at least one step, or use --all", code=2)
    unknown = [s for s in chosen if s not in ALL_STEPS]
    if unknown:
        fail(f"unknown step(s): {', '.join(unknown)}; choose from {', '.join(ALL_STEPS)}", code=2)
    if isolation is not None and isolation not in ("thread", "process"):
        fail(f"--isolation must be thread or process, not {isolation!r}", code=2)
    if metrics_port is not None:
        try:
            socket.getaddrinfo(metrics_host, metrics_port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as exc:
            fail(f"--metrics-host {metrics_host} is not an address: {exc.args[-1]}", code=2)
    setup_logging(log_level)
    app = make_app(worker_lanes=concurrency * len(chosen))
    try:
        run_worker(
            app,
            chosen,
            concurrency=concurrency,
            batch_size=batch_size,
            sweep=sweep,
            grace_seconds=grace,
            record_metrics=metrics,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
            isolation=isolation,
        )
    finally:
        app.close()
