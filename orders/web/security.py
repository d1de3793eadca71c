"""Who may read and who may act.

- Reading is open to loopback clients; others must be signed in (or send the
  token as ``Authorization: Bearer``).
- Every action (a POST) needs a token, as a bearer header or through a
  sign-in session: ``ORDERS_WEB_TOKEN`` (an admin) or a named token of
  ``orders tokens`` whose role allows the action (ADR 0039); with neither
  configured, every action is refused outright.
- A session is a cookie ``<issued>.<nonce>.<hmac>`` signed with the token (or,
  without one, a secret drawn when the server starts; changing the token signs
  everyone out), ``HttpOnly`` and ``SameSite=Strict``,
  whose nonce must also be in the server's session table: signing out removes
  it, so a copied cookie and its CSRF token stop working at once. The table is
  in memory (a restart signs everyone out) and bounded (the oldest sign-in goes
  first).
- Failed sign-ins (a wrong token in the form or a bearer header) are counted per
  client address: past the limit within the window, that client is answered
  429 until the window has passed, even with the right token.
- Forms of a session carry a CSRF token derived from it; a POST that relies on
  the cookie must present it, and a POST whose
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
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import HTTPConnection

from orders.app.tokens import ENV_TOKEN_NAME, Caller
from orders.domain.access import Permission, Role, allows

COOKIE = "orders_session"
CSRF_FIELD = "csrf"
MIN_TOKEN_LENGTH = 16  # characters
MAX_SESSIONS = 1000  # sign-ins remembered at once; the oldest is dropped beyond it


class Refused(Exception):
    """An action is not allowed; ``status`` is 401 (sign in), 403 (forbidden) or 429
    (too many failed sign-ins)."""

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


class WeakToken(ValueError):
    """The configured token is shorter than :data:`MIN_TOKEN_LENGTH` characters."""


def check_token(token: str | None) -> None:
    """Refuse a token too short to withstand guessing.

    Args:
        token: the configured token, or None (no token: actions disabled, allowed).

    Raises:
        WeakToken: ``token`` has fewer than :data:`MIN_TOKEN_LENGTH` characters; the
            message says how to make a good one (it never repeats the token).
    """
    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        raise WeakToken(
            f"ORDERS_WEB_TOKEN is {len(token)} characters long; it needs at least "
            f"{MIN_TOKEN_LENGTH}. Make one with: "
            "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )


class SignInThrottle:
    """At most ``max_failures`` failed sign-ins per client within ``window`` seconds.

    Args:
        max_failures: failures allowed in the window before the client is refused.
        window: seconds a failure counts for.
        clock: seconds, monotonic (injectable).
        max_clients: clients tracked at once (the least recently failing is forgotten
            first), bounding memory under a flood of addresses.
    """

    def __init__(
        self,
        max_failures: int = 10,
        window: float = 60.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_clients: int = 10_000,
    ) -> None:
        self.max_failures = max_failures
        self.window = window
        self.clock = clock
        self.max_clients = max_clients
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def _recent(self, client: str) -> deque[float]:
        times = self._failures.get(client, deque())
        cutoff = self.clock() - self.window
        while times and times[0] <= cutoff:
            times.popleft()
        return times

    def blocked(self, client: str) -> bool:
        """True while ``client`` has ``max_failures`` or more failures in the window."""
        return len(self._recent(client)) >= self.max_failures

    def failed(self, client: str) -> None:
        """Count one failed sign-in of ``client``."""
        times = self._recent(client)
        times.append(self.clock())
        self._failures[client] = times
        self._failures.move_to_end(client)
        while len(self._failures) > self.max_clients:
            self._failures.popitem(last=False)


def client_address(conn: HTTPConnection) -> str:
    """The client's address as the server sees it ("" when unknown)."""
    return conn.client.host if conn.client else ""


@dataclass(frozen=True)
class Session:
    """A valid sign-in: when it was issued, its CSRF token, and who signed in."""

    issued: int
    nonce: str
    csrf: str
    caller: Caller = Caller(ENV_TOKEN_NAME, Role.ADMIN)


