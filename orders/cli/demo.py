"""``orders demo``: the main job, with a live view and a final report."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from orders.app.bootstrap import App
from orders.app.pacing import place_paced
from orders.app.run_lock import claim_run
from orders.cli.context import emit_json, handle_errors, make_app
from orders.cli.options import (
    SEED_MAX,
    JsonOutput,
    Lanes,
    OrderSource,
    OrdersToPlace,
    number_option,
)
from orders.cli.render import compact_table, console, err_console, for_terminal
from orders.demo.driver import DemoOptions, DemoReport, Progress, demo_log_dir, run_demo
from orders.domain.steps import ALL_STEPS
from orders.sources.scarcity import Scarcity, make_scarce
from orders.worker import defaults
from reliable_queue import stats
from workflows.uow import UnitOfWork


def _progress_table(p: Progress, retried_before: dict[str, int]) -> Table:
    orders = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in sorted(p.workflows.items()))
    table = compact_table(
        f"orderflow demo — {p.elapsed:5.1f}s — orders: {orders or 'none yet'}",
        "retrying = failed, waiting for its retry; retried = retries in this run",
    )
    for col in ("step", "done", "retrying", "dead", "ready", "delayed", "active", "retried"):
        table.add_column(col, justify="left" if col == "step" else "right")
    for step in ALL_STEPS:
        s, q = p.steps.get(step, {}), p.queues.get(step, {})
        table.add_row(
            step,
            str(s.get("done", 0)),
            str(s.get("failed", 0)),
            str(s.get("dead", 0)),
            str(q.get("ready", 0)),
            str(q.get("delayed", 0)),
            str(q.get("active", 0)),
            str(q.get("counters", {}).get("retried", 0) - retried_before.get(step, 0)),
        )
    return table


def _place(app: App, options: DemoOptions, on_placed: Any) -> list[int]:
    placed: list[int] = []
    if options.source == "tpch":
        scarce(app, options.orders, options.out_of_stock_share)

    def batch(orders: list[Any]) -> None:
        placed.extend(o.order_id for o in orders)
        on_placed(len(placed))

    result = place_paced(
        app, options.orders, source=options.source, rate=options.rate, on_batch=batch
    )
    return result.order_ids


def _place_via_api(app: App, options: DemoOptions, on_placed: Any) -> list[int]:
    from orders.cli.demo_api import place_via_api

    if options.source == "tpch":
        scarce(app, options.orders, options.out_of_stock_share)
    return place_via_api(app, options, on_placed)


def violation_lines(violations: list[dict[str, Any]], shown: int = 10) -> list[str]:
    """A readable summary: counts per invariant, the first ``shown`` violations, and
    ``… and N more``.

    Args:
        violations: ``Violation.as_dict()`` items (invariant, order_id, part_id, detail).
        shown: most violations listed one by one.

    Returns:
        Lines of plain text (untrusted: escape before printing with markup).
    """
    counts: dict[str, int] = {}
    for v in violations:
        counts[str(v.get("invariant"))] = counts.get(str(v.get("invariant")), 0) + 1
    lines = [f"{name}: {n}" for name, n in sorted(counts.items(), key=lambda kv: -kv[1])]
    for v in violations[:shown]:
        subject = (
            f"order {v['order_id']}"
            if v.get("order_id") is not None
            else f"part {v.get('part_id')}"
        )
        lines.append(f"  {v.get('invariant')}: {subject}: {v.get('detail')}")
    if len(violations) > shown:
        lines.append(f"  … and {len(violations) - shown} more (--json lists them all)")
    return lines


def _invariants(app: App) -> list[dict[str, Any]]:
    from orders.app.invariants import check_invariants

    return [v.as_dict() for v in check_invariants(app.session_factory)]


def print_report(report: DemoReport) -> None:
    """The final report as rich tables."""
    summary = Table(title="orders", show_header=False)
    for key in (
        "orders_placed",
        "completed",
        "out_of_stock",
        "cancelled",
        "blocked",
        "duration_seconds",
        "orders_per_second",
    ):
        summary.add_row(key.replace("_", " "), str(getattr(report, key)))
    for reason, n in report.blocked_reasons.items():
        summary.add_row(f"  blocked on {reason}", str(n))
    console.print(summary)
    steps = Table(title="steps")
    for col in ("step", "retries", "dead-lettered", "latency p50 ms", "latency p95 ms"):
        steps.add_column(col, justify="right")
    for step in ALL_STEPS:
        lat = report.latency_ms.get(step, {})
        steps.add_row(
            step,
            str(report.retries_per_step.get(step, 0)),
            str(report.dead_per_step.get(step, 0)),
            str(lat.get("p50", "-")),
            str(lat.get("p95", "-")),
        )
    console.print(steps)
    if report.stalled:
        console.print(f"[bold red]stopped: {escape(report.stalled[0])}[/]", highlight=False)
        for line in report.stalled[1:]:
            console.print(f"  - {for_terminal(line)}", highlight=False)
    elif not report.quiescent:
        console.print("[bold red]the system did not go quiet before the timeout[/]")
    if report.violations:
        console.print(f"[bold red]{len(report.violations)} invariant violation(s):[/]")
        for line in violation_lines(report.violations):
            console.print(f"  {for_terminal(line)}", highlight=False)
    else:
        console.print(
            "[bold green]every invariant holds[/]: each order completed, out of stock, cancelled "
            "(its finished steps compensated once), or blocked with its step in the DLQ; stock "
            "conserved; one effect per step."
        )


@handle_errors
def demo(
    orders: OrdersToPlace = 2000,
    fail_rate: Annotated[
        float,
        number_option(min=0.0, max=0.9, help="Transient failure rate on notification and points."),
    ] = 0.2,
    permanent_rate: Annotated[
        float, number_option(min=0.0, max=1.0, help="Permanent failure rate on logistics (DLQ).")
    ] = 0.005,
    source: OrderSource = "tpch",
    rate: Annotated[
        float | None,
        number_option(min=1.0, max=100_000.0, help="Orders placed per second (default: unpaced)."),
    ] = None,
    concurrency: Lanes = 2,
    batch_size: Annotated[
        int,
        typer.Option(
            min=1,
            max=1000,
            help="Jobs per fetch; a fetched batch is one transaction (as `orders worker`).",
        ),
    ] = defaults.BATCH_SIZE,
    timeout: Annotated[
        float, number_option(min=1.0, max=86_400.0, help="Seconds to wait for quiescence.")
    ] = 300.0,
    stall_seconds: Annotated[
        float,
        number_option(
            min=1.0,
            max=86_400.0,
            help="Stop when no step finished for this long with work pending, and say why.",
        ),
    ] = 30.0,
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
            max=1_000_000,
            help="Orders cancelled while in flight, right after placing (their finished "
            "steps are compensated).",
        ),
    ] = 10,
    seed: Annotated[
        int | None,
        typer.Option(min=0, max=SEED_MAX, help="Seed of the choice of orders to cancel."),
    ] = None,
    via_api: Annotated[
        bool,
        typer.Option(
            "--via-api",
            help="Place the orders over HTTP (POST /api/v1/orders, an Idempotency-Key each, "
            "one in ten posted twice) instead of through `orders place`'s batches.",
        ),
    ] = False,
    as_json: JsonOutput = False,
) -> None:
    """Run TPC-H orders through stock, notification, points and logistics, with failures injected.

    Loads TPC-H (scale 0.01) if missing, starts one worker process per step,
    places the orders through the transactional outbox, cancels --cancel of them
    while they are in flight, waits until every order is completed, out of
    stock, cancelled (compensations done), or blocked with its step in the DLQ,
    and checks the invariants from the database. Exit status 0 only if every
    invariant holds. One run per data dir at a time: a second one (or an
    `orders chaos` there) is refused at once, exit 1, naming the running one.
    """
    if source not in ("tpch", "random"):
        raise typer.BadParameter("use tpch or random", param_hint="--source")
    app = make_app(auto_migrate=True)
    claim_run(app.settings.resolved_data_dir(), "demo")  # held until this process ends
    _ensure_tpch(app)
    options = DemoOptions(
        orders,
        fail_rate,
        permanent_rate,
        source,
        concurrency,
        timeout,
        rate,
        batch_size=batch_size,
        stall_seconds=stall_seconds,
        out_of_stock_share=out_of_stock_share,
        cancel=cancel,
        seed=seed,
    )
    retried_before = {s: stats(app.queues[s]).counters.get("retried", 0) for s in ALL_STEPS}
    log_dir = demo_log_dir(app)
    with Live(console=console, refresh_per_second=4, transient=as_json) as live:
        report = run_demo(
            app,
            options,
            place_orders=_place_via_api if via_api else _place,
            check_invariants=_invariants,
            on_progress=lambda p: live.update(_progress_table(p, retried_before)),
            log_dir=log_dir,
        )
    if as_json:
        emit_json(report.as_dict())
    else:
        console.print()
        print_report(report)
    app.close()
    if not report.ok:
        err_console.print(Text(f"worker logs of this run: {log_dir}"), highlight=False)
    raise typer.Exit(0 if report.ok else 1)


def scarce(app: App, orders: int, share: float) -> Scarcity:
    """Empty parts so that about ``share`` of the next ``orders`` TPC-H orders run short.

    Returns:
        What was emptied (``orders.sources.scarcity.Scarcity``).
    """
    with UnitOfWork(app.session_factory) as uow:
        result = make_scarce(uow.session, orders, share)
        uow.commit()
    return result


def _ensure_tpch(app: App) -> None:
    from orders.sources.load_lock import WAITING_MESSAGE
    from orders.sources.tpch import load_tpch

    with console.status("loading TPC-H (scale 0.01) if missing...") as status:
        load_tpch(
            app.session_factory,
            app.settings.resolved_data_dir(),
            scale=0.01,
            on_wait=lambda: status.update(WAITING_MESSAGE),
        )
