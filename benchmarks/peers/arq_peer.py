"""arq: a job stays in the queue under an in-progress key until it finished."""

from __future__ import annotations

import redis
from arq import create_pool
from arq.connections import RedisSettings

from .base import AsyncProducer, Peer, apace, script


def remaining(client: redis.Redis) -> int:
    """Jobs in ``arq:queue`` (removed when finished)."""
    return int(client.zcard("arq:queue"))


class Producer(AsyncProducer):
    """Enqueues with ``ArqRedis.enqueue_job``."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.pool = self.run(create_pool(RedisSettings.from_dsn(url)))

    def enqueue(self, n: int) -> None:
        """``enqueue_job`` once per job, awaited in turn (arq has no bulk enqueue)."""

        async def go() -> None:
            for _ in range(n):
                await self.pool.enqueue_job("noop")  # type: ignore[attr-defined]

        self.run(go())

    def enqueue_bulk(self, n: int) -> None:
        """No bulk API."""
        raise NotImplementedError

    def paced(self, rate: float, seconds: float) -> int:
        """Stamped jobs at ``rate`` jobs/s."""
        send = lambda ts: self.pool.enqueue_job("stamp", ts)  # type: ignore[attr-defined]  # noqa: E731
        return int(self.run(apace(rate, seconds, send)))  # type: ignore[arg-type]

    def close(self) -> None:
        """Close the pool and the loop."""
        self.run(self.pool.aclose())  # type: ignore[attr-defined]
        super().close()


def _worker(tuned: bool) -> tuple[list[str], str]:
    if tuned:
        return [script("arq"), "benchmarks.peers.arq_app.TunedSettings"], "max_jobs 100"
    return [script("arq"), "benchmarks.peers.arq_app.WorkerSettings"], "max_jobs 10 (default)"


PEER = Peer(
    name="arq",
    dist="arq",
    guarantee="at-least-once",
    mode="default: job stays queued under an in-progress key until finished; re-run "
    "if the worker is lost (at-least-once by design)",
    worker=_worker,
    remaining=remaining,
    producer=Producer,
)
