"""orderflow (reliable_queue) as a peer: the same harness as everyone else."""

from __future__ import annotations

import redis

from reliable_queue import EnqueueRequest, Queue
from reliable_queue.keys import QueueKeys

from .base import Peer, pace
from .orderflow_app import PREFIX, QUEUE

MODE = "at-least-once: 30 s lease, token-checked ack, 5 attempts with backoff, DLQ"
BULK_CHUNK = 1000


def worker_argv(concurrency: int = 1, batch_size: int = 10, queue: str = QUEUE) -> list[str]:
    """argv of one orderflow worker process."""
    return [
        "python",
        "-m",
        "benchmarks.peers.orderflow_app",
        "--concurrency",
        str(concurrency),
        "--batch-size",
        str(batch_size),
        "--queue",
        queue,
    ]


def remaining(client: redis.Redis, queue: str = QUEUE) -> int:
    """Jobs ready, delayed or leased (not yet acked)."""
    keys = QueueKeys(PREFIX, queue)
    pipe = client.pipeline(transaction=False)
    pipe.llen(keys.key("ready"))
    pipe.zcard(keys.key("active"))
    pipe.zcard(keys.key("delayed"))
    return sum(pipe.execute())


class Producer:
    """Enqueues through :class:`reliable_queue.Queue`."""

    def __init__(self, url: str, queue: str = QUEUE) -> None:
        self.client = redis.Redis.from_url(url)
        self.queue = Queue(self.client, queue, prefix=PREFIX)

    def enqueue(self, n: int) -> None:
        """``Queue.enqueue`` once per job."""
        enqueue = self.queue.enqueue
        for _ in range(n):
            enqueue("noop", {})

    def enqueue_bulk(self, n: int) -> None:
        """``Queue.enqueue_many`` in chunks of 1,000 jobs."""
        for start in range(0, n, BULK_CHUNK):
            count = min(BULK_CHUNK, n - start)
            self.queue.enqueue_many([EnqueueRequest("noop", {})] * count)

    def paced(self, rate: float, seconds: float) -> int:
        """Stamped jobs at ``rate`` jobs/s."""
        return pace(rate, seconds, lambda ts: self.queue.enqueue("stamp", {"ts": ts}))

    def close(self) -> None:
        """Close the client."""
        self.client.close()


def _worker(tuned: bool) -> tuple[list[str], str]:
    if tuned:
        return worker_argv(2, 100), "2 lanes, batch 100"
    return worker_argv(1, 10), "1 lane, batch 10 (defaults)"


PEER = Peer(
    name="orderflow",
    dist="reliable-queue",
    guarantee="at-least-once",
    mode=MODE,
    worker=_worker,
    remaining=remaining,
    producer=Producer,
    bulk="enqueue_many (1,000/call)",
)
