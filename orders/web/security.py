"""Who may read and who may act.

- Reading is open to loopback clients; others must be signed in (or send the
  token as ``Authorization: Bearer``).
- Every action (a POST) needs the token, as a bearer header or through a
  sign-in session, and is refused outright when no token is configured.
- A session is a stateless cookie ``<issued>.<nonce>.<hmac>`` signed with the
  token (changing the token signs everyone out), ``HttpOnly`` and
  ``SameSite=Strict``. Forms of a session carry a CSRF token derived from it;
  a POST that relies on the cookie must present it, and a POST whose
  ``Origin`` (or ``Sec-Fetch-Site``) says it came from another site is refused.
  A bearer header cannot be sent cross-site without CORS, which this app does
  not allow, so it needs no CSRF token.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import HTTPConnection

COOKIE = "orders_session"
CSRF_FIELD = "csrf"


class Refused(Exception):
    """An action is not allowed; ``status`` is 401 (sign in) or 403 (forbidden)."""

    def __init__(self, message: str, status: int = 403) -> None:
        super().__init__(message)
        self.status = status


def is_loopback(conn: HTTPConnection) -> bool:
    """True when the client's address is a loopback address (127.0.0.0/8, ::1)."""
    host = conn.client.host if conn.client else ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _sign(token: str, *parts: str) -> str:
    return hmac.new(token.encode(), "|".join(parts).encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Session:
    """A valid sign-in: when it was issued and its CSRF token."""

    issued: int
    nonce: str
    csrf: str


class Guard:
    """Checks tokens, sessions, CSRF tokens and origins.

    Args:
        token: the configured token, or None (every action refused).
        session_seconds: how long a sign-in lasts.
        clock: epoch seconds (injectable).
    """

    def __init__(
        self,
        token: str | None,
        *,
        session_seconds: float = 12 * 3600,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.token = token
        self.session_seconds = session_seconds
        self.clock = clock

    @property
    def actions_enabled(self) -> bool:
        """False when no token is configured."""
        return self.token is not None

    # ------------------------------------------------------------ sessions
    def token_matches(self, candidate: str | None) -> bool:
        """Constant-time comparison of ``candidate`` with the configured token."""
        if self.token is None or not candidate:
            return False
        return hmac.compare_digest(candidate.encode(), self.token.encode())

    def new_cookie(self) -> str:
        """A fresh session cookie value (call only after the token was checked)."""
        assert self.token is not None
        issued, nonce = str(int(self.clock())), secrets.token_hex(16)
        return f"{issued}.{nonce}.{_sign(self.token, 'session', issued, nonce)}"

    def session(self, conn: HTTPConnection) -> Session | None:
        """The request's valid session, or None (absent, forged, expired, or no token)."""
        raw = conn.cookies.get(COOKIE)
        if self.token is None or not raw or raw.count(".") != 2:
            return None
        issued, nonce, sig = raw.split(".")
        if not issued.isdigit():
            return None
        if not hmac.compare_digest(sig, _sign(self.token, "session", issued, nonce)):
            return None
        if self.clock() - int(issued) > self.session_seconds:
            return None
        return Session(int(issued), nonce, _sign(self.token, "csrf", issued, nonce))

    def bearer_ok(self, conn: HTTPConnection) -> bool:
        """True when ``Authorization: Bearer <token>`` carries the configured token."""
        header = conn.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        return scheme.lower() == "bearer" and self.token_matches(value.strip())

    def may_read(self, conn: HTTPConnection) -> bool:
        """Loopback clients read freely; others need a session or the bearer token."""
        return is_loopback(conn) or self.session(conn) is not None or self.bearer_ok(conn)

    # ------------------------------------------------------------- actions
    def check_same_origin(self, conn: HTTPConnection) -> None:
        """Refuse a request whose browser says it came from another site.

        Raises:
            Refused: ``Sec-Fetch-Site`` is cross-site / same-site, or ``Origin``
                differs from this server's scheme and host.
        """
        site = conn.headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            raise Refused(f"cross-site request refused (Sec-Fetch-Site: {site})")
        origin = conn.headers.get("origin")
        if origin is not None:
            expected = f"{conn.url.scheme}://{conn.headers.get('host', '')}"
            if origin != expected:
                raise Refused(f"cross-site request refused (Origin {origin} is not {expected})")

    def check_action(self, conn: HTTPConnection, form: Mapping[str, Any]) -> None:
        """Allow a state-changing request, or raise why not.

        Raises:
            Refused: no token configured (403); neither bearer token nor session
                (401); cross-site origin, or a missing / wrong CSRF token (403).
        """
        if self.token is None:
            raise Refused("actions are disabled: start `orders web` with ORDERS_WEB_TOKEN set", 403)
        if self.bearer_ok(conn):
            return
        self.check_same_origin(conn)
        session = self.session(conn)
        if session is None:
            raise Refused("sign in with the dashboard token first", 401)
        sent = str(form.get(CSRF_FIELD) or "")
        if not sent or not hmac.compare_digest(sent, session.csrf):
            raise Refused("missing or wrong CSRF token: reload the page and try again", 403)
