"""The main job: TPC-H orders through the four-step workflow, end to end.

``run_demo`` loads TPC-H if missing, starts one worker process per step (and
one for the compensating steps), injects transient failures (and a few
permanent ones), places the orders through the transactional outbox, cancels a
few of them while they are in flight, waits for quiescence, and reports what
happened with the invariant checks from the database.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select

from orders.app.bootstrap import App
from orders.app.cancellation import cancel_in_flight
from orders.demo.stall import StallWatch, diagnose
from orders.domain.models import OrderStatus
from orders.domain.queries import BLOCKED, step_latencies, totals
from orders.domain.steps import (
    ALL_STEPS,
    COMPENSATION_STEPS,
    REVERSE_POINTS,
    STEPS,
    WORKFLOW_KIND,
)
from orders.worker import defaults
from orders.worker.faults import FaultConfig, FaultStore
from orders.worker.procs import start_worker, stop_workers
from orders.worker.reconcile import reconcile_dead_letters
from reliable_queue import stats
from workflows.models import StepStatus, Workflow, WorkflowStatus
from workflows.uow import UnitOfWork


@dataclass(frozen=True)
class DemoOptions:
    """Knobs of a demo run.

    Attributes:
        orders: orders to place.
        fail_rate: transient failure probability on the notification and points steps.
        permanent_rate: permanent failure probability on the logistics step
            (those orders end blocked with their step in the DLQ).
        source: ``tpch`` or ``random``.
        concurrency: lanes per worker process.
        batch_size: jobs fetched per lane; a fetched batch is handled in one transaction
            (default: ``orders worker``'s).
        timeout: seconds to wait for quiescence before giving up.
        rate: orders placed per second (None: as fast as possible).
        stall_seconds: stop when no step finished for this long with work pending,
            and say why (``orders.demo.stall``).
        out_of_stock_share: share of the TPC-H orders made to run out of stock
            (``orders.sources.scarcity``), 0..1; 0 leaves the stock alone.
        cancel: orders cancelled while in flight, right after placing (fewer when
            fewer are still in flight); their finished steps are compensated.
        seed: seed of the choice of orders to cancel (None: random).
    """

    orders: int = 2000
    fail_rate: float = 0.2
    permanent_rate: float = 0.005
    source: str = "tpch"
    concurrency: int = 2
    timeout: float = 300.0
    rate: float | None = None
    batch_size: int = defaults.BATCH_SIZE
    stall_seconds: float = 30.0
    out_of_stock_share: float = 0.05
    cancel: int = 10
    seed: int | None = None


UNPUBLISHED = StepStatus.PENDING
"""Step rows not yet in a queue (for example compensations whose publish failed, left
to the sweep): a run with any is not settled, even with idle queues."""

WORKER_GROUPS: tuple[tuple[str, ...], ...] = (*((s,) for s in STEPS), COMPENSATION_STEPS)
"""The steps of each demo worker process: one per forward step, one for the compensations."""


@dataclass
class Progress:
    """One look at the system while the demo runs (for the live view)."""

    placed: int
    workflows: dict[str, int]  # this run's orders by shown status (placed/completed/...)
    steps: dict[str, dict[str, int]]
    queues: dict[str, dict[str, int]]
    elapsed: float

    @property
    def settled(self) -> bool:
        """Every placed order completed, out of stock, cancelled or blocked; no step row
        (compensations included) waits to be published; no queue holds a job."""
        open_orders = self.workflows.get(OrderStatus.PLACED, 0)
        open_steps = sum(states.get(UNPUBLISHED, 0) for states in self.steps.values())
        busy = any(q["ready"] + q["delayed"] + q["active"] for q in self.queues.values())
        return self.placed > 0 and open_orders == 0 and not open_steps and not busy


@dataclass
class DemoReport:
    """What the demo did and whether every invariant held."""

    orders_placed: int
    completed: int
    out_of_stock: int
    cancelled: int
    blocked: int
    blocked_reasons: dict[str, int]
    retries_per_step: dict[str, int]
    dead_per_step: dict[str, int]
    latency_ms: dict[str, dict[str, float]]
    duration_seconds: float
    orders_per_second: float
    quiescent: bool
    violations: list[dict[str, Any]] = field(default_factory=list)
    stalled: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True if the system went quiet and no invariant was violated."""
        return self.quiescent and not self.violations

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON output."""
        out = dict(self.__dict__)
        out["ok"] = self.ok
        return out


def observe(app: App, first_order_id: int | None, placed: int, started: float) -> Progress:
    """Counts for the live view: this run's orders by status, steps by state, queues."""
    if first_order_id is None:
        workflows: dict[str, int] = {}
        steps: dict[str, dict[str, int]] = {s: {} for s in ALL_STEPS}
    else:
        with UnitOfWork(app.session_factory) as uow:
            t = totals(uow.session, first_order_id=first_order_id)
        workflows, steps = t.orders_by_status, t.steps_by_state
    queues = {name: stats(q).as_dict() for name, q in app.queues.items()}
    return Progress(placed, workflows, steps, queues, time.monotonic() - started)


def summarize(
    app: App,
    order_ids: list[int],
    counters_before: dict[str, dict[str, int]],
    duration: float,
    quiescent: bool,
    violations: list[dict[str, Any]],
    stalled: list[str] | None = None,
) -> DemoReport:
    """Build the report of this run's orders from the database and the queue counters."""
    first = min(order_ids) if order_ids else None
    reasons: dict[str, int] = {}
    with UnitOfWork(app.session_factory) as uow:
        t = totals(uow.session, first_order_id=first)
        latencies = step_latencies(uow.session, first_order_id=first)
        for step, reason in uow.session.execute(
            select(Workflow.blocked_step, Workflow.blocked_reason).where(
                Workflow.kind == WORKFLOW_KIND,
                Workflow.subject_id >= (first or 0),
                Workflow.status == WorkflowStatus.BLOCKED,
            )
        ):
            key = f"{step}: {(reason or '').split(':', 1)[0]}"
            reasons[key] = reasons.get(key, 0) + 1
    after = {name: stats(q).counters for name, q in app.queues.items()}

    def delta(name: str, counter: str) -> int:
        return after[name].get(counter, 0) - counters_before.get(name, {}).get(counter, 0)

    by_status = t.orders_by_status
    return DemoReport(
        orders_placed=len(order_ids),
        completed=by_status.get(OrderStatus.COMPLETED, 0),
        out_of_stock=by_status.get(OrderStatus.OUT_OF_STOCK, 0),
        cancelled=by_status.get(OrderStatus.CANCELLED, 0),
        blocked=by_status.get(BLOCKED, 0),
        blocked_reasons=reasons,
        retries_per_step={s: delta(s, "retried") for s in ALL_STEPS},
        dead_per_step={s: delta(s, "dead") for s in ALL_STEPS},
        latency_ms={
            s: {
                "p50": round(lat.p50_seconds * 1000, 1),
                "p95": round(lat.p95_seconds * 1000, 1),
                "n": lat.count,
            }
            for s, lat in latencies.items()
        },
        duration_seconds=round(duration, 2),
        orders_per_second=round(len(order_ids) / duration, 1) if duration > 0 else 0.0,
        quiescent=quiescent,
        violations=violations,
        stalled=stalled or [],
    )


def configure_faults(app: App, options: DemoOptions) -> dict[str, FaultConfig]:
    """Set the demo's injected faults (transient on notification, points and the
    points reversal, a few permanent on logistics), replacing any earlier ones."""
    store = FaultStore(app.redis, app.settings.queue_prefix)
    store.clear()
    faults = {
        "notification": FaultConfig(fail_rate=options.fail_rate),
        "points": FaultConfig(fail_rate=options.fail_rate),
        REVERSE_POINTS: FaultConfig(fail_rate=options.fail_rate),
        "logistics": FaultConfig(fail_rate=options.permanent_rate, permanent=True),
    }
    for step, config in faults.items():
        store.set(step, config)
    return faults


def demo_log_dir(app: App) -> Path:
    """Where a demo run keeps its worker logs: ``<data dir>/logs/demo-<UTC time>``."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return app.settings.resolved_data_dir() / "logs" / f"demo-{stamp}-{os.getpid()}"


def run_demo(
    app: App,
    options: DemoOptions,
    *,
    place_orders: Callable[[App, DemoOptions, Callable[[int], None]], list[int]],
    check_invariants: Callable[[App], list[dict[str, Any]]],
    on_progress: Callable[[Progress], None] = lambda p: None,
    on_placed: Callable[[int], None] = lambda n: None,
    env: dict[str, str] | None = None,
    log_dir: Path | None = None,
) -> DemoReport:
    """Run the demo end to end; worker processes are stopped on exit (also on Ctrl-C).

    Args:
        app: the application (its Redis and database are the demo's).
        options: knobs.
        place_orders: places the orders and returns their ids; calls its third
            argument with the count placed so far.
        check_invariants: returns the violations found in the database.
        on_progress: called about twice a second with a :class:`Progress`.
        on_placed: progress of placement (orders placed so far).
        env: environment of the worker processes (default: ours).
        log_dir: folder of the worker logs (default: ``demo_log_dir(app)``).
    """
    counters_before = {name: stats(q).counters for name, q in app.queues.items()}
    configure_faults(app, options)
    log_dir = log_dir or demo_log_dir(app)
    log_dir.mkdir(parents=True, exist_ok=True)
    worker_env = dict(env if env is not None else os.environ)
    procs = [
        start_worker(
            group,
            env=worker_env,
            log_path=log_dir / f"worker-{'-'.join(group)}.log",
            concurrency=options.concurrency,
            extra=["--batch-size", str(options.batch_size)],
        )
        for group in WORKER_GROUPS
    ]
    started = time.monotonic()
    quiescent = False
    stalled: list[str] = []
    watch = StallWatch(options.stall_seconds, time.monotonic)
    restarts = 0
    try:
        order_ids = place_orders(app, options, on_placed)
        first = min(order_ids) if order_ids else None
        cancels_due = first is not None and options.cancel > 0
        deadline = started + options.timeout
        while time.monotonic() < deadline:
            progress = observe(app, first, len(order_ids), started)
            on_progress(progress)
            if cancels_due and (progress.settled or has_finished_steps(progress)):
                # Cancel once some stock steps are done, so that the cancelled orders
                # have something to undo and their compensations really run.
                cancels_due = False
                cancel_some(app, first, options.cancel, random.Random(options.seed))
                continue
            if progress.settled:
                quiescent = True
                break
            finished = sum(
                s.get("done", 0) + s.get("dead", 0) + s.get("unpublishable", 0)
                for s in progress.steps.values()
            )
            if watch.stalled(finished, pending=True):
                stalled = diagnose(
                    app,
                    stall_seconds=options.stall_seconds,
                    steps=progress.steps,
                    queues=progress.queues,
                    duplicates=sum(
                        q.get("counters", {}).get("duplicates", 0)
                        - counters_before.get(n, {}).get("duplicates", 0)
                        for n, q in progress.queues.items()
                    ),
                    worker_restarts=restarts,
                    worker_logs=sorted(log_dir.glob("worker-*.log")),
                )
                break
            dead = [p for p in procs if p.poll() is not None]
            restarts += len(dead)
            for p in dead:  # a worker that died is replaced, as a supervisor would
                group = WORKER_GROUPS[procs.index(p)]
                procs[procs.index(p)] = start_worker(
                    group,
                    env=worker_env,
                    log_path=log_dir / f"worker-{'-'.join(group)}.log",
                    concurrency=options.concurrency,
                    extra=["--batch-size", str(options.batch_size)],
                )
            time.sleep(0.5)
        duration = time.monotonic() - started
    finally:
        stop_workers(procs)
        FaultStore(app.redis, app.settings.queue_prefix).clear()
    reconcile_dead_letters(app)
    violations = check_invariants(app)
    return summarize(app, order_ids, counters_before, duration, quiescent, violations, stalled)


def has_finished_steps(progress: Progress) -> bool:
    """True once any of the run's stock steps is done (a cancellation then has work)."""
    return progress.steps.get("stock", {}).get("done", 0) > 0


def cancel_some(app: App, first_order_id: int, count: int, rng: random.Random) -> list[int]:
    """Cancel up to ``count`` of this run's orders that are still in flight.

    Stops early when no order is in flight any more; an order that completed
    just before its cancellation is skipped (too late), bounded to ``3 * count``
    tries.

    Returns:
        Ids of the orders cancelled.
    """
    cancelled: list[int] = []
    for _ in range(3 * count):
        if len(cancelled) >= count:
            break
        order_id = cancel_in_flight(
            app.session_factory,
            app.publisher,
            first_order_id,
            rng,
            policy=app.publish_policy,
            tracer=app.tracer("orders.cancellation"),
        )
        if order_id is not None:
            cancelled.append(order_id)
    return cancelled
