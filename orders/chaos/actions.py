"""What the chaos driver does to the system besides signals: place orders, replay jobs,
evict keys, pause one step's queue over and over and rate-limit another.

Each action survives a dead Redis: a failed step is counted or tried again on
the next turn of the driver loop.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import redis
from sqlalchemy.exc import SQLAlchemyError

from orders.app.bootstrap import App
from orders.app.placement import place
from orders.chaos.pool import lease_holder_pid
from reliable_queue import QueueError
from reliable_queue.rate_limits import RateLimit
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


@dataclass
class PauseWindow:
    """One pause of a queue, in Redis time (ms): from the moment ``pause`` returned
    (its ``since``) to just before ``resume`` was sent (None: not resumed yet).
    ``fence``: the last fencing number issued before the pause took effect (a lease
    numbered above it came after; None: judge by ``since_ms`` alone).
    ``interrupted``: Redis was killed while it lasted, so the pause may have been lost
    with the AOF tail: the window proves nothing."""

    since_ms: int
    until_ms: int | None = None
    interrupted: bool = False
    fence: int | None = None


class FlowControls:
    """Pauses one step's queue for a while at each firing and rate-limits another for the
    whole chaos window (ADR 0031, 0032); both must leave every invariant holding.

    Each call survives a dead Redis: what did not happen is done on a later turn, and
    after a Redis restart the intended state is asserted again (a crash may have
    dropped the last writes: a pause, a resume or the limit).

    Args:
        app: the application.
        pause_step: the step whose queue is paused (None: no pauses).
        pause_seconds: how long each pause lasts.
        limit_step: the step whose queue is rate-limited (None: no limit).
        limit: that limit.
        clock: monotonic seconds.
    """

    def __init__(
        self,
        app: App,
        pause_step: str | None,
        pause_seconds: float,
        limit_step: str | None,
        limit: RateLimit,
        clock: Callable[[], float],
    ) -> None:
        self.app = app
        self.pause_step = pause_step
        self.pause_seconds = pause_seconds
        self.limit_step = limit_step
        self.limit = limit
        self.clock = clock
        self.windows: list[PauseWindow] = []
        self._resume_at: float | None = None  # monotonic, while a pause is on
        self._limited = False

    @property
    def pausing(self) -> bool:
        """A pause is on (as the driver intends it)."""
        return self._resume_at is not None

    def tick(self, start_pause: bool) -> None:
        """One turn: set the limit if not yet, end a pause that is due, start one when
        ``start_pause`` (and none is on)."""
        if self.limit_step is not None and not self._limited:
            self._set_limit()
        if self._resume_at is not None and self.clock() >= self._resume_at:
            self._resume()
        elif start_pause and self._resume_at is None and self.pause_step is not None:
            try:
                state = self.app.queues[self.pause_step].pause(reason="chaos", by="orders chaos")
            except TRANSIENT:
                return
            self.windows.append(PauseWindow(int((state.since or 0) * 1000), fence=state.fence))
            self._resume_at = self.clock() + self.pause_seconds

    def crashed(self) -> None:
        """Redis is being killed: the open pause window proves nothing."""
        if self.windows and self.windows[-1].until_ms is None:
            self.windows[-1].interrupted = True

    def reassert(self) -> None:
        """After a Redis restart: the pause (or its absence) and the limit again."""
        if self.pause_step is not None:
            queue = self.app.queues[self.pause_step]
            try:
                if self._resume_at is not None:
                    queue.pause(reason="chaos", by="orders chaos")
                else:
                    queue.resume()
            except TRANSIENT:
                pass
        self._limited = False

    def stop(self) -> None:
        """End the pause and clear the limit (the faults stop).

        Raises:
            QueueError / redis.RedisError / OSError: Redis unreachable (call again).
        """
        if self._resume_at is not None:
            self._resume(raising=True)
        if self.limit_step is not None:
            self.app.queues[self.limit_step].clear_limit()
            self._limited = False

    def _set_limit(self) -> None:
        try:
            self.app.queues[str(self.limit_step)].set_limit(
                self.limit.n, self.limit.per_ms / 1000.0
            )
        except TRANSIENT:
            return
        self._limited = True

    def _resume(self, *, raising: bool = False) -> None:
        queue = self.app.queues[str(self.pause_step)]
        try:
            sec, usec = self.app.redis.time()  # before the resume: no start can precede it
            queue.resume()
        except TRANSIENT:
            if raising:
                raise
            return
        self.windows[-1].until_ms = int(sec) * 1000 + int(usec) // 1000
        self._resume_at = None


class KeyEvictor:
    """Deletes the structure a queue's waiting jobs are in (its ready list, or the
    waiting set of jobs with a priority or a fairness key), as
    ``maxmemory-policy allkeys-lru`` evicts a key.

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
        """Delete the ready list or the waiting set of one queue that has jobs waiting
        there (any queue's ready list if none).

        ``Queue.evict_key_for_chaos`` does the deleting: the queue's keys are its own.

        Returns:
            Jobs stranded (the structure's size when deleted).

        Raises:
            QueueError: Redis unreachable.
        """
        sizes = [(q, kind, q.size_of(kind)) for q in self.queues for kind in ("ready", "waiting")]
        busy = [entry for entry in sizes if entry[2]] or [e for e in sizes if e[1] == "ready"]
        queue, kind, _ = self.rng.choice(busy)
        stranded = queue.evict_key_for_chaos(kind)  # a job pushed in between: uncounted
        self.evictions += 1
        self.jobs_stranded += stranded
        return stranded
