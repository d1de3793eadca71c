"""Taskiq with taskiq-redis's RedisStreamBroker: XACK after the result is saved."""

from __future__ import annotations

import redis

from .base import AsyncProducer, Peer, apace, script


def remaining(client: redis.Redis) -> int:
    """Stream entries not yet delivered (lag) plus delivered-but-unacked (pending)."""
    try:
        groups = client.xinfo_groups("taskiq")
    except redis.ResponseError:
        return 0
    return sum(int(g.get("lag") or 0) + int(g["pending"]) for g in groups)


class Producer(AsyncProducer):
    """Enqueues with ``task.kiq()``."""

    def __init__(self, url: str) -> None:
        super().__init__()
        from . import taskiq_app

        self.app = taskiq_app
        self.run(taskiq_app.broker.startup())

    def enqueue(self, n: int) -> None:
        """``kiq()`` once per job, awaited in turn (Taskiq has no bulk enqueue)."""

        async def go() -> None:
            for _ in range(n):
                await self.app.noop.kiq()

        self.run(go())

    def enqueue_bulk(self, n: int) -> None:
        """No bulk API."""
        raise NotImplementedError

    def paced(self, rate: float, seconds: float) -> int:
        """Stamped jobs at ``rate`` jobs/s."""
        return int(self.run(apace(rate, seconds, self.app.stamp.kiq)))  # type: ignore[arg-type]

    def close(self) -> None:
        """Shut the broker down and close the loop."""
        self.run(self.app.broker.shutdown())
        super().close()


def _worker(tuned: bool) -> tuple[list[str], str]:
    argv = [
        script("taskiq"),
        "worker",
        "benchmarks.peers.taskiq_app:broker",
        "--workers",
        "1",
        "--log-level",
        "WARNING",
    ]
    if tuned:
        return [*argv, "--max-async-tasks", "500", "--max-prefetch", "100"], (
            "1 process, 500 async tasks, prefetch 100"
        )
    return argv, "1 process, max 100 async tasks (defaults; CLI default is 2 processes)"


PEER = Peer(
    name="taskiq",
    dist="taskiq",
    guarantee="at-least-once (streams)",
    mode="at-least-once: taskiq-redis RedisStreamBroker (consumer group, XACK after the "
    "result is saved, XAUTOCLAIM after 10 min idle)",
    worker=_worker,
    remaining=remaining,
    producer=Producer,
)
