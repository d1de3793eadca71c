"""Run counters shared by every process of one deployment, kept in one Redis hash.

Worker processes count what only they see: step runs that applied their effect
or were absorbed as duplicates, faults injected into handlers, steps the relay
sweep published. ``orders chaos`` reads them for its report. Counting never
fails the work being counted: a Redis error is logged and the count is lost
(so are counts in the writes Redis itself loses in a crash): the figures are a
lower bound, and the database stays the judge of correctness.

Field names: ``applied:<step>``, ``duplicate:<step>``, ``injected:<kind>:<step>``
(kind ``fail``, ``slow``, ``crash``, ...), ``fenced:<reason>:<step>`` (a delivery
whose commit was refused: its attempt guard's reason or ``fenced_out``, ADR 0023),
``sweep:published``, ``sweep:republished``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import redis

log = logging.getLogger("orders.metrics")


def counters_key(prefix: str) -> str:
    """The Redis hash holding the counters of the application with queue ``prefix``."""
    return f"{prefix}:counters"


class Counters:
    """Increment and read the shared counters.

    Args:
        client: redis client (bytes or str replies).
        prefix: the application's queue prefix (``Settings.queue_prefix``).
    """

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.client = client
        self.key = counters_key(prefix)

    def add(self, field: str, n: int = 1) -> None:
        """Add ``n`` to counter ``field``; a Redis error is logged, never raised."""
        if n == 0:
            return
        try:
            self.client.hincrby(self.key, field, n)
        except redis.RedisError as exc:
            log.warning("counter %s not recorded: %s", field, exc)

    def add_many(self, counts: Mapping[str, int]) -> None:
        """Add each ``counts[field]`` to its counter in one round trip (zeros skipped);
        a Redis error is logged, never raised."""
        nonzero = {field: n for field, n in counts.items() if n}
        if not nonzero:
            return
        try:
            pipe = self.client.pipeline(transaction=False)
            for field, n in nonzero.items():
                pipe.hincrby(self.key, field, n)
            pipe.execute()
        except redis.RedisError as exc:
            log.warning("counters %s not recorded: %s", ", ".join(nonzero), exc)

    def read(self) -> dict[str, int]:
        """Every counter, by field name.

        Raises:
            redis.RedisError: Redis unreachable.
        """
        raw = self.client.hgetall(self.key)
        return {_text(k): int(v) for k, v in raw.items()}

    def clear(self) -> None:
        """Reset every counter to zero.

        Raises:
            redis.RedisError: Redis unreachable.
        """
        self.client.delete(self.key)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def total(counters: dict[str, int], kind: str) -> int:
    """Sum of the counters named ``<kind>:...`` (e.g. ``total(c, "duplicate")``)."""
    return sum(n for name, n in counters.items() if name.startswith(f"{kind}:"))


def by_step(counters: dict[str, int], kind: str) -> dict[str, int]:
    """Counters ``<kind>:<step>`` as ``{step: n}`` (``kind`` may hold a colon)."""
    head = f"{kind}:"
    return {
        name[len(head) :]: n
        for name, n in counters.items()
        if name.startswith(head) and ":" not in name[len(head) :]
    }
