"""``orders explain``: everything the queue knows about one job."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

import typer
from rich.markup import escape

from orders.cli.context import console, emit_json, fail, handle_errors, make_app
from reliable_queue import explain as explain_job


def _fmt(key: str, value: Any) -> str:
    if value is not None and key.endswith(("_at", "_deadline")) and isinstance(value, float):
        return (
            dt.datetime.fromtimestamp(value, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"
        )
    return str(value)


@handle_errors
def explain(
    job_id: Annotated[
        str, typer.Argument(help="A job id (from `orders status ORDER_ID` or `orders dlq list`).")
    ],
    as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
) -> None:
    """Show one job: state, queue, attempts, lease owner and deadline, next retry
    time, idempotency key, DLQ reason and last failure."""
    app = make_app()
    try:
        for queue in app.queues.values():
            found = explain_job(queue, job_id)
            if found is None:
                continue
            if as_json:
                emit_json(found.as_dict())
            else:
                for key, value in found.as_dict().items():
                    if key == "last_failure" and value:
                        value = {k: v for k, v in value.items() if k != "traceback"}
                    console.print(f"[bold]{key}[/]: {escape(_fmt(key, value))}", highlight=False)
            return
        fail(
            f"no job {job_id!r} in any step queue (finished jobs are kept for the retention window)"
        )
    finally:
        app.close()
