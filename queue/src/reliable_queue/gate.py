"""The gate of a worker process's lanes: batches side by side, or a suspect alone.

A readers-writer lock with writer preference (ADR 0021). A lane holds it shared from
sending a fetch until its batch has run; a lane that is to run a suspect (a job that
may have killed its process) holds it exclusively, so nothing else of the process
runs beside the suspect and a loss can be charged to it. Once a lane waits for the
exclusive hold no new shared hold is granted: the running batches end, then its turn
comes. What a lane holds is kept on its :class:`Ticket`, and leaving is idempotent:
whoever comes first gives it back, the lane or the time-limit check that abandons a
hung lane (whose stuck thread then no longer counts as running). A lane may keep its
shared hold from one batch to the next while no lane waits (:attr:`LaneGate.waiting`),
so a drain pays no lock per batch.
"""

from __future__ import annotations

import threading

NONE, SHARED, EXCLUSIVE = 0, 1, 2


class Ticket:
    """One lane's place at a :class:`LaneGate`.

    Attributes:
        holds: what the lane holds now: ``NONE``, ``SHARED`` or ``EXCLUSIVE``
            (changed by the gate only, under its lock).
    """

    __slots__ = ("holds",)

    def __init__(self) -> None:
        self.holds = NONE


class LaneGate:
    """Shared holds for lanes running batches, an exclusive one for a lane running alone.

    Thread-safe: every change is made under the gate's lock. Every wait ends when the
    gate is closed (:meth:`close`; the hold is then not granted). The gate is per
    process (one :class:`~reliable_queue.worker.Worker`).

    Attributes:
        waiting: lanes waiting for the exclusive hold. Read without the lock it is a
            hint: a lane that keeps its shared hold between batches gives it back
            once it reads a waiting lane here. A stale read makes the waiting lane
            wait one batch more; it never lets a lane run beside the exclusive hold,
            which is granted only when no shared hold is left.
    """

    def __init__(self) -> None:
        # the state is read and changed under the plain lock (cheaper to enter than the
        # condition); the condition, on the same lock, is for the waits
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._shared = 0  # shared holds granted and not given back
        self._exclusive = False  # the exclusive hold is granted and not given back
        self.waiting = 0
        self._closed = False

    def try_shared(self, ticket: Ticket) -> bool:
        """Take a shared hold now, unless a lane holds or waits for the exclusive one
        (or the gate is closed). Never blocks.

        Returns:
            True if ``ticket`` now holds the gate shared.
        """
        lock = self._lock
        lock.acquire()
        try:
            if self._closed or self._exclusive or self.waiting:
                return False
            self._shared += 1
            ticket.holds = SHARED
            return True
        finally:
            lock.release()

    def shared(self, ticket: Ticket) -> bool:
        """Take a shared hold once no lane holds or waits for the exclusive one.

        Returns:
            True if ``ticket`` now holds the gate shared; False when the gate was
            closed first.
        """
        with self._cond:
            while not self._closed and (self._exclusive or self.waiting):
                self._cond.wait()
            if self._closed:
                return False
            self._shared += 1
            ticket.holds = SHARED
            return True

    def exclusive(self, ticket: Ticket) -> bool:
        """Take the exclusive hold once no other hold is granted (no new shared hold is
        granted while a lane waits for it).

        Returns:
            True if ``ticket`` now holds the gate exclusively; False when the gate was
            closed first.
        """
        with self._cond:
            self.waiting += 1
            try:
                while not self._closed and (self._exclusive or self._shared):
                    self._cond.wait()
                if self._closed:
                    return False
                self._exclusive = True
                ticket.holds = EXCLUSIVE
                return True
            finally:
                self.waiting -= 1
                self._cond.notify_all()  # shared holds may be granted again

    def leave(self, ticket: Ticket) -> None:
        """Give back what ``ticket`` holds; nothing if it holds nothing (any thread)."""
        lock = self._lock
        lock.acquire()
        try:
            held = ticket.holds
            if held == SHARED:
                ticket.holds = NONE
                self._shared -= 1
                if not self._shared and self.waiting:
                    self._cond.notify_all()  # a lane waits for the exclusive hold
            elif held == EXCLUSIVE:
                ticket.holds = NONE
                self._exclusive = False
                self._cond.notify_all()
        finally:
            lock.release()

    def close(self) -> None:
        """End every wait and refuse every later hold (the worker is stopping).

        Holds already granted stay until given back.
        """
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def counts(self) -> tuple[int, bool, int]:
        """``(shared holds, exclusive held, lanes waiting for it)``, for tests and logs."""
        with self._lock:
            return self._shared, self._exclusive, self.waiting
