"""``orders chaos``: kill workers and Redis while orders flow, then prove nothing was lost."""

from __future__ import annotations

import itertools
import os
import random
import shutil
import socket
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.live import Live
from rich.table import Table

from orders.app.bootstrap import App
from orders.app.run_lock import claim_run
from orders.app.settings import Settings
from orders.chaos.driver import ChaosProgress, ChaosRun
from orders.chaos.pool import WorkerPool
from orders.chaos.report import ChaosReport
from orders.chaos.setup import ChaosOptions, prepare
from orders.cli.context import (
    console,
    emit_json,
    err_console,
    fail,
    handle_errors,
    load_settings,
)
from orders.cli.options import (
    SEED_MAX,
    JsonOutput,
    Lanes,
    OrderSource,
    OrdersToPlace,
    number_option,
)
from orders.domain.steps import ALL_STEPS, COMPENSATION_STEPS, STEPS
from orders.observability.multiproc import metrics_dir
from orders.observability.readiness import cached_readiness
from orders.observability.registry import metrics_registry, serve
from orders.worker import defaults
from orders.worker.procs import start_worker
from reliable_queue.errors import QueueLimitError
from reliable_queue.limits import MAX_ATTEMPTS
from reliable_queue.rate_limits import parse_spec

MAX_SECONDS = 86_400  # upper bound of every time and count option: finite, never overflowing
WORKER_GRACE = 10.0  # seconds a SIGTERMed worker gets for its in-flight jobs


def _steps(value: str, option: str) -> tuple[str, ...]:
    chosen = tuple(s.strip() for s in value.split(",") if s.strip())
    unknown = [s for s in chosen if s not in ALL_STEPS]
    if unknown:
        raise typer.BadParameter(
            f"unknown step(s) {', '.join(unknown)}; choose from {', '.join(ALL_STEPS)}",
            param_hint=option,
        )
    return chosen


#: The command's options that are not the run's (:class:`ChaosOptions`): where and how
#: to report it.
_NOT_RUN_OPTIONS = ("data_dir", "keep", "as_json", "metrics_port", "metrics_host")
#: Options naming steps, as a comma list -> their flag.
_STEP_LISTS = {
    "fail_steps": "--fail-steps",
    "slow_steps": "--slow-steps",
    "replay_steps": "--replay-steps",
    "freeze_steps": "--freeze-steps",
}
#: Options naming one step ('' for none) -> their flag.
_ONE_STEP = {
    "crash_once_step": "--crash-once",
    "poison_step": "--poison",
    "hang_step": "--hang",
    "pause_step": "--pause",
    "limit_step": "--limit-step",
}


def chaos_options(params: Mapping[str, Any]) -> ChaosOptions:
    """The run's options from the command's parameters (named as the fields of
    :class:`ChaosOptions`), step lists parsed.

    Args:
        params: the parameters typer parsed (``typer.Context.params``).

    Raises:
        typer.BadParameter: an unknown step, or options that contradict each other
            (the message names the option).
    """
    values = {k: v for k, v in params.items() if k not in _NOT_RUN_OPTIONS}
    for name, flag in _STEP_LISTS.items():
        values[name] = _steps(values[name], flag)
    for name, flag in _ONE_STEP.items():
        values[name] = (_steps(values[name], flag) or (None,))[0]
    if values["source"] not in ("tpch", "random"):
        raise typer.BadParameter("use tpch or random", param_hint="--source")
    if values["appendfsync"] not in ("everysec", "always"):
        raise typer.BadParameter("use everysec or always", param_hint="--appendfsync")
    if values["hang_step"] and values["hang_ms"] <= values["time_limit"] * 1000:
        raise typer.BadParameter("a hang must outlast the time limit", param_hint="--hang-ms")
    freeze = values["freeze_seconds"]
    if freeze is not None and freeze <= values["lease_seconds"]:
        raise typer.BadParameter("a freeze must outlast the lease", param_hint="--freeze-seconds")
    if values["pause_every"] and values["pause_seconds"] >= values["pause_every"]:
        raise typer.BadParameter("a pause must end before the next", param_hint="--pause-seconds")
    try:
        parse_spec(values["limit"])
    except QueueLimitError as exc:
        raise typer.BadParameter(str(exc), param_hint="--limit") from None
    try:
        return ChaosOptions(**values)
    except ValueError as exc:  # a rule of the run the checks above do not name
        raise typer.BadParameter(str(exc)) from None


