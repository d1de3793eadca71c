"""The verdict of a chaos run: queue-level checks, faults that really happened, the report.

Everything here is pure: it takes numbers and returns findings, so the rules
that decide the exit status are unit-tested without processes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

QUEUE_DRAINED = "queue_drained"
NO_ORPHAN_LEASE = "no_orphaned_lease"
QUIESCENCE = "quiescence"
POISON_ISOLATED = "poison_dies_alone"
HANG_TIMED_OUT = "hung_run_timed_out"
BLOCKED_HAS_LETTER = "blocked_order_has_dead_letter"
PAUSE_HELD = "paused_queue_starts_nothing"

QUEUE_INVARIANTS: dict[str, str] = {
    QUEUE_DRAINED: "no job left ready, delayed or active once the run is quiet",
    NO_ORPHAN_LEASE: "the lease table holds exactly the active jobs",
    QUIESCENCE: "the system went quiet before the settle timeout",
    POISON_ISOLATED: "the poison job is dead-lettered as worker_lost, and no other job is",
    HANG_TIMED_OUT: "a run hung past its time limit failed as timed_out",
    BLOCKED_HAS_LETTER: "every order blocked on a dead step still has its dead letter to redrive",
    PAUSE_HELD: "no job of a paused queue starts from the moment its pause returned until it "
    "is resumed (a pause Redis was killed during proves nothing and is not judged)",
}
"""Queue-level invariant name -> what it states."""


@dataclass(frozen=True)
class QueueSnapshot:
    """One queue's structures after the run.

    Attributes:
        queue: queue name.
        ready / delayed / active: jobs in each structure.
        leases: entries of the lease table.
        dead: entries of the dead-letter queue.
    """

    queue: str
    ready: int
    delayed: int
    active: int
    leases: int
    dead: int = 0


@dataclass(frozen=True)
class Finding:
    """One violated invariant.

    Attributes:
        invariant: its name (from ``orders.app.invariants.INVARIANTS`` or
            :data:`QUEUE_INVARIANTS`).
        detail: what is wrong.
        order_id / part_id / queue: what it concerns, when known.
    """

    invariant: str
    detail: str
    order_id: int | None = None
    part_id: int | None = None
    queue: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {k: v for k, v in self.__dict__.items() if v is not None}

    def __str__(self) -> str:
        if self.order_id is not None:
            subject = f"order {self.order_id}"
        elif self.part_id is not None:
            subject = f"part {self.part_id}"
        else:
            subject = f"queue {self.queue}" if self.queue else "run"
        return f"{self.invariant}: {subject}: {self.detail}"


def queue_findings(snapshots: list[QueueSnapshot]) -> list[Finding]:
    """Queue-level checks after quiescence: drained queues, no orphaned lease.

    Returns:
        One finding per queue and broken rule.
    """
    found = []
    for s in snapshots:
        left = {"ready": s.ready, "delayed": s.delayed, "active": s.active}
        waiting = {k: n for k, n in left.items() if n}
        if waiting:
            text = ", ".join(f"{n} {k}" for k, n in waiting.items())
            found.append(Finding(QUEUE_DRAINED, f"jobs left: {text}", queue=s.queue))
        if s.leases != s.active:
            found.append(
                Finding(
                    NO_ORPHAN_LEASE,
                    f"{s.leases} lease(s) for {s.active} active job(s)",
                    queue=s.queue,
                )
            )
    return found


def isolation_findings(
    poison: Any, *, poison_enabled: bool, hangs: int, timed_out: int
) -> list[Finding]:
    """The fairness checks: the poison job died alone; a hung run was timed out.

    Args:
        poison: the poison job's outcome (``orders.chaos.poison.PoisonOutcome``:
            ``reason``, ``attempts``, ``others_lost``), None when unknown.
        poison_enabled: the run planted a poison job.
        hangs: runs that hung past their time limit.
        timed_out: attempts the queues failed as ``timed_out``.

    Returns:
        One finding per broken rule.
    """
    found = []
    if poison_enabled:
        if poison is None or poison.reason != "worker_lost":
            where = "never read" if poison is None else f"ended as {poison.reason or 'not dead'}"
            found.append(Finding(POISON_ISOLATED, f"the poison job {where}"))
        elif poison.others_lost:
            shown = ", ".join(poison.others_lost[:5])
            found.append(
                Finding(
                    POISON_ISOLATED,
                    f"{len(poison.others_lost)} other job(s) dead-lettered as worker_lost: {shown}",
                )
            )
    if hangs and not timed_out:
        found.append(Finding(HANG_TIMED_OUT, f"{hangs} hung run(s), none failed as timed_out"))
    return found


@dataclass(frozen=True)
class FaultTally:
    """One kind of fault: whether it was enabled, its setting, and how often it happened.

    Attributes:
        kind: e.g. ``worker_sigkill``.
        enabled: the run asked for it.
        setting: the option that enabled it, in words.
        count: times it happened.
        skipped: why it could not be injected at all (e.g. an external Redis).
    """

    kind: str
    enabled: bool
    setting: str
    count: int
    skipped: str | None = None

    @property
    def missing(self) -> bool:
        """Enabled and possible, yet it never happened: the run proves nothing about it."""
        return self.enabled and self.skipped is None and self.count == 0


def missing_faults(tallies: list[FaultTally]) -> list[Finding]:
    """A finding per enabled fault kind that never happened."""
    return [
        Finding(
            "fault_happened",
            f"{t.kind} was enabled ({t.setting}) but never happened",
        )
        for t in tallies
        if t.missing
    ]


@dataclass
class ChaosReport:
    """Everything a chaos run measured, and its verdict.

    Attributes:
        options: the run's settings, for the record.
        faults: one tally per fault kind.
        orders: placed / completed / out_of_stock / cancelled / blocked (in the DLQ with a
            reason).
        delivery: ``deliveries`` (handler runs that reached the unit of work: effects
            applied plus duplicates absorbed; runs failed by an injected fault before
            the effect are counted as retries), ``distinct_effects`` (steps done in
            the database), ``duplicates_absorbed``, retries, stale acks refused,
            reaped, steps published / re-published by the relay sweep...,
            ``dead_lettered_worker_lost`` (dead-letterings, counting those dropped
            with a cut AOF tail) and ``dead_lettered_worker_lost_restored`` (those
            dropped ones: the queue dead-letters such a job again after the restart,
            so each is counted twice).
        timing: chaos window, time to quiescence, throughput.
        workers: what happened to the worker processes.
        redis: kills, restarts, AOF bytes cut.
        findings: every violated invariant (database and queue) and every enabled
            fault that never happened.
        invariants: invariant name -> what it states (all that were checked).
    """

    options: dict[str, Any]
    faults: list[FaultTally]
    orders: dict[str, int]
    delivery: dict[str, Any]
    timing: dict[str, float]
    workers: dict[str, int]
    redis: dict[str, Any]
    findings: list[Finding] = field(default_factory=list)
    invariants: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when every invariant held and every enabled fault happened."""
        return not self.findings

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "ok": self.ok,
            "options": self.options,
            "faults": [{**t.__dict__, "missing": t.missing} for t in self.faults],
            "orders": self.orders,
            "delivery": self.delivery,
            "timing": self.timing,
            "workers": self.workers,
            "redis": self.redis,
            "findings": [f.as_dict() for f in self.findings],
            "invariants": self.invariants,
        }
