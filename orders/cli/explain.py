"""``orders explain``: everything the queue knows about one job."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from sqlalchemy import select

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

    For a step job, also every step of its order as the database has it: the
    forward steps (waiting, skipped...) and, after a cancellation, the
    compensating steps with the step each one undoes. Finished jobs are kept for
    the retention window (ORDERS_* retention settings).
    """
    app = make_app()
    try:
        match = find_job(app.queues.values(), job_id)
        found = explain_job(match.queue, match.job_id)
        if found is None:  # finished and expired between the two reads
            fail(f"no job {match.job_id!r} any more (its record just expired)")
            return
        steps = _order_steps(app, found.payload)
        if as_json:
            emit_json({**found.as_dict(), "order_steps": steps})
            return
        values: dict[str, Any] = found.as_dict()
        failure = values.pop("last_failure", None) or {}
        fields(values)
        if failure:  # the traceback is in `orders dlq show` (dead) or the worker's log
            fields({"last failure": {k: v for k, v in failure.items() if k != "traceback"}})
        if steps:
            fields({"order steps (database)": steps})
    finally:
        app.close()


def _order_steps(app: Any, payload: Any) -> dict[str, str]:
    """Step -> ``state (outcome)`` of the job's workflow, forward steps first; {} when the
    payload names no workflow or the database has none."""
    workflow_id = payload.get("workflow_id") if isinstance(payload, dict) else None
    if type(workflow_id) is not int or not 0 < workflow_id < 2**31:
        return {}
    from orders.domain.steps import ALL_STEPS
    from workflows.models import WorkflowStep

    with app.session_factory() as session:
        rows = session.scalars(
            select(WorkflowStep).where(WorkflowStep.workflow_id == workflow_id)
        ).all()
    rank = {name: i for i, name in enumerate(ALL_STEPS)}
    out: dict[str, str] = {}
    for row in sorted(rows, key=lambda r: (rank.get(r.step, len(rank)), r.step)):
        shown = row.status + (f" ({row.outcome})" if row.outcome else "")
        if row.compensates:
            shown += f", undoes {row.compensates}"
        out[row.step] = shown
    return out
