"""Tell a demo that waits for work that will never happen, and say why.

A run stalls when no step of its orders finished for ``stall_seconds`` while
work is still pending. The diagnosis looks where such runs went wrong before:
worker processes that exit at start, publishes absorbed as duplicates of
another run's jobs, a Redis that evicts keys, outbox rows the queue refuses,
steps dispatched while no queue holds a job.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from orders.app.bootstrap import App
from orders.app.eviction import key_eviction_problem
from workflows.outbox_admin import refused_rows
from workflows.uow import UnitOfWork


@dataclass
class StallWatch:
    """Notices that the count of finished steps stopped moving.

    Args:
        stall_seconds: seconds without a finished step before the run counts as stalled.
        clock: monotonic clock, seconds.
    """

    stall_seconds: float
    clock: Callable[[], float]
    last_finished: int = -1
    last_change: float = field(default=0.0)

    def stalled(self, finished: int, pending: bool) -> bool:
        """Record a look; True when nothing finished for ``stall_seconds`` with work pending.

        Args:
            finished: steps of this run's orders done or dead so far.
            pending: work remains (the run has not settled).
        """
        now = self.clock()
        if finished != self.last_finished or not pending:
            self.last_finished, self.last_change = finished, now
            return False
        return now - self.last_change >= self.stall_seconds


def diagnose(
    app: App,
    *,
    stall_seconds: float,
    steps: dict[str, dict[str, int]],
    queues: dict[str, dict[str, int]],
    duplicates: int,
    worker_restarts: int,
    worker_logs: Sequence[Path],
) -> list[str]:
    """Say what is wrong with a stalled run, most likely cause first.

    Args:
        app: the application.
        stall_seconds: how long nothing finished, seconds.
        steps: step -> {state: count} for this run's orders.
        queues: queue -> stats dict (``ready``, ``delayed``, ``active``...).
        duplicates: publishes absorbed as duplicates during this run.
        worker_restarts: worker processes that exited and were started again.
        worker_logs: the worker processes' log files.

    Returns:
        One line per finding (never empty); text from logs and Redis is cut
        and control characters dropped.
    """
    found: list[str] = []
    if worker_restarts:
        last = _last_lines(worker_logs)
        found.append(
            f"worker processes keep exiting ({worker_restarts} restart(s))"
            + (f": {last}" if last else "")
        )
    queued = sum(
        q.get("ready", 0) + q.get("delayed", 0) + q.get("active", 0) for q in queues.values()
    )
    dispatched = sum(s.get("dispatched", 0) + s.get("failed", 0) for s in steps.values())
    if duplicates and not queued:
        found.append(
            f"{duplicates} publish(es) were absorbed as duplicates while no queue holds a job: "
            "the idempotency keys point at another run's jobs (another database on this Redis?)"
        )
    eviction = key_eviction_problem(app.redis)
    if eviction:
        found.append(eviction)
    with UnitOfWork(app.session_factory) as uow:
        refused = refused_rows(uow.session, limit=10_000)
    if refused:
        found.append(
            f"{len(refused)} outbox row(s) refused by the queue (last: "
            f"{_clean(refused[0].error, 120)}): `orders outbox list`"
        )
    if dispatched and not queued:
        found.append(
            f"{dispatched} step(s) dispatched but no queue holds a job: Redis lost them; the "
            "sweep re-publishes them after ORDERS_RELAY_REPUBLISH_AFTER_SECONDS"
        )
    pending = sum(s.get("pending", 0) for s in steps.values())
    if pending and not found:
        found.append(f"{pending} step(s) still in the outbox: is a worker's sweep running?")
    if not found:
        found.append("no cause found: read the worker logs")
    return [f"no step finished for {stall_seconds:.0f} s with work pending", *found]


def _last_lines(logs: Sequence[Path]) -> str:
    for log in logs:
        try:
            lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            continue
        if lines:
            return _clean(lines[-1], 300)
    return ""


def _clean(text: str, limit: int) -> str:
    return "".join(c for c in text[:limit] if c.isprintable())
