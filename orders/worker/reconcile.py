"""Bring step rows in line with the dead-letter queues.

Most dead letters are recorded by the worker as they happen; a job whose
worker was lost every time is dead-lettered by the reaper inside Redis, with
no worker to tell the database. This pass finds such entries and marks their
steps dead, so the workflow shows as blocked with the reason. The workers'
sweep runs it every ``relay_reconcile_interval_seconds`` (and ``orders
status`` once), so every view shows the same truth without anyone asking.
An entry that does not read (an id that is not UTF-8, a record that is no step
payload) is passed over; a queue whose DLQ key holds another type is logged and
passed over: the other queues are still reconciled.
"""

from __future__ import annotations

import logging

from pydantic import ValidationError
from sqlalchemy import select, tuple_

from orders.app.bootstrap import App
from reliable_queue import DeadLetter, QueueDataError
from workflows.errors import StepNotFound
from workflows.models import StepStatus, WorkflowStep
from workflows.tracker import mark_step_dead
from workflows.uow import UnitOfWork

_CHUNK = 500
log = logging.getLogger("orders.reconcile")


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
        try:
            for letter in queue.dead_letters.iter(limit=limit):
                try:
                    payload = StepPayload.model_validate(letter.payload)
                except ValidationError:
                    continue
                letters.append((payload.workflow_id, payload.step, letter))
        except QueueDataError as exc:
            log.warning("dead letters of queue %s not reconciled: %s", queue.name, exc)
            continue
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
        reason, error, attempts = storable(letter)
        try:
            if mark_step_dead(
                app.session_factory, workflow_id, step, reason, error=error, attempts=attempts
            ):
                marked += 1
        except StepNotFound:
            continue
    return marked


#: Longest reason a step row keeps (``workflow_steps.outcome`` is ``VARCHAR(50)``).
REASON_CHARS = 50
#: Longest error text copied onto a step row.
ERROR_CHARS = 2000
#: Largest attempt count a step row keeps (a 32-bit ``INTEGER`` column).
ATTEMPTS_MAX = 2**31 - 1


def storable(letter: DeadLetter) -> tuple[str, str, int]:
    """A dead letter's reason, error and attempts as a database row can hold them.

    The failure info is Redis data, possibly a foreign writer's: a reason longer than
    the column, a NUL character (PostgreSQL text cannot hold one) or an attempt count
    past 32 bits would fail the step's transaction at every pass. Each is cut, escaped
    or capped instead; the DLQ keeps the original.

    Returns:
        ``(reason, error, attempts)``.
    """

    def text(value: str, limit: int) -> str:
        return value.replace("\x00", "\\x00")[:limit]

    return (
        text(letter.reason, REASON_CHARS),
        text(letter.error, ERROR_CHARS),
        min(letter.attempts, ATTEMPTS_MAX),
    )
