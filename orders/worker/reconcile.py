"""Bring step rows in line with the dead-letter queues.

Most dead letters are recorded by the worker as they happen; a job whose
worker was lost every time is dead-lettered by the reaper inside Redis, with
no worker to tell the database. This pass finds such entries and marks their
steps dead, so the workflow shows as blocked with the reason. The workers'
sweep runs it every ``relay_reconcile_interval_seconds`` (and ``orders
status`` once), so every view shows the same truth without anyone asking.
"""

from __future__ import annotations

from pydantic import ValidationError
from sqlalchemy import select, tuple_

from orders.app.bootstrap import App
from reliable_queue import DeadLetter
from workflows.errors import StepNotFound
from workflows.models import StepStatus, WorkflowStep
from workflows.tracker import mark_step_dead
from workflows.uow import UnitOfWork

_CHUNK = 500


def reconcile_dead_letters(app: App, *, limit: int = 10_000) -> int:
    """Mark the step of every dead-lettered job dead in the database (idempotent).

    Steps already dead or done are skipped with one database query per 500
    dead letters, so a pass over a large, settled DLQ writes nothing.

    Args:
        app: the application.
        limit: most DLQ entries read per queue.

    Returns:
        Steps newly marked dead.

    Raises:
        reliable_queue.QueueConnectionError: Redis unreachable.
    """
    from orders.worker.tasks import StepPayload

    marked = 0
    for queue in app.queues.values():
        letters: list[tuple[int, str, DeadLetter]] = []
        for letter in queue.dead_letters.iter(limit=limit):
            try:
                payload = StepPayload.model_validate(letter.payload)
            except ValidationError:
                continue
            letters.append((payload.workflow_id, payload.step, letter))
        for start in range(0, len(letters), _CHUNK):
            marked += _mark_open(app, letters[start : start + _CHUNK])
    return marked


def _mark_open(app: App, letters: list[tuple[int, str, DeadLetter]]) -> int:
    with UnitOfWork(app.session_factory) as uow:
        open_steps = set(
            uow.session.execute(
                select(WorkflowStep.workflow_id, WorkflowStep.step).where(
                    tuple_(WorkflowStep.workflow_id, WorkflowStep.step).in_(
                        [(w, s) for w, s, _ in letters]
                    ),
                    WorkflowStep.status.not_in((StepStatus.DEAD, StepStatus.DONE)),
                )
            ).all()
        )
    marked = 0
    for workflow_id, step, letter in letters:
        if (workflow_id, step) not in open_steps:
            continue
        try:
            if mark_step_dead(
                app.session_factory,
                workflow_id,
                step,
                letter.reason,
                error=letter.error,
                attempts=letter.attempts,
            ):
                marked += 1
        except StepNotFound:
            continue
    return marked
