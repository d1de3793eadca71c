"""The periodic outbox sweep, run as a thread inside worker processes.

Every worker process may run it; a Redis lock (SET NX PX) lets one sweep
happen per interval across all of them. Every
``relay_reconcile_interval_seconds`` the sweep also reconciles the database
with the dead-letter queues (``orders.worker.reconcile``), so an order whose
job the reaper dead-lettered shows as blocked in every view.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from orders.app.bootstrap import App
from orders.worker.binding import Binding
from orders.worker.counters import Counters
from orders.worker.reconcile import reconcile_dead_letters
from workflows.relay import SweepResult, sweep

log = logging.getLogger("orders.relay")


def sweep_once(app: App) -> SweepResult:
    """One sweep: publish pending steps, re-publish steps Redis lost.

    Raises:
        reliable_queue.QueueError / sqlalchemy errors: the next sweep tries again.
    """
    return sweep(
        app.session_factory,
        app.publisher,
        known_keys=app.publisher.known_keys,
        republish_after=app.settings.relay_republish_after_seconds,
        policy=app.publish_policy,
        tracer=app.tracer("workflows.relay"),
    )


def relay_lock_key(prefix: str) -> str:
    """The Redis key that lets one sweeper at a time run (``SET NX PX``), an application key
    beside the queues of ``prefix``, outside every queue's hash tag."""
    return f"{prefix}:relay-lock"


class SweepLoop(threading.Thread):
    """Runs :func:`sweep_once` every ``relay_sweep_interval_seconds`` while not stopped.

    ``may_sweep`` (the worker's ``NamespaceGuard.check``) is asked first at every
    interval: a sweep runs only while the namespace is bound to this database.

    Attributes:
        totals: published / republished / reconciled counts summed over the sweeps this
            loop ran
            (this process only; every process also adds them to the shared
            ``sweep:published`` / ``sweep:republished`` counters in Redis).
    """

    def __init__(
        self,
        app: App,
        stop: threading.Event,
        *,
        use_lock: bool = True,
        clock: Callable[[], float] = time.monotonic,
        may_sweep: Callable[[], Binding] | None = None,
    ) -> None:
        super().__init__(name="relay-sweep", daemon=True)
        self.app = app
        self.stop = stop
        self.use_lock = use_lock
        self.clock = clock
        self.next_reconcile = clock()
        self.totals = {"published": 0, "republished": 0, "reconciled": 0}
        self.lock_key = relay_lock_key(app.settings.queue_prefix)
        self.counters = Counters(app.redis, app.settings.queue_prefix)
        self.may_sweep = may_sweep

    def run(self) -> None:
        interval = self.app.settings.relay_sweep_interval_seconds
        while not self.stop.wait(interval):
            # a namespace handed to another database gets none of our rows, and none
            # of its dead letters is copied onto our steps
            if self.may_sweep is not None and self.may_sweep() is not Binding.BOUND:
                continue
            try:
                if self.use_lock and not self.app.redis.set(
                    self.lock_key, "1", nx=True, px=max(int(interval * 1000) - 50, 1)
                ):
                    continue
                result = sweep_once(self.app)
                self.reconcile_when_due()
            except Exception as exc:  # the next sweep tries again
                log.warning("relay sweep failed: %s", exc)
                continue
            self.totals["published"] += result.published
            self.totals["republished"] += result.republished
            self.counters.add("sweep:published", result.published)
            self.counters.add("sweep:republished", result.republished)
            if result.unpublishable:
                log.error(
                    "relay gave up %d outbox row(s) as unpublishable: see `orders outbox list`",
                    result.unpublishable,
                )
            if result.republished:
                log.warning("relay re-published %d step(s) the queue had lost", result.republished)

    def reconcile_when_due(self) -> None:
        """Mark the steps of dead-lettered jobs dead, at most once per reconcile interval.

        Raises:
            reliable_queue.QueueError / sqlalchemy errors: the next pass tries again.
        """
        now = self.clock()
        if now < self.next_reconcile:
            return
        self.next_reconcile = now + self.app.settings.relay_reconcile_interval_seconds
        marked = reconcile_dead_letters(self.app)
        self.totals["reconciled"] += marked
        if marked:
            log.warning("marked %d step(s) dead from the dead-letter queues", marked)
