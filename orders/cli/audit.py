"""``orders audit``: the operator actions, newest first."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from orders.cli.context import emit_json, handle_errors, make_app
from orders.cli.render import console, fitted_table, when
from orders.domain.search import MAX_ID


@handle_errors
def audit(
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="Most rows shown.")] = 50,
    before: Annotated[
        int | None,
        typer.Option(min=1, max=MAX_ID, help="Only rows older than this id (the next page)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
) -> None:
    """Show the operator actions, newest first: who (token name or OS user), what, on
    which filter or ids, dry run or not, how many, the result and the request id.

    Every redrive, purge, cancel, pause, resume, limit, rebind and token change from
    the CLI, the dashboard or the API leaves one row; none holds a secret.
    """
    from orders.app.audit import recent_actions

    app = make_app(uses_redis=False)
    try:
        with app.session_factory() as session:
            rows = recent_actions(session, limit=limit, before_id=before)
    finally:
        app.close()
    if as_json:
        emit_json([r.as_dict() for r in rows])
        return
    table = fitted_table(
        ["id", "at (UTC)", "who", "from", "action", "dry run", "count", "result", "target"],
        [
            [
                str(r.id),
                when(r.at),
                r.actor,
                r.source,
                r.action,
                "yes" if r.dry_run else "",
                str(r.count),
                r.result,
                json.dumps(r.target, sort_keys=True),
            ]
            for r in rows
        ],
        flex=8,
        right=(0, 6),
        title=f"operator actions ({len(rows)})",
        drop=(5, 3, 1),
    )
    console.print(table)
