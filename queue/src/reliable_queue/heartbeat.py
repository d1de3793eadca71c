"""Lease bookkeeping of one worker process and the heartbeat that extends leases."""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from .attempts import ABANDONED, ALWAYS, LEASE_LOST, TIMED_OUT, Guard, GuardPolicy
from .errors import QueueConnectionError
from .gate import Ticket
from .job import Lease, RawJob
from .queue import Queue

log = logging.getLogger("reliable_queue.worker")


@dataclass
class LaneRun:
    """One lane thread of a worker; ``abandoned`` is set when a run overstays its limit.

    An abandoned lane's thread may still be stuck in a handler (a Python thread
    cannot be killed); a fresh lane takes its place and the old one exits, without
    fetching again, once the handler returns.

    Attributes:
        ticket: the lane's place at the process's gate (:mod:`reliable_queue.gate`),
            held while it fetches and runs a batch; the time-limit check gives back
            an abandoned lane's hold.
        taken: the time-limit check took the batch the lane runs (set under the
            lease book's lock, :meth:`LeaseBook.take_overdue`): the check settles it,
            the lane does not (:meth:`LeaseBook.close`). The lane is abandoned then,
            so this is never cleared.
        child: the lane's isolated child process (``reliable_queue.isolation``),
            made at its first call of an isolated task; None until then.
        progress_at: when the lane last began a turn of its loop (a round trip, a
            wait for work, a batch), on the worker's monotonic clock, seconds.
        busy_since: when the lane began running the batch it runs now (same clock);
            None between batches.
        batch: the jobs of that batch (None between batches): what the workers view
            shows a busy lane running (``reliable_queue.presence``).
    """

    queue: Queue
    abandoned: threading.Event = field(default_factory=threading.Event)
    ticket: Ticket = field(default_factory=Ticket)
    taken: bool = False
    child: Any = None
    progress_at: float = 0.0
    busy_since: float | None = None
    batch: list[RawJob] | None = None


@dataclass(slots=True)
class Held:
    """A job this process holds: its queue, lease, and whether its handler started.

    The lane that holds it marks its run's start and end on the entry itself
    (:meth:`start`, :meth:`finish`), without the book's lock: each is a few attribute
    stores, which the heartbeat thread reads whole (``deadline`` is stored before
    ``started``, so a started entry it sees has its deadline).

    Attributes:
        lane: the lane running it (None when held outside a lane).
        deadline: monotonic time (seconds) its run must end by, once started with a
            time limit; None means no limit, or that the run ended.
        context: what the lane needs to settle it on a timeout (the worker's own
            record of the job; opaque here).
        result: what the run ended with, once it ended (the worker's job and outcome;
            opaque here): the time-limit check settles it when the lane is abandoned.
        guard: the delivery's attempt guard (``reliable_queue.attempts``): renewed by
            each extend, lost when one is refused, revoked by a time-out.
    """

    queue: Queue
    lease: Lease
    started: bool = False
    lane: LaneRun | None = None
    deadline: float | None = None
    context: Any = None
    result: Any = None
    guard: Guard = ALWAYS

    def start(self, deadline: float | None = None, context: Any = None) -> None:
        """Mark the run as started (``deadline``: monotonic seconds, None: no limit)."""
        self.deadline = deadline
        self.context = context
        self.started = True

    def finish(self, result: Any = None) -> None:
        """Mark the run as ended with ``result``: past its deadline it is not overdue.

        A lane settles a fetched batch once every job of it ran, so a job that finished
        stays held (and heartbeated) until then; this keeps a later job's hang from
        timing it out too, and lets the time-limit check settle it if a later job hangs.
        """
        self.result = result
        self.deadline = None


