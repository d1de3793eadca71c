"""``orders chaos``: the experiment that proves the promise under faults.

While orders are placed at a steady rate, the driver SIGKILLs worker
processes, SIGTERMs workers in the middle of a job, SIGKILLs the Redis server
(dropping the last second of its AOF with ``everysec``, as a power loss would)
and restarts it, and replays finished jobs; the workers meanwhile fail,
stall past their lease, or kill themselves as told by the injected handler
faults. When placing is done the faults stop; the run waits for quiescence,
optionally redrives the DLQ, and then judges from the database (every
invariant of ``orders.invariants``) and from the queues (drained, no orphaned
lease). The report says what was injected, how often, what the system did
about it, and whether every promise held.

Time and randomness are injected (``clock``, ``sleep``, ``rng``); the small
rules (:class:`Periodic`, :func:`due_orders`) are pure.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError

from orders.bootstrap import App
from orders.chaos_pool import WorkerPool, lease_holder_pid
from orders.chaos_redis import AofHistory, RedisCrasher
from orders.chaos_report import (
    QUEUE_INVARIANTS,
    QUIESCENCE,
    ChaosReport,
    FaultTally,
    Finding,
    QueueSnapshot,
    missing_faults,
    queue_findings,
)
from orders.chaos_setup import ChaosOptions, ChaosServices
from orders.faults import FaultStore
from orders.invariants import INVARIANTS, check_invariants
from orders.metrics import Counters, by_step, total
from orders.models import Order, OrderStatus
from orders.placement import place
from orders.queries import BLOCKED, totals
from orders.reconcile import reconcile_dead_letters
from orders.steps import STEPS, WORKFLOW_KIND
from reliable_queue import QueueError, stats
from reliable_queue.cluster import clients_running
from workflows.models import Workflow, WorkflowStatus
from workflows.relay import publish_steps
from workflows.uow import UnitOfWork

TICK = 0.1  # seconds between two turns of the driver loop
TRANSIENT = (QueueError, redis.RedisError, OSError)
"""Errors a driver step may meet while Redis is down; the step is tried again later."""


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


@dataclass
class PlacerCounts:
    """Placement under chaos: orders committed, and publishes that failed after the
    commit (Redis down: the relay sweep publishes those steps later)."""

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
            result = place(
                self.app.session_factory, n, source=self.source, rng=self.rng, batch_size=n
            )
        except SQLAlchemyError:
            self.counts.placement_errors += 1
            return 0
        self.counts.order_ids.extend(result.order_ids)
        step_ids = [s for placed in result.orders for s in placed.step_ids]
        try:
            publish_steps(self.app.session_factory, self.app.publisher, step_ids)
        except (*TRANSIENT, SQLAlchemyError):
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


@dataclass
class ChaosProgress:
    """One look at the run, for a live view.

    Attributes:
        phase: ``chaos``, ``settling`` or ``checking``.
        elapsed: seconds since placing began.
        placed: orders placed.
        orders: this run's orders by shown status.
        queues: step -> ready / delayed / active / dead (empty while Redis is down).
        faults: fault kind -> count so far (driver-side faults).
        redis_down: True while the server is down.
    """

    phase: str
    elapsed: float
    placed: int
    orders: dict[str, int]
    queues: dict[str, dict[str, int]]
    faults: dict[str, int]
    redis_down: bool


def lease_holders(app: App) -> set[int]:
    """Pids of the processes holding a lease on any step queue now.

    Raises:
        redis.RedisError: Redis unreachable.
    """
    pids = set()
    for queue in app.queues.values():
        for token in app.redis.hvals(queue.keys.key("leases")):
            pid = lease_holder_pid(token.decode() if isinstance(token, bytes) else token)
            if pid is not None:
                pids.add(pid)
    return pids


def queue_snapshots(app: App) -> list[QueueSnapshot]:
    """Every step queue's structures, for the queue-level checks.

    Raises:
        QueueError / redis.RedisError: Redis unreachable.
    """
    out = []
    for step, queue in app.queues.items():
        s = stats(queue)
        leases = int(app.redis.hlen(queue.keys.key("leases")))
        out.append(QueueSnapshot(step, s.ready, s.delayed, s.active, leases, s.dead))
    return out


def unsettled_orders(app: App, first_order_id: int) -> int:
    """This run's orders whose workflow is neither done nor blocked."""
    with UnitOfWork(app.session_factory) as uow:
        return int(
            uow.session.scalar(
                select(func.count())
                .select_from(Order)
                .outerjoin(
                    Workflow,
                    (Workflow.kind == WORKFLOW_KIND) & (Workflow.subject_id == Order.id),
                )
                .where(
                    Order.id >= first_order_id,
                    (Workflow.id.is_(None))
                    | Workflow.status.not_in((WorkflowStatus.DONE, WorkflowStatus.BLOCKED)),
                )
            )
            or 0
        )


