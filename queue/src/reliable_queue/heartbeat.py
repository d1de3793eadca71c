"""Lease bookkeeping of one worker process and the heartbeat that extends leases."""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from dataclasses import dataclass

import redis

from .errors import QueueConnectionError
from .job import Lease
from .queue import Queue

log = logging.getLogger("reliable_queue.worker")


@dataclass
class Held:
    """A job this process holds: its queue, lease, and whether its handler started."""

    queue: Queue
    lease: Lease
    started: bool = False


class LeaseBook:
    """Thread-safe map of the jobs this process holds, by job id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, Held] = {}
        self.lost: set[str] = set()

    def add(self, queue: Queue, leases: list[Lease]) -> None:
        """Record newly fetched leases."""
        with self._lock:
            for lease in leases:
                self._held[lease.job_id] = Held(queue, lease)

    def start(self, job_id: str) -> None:
        """Mark a held job's handler as started."""
        with self._lock:
            held = self._held.get(job_id)
            if held is not None:
                held.started = True

    def drop(self, leases: list[Lease]) -> None:
        """Forget jobs that are settled (or about to be, in the next round trip).

        Only the entry holding that very lease is removed: if the job was reaped and
        fetched again by another lane of this process, its newer lease stays held
        (and heartbeated).
        """
        with self._lock:
            for lease in leases:
                held = self._held.get(lease.job_id)
                if held is not None and held.lease.token == lease.token:
                    del self._held[lease.job_id]
                    self.lost.discard(lease.job_id)

    def snapshot(self) -> list[Held]:
        """A copy of everything held now."""
        with self._lock:
            return list(self._held.values())

    def take_all(self) -> list[Held]:
        """Remove and return everything held (shutdown hand-back)."""
        with self._lock:
            held, self._held = list(self._held.values()), {}
            return held


class Heartbeat(threading.Thread):
    """Extends the leases of every held job every ``interval`` seconds.

    A lease the server refuses to extend was lost (it expired and was reaped);
    that is logged once and the job's eventual ack will be refused too.

    Args:
        book: the process's :class:`LeaseBook`.
        lease_seconds: lease length to extend to, seconds.
        interval: seconds between beats (a third of the lease is the usual choice).
        stop: event that ends the thread.
    """

    def __init__(
        self, book: LeaseBook, lease_seconds: float, interval: float, stop: threading.Event
    ) -> None:
        super().__init__(name="heartbeat", daemon=True)
        self.book = book
        self.lease_seconds = lease_seconds
        self.interval = interval
        self.stop = stop
        self.paused = threading.Event()  # tests: simulate a stalled process

    def beat(self) -> None:
        """Extend every held lease once (one script call per queue)."""
        by_queue: dict[str, tuple[Queue, list[Lease]]] = defaultdict(lambda: (None, []))  # type: ignore[arg-type,return-value]
        for held in self.book.snapshot():
            entry = by_queue.get(held.queue.name)
            if entry is None:
                entry = by_queue[held.queue.name] = (held.queue, [])
            entry[1].append(held.lease)
        for queue, leases in by_queue.values():
            try:
                refused = queue.extend(leases, self.lease_seconds)
            except (QueueConnectionError, redis.RedisError) as exc:  # e.g. OOM refuses ZADD
                log.warning("heartbeat failed on queue %s: %s", queue.name, exc)
                continue
            for job_id in refused:
                if job_id not in self.book.lost:
                    self.book.lost.add(job_id)
                    log.warning("lease lost", extra={"job_id": job_id, "queue": queue.name})

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            if not self.paused.is_set():
                self.beat()
