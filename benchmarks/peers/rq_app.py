"""RQ tasks (imported by ``rq worker`` by dotted path)."""

from __future__ import annotations

from .stamp import record


def noop() -> None:
    """Does nothing."""


def stamp(ts: float) -> None:
    """Records enqueue-to-start latency."""
    record(ts)
