"""SAQ worker settings (imported by the ``saq`` CLI)."""

from __future__ import annotations

from typing import Any

from saq import Queue

from .base import redis_url
from .stamp import record

queue = Queue.from_url(redis_url(), name="default")


async def noop(ctx: dict[str, Any]) -> None:
    """Does nothing."""


async def stamp(ctx: dict[str, Any], *, ts: float) -> None:
    """Records enqueue-to-start latency."""
    record(ts)


settings = {"queue": queue, "functions": [noop, stamp], "concurrency": 10}
tuned = {**settings, "concurrency": 50}
