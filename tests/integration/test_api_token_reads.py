"""The API's token reads never pile up: callers of a token that is not remembered share
one read, and a token in use is read again before it expires, in the background.

Before, every request that arrived while a remembered token was expired read the
database itself, in its own thread: under load, dozens at once, once a second, taking
the pooled connections the placements' group commit was waiting for.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from api_world import ApiWorld
from starlette.requests import HTTPConnection

from orders.app.tokens import Caller, revoke_token
from orders.domain.access import Permission, Role
from orders.web.api.auth import Authenticator, TokenBuckets, TokenLookup
from orders.web.security import SignInThrottle
from workflows.uow import UnitOfWork


class CountedSessions:
    """A session factory that counts the sessions it opens, each after ``delay`` seconds
    (a database that answers slowly, as under load)."""

    def __init__(self, world: ApiWorld, delay: float = 0.0) -> None:
        self.world = world
        self.delay = delay
        self.opened = 0
        self._lock = threading.Lock()

    def __call__(self) -> Any:
        with self._lock:
            self.opened += 1
        time.sleep(self.delay)
        return self.world.app.session_factory()


def placer_token(world: ApiWorld) -> str:
    return world.as_role("placer")["Authorization"].removeprefix("Bearer ")


def test_callers_of_a_token_not_remembered_share_one_read(api_world: ApiWorld) -> None:
    sessions = CountedSessions(api_world, delay=0.2)
    lookup = TokenLookup(sessions, None, ttl=1.0)
    text = placer_token(api_world)
    start = threading.Barrier(20)
    found: list[Caller | None] = []

    def ask() -> None:
        start.wait()
        found.append(lookup(text))

    threads = [threading.Thread(target=ask) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert found == [Caller(Role.PLACER, Role.PLACER)] * 20
    assert sessions.opened == 1


def test_a_failed_read_fails_its_callers_and_the_next_caller_reads_again(
    api_world: ApiWorld,
) -> None:
    calls = [0]

    def broken() -> Any:
        calls[0] += 1
        raise ConnectionError("the database is down")

    lookup = TokenLookup(broken, None, ttl=1.0)
    text = placer_token(api_world)
    for expected in (1, 2):
        with pytest.raises(ConnectionError):
            lookup(text)
        assert calls[0] == expected  # nothing remembered, no read left in flight


def test_a_token_in_use_is_read_again_in_the_last_half_of_its_ttl(api_world: ApiWorld) -> None:
    now = [100.0]
    sessions = CountedSessions(api_world)
    lookup = TokenLookup(sessions, None, ttl=1.0, clock=lambda: now[0])
    text = placer_token(api_world)
    assert lookup(text) == Caller(Role.PLACER, Role.PLACER)
    now[0] = 100.4
    assert not lookup.refresh_due(text)  # more than half its ttl left
    now[0] = 100.6
    assert lookup.refresh_due(text)
    assert not lookup.refresh_due(text)  # claimed: one refresh at a time
    assert lookup.refresh(text) == Caller(Role.PLACER, Role.PLACER)
    assert sessions.opened == 2
    now[0] = 101.5  # past the first read's ttl, within the refresh's
    assert lookup.remembered(text) == (True, Caller(Role.PLACER, Role.PLACER))
    assert sessions.opened == 2

    # a revocation still takes effect within the ttl of the last read
    with UnitOfWork(api_world.app.session_factory) as uow:
        revoke_token(uow.session, Role.PLACER)
        uow.commit()
    assert lookup.refresh_due(text)
    assert lookup.refresh(text) is None
    assert lookup.remembered(text) == (True, None)


def test_the_api_refreshes_a_remembered_token_without_making_the_request_wait(
    api_world: ApiWorld,
) -> None:
    now = [100.0]
    sessions = CountedSessions(api_world, delay=0.3)
    lookup = TokenLookup(sessions, None, ttl=1.0, clock=lambda: now[0])
    auth = Authenticator(lookup, SignInThrottle(), TokenBuckets(1000.0, 1000))
    text = placer_token(api_world)
    refreshed = threading.Event()
    refresh = lookup.refresh

    def refresh_then_tell(token: str) -> Caller | None:
        try:
            return refresh(token)
        finally:
            refreshed.set()

    lookup.refresh = refresh_then_tell  # type: ignore[method-assign]
    conn = HTTPConnection({"type": "http", "client": ("127.0.0.1", 5000), "headers": []})

    async def two_requests() -> float:
        first = await auth.caller(conn, text, Permission.PLACE)  # reads: nothing remembered
        assert first.role == Role.PLACER
        now[0] = 100.7  # in the last half of the ttl: the next request starts a refresh
        began = time.perf_counter()
        second = await auth.caller(conn, text, Permission.PLACE)
        waited = time.perf_counter() - began
        assert second.role == Role.PLACER
        # the refresh runs in a thread of the loop's executor; wait for it to end
        await asyncio.get_running_loop().run_in_executor(None, refreshed.wait, 10)
        return waited

    waited = asyncio.run(two_requests())
    assert waited < 0.3 / 2  # the second request did not wait for the 0.3 s read
    assert sessions.opened == 2
    now[0] = 101.5  # the first read's ttl is over; the refresh's is not
    assert lookup.remembered(text) == (True, Caller(Role.PLACER, Role.PLACER))