class Guard:
    """Checks tokens, sessions, CSRF tokens and origins.

    Args:
        token: the configured token, or None (every action refused).
        session_seconds: how long a sign-in lasts.
        clock: epoch seconds (injectable).
        throttle: counts failed sign-ins (default: 10 per minute per client).
        lookup: finds the named token a candidate is (``orders.app.tokens.find_caller``
            on the database), or None; None: only ``token`` signs in.
        any_tokens: whether a named token that is not revoked exists (actions are
            enabled then, even without ``token``).

    Raises:
        WeakToken: ``token`` is shorter than :data:`MIN_TOKEN_LENGTH`.
    """

    def __init__(
        self,
        token: str | None,
        *,
        session_seconds: float = 12 * 3600,
        clock: Callable[[], float] = time.time,
        throttle: SignInThrottle | None = None,
        lookup: Callable[[str], Caller | None] | None = None,
        any_tokens: Callable[[], bool] | None = None,
    ) -> None:
        check_token(token)
        self.token = token
        self.session_seconds = session_seconds
        self.clock = clock
        self.throttle = throttle or SignInThrottle()
        self.lookup = lookup
        self.any_tokens = any_tokens
        self._key = token or secrets.token_hex(32)  # signs cookies and CSRF tokens
        self._sessions: OrderedDict[str, tuple[int, Caller]] = OrderedDict()  # nonce ->

    @property
    def actions_enabled(self) -> bool:
        """False when neither ``ORDERS_WEB_TOKEN`` nor a named token is configured."""
        return self.token is not None or (self.any_tokens is not None and self.any_tokens())

    # ------------------------------------------------------------ sessions
    def token_matches(self, candidate: str | None) -> bool:
        """Constant-time comparison of ``candidate`` with the configured token."""
        if self.token is None or not candidate:
            return False
        return hmac.compare_digest(candidate.encode(), self.token.encode())

    def identify(self, candidate: str | None) -> Caller | None:
        """Who ``candidate`` names: the configured token (an admin), a named token, or
        None."""
        if self.token_matches(candidate):
            return Caller(ENV_TOKEN_NAME, Role.ADMIN)
        if self.lookup is None or not candidate:
            return None
        return self.lookup(candidate)

    def sign_in(self, conn: HTTPConnection, candidate: str | None) -> Caller | None:
        """Check a token a client sent, counting a failure against its address.

        Returns:
            Who signed in (the configured token or a named one), or None.

        Raises:
            Refused: 429, the client failed too often recently (checked before the
                token, so the right token does not help until the window passes).
        """
        client = client_address(conn)
        if self.throttle.blocked(client):
            raise Refused("too many failed sign-ins from this address: wait a minute", 429)
        caller = self.identify(candidate)
        if caller is not None:
            return caller
        self.throttle.failed(client)
        return None

    def new_cookie(self, caller: Caller | None = None) -> str:
        """A fresh session cookie value for ``caller`` (default: the configured token's
        admin), remembered server-side (call only after the token was checked)."""
        issued, nonce = int(self.clock()), secrets.token_hex(16)
        self._sessions[nonce] = (issued, caller or Caller(ENV_TOKEN_NAME, Role.ADMIN))
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.popitem(last=False)
        return f"{issued}.{nonce}.{_sign(self._key, 'session', str(issued), nonce)}"

    def revoke(self, conn: HTTPConnection) -> None:
        """End the request's session: its cookie and CSRF token stop working."""
        session = self.session(conn)
        if session is not None:
            self._sessions.pop(session.nonce, None)

    def session(self, conn: HTTPConnection) -> Session | None:
        """The request's valid session, or None (absent, forged, expired, or no token)."""
        raw = conn.cookies.get(COOKIE)
        if not raw or raw.count(".") != 2:
            return None
        issued, nonce, sig = raw.split(".")
        if not issued.isdigit():
            return None
        if not hmac.compare_digest(sig, _sign(self._key, "session", issued, nonce)):
            return None
        if self.clock() - int(issued) > self.session_seconds:
            self._sessions.pop(nonce, None)
            return None
        known = self._sessions.get(nonce)
        if known is None or known[0] != int(issued):
            return None  # signed out, forgotten by a restart, or pushed out by newer ones
        return Session(int(issued), nonce, _sign(self._key, "csrf", issued, nonce), known[1])

    def bearer(self, conn: HTTPConnection) -> Caller | None:
        """Who ``Authorization: Bearer <token>`` names (the configured token or a named
        one), or None.

        A wrong bearer token counts as a failed sign-in.

        Raises:
            Refused: 429, a bearer token from a client that failed too often.
        """
        header = conn.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer" or not self.actions_enabled:
            return None
        return self.sign_in(conn, value.strip())

    def bearer_ok(self, conn: HTTPConnection) -> bool:
        """True when ``Authorization: Bearer <token>`` names a token (see :meth:`bearer`)."""
        return self.bearer(conn) is not None

    def may_read(self, conn: HTTPConnection) -> bool:
        """Loopback clients read freely; others need a session or a bearer token whose
        role may read everything (a placer's may not)."""
        if is_loopback(conn):
            return True
        who = self.session(conn)
        caller = who.caller if who is not None else self.bearer(conn)
        return caller is not None and allows(caller.role, Permission.READ)

    # ------------------------------------------------------------- actions
    def check_same_origin(self, conn: HTTPConnection) -> None:
        """Refuse a request whose browser says it came from another site.

        Every page is served with ``Referrer-Policy: no-referrer``, under which a
        browser sends ``Origin: null`` even on a same-origin form post (Fetch
        standard, "serializing a request origin"). Such a post is accepted only
        when the browser's own ``Sec-Fetch-Site`` header (which page scripts
        cannot set) says ``same-origin``.

        Raises:
            Refused: ``Sec-Fetch-Site`` is cross-site / same-site, or ``Origin``
                differs from this server's scheme and host (``null`` without
                ``Sec-Fetch-Site: same-origin`` included).
        """
        site = conn.headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            raise Refused(f"cross-site request refused (Sec-Fetch-Site: {site})")
        origin = conn.headers.get("origin")
        if origin == "null" and site == "same-origin":
            return
        if origin is not None:
            expected = f"{conn.url.scheme}://{conn.headers.get('host', '')}"
            if origin != expected:
                raise Refused(f"cross-site request refused (Origin {origin} is not {expected})")

    def check_action(
        self,
        conn: HTTPConnection,
        form: Mapping[str, Any],
        permission: str = Permission.OPERATE,
    ) -> Caller:
        """Allow a state-changing request, or raise why not.

        Args:
            conn: the request.
            form: its form (the CSRF token of a session).
            permission: what the action needs (``Permission.OPERATE`` for redrive,
                cancel, pause; ``ADMINISTER`` for purge); signing out needs none
                (``""``).

        Returns:
            Who acts (for the audit row).

        Raises:
            Refused: no token configured (403); neither bearer token nor session
                (401); cross-site origin, a missing / wrong CSRF token, or a role
                without ``permission`` (403).
        """
        if not self.actions_enabled:
            raise Refused("actions are disabled: start `orders web` with ORDERS_WEB_TOKEN set", 403)
        caller = self.bearer(conn)
        if caller is None:
            self.check_same_origin(conn)
            session = self.session(conn)
            if session is None:
                raise Refused("sign in with a token first", 401)
            sent = str(form.get(CSRF_FIELD) or "")
            if not sent or not hmac.compare_digest(sent, session.csrf):
                raise Refused("missing or wrong CSRF token: reload the page and try again", 403)
            caller = session.caller
        if permission and not allows(caller.role, permission):
            raise Refused(f"token {caller.name!r} (role {caller.role}) may not do this", 403)
        return caller
