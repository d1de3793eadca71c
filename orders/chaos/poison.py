"""The chaos run's poison job: one job whose every run kills its worker process.

The job is a second delivery of a step that is already done (so whatever
happens to it, no order is blocked and no effect doubles), enqueued with an
idempotency key the workers' fault config names (``FaultConfig.poison_key``).
The queue must charge it alone and dead-letter it as ``worker_lost``; its
batch-mates (the other lane's jobs, the rest of a batch) must not be charged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import select

from orders.app.bootstrap import App
from orders.domain.steps import task_name
from reliable_queue import EnqueueRequest
from workflows.models import StepStatus, Workflow, WorkflowStep
from workflows.uow import UnitOfWork

POISON_KEY = "chaos:poison"
"""Idempotency key prefix of the poison job (a replanted one gets ``:<n>``)."""


@dataclass
class PoisonOutcome:
    """Where the poison job ended, read from the DLQ before any redrive.

    Attributes:
        planted: poison jobs enqueued (more than one only if Redis lost one).
        reason: the poison job's dead-letter reason (None: it never reached the DLQ).
        attempts: its attempts when dead-lettered.
        others_lost: ids of other jobs dead-lettered as ``worker_lost``.
    """

    planted: int = 0
    reason: str | None = None
    attempts: int = 0
    others_lost: list[str] = field(default_factory=list)


class PoisonJob:
    """Plants the poison job once a step of the run is done, and follows it.

    Args:
        app: the application.
        step: the step whose queue gets the poison job.
        max_attempts: the poison job's max attempts.
        first_order_id: the run's first order id (an earlier order is never used).
    """

    def __init__(self, app: App, step: str, max_attempts: int, first_order_id: int) -> None:
        self.app = app
        self.step = step
        self.queue = app.queues[step]
        self.max_attempts = max_attempts
        self.first_order_id = first_order_id
        self.job_ids: list[str] = []

    def tick(self) -> None:
        """Plant the job when a done step exists; plant it again if Redis lost it.

        Raises:
            QueueError / redis.RedisError: Redis unreachable (the driver tries later).
        """
        if self.job_ids and self.queue.locate(self.job_ids[-1]) not in ("nowhere", "unknown"):
            return
        payload = self._done_step_payload()
        if payload is None:
            return
        key = POISON_KEY if not self.job_ids else f"{POISON_KEY}:{len(self.job_ids)}"
        request = EnqueueRequest(
            task_name(self.step), payload, idempotency_key=key, max_attempts=self.max_attempts
        )
        job_id = self.queue.enqueue_many([request], replace_stale_keys=True)[0]
        if job_id not in self.job_ids:
            self.job_ids.append(job_id)

    def settled(self) -> bool:
        """True once the poison job is planted and in the DLQ or done (Redis reachable)."""
        return bool(self.job_ids) and self.queue.locate(self.job_ids[-1]) in ("dead", "done")

    def outcome(self) -> PoisonOutcome:
        """The poison job's dead letter and every other ``worker_lost`` one (before redrive)."""
        found = PoisonOutcome(planted=len(self.job_ids))
        for queue in self.app.queues.values():
            for letter in queue.dead_letters.iter(reason="worker_lost"):
                if letter.job_id in self.job_ids and queue is self.queue:
                    continue
                found.others_lost.append(letter.job_id)
        for job_id in self.job_ids:
            letter = self.queue.dead_letters.show(job_id)
            if letter is not None:
                found.reason, found.attempts = letter.reason, letter.attempts
        return found

    def _done_step_payload(self) -> dict | None:
        with UnitOfWork(self.app.session_factory) as uow:
            row = uow.session.execute(
                select(WorkflowStep.payload)
                .join(Workflow, Workflow.id == WorkflowStep.workflow_id)
                .where(
                    WorkflowStep.step == self.step,
                    WorkflowStep.status == StepStatus.DONE,
                    Workflow.subject_id >= self.first_order_id,
                )
                .order_by(WorkflowStep.workflow_id)
                .limit(1)
            ).first()
        return dict(row[0]) if row is not None else None
