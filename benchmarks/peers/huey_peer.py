"""Huey on Redis: a consumer pops the job; it has no ack, so no at-least-once."""

from __future__ import annotations

import redis

from .base import Peer, pace, script


def remaining(client: redis.Redis) -> int:
    """Jobs in the queue list (a popped job is invisible: at most the worker count more)."""
    return int(client.llen("huey.redis.bench"))


class Producer:
    """Enqueues by calling the task."""

    def __init__(self, url: str) -> None:
        from . import huey_app

        self.app = huey_app

    def enqueue(self, n: int) -> None:
        """Call the task once per job (Huey has no bulk enqueue)."""
        noop = self.app.noop
        for _ in range(n):
            noop()

    def enqueue_bulk(self, n: int) -> None:
        """No bulk API."""
        raise NotImplementedError

    def paced(self, rate: float, seconds: float) -> int:
        """Stamped jobs at ``rate`` jobs/s."""
        return pace(rate, seconds, self.app.stamp)

    def close(self) -> None:
        """Nothing to close."""


def _worker(tuned: bool) -> tuple[list[str], str]:
    argv = [script("huey_consumer"), "benchmarks.peers.huey_app.huey", "-k", "thread", "-q"]
    if tuned:
        return [*argv, "-w", "2"], "2 worker threads"
    return [*argv, "-w", "1"], "1 worker thread (default)"


PEER = Peer(
    name="huey",
    dist="huey",
    guarantee="at-most-once",
    mode="at-most-once: the consumer pops the job before running it (no ack); "
    "Huey has no at-least-once mode",
    worker=_worker,
    remaining=remaining,
    producer=Producer,
)