class ChaosRun:
    """One chaos experiment on prepared services (see ``orders.chaos_setup.prepare``).

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
        self.started = 0.0
        self.warmup_seconds = 0.0
        self.lost_increments: dict[str, dict[str, int]] = {}
        self._before_crash: dict[str, dict[str, int]] | None = None
        self._last_progress = -math.inf

    def _next_order_id(self) -> int:
        with UnitOfWork(self.app.session_factory) as uow:
            return int(uow.session.scalar(select(func.max(Order.id))) or 0) + 1

    # ----------------------------------------------------------------- phases
    def run(self) -> ChaosReport:
        """Start the workers, run the faults while placing, settle, check, report.

        The worker processes are stopped on the way out (also on an exception).
        """
        self.pool.start_all()
        try:
            self.warmup_seconds = self._wait_for_workers()
            self.started = self.clock()
            faults_end = self._chaos_window()
            quiet_at = self._settle(faults_end)
            redriven = 0
            if quiet_at is not None and self.options.redrive:
                redriven = self._redrive()
                if redriven:
                    quiet_at = self._settle(self.clock())
            reconcile_dead_letters(self.app)
            self._progress("checking", force=True)
            return self._report(faults_end, quiet_at, redriven)
        finally:
            self.pool.stop()

    def _wait_for_workers(self, timeout: float = 60.0) -> float:
        """Wait until every lane of every worker blocks on Redis for work (bounded).

        Returns:
            Seconds waited.
        """
        lanes = len(self.pool.steps) * self.pool.per_step * self.options.concurrency
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
        placed = 0
        while True:
            now = self.clock()
            if self.crasher is not None:
                self.crasher.history.sample()
                if self.crasher.down and now - (self.crasher.down_since or now) >= o.redis_down:
                    self.crasher.restart()
                    self._count_lost_increments()
            n = due_orders(placed, o.orders, o.rate, now - self.started)
            if n:
                placed += self.placer.place(n)
            if placed < o.orders:
                if kills.due(now):
                    self.pool.sigkill_random()
                if terms.due(now):
                    self._sigterm_one()
                if crashes.due(now) and self.crasher is not None and not self.crasher.down:
                    self._before_crash = self._try(self._counter_snapshot)
                    self.crasher.kill()
                if replays.due(now):
                    self._try(self.replayer.replay)
            self.pool.poll()
            self._progress("chaos")
            if placed >= o.orders and not (self.crasher and self.crasher.down):
                break
            self.sleep(TICK)
        self._clear_faults()
        return self.clock()

    def _counter_snapshot(self) -> dict[str, dict[str, int]]:
        """Every counter the report uses: the shared ones, and each queue's stats."""
        snap = {"app": Counters(self.app.redis, self.app.settings.queue_prefix).read()}
        for name, queue in self.app.queues.items():
            snap[name] = stats(queue).counters
        return snap

    def _count_lost_increments(self) -> None:
        """Counters lost with the dropped AOF tail, from the snapshot taken before the kill.

        The events happened (handlers ran, jobs were retried); only their count was
        in the writes the simulated power loss dropped. The report adds them back.
        """
        before, self._before_crash = self._before_crash, None
        after = None
        for _ in range(3):  # the first command after a restart may meet a dead connection
            after = self._try(self._counter_snapshot)
            if after is not None:
                break
        if before is None or after is None:
            return
        for group, counts in before.items():
            lost = self.lost_increments.setdefault(group, {})
            for name, n in counts.items():
                missing = n - after.get(group, {}).get(name, 0)
                if missing > 0:
                    lost[name] = lost.get(name, 0) + missing

    def _sigterm_one(self) -> None:
        busy = self._try(lambda: lease_holders(self.app)) or set()
        self.pool.sigterm_busy(busy)

    def _clear_faults(self) -> None:
        deadline = self.clock() + 30.0
        while True:
            try:
                FaultStore(self.app.redis, self.app.settings.queue_prefix).clear()
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
        }

    # ----------------------------------------------------------------- report
    def _report(self, faults_end: float, quiet_at: float | None, redriven: int) -> ChaosReport:
        o = self.options
        findings = [
            Finding(v.invariant, v.detail, order_id=v.order_id, part_id=v.part_id)
            for v in check_invariants(self.app.session_factory)
        ]
        findings += queue_findings(queue_snapshots(self.app))
        if quiet_at is None:
            findings.append(
                Finding(QUIESCENCE, f"not quiet {o.settle_timeout:.0f} s after the faults stopped")
            )
        snapshot = self._counter_snapshot()
        for group, lost in self.lost_increments.items():
            for name, n in lost.items():
                snapshot[group][name] = snapshot[group].get(name, 0) + n
        counters = snapshot.pop("app")
        queue_counters = snapshot

        def queue_total(name: str) -> int:
            return sum(c.get(name, 0) for c in queue_counters.values())

        tallies = self._tallies(counters)
        findings += missing_faults(tallies)
        with UnitOfWork(self.app.session_factory) as uow:
            t = totals(uow.session, first_order_id=self.first_order_id)
        by_status = t.orders_by_status
        distinct = {s: t.steps_by_state.get(s, {}).get("done", 0) for s in STEPS}
        applied, duplicates = by_step(counters, "applied"), by_step(counters, "duplicate")
        placed = len(self.placer.counts.order_ids)
        settled = (
            by_status.get(OrderStatus.COMPLETED, 0)
            + by_status.get(OrderStatus.OUT_OF_STOCK, 0)
            + by_status.get(BLOCKED, 0)
        )
        span = ((quiet_at or self.clock()) - self.started) or 1e-9
        crash = self.crasher.counts if self.crasher else None
        return ChaosReport(
            options=o.as_dict(),
            faults=tallies,
            orders={
                "placed": placed,
                "completed": by_status.get(OrderStatus.COMPLETED, 0),
                "out_of_stock": by_status.get(OrderStatus.OUT_OF_STOCK, 0),
                "blocked_in_dlq": by_status.get(BLOCKED, 0),
                "unsettled": placed - settled,
                "dead_lettered_during_run": queue_total("dead"),
                "redriven": redriven,
            },
            delivery={
                "deliveries": total(counters, "applied") + total(counters, "duplicate"),
                "distinct_effects": sum(distinct.values()),
                "duplicates_absorbed": total(counters, "duplicate"),
                "retries": queue_total("retried"),
                "stale_acks_refused": queue_total("stale_refused"),
                "reaped": queue_total("reaped"),
                "republished_by_sweep": counters.get("sweep:republished", 0),
                "published_by_sweep": counters.get("sweep:published", 0),
                "publish_failures_at_placement": self.placer.counts.publish_failures,
                "replayed": queue_total("replayed"),
                "per_step": {
                    s: {
                        "applied": applied.get(s, 0),
                        "duplicates": duplicates.get(s, 0),
                        "distinct_effects": distinct[s],
                        "retries": queue_counters[s].get("retried", 0),
                    }
                    for s in STEPS
                },
            },
            timing={
                "worker_startup_seconds": round(self.warmup_seconds, 1),
                "chaos_window_seconds": round(faults_end - self.started, 1),
                "time_to_quiescence_seconds": (
                    round(quiet_at - faults_end, 1) if quiet_at is not None else -1.0
                ),
                "orders_per_second": round(settled / span, 1),
                "step_effects_per_second": round(sum(distinct.values()) / span, 1),
            },
            workers=dict(self.pool.stats.counts),
            redis={
                "embedded": self.crasher is not None,
                "appendfsync": o.appendfsync if self.crasher else "external",
                "kills": crash.kills if crash else 0,
                "restarts": crash.restarts if crash else 0,
                "aof_cuts": crash.cuts if crash else 0,
                "aof_bytes_lost": crash.bytes_lost if crash else 0,
                "counter_increments_restored": sum(
                    n for lost in self.lost_increments.values() for n in lost.values()
                ),
            },
            findings=findings,
            invariants={**INVARIANTS, **QUEUE_INVARIANTS},
        )

    def _tallies(self, counters: dict[str, int]) -> list[FaultTally]:
        o = self.options
        c = self.pool.stats
        crash = self.crasher.counts if self.crasher else None
        external = None if self.crasher else "external Redis: it cannot be killed from here"
        lose = o.effective_lose_window
        return [
            FaultTally("worker_sigkill", o.kill_every > 0, f"every {o.kill_every:g}s",
                       c["sigkill_sent"]),
            FaultTally("worker_sigterm", o.term_every > 0,
                       f"every {o.term_every:g}s, a worker holding a job", c["sigterm_sent"]),
            FaultTally("redis_sigkill", o.redis_kill_every > 0,
                       f"every {o.redis_kill_every:g}s, down {o.redis_down:g}s, "
                       f"appendfsync {o.appendfsync}",
                       crash.restarts if crash else 0, external),
            FaultTally("redis_lost_writes", o.redis_kill_every > 0 and lose > 0,
                       f"last {lose:g}s of AOF writes dropped at each crash",
                       crash.cuts if crash else 0, external),
            FaultTally("transient_failure", o.fail_rate > 0 and bool(o.fail_steps),
                       f"{o.fail_rate:.0%} of runs of {', '.join(o.fail_steps)}",
                       total(counters, "injected:fail")),
            FaultTally("slow_handler", o.slow_rate > 0 and o.slow_ms > 0 and bool(o.slow_steps),
                       f"{o.slow_rate:.0%} of runs of {', '.join(o.slow_steps)} stall "
                       f"{o.slow_ms} ms, lease {o.lease_seconds:g}s",
                       total(counters, "injected:slow")),
            FaultTally("crash_once", o.crash_once_step is not None,
                       f"the {o.crash_once_step} handler kills its process once",
                       max(total(counters, "injected:crash"), c["died_unprompted"])),
            FaultTally("replay", o.replay_every > 0 and o.replay_count > 0,
                       f"{o.replay_count} finished job(s) every {o.replay_every:g}s",
                       self.replayer.replayed),
        ]  # fmt: skip