def _check_metrics_address(host: str, port: int) -> None:
    """Exit 2, before anything starts, when ``host:port`` is no address or cannot be bound
    now (in use): binding it again once the run's services are up then rarely fails."""
    try:
        family, kind, _, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (socket.gaierror, UnicodeError) as exc:
        fail(f"--metrics-host {host} is not an address: {exc.args[-1]}", code=2)
    with socket.socket(family, kind) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server does
        try:
            probe.bind(address)
        except OSError as exc:
            fail(f"cannot serve /metrics on {host}:{port}: {exc.strerror or exc}", code=2)


def _serve_metrics(app: App, host: str, port: int) -> Any:
    """Serve the run's ``/metrics`` and ``/readyz`` from this process (the driver's
    application reads Redis through an explicit URL: it never restarts the server the
    run crashed). Exit 2 when the port cannot be bound."""
    registry = metrics_registry(app, multiproc=metrics_dir(app.settings))
    try:
        server = serve(registry, host, port, {"/readyz": cached_readiness(app)})
    except OSError as exc:
        fail(f"cannot serve /metrics on {host}:{port}: {exc.strerror or exc}", code=2)
    err_console.print(f"metrics on http://{host}:{server.server_port}/metrics", highlight=False)
    return server


def _counts(values: Any) -> str:
    if not isinstance(values, dict):
        return str(values)
    return ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in values.items()) or "none"


def _progress_table(p: ChaosProgress) -> Table:
    down = " — [bold red]Redis down[/]" if p.redis_down else ""
    table = Table(
        title=f"orders chaos — {p.phase} — {p.elapsed:5.1f}s — placed {p.placed}{down}",
        caption=f"orders: {_counts(p.orders)}; faults: {_counts(p.faults)}",
    )
    for col in ("step", "ready", "delayed", "active", "dead"):
        table.add_column(col, justify="right")
    for step in ALL_STEPS:
        q = p.queues.get(step, {})
        table.add_row(step, *(str(q.get(k, "-")) for k in ("ready", "delayed", "active", "dead")))
    return table


def _rows(table: Table, values: dict[str, Any], skip: tuple[str, ...] = ()) -> None:
    for key, value in values.items():
        if key not in skip:
            table.add_row(key.replace("_", " "), str(value))


def print_report(report: ChaosReport) -> None:
    """The report as rich tables, then the verdict."""
    faults = Table(title="faults injected")
    for col in ("fault", "setting", "happened"):
        faults.add_column(col, justify="right" if col == "happened" else "left")
    for t in report.faults:
        if not t.enabled:
            shown = "off"
        elif t.skipped:
            shown = f"skipped: {t.skipped}"
        else:
            shown = str(t.count) if t.count else "[bold red]0 — never happened[/]"
        faults.add_row(t.kind, t.setting if t.enabled else "-", shown)
    console.print(faults)
    summary = Table(title="what the system did", show_header=False)
    _rows(summary, report.orders)
    _rows(summary, report.delivery, skip=("per_step",))
    _rows(summary, report.timing)
    _rows(summary, {f"workers {k}": v for k, v in sorted(report.workers.items())})
    _rows(summary, {f"redis {k}": v for k, v in report.redis.items()})
    console.print(summary)
    d = report.delivery
    applied = d["deliveries"] - d["duplicates_absorbed"]
    console.print(
        f"deliveries {d['deliveries']} = effects applied {applied} + duplicates absorbed "
        f"{d['duplicates_absorbed']}; the database holds {d['distinct_effects']} distinct "
        "effects (a worker killed before it reported takes its last counts with it, so "
        "applied may be a little lower)",
        highlight=False,
        markup=False,
    )
    steps = Table(title="per step")
    for col in ("step", "applied", "duplicates absorbed", "distinct effects", "retries"):
        steps.add_column(col, justify="right")
    for step, row in report.delivery["per_step"].items():
        steps.add_row(step, *(str(v) for v in row.values()))
    console.print(steps)
    if report.ok:
        console.print(
            f"[bold green]every invariant holds[/] ({len(report.invariants)} checked) and "
            "every enabled fault happened."
        )
        return
    console.print(f"[bold red]{len(report.findings)} finding(s):[/]")
    for finding in report.findings[:50]:
        console.print(f"  {finding}", highlight=False)
    if len(report.findings) > 50:
        console.print(f"  ... and {len(report.findings) - 50} more")


