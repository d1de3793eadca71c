"""Rendering pages with the context every template needs."""

from __future__ import annotations

import datetime as dt
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from orders.domain.steps import ALL_STEPS
from orders.web.security import CSRF_FIELD
from orders.web.state import web_state


def page(request: Request, template: str, context: dict[str, Any], status: int = 200) -> Response:
    """Render ``template`` with ``context`` plus the shared keys.

    Shared keys: ``steps`` (queue names), ``signed_in``, ``csrf`` (the session's
    CSRF token or ""), ``csrf_field``, ``actions_enabled``, ``path``.
    """
    state = web_state(request)
    session = state.guard.session(request)
    shared = {
        "steps": ALL_STEPS,
        "signed_in": session is not None,
        "csrf": session.csrf if session else "",
        "csrf_field": CSRF_FIELD,
        "actions_enabled": state.guard.actions_enabled,
        "path": request.url.path,
    }
    shared.update(context)
    return state.templates.TemplateResponse(request, template, shared, status_code=status)


def error_page(request: Request, status: int, message: str) -> Response:
    """An HTML page saying what went wrong, with ``status``."""
    return page(request, "error.html", {"status": status, "message": message}, status=status)


def when(value: Any) -> str:
    """Format an epoch-seconds float or a datetime as ``YYYY-MM-DD HH:MM:SS`` UTC ("-" if None)."""
    if value is None:
        return "-"
    if isinstance(value, int | float):
        value = dt.datetime.fromtimestamp(value, dt.UTC)
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def when_ms(value: Any) -> str:
    """Like :func:`when` with milliseconds (``HH:MM:SS.mmm``, "-" if None)."""
    if value is None:
        return "-"
    if isinstance(value, int | float):
        value = dt.datetime.fromtimestamp(value, dt.UTC)
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC).strftime("%H:%M:%S.%f")[:-3]


def ms(seconds: float | None) -> str:
    """Seconds as milliseconds with one decimal ("-" if None)."""
    return "-" if seconds is None else f"{seconds * 1000:.1f}"


def rate(value: float | None) -> str:
    """A rate with one decimal ("-" if None)."""
    return "-" if value is None else f"{value:.1f}"
