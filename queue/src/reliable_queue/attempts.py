"""The attempt guard: a block that runs only while its delivery still holds its lease.

A lease guards the job record in Redis; the guard carries it into the process, to
what the attempt touches. ``with ctx.hold_lease():`` (``JobContext``) raises
:class:`~reliable_queue.errors.AttemptLost` on entry when the attempt was timed out
or abandoned, when the heartbeat's extend was refused, or when the lease's locally
known deadline is within :func:`margin_of` of passing. While a block holds it the
time-limit check does not time the attempt out, and an attempt whose block completed
is not timed out afterwards: in one process the two decisions exclude each other.
Why and what it cannot do (a process frozen inside the block): docs/adr/0023.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType

from .errors import AttemptLost

#: the reasons an attempt loses its guard (bounded: they label metrics)
TIMED_OUT = "timed_out"  # the time-limit check failed the run
ABANDONED = "abandoned"  # its lane was abandoned and the job handed back or left to expire
LEASE_LOST = "lease_lost"  # the heartbeat's extend was refused: the job was handed out again
LEASE_EXPIRED = "lease_expired"  # the locally known deadline is (nearly) past
REASONS = (TIMED_OUT, ABANDONED, LEASE_LOST, LEASE_EXPIRED)


def margin_of(lease_seconds: float) -> float:
    """Seconds before the local lease deadline from which a guard refuses: a quarter lease.

    The heartbeat renews every third of a lease, so a live attempt's deadline is
    normally at least two thirds of a lease away; a quarter tolerates one beat lost
    and leaves a guarded block (a commit) that long to finish inside its lease.
    """
    return lease_seconds / 4.0


class GuardPolicy:
    """What the guards of one worker share: lease length, margin, clock, hold bound.

    Args:
        lease_seconds: the lease length a fetch and an extend grant, seconds.
        clock: monotonic seconds (the worker's clock; injected in tests).
        hold_limit: seconds a held block defers a time-out; past it the check times
            the attempt out anyway (a block that hangs must not keep its job leased
            forever; the database's fencing token then decides). Default: one lease.
    """

    __slots__ = ("clock", "hold_limit", "lease_seconds", "margin")

    def __init__(
        self,
        lease_seconds: float,
        clock: Callable[[], float] = time.monotonic,
        hold_limit: float | None = None,
    ) -> None:
        self.lease_seconds = lease_seconds
        self.margin = margin_of(lease_seconds)
        self.clock = clock
        self.hold_limit = lease_seconds if hold_limit is None else hold_limit

    def guard(self, sent_at: float) -> AttemptGuard:
        """A guard for a delivery whose fetch was sent at ``sent_at`` (monotonic seconds)."""
        return AttemptGuard(self, sent_at + self.lease_seconds)


class AttemptGuard:
    """One delivery's guard: one re-entrant lock and a few fields, no Redis call.

    Use as a context manager (through ``JobContext.hold_lease()``). The worker's
    heartbeat calls :meth:`renew` and :meth:`lose`, its time-limit check
    :meth:`revoke`; none of them waits for a held block.

    Args:
        policy: the worker's :class:`GuardPolicy`.
        expires: monotonic seconds at which the lease, as last granted, ends.
    """

    __slots__ = (
        "_depth",
        "_held_since",
        "_kept",
        "_lock",
        "_lost",
        "_policy",
        "_renewing",
        "_sealed",
        "expires",
    )

    def __init__(self, policy: GuardPolicy, expires: float) -> None:
        self._policy = policy
        self._lock = threading.RLock()
        self.expires = expires
        self._lost: str | None = None
        self._kept = False
        self._sealed = False
        self._renewing = True
        self._depth = 0
        self._held_since = 0.0

    @property
    def lost(self) -> str | None:
        """Why the attempt lost its lease (one of :data:`REASONS`), or None."""
        return self._lost

    @property
    def kept(self) -> bool:
        """True once a guarded block completed without an error."""
        return self._kept

    def __enter__(self) -> AttemptGuard:
        self._lock.acquire()
        now = self._policy.clock()
        reason = self._lost
        if reason is None and now >= self.expires - self._policy.margin:
            reason = LEASE_EXPIRED
        if reason is not None:
            self._lock.release()
            raise AttemptLost(reason)
        if self._depth == 0:
            self._held_since = now
        self._depth += 1
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._depth -= 1
        if exc_type is None:
            self._kept = True
        self._lock.release()

    def renew(self, expires: float) -> None:
        """The heartbeat extended the lease: it now ends at ``expires`` (monotonic s)."""
        if expires > self.expires:
            self.expires = expires

    @property
    def renewing(self) -> bool:
        """False once :meth:`let_expire` was called: the heartbeat no longer extends
        this delivery's lease, and the time-limit check no longer looks at it."""
        return self._renewing

    def let_expire(self) -> None:
        """Stop extending this delivery's lease, as a process that hung would: the lease
        expires, the job is reaped and delivered again, and this attempt's commit is
        refused once its lease deadline nears. A fault-injection point (tests and
        chaos runs); nothing else calls it."""
        self._renewing = False

    @property
    def sealed(self) -> bool:
        """True once the lease was lost while no block held the guard and none had
        completed: every block is refused, so this attempt commits nothing."""
        return self._sealed

    def lose(self, reason: str) -> None:
        """The lease is known lost (``reason``, one of :data:`REASONS`): refuse from now on.

        A block already holding the guard is not stopped (nothing can stop it; the
        database's own fencing refuses its write). Otherwise the guard is
        :attr:`sealed` (decided under its lock, so no block slips in between).
        """
        if not self._lock.acquire(blocking=False):  # a block holds it
            if self._lost is None:
                self._lost = reason
            return
        try:
            if self._lost is None:
                self._lost = reason
                self._sealed = not self._kept
        finally:
            self._lock.release()

    def revoke(self, reason: str, now: float) -> bool:
        """Take the lease away for the time-limit check, unless a block decided first.

        Args:
            reason: :data:`TIMED_OUT` or :data:`ABANDONED`.
            now: monotonic seconds (the policy's clock).

        Returns:
            True when the attempt is lost from now on (time it out). False while a
            block holds the guard (decide at a later beat; a hold longer than the
            policy's ``hold_limit`` no longer defers it) and after a block completed
            (its effect is in: the attempt is not timed out).
        """
        if not self._lock.acquire(blocking=False):
            if now - self._held_since <= self._policy.hold_limit:
                return False
            self.lose(reason)
            return True
        try:
            if self._kept:
                return False
            self.lose(reason)
            return True
        finally:
            self._lock.release()


class AlwaysAllow:
    """The guard of a context made outside a worker: every block may run."""

    __slots__ = ()
    lost = None
    kept = False
    sealed = False
    renewing = True

    def __enter__(self) -> AlwaysAllow:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def renew(self, expires: float) -> None:
        """Nothing to renew."""

    def lose(self, reason: str) -> None:
        """Nothing to lose: it keeps allowing."""

    def let_expire(self) -> None:
        """Nothing to stop: a context made outside a worker has no heartbeat."""

    def revoke(self, reason: str, now: float) -> bool:
        """Always True: no block defers a time-out."""
        return True

    def __reduce__(self) -> str:
        return "ALWAYS"  # pickled as the module's one instance

    def __repr__(self) -> str:
        return "ALWAYS"


ALWAYS = AlwaysAllow()
"""The guard that always allows (``execute()``, tests, contexts built by hand)."""

Guard = AttemptGuard | AlwaysAllow
"""What ``JobContext.guard`` holds."""
