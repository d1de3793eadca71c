"""The latency probe run by every library's ``stamp`` task: enqueue-to-start time."""

from __future__ import annotations

import time

import redis

from .base import LATENCY_KEY, redis_url

_client: redis.Redis | None = None


def record(enqueued_at: float) -> None:
    """Push ``now - enqueued_at`` in milliseconds onto the latency list (first thing run)."""
    delay_ms = (time.time() - enqueued_at) * 1000.0
    global _client
    if _client is None:
        _client = redis.Redis.from_url(redis_url())
    _client.rpush(LATENCY_KEY, f"{delay_ms:.4f}")
