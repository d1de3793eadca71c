"""``orders explain``: everything the queue knows about one job."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from orders.cli.context import emit_json, fail, handle_errors, make_app
from orders.cli.render import fields
from reliable_queue import explain as explain_job
from reliable_queue import find_job


@handle_errors
def explain(
    job_id: Annotated[
        str,
        typer.Argument(
            help="A job id, or a unique prefix of 6+ characters (from `orders status ORDER_ID` "
            "or `orders dlq list`)."
        ),
    ],
    as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
) -> None:
    """Show one job: state, queue, attempts, lease owner and deadline, next retry
    time, idempotency key, DLQ reason and last failure.

    Finished jobs are kept for the retention window (ORDERS_* retention settings).
    """
    app = make_app()
    try:
        match = find_job(app.queues.values(), job_id)
        found = explain_job(match.queue, match.job_id)
        if found is None:  # finished and expired between the two reads
            fail(f"no job {match.job_id!r} any more (its record just expired)")
            return
        if as_json:
            emit_json(found.as_dict())
            return
        values: dict[str, Any] = found.as_dict()
        failure = values.pop("last_failure", None) or {}
        fields(values)
        if failure:  # the traceback is in `orders dlq show` (dead) or the worker's log
            fields({"last failure": {k: v for k, v in failure.items() if k != "traceback"}})
    finally:
        app.close()
