"""``orders search``: find orders or step jobs by status, customer, step, step state, DLQ
reason, error text and time; cancel or redrive what it finds (with a dry run)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import typer

from orders.cli.context import emit_json, fail, handle_errors, make_app
from orders.cli.render import console, fitted_table, say, when
from orders.domain.search import MAX_ID
from workflows.models import DEAD_OUTCOMES

_STATUS = "placed, completed, out_of_stock, cancelled or blocked"


def _filter(values: dict[str, Any]) -> Any:
    """The one search filter, or exit 2 naming the option that is wrong."""
    from pydantic import ValidationError

    from orders.domain.search import SearchFilter

    try:
        return SearchFilter.model_validate({k: v for k, v in values.items() if v is not None})
    except ValidationError as exc:
        problems = "; ".join(
            f"--{str(e['loc'][0]).replace('_', '-')}: {e['msg']}" for e in exc.errors()
        )
        fail(f"bad filter: {problems}", code=2)


@handle_errors
def search(
    status: Annotated[str | None, typer.Option(help=f"Order status: {_STATUS}.")] = None,
    customer: Annotated[
        int | None, typer.Option(min=1, max=MAX_ID, help="The order's customer id.")
    ] = None,
    step: Annotated[str | None, typer.Option(help="A step of the order (or the job's).")] = None,
    step_state: Annotated[
        str | None, typer.Option(help="That step's state: pending, dispatched, done, dead, ...")
    ] = None,
    dlq_reason: Annotated[
        str | None,
        typer.Option(help=f"A step dead-lettered for this reason: {', '.join(DEAD_OUTCOMES)}."),
    ] = None,
    error: Annotated[
        str | None, typer.Option(help="Text in a step's last error (any case).")
    ] = None,
    since: Annotated[
        datetime | None, typer.Option(help="Placed at or after (UTC unless a zone is given).")
    ] = None,
    until: Annotated[datetime | None, typer.Option(help="Placed before.")] = None,
    jobs: Annotated[bool, typer.Option("--jobs", help="List step jobs, not orders.")] = False,
    limit: Annotated[int, typer.Option(min=1, max=500, help="Rows per page.")] = 50,
    cursor: Annotated[
        int | None,
        typer.Option(min=1, max=MAX_ID, help="The next page: the cursor the last one printed."),
    ] = None,
    cancel: Annotated[
        bool, typer.Option("--cancel", help="Cancel every placed or blocked order found.")
    ] = False,
    redrive: Annotated[
        bool, typer.Option("--redrive", help="Redrive every dead step job found.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="With --cancel / --redrive: only list.")
    ] = False,
    everything: Annotated[
        bool,
        typer.Option(
            "--all",
            help="With --cancel / --redrive and no filter: act on every order in flight / "
            "every dead job (without it, that is refused).",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
) -> None:
    """Find orders (or step jobs, --jobs) by status, customer, step, step state, DLQ
    reason, error text and placement time, newest first, from the database.

    Every filter given must hold. A page ends with the cursor of the next one
    (--cursor). --cancel or --redrive acts on everything found (up to 500; --dry-run
    lists it first) and leaves one row in `orders audit`; with no filter it also needs
    --all. Exit 2 for a bad filter, or an action with no filter and no --all.
    """
    f = _filter(
        {
            "status": status,
            "customer_id": customer,
            "step": step,
            "step_state": step_state,
            "dlq_reason": dlq_reason,
            "error": error,
            "placed_after": since,
            "placed_before": until,
        }
    )
    if cancel and redrive:
        fail("give --cancel or --redrive, not both", code=2)
    if dry_run and not (cancel or redrive):
        fail("--dry-run goes with --cancel or --redrive", code=2)
    if everything and not (cancel or redrive):
        fail("--all goes with --cancel or --redrive", code=2)
    if cancel or redrive:
        _act(f, cancel=cancel, dry_run=dry_run, everything=everything, as_json=as_json)
        return
    from orders.domain.search import search_jobs, search_orders

    app = make_app(uses_redis=False)
    try:
        with app.session_factory() as session:
            if jobs:
                page = search_jobs(session, f, limit=limit, cursor=cursor)
            else:
                page = search_orders(session, f, limit=limit, cursor=cursor)
    finally:
        app.close()
    if as_json:
        emit_json({"items": [h.as_dict() for h in page.items], "next_cursor": page.next_cursor})
        return
    if jobs:
        headers = ["step row", "order", "step", "state", "outcome", "attempts", "error"]
        rows = [
            [
                str(h.step_id),
                str(h.order_id),
                h.step,
                h.status,
                h.outcome or "",
                str(h.attempts),
                h.last_error or "",
            ]
            for h in page.items
        ]
        table = fitted_table(headers, rows, flex=6, right=(0, 1, 5), title=f"jobs ({len(rows)})")
    else:
        headers = ["order", "status", "customer", "placed (UTC)", "completed (UTC)", "blocked on"]
        rows = [
            [
                str(h.order_id),
                h.status,
                str(h.customer_id),
                when(h.placed_at),
                when(h.completed_at),
                h.blocked_step or "",
            ]
            for h in page.items
        ]
        table = fitted_table(headers, rows, flex=5, right=(0, 2), title=f"orders ({len(rows)})")
    console.print(table)
    if page.next_cursor is not None:
        say("more: the same search with --cursor {}", page.next_cursor, style="dim")


def _act(f: Any, *, cancel: bool, dry_run: bool, everything: bool, as_json: bool) -> None:
    """Run the bulk action on what ``f`` finds and say what it did (exit 2, before
    anything is opened, for an action with an empty filter and no ``--all``)."""
    from orders.app.audit import Action, os_actor
    from orders.app.bulk import UnfilteredAction, cancel_matching, check_filtered, redrive_matching

    try:
        action = Action.CANCEL if cancel else Action.REDRIVE
        check_filtered(action, f, dry_run=dry_run, everything=everything)
    except UnfilteredAction as exc:
        fail(f"no filter given: {exc}", code=2)
    app = make_app(uses_redis=not cancel)
    try:
        if cancel:
            result = cancel_matching(
                app.session_factory,
                app.publisher_if_running,
                f,
                actor=os_actor(),
                dry_run=dry_run,
                everything=everything,
                policy=app.publish_policy,
            )
        else:
            result = redrive_matching(
                app.session_factory,
                app.queues,
                f,
                actor=os_actor(),
                dry_run=dry_run,
                everything=everything,
            )
    finally:
        app.close()
    if as_json:
        emit_json(result.as_dict())
        return
    what = "order(s)" if cancel else "job(s)"
    verb = (
        ("would cancel" if cancel else "would redrive")
        if dry_run
        else ("cancelled" if cancel else "redrove")
    )
    say("{} {} {}: {}", verb, len(result.ids), what, ", ".join(result.ids) or "-")
    if result.skipped:
        say("left {}: {}", len(result.skipped), ", ".join(result.skipped))
    if result.more:
        say("more matched than one action takes (500): run it again", style="dim")
    if result.deferred:
        say(
            "publishing of {} compensating step(s) is deferred to the outbox sweep", result.deferred
        )