class LeaseBook:
    """Thread-safe map of the jobs this process holds, by job id.

    Args:
        guards: makes each delivery's attempt guard; None (default) gives every
            entry the guard that always allows.
        on_attempt_lost: told ``(entry, reason)`` each time this process takes an
            attempt's lease from it (``timed_out``, ``abandoned``, ``lease_lost``:
            ``reliable_queue.attempts``) before the attempt entered its guarded block
            (its guard is then sealed: it commits nothing), outside the book's lock;
            must not raise.
    """

    def __init__(
        self,
        guards: GuardPolicy | None = None,
        on_attempt_lost: Callable[[Held, str], None] | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, Held] = {}
        self.lost: set[str] = set()
        self.guards = guards
        self.on_attempt_lost = on_attempt_lost

    def attempt_lost(self, entries: list[Held], reason: str) -> None:
        """Tell ``on_attempt_lost`` about each entry whose attempt lost its lease
        before it entered its guarded block (its guard is sealed)."""
        if self.on_attempt_lost is not None:
            for entry in entries:
                if entry.guard.sealed:
                    self.on_attempt_lost(entry, reason)

    def add(
        self,
        queue: Queue,
        leases: list[Lease],
        lane: LaneRun | None = None,
        sent_at: float | None = None,
    ) -> list[Held]:
        """Record newly fetched leases (held by ``lane``, if given).

        Args:
            sent_at: monotonic seconds at which the fetch that leased them was sent
                (their guards' lease deadline counts from it); None: now.

        Returns:
            The new entries, one per lease in order: the lane marks its runs on them
            (:meth:`Held.start` / :meth:`Held.finish`) without taking the book's lock.
        """
        policy = self.guards
        if policy is None:
            entries = [Held(queue, lease, False, lane) for lease in leases]
        else:
            sent = policy.clock() if sent_at is None else sent_at
            entries = [
                Held(queue, lease, False, lane, guard=policy.guard(sent)) for lease in leases
            ]
        held = self._held
        with self._lock:
            for entry in entries:
                held[entry.lease.job_id] = entry
        return entries

    def take_overdue(self, now: float) -> tuple[list[Held], list[Held]]:
        """Claim runs past their deadline, and everything else their lanes hold.

        Args:
            now: monotonic seconds (the clock the deadlines were set on).

        Returns:
            ``(overdue, lane_mates)``: the started jobs whose deadline passed, and the
            other jobs held by the same lanes (not started yet, or finished and
            waiting for their settlement: their ``result`` is set). All are removed
            from the book (no longer heartbeated) and their lanes marked ``taken``:
            the caller settles or hands them back, and their lanes do not
            (:meth:`close`). A batch its lane closed is no longer in the book.
        """
        with self._lock:
            # a lane finishes a run without this lock (Held.finish clears the deadline):
            # each deadline is read once, so it cannot turn None between two reads;
            # a run whose guard a block holds (or held) is not timed out: its attempt
            # guard decides (reliable_queue.attempts)
            overdue = [
                h
                for h in self._held.values()
                if h.started
                and h.guard.renewing  # one let expire behaves as hung: nobody times it out
                and (d := h.deadline) is not None
                and d <= now
                and h.guard.revoke(TIMED_OUT, now)
            ]
            lanes = {id(h.lane): h.lane for h in overdue if h.lane is not None}
            taken = {id(h) for h in overdue}
            mates = [
                h
                for h in self._held.values()
                if h.lane is not None and id(h.lane) in lanes and id(h) not in taken
            ]
            for lane in lanes.values():
                lane.taken = True
            # a mate whose run ended has nothing left to guard: only the others lose
            abandoned = [h for h in mates if h.result is None and h.guard.revoke(ABANDONED, now)]
            for h in overdue + mates:
                del self._held[h.lease.job_id]
        self.attempt_lost(overdue, TIMED_OUT)
        self.attempt_lost(abandoned, ABANDONED)
        return overdue, mates

    def close(self, lane: LaneRun, entries: list[Held]) -> bool:
        """``lane``'s batch has run: stop holding its jobs, unless the check took it.

        Args:
            lane: the lane that ran the batch.
            entries: the batch's entries, from :meth:`add`.

        Returns:
            True if the lane settles (or hands back) the batch; False if the time-limit
            check took it first (:meth:`take_overdue`) and settled or handed back what
            the book held of it. Either way, once: the two meet under the book's lock.
        """
        held = self._held
        with self._lock:
            if lane.taken:
                return False
            for entry in entries:
                job_id = entry.lease.job_id
                if held.get(job_id) is entry:  # not a newer delivery of the same job
                    del held[job_id]
                    self.lost.discard(job_id)
        return True

    def take(self, lane: LaneRun, entries: list[Held]) -> bool:
        """``lane`` settles ``entries`` itself now (an isolated call it stopped): stop
        holding them, unless the time-limit check took the lane's batch first.

        Returns:
            True if the lane settles them; False if :meth:`take_overdue` took them (it
            settles or hands back what it took). The two meet under the book's lock.
        """
        held = self._held
        with self._lock:
            if lane.taken:
                return False
            for entry in entries:
                job_id = entry.lease.job_id
                if held.get(job_id) is entry:
                    del held[job_id]
                    self.lost.discard(job_id)
        return True

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
        on_beat: called at the start of every beat, before the leases are extended
            (the worker fails runs past their time limit there, so their leases are
            not extended); an exception from it is logged and the beat goes on.
    """

    def __init__(
        self,
        book: LeaseBook,
        lease_seconds: float,
        interval: float,
        stop: threading.Event,
        on_beat: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(name="heartbeat", daemon=True)
        self.on_beat = on_beat
        self.book = book
        self.lease_seconds = lease_seconds
        self.interval = interval
        self.stop = stop
        self.paused = threading.Event()  # tests: simulate a stalled process

    def beat(self) -> None:
        """Extend every held lease once (one script call per queue)."""
        if self.on_beat is not None:
            try:
                self.on_beat()
            except Exception:
                log.exception("heartbeat: time-limit check failed")
        by_queue: dict[str, tuple[Queue, list[Held]]] = defaultdict(lambda: (None, []))  # type: ignore[arg-type,return-value]
        for held in self.book.snapshot():
            if not held.guard.renewing:  # its lease is let expire (a fault injection)
                continue
            entry = by_queue.get(held.queue.name)
            if entry is None:
                entry = by_queue[held.queue.name] = (held.queue, [])
            entry[1].append(held)
        policy = self.book.guards
        for queue, entries in by_queue.values():
            sent = policy.clock() if policy is not None else 0.0
            try:
                refused = queue.extend([h.lease for h in entries], self.lease_seconds)
            except (QueueConnectionError, redis.RedisError) as exc:  # e.g. OOM refuses ZADD
                log.warning("heartbeat failed on queue %s: %s", queue.name, exc)
                continue
            if policy is not None:  # the guards learn the lease's new deadline, or its loss
                lost = set(refused)
                for held in entries:
                    if held.lease.job_id in lost:
                        held.guard.lose(LEASE_LOST)
                    else:
                        held.guard.renew(sent + self.lease_seconds)
                self.book.attempt_lost([h for h in entries if h.lease.job_id in lost], LEASE_LOST)
            for job_id in refused:
                if job_id not in self.book.lost:
                    self.book.lost.add(job_id)
                    log.warning("lease lost", extra={"job_id": job_id, "queue": queue.name})

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            if not self.paused.is_set():
                self.beat()
