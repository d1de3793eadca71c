"""``orders chaos``: the experiment that proves the promise under faults.

While orders are placed at a steady rate, the driver SIGKILLs worker
processes, SIGTERMs workers in the middle of a job, freezes workers (SIGSTOP
for longer than a lease, then SIGCONT; some freeze themselves inside a write
transaction), SIGKILLs the Redis server
(dropping the last second of its AOF with ``everysec``, as a power loss would)
and restarts it, and replays finished jobs; the workers meanwhile fail,
stall past their lease, or kill themselves as told by the injected handler
faults. When placing is done the faults stop; the run waits for quiescence,
optionally redrives the DLQ, and then judges from the database (every
invariant of ``orders.app.invariants``), from the queues (drained, no orphaned
lease) and from the workers' attempt journal (no fencing number handed out
twice, no step done by an attempt its process had given up:
``orders.chaos.journal``). The report says what was injected, how often, what
the system did about it, and whether every promise held.

Time and randomness are injected (``clock``, ``sleep``, ``rng``); the small
rules (:class:`Periodic`, :func:`due_orders`) are pure.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError

from orders.app.cancellation import cancel_in_flight
from orders.chaos.actions import (
    TRANSIENT,
    FlowControls,
    KeyEvictor,
    Placer,
    Replayer,
    lease_holders,
)
from orders.chaos.observe import (
    ChaosProgress,
    counter_snapshot,
    lost_increments,
    queue_snapshots,
    unsettled_orders,
)
from orders.chaos.poison import PoisonJob, PoisonOutcome
from orders.chaos.pool import WorkerPool
from orders.chaos.redis_crash import AofHistory, RedisCrasher
from orders.chaos.report import ChaosReport
from orders.chaos.setup import ChaosOptions, ChaosServices, handler_faults
from orders.chaos.summary import RunFacts, handler_runs, summarize
from orders.domain.models import Order
from orders.domain.queries import totals
from orders.sources.scarcity import make_scarce
from orders.worker.faults import FaultConfig, FaultStore
from orders.worker.reconcile import reconcile_dead_letters
from reliable_queue.cluster import clients_running
from workflows.errors import WorkflowError
from workflows.uow import UnitOfWork

TICK = 0.1  # seconds between two turns of the driver loop
POISON_TEND_SECONDS = 0.5  # how often the driver looks after the poison job
FAULT_CACHE_SECONDS = 1.5  # workers re-read their fault configs at most once a second


class Periodic:
    """A fault schedule: fires every ``period`` seconds, first at ``start + period / 2``.

    Args:
        period: seconds between firings; 0 never fires.
        start: monotonic time the schedule starts.
    """

    def __init__(self, period: float, start: float) -> None:
        self.period = period
        self.next = start + period / 2 if period > 0 else math.inf

    def due(self, now: float) -> bool:
        """True once per period when ``now`` has reached the next firing time.

        Firings missed while the driver was busy are not made up.
        """
        if now < self.next:
            return False
        while self.next <= now:
            self.next += self.period
        return True


def due_orders(placed: int, total_orders: int, rate: float, elapsed: float) -> int:
    """Orders to place now to keep ``rate`` orders/s (the first one at once)."""
    target = min(total_orders, int(rate * max(elapsed, 0.0)) + 1)
    return max(target - placed, 0)


class ChaosRun:
    """One chaos experiment on prepared services (see ``orders.chaos.setup.prepare``).

    Args:
        services: the app, embedded Redis (if any), data dir and worker environment.
        options: the run's options.
        pool: the worker processes (not started yet).
        rng: the run's randomness.
        clock / sleep: monotonic seconds, and how to wait.
        on_progress: called about twice a second with a :class:`ChaosProgress`.
    """

    def __init__(
        self,
        services: ChaosServices,
        options: ChaosOptions,
        pool: WorkerPool,
        *,
        rng: random.Random,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        on_progress: Callable[[ChaosProgress], None] = lambda p: None,
    ) -> None:
        self.services = services
        self.app = services.app
        self.options = options
        self.pool = pool
        self.rng = rng
        self.clock = clock
        self.sleep = sleep
        self.on_progress = on_progress
        self.placer = Placer(self.app, options.source, rng)
        self.replayer = Replayer(self.app, options.replay_steps, options.replay_count, rng)
        self.evictor = KeyEvictor(self.app, rng)
        self.flow = FlowControls(
            self.app,
            options.pause_step if options.pause_every > 0 else None,
            options.pause_seconds,
            options.limit_step,
            options.rate_limit,
            clock,
        )
        self.crasher: RedisCrasher | None = None
        if services.server is not None:
            history = AofHistory(services.server.redis_dir, clock=clock)
            self.crasher = RedisCrasher(
                services.server,
                lose_window=options.effective_lose_window,
                history=history,
                clock=clock,
            )
        self.first_order_id = self._next_order_id()
        self.poison: PoisonJob | None = None
        if options.poison_step is not None:
            self.poison = PoisonJob(
                self.app, options.poison_step, options.poison_attempts, self.first_order_id
            )
        self.poison_outcome: PoisonOutcome | None = None
        self._poison_armed = self.poison is not None
        self._poison_next = -math.inf
        self.started = 0.0
        self.warmup_seconds = 0.0
        self.lost_increments: dict[str, dict[str, int]] = {}
        self.runs_while_on: dict[str, int] = {}
        self._before_crash: dict[str, dict[str, int]] | None = None
        self._last_progress = -math.inf
        self.cancelled: list[int] = []

    def _next_order_id(self) -> int:
        with UnitOfWork(self.app.session_factory) as uow:
            return int(uow.session.scalar(select(func.max(Order.id))) or 0) + 1

    # ----------------------------------------------------------------- phases
    def run(self) -> ChaosReport:
        """Start the workers, run the faults while placing, settle, check, report.

        The worker processes are stopped on the way out (also on an exception).
        """
        if self.options.source == "tpch":
            with UnitOfWork(self.app.session_factory) as uow:
                make_scarce(uow.session, self.options.orders, self.options.out_of_stock_share)
                uow.commit()
        self.pool.start_all()
        try:
            self.warmup_seconds = self._wait_for_workers()
            self.started = self.clock()
            faults_end = self._chaos_window()
            quiet_at = self._settle(faults_end)
            redriven = 0
            if self.poison is not None:
                self.poison_outcome = self._try(self.poison.outcome)
                self._disarm_poison()
                if quiet_at is not None and self.options.redrive:
                    self.sleep(FAULT_CACHE_SECONDS)  # the redriven poison job runs clean
            if quiet_at is not None and self.options.redrive:
                redriven = self._redrive()
                if redriven:
                    quiet_at = self._settle(self.clock())
            reconcile_dead_letters(self.app)
            self._progress("checking", force=True)
            return summarize(self.app, self.options, self._facts(faults_end, quiet_at, redriven))
        finally:
            self.pool.stop()

    def _wait_for_workers(self, timeout: float = 60.0) -> float:
        """Wait until every lane of every worker blocks on Redis for work (bounded).

        Returns:
            Seconds waited.
        """
        lanes = len(self.pool.served) * self.pool.per_step * self.options.concurrency
        began = self.clock()
        while self.clock() - began < timeout:
            self.pool.poll()
            try:
                waiting = clients_running(self.app.redis, "blpop")  # every master
            except TRANSIENT:
                waiting = 0
            if waiting >= lanes:
                break
            self.sleep(0.2)
        return self.clock() - began

    def _chaos_window(self) -> float:
        o = self.options
        kills = Periodic(o.kill_every, self.started)
        terms = Periodic(o.term_every, self.started)
        crashes = Periodic(o.redis_kill_every if self.crasher else 0, self.started)
        replays = Periodic(o.replay_every, self.started)
        evictions = Periodic(o.evict_every, self.started)
        cancels = Periodic(o.window_seconds / o.cancel if o.cancel else 0, self.started)
        freezes = Periodic(o.freeze_every, self.started)
        pauses = Periodic(o.pause_every if o.pause_step else 0, self.started)
        placed = 0
        while True:
            now = self.clock()
            if self.crasher is not None:
                self.crasher.history.sample()
                if self.crasher.down and now - (self.crasher.down_since or now) >= o.redis_down:
                    self.crasher.restart()
                    self._count_lost_increments()
                    self.flow.reassert()
            n = due_orders(placed, o.orders, o.rate, now - self.started)
            if n:
                placed += self.placer.place(n)
            if placed < o.orders:
                if kills.due(now):
                    self.pool.sigkill_random()
                if terms.due(now):
                    self._sigterm_one()
                if crashes.due(now) and self.crasher is not None and not self.crasher.down:
                    self._before_crash = self._try(lambda: counter_snapshot(self.app))
                    self.flow.crashed()
                    self.crasher.kill()
                if replays.due(now):
                    self._try(self.replayer.replay)
                if evictions.due(now):
                    self._try(self.evictor.evict)
                if freezes.due(now):
                    self.pool.freeze_random()
                if cancels.due(now) and len(self.cancelled) < o.cancel:
                    self._cancel_one()
            if not (self.crasher and self.crasher.down):
                self.flow.tick(placed < o.orders and pauses.due(now))
            self._tend_poison()
            self.pool.poll()
            self._progress("chaos")
            if placed >= o.orders and not (self.crasher and self.crasher.down):
                break
            self.sleep(TICK)
        # the rates apply to the runs so far: read them as the faults stop
        snapshot = self._try(lambda: counter_snapshot(self.app))
        if snapshot is not None:
            self.runs_while_on = handler_runs(snapshot["app"])
        self._clear_faults()
        return self.clock()

    def _count_lost_increments(self) -> None:
        """Counters lost with the dropped AOF tail, from the snapshot taken before the kill.

        The events happened (handlers ran, jobs were retried); only their count was
        in the writes the simulated power loss dropped. The report adds them back.
        """
        before, self._before_crash = self._before_crash, None
        after = None
        for _ in range(3):  # the first command after a restart may meet a dead connection
            after = self._try(lambda: counter_snapshot(self.app))
            if after is not None:
                break
        if before is None or after is None:
            return
        for group, lost in lost_increments(before, after).items():
            mine = self.lost_increments.setdefault(group, {})
            for name, n in lost.items():
                mine[name] = mine.get(name, 0) + n

    def _cancel_one(self) -> None:
        """Cancel one order in flight (a customer changing their mind mid-chaos).

        Its compensations are published at once when Redis is up, else left to the
        sweep; a database that stays busy makes this firing a no-op.
        """
        try:
            order_id = cancel_in_flight(
                self.app.session_factory,
                self.app.publisher,
                self.first_order_id,
                self.rng,
                policy=self.app.publish_policy,
                tracer=self.app.tracer("orders.cancellation"),
            )
        except (WorkflowError, SQLAlchemyError):  # the database stayed busy: skip this one
            return
        if order_id is not None:
            self.cancelled.append(order_id)

    def _sigterm_one(self) -> None:
        busy = self._try(lambda: lease_holders(self.app)) or set()
        self.pool.sigterm_busy(busy)

    def _tend_poison(self) -> None:
        """Plant the poison job (again, if Redis lost it) until it is dead-lettered."""
        if self.poison is None or not self._poison_armed or self.clock() < self._poison_next:
            return
        self._poison_next = self.clock() + POISON_TEND_SECONDS
        self._try(self.poison.tick)
        if self._try(self.poison.settled):
            self._disarm_poison()

    def _disarm_poison(self) -> None:
        """Take the poison key out of the workers' fault config (so a redrive runs clean)."""
        if not self._poison_armed or self.options.poison_step is None:
            return
        step = self.options.poison_step
        store = FaultStore(self.app.redis, self.app.settings.queue_prefix)
        try:
            config = store.all().get(step)
            if config is not None:
                store.set(step, config.model_copy(update={"poison_key": None}))
        except TRANSIENT:
            return  # tried again on the next turn
        self._poison_armed = False

    def _clear_faults(self) -> None:
        """Stop every handler fault, the pause and the rate limit; the poison job stays
        armed until it is dead-lettered."""
        deadline = self.clock() + 30.0
        while True:
            try:
                self.flow.stop()
                store = FaultStore(self.app.redis, self.app.settings.queue_prefix)
                store.clear()
                if self._poison_armed and self.options.poison_step is not None:
                    poison = handler_faults(self.options)[self.options.poison_step]
                    store.set(self.options.poison_step, FaultConfig(poison_key=poison.poison_key))
                return
            except TRANSIENT:
                if self.clock() > deadline:
                    raise
                self.sleep(0.2)

    def _settle(self, since: float) -> float | None:
        """Wait until every order of the run is settled and every queue is idle.

        Returns:
            The monotonic time quiescence was reached, or None on timeout.
        """
        deadline = since + self.options.settle_timeout
        while self.clock() < deadline:
            self.pool.poll()
            self._tend_poison()
            self._progress("settling")
            if self._quiet():
                return self.clock()
            self.sleep(0.25)
        return None

    def _quiet(self) -> bool:
        try:
            snapshots = queue_snapshots(self.app)
        except TRANSIENT:
            return False
        if any(s.ready or s.delayed or s.active for s in snapshots):
            return False
        if unsettled_orders(self.app, self.first_order_id) == 0:
            return True
        # Idle queues but open orders: a step the reaper dead-lettered inside Redis
        # is copied to the database here; a step Redis lost waits for the sweep.
        self._try(lambda: reconcile_dead_letters(self.app))
        return unsettled_orders(self.app, self.first_order_id) == 0

    def _redrive(self) -> int:
        redriven = 0
        for queue in self.app.queues.values():
            redriven += len(queue.dead_letters.redrive().redriven)
        return redriven

    # ---------------------------------------------------------------- helpers
    def _try(self, action: Callable[[], Any]) -> Any:
        try:
            return action()
        except TRANSIENT:
            return None

    def _progress(self, phase: str, *, force: bool = False) -> None:
        now = self.clock()
        if not force and now - self._last_progress < 0.5:
            return
        self._last_progress = now
        queues: dict[str, dict[str, int]] = {}
        try:
            for s in queue_snapshots(self.app):
                queues[s.queue] = {
                    "ready": s.ready,
                    "delayed": s.delayed,
                    "active": s.active,
                    "dead": s.dead,
                }
        except TRANSIENT:
            pass
        with UnitOfWork(self.app.session_factory) as uow:
            by_status = totals(uow.session, first_order_id=self.first_order_id).orders_by_status
        self.on_progress(
            ChaosProgress(
                phase,
                now - self.started,
                len(self.placer.counts.order_ids),
                dict(by_status),
                queues,
                self._driver_faults(),
                bool(self.crasher and self.crasher.down),
            )
        )

    def _driver_faults(self) -> dict[str, int]:
        c = self.pool.stats
        return {
            "worker_sigkill": c["sigkill_sent"],
            "worker_sigterm": c["sigterm_sent"],
            "redis_sigkill": self.crasher.counts.kills if self.crasher else 0,
            "replay": self.replayer.replayed,
            "key_eviction": self.evictor.evictions,
            "queue_pause": len(self.flow.windows),
        }

    def _facts(self, faults_end: float, quiet_at: float | None, redriven: int) -> RunFacts:
        return RunFacts(
            first_order_id=self.first_order_id,
            placed=len(self.placer.counts.order_ids),
            publish_failures=self.placer.counts.publish_failures,
            replayed=self.replayer.replayed,
            evictions=self.evictor.evictions,
            workers=dict(self.pool.stats.counts),
            redis=self.crasher.counts if self.crasher else None,
            lost_increments=self.lost_increments,
            warmup_seconds=self.warmup_seconds,
            started=self.started,
            faults_end=faults_end,
            quiet_at=quiet_at,
            ended=self.clock(),
            redriven=redriven,
            poison=self.poison_outcome,
            cancelled=len(self.cancelled),
            runs_while_on=self.runs_while_on,
            pauses=list(self.flow.windows),
        )
