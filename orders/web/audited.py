"""The audit row of a dashboard action (``orders.app.audit``): who signed in, from the
web, with the request's id."""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from orders.app.audit import Actor, record_now
from orders.app.tokens import Caller
from orders.web.state import web_state


def web_actor(request: Request, caller: Caller) -> Actor:
    """The audit actor of a dashboard request made by ``caller``."""
    return Actor(caller.name, "web", getattr(request.state, "request_id", None))


async def audit_now(
    request: Request,
    caller: Caller,
    action: str,
    target: dict[str, Any],
    *,
    count: int,
    dry_run: bool = False,
    result: str = "ok",
) -> None:
    """Write the action's audit row in a transaction of its own (after a Redis-side
    effect: redrive, purge, pause, resume).

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database failed (the action is done).
    """
    await run_in_threadpool(
        record_now,
        web_state(request).app.session_factory,
        web_actor(request, caller),
        action,
        target,
        count=count,
        dry_run=dry_run,
        result=result,
    )
