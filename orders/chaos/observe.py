"""Looking at a chaos run: queue structures, open orders, counters, progress."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select

from orders.app.bootstrap import App
from orders.chaos.journal import DoneStep
from orders.chaos.report import QueueSnapshot
from orders.domain.models import Order
from orders.domain.steps import WORKFLOW_KIND
from orders.worker.counters import Counters
from reliable_queue import stats
from workflows.models import StepStatus, Workflow, WorkflowStatus, WorkflowStep
from workflows.uow import UnitOfWork


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


def queue_snapshots(app: App) -> list[QueueSnapshot]:
    """Every step queue's structures, for the queue-level checks.

    Raises:
        QueueError / redis.RedisError: Redis unreachable.
    """
    out = []
    for step, queue in app.queues.items():
        s = stats(queue)
        leases = queue.size_of("leases")
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


def counter_snapshot(app: App) -> dict[str, dict[str, int]]:
    """Every counter a report uses: ``{"app": shared counters, <queue>: queue stats}``.

    Raises:
        QueueError / redis.RedisError: Redis unreachable.
    """
    snap = {"app": Counters(app.redis, app.settings.queue_prefix).read()}
    for name, queue in app.queues.items():
        snap[name] = stats(queue).counters
    return snap


def lost_increments(
    before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]
) -> dict[str, dict[str, int]]:
    """Counts that went down between two snapshots (Redis lost them), per group."""
    lost: dict[str, dict[str, int]] = {}
    for group, counts in before.items():
        for name, n in counts.items():
            missing = n - after.get(group, {}).get(name, 0)
            if missing > 0:
                lost.setdefault(group, {})[name] = missing
    return lost


def done_steps(app: App, first_order_id: int) -> list[DoneStep]:
    """The done step rows (compensations included) of the run's orders that carry a
    fencing token: the committing attempt's (a done row keeps it)."""
    query = (
        select(
            Workflow.subject_id, WorkflowStep.step, WorkflowStep.queue, WorkflowStep.fencing_token
        )
        .join(Workflow, Workflow.id == WorkflowStep.workflow_id)
        .where(
            Workflow.kind == WORKFLOW_KIND,
            Workflow.subject_id >= first_order_id,
            WorkflowStep.status == StepStatus.DONE,
            WorkflowStep.fencing_token.is_not(None),
        )
    )
    with UnitOfWork(app.session_factory) as uow:
        return [DoneStep(int(o), s, q, int(t)) for o, s, q, t in uow.session.execute(query)]