@handle_errors
def chaos(
    ctx: typer.Context,
    orders: OrdersToPlace = 1200,
    rate: Annotated[
        float, number_option(min=0.1, max=10_000.0, help="Orders placed per second.")
    ] = 30.0,
    source: OrderSource = "tpch",
    out_of_stock_share: Annotated[
        float,
        number_option(
            min=0.0,
            max=1.0,
            help="Share of the TPC-H orders made to run out of stock (parts they need are "
            "emptied before the run).",
        ),
    ] = 0.05,
    cancel: Annotated[
        int,
        typer.Option(
            min=0,
            max=MAX_SECONDS,
            help="Orders cancelled in flight, spread over the chaos window (their finished "
            "steps are compensated under the same faults).",
        ),
    ] = 12,
    workers_per_step: Annotated[
        int,
        typer.Option(
            min=1, max=16, help="Worker processes per step (and for the compensating steps)."
        ),
    ] = 2,
    concurrency: Lanes = 2,
    batch_size: Annotated[
        int,
        typer.Option(
            min=1, max=1000, help="Jobs leased per fetch per worker lane (as `orders worker`)."
        ),
    ] = defaults.BATCH_SIZE,
    kill_every: Annotated[
        float,
        number_option(
            max=MAX_SECONDS, min=0, help="SIGKILL a random worker every S seconds (0: off)."
        ),
    ] = 4.0,
    term_every: Annotated[
        float,
        number_option(
            max=MAX_SECONDS, min=0, help="SIGTERM a worker holding a job every S seconds (0: off)."
        ),
    ] = 10.0,
    freeze_every: Annotated[
        float,
        number_option(
            max=MAX_SECONDS,
            min=0,
            help="SIGSTOP a random worker every S seconds for --freeze-seconds, then SIGCONT "
            "it (0: off).",
        ),
    ] = 9.0,
    freeze_seconds: Annotated[
        float | None,
        number_option(
            min=0.1,
            max=MAX_SECONDS,
            help="How long a frozen worker stays stopped; must outlast --lease (default: "
            "twice the lease plus 1 s).",
        ),
    ] = None,
    freeze_in_tx_rate: Annotated[
        float,
        number_option(
            min=0,
            max=1,
            help="Share of the units of work of --freeze-steps that stop their own worker "
            "inside the write transaction, right before the commit (thawed as above).",
        ),
    ] = 0.03,
    freeze_steps: Annotated[
        str, typer.Option(help="Steps whose units of work may freeze in a transaction.")
    ] = "stock",
    pause_step: Annotated[
        str,
        typer.Option(
            "--pause",
            help="Step whose queue is paused over and over ('': off); none of its jobs may "
            "start while it is paused.",
        ),
    ] = "points",
    pause_every: Annotated[
        float,
        number_option(min=0, max=MAX_SECONDS, help="Pause that queue every S s (0: off)."),
    ] = 8.0,
    pause_seconds: Annotated[
        float,
        number_option(
            min=0.1, max=MAX_SECONDS, help="How long each pause lasts (below --pause-every)."
        ),
    ] = 2.0,
    limit_step: Annotated[
        str,
        typer.Option(
            "--limit-step", help="Step whose queue is rate-limited through the run ('': off)."
        ),
    ] = "notification",
    limit: Annotated[
        str, typer.Option("--limit", help="That queue's rate limit: N/s, N/m or N/Ks.")
    ] = "3/s",
    redis_kill_every: Annotated[
        float,
        number_option(
            max=MAX_SECONDS,
            min=0,
            help="SIGKILL and restart the embedded Redis every S s (0: off).",
        ),
    ] = 15.0,
    redis_down: Annotated[
        float, number_option(max=MAX_SECONDS, min=0, help="Seconds Redis stays down per crash.")
    ] = 1.0,
    appendfsync: Annotated[
        str, typer.Option(help="AOF fsync policy of the embedded Redis: everysec or always.")
    ] = "everysec",
    lose_window: Annotated[
        float | None,
        number_option(
            min=0,
            max=60,
            help="Seconds of AOF writes dropped at each Redis crash, as a power loss would "
            "(default: 1 with everysec, 0 with always).",
        ),
    ] = None,
    fail_rate: Annotated[
        float, number_option(min=0, max=0.95, help="Transient handler failure rate.")
    ] = 0.3,
    fail_steps: Annotated[str, typer.Option(help="Steps that fail transiently (comma list).")] = (
        ",".join(("notification", *COMPENSATION_STEPS))
    ),
    slow_rate: Annotated[
        float, number_option(min=0, max=1, help="Share of runs that stall past their lease.")
    ] = 0.02,
    slow_ms: Annotated[
        int, typer.Option(max=MAX_SECONDS, min=0, help="Length of such a stall, ms.")
    ] = 5000,
    slow_steps: Annotated[str, typer.Option(help="Steps with stalls (comma list).")] = "points",
    crash_once_step: Annotated[
        str,
        typer.Option(
            "--crash-once", help="Step whose handler kills its own process once ('' : off)."
        ),
    ] = "logistics",
    poison_step: Annotated[
        str,
        typer.Option(
            "--poison",
            help="Step that gets a poison job, whose every run kills its worker process "
            "('': off). It must be dead-lettered as worker_lost, and no other job.",
        ),
    ] = "notification",
    poison_attempts: Annotated[
        int, typer.Option(min=1, max=100, help="Max attempts of the poison job.")
    ] = 3,
    hang_step: Annotated[
        str,
        typer.Option(
            "--hang",
            help="Step some of whose runs hang past the time limit with their lease kept "
            "alive ('': off). They must fail as timed_out and be retried.",
        ),
    ] = "stock",
    hang_rate: Annotated[
        float, number_option(min=0, max=1, help="Share of that step's runs that hang.")
    ] = 0.01,
    hang_ms: Annotated[
        int, typer.Option(min=1, max=MAX_SECONDS, help="Length of that hang, ms.")
    ] = 6000,
    time_limit: Annotated[
        float,
        number_option(
            min=0.1, max=MAX_SECONDS, help="The workers' step time limit for the run, seconds."
        ),
    ] = 3.0,
    replay_every: Annotated[
        float,
        number_option(
            max=MAX_SECONDS, min=0, help="Replay finished jobs every S seconds (0: off)."
        ),
    ] = 2.0,
    replay_count: Annotated[
        int, typer.Option(max=MAX_SECONDS, min=0, help="Finished jobs per replay.")
    ] = 5,
    replay_steps: Annotated[
        str, typer.Option(help="Steps whose jobs are replayed.", show_default="every step")
    ] = ",".join(ALL_STEPS),
    evict_every: Annotated[
        float,
        number_option(
            min=0,
            max=MAX_SECONDS,
            help="Delete a queue's ready list every S seconds, as key eviction does (0: off).",
        ),
    ] = 7.0,
    lease_seconds: Annotated[
        float,
        number_option("--lease", max=MAX_SECONDS, min=0.2, help="Job lease for the run, seconds."),
    ] = 2.0,
    max_attempts: Annotated[
        int, typer.Option(max=MAX_ATTEMPTS, min=1, help="Attempts before the DLQ.")
    ] = 8,
    republish_after: Annotated[
        float,
        number_option(
            max=MAX_SECONDS, min=0.5, help="The sweep re-publishes lost steps after S seconds."
        ),
    ] = 5.0,
    settle_timeout: Annotated[
        float,
        number_option(
            max=MAX_SECONDS, min=1, help="Seconds to wait for quiescence after the faults."
        ),
    ] = 120.0,
    redrive: Annotated[
        bool, typer.Option(help="Redrive the DLQ once after quiescence, then settle again.")
    ] = True,
    seed: Annotated[
        int | None, typer.Option(min=0, max=SEED_MAX, help="Seed of the run's random choices.")
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            help="Data dir of the run (default: a fresh temporary one, removed on success)"
        ),
    ] = None,
    keep: Annotated[bool, typer.Option(help="Keep the data dir (logs, AOF, database).")] = False,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=65535,
            help="Serve the run's Prometheus /metrics (every worker's, and the Redis and "
            "database gauges) and /readyz on this port while it runs.",
        ),
    ] = None,
    metrics_host: Annotated[
        str, typer.Option(help="Address the /metrics server binds.")
    ] = "127.0.0.1",
    as_json: JsonOutput = False,
) -> None:
    """Place orders while killing workers and Redis, then prove from the database that
    no order was lost and no effect was applied twice.

    Runs on its own embedded Redis (AOF on) and SQLite file in a fresh data dir,
    unless ORDERS_REDIS_URL / ORDERS_DATABASE_URL name others (an external Redis
    is never killed). Exit status 0 only if every invariant holds and every
    enabled fault really happened; 1 otherwise, naming the order and the invariant.
    """
    options = chaos_options(ctx.params)
    if metrics_port is not None:
        _check_metrics_address(metrics_host, metrics_port)
    # the ORDERS_* settings are checked before a folder is made or Redis started:
    # a bad one is one line and exit 2, with nothing left behind
    load_settings(Settings)
    temporary = data_dir is None
    folder = Path(tempfile.mkdtemp(prefix="orders-chaos-")) if data_dir is None else data_dir
    claim_run(folder, "chaos")  # held until this process ends: a demo there is refused
    rng = random.Random(options.seed)
    with err_console.status("starting Redis, migrating, loading TPC-H (scale 0.01)..."):
        services = prepare(options, os.environ, folder)
    report: ChaosReport | None = None
    server = None
    try:
        if metrics_port is not None:
            server = _serve_metrics(services.app, metrics_host, metrics_port)
        numbers = itertools.count(1)

        def start(steps: tuple[str, ...]) -> Any:
            name = f"worker-{'-'.join(steps)}-{next(numbers)}.log"
            return start_worker(
                steps,
                env=services.env,
                log_path=services.log_dir / name,
                concurrency=options.concurrency,
                extra=("--grace", str(WORKER_GRACE), "--batch-size", str(options.batch_size)),
            )

        pool = WorkerPool(
            STEPS,
            options.workers_per_step,
            start,
            groups=[COMPENSATION_STEPS],
            rng=rng,
            term_grace=WORKER_GRACE + options.slow_ms / 1000 + 5,
            freeze_seconds=options.effective_freeze_seconds,
        )
        if as_json:
            report = ChaosRun(services, options, pool, rng=rng).run()
        else:
            with Live(console=console, refresh_per_second=4, transient=True) as live:
                report = ChaosRun(
                    services,
                    options,
                    pool,
                    rng=rng,
                    on_progress=lambda p: live.update(_progress_table(p)),
                ).run()
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
        services.close()
        if keep or not temporary or report is None or not report.ok:
            err_console.print(f"data dir kept: {folder} (worker logs in {services.log_dir})")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    if as_json:
        emit_json(report.as_dict())
    else:
        print_report(report)
    if not report.ok:
        raise typer.Exit(1)
