"""Turn what a chaos run measured into its report and verdict."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from orders.app.bootstrap import App
from orders.app.dead_letters import stranded_orders
from orders.app.invariants import INVARIANTS, check_invariants
from orders.chaos.actions import PauseWindow
from orders.chaos.journal import (
    JOURNAL_INVARIANTS,
    Journal,
    lapsed_commits,
    read_journal,
    reissued_numbers,
    with_journaled_faults,
)
from orders.chaos.observe import counter_snapshot, done_steps, queue_snapshots
from orders.chaos.poison import PoisonOutcome
from orders.chaos.redis_crash import RedisCrashCounts
from orders.chaos.report import (
    BLOCKED_HAS_LETTER,
    PAUSE_HELD,
    QUEUE_INVARIANTS,
    QUIESCENCE,
    ChaosReport,
    FaultTally,
    Finding,
    isolation_findings,
    missing_faults,
    queue_findings,
)
from orders.chaos.setup import ChaosOptions, journal_dir
from orders.domain.models import OrderStatus
from orders.domain.queries import BLOCKED, totals
from orders.domain.steps import ALL_STEPS
from orders.worker.counters import by_step, total
from workflows.uow import UnitOfWork


@dataclass
class RunFacts:
    """What the driver itself observed during a run (times are monotonic seconds).

    Attributes:
        first_order_id: the run's first order id (its orders are those from it on).
        placed: orders placed.
        publish_failures: placement batches whose publish failed (Redis down).
        replayed: finished jobs the driver replayed.
        evictions: queue ready lists the driver deleted (key eviction).
        workers: the worker pool's counts (``orders.chaos.pool.PoolCounts``).
        redis: the crasher's counts; None with an external Redis.
        lost_increments: counter increments the cut AOF tails dropped, per group.
        warmup_seconds: time the workers took to start.
        started / faults_end / quiet_at / ended: placing began, faults stopped,
            quiescence (None: never), report time.
        redriven: dead letters redriven after quiescence.
        poison: where the poison job ended, read before the redrive (None: no
            poison job, or Redis was unreachable).
        cancelled: orders the driver cancelled in flight.
        runs_while_on: step -> handler runs while the handler faults were on
            (read when they stopped; :func:`handler_runs`). A fault's rate applies
            to these runs only: a step that runs after stock (stock first) mostly
            runs once placing is done and the faults are off.
        pauses: the pauses of ``pause_step``'s queue, in Redis time.
    """

    first_order_id: int
    placed: int = 0
    publish_failures: int = 0
    replayed: int = 0
    evictions: int = 0
    workers: dict[str, int] = field(default_factory=dict)
    redis: RedisCrashCounts | None = None
    lost_increments: dict[str, dict[str, int]] = field(default_factory=dict)
    warmup_seconds: float = 0.0
    started: float = 0.0
    faults_end: float = 0.0
    quiet_at: float | None = None
    ended: float = 0.0
    redriven: int = 0
    poison: PoisonOutcome | None = None
    cancelled: int = 0
    runs_while_on: dict[str, int] = field(default_factory=dict)
    pauses: list[PauseWindow] = field(default_factory=list)


def starts_while_paused(
    journal: Journal, queue: str, pauses: Sequence[PauseWindow], limit: int = 20
) -> list[Finding]:
    """Leases of ``queue`` whose fencing number dates them inside a pause (ADR 0031).

    A fencing number is the queue clock in ms times 1000 plus a count (ADR 0022), so
    ``number // 1000`` is when the lease was made. A lease of the pause's own
    millisecond may have come before it: there the window's ``fence`` (the last number
    issued before the pause) decides, so only a number above it counts. Only there: a
    Redis crash that drops the AOF tail can set the sequence, and so the fence, back
    below numbers issued before it. Windows Redis was killed during are not judged
    (the pause may have gone with the AOF tail).

    Returns:
        One :data:`PAUSE_HELD` finding per such lease, at most ``limit``.
    """
    judged = [w for w in pauses if not w.interrupted and w.until_ms is not None]
    out: list[Finding] = []
    for (name, number), jobs in sorted(journal.leases.items()):
        at = number // 1000
        for w in judged:
            # the pause's own millisecond: the fence orders it (it cannot elsewhere:
            # a Redis crash that drops the AOF tail sets the fencing sequence back)
            same_ms = at == w.since_ms and w.fence is not None
            after = number > (w.fence or 0) if same_ms else w.since_ms <= at
            if name == queue and after and at < (w.until_ms or 0) and len(out) < limit:
                out.append(
                    Finding(
                        PAUSE_HELD,
                        f"job {jobs[0]} leased at {at} ms, inside the pause {w.since_ms}.."
                        f"{w.until_ms} ms",
                        queue=queue,
                    )
                )
    return out


def handler_runs(counters: dict[str, int]) -> dict[str, int]:
    """Handler runs per step from the shared counters: effects applied, duplicates
    absorbed and runs failed by an injected fault before their effect.

    Args:
        counters: the shared counters (``orders.worker.counters.Counters.read``).

    Returns:
        ``{step: runs}`` for every step with a count.
    """
    runs: dict[str, int] = {}
    for kind in ("applied", "duplicate", "injected:fail"):
        for step, n in by_step(counters, kind).items():
            runs[step] = runs.get(step, 0) + n
    return runs


def restored_increments(lost: dict[str, dict[str, int]], name: str) -> int:
    """Increments of queue counter ``name`` that cut AOF tails dropped, over every queue.

    The report adds these back to its totals (:attr:`RunFacts.lost_increments`). For a
    counter whose event the queue makes again after the restart (a dead-lettering: the
    cut rolls the job back to its expired lease, and the next reap dead-letters it
    again) the total then counts one event twice; the total minus this is what the
    writes Redis kept count.

    Args:
        lost: group -> counter -> increments lost (``orders.chaos.observe.lost_increments``);
            the shared counters' group ``app`` is not a queue and is left out.
        name: a queue counter, e.g. ``dead:worker_lost``.

    Returns:
        The increments lost, summed over the queues (0 when none).
    """
    return sum(counts.get(name, 0) for group, counts in lost.items() if group != "app")


def _while_on(facts: RunFacts, steps: Sequence[str]) -> str:
    """``"; N runs while on"``: the runs a rate applied to (empty when not read)."""
    if not facts.runs_while_on:
        return ""
    return f"; {sum(facts.runs_while_on.get(s, 0) for s in steps)} runs while on"


def fault_tallies(o: ChaosOptions, facts: RunFacts, counters: dict[str, int]) -> list[FaultTally]:
    """One tally per fault kind: enabled by ``o``, counted by the driver or the workers."""
    w = facts.workers
    crash = facts.redis
    external = None if crash else "external Redis: it cannot be killed from here"
    lose = o.effective_lose_window
    return [
        FaultTally("worker_sigkill", o.kill_every > 0, f"every {o.kill_every:g}s",
                   w.get("sigkill_sent", 0)),
        FaultTally("worker_sigterm", o.term_every > 0,
                   f"every {o.term_every:g}s, a worker holding a job", w.get("sigterm_sent", 0)),
        FaultTally("redis_sigkill", o.redis_kill_every > 0,
                   f"every {o.redis_kill_every:g}s, down {o.redis_down:g}s, "
                   f"appendfsync {o.appendfsync}",
                   crash.restarts if crash else 0, external),
        FaultTally("redis_lost_writes", o.redis_kill_every > 0 and lose > 0,
                   f"last {lose:g}s of AOF writes dropped at each crash",
                   crash.cuts if crash else 0, external),
        FaultTally("transient_failure", o.fail_rate > 0 and bool(o.fail_steps),
                   f"{o.fail_rate:.0%} of runs of {', '.join(o.fail_steps)}"
                   f"{_while_on(facts, o.fail_steps)}",
                   total(counters, "injected:fail")),
        FaultTally("slow_handler", o.slow_rate > 0 and o.slow_ms > 0 and bool(o.slow_steps),
                   f"{o.slow_rate:.0%} of runs of {', '.join(o.slow_steps)} stall "
                   f"{o.slow_ms} ms, lease {o.lease_seconds:g}s",
                   total(counters, "injected:slow")),
        FaultTally("crash_once", o.crash_once_step is not None,
                   f"the {o.crash_once_step} handler kills its process once",
                   max(total(counters, "injected:crash"),
                       w.get("died_unprompted", 0) - total(counters, "injected:poison"))),
        FaultTally("poison_job", o.poison_step is not None,
                   f"a {o.poison_step} job kills its process at every run, max "
                   f"{o.poison_attempts} attempts, batch size {o.batch_size}",
                   total(counters, "injected:poison")),
        FaultTally("hung_handler", o.hang_step is not None and o.hang_ms > 0 and o.hang_rate > 0,
                   f"{o.hang_rate:.0%} of runs of {o.hang_step} hang {o.hang_ms} ms, "
                   f"time limit {o.time_limit:g}s",
                   total(counters, "injected:hang")),
        FaultTally("worker_freeze", o.freeze_every > 0,
                   f"a worker SIGSTOPped every {o.freeze_every:g}s for "
                   f"{o.effective_freeze_seconds:g}s, lease {o.lease_seconds:g}s",
                   w.get("frozen", 0)),
        FaultTally("worker_freeze_in_tx", o.freeze_in_tx_rate > 0 and bool(o.freeze_steps),
                   f"{o.freeze_in_tx_rate:.0%} of the units of work of "
                   f"{', '.join(o.freeze_steps)} stop their worker before the commit",
                   total(counters, "injected:freeze_in_tx")),
        FaultTally("replay", o.replay_every > 0 and o.replay_count > 0,
                   f"{o.replay_count} finished job(s) every {o.replay_every:g}s",
                   facts.replayed),
        FaultTally("key_eviction", o.evict_every > 0,
                   f"a queue's waiting jobs (ready list or waiting set) deleted every "
                   f"{o.evict_every:g}s", facts.evictions),
        FaultTally("queue_pause", o.pause_step is not None and o.pause_every > 0,
                   f"the {o.pause_step} queue paused {o.pause_seconds:g}s every "
                   f"{o.pause_every:g}s", sum(1 for w in facts.pauses if w.until_ms)),
        FaultTally("rate_limit", o.limit_step is not None,
                   f"the {o.limit_step} queue limited to {o.limit}",
                   counters.get(f"limited:{o.limit_step}", 0)),
    ]  # fmt: skip


def summarize(app: App, options: ChaosOptions, facts: RunFacts) -> ChaosReport:
    """Check every invariant and build the report (call once the run is quiet).

    Raises:
        QueueError / redis.RedisError / sqlalchemy errors: a service is unreachable.
    """
    o = options
    findings = [
        Finding(v.invariant, v.detail, order_id=v.order_id, part_id=v.part_id)
        for v in check_invariants(app.session_factory)
    ]
    findings += queue_findings(queue_snapshots(app))
    findings += [
        Finding(
            BLOCKED_HAS_LETTER, f"blocked on dead step {step!r} with no dead letter", order_id=oid
        )
        for oid, step in stranded_orders(app.session_factory, app.queues)
    ]
    journal = read_journal(journal_dir(app.settings.data_dir))
    findings += [
        Finding(v.invariant, v.detail, order_id=v.order_id, queue=v.queue)
        for v in (
            *reissued_numbers(journal),
            *lapsed_commits(journal, done_steps(app, facts.first_order_id)),
        )
    ]
    if facts.quiet_at is None:
        findings.append(
            Finding(QUIESCENCE, f"not quiet {o.settle_timeout:.0f} s after the faults stopped")
        )
    snapshot = counter_snapshot(app)
    for group, lost in facts.lost_increments.items():
        for name, n in lost.items():
            snapshot[group][name] = snapshot[group].get(name, 0) + n
    counters = with_journaled_faults(snapshot.pop("app"), journal)
    if o.limit_step is not None:  # the deferrals of the limited queue (its own counter)
        counters[f"limited:{o.limit_step}"] = snapshot[o.limit_step].get("rate_limited", 0)
    if o.pause_step is not None:
        findings += starts_while_paused(journal, o.pause_step, facts.pauses)

    def queue_total(name: str) -> int:
        return sum(c.get(name, 0) for c in snapshot.values())

    tallies = fault_tallies(o, facts, counters)
    findings += missing_faults(tallies)
    hung = next(t for t in tallies if t.kind == "hung_handler")
    findings += isolation_findings(
        facts.poison if o.poison_step is not None else None,
        poison_enabled=o.poison_step is not None,
        hangs=hung.count if hung.enabled else 0,
        # the queues' count lives in the Redis the run kills; the journal's does not
        timed_out=max(queue_total("timed_out"), journal.lost_by_reason().get("timed_out", 0)),
    )
    with UnitOfWork(app.session_factory) as uow:
        t = totals(uow.session, first_order_id=facts.first_order_id)
    by_status = t.orders_by_status
    distinct = {s: t.steps_by_state.get(s, {}).get("done", 0) for s in ALL_STEPS}
    applied, duplicates = by_step(counters, "applied"), by_step(counters, "duplicate")
    settled = sum(
        by_status.get(status, 0)
        for status in (
            OrderStatus.COMPLETED,
            OrderStatus.OUT_OF_STOCK,
            OrderStatus.CANCELLED,
            BLOCKED,
        )
    )
    span = ((facts.quiet_at or facts.ended) - facts.started) or 1e-9
    crash = facts.redis
    return ChaosReport(
        options=o.as_dict(),
        faults=tallies,
        orders={
            "placed": facts.placed,
            "completed": by_status.get(OrderStatus.COMPLETED, 0),
            "out_of_stock": by_status.get(OrderStatus.OUT_OF_STOCK, 0),
            "cancelled": by_status.get(OrderStatus.CANCELLED, 0),
            "cancelled_in_flight_by_the_driver": facts.cancelled,
            "blocked_in_dlq": by_status.get(BLOCKED, 0),
            "unsettled": facts.placed - settled,
            "dead_lettered_during_run": queue_total("dead"),
            "redriven": facts.redriven,
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
            "publish_failures_at_placement": facts.publish_failures,
            "replayed": queue_total("replayed"),
            "dead_lettered_worker_lost": queue_total("dead:worker_lost"),
            "dead_lettered_worker_lost_restored": restored_increments(
                facts.lost_increments, "dead:worker_lost"
            ),
            "timed_out": queue_total("timed_out"),
            "leases_journaled": sum(len(jobs) for jobs in journal.leases.values()),
            "attempts_given_up": journal.lost_by_reason(),
            "per_step": {
                s: {
                    "applied": applied.get(s, 0),
                    "duplicates": duplicates.get(s, 0),
                    "distinct_effects": distinct[s],
                    "retries": snapshot[s].get("retried", 0),
                }
                for s in ALL_STEPS
            },
        },
        timing={
            "worker_startup_seconds": round(facts.warmup_seconds, 1),
            "chaos_window_seconds": round(facts.faults_end - facts.started, 1),
            "time_to_quiescence_seconds": (
                round(facts.quiet_at - facts.faults_end, 1) if facts.quiet_at is not None else -1.0
            ),
            "orders_per_second": round(settled / span, 1),
            "step_effects_per_second": round(sum(distinct.values()) / span, 1),
        },
        workers=dict(facts.workers),
        redis={
            "embedded": crash is not None,
            "appendfsync": o.appendfsync if crash else "external",
            "kills": crash.kills if crash else 0,
            "restarts": crash.restarts if crash else 0,
            "aof_cuts": crash.cuts if crash else 0,
            "aof_bytes_lost": crash.bytes_lost if crash else 0,
            "counter_increments_restored": sum(
                n for lost in facts.lost_increments.values() for n in lost.values()
            ),
        },
        findings=findings,
        invariants={**INVARIANTS, **QUEUE_INVARIANTS, **JOURNAL_INVARIANTS},
    )
