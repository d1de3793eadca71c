"""The four step tasks: registry entries wiring queue jobs to the step handlers."""

from __future__ import annotations

import logging
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

from orders import handlers
from orders.errors import OrdersError
from orders.settings import Settings
from orders.steps import STEPS, task_name
from reliable_queue import (
    JobContext,
    PermanentError,
    RawJob,
    RetryPolicy,
    TaskDefinition,
    TaskRegistry,
)
from reliable_queue.codec import RecordDecodeError, decode_record
from reliable_queue.execution import Dead, Outcome, Retry
from workflows.errors import StepNotFound, SubjectMismatch
from workflows.tracker import StepResult, StepRun, mark_step_dead, record_step_failure
from workflows.uow import SessionFactory

log = logging.getLogger("orders.tasks")


class StepPayload(BaseModel):
    """Payload of every step job: which workflow, which order, which step."""

    model_config = ConfigDict(extra="ignore")

    workflow_id: int
    order_id: int
    step: str


def retry_policy(settings: Settings) -> RetryPolicy:
    """The retry policy of the step tasks, from settings (seconds)."""
    return RetryPolicy(
        max_attempts=settings.max_attempts,
        base_delay=settings.backoff_base_seconds,
        max_delay=settings.backoff_max_seconds,
    )


OnResult = Callable[[str, StepResult], None]
"""Called with ``(step, result)`` after each run that reached the unit of work."""


def make_handler(
    session_factory: SessionFactory, step: str, on_result: OnResult | None = None
) -> Callable[[StepPayload, JobContext], str]:
    """The queue handler of one step: effect + completion in one unit of work.

    Args:
        session_factory: makes the sessions.
        step: the step this handler serves.
        on_result: told of every run that committed or was absorbed as a duplicate
            (``result.duplicate``), e.g. to count them; must not raise.

    Raises (to the worker):
        PermanentError: the payload names a step, workflow or order that does not
            exist (errors marked ``retryable = False``).
        Exception: anything else (database busy, conflicts) is retried with backoff.
    """

    def handle(payload: StepPayload, ctx: JobContext) -> str:
        if payload.step != step:
            raise PermanentError(f"job for step {payload.step!r} arrived on the {step!r} queue")
        run = StepRun(
            workflow_id=payload.workflow_id,
            step=step,
            subject_id=payload.order_id,
            attempt=ctx.attempt,
            job_id=ctx.job_id,
            fencing_token=ctx.fencing_token,
        )
        try:
            result = handlers.handle_step(session_factory, run)
        except (StepNotFound, SubjectMismatch, OrdersError) as exc:
            if getattr(exc, "retryable", False):
                raise
            raise PermanentError(f"{type(exc).__name__}: {exc}") from exc
        if on_result is not None:
            on_result(step, result)
        return result.outcome

    return handle


def build_registry(
    session_factory: SessionFactory, settings: Settings, on_result: OnResult | None = None
) -> TaskRegistry:
    """A registry with the four step tasks (``orders.stock`` ...).

    Args:
        on_result: see :func:`make_handler`.
    """
    registry = TaskRegistry()
    policy = retry_policy(settings)
    for step in STEPS:
        registry.add(
            TaskDefinition(
                task_name(step), make_handler(session_factory, step, on_result), StepPayload, policy
            )
        )
    return registry


def outcome_recorder(session_factory: SessionFactory) -> Callable[[RawJob, Outcome], None]:
    """A worker ``on_outcome`` hook writing retries and dead letters to the step rows.

    A dead-lettered step makes its workflow *blocked* with the step and reason,
    never silently in progress. Jobs whose record cannot be read are skipped
    (they have no step to blame; the DLQ keeps them).
    """

    def record(job: RawJob, outcome: Outcome) -> None:
        if not isinstance(outcome, Retry | Dead):
            return
        try:
            payload = StepPayload.model_validate(decode_record(job.record).payload)
        except (RecordDecodeError, ValueError):
            return
        if isinstance(outcome, Retry):
            run = StepRun(
                payload.workflow_id, payload.step, payload.order_id, job.attempt, job.job_id
            )
            record_step_failure(session_factory, run, outcome.error)
        else:
            try:
                mark_step_dead(
                    session_factory,
                    payload.workflow_id,
                    payload.step,
                    outcome.reason,
                    error=outcome.error,
                    attempts=job.attempt,
                )
            except StepNotFound:
                log.warning("dead job %s names no known step", job.job_id)

    return record
