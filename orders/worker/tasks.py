"""The step tasks, forward and compensating: registry entries wiring jobs to the handlers."""

from __future__ import annotations

import logging
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

from orders.app.settings import Settings
from orders.domain import handlers
from orders.domain.errors import OrdersError
from orders.domain.steps import ALL_STEPS, task_name
from reliable_queue import (
    AttemptLost,
    JobContext,
    PermanentError,
    RawJob,
    RetryPolicy,
    TaskDefinition,
    TaskRegistry,
)
from reliable_queue.codec import RecordDecodeError, decode_record
from reliable_queue.execution import Dead, Outcome, Retry, fencing_number
from workflows.errors import FencedOut, StepNotFound, SubjectMismatch
from workflows.tracker import (
    BeforeCommit,
    StepResult,
    StepRun,
    mark_step_dead,
    record_step_failure,
)
from workflows.uow import SessionFactory

log = logging.getLogger("orders.tasks")


class StepPayload(BaseModel):
    """Payload of every step job: which workflow, which order, which step."""

    model_config = ConfigDict(extra="ignore")

    workflow_id: int
    order_id: int
    step: str


def retry_policy(settings: Settings) -> RetryPolicy:
    """The retry policy and time limit of the step tasks, from settings (seconds)."""
    return RetryPolicy(
        max_attempts=settings.max_attempts,
        base_delay=settings.backoff_base_seconds,
        max_delay=settings.backoff_max_seconds,
        time_limit=settings.step_time_limit_seconds,
    )


OnResults = Callable[[str, list[StepResult]], None]
"""Called once per handler call with ``(step, results)``: the runs of that call that
committed or were absorbed as duplicates (a single delivery gives a list of one), so
counters, metrics and releases are written once per batch, not once per job."""

Items = list[tuple[StepPayload, JobContext]]
"""The jobs of one handler call: a fetched batch of one step (a single job is a batch of one)."""

OnAbsorbed = Callable[[JobContext], None]
"""Called once per delivery absorbed as a duplicate (the step was done already: no
effect), with its context, e.g. to say so on its attempt's span; must not raise."""

OnRefused = Callable[[str, str, Exception], None]
"""Called once per delivery whose commit was refused, with ``(step, reason, error)``:
``reason`` is its attempt guard's (``timed_out``, ``abandoned``, ``lease_lost``,
``lease_expired``: ``reliable_queue.attempts``) or ``fenced_out`` (the step row had
seen its fencing token or a later one: ``workflows.errors.FencedOut``, whose
``seen_token`` tells a token the queue may hand out again); must not raise."""


def refusal_reason(error: BaseException) -> str | None:
    """Why a delivery's commit was refused (see :data:`OnRefused`), or None if it was not."""
    if isinstance(error, AttemptLost | FencedOut):
        return error.reason
    return None


def _as_job_error(exc: Exception) -> Exception:
    """Errors marked not retryable (unknown step, workflow or order) become permanent."""
    if isinstance(exc, StepNotFound | SubjectMismatch | OrdersError) and not getattr(
        exc, "retryable", False
    ):
        permanent = PermanentError(f"{type(exc).__name__}: {exc}")
        permanent.__cause__ = exc  # the namespace guard tells "no such step" by it
        return permanent
    return exc


def _handle(
    session_factory: SessionFactory,
    runs: list[StepRun],
    before_commit: BeforeCommit | None = None,
) -> list[StepResult | Exception]:
    """Run the deliveries in one transaction; if it fails as a whole, each in its own.

    One delivery that fails its batch (an effect's error on one order, say) must
    not sink its batch-mates: run alone, only it fails. A batch of one fails alone
    already.
    """
    try:
        return handlers.handle_steps(session_factory, runs, before_commit=before_commit)
    except Exception as exc:
        if len(runs) == 1:
            return [exc]
        log.warning(
            "batch of %d %s deliveries failed (%s); running them one by one",
            len(runs),
            runs[0].step,
            exc,
        )
    results: list[StepResult | Exception] = []
    for run in runs:
        try:
            results.extend(
                handlers.handle_steps(session_factory, [run], before_commit=before_commit)
            )
        except Exception as one:
            results.append(one)
    return results


def _refused(
    step: str, ctx: JobContext, reason: str, error: Exception, on_refused: OnRefused | None
) -> None:
    """Log one refused commit (once) and tell ``on_refused``."""
    seen = getattr(error, "seen_token", None)
    log.warning(
        "job %s of step %s (attempt %d, fencing token %d): commit refused, %s%s",
        ctx.job_id,
        step,
        ctx.attempt,
        ctx.fencing_token,
        reason,
        f" (the step has seen fencing token {seen})" if seen is not None else "",
        extra={"job_id": ctx.job_id, "queue": ctx.queue, "attempt": ctx.attempt},
    )
    if on_refused is not None:
        on_refused(step, reason, error)


