"""What the chaos driver does to the system besides signals: place orders, replay jobs.

Each action survives a dead Redis: a failed step is counted or tried again on
the next turn of the driver loop.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import redis
from sqlalchemy.exc import SQLAlchemyError

from orders.app.bootstrap import App
from orders.app.placement import place
from orders.chaos.pool import lease_holder_pid
from reliable_queue import QueueError
from workflows.errors import PublisherUnavailable

TRANSIENT = (QueueError, PublisherUnavailable, redis.RedisError, OSError)
"""Errors a driver step may meet while Redis is down; the step is tried again later."""


@dataclass
class PlacerCounts:
    """Placement under chaos: orders committed, and placements whose publish after the
    commit failed (Redis down: the steps went back to pending, the relay sweep
    publishes them later)."""

    order_ids: list[int] = field(default_factory=list)
    publish_failures: int = 0
    placement_errors: int = 0


class Placer:
    """Places orders through the outbox and publishes them, surviving a dead Redis.

    Args:
        app: the application.
        source: ``tpch`` or ``random``.
        rng: randomness for ``random`` orders.
    """

    def __init__(self, app: App, source: str, rng: random.Random) -> None:
        self.app = app
        self.source = source
        self.rng = rng
        self.counts = PlacerCounts()

    def place(self, n: int) -> int:
        """Place ``n`` orders in one transaction, then publish their steps.

        Returns:
            Orders placed (0 when the transaction failed; it is tried again later).
        """
        try:
            publisher = self.app.publisher
        except (*TRANSIENT, SQLAlchemyError):  # no queue at hand: the steps are written pending
            publisher = None
        try:
            result = place(
                self.app.session_factory,
                n,
                source=self.source,
                rng=self.rng,
                batch_size=n,
                publisher=publisher,
                tracer=self.app.tracer("orders.placement"),
            )
        except SQLAlchemyError:
            self.counts.placement_errors += 1
            return 0
        self.counts.order_ids.extend(result.order_ids)
        if result.orders and (publisher is None or result.publish_error is not None):
            self.counts.publish_failures += 1
        return len(result.orders)


class Replayer:
    """Puts recently finished jobs back on their queues (duplicate deliveries).

    Args:
        app: the application.
        steps: steps whose queues are replayed.
        count: jobs per firing.
        rng: chooses the jobs.
    """

    def __init__(self, app: App, steps: Sequence[str], count: int, rng: random.Random) -> None:
        self.queues = [app.queues[s] for s in steps]
        self.count = count
        self.rng = rng
        self.replayed = 0

    def replay(self) -> int:
        """Replay up to ``count`` finished jobs chosen among the newest of each queue.

        Returns:
            Jobs replayed.

        Raises:
            QueueError: Redis unreachable.
        """
        candidates = [(q, job_id) for q in self.queues for job_id in q.ids_in("done", -100, -1)]
        chosen = self.rng.sample(candidates, min(self.count, len(candidates)))
        done = 0
        for queue in {q.name: q for q, _ in chosen}.values():
            replayed, _ = queue.replay([j for q, j in chosen if q is queue])
            done += len(replayed)
        self.replayed += done
        return done


def lease_holders(app: App) -> set[int]:
    """Pids of the processes holding a lease on any step queue now.

    Raises:
        QueueError: Redis unreachable.
    """
    pids = set()
    for queue in app.queues.values():
        for token in queue.lease_tokens():
            pid = lease_holder_pid(token)
            if pid is not None:
                pids.add(pid)
    return pids


class KeyEvictor:
    """Deletes a queue's ready list, as ``maxmemory-policy allkeys-lru`` evicts a key.

    The jobs on the list keep their records and idempotency keys but sit in no
    structure: nothing will run them. The outbox sweep must find their steps
    (``Queue.locate`` says ``nowhere``) and publish them again.

    Args:
        app: the application.
        rng: chooses the queue.
    """

    def __init__(self, app: App, rng: random.Random) -> None:
        self.queues = list(app.queues.values())
        self.rng = rng
        self.evictions = 0
        self.jobs_stranded = 0

    def evict(self) -> int:
        """Delete the ready list of one queue that has jobs waiting (any queue if none).

        ``Queue.evict_key_for_chaos`` does the deleting: the queue's keys are its own.

        Returns:
            Jobs stranded (the list's length when deleted).

        Raises:
            QueueError: Redis unreachable.
        """
        lengths = [(q, q.size_of("ready")) for q in self.queues]
        busy = [(q, n) for q, n in lengths if n] or lengths
        queue, _ = self.rng.choice(busy)
        stranded = queue.evict_key_for_chaos("ready")  # a job pushed in between: uncounted
        self.evictions += 1
        self.jobs_stranded += stranded
        return stranded
