"""The audit page: the operator actions, newest first (``orders.app.audit``,
docs/adr/0040-one-audit-row-per-operator-action.md)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from orders.app.audit import recent_actions
from orders.domain.search import MAX_ID
from orders.web.params import integer
from orders.web.render import page
from orders.web.state import web_state


def audit_page(request: Request) -> Response:
    """GET /audit?before=ID : up to 100 operator actions older than ``before``."""
    before = integer(request.query_params, "before", default=0, low=0, high=MAX_ID) or None
    with web_state(request).app.session_factory() as session:
        rows = recent_actions(session, limit=101, before_id=before)
    older = rows[99].id if len(rows) > 100 else None
    return page(request, "audit.html", {"rows": rows[:100], "older": older})


routes = [Route("/audit", audit_page, methods=["GET"])]
