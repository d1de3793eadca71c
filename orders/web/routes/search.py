"""The search page: orders or step jobs by the one search filter (``orders.domain.search``),
and the bulk actions on what it finds (cancel, redrive) with a dry run first
(docs/adr/0041-search-answers-from-the-database.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from orders.app.bulk import UnfilteredAction, cancel_matching, redrive_matching
from orders.domain.access import Permission
from orders.domain.search import (
    MAX_ID,
    ORDER_STATES,
    SearchFilter,
    search_jobs,
    search_orders,
)
from orders.domain.steps import ALL_STEPS
from orders.web.audited import web_actor
from orders.web.params import BadParam, flag, integer, one_of
from orders.web.render import page
from orders.web.state import web_state
from workflows.models import DEAD_OUTCOMES, StepStatus

FIELDS = tuple(SearchFilter.model_fields)


def parse_filter(params: Mapping[str, Any]) -> SearchFilter:
    """The filter from query or form parameters (empty ones ignored).

    Raises:
        BadParam: a field that does not parse (400, naming it).
    """
    given = {k: params.get(k) for k in FIELDS if params.get(k) not in (None, "")}
    try:
        return SearchFilter.model_validate(given)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise BadParam(f"{first['loc'][0]}: {first['msg']}") from None


def search_page(request: Request) -> Response:
    """GET /search?kind=orders|jobs&status=&customer_id=&step=&step_state=&dlq_reason=
    &error=&placed_after=&placed_before=&cursor= : what the filter finds, newest first."""
    f = parse_filter(request.query_params)
    kind = one_of(request.query_params, "kind", ("orders", "jobs")) or "orders"
    cursor = integer(request.query_params, "cursor", default=0, low=0, high=MAX_ID) or None
    with web_state(request).app.session_factory() as session:
        if kind == "jobs":
            found = search_jobs(session, f, limit=50, cursor=cursor)
        else:
            found = search_orders(session, f, limit=50, cursor=cursor)
    more = None
    if found.next_cursor is not None:
        more = "/search?" + urlencode({**f.given(), "kind": kind, "cursor": found.next_cursor})
    return page(
        request,
        "search.html",
        {
            "f": f.given(),
            "kind": kind,
            "items": found.items,
            "more": more,
            "order_states": ORDER_STATES,
            "step_names": ALL_STEPS,
            "step_states": StepStatus.ALL,
            "dlq_reasons": DEAD_OUTCOMES,
        },
    )


async def bulk(request: Request) -> Response:
    """POST /search/cancel and /search/redrive (form: the filter, ``dry_run``, the CSRF
    token): act on what the filter finds (up to 500) with ``dry_run=0``; without it, or
    with ``dry_run=1``, only list it. The dry run's page confirms with the ids it
    listed (``ids``, repeated): the action takes those and no order or job that came
    to match since. Without ``ids``, an empty filter acts only with ``all=1``; else
    400."""
    state = web_state(request)
    form = await request.form()
    caller = state.guard.check_action(request, form, Permission.OPERATE)
    f = parse_filter(form)
    dry_run = flag(form, "dry_run") if "dry_run" in form else True  # acting is asked for
    everything = flag(form, "all") if "all" in form else False
    listed = [str(v) for v in form.getlist("ids")] if "ids" in form else None
    app = state.app
    who = web_actor(request, caller)
    try:
        if request.url.path.endswith("/cancel"):
            result = await run_in_threadpool(
                lambda: cancel_matching(
                    app.session_factory,
                    lambda: app.publisher,
                    f,
                    actor=who,
                    dry_run=dry_run,
                    everything=everything,
                    only=None if listed is None else _order_ids(listed),
                    policy=app.publish_policy,
                )
            )
        else:
            result = await run_in_threadpool(
                lambda: redrive_matching(
                    app.session_factory,
                    app.queues,
                    f,
                    actor=who,
                    dry_run=dry_run,
                    everything=everything,
                    only=listed,
                )
            )
    except UnfilteredAction as exc:
        raise BadParam(str(exc)) from exc
    return page(request, "bulk.html", {"r": result, "f": f.given()})


def _order_ids(values: list[str]) -> list[int]:
    """The order ids a confirmed dry run sent back.

    Raises:
        BadParam: one is not a positive whole number.
    """
    if not all(v.isascii() and v.isdigit() and 0 < len(v) <= 12 for v in values):
        raise BadParam("ids: order ids are positive whole numbers")
    return [int(v) for v in values]


routes = [
    Route("/search", search_page, methods=["GET"]),
    Route("/search/cancel", bulk, methods=["POST"]),
    Route("/search/redrive", bulk, methods=["POST"]),
]
