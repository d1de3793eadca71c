"""arq worker settings (imported by the ``arq`` CLI)."""

from __future__ import annotations

from typing import Any

from arq.connections import RedisSettings

from .base import redis_url
from .stamp import record


async def noop(ctx: dict[str, Any]) -> None:
    """Does nothing."""


async def stamp(ctx: dict[str, Any], ts: float) -> None:
    """Records enqueue-to-start latency."""
    record(ts)


class WorkerSettings:
    """arq defaults (max_jobs 10)."""

    functions = [noop, stamp]
    redis_settings = RedisSettings.from_dsn(redis_url())


class TunedSettings:
    """More jobs in flight per process (arq reads settings from the class itself)."""

    functions = [noop, stamp]
    redis_settings = RedisSettings.from_dsn(redis_url())
    max_jobs = 100
