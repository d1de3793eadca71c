"""Huey on Redis (imported by ``huey_consumer``)."""

from __future__ import annotations

from huey import RedisHuey

from .base import redis_url
from .stamp import record

huey = RedisHuey("bench", url=redis_url())


@huey.task()
def noop() -> None:
    """Does nothing."""


@huey.task()
def stamp(ts: float) -> None:
    """Records enqueue-to-start latency."""
    record(ts)
