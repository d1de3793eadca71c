"""Rendering pages with the context every template needs."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any
from urllib.parse import quote

from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import Response

from orders.app.previews import Preview, preview
from orders.domain.steps import ALL_STEPS
from orders.observability.urls import mask_urls_in
from orders.observability.visible import hidden, visible
from orders.web.security import CSRF_FIELD
from orders.web.state import web_state

MAX_ORDER_ID = 2**63 - 1
"""The largest order id ``/orders/<id>`` accepts (a signed 64-bit key)."""


def shown(value: Any) -> Any:
    """Jinja ``finalize``: every ``{{ value }}`` a template prints passes here first.

    A string (job and Redis text included) gets its control and bidi characters
    shown as ``\\x1b``-style escapes (:func:`orders.observability.visible.visible`, newlines
    and tabs kept); autoescape then escapes ``<>&"'``. Markup the code built
    itself (charts, links) and non-strings pass unchanged.
    """
    if isinstance(value, Markup) or not isinstance(value, str):
        return value
    return visible(value, multiline=True)


def url_part(value: Any) -> Markup:
    """The real text as one path segment of a link (Jinja filter ``url_part``).

    Args:
        value: a job id or other text taken as is (``str(value)``).

    Returns:
        Its UTF-8 percent-encoding with nothing left unencoded but letters,
        digits and ``_.-~``: control characters, ``/``, ``%`` and ``?`` included,
        so the route receives the text exactly.
    """
    return Markup(quote(str(value), safe=""))


def attr_value(value: Any) -> Markup:
    """The real text as an HTML attribute value (Jinja filter ``attr_value``).

    A form field that must send back what was stored (a job id to act on) uses
    this instead of the shown text: ``<>&"'`` become entities and each control
    or bidi character a numeric character reference (``&#x1b;``), so the page
    carries no raw control byte and the browser submits the original character.

    Args:
        value: the text taken as is (``str(value)``).

    Returns:
        Markup safe inside a double-quoted attribute.
    """
    text = str(escape(str(value)))
    return Markup("".join(f"&#x{ord(ch):02x};" if hidden(ch) else ch for ch in text))


def shown_payload(payload: Any, *, full: bool = False) -> Preview:
    """A payload as indented JSON for a page, cut after ``PAYLOAD_SHOWN`` bytes.

    Args:
        payload: the decoded payload (anything; non-JSON values via ``str``).
        full: show it whole, however large (``?full=1``).

    Returns:
        The text to show and the bytes left out (0 when whole).
    """
    text = json.dumps(payload, indent=2, default=str)
    return Preview(text, 0) if full else preview(text)


def order_link(value: Any) -> Markup:
    """An order id from job data as a link to its page, if it is one.

    Args:
        value: a payload's ``order_id``: anything.

    Returns:
        ``<a href="/orders/N">N</a>`` for an integer (or decimal string) in
        ``1..MAX_ORDER_ID``; "-" for None or ""; anything else as escaped
        visible text, not linked (its page would only answer 400).
    """
    if value is None or value == "":
        return Markup("-")
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and value.isascii() and value.isdecimal():
        number = int(value)
    if number is not None and 1 <= number <= MAX_ORDER_ID:
        return Markup('<a href="/orders/{0}">{0}</a>').format(number)
    return escape(visible(value))


def page(request: Request, template: str, context: dict[str, Any], status: int = 200) -> Response:
    """Render ``template`` with ``context`` plus the shared keys.

    Shared keys: ``steps`` (queue names), ``signed_in``, ``signed_in_as`` (the token's
    name), ``csrf`` (the session's
    CSRF token or ""), ``csrf_field``, ``actions_enabled``, ``path``, ``notes``
    (what the page could not read: a Redis key of the wrong type; empty by default).
    """
    state = web_state(request)
    session = state.guard.session(request)
    shared = {
        "steps": ALL_STEPS,
        "signed_in": session is not None,
        "signed_in_as": session.caller.name if session else "",
        "csrf": session.csrf if session else "",
        "csrf_field": CSRF_FIELD,
        "actions_enabled": state.guard.actions_enabled,
        "path": request.url.path,
        "notes": [],
    }
    shared.update(context)
    return state.templates.TemplateResponse(request, template, shared, status_code=status)


def error_page(
    request: Request, status: int, message: str, *, links: list[tuple[str, str]] | None = None
) -> Response:
    """An HTML page saying what went wrong, with ``status``.

    Args:
        request: the request answered.
        status: the HTTP status.
        message: what went wrong (shown escaped, as every value).
        links: (href, text) pairs listed below the message; the href is built by
            the code (its parts percent-encoded), the text is shown escaped.

    Returns:
        The rendered page.
    """
    context = {"status": status, "message": mask_urls_in(message), "links": links or []}
    return page(request, "error.html", context, status=status)


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
