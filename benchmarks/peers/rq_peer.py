"""RQ: default Worker (forks a work horse per job); tuned: SimpleWorker (no fork)."""

from __future__ import annotations

import redis
from rq import Queue
from rq.registry import StartedJobRegistry

from .base import Peer, pace, redis_url, script
from .rq_app import noop, stamp

BULK_CHUNK = 1000


def remaining(client: redis.Redis) -> int:
    """Queued jobs plus jobs in the started registry."""
    q = Queue("default", connection=client)
    return len(q) + StartedJobRegistry(queue=q).count


class Producer:
    """Enqueues with ``Queue.enqueue`` / ``Queue.enqueue_many``."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url)
        self.queue = Queue("default", connection=self.client)

    def enqueue(self, n: int) -> None:
        """``Queue.enqueue`` once per job."""
        for _ in range(n):
            self.queue.enqueue(noop)

    def enqueue_bulk(self, n: int) -> None:
        """``Queue.enqueue_many`` (one pipeline) in chunks of 1,000 jobs."""
        for start in range(0, n, BULK_CHUNK):
            count = min(BULK_CHUNK, n - start)
            self.queue.enqueue_many([Queue.prepare_data(noop) for _ in range(count)])

    def paced(self, rate: float, seconds: float) -> int:
        """Stamped jobs at ``rate`` jobs/s."""
        return pace(rate, seconds, lambda ts: self.queue.enqueue(stamp, ts))

    def close(self) -> None:
        """Close the client."""
        self.client.close()


def _worker(tuned: bool) -> tuple[list[str], str]:
    argv = [script("rq"), "worker", "--url", redis_url(), "--logging_level", "WARNING"]
    if tuned:
        return [*argv, "-w", "rq.worker.SimpleWorker", "default"], "SimpleWorker (no fork)"
    return [*argv, "default"], "Worker, fork per job (default)"


PEER = Peer(
    name="rq",
    dist="rq",
    guarantee="no redelivery (lost -> failed)",
    mode="RQ default: job in StartedJobRegistry while it runs; a lost job is moved to "
    "FailedJobRegistry when its worker's heartbeat expires (not re-run without Retry)",
    worker=_worker,
    remaining=remaining,
    producer=Producer,
    bulk="enqueue_many (pipeline, 1,000/call)",
)
