"""What a stop signal asks of a worker: drain, nothing (a forwarded copy), or exit now.

A first SIGTERM or SIGINT starts the graceful drain; a second one exits at once.
But one stop often arrives twice: ``timeout``, systemd and container runtimes
signal the whole process group, and ``uv run`` (or another supervisor in the
group) forwards the same signal to its child, so Python receives it twice
within about a millisecond. Such a copy is not a second request.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable

REPEAT_WINDOW_SECONDS = 0.5
"""A repeat of the first stop signal within this many seconds of it is ignored:
it is a supervisor or ``uv run`` forwarding the signal the process group already
got (they arrive within milliseconds). Long enough for a loaded machine, short
enough that a person pressing Ctrl-C twice, or sending a second SIGTERM, still
gets the immediate exit."""


class StopRequest(enum.Enum):
    """What a stop signal asks for."""

    DRAIN = "drain"  # stop fetching, finish in-flight jobs within the grace period
    REPEAT = "repeat"  # a copy of the first signal: nothing more to do
    EXIT = "exit"  # exit at once; held leases expire and are reaped


class StopSignals:
    """Classify the stop signals a process receives (see the module docstring).

    Args:
        repeat_window: seconds after the first signal during which the same
            signal again is a :attr:`StopRequest.REPEAT`.
        clock: monotonic seconds (default ``time.monotonic``; tests pass their own).
    """

    def __init__(
        self,
        repeat_window: float = REPEAT_WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.repeat_window = repeat_window
        self._clock = clock
        self._first: tuple[int, float] | None = None  # (signal number, when)

    def receive(self, signum: int) -> StopRequest:
        """Record signal ``signum`` and return what it asks for.

        Args:
            signum: the signal number (``signal.SIGTERM``, ``signal.SIGINT``, ...).

        Returns:
            ``DRAIN`` for the first signal; ``REPEAT`` for the same signal within
            ``repeat_window`` seconds of the first; ``EXIT`` for any other signal
            after the first (a different one, or the same one later).
        """
        now = self._clock()
        if self._first is None:
            self._first = (signum, now)
            return StopRequest.DRAIN
        first, at = self._first
        if signum == first and now - at < self.repeat_window:
            return StopRequest.REPEAT
        return StopRequest.EXIT
