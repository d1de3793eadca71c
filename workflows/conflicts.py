"""Recognise database errors that mean "another transaction won; try again".

These are: a version-column conflict (``StaleDataError``), SQLite busy or
locked, PostgreSQL serialization failure or deadlock, and a unique-index
violation (a concurrent delivery inserted the same effect row first).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlalchemy.orm.exc import StaleDataError

from workflows.errors import ConcurrencyConflict

T = TypeVar("T")

_PG_RETRY_SQLSTATES = {"40001", "40P01", "23505"}  # serialization, deadlock, unique violation
_SQLITE_BUSY_WORDS = ("database is locked", "database table is locked", "database is busy")


def is_conflict(exc: BaseException) -> bool:
    """Return True when ``exc`` means the transaction lost a race and may be retried.

    Args:
        exc: any exception raised inside a unit of work.

    Returns:
        True for ``StaleDataError``, SQLite busy/locked, PostgreSQL SQLSTATE
        40001 / 40P01 / 23505 and SQLite UNIQUE violations; False otherwise.
    """
    if isinstance(exc, StaleDataError):
        return True
    if not isinstance(exc, DBAPIError):
        return False
    orig = exc.orig
    sqlstate = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if sqlstate in _PG_RETRY_SQLSTATES:
        return True
    message = str(orig).lower()
    if isinstance(exc, OperationalError):
        return any(word in message for word in _SQLITE_BUSY_WORDS)
    if isinstance(exc, IntegrityError):
        return message.startswith("unique constraint failed")
    return False


def retry_on_conflict(
    work: Callable[[], T],
    *,
    attempts: int = 6,
    base_delay: float = 0.005,
    max_delay: float = 0.25,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
    on_conflict: Callable[[BaseException], None] | None = None,
) -> T:
    """Run ``work`` (one whole unit of work) again while it loses races.

    ``work`` must open and close its own unit of work, so each run starts a
    fresh transaction that sees what the winner committed.

    Args:
        work: zero-argument callable running one unit of work.
        attempts: total runs before giving up (>= 1).
        base_delay: first pause between runs, seconds; doubles each time, with
            full jitter.
        max_delay: cap on one pause, seconds.
        sleep: pause function (injectable for tests).
        rng: random source for the jitter.
        on_conflict: called with each conflict exception (for counting).

    Returns:
        What ``work`` returns.

    Raises:
        ConcurrencyConflict: every run hit a conflict (retryable).
        Exception: any non-conflict error from ``work``, unchanged.
    """
    rng = rng or random.Random()
    for attempt in range(1, attempts + 1):
        try:
            return work()
        except Exception as exc:
            if not is_conflict(exc):
                raise
            if on_conflict is not None:
                on_conflict(exc)
            if attempt == attempts:
                raise ConcurrencyConflict(
                    f"gave up after {attempts} conflicting attempts: {exc}"
                ) from exc
            sleep(rng.uniform(0, min(max_delay, base_delay * 2 ** (attempt - 1))))
    raise AssertionError("unreachable")
