"""Bring step rows in line with the dead-letter queues.

Most dead letters are recorded by the worker as they happen; a job whose
worker was lost every time is dead-lettered by the reaper inside Redis, with
no worker to tell the database. This pass finds such entries and marks their
steps dead, so the workflow shows as blocked with the reason.
"""

from __future__ import annotations

from pydantic import ValidationError

from orders.app.bootstrap import App
from workflows.errors import StepNotFound
from workflows.tracker import mark_step_dead


def reconcile_dead_letters(app: App, *, limit: int = 10_000) -> int:
    """Mark the step of every dead-lettered job dead in the database (idempotent).

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
        for letter in queue.dead_letters.iter(limit=limit):
            try:
                payload = StepPayload.model_validate(letter.payload)
            except ValidationError:
                continue
            try:
                if mark_step_dead(
                    app.session_factory,
                    payload.workflow_id,
                    payload.step,
                    letter.reason,
                    error=letter.error,
                    attempts=letter.attempts,
                ):
                    marked += 1
            except StepNotFound:
                continue
    return marked
