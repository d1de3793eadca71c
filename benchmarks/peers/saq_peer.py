"""SAQ on Redis: jobs are tracked as incomplete until finished; stuck ones are swept."""

from __future__ import annotations

import redis
from saq import Queue

from .base import AsyncProducer, Peer, apace, script

RETRIES = 3  # the default of 1 never re-runs a job swept from a lost worker


def remaining(client: redis.Redis) -> int:
    """Jobs queued plus incomplete (leased, not finished)."""
    pipe = client.pipeline(transaction=False)
    pipe.llen("saq:default:queued")
    pipe.zcard("saq:default:incomplete")
    queued, incomplete = pipe.execute()
    return max(int(queued), int(incomplete))


class Producer(AsyncProducer):
    """Enqueues with ``Queue.enqueue``."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.queue = Queue.from_url(url, name="default")
        self.run(self.queue.connect())

    def enqueue(self, n: int) -> None:
        """``Queue.enqueue`` once per job, awaited in turn (SAQ has no bulk enqueue)."""

        async def go() -> None:
            for _ in range(n):
                await self.queue.enqueue("noop", retries=RETRIES)

        self.run(go())

    def enqueue_bulk(self, n: int) -> None:
        """No bulk API."""
        raise NotImplementedError

    def paced(self, rate: float, seconds: float) -> int:
        """Stamped jobs at ``rate`` jobs/s."""
        send = lambda ts: self.queue.enqueue("stamp", ts=ts, retries=RETRIES)  # noqa: E731
        return int(self.run(apace(rate, seconds, send)))  # type: ignore[arg-type]

    def close(self) -> None:
        """Disconnect and close the loop."""
        self.run(self.queue.disconnect())
        super().close()


def _worker(tuned: bool) -> tuple[list[str], str]:
    argv = [script("saq"), "--workers", "1", "--quiet"]
    if tuned:
        return [*argv, "benchmarks.peers.saq_app.tuned"], "concurrency 50"
    return [*argv, "benchmarks.peers.saq_app.settings"], "concurrency 10 (default)"


PEER = Peer(
    name="saq",
    dist="saq",
    guarantee="at-least-once (retries=3)",
    mode="jobs enqueued with retries=3: a job is incomplete until finished; one stuck "
    "on a lost worker is swept after its timeout (10 s) and retried",
    worker=_worker,
    remaining=remaining,
    producer=Producer,
)