def make_handler(
    session_factory: SessionFactory,
    step: str,
    on_results: OnResults | None = None,
    on_refused: OnRefused | None = None,
    before_commit: BeforeCommit | None = None,
    on_absorbed: OnAbsorbed | None = None,
) -> Callable[[Items], list[BaseException | None]]:
    """The queue handler of one step: the deliveries of one fetch in one transaction.

    There is one path whatever the batch size: a single job is a batch of one
    (``orders.domain.handlers.handle_steps``). The worker's middleware (metrics,
    injected faults) wraps the call and sees each delivery; a delivery it failed
    never reaches this handler. If the transaction fails as a whole, its
    deliveries are run one by one, so a single bad delivery cannot fail its
    batch-mates.

    Each delivery is fenced (ADR 0023): its run carries the lease's fencing token
    and commits inside the attempt's guard (``JobContext.hold_lease``), so a
    timed-out, abandoned or superseded attempt commits nothing; each refusal is
    logged once and told to ``on_refused``.

    Args:
        session_factory: makes the sessions.
        step: the step this handler serves.
        on_results: told once per call of every run that committed or was
            absorbed as a duplicate (``result.duplicate``), e.g. to count them;
            must not raise.
        on_refused: see :data:`OnRefused`.
        before_commit: called in each unit of work right before its commit (fault
            injection).
        on_absorbed: see :data:`OnAbsorbed`.

    Returns (to the worker): per delivery, None or its error: ``PermanentError``
    for a delivery of another step or naming no known workflow, step or order
    (errors marked ``retryable = False``); anything else (database busy,
    conflicts, a step still waiting, a refused commit) is retried with backoff.
    """

    def handle(items: Items) -> list[BaseException | None]:
        errors: list[BaseException | None] = [None] * len(items)
        runs: list[StepRun] = []
        positions: list[int] = []
        for i, (payload, ctx) in enumerate(items):
            if payload.step != step:
                errors[i] = PermanentError(
                    f"job for step {payload.step!r} arrived on the {step!r} queue"
                )
                continue
            runs.append(
                StepRun(
                    payload.workflow_id,
                    step,
                    payload.order_id,
                    ctx.attempt,
                    ctx.job_id,
                    ctx.fencing_token,
                    ctx.hold_lease,
                )
            )
            positions.append(i)
        if not runs:
            return errors
        done: list[StepResult] = []
        results = _handle(session_factory, runs, before_commit)
        for i, result in zip(positions, results, strict=True):
            if isinstance(result, Exception):
                errors[i] = _as_job_error(result)
                reason = refusal_reason(result)
                if reason is not None:
                    _refused(step, items[i][1], reason, result, on_refused)
            else:
                done.append(result)
                if result.duplicate and on_absorbed is not None:
                    on_absorbed(items[i][1])
        if done and on_results is not None:
            on_results(step, done)
        return errors

    return handle


def build_registry(
    session_factory: SessionFactory,
    settings: Settings,
    on_results: OnResults | None = None,
    on_refused: OnRefused | None = None,
    before_commit: Callable[[str], None] | None = None,
    isolation: str = "thread",
    on_absorbed: OnAbsorbed | None = None,
) -> TaskRegistry:
    """A registry with the step tasks (``orders.stock`` ... and the compensations).

    Every step task is a batch task (:func:`make_handler`): the jobs of one fetch
    go to one handler call and one transaction, and at batch size 1 that is a
    batch of one. The worker's middleware sees every delivery either way.

    Args:
        session_factory: makes the sessions.
        settings: the retry policy and time limit (:func:`retry_policy`).
        on_results: see :func:`make_handler`.
        on_refused: see :data:`OnRefused`.
        before_commit: called with the step's name in each of its units of work,
            right before the commit (fault injection; None: nothing).
        isolation: every step task's ``TaskDefinition.isolation``, ``thread`` or
            ``process`` (``ORDERS_STEP_ISOLATION``).
        on_absorbed: see :data:`OnAbsorbed`.
    """
    registry = TaskRegistry()
    policy = retry_policy(settings)
    for step in ALL_STEPS:
        hook = None if before_commit is None else _before_commit_of(before_commit, step)
        handler = make_handler(session_factory, step, on_results, on_refused, hook, on_absorbed)
        registry.add(TaskDefinition(task_name(step), handler, StepPayload, policy, True, isolation))
    return registry


def _before_commit_of(hook: Callable[[str], None], step: str) -> BeforeCommit:
    return lambda _claims: hook(step)


def outcome_recorder(session_factory: SessionFactory) -> Callable[[RawJob, Outcome], None]:
    """A worker ``on_outcome`` hook writing retries and dead letters to the step rows.

    A dead-lettered step makes its workflow *blocked* with the step and reason,
    never silently in progress. Jobs whose record cannot be read are skipped
    (they have no step to blame; the DLQ keeps them). Both records advance the
    step row's fencing token to the job's (``fencing_number(job.token)``), so the
    failed attempt's late commit is fenced out (ADR 0023).
    """

    def record(job: RawJob, outcome: Outcome) -> None:
        if not isinstance(outcome, Retry | Dead):
            return
        try:
            payload = StepPayload.model_validate(decode_record(job.record).payload)
        except (RecordDecodeError, ValueError):
            return
        token = fencing_number(job.token)
        if isinstance(outcome, Retry):
            run = StepRun(
                payload.workflow_id, payload.step, payload.order_id, job.attempt, job.job_id, token
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
                    fencing_token=token,
                )
            except StepNotFound:
                log.warning("dead job %s names no known step", job.job_id)

    return record
