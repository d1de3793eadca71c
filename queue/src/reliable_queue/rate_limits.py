"""Rate limits of a queue: N jobs per interval across every worker on the Redis (ADR 0032).

While a queue has a limit its ``limit`` hash exists (``n`` jobs per ``per`` ms, and the
fixed window in force: ``start`` in queue-clock ms and ``used`` leases in it); the fetch
script reads it atomically with its pop and leases at most what the window still allows.
A deferral holds no lease and charges no attempt; the fetch says ``rate_limited`` and
how long until the window reopens.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from .errors import QueueLimitError

#: Largest ``n`` and largest interval in ms a limit may have (a Lua number stays exact).
MAX_LIMIT = 10**9
#: The units of ``N/UNIT``: seconds per unit.
UNITS = {"s": 1, "m": 60, "h": 3600}
_SPEC = re.compile(r"^\s*([0-9]+)\s*/\s*([0-9]*)\s*([smh])\s*$", re.ASCII)
"""ASCII digits only: ``\\d`` also takes other scripts' digits (``５/s`` read as 5/s)."""


@dataclass(frozen=True)
class RateLimit:
    """A queue's rate limit.

    Attributes:
        n: most jobs leased per window (>= 1).
        per_ms: the window's length in milliseconds (>= 1).
    """

    n: int
    per_ms: int

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON output: ``{"n": int, "per_seconds": float}``."""
        return {"n": self.n, "per_seconds": self.per_ms / 1000.0}

    def text(self) -> str:
        """The limit as an operator writes it, e.g. ``200/s`` or ``3/2s``."""
        for unit, seconds in (("h", 3600), ("m", 60), ("s", 1)):
            if self.per_ms % (seconds * 1000) == 0:
                count = self.per_ms // (seconds * 1000)
                return f"{self.n}/{'' if count == 1 else count}{unit}"
        return f"{self.n}/{self.per_ms}ms"


def make_limit(n: Any, per_seconds: Any) -> RateLimit:
    """A :class:`RateLimit` checked: ``n`` an integer >= 1, ``per_seconds`` a finite number.

    Args:
        n: jobs per window (int; a bool is refused).
        per_seconds: the window in seconds (int or float, at least 0.001).

    Raises:
        QueueLimitError: ``n`` not an int in ``1..MAX_LIMIT``; ``per_seconds`` not a
            finite number whose ms are in ``1..MAX_LIMIT``.
    """
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_LIMIT:
        raise QueueLimitError(f"a rate limit is 1..{MAX_LIMIT} jobs, not {n!r}")
    if isinstance(per_seconds, bool) or not isinstance(per_seconds, int | float):
        raise QueueLimitError(
            f"a rate limit's interval is a number of seconds, not {per_seconds!r}"
        )
    if not math.isfinite(per_seconds):
        raise QueueLimitError(f"a rate limit's interval is finite, not {per_seconds!r}")
    per_ms = round(per_seconds * 1000)
    if not 1 <= per_ms <= MAX_LIMIT:
        raise QueueLimitError(f"a rate limit's interval is 0.001..1e6 s, not {per_seconds!r}")
    return RateLimit(n, per_ms)


def parse_spec(spec: str) -> RateLimit:
    """Parse ``N/s``, ``N/m``, ``N/h`` or ``N/Ks`` (N jobs per K seconds), e.g. ``1/2s``.

    Raises:
        QueueLimitError: not of that form, N below 1 (``0/s``, ``-1/s``, ``nan/s``), or
            out of bounds.
    """
    match = _SPEC.match(spec) if isinstance(spec, str) else None
    if not match:
        raise QueueLimitError(
            f"a rate limit is N/s, N/m, N/h or N/Ks with N a whole number >= 1, not {spec!r}"
        )
    count = int(match.group(2) or "1")
    return make_limit(int(match.group(1)), count * UNITS[match.group(3)])


def parse_state(raw: dict[Any, Any] | None) -> RateLimit | None:
    """The :class:`RateLimit` a limit hash (``HGETALL``) holds; None when empty or unreadable.

    Never raises for foreign data (the audit reports an unreadable limit).
    """
    if not raw:
        return None
    fields = {(k.decode() if isinstance(k, bytes) else str(k)): v for k, v in raw.items()}
    try:
        n, per = int(fields["n"]), int(fields["per"])
    except (KeyError, ValueError, TypeError, UnicodeDecodeError):
        return None
    if n < 1 or per < 1:
        return None
    return RateLimit(n, per)


__all__ = ["MAX_LIMIT", "RateLimit", "make_limit", "parse_spec", "parse_state"]
