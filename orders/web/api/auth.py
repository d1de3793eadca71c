"""Who is calling ``/api/v1``, what their role lets them do, and how often they may ask.

A request carries ``Authorization: Bearer <token>``: a named token (``orders tokens``)
or ``ORDERS_WEB_TOKEN`` (admin). A token found is remembered for ``ttl`` seconds
(a revocation takes effect within that time); one read of a token is in flight at
a time, and a token in use is read again in the background in the last half of its
ttl, so that requests never wait for the database together; a wrong token counts as a failed
sign-in of the client's address (the dashboard's throttle: 429 past it). Each token
has an in-process token bucket: ``rate`` requests per second with a burst of
``burst``; past it, 429 with ``Retry-After`` in whole seconds. Reasoning:
docs/adr/0039-the-front-door-tokens-and-idempotency.md.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from sqlalchemy import select
from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection

from orders.app.tokens import Caller, find_caller, hash_token
from orders.domain.access import ApiToken, allows
from orders.web.api.problems import ApiProblem
from orders.web.security import SignInThrottle, client_address
from workflows.uow import SessionFactory

log = logging.getLogger(__name__)

MAX_REMEMBERED = 10_000
"""Tokens (and buckets) kept in memory at once; the least recently used go first."""
REFRESH_SHARE = 0.5
"""A remembered token is read again in the background once less than this share of
its ttl is left (:meth:`TokenLookup.refresh_due`)."""


class TokenBuckets:
    """One token bucket per caller name: ``rate`` per second, ``burst`` at most.

    Args:
        rate: requests per second refilled (> 0).
        burst: the bucket's size (>= 1).
        clock: seconds, monotonic (injectable).
    """

    def __init__(
        self, rate: float, burst: int, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("TokenBuckets needs rate > 0 and burst >= 1")
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self._lock = threading.Lock()
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # level, at

    def take(self, name: str) -> float:
        """Take one request from ``name``'s bucket.

        Returns:
            0.0 when allowed; else the seconds until one request is back (> 0).
        """
        now = self.clock()
        with self._lock:
            level, at = self._buckets.get(name, (float(self.burst), now))
            level = min(float(self.burst), level + (now - at) * self.rate)
            if level >= 1.0:
                self._buckets[name] = (level - 1.0, now)
                wait = 0.0
            else:
                self._buckets[name] = (level, now)
                wait = (1.0 - level) / self.rate
            self._buckets.move_to_end(name)
            while len(self._buckets) > MAX_REMEMBERED:
                self._buckets.popitem(last=False)
            return wait


@dataclass
class TokenLookup:
    """Named tokens read from the database, each remembered for ``ttl`` seconds.

    A token's reads never pile up: while one read of it is in flight, other callers
    wait for that read instead of starting their own (without this, every request
    that came while a remembered token expired read the database at once and took
    the connections the placements needed). A token in use is read again before it
    expires (:meth:`refresh_due`, :meth:`refresh`), so callers on the event loop find
    it remembered. What a read found is remembered until ``ttl`` seconds after the
    read began, so a revocation still takes effect within ``ttl``.

    Attributes:
        session_factory: the database with the tokens.
        env_token: ``ORDERS_WEB_TOKEN`` (an admin token), or None.
        ttl: seconds a token found (or not) is remembered: a revocation takes effect
            within it.
        clock: seconds, monotonic (injectable).
    """

    session_factory: SessionFactory
    env_token: str | None
    ttl: float = 1.0
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._known: OrderedDict[str, tuple[Caller | None, float]] = OrderedDict()
        self._reading: dict[str, Future[Caller | None]] = {}
        self._refreshing: set[str] = set()
        self._any: tuple[bool, float] = (False, -1.0)

    def __call__(self, text: str) -> Caller | None:
        """The caller ``text`` names, or None (unknown or revoked).

        Reads the database only when the token is not remembered, and then joins a
        read of it already in flight (blocks until that read ends).

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the read failed (every caller that
                joined it gets the same error).
        """
        digest = hash_token(text)
        known, hit = self._remembered(digest, self.clock())
        if known:
            return hit
        return self._read(text, digest)

    def refresh(self, text: str) -> Caller | None:
        """Read ``text`` from the database now (or join the read in flight) and
        remember the answer; ends what :meth:`refresh_due` claimed.

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the read failed.
        """
        digest = hash_token(text)
        try:
            return self._read(text, digest)
        finally:
            with self._lock:
                self._refreshing.discard(digest)

    def refresh_due(self, text: str) -> bool:
        """Whether ``text`` is remembered with less than ``REFRESH_SHARE`` of its ttl
        left and nobody reads it yet; True claims the refresh (the caller must then
        call :meth:`refresh`), so one caller at a time gets True."""
        digest = hash_token(text)
        now = self.clock()
        with self._lock:
            hit = self._known.get(digest)
            if (
                hit is None
                or not now < hit[1] < now + self.ttl * REFRESH_SHARE
                or digest in self._reading
                or digest in self._refreshing
            ):
                return False
            self._refreshing.add(digest)
            return True

    def remembered(self, text: str) -> tuple[bool, Caller | None]:
        """What ``text`` names, if this process remembers it now (no database read).

        Returns:
            ``(True, caller)`` for a token found or refused within ``ttl`` seconds
            (``caller`` None: unknown or revoked); ``(False, None)`` when only the
            database can say (call the lookup itself).
        """
        return self._remembered(hash_token(text), self.clock())

    def _remembered(self, digest: str, now: float) -> tuple[bool, Caller | None]:
        with self._lock:
            hit = self._known.get(digest)
        if hit is not None and hit[1] > now:
            return True, hit[0]
        return False, None

    def _read(self, text: str, digest: str) -> Caller | None:
        """One read of ``digest`` at a time: the first caller reads, the others wait."""
        with self._lock:
            pending = self._reading.get(digest)
            mine = pending is None
            if pending is None:
                pending = self._reading[digest] = Future()
        if not mine:
            return pending.result()
        began = self.clock()
        try:
            with self.session_factory() as session:
                caller = find_caller(session, text, self.env_token)
        except BaseException as exc:
            with self._lock:
                del self._reading[digest]
            pending.set_exception(exc)
            raise
        with self._lock:
            self._known[digest] = (caller, began + self.ttl)
            self._known.move_to_end(digest)
            while len(self._known) > MAX_REMEMBERED:
                self._known.popitem(last=False)
            del self._reading[digest]
        pending.set_result(caller)
        return caller

    def any_tokens(self) -> bool:
        """Whether a named token that is not revoked exists (remembered ``ttl`` seconds)."""
        now = self.clock()
        if self._any[1] > now:
            return self._any[0]
        with self.session_factory() as session:
            found = session.scalar(
                select(ApiToken.id).where(ApiToken.revoked_at.is_(None)).limit(1)
            )
        self._any = (found is not None, now + self.ttl)
        return self._any[0]


@dataclass
class Authenticator:
    """Finds the caller of a request and checks its permission and its rate.

    Attributes:
        lookup: the tokens.
        throttle: failed sign-ins per client address (shared with the dashboard).
        buckets: the per-token rate limits.
    """

    lookup: TokenLookup
    throttle: SignInThrottle
    buckets: TokenBuckets

    async def caller(self, conn: HTTPConnection, bearer: str | None, permission: str) -> Caller:
        """The caller of ``conn``, allowed ``permission`` and within its rate.

        Runs on the event loop: a token the lookup remembers costs no thread; only one
        that the database must name is read, in Starlette's thread pool. The checks
        go in this order: the address's wrong tokens, the token, its role, its rate.

        Args:
            conn: the request.
            bearer: the token of its ``Authorization: Bearer`` header, or None.
            permission: an ``orders.domain.access.Permission`` value.

        Raises:
            ApiProblem: 401 no or unknown token; 403 its role lacks the permission;
                429 too many failed tokens from this address, or the token's rate
                spent (``Retry-After``).
        """
        client = client_address(conn)
        if self.throttle.blocked(client):
            raise ApiProblem(
                429,
                "too many wrong tokens from this address: wait a minute",
                field="Authorization",
                headers={"Retry-After": "60"},
            )
        found = None
        if bearer:
            known, found = self.lookup.remembered(bearer)
            if not known:
                found = await run_in_threadpool(self.lookup, bearer)
            elif self.lookup.refresh_due(bearer):
                asyncio.get_running_loop().run_in_executor(None, self._refresh, bearer)
        if found is None:
            if bearer:
                self.throttle.failed(client)
            raise ApiProblem(
                401,
                "send a valid token: Authorization: Bearer <token>",
                field="Authorization",
                headers={"WWW-Authenticate": "Bearer"},
            )
        if not allows(found.role, permission):
            raise ApiProblem(
                403,
                f"token {found.name!r} (role {found.role}) may not {permission}",
                field="Authorization",
            )
        wait = self.buckets.take(found.name)
        if wait > 0:
            raise ApiProblem(
                429,
                f"token {found.name!r} is over its request rate; retry later",
                field="Authorization",
                headers={"Retry-After": str(max(1, math.ceil(wait)))},
            )
        return found

    def _refresh(self, bearer: str) -> None:
        """Read a remembered token again, in a thread; a failed read only leaves the
        token to expire, and the next request after that reads it itself."""
        try:
            self.lookup.refresh(bearer)
        except Exception:  # noqa: BLE001 - logged; the request that claimed it is answered
            log.warning("reading an API token again failed", exc_info=True)
