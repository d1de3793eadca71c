"""``orders status``: one order's steps, or the whole system at a glance."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any

import redis
import typer
from rich.table import Table

from orders.app.bootstrap import App
from orders.app.eviction import key_eviction_problem
from orders.app.step_jobs import step_jobs
from orders.cli.context import (
    ROW_ID_MAX,
    emit_json,
    fail,
    handle_errors,
    make_app,
)
from orders.cli.render import (
    compact_table,
    console,
    fault_summary,
    fitted_table,
    say,
    short_ids,
    text,
    warn,
    when,
)
from orders.cli.workers_view import workers_section
from orders.domain.queries import StepView, order_status, totals
from orders.domain.steps import ALL_STEPS, COMPENSATION_STEPS, STEPS
from orders.observability.workers import read_workers
from orders.worker.faults import FaultStore, describe
from orders.worker.reconcile import reconcile_dead_letters
from reliable_queue import stats
from workflows.uow import UnitOfWork


def _undoes(step: StepView) -> str | None:
    """``undoes <step>`` for a compensating step, None for a forward one."""
    return f"undoes {step.compensates}" if step.compensates else None


def _one(app: App, order_id: int, as_json: bool) -> None:
    with UnitOfWork(app.session_factory) as uow:
        view = order_status(uow.session, order_id)
    if view is None:
        fail(f"no order {order_id}")
        return
    jobs = step_jobs(app.queues, view.workflow_id, view.steps)
    job_ids = jobs.ids
    if as_json:  # the same job ids as the table: one not run yet is found in Redis
        steps = tuple(replace(s, job_id=job_ids[s.step]) for s in view.steps)
        emit_json({**replace(view, steps=steps).to_dict(), "unreadable": jobs.problems})
        return
    say("order {}: {}, workflow {}", view.order_id, view.status, view.workflow_status or "-")
    if view.blocked_step:
        say("blocked on {}: {}", view.blocked_step, view.blocked_reason, style="bold red")
    ended = f", {view.end_label()}" + (f" {when(view.completed_at)}" if view.completed_at else "")
    say("placed {}{}", when(view.placed_at), ended)
    short = short_ids(j for j in job_ids.values() if j)
    rows = [
        [
            s.step,
            s.status,
            str(s.attempts),
            short[job_ids[s.step]] if job_ids[s.step] else "?" if s.step in jobs.problems else "-",
            when(s.finished_at, date=False),
            " — ".join(x for x in (_undoes(s), s.outcome, s.last_error) if x) or "-",
        ]
        for s in view.steps
    ]
    headers = ["step", "state", "att", "job id", "finished", "outcome / last error"]
    caption = (
        "times UTC; compensating steps (after a cancellation) come last; "
        "one job in full: orders explain JOB_ID"
    )
    # a job id is never cut (a cut id may be an ambiguous prefix): on a narrow terminal
    # the finish time, then the attempts, give way first
    table = fitted_table(headers, rows, flex=5, right=(2,), caption=caption, keep=(3,), drop=(4, 2))
    if any(column.header == "att" for column in table.columns):
        table.caption = f"att = attempts; {caption}"
    console.print(table)
    warn(f"{step}: its job id is unreadable: {problem}" for step, problem in jobs.problems.items())


def _dead_without_letters(
    steps_by_state: dict[str, dict[str, int]], queues: dict[str, dict[str, Any]]
) -> dict[str, int]:
    """Step -> how many more of its steps the database holds dead than its DLQ holds
    letters (only the steps where it holds more): at least that many dead steps can no
    longer be redriven from the DLQ. A lower bound: a letter whose step is not yet marked
    dead (the reconcile runs every few seconds) hides one that is gone."""
    out: dict[str, int] = {}
    for step in ALL_STEPS:
        dead = steps_by_state.get(step, {}).get("dead", 0)
        letters = int(queues.get(step, {}).get("dead", 0) or 0)
        if dead > letters:
            out[step] = dead - letters
    return out


def _steps_table(
    title: str,
    caption: str,
    names: tuple[str, ...],
    by_state: dict[str, dict[str, int]],
    queues: dict[str, Any],
    *,
    retried: bool,
) -> Table:
    """Steps by state in the database beside their queues in Redis (80 columns: the
    compensating steps' longer names leave out the retried column)."""
    table = compact_table(title, caption)
    for col in ("step", "done", "failed", "dead", "pending", "ready", "delayed", "active"):
        table.add_column(col, justify="left" if col == "step" else "right", no_wrap=True)
    table.add_column("DLQ", justify="right")
    if retried:
        table.add_column("retried", justify="right")
    for step in names:
        st, q = by_state.get(step, {}), queues[step]
        row = [
            step,
            str(st.get("done", 0)),
            str(st.get("failed", 0)),
            str(st.get("dead", 0)),
            str(st.get("pending", 0) + st.get("dispatched", 0)),
            str(q["ready"]),
            str(q["delayed"]),
            str(q["active"]),
            str(q["dead"]),
        ]
        if retried:
            row.append(str(q["counters"].get("retried", 0)))
        table.add_row(*row)
    return table


def _faults(app: App) -> tuple[dict[str, Any], list[str]]:
    """The injected faults, described, and a note when their hash cannot be read (a key
    of another type, a value that is no fault config)."""
    try:
        return describe(FaultStore(app.redis, app.settings.queue_prefix).all()), []
    except (redis.ResponseError, ValueError) as exc:
        return {}, [f"injected faults are unreadable: {(str(exc).splitlines() or [''])[0]}"]


def _overview(app: App, as_json: bool) -> None:
    eviction = key_eviction_problem(app.redis)
    if eviction and not as_json:
        warn([eviction])
    reconcile_dead_letters(app)
    with UnitOfWork(app.session_factory) as uow:
        t = totals(uow.session)
    read = {name: stats(q) for name, q in app.queues.items()}
    queues = {name: st.as_dict() for name, st in read.items()}
    faults, unread = _faults(app)
    unread = [f"queue {n}: {p}" for n, st in read.items() for p in st.corrupt.values()] + unread
    workers = read_workers(app)
    unread += [f"workers: {note}" for note in workers.notes]
    if as_json:
        emit_json(
            {
                "orders": t.to_dict(),
                "queues": queues,
                "workers": workers.as_dict(),
                "faults": faults,
                "redis_warning": eviction,
                "unreadable": unread,
            }
        )
        return
    warn(unread)
    orders = Table(title=f"orders ({t.orders})", title_justify="left")
    orders.add_column("status")
    orders.add_column("count", justify="right")
    for status, n in sorted(t.orders_by_status.items()):
        orders.add_row(text(status), str(n))
    console.print(orders)
    console.print(
        _steps_table(
            "steps (database) and their queues (Redis)",
            "pending = not yet started; retried = retries since the queue was created",
            STEPS,
            t.steps_by_state,
            queues,
            retried=True,
        )
    )
    console.print(
        _steps_table(
            "compensating steps (they undo finished steps of a cancelled order)",
            "pending = not yet started; rows exist only for cancelled orders",
            COMPENSATION_STEPS,
            t.steps_by_state,
            queues,
            retried=False,
        )
    )
    for part in workers_section(workers):
        console.print(part)
    waiting = {s: t.steps_by_state.get(s, {}).get("waiting", 0) for s in ALL_STEPS}
    skipped = {s: t.steps_by_state.get(s, {}).get("skipped", 0) for s in ALL_STEPS}
    for label, counts in (
        ("waiting for their prerequisites", waiting),
        ("skipped (out of stock, or cancelled before they ran)", skipped),
    ):
        if any(counts.values()):
            shown = ", ".join(f"{step} {n}" for step, n in counts.items() if n)
            console.print(f"steps {label}: {shown}", highlight=False)
    timed_out = {step: queues[step]["counters"].get("timed_out", 0) for step in ALL_STEPS}
    if any(timed_out.values()):
        console.print(
            "attempts past their time limit (timed_out): "
            + ", ".join(f"{step} {n}" for step, n in timed_out.items() if n),
            highlight=False,
        )
    lettered = _dead_without_letters(t.steps_by_state, queues)
    if lettered:
        console.print(
            "[bold red]dead steps without a dead letter in Redis[/] (lost with Redis, or "
            "dropped by the DLQ's bounds): "
            + ", ".join(f"{step} {n}" for step, n in lettered.items())
            + " — `orders outbox retry --all` runs them again under their idempotency keys",
            highlight=False,
        )
    unpublishable = sum(st.get("unpublishable", 0) for st in t.steps_by_state.values())
    if unpublishable:
        console.print(
            f"[bold red]outbox: {unpublishable} step record(s) unpublishable[/] (the queue "
            "refused them; their orders are blocked): `orders outbox list`, then "
            "`orders outbox retry`",
            highlight=False,
        )
    for step in ALL_STEPS:
        found = queues[step]["audit"]
        if found.get("orphans") or found.get("doubles"):
            console.print(
                f"[bold red]queue {step}: the last audit found {found.get('orphans', 0)}"
                f" orphan(s) and {found.get('doubles', 0)} double(s)[/] — run"
                " `orders queue audit --repair`",
                highlight=False,
            )
    for step in ALL_STEPS:
        paused = read[step].paused
        if paused is not None:
            say(
                "queue {} is paused since {} by {}: {} — `orders queue resume {}` ends it",
                step,
                when(paused.since),
                paused.by or "-",
                paused.reason or "(no reason given)",
                step,
                style="bold yellow",
            )
    for step in ALL_STEPS:
        rate = read[step].rate_limit
        if rate is not None:
            say(
                "queue {} is rate-limited to {} — `orders queue limit {} --clear` removes it",
                step,
                rate.text(),
                step,
                style="yellow",
            )
    for step in ALL_STEPS:
        cap = read[step].key_cap
        if cap is not None:
            say(
                "queue {} runs at most {} job(s) per customer at once — `orders queue cap {}"
                " --clear` removes the cap",
                step,
                cap,
                step,
                style="yellow",
            )
    for step, config in faults.items():
        say("injected fault on {}: {}", step, fault_summary(config))


@handle_errors
def status(
    order_id: Annotated[
        int | None,
        typer.Argument(min=1, max=ROW_ID_MAX, help="An order id (default: the overview)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
) -> None:
    """Show ORDER_ID's steps (state, attempts, last error, times, job ids), or the overview:
    orders by status, steps by state, queue depths, DLQ sizes, the worker processes (lanes
    busy, what they run, the gone ones), paused queues (who, why, since) and injected
    faults.

    The workers section lists each worker process (steps served, lanes busy / idle /
    abandoned after a time limit, jobs done, when it was last heard of, start, state and
    why it stopped) and the batch each busy lane runs since when; a worker not heard of
    for one heartbeat interval is gone, shown with its last state (kept an hour)."""
    app = make_app()
    try:
        if order_id is None:
            _overview(app, as_json)
        else:
            _one(app, order_id, as_json)
    finally:
        app.close()
