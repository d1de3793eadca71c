"""Which dead letters still block an order's workflow in the database.

A dead step blocks its workflow until its dead letter is redriven (or the order
is cancelled). Purging that dead letter would leave the order blocked with no
dead letter to redrive, so purges ask here first, and name the ways out that
still work afterwards: ``orders outbox retry <step id>`` (or ``--all``) runs
the step again from the database, ``orders cancel`` ends the order
(:func:`ways_out`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sqlalchemy import and_, select

from orders.domain.steps import WORKFLOW_KIND
from reliable_queue import DeadLetter, Queue
from workflows.models import StepStatus, Workflow, WorkflowStatus, WorkflowStep, idempotency_key
from workflows.uow import SessionFactory

_CHUNK = 500  # workflow ids per query (well under SQLite's bound-parameter limit)


@dataclass(frozen=True)
class BlockingLetter:
    """A dead letter whose step is dead in a blocked workflow.

    Attributes:
        job_id: the dead letter's job id.
        order_id: the order the workflow is about.
        step: the dead step's name.
        step_id: the dead step's row id (``orders outbox retry`` takes it).
    """

    job_id: str
    order_id: int
    step: str
    step_id: int


def ways_out(letter: BlockingLetter, *, purged: bool) -> list[str]:
    """The commands that end the block of ``letter``'s order, best first.

    Args:
        letter: a blocking dead letter.
        purged: the dead letter is gone (purged with ``--force``, or dropped by the
            DLQ's bounds) rather than still in the queue.

    Returns:
        Command lines: before a purge, redrive the letter or cancel the order; after
        it, run the step again from the database (one step, or every such step) or
        cancel the order.
    """
    cancel = f"orders cancel {letter.order_id}"
    if not purged:
        return [f"orders dlq redrive {letter.job_id}", cancel]
    return [f"orders outbox retry {letter.step_id}", "orders outbox retry --all", cancel]


def _step_of(letter: DeadLetter) -> tuple[int, str] | None:
    payload = letter.payload
    if not isinstance(payload, dict):
        return None
    workflow_id, step = payload.get("workflow_id"), payload.get("step")
    if type(workflow_id) is not int or not isinstance(step, str):
        return None
    return workflow_id, step


def blocking_letters(
    session_factory: SessionFactory, letters: Iterable[DeadLetter]
) -> list[BlockingLetter]:
    """The dead letters among ``letters`` whose step still blocks an order.

    A letter blocks when its payload names a (workflow id, step) whose step row
    is dead and whose workflow (of an order) is blocked. Letters without such a
    payload (record gone, unknown task, invalid payload) block nothing.

    Args:
        session_factory: makes the read-only sessions.
        letters: the dead letters about to be purged.

    Returns:
        The blocking ones, in the order given.

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database cannot be read.
    """
    named = [(letter, key) for letter in letters if (key := _step_of(letter)) is not None]
    workflow_ids = sorted({key[0] for _, key in named})
    dead: dict[tuple[int, str], tuple[int, int]] = {}
    with session_factory() as session:
        for i in range(0, len(workflow_ids), _CHUNK):
            rows = session.execute(
                select(
                    WorkflowStep.workflow_id,
                    WorkflowStep.step,
                    Workflow.subject_id,
                    WorkflowStep.id,
                )
                .join(Workflow, Workflow.id == WorkflowStep.workflow_id)
                .where(
                    and_(
                        WorkflowStep.workflow_id.in_(workflow_ids[i : i + _CHUNK]),
                        WorkflowStep.status == StepStatus.DEAD,
                        Workflow.status == WorkflowStatus.BLOCKED,
                        Workflow.kind == WORKFLOW_KIND,
                    )
                )
            )
            dead.update({(wid, step): (order, step_id) for wid, step, order, step_id in rows})
    found = []
    for letter, key in named:
        if key in dead:
            order_id, step_id = dead[key]
            found.append(BlockingLetter(letter.job_id, order_id, key[1], step_id))
    return found


def stranded_orders(
    session_factory: SessionFactory, queues: Mapping[str, Queue], *, limit: int = 10_000
) -> list[tuple[int, str]]:
    """Blocked orders whose dead step has no dead letter left to redrive.

    Its dead letter was purged (``--force``) or dropped by the DLQ's size or age
    bound: ``orders outbox retry`` runs its step again, or ``orders cancel`` ends
    it. The database alone cannot see this (``orders.app.invariants`` checks
    only the database), so it is a check across both.

    Args:
        session_factory: makes the read-only sessions.
        queues: step queue name -> its queue.
        limit: most blocked workflows read.

    Returns:
        (order id, dead step) pairs, by order id.

    Raises:
        QueueConnectionError: Redis unreachable.
        sqlalchemy.exc.SQLAlchemyError: the database cannot be read.
    """
    with session_factory() as session:
        rows = session.execute(
            select(
                Workflow.subject_id, WorkflowStep.workflow_id, WorkflowStep.step, WorkflowStep.queue
            )
            .join(Workflow, Workflow.id == WorkflowStep.workflow_id)
            .where(
                Workflow.status == WorkflowStatus.BLOCKED,
                Workflow.kind == WORKFLOW_KIND,
                WorkflowStep.status == StepStatus.DEAD,
            )
            .order_by(Workflow.subject_id)
            .limit(limit)
        ).all()
    return [
        (order_id, step)
        for order_id, workflow_id, step, queue_name in rows
        if (queue := queues.get(queue_name)) is None
        or queue.pending_job_for(idempotency_key(workflow_id, step)) is None
    ]
