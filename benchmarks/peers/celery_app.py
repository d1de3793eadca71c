"""Celery app with late acks (imported by ``celery -A``)."""

from __future__ import annotations

from celery import Celery

from .base import redis_url
from .stamp import record

app = Celery("bench", broker=redis_url())
app.conf.update(
    task_acks_late=True,
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@app.task(name="noop")
def noop() -> None:
    """Does nothing."""


@app.task(name="stamp")
def stamp(ts: float) -> None:
    """Records enqueue-to-start latency."""
    record(ts)
