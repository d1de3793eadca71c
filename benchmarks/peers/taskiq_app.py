"""Taskiq broker on Redis streams (imported by ``taskiq worker``)."""

from __future__ import annotations

from taskiq_redis import RedisStreamBroker

from .base import redis_url
from .stamp import record

broker = RedisStreamBroker(url=redis_url())


@broker.task(task_name="noop")
async def noop() -> None:
    """Does nothing."""


@broker.task(task_name="stamp")
async def stamp(ts: float) -> None:
    """Records enqueue-to-start latency."""
    record(ts)
