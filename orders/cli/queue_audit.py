"""``orders queue audit``: prove every step job is somewhere, and repair orphans."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from orders.cli.context import console, emit_json, fail, handle_errors, make_app
from orders.domain.steps import ALL_STEPS
from reliable_queue import audit as run_audit

queue_cli = typer.Typer(help="Checks of the step queues' Redis structures.", no_args_is_help=True)


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
    in two structures) and members without a record. Exit status 1 when something is
    found and left unrepaired, else 0. Workers run the same audit with repair every
    ten minutes."""
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
        for col in ("queue", "orphans", "repaired", "doubles", "no record", "examples"):
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
                escape(", ".join(shown)),
            )
        console.print(table)
    if any(r.orphans > r.repaired or r.doubles or r.no_record for r in reports):
        raise typer.Exit(1)
