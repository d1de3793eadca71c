"""Celery on Redis with ``task_acks_late=True`` (ack after the task ran)."""

from __future__ import annotations

import redis

from .base import Peer, pace, script


def remaining(client: redis.Redis) -> int:
    """Messages queued plus delivered-but-unacked."""
    pipe = client.pipeline(transaction=False)
    pipe.llen("celery")
    pipe.hlen("unacked")
    return sum(pipe.execute())


class Producer:
    """Enqueues with ``task.delay()``."""

    def __init__(self, url: str) -> None:
        from . import celery_app

        self.app = celery_app

    def enqueue(self, n: int) -> None:
        """``task.delay()`` once per job (Celery has no bulk enqueue)."""
        delay = self.app.noop.delay
        for _ in range(n):
            delay()

    def enqueue_bulk(self, n: int) -> None:
        """No bulk API."""
        raise NotImplementedError

    def paced(self, rate: float, seconds: float) -> int:
        """Stamped jobs at ``rate`` jobs/s."""
        return pace(rate, seconds, self.app.stamp.delay)

    def close(self) -> None:
        """Close the producer pool."""
        self.app.app.close()


def _worker(tuned: bool) -> tuple[list[str], str]:
    argv = [script("celery"), "-A", "benchmarks.peers.celery_app", "worker", "-l", "WARNING"]
    if tuned:
        extra = [
            "-P",
            "solo",
            "--prefetch-multiplier",
            "64",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
        return [*argv, *extra], "solo pool, prefetch x64, no gossip/mingle/heartbeat"
    return argv, "prefork pool, 2 children (cores), prefetch x4 (defaults)"


PEER = Peer(
    name="celery",
    dist="celery",
    guarantee="at-least-once (acks_late)",
    mode="task_acks_late=True: ack after the task ran; unacked messages come back after "
    "the visibility timeout (1 h)",
    worker=_worker,
    remaining=remaining,
    producer=Producer,
)
