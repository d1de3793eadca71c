"""Dramatiq with its Redis broker: messages are acked after processing (its default)."""

from __future__ import annotations

import redis

from .base import Peer, pace, script

TUNED_THREADS = 64  # drain rate grows with threads up to ~32-64 here (8: ~2k/s)


def remaining(client: redis.Redis) -> int:
    """Messages not yet acked (the broker's message hash)."""
    return int(client.hlen("dramatiq:default.msgs"))


class Producer:
    """Enqueues with ``actor.send()``."""

    def __init__(self, url: str) -> None:
        from . import dramatiq_app

        self.app = dramatiq_app

    def enqueue(self, n: int) -> None:
        """``actor.send()`` once per job (Dramatiq has no bulk enqueue)."""
        send = self.app.noop.send
        for _ in range(n):
            send()

    def enqueue_bulk(self, n: int) -> None:
        """No bulk API."""
        raise NotImplementedError

    def paced(self, rate: float, seconds: float) -> int:
        """Stamped jobs at ``rate`` jobs/s."""
        return pace(rate, seconds, self.app.stamp.send)

    def close(self) -> None:
        """Close the broker's connections."""
        self.app.broker.close()


def _worker(tuned: bool) -> tuple[list[str], str]:
    argv = [script("dramatiq"), "benchmarks.peers.dramatiq_app", "--processes", "1"]
    if tuned:
        return [*argv, "--threads", str(TUNED_THREADS)], f"1 process, {TUNED_THREADS} threads"
    return [*argv, "--threads", "8"], "1 process, 8 threads (default threads)"


PEER = Peer(
    name="dramatiq",
    dist="dramatiq",
    guarantee="at-least-once",
    mode="at-least-once: Redis broker acks after processing; unacked messages of a dead "
    "worker are requeued (default)",
    worker=_worker,
    remaining=remaining,
    producer=Producer,
)
