"""``orders queue``: prove every step job is somewhere and repair orphans (``audit``);
pause and resume a step's queue (``pause`` / ``resume``, ADR 0031); rate-limit it
(``limit``, ADR 0032); cap the jobs one customer runs at once (``cap``, ADR 0033)."""

from __future__ import annotations

import getpass
import socket
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from orders.cli.context import audit_row, console, emit_json, fail, handle_errors, make_app
from orders.cli.render import say, when
from orders.domain.steps import ALL_STEPS
from reliable_queue import audit as run_audit
from reliable_queue.errors import QueueLimitError
from reliable_queue.limits import MAX_KEY_CAP
from reliable_queue.pausing import MAX_BY_CHARS, MAX_REASON_CHARS
from reliable_queue.rate_limits import parse_spec

queue_cli = typer.Typer(
    help="Checks and flow control of the step queues: audit, pause, resume, limit, cap.",
    no_args_is_help=True,
)


def _chosen(step: str | None, every: bool) -> list[str]:
    """The steps a pause or resume acts on; exit 2 for an unknown step, or for both or
    neither of STEP and --all."""
    if step is not None and every:
        fail("give a STEP or --all, not both", code=2)
    if step is None and not every:
        fail(f"give a STEP ({', '.join(ALL_STEPS)}) or --all", code=2)
    if step is not None and step not in ALL_STEPS:
        fail(f"unknown step {step!r}; choose from {', '.join(ALL_STEPS)}", code=2)
    return list(ALL_STEPS) if every else [step or ""]


