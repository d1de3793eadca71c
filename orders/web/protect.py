"""The dashboard's outer shell: Host allow-list, body size limit, security headers.

A pure ASGI middleware that runs before routing, authentication and any parsing:

- **Host allow-list** (DNS rebinding): a request whose ``Host`` is not the bound
  address, ``localhost``, ``127.0.0.1``, ``::1`` or a name configured in
  ``ORDERS_WEB_ALLOWED_HOSTS`` answers 400. A page on another site that rebinds
  its own name to 127.0.0.1 still sends its own name as ``Host``.
- **Body limit**: a request body longer than the limit for its path (a few KiB
  for sign-in, more for DLQ actions that list ids) answers 413, decided from
  ``Content-Length`` or while the body streams in, so at most ``limit`` bytes are
  ever held in memory.
- **Headers on every response**: a Content-Security-Policy that allows scripts,
  styles and fetches from this origin only (no inline script or style) and no
  framing, ``X-Frame-Options: DENY``, ``X-Content-Type-Options: nosniff``,
  ``Referrer-Policy: no-referrer``, and ``Cache-Control: no-store`` on everything
  but ``/static`` (pages may show data only a signed-in user should see).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cross-origin-opener-policy": "same-origin",
}
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
DEFAULT_BODY_LIMIT = 64 * 1024  # bytes: a DLQ action listing up to 1,000 job ids
BODY_LIMITS = {"/login": 4 * 1024, "/logout": 4 * 1024}  # bytes, by exact path


def host_name(header: str) -> str:
    """The host part of a ``Host`` header, lower case, without port or IPv6 brackets.

    Args:
        header: ``example.com:8080``, ``[::1]:8080``, ``127.0.0.1``.

    Returns:
        str: ``example.com``, ``::1``, ``127.0.0.1`` ("" for an empty header).
    """
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header[1:]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def allowed_hosts(bound: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The host names a request may name: ``bound``, the loopback names and ``extra``.

    Args:
        bound: the address the server listens on (``0.0.0.0`` and ``::`` add nothing).
        extra: more names (``ORDERS_WEB_ALLOWED_HOSTS``), with or without a port.
    """
    names = {*LOCAL_HOSTS, *(host_name(n) for n in extra if n.strip())}
    if bound not in ("0.0.0.0", "::", ""):
        names.add(host_name(bound if ":" not in bound or bound.startswith("[") else f"[{bound}]"))
    return frozenset(names)


class _TooLarge(Exception):
    pass


class Protect:
    """ASGI middleware applying the Host allow-list, the body limits and the headers.

    Args:
        app: the application inside.
        hosts: the allowed host names (see :func:`allowed_hosts`).
        body_limits: path -> limit in bytes for that exact path.
        default_body_limit: limit in bytes for every other path.
        refuse: builds a refusal from (path, status, message); default plain text.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        hosts: frozenset[str],
        body_limits: Mapping[str, int] | None = None,
        default_body_limit: int = DEFAULT_BODY_LIMIT,
        refuse: Callable[[str, int, str], Response] | None = None,
    ) -> None:
        self.app = app
        self.refuse = refuse or (lambda _path, status, message: PlainTextResponse(message, status))
        self.hosts = hosts
        self.body_limits = dict(BODY_LIMITS if body_limits is None else body_limits)
        self.default_body_limit = default_body_limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        cacheable = path.startswith("/static/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
                if not cacheable:
                    headers["cache-control"] = "no-store"
            await send(message)

        headers = Headers(scope=scope)
        if host_name(headers.get("host", "")) not in self.hosts:
            refusal = self.refuse(path, 400, "unknown Host: see ORDERS_WEB_ALLOWED_HOSTS")
            await refusal(scope, receive, send_with_headers)
            return
        limit = self.body_limits.get(path, self.default_body_limit)
        declared = headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            reply = (
                self.refuse(path, 413, f"request body over {limit} bytes")
                if declared.isdigit()
                else self.refuse(path, 400, "bad Content-Length")
            )
            await reply(scope, receive, send_with_headers)
            return
        try:
            body = await _read_body(receive, limit)
        except _TooLarge:
            # built only when needed: a problem body costs more than the rest of this shell
            too_large = self.refuse(path, 413, f"request body over {limit} bytes")
            await too_large(scope, receive, send_with_headers)
            return
        await self.app(scope, _replay(body, receive), send_with_headers)


async def _read_body(receive: Receive, limit: int) -> list[Message]:
    """Read the whole request body (at most ``limit`` bytes) before the app sees it."""
    messages: list[Message] = []
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages
        size += len(message.get("body", b""))
        if size > limit:
            raise _TooLarge
        if not message.get("more_body", False):
            return messages


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """A ``receive`` that hands back ``messages`` first, then the real ``receive``."""
    pending = list(messages)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed
