"""A value computed at most once per time-to-live, shared by threads."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class TTLCache(Generic[T]):
    """Calls ``compute`` at most once per ``ttl`` seconds; other callers get the copy.

    Args:
        compute: makes the value (may raise; nothing is cached then).
        ttl: seconds a value stays fresh (0: compute on every call).
        clock: monotonic clock, seconds.
    """

    def __init__(
        self, compute: Callable[[], T], ttl: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.compute = compute
        self.ttl = ttl
        self.clock = clock
        self._lock = threading.Lock()
        self._value: T | None = None
        self._at = float("-inf")

    def get(self) -> T:
        """The cached value, recomputed when older than ``ttl``.

        Raises:
            Exception: whatever ``compute`` raises (the old value is kept for later).
        """
        with self._lock:
            started = self.clock()
            if self._value is None or started - self._at >= self.ttl:
                self._value = self.compute()
                self._at = started  # the age counts from when the reading began
            return self._value
