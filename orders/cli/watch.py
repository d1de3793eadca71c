"""``orders watch``: a live terminal view of queues, orders, the newest dead letters and
the worker processes."""

from __future__ import annotations

import signal
import threading
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from orders.cli.context import handle_errors, make_app
from orders.cli.options import number_option
from orders.cli.render import compact_table, console, fitted_table, short_ids, text, when
from orders.cli.workers_view import workers_section
from orders.observability.multiproc import metrics_dir
from orders.observability.snapshot import Snapshot, SystemView

WATCH_WORKERS = 8
"""Most worker processes ``orders watch`` lists (the most recently heard of)."""


def _num(value: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if value is None else fmt.format(value)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}"


def render(snap: Snapshot, *, live: bool = False) -> Group:
    """Draw one snapshot: queues, orders, newest dead letters, the worker processes (and
    their busy lanes), and read errors.

    Args:
        snap: what to draw.
        live: the view refreshes (the header says how to quit).

    Returns:
        A rich renderable that fits 80 columns; text from Redis is shown as
        plain text (never markup, control characters escaped).
    """
    quit_hint = " — Ctrl-C to quit" if live else ""
    header = Text(f"orderflow — {when(snap.at, date=False)} UTC{quit_hint}", style="bold")
    queues = compact_table("queues", "jobs/s over 10 s; handler time p50/p95 in ms")
    for col in (
        "step",
        "ready",
        "delayed",
        "active",
        "dead",
        "jobs/s",
        "p50 ms",
        "p95 ms",
        "retry/min",
    ):
        queues.add_column(col, justify="left" if col == "step" else "right")
    for q in snap.queues:
        queues.add_row(
            q.name,
            str(q.ready),
            str(q.delayed),
            str(q.active),
            Text(str(q.dead), style="bold red" if q.dead else ""),
            _num(q.jobs_per_second),
            _ms(q.p50_seconds),
            _ms(q.p95_seconds),
            _num(q.retries_per_minute),
        )
    parts: list[Any] = [header, queues]
    for q in snap.queues:
        if q.paused is not None:  # who and why are untrusted text: text() escapes them
            p = q.paused
            parts.append(
                text(
                    f"paused: {q.name} since {when(p.since)} by {p.by or '-'}"
                    f" — {p.reason or '(no reason given)'}",
                    style="bold yellow",
                )
            )
        if q.rate_limit is not None:
            parts.append(text(f"limit: {q.name} {q.rate_limit.text()}", style="yellow"))
        if q.key_cap is not None:
            parts.append(text(f"cap: {q.name} {q.key_cap} per customer", style="yellow"))
    orphaned = [q for q in snap.queues if q.orphans]
    if orphaned:
        counts = ", ".join(f"{q.name} {q.orphans}" for q in orphaned)
        parts.append(
            Text(
                f"orphans (jobs in no structure, found by the audit): {counts}"
                " — run `orders queue audit --repair`",
                style="bold red",
            )
        )
    if snap.orders is not None:
        o = snap.orders
        orders = Table(title="orders", title_justify="left")
        columns = ("placed", "in progress", "completed", "out of stock", "cancelled", "blocked")
        for col in columns:
            orders.add_column(col, justify="right")
        orders.add_row(
            str(o.placed),
            str(o.in_progress),
            str(o.completed),
            str(o.out_of_stock),
            str(o.cancelled),
            Text(str(o.blocked), style="bold red" if o.blocked else ""),
        )
        parts.append(orders)
        outbox = Text(f"outbox: {o.outbox_backlog} step record(s) to publish, ")
        outbox.append(
            f"{o.outbox_unpublishable} unpublishable",
            style="bold red" if o.outbox_unpublishable else "",
        )
        parts.append(outbox)
        parts.append(
            Text(
                f"steps: {o.steps_waiting} waiting for prerequisites, "
                f"{o.steps_skipped} skipped (out of stock or cancelled)"
            )
        )
    short = short_ids(d.job_id for d in snap.newest_dead)
    rows = []
    for d in snap.newest_dead:
        order = d.payload.get("order_id") if isinstance(d.payload, dict) else None
        step = d.queue if order is None else f"{d.queue} #{order}"
        rows.append([when(d.dead_at, date=False), short[d.job_id], step, d.reason, d.error])
    if not snap.newest_dead:
        rows.append(["-", "(the dead-letter queues are empty)", "", "", ""])
    headers = ["dead at", "job id", "step #order", "reason", "error"]
    table = fitted_table(headers, rows, flex=4, title="newest dead letters", keep=(1,), drop=(0, 3))
    parts.append(table)
    if snap.workers is not None:
        parts.extend(workers_section(snap.workers, limit=WATCH_WORKERS))
    for error in snap.errors:
        parts.append(text(f"cannot read {error}", style="bold red"))
    return Group(*parts)


@handle_errors
def watch(
    interval: Annotated[
        float, number_option(min=0.2, max=60.0, help="Seconds between refreshes.")
    ] = 1.0,
    dead_letters: Annotated[
        int, typer.Option("--dead", min=0, max=50, help="Newest dead letters shown.")
    ] = 5,
    once: Annotated[
        bool, typer.Option("--once", help="Print one view (two readings apart) and exit.")
    ] = False,
) -> None:
    """Watch the system live: per step ready / delayed / active / dead, jobs/s over 10 s,
    p50/p95 handler time, retries per minute, paused queues; orders placed / in progress /
    completed / blocked; the newest dead letters; the worker processes.

    Workers: the 8 heard of last, with lanes busy / idle / abandoned and what the busy
    ones run; one that died reads as gone within one heartbeat interval.

    Ctrl-C exits (status 130). Not on a terminal (piped, redirected), each view is
    printed below the last.

    Handler times come from the worker processes of this data dir (their metrics
    folder); the rest from Redis and the database.
    """
    app = make_app()
    view = SystemView(app, multiproc=metrics_dir(app.settings), dead_limit=dead_letters)
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        if once:
            view.look()
            stop.wait(interval)
            console.print(render(view.look()))
            return
        if not console.is_terminal:  # piped or redirected: a live view would draw nothing
            while True:  # one view after another, until SIGTERM or Ctrl-C
                console.print(render(view.look()))
                if stop.wait(interval):
                    return
        first = render(view.look(), live=True)
        with Live(first, console=console, refresh_per_second=4) as live:
            while not stop.wait(interval):
                live.update(render(view.look(), live=True))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
        app.close()