def _operator() -> str:
    """``user@host`` of whoever runs the command, cut to the bound of a pause's ``by``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for the uid (a container)
        user = "?"
    return f"{user}@{socket.gethostname()}"[:MAX_BY_CHARS]


@queue_cli.command("pause")
@handle_errors
def pause(
    step: Annotated[str | None, typer.Argument(help="The step whose queue to pause.")] = None,
    every: Annotated[bool, typer.Option("--all", help="Pause every step's queue.")] = False,
    reason: Annotated[
        str | None,
        typer.Option(
            "--reason",
            help=f"Why (shown by status, watch and the dashboard; at most"
            f" {MAX_REASON_CHARS} characters).",
        ),
    ] = None,
) -> None:
    """Pause STEP's queue (or every queue with --all): from the moment this returns no
    worker starts a job of it, also one already waiting on the queue. Running jobs finish
    and settle as usual; delayed jobs come due and wait; orders are still placed and
    their steps queued. `orders queue resume` ends it. Exit 2 for bad usage."""
    steps = _chosen(step, every)
    if reason is not None and len(reason) > MAX_REASON_CHARS:
        fail(f"--reason is at most {MAX_REASON_CHARS} characters, not {len(reason)}", code=2)
    by = _operator()
    app = make_app()
    try:
        for name in steps:
            state = app.queues[name].pause(reason=reason, by=by)
            say("paused {} (since {}, by {})", name, when(state.since), state.by)
        audit_row(app, "pause", {"steps": steps, "reason": reason}, count=len(steps))
    finally:
        app.close()


@queue_cli.command("resume")
@handle_errors
def resume(
    step: Annotated[str | None, typer.Argument(help="The step whose queue to resume.")] = None,
    every: Annotated[bool, typer.Option("--all", help="Resume every step's queue.")] = False,
) -> None:
    """Resume STEP's paused queue (or every queue with --all): idle workers are woken and
    start its waiting jobs. Resuming a queue that is not paused changes nothing. Exit 2
    for bad usage."""
    steps = _chosen(step, every)
    app = make_app()
    try:
        resumed = 0
        for name in steps:
            was = app.queues[name].resume()
            resumed += was
            say("resumed {}" if was else "{} was not paused", name)
        audit_row(app, "resume", {"steps": steps}, count=resumed)
    finally:
        app.close()


@queue_cli.command("limit")
@handle_errors
def limit(
    step: Annotated[str, typer.Argument(help="The step whose queue to rate-limit.")],
    spec: Annotated[
        str | None,
        typer.Argument(help="N/s, N/m, N/h or N/Ks: at most N job starts per interval."),
    ] = None,
    clear: Annotated[bool, typer.Option("--clear", help="Remove the step's limit.")] = False,
) -> None:
    """Limit STEP's queue to N job starts per interval, across every worker and host on
    the Redis (e.g. `orders queue limit notification 200/s`), or remove the limit with
    --clear. It applies from the next fetch; deferred jobs wait, with no attempt charged.
    Exit 2 for bad usage (an unknown step, a limit that is not N/unit with N >= 1)."""
    if step not in ALL_STEPS:
        fail(f"unknown step {step!r}; choose from {', '.join(ALL_STEPS)}", code=2)
    if clear == (spec is not None):
        fail("give a limit (N/s, N/m) or --clear, not both or neither", code=2)
    rate = None
    if spec is not None:
        try:
            rate = parse_spec(spec)
        except QueueLimitError as exc:
            fail(str(exc), code=2)
    app = make_app()
    try:
        queue = app.queues[step]
        if rate is None:
            was = queue.clear_limit()
            audit_row(app, "limit", {"step": step, "limit": None}, count=int(was))
            say("cleared the limit of {}" if was else "{} had no limit", step)
        else:
            queue.set_limit(rate.n, rate.per_ms / 1000.0)
            audit_row(app, "limit", {"step": step, "limit": rate.text()}, count=1)
            say("limited {} to {}", step, rate.text())
    finally:
        app.close()


@queue_cli.command("cap")
@handle_errors
def cap(
    step: Annotated[str, typer.Argument(help="The step whose queue to cap.")],
    k: Annotated[
        str | None,
        typer.Argument(help=f"At most K jobs of one customer leased at once (1..{MAX_KEY_CAP})."),
    ] = None,
    clear: Annotated[bool, typer.Option("--clear", help="Remove the step's cap.")] = False,
) -> None:
    """Let at most K jobs of one customer (the fairness key) of STEP's queue run at once,
    across every worker and host on the Redis (e.g. `orders queue cap logistics 2`), or
    remove the cap with --clear. It applies from the next fetch; a customer's other jobs
    wait, first of their customer. Exit 2 for bad usage (an unknown step, a K that is
    not a whole number 1..100000, both K and --clear or neither)."""
    if step not in ALL_STEPS:
        fail(f"unknown step {step!r}; choose from {', '.join(ALL_STEPS)}", code=2)
    if clear == (k is not None):
        fail("give a cap K or --clear, not both or neither", code=2)
    wanted = None
    if k is not None:
        if not (k.isascii() and k.isdigit() and 1 <= int(k) <= MAX_KEY_CAP):
            fail(f"a cap is a whole number 1..{MAX_KEY_CAP}, not {k!r}", code=2)
        wanted = int(k)
    app = make_app()
    try:
        queue = app.queues[step]
        if wanted is None:
            was = queue.clear_key_cap()
            audit_row(app, "cap", {"step": step, "cap": None}, count=int(was))
            say("cleared the cap of {}" if was else "{} had no cap", step)
        else:
            queue.set_key_cap(wanted)
            audit_row(app, "cap", {"step": step, "cap": wanted}, count=1)
            say("capped {} at {} job(s) per customer at once", step, str(wanted))
    finally:
        app.close()


@queue_cli.command("audit")
@handle_errors
def audit(
    repair: Annotated[
        bool,
        typer.Option(
            "--repair",
            help="Put orphans back on ready (the attempt is not counted; the job's failure"
            " info says orphan_repaired).",
        ),
    ] = False,
    step: Annotated[
        str | None, typer.Option("--step", help="Only this step's queue (default: all).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
) -> None:
    """Walk every record and structure of the step queues in bounded steps and report
    orphans (a job record in no structure: nothing would ever run it), doubles (a job
    in two structures), members without a record, stale entries of the priority and
    fairness structures (a leaked running slot, a flow value without its job; --repair
    drops them) and unsound flow-control keys (a paused key of another type). Exit
    status 1 when something is found and left unrepaired, else 0. Workers run the same
    audit with repair every ten minutes."""
    if step is not None and step not in ALL_STEPS:
        fail(f"unknown step {step!r}; choose from {', '.join(ALL_STEPS)}", code=2)
    app = make_app()
    try:
        reports = [run_audit(app.queues[s], repair=repair) for s in ([step] if step else ALL_STEPS)]
    finally:
        app.close()
    if as_json:
        emit_json([r.as_dict() for r in reports])
    else:
        table = Table(title="queue audit")
        for col in ("queue", "orphans", "repaired", "doubles", "no record", "stale", "examples"):
            if col == "examples":
                table.add_column(col, overflow="fold")
            else:
                table.add_column(col, justify="left" if col == "queue" else "right")
        for r in reports:
            shown = [*r.examples["orphans"][:3], *r.examples["doubles"][:3]]
            table.add_row(
                r.queue,
                str(r.orphans),
                str(r.repaired),
                str(r.doubles),
                str(r.no_record),
                f"{r.stale} ({r.stale_repaired} dropped)" if r.stale else "0",
                escape(", ".join([*shown, *r.examples["stale"][:3]])),
            )
        console.print(table)
        for r in reports:
            for problem in r.problems:
                say("queue {}: {}", r.queue, problem, style="bold red")
    if any(
        r.orphans > r.repaired
        or r.doubles
        or r.no_record
        or r.problems
        or r.stale > r.stale_repaired
        for r in reports
    ):
        raise typer.Exit(1)
