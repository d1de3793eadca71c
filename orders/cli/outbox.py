"""``orders outbox``: outbox rows the queue refused — list them, retry them."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from orders.cli.context import ROW_ID_MAX, console, emit_json, fail, handle_errors, make_app
from orders.cli.render import for_terminal
from workflows.errors import RowsNotRetryable
from workflows.outbox_admin import refused_rows, retry_rows
from workflows.uow import UnitOfWork

outbox = typer.Typer(
    help="Outbox rows the queue refused: list them (with attempts, next try and reason), "
    "retry the ones given up.",
    no_args_is_help=True,
)


@outbox.command("list")
@handle_errors
def list_(
    unpublishable: Annotated[
        bool, typer.Option("--unpublishable", help="Only the rows given up.")
    ] = False,
    limit: Annotated[int, typer.Option(min=1, max=100_000, help="Most rows shown.")] = 100,
    as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
) -> None:
    """List outbox rows the queue refused: given-up (unpublishable) rows first, then
    rows still retried with backoff."""
    app = make_app()
    try:
        with UnitOfWork(app.session_factory) as uow:
            rows = refused_rows(uow.session, only_unpublishable=unpublishable, limit=limit)
    finally:
        app.close()
    if as_json:
        emit_json([row.__dict__ for row in rows])
        return
    table = Table(title=f"refused outbox rows ({len(rows)})")
    for col in ("step id", "workflow", "step", "state", "attempts", "next try (UTC)", "reason"):
        table.add_column(col)
    for row in rows:
        when = row.next_attempt_at.strftime("%H:%M:%S") if row.next_attempt_at else "-"
        table.add_row(
            str(row.step_id),
            str(row.workflow_id),
            for_terminal(row.step),
            row.status,
            str(row.attempts),
            when,
            for_terminal(row.error, 100),
        )
    console.print(table)
    if not rows:
        console.print("no refused outbox rows")


@outbox.command()
@handle_errors
def retry(
    step_ids: Annotated[
        list[int] | None,
        typer.Argument(min=1, max=ROW_ID_MAX, help="Step ids from `orders outbox list`."),
    ] = None,
    all_: Annotated[
        bool,
        typer.Option(
            "--all", help="Every unpublishable row, and every dead row whose dead letter is gone."
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
) -> None:
    """Make unpublishable rows pending again (attempts reset) and unblock their
    workflows; the outbox sweep of a running worker publishes them.

    A dead step whose dead letter Redis lost (a flush, a restore without it) is
    retried the same way, under the same idempotency key; one whose dead letter
    the queue still holds is for `orders dlq redrive`.

    Given step ids, all of them must be retryable: otherwise nothing is changed and
    the command fails (exit 1), saying why each other id was not retried.
    """
    if not step_ids and not all_:
        raise typer.BadParameter("give step ids or --all", param_hint="STEP_IDS")
    if step_ids and all_:
        raise typer.BadParameter("give step ids or --all, not both", param_hint="STEP_IDS")
    app = make_app()
    try:
        retried = retry_rows(
            app.session_factory,
            None if all_ else step_ids,
            held_keys=app.publisher.known_keys,
        )
    except RowsNotRetryable as exc:
        fail(f"{exc}; nothing was changed")
        return
    finally:
        app.close()
    if as_json:
        emit_json({"retried": retried})
    elif retried:
        console.print(
            f"{len(retried)} row(s) pending again; a running worker's sweep publishes them"
        )
    else:
        console.print("no unpublishable rows and no lost dead letters: nothing to retry")
