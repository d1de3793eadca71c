"""A worker serves its Redis namespace only while the namespace is bound to its database.

``orders db rebind-redis`` may hand the namespace to another database while a
worker runs; the worker's next jobs are then the other database's. So the
namespace's claim (``orders.app.namespace``) is read again before each handler
call (one GET), for a job whose step the database does not know, and at every
sweep interval. Bound elsewhere, the worker hands back what it holds (released
unstarted, the attempt not counted), stops, and its process exits 1 with one
line naming both databases. A job whose step is unknown is dead-lettered only
when a fresh read confirms the binding; in doubt, it is handed back.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable

from redis.exceptions import RedisError

from orders.app.bootstrap import App
from orders.app.errors import NamespaceClaimed
from orders.app.namespace import namespace_lost
from reliable_queue import Lease, PermanentError, QueueError, RawJob
from reliable_queue.errors import IsolatedPermanentError
from reliable_queue.execution import Outcome
from reliable_queue.middleware import BatchMiddleware, CallNext, Items, Results
from workflows.errors import StepNotFound, SubjectMismatch

log = logging.getLogger("orders.worker")


class Binding(enum.Enum):
    """What a read of the namespace's claim said."""

    BOUND = "bound"  # to this worker's database
    ELSEWHERE = "elsewhere"  # to another database: stop serving
    IN_DOUBT = "in_doubt"  # the claim could not be read (Redis unreachable)


class HandedBack(Exception):
    """The job was released unstarted (attempt not counted): its namespace's binding to
    this database was lost or in doubt. The worker's own settlement of it is then
    stale and refused."""


_NO_STEP = (StepNotFound, SubjectMismatch)


def _names_no_step(error: BaseException | None) -> bool:
    """True for the permanent error of a job naming no step, workflow or subject we know
    (raised here, or in an isolated child: then its cause comes back by name)."""
    if isinstance(error, IsolatedPermanentError):
        return error.cause_type_name in {kind.__name__ for kind in _NO_STEP}
    return isinstance(error, PermanentError) and isinstance(error.__cause__, _NO_STEP)


class NamespaceGuard(BatchMiddleware):
    """Worker middleware (outermost) that keeps a worker to its own database's jobs.

    Args:
        app: the worker's application (its Redis, prefix and database label).

    Attributes:
        lost: the error naming both databases once the namespace was found bound
            elsewhere (None while it is not).
        lost_event: set at that moment (the runner stops the worker on it).
    """

    def __init__(self, app: App) -> None:
        self.app = app
        self.lost: NamespaceClaimed | None = None
        self.lost_event = threading.Event()
        self._handed: set[str] = set()  # lease tokens handed back, until their outcome
        self._lock = threading.Lock()

    def check(self) -> Binding:
        """Read the namespace's claim afresh (once lost, stays lost).

        Returns:
            BOUND, ELSEWHERE (and :attr:`lost` is set, logged once) or IN_DOUBT.
        """
        if self.lost is not None:
            return Binding.ELSEWHERE
        try:
            other = self.app.namespace_holder()
        except (RedisError, QueueError) as exc:
            log.warning("cannot read the namespace's binding: %s", exc)
            return Binding.IN_DOUBT
        mine = self.app.database_label
        if other.id == mine.id:
            return Binding.BOUND
        lost = namespace_lost(self.app.settings.queue_prefix, self.app.redis_label(), mine, other)
        with self._lock:
            first = self.lost is None
            self.lost = self.lost or lost
        if first:
            log.error("%s", lost)
            self.lost_event.set()
        return Binding.ELSEWHERE

    def around(self, items: Items, call_next: CallNext) -> Results:
        """Hand the batch back when the namespace is bound elsewhere; after the handler,
        hand back (instead of dead-lettering) the jobs naming no known step unless a
        fresh read confirms the binding."""
        if self.check() is Binding.ELSEWHERE:
            return self._hand_back(items)
        results = list(call_next(items))
        strays = [i for i, error in enumerate(results) if _names_no_step(error)]
        if strays and self.check() is not Binding.BOUND:
            for i, error in zip(strays, self._hand_back([items[i] for i in strays]), strict=True):
                results[i] = error
        return results

    def _hand_back(self, items: Items) -> Results:
        by_queue: dict[str, list[Lease]] = {}
        for _, ctx in items:
            by_queue.setdefault(ctx.queue, []).append(Lease(ctx.job_id, ctx.lease_token))
        with self._lock:
            self._handed.update(lease.token for leases in by_queue.values() for lease in leases)
        for name, leases in by_queue.items():
            try:
                self.app.queue(name).release(leases)
            except (RedisError, QueueError) as exc:  # their leases expire and are reaped
                log.warning("hand-back of %d job(s) of %s failed: %s", len(leases), name, exc)
        why = "bound to another database" if self.lost is not None else "in doubt"
        return [HandedBack(f"handed back: the namespace's binding is {why}") for _ in items]

    def unless_handed_back(
        self, record: Callable[[RawJob, Outcome], None]
    ) -> Callable[[RawJob, Outcome], None]:
        """Wrap a worker ``on_outcome`` hook so that jobs this guard handed back are not
        recorded in this database (they may be another database's)."""

        def hook(job: RawJob, outcome: Outcome) -> None:
            with self._lock:
                if job.token in self._handed:
                    self._handed.discard(job.token)
                    return
            record(job, outcome)

        return hook

    def watch(
        self, stop_worker: Callable[[], None], interval: float, done: threading.Event
    ) -> None:
        """Until ``done``: read the claim every ``interval`` seconds (an idle worker learns
        too) and call ``stop_worker`` once the namespace is found bound elsewhere."""
        while not done.is_set():
            if self.lost_event.wait(interval) or self.check() is Binding.ELSEWHERE:
                stop_worker()
                return
