"""``orders cancel``: cancel an order by its customer; its finished steps are undone."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from orders.cli.context import ROW_ID_MAX, emit_json, handle_errors, make_app
from orders.cli.render import say
from orders.observability.urls import mask_urls_in


@handle_errors
def cancel(
    order_id: Annotated[int, typer.Argument(min=1, max=ROW_ID_MAX, help="The order to cancel.")],
    as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
) -> None:
    """Cancel ORDER_ID until its order completes.

    Allowed while the order is placed (in flight, or blocked): its shipment is
    dispatched when the order completes, and then it is too late.
    The order becomes `cancelled` and gets a cancellation notice; steps that had
    not run are skipped, and the ones that ran are undone by compensating steps
    (return_stock, reverse_points, cancel_shipment) that workers run like any
    step. Cancelling again changes nothing. The cancellation needs the database
    only: when Redis cannot be reached (or the embedded one is not running), the
    compensating steps are published later by a running worker's outbox sweep.
    Exit status 1 when the order is unknown, completed (too late) or ended out of
    stock.
    """
    from orders.app.audit import Action, os_actor, record
    from orders.app.cancellation import cancel_then_publish

    def audited(session: Any, result: Any) -> None:  # in the cancellation's transaction
        record(
            session,
            os_actor(),
            Action.CANCEL,
            {"order_ids": [order_id]},
            count=0 if result.already else 1,
            result="already cancelled" if result.already else "ok",
        )

    app = make_app(uses_redis=False)
    try:
        done = cancel_then_publish(
            app.session_factory,
            app.publisher_if_running,
            order_id,
            policy=app.publish_policy,
            record=audited,
            tracer=app.tracer("orders.cancellation"),
        )
    finally:
        app.close()
    result = done.result
    if as_json:
        emit_json(
            {
                "order_id": result.order_id,
                "status": "cancelled",
                "already_cancelled": result.already,
                "compensations": list(result.compensations),
                "skipped": list(result.skipped),
                "published_steps": done.published,
                "deferred_steps": done.deferred,
                "publish_error": done.publish_error and mask_urls_in(done.publish_error),
            }
        )
        return
    if result.already:
        say("order {} was already cancelled; nothing changed", order_id)
        return
    undo = ", ".join(result.compensations) or "none (no step had run)"
    say("order {} cancelled; compensations: {}", order_id, undo)
    if result.skipped:
        say("skipped before they ran: {}", ", ".join(result.skipped))
    if done.deferred:
        reason = f" ({mask_urls_in(done.publish_error)})" if done.publish_error else ""
        say(
            "publishing of {} compensating step(s) is deferred{}: the cancellation is "
            "committed and the outbox sweep of a running worker publishes them",
            done.deferred,
            reason,
        )
