"""Signing in with a token (``ORDERS_WEB_TOKEN`` or a named one), and out."""

from __future__ import annotations

from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from orders.web.params import local_path
from orders.web.render import page
from orders.web.security import COOKIE, Refused
from orders.web.state import web_state


def login_page(request: Request) -> Response:
    """GET /login?next=/path : the sign-in form."""
    nxt = local_path(request.query_params.get("next"))
    return page(request, "login.html", {"next": nxt, "failed": False})


async def login(request: Request) -> Response:
    """POST /login : check the token (the configured one or a named one of ``orders
    tokens``); on success set the session cookie and go to ``next``.

    A wrong token answers 401 with the form again; no token configured, 403.
    """
    state = web_state(request)
    form = await request.form()
    state.guard.check_same_origin(request)
    nxt = local_path(str(form.get("next") or "/"))
    if not state.guard.actions_enabled:
        raise Refused("actions are disabled: start `orders web` with ORDERS_WEB_TOKEN set", 403)
    caller = state.guard.sign_in(request, str(form.get("token") or ""))
    if caller is None:
        return page(request, "login.html", {"next": nxt, "failed": True}, status=401)
    response = RedirectResponse(nxt, status_code=303)
    response.set_cookie(
        COOKIE,
        state.guard.new_cookie(caller),
        max_age=int(state.guard.session_seconds),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


async def logout(request: Request) -> Response:
    """POST /logout : end the session (needs its CSRF token)."""
    state = web_state(request)
    form = await request.form()
    state.guard.check_action(request, form, permission="")
    state.guard.revoke(request)
    response = RedirectResponse("/", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response


def login_link(path: str) -> str:
    """``/login?next=<path>``."""
    return f"/login?next={quote(path)}"


routes = [
    Route("/login", login_page, methods=["GET"]),
    Route("/login", login, methods=["POST"]),
    Route("/logout", logout, methods=["POST"]),
]
