"""Dramatiq actors on the Redis broker (imported by the ``dramatiq`` CLI)."""

from __future__ import annotations

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from .base import redis_url
from .stamp import record

broker = RedisBroker(url=redis_url())
dramatiq.set_broker(broker)


@dramatiq.actor
def noop() -> None:
    """Does nothing."""


@dramatiq.actor
def stamp(ts: float) -> None:
    """Records enqueue-to-start latency."""
    record(ts)
