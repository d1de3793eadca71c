"""Outbox relay: publish the step rows their writer marked dispatched; sweep up the rest.

Every writer of step rows follows one protocol (docs/adr/0028): it writes or marks
its rows ``dispatched`` in its own commit, with their dispatch time, and calls
:func:`publish_dispatched` right after that commit, with the rows' message
columns, so nothing is read back. Rows the queue refuses go back to ``pending``
and are charged an attempt (a batch is split until the refused rows stand alone,
``workflows.isolation``; after ``max_attempts`` a row becomes ``unpublishable``
and its workflow blocked, with the reason); when the queue cannot be reached,
the rows not published go back to ``pending`` uncharged.

The periodic :func:`sweep` publishes pending rows the same way (it marks them
dispatched in its own transaction first) and re-publishes dispatched rows the
queue does not hold ``republish_after`` seconds after their dispatch: a crash
between a writer's commit and its publish, or a job Redis lost. The queue's
idempotency key ``<workflow id>:<step>`` makes a second publish of a step a no-op.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from opentelemetry.trace import Tracer
from sqlalchemy import Row, Text, cast, func, or_, select, update
from sqlalchemy.orm import Session, defer

from reliable_queue.trace_context import TraceContext
from workflows.columns import utcnow
from workflows.conflicts import retry_on_conflict
from workflows.isolation import IsolatedPublish, describe, publish_isolated
from workflows.messages import DispatchedStep, Publisher, StepMessage
from workflows.models import StepStatus, Workflow, WorkflowStatus, WorkflowStep, idempotency_key
from workflows.sql import dialect_of
from workflows.tracing import relay_pass
from workflows.uow import SessionFactory, UnitOfWork

__all__ = [
    "PublishPolicy",
    "Publisher",
    "StepMessage",
    "SweepResult",
    "dispatch_pending",
    "message_for",
    "publish_dispatched",
    "sweep",
]

_CHUNK = 500
#: prefix of ``workflows.blocked_reason`` for a workflow blocked by an unpublishable row
BLOCKED_PREFIX = "unpublishable: "
#: statuses of a row the relay may still (re-)publish
_OPEN = (StepStatus.PENDING, StepStatus.DISPATCHED, StepStatus.FAILED)


@dataclass(frozen=True)
class PublishPolicy:
    """How often a refused row is tried again before it is given up.

    Attributes:
        max_attempts: refusals before the row becomes ``unpublishable`` (>= 1).
        backoff_base_seconds: wait after the first refusal, seconds; doubles each time.
        backoff_max_seconds: cap on one wait, seconds.
    """

    max_attempts: int = 8
    backoff_base_seconds: float = 1.0
    backoff_max_seconds: float = 300.0

    def delay(self, attempts: int) -> float:
        """Seconds to hold a row back after its ``attempts``-th refusal (>= 1)."""
        return min(self.backoff_max_seconds, self.backoff_base_seconds * 2 ** (attempts - 1))


@dataclass
class SweepResult:
    """What one relay sweep did.

    Attributes:
        published: pending steps published: rows put back to ``pending`` (their
            writer's publish was refused or found the queue unreachable), rows
            made pending again (``orders outbox retry``), rows written with no
            queue at hand.
        republished: dispatched steps the queue no longer knew, published again.
        checked: dispatched steps whose presence in the queue was checked.
        refused: rows the queue refused in this sweep (charged one attempt each).
        unpublishable: rows given up in this sweep (their workflows are blocked).
        republished_keys: idempotency keys of the re-published steps.
    """

    published: int = 0
    republished: int = 0
    checked: int = 0
    refused: int = 0
    unpublishable: int = 0
    republished_keys: list[str] = field(default_factory=list)


def message_for(step: WorkflowStep | Row[Any]) -> StepMessage:
    """Build the queue message of a step row (an ORM row, or a plain row with
    ``workflow_id``, ``step``, ``queue``, ``task``, ``payload`` and, optionally,
    ``traceparent`` and ``tracestate``)."""
    return StepMessage(
        queue=step.queue,
        task=step.task,
        payload=dict(step.payload),
        idempotency_key=idempotency_key(step.workflow_id, step.step),
        priority=step.priority,
        fairness_key=step.fairness_key,
        trace_context=TraceContext.parse(
            getattr(step, "traceparent", None), getattr(step, "tracestate", None)
        ),
    )


_WS = WorkflowStep.__table__


def dispatch_pending(
    session: Session,
    now: datetime,
    *,
    ids: Sequence[int] | None = None,
    limit: int | None = None,
) -> list[DispatchedStep]:
    """Mark pending step rows due for publishing ``dispatched``, in the caller's transaction.

    For a writer whose rows are already ``pending`` (the sweep, or rows written
    without a queue at hand): commit, then hand the result to
    :func:`publish_dispatched`. On PostgreSQL rows another transaction holds
    locked are left out (``FOR UPDATE SKIP LOCKED``): this never waits for a
    row lock. Rows held back by a refusal's backoff are not due. With nothing
    due it only reads.

    Args:
        session: the caller's session (nothing committed here).
        now: the dispatch time written (timezone-aware); also decides which
            refused rows are due again.
        ids: only these rows; None: any pending row, oldest first.
        limit: most rows marked; None: no limit.

    Returns:
        The rows marked, in id order, with their message columns (the payload
        as stored JSON text).
    """
    if ids is not None and not ids:
        return []
    due = [WorkflowStep.status == StepStatus.PENDING, _due(now)]
    if ids is not None:
        due.append(dialect_of(session).among(WorkflowStep.id, ids))
    candidates = select(WorkflowStep.id).where(*due).order_by(WorkflowStep.id)
    if limit is not None:
        candidates = candidates.limit(limit)
    # a read first: with nothing pending (the usual case) no write is started, so
    # a sweep takes no SQLite writer's turn (ADR 0018)
    found = list(session.scalars(candidates))
    if not found:
        return []
    statement = (
        update(_WS)
        .where(_not_held(session, found, WorkflowStep.status == StepStatus.PENDING))
        .values(status=StepStatus.DISPATCHED, dispatched_at=now, next_publish_at=None)
        .returning(
            _WS.c.id,
            _WS.c.workflow_id,
            _WS.c.step,
            _WS.c.queue,
            _WS.c.task,
            cast(_WS.c.payload, Text),
            _WS.c.priority,
            _WS.c.fairness_key,
            _WS.c.traceparent,
            _WS.c.tracestate,
        )
    )
    return sorted((DispatchedStep(*row) for row in session.execute(statement)), key=_row_id)


def _row_id(row: DispatchedStep) -> int:
    return row.row_id


def publish_dispatched(
    session_factory: SessionFactory,
    publisher: Publisher,
    rows: Sequence[DispatchedStep],
    *,
    clock: Callable[[], datetime] = utcnow,
    policy: PublishPolicy | None = None,
    tracer: Tracer | None = None,
) -> int:
    """Publish the step rows the caller's own commit marked ``dispatched``.

    The one way a step row reaches the queue (docs/adr/0028): placement and
    cancellation write their rows dispatched (``workflows.outbox.add_workflows``,
    ``workflows.compensation.compensate_workflow`` with ``dispatch=True``), a
    finished step's commit releases them dispatched
    (``workflows.dependencies.release_waiting``), the sweep marks pending rows
    (:func:`dispatch_pending`). Call it right after that commit. A publish that
    goes through costs no database work at all. No other writer publishes these
    rows: the sweep's pending pass never sees them, and its check of dispatched
    steps only takes a row ``republish_after`` seconds after its dispatch, when
    the queue does not hold it (a crash before this publish).

    Rows the queue refuses (or whose payload does not decode) go back to
    ``pending`` and are charged an attempt; when the queue cannot be reached,
    the rows not published go back to ``pending`` uncharged, for the sweep.

    Args:
        session_factory: makes the sessions of the units of work (used only
            when some row is refused or the queue is unreachable).
        publisher: the queue adapter.
        rows: the rows, with their message columns.
        clock: current time (timezone-aware).
        policy: attempts and backoff of refused rows (default :class:`PublishPolicy`).
        tracer: records each chunk's pass as a ``relay publish`` root span linked to
            every row's trace context (``workflows.tracing``); None records nothing.
            The rows' contexts reach the queue either way.

    Returns:
        Number of steps published.

    Raises:
        PublisherUnavailable: the queue cannot be reached (after the rows not
            published were put back to ``pending``).
        SQLAlchemyError: putting a refused or unpublished row back failed; it
            stays dispatched, and the sweep re-publishes it after ``republish_after``.
    """
    return _publish(
        session_factory, publisher, rows, clock, policy or PublishPolicy(), tracer, "relay publish"
    ).published


@dataclass
class _Published:
    published: int = 0
    refused: int = 0
    unpublishable: int = 0


def _publish(
    session_factory: SessionFactory,
    publisher: Publisher,
    rows: Sequence[DispatchedStep],
    clock: Callable[[], datetime],
    policy: PublishPolicy,
    tracer: Tracer | None,
    name: str,
) -> _Published:
    """:func:`publish_dispatched`, with the refusals counted; each chunk is one pass
    named ``name`` (:func:`workflows.tracing.relay_pass`)."""
    done = _Published()
    for start in range(0, len(rows), _CHUNK):
        steps: list[tuple[int, StepMessage]] = []
        unreadable: dict[int, str] = {}
        for row in sorted(rows[start : start + _CHUNK], key=_row_id):
            try:
                steps.append((row.row_id, _dispatched_message(row)))
            except Exception as exc:  # noqa: BLE001 - this row's payload is unreadable
                unreadable[row.row_id] = f"payload cannot be read: {describe(exc)}"
        with relay_pass(tracer if steps else None, name, [m for _, m in steps]):
            outcome = publish_isolated(publisher, steps) if steps else IsolatedPublish()
        outcome.refused.update(unreadable)
        done.published += len(outcome.published)
        if outcome.unavailable is None:
            back = list(outcome.refused)
        else:  # this chunk's rows not published, and every later chunk's
            sent = set(outcome.published)
            back = [r.row_id for r in rows[start:] if r.row_id not in sent]
        if back:
            _undispatch(session_factory, back)
        done.refused += len(outcome.refused)
        done.unpublishable += _charge_refusals(session_factory, outcome.refused, clock(), policy)
        if outcome.unavailable is not None:
            raise outcome.unavailable
    return done


def _undispatch(session_factory: SessionFactory, ids: Sequence[int]) -> None:
    """Put dispatched rows that were not published back to ``pending`` (no dispatch time)."""
    with UnitOfWork(session_factory) as uow:
        uow.session.execute(
            update(WorkflowStep)
            .where(_not_held(uow.session, ids, WorkflowStep.status == StepStatus.DISPATCHED))
            .values(status=StepStatus.PENDING, dispatched_at=None),
            execution_options={"synchronize_session": False},
        )
        uow.commit()


def _dispatched_message(row: DispatchedStep) -> StepMessage:
    """The queue message of a dispatched row; raises when its payload is not a JSON object."""
    payload = json.loads(row.payload) if isinstance(row.payload, str) else dict(row.payload)
    if not isinstance(payload, dict):
        raise TypeError(f"payload is a JSON {type(payload).__name__}, not an object")
    return StepMessage(
        queue=row.queue,
        task=row.task,
        payload=payload,
        idempotency_key=idempotency_key(row.workflow_id, row.step),
        priority=row.priority,
        fairness_key=row.fairness_key,
        trace_context=row.trace_context,
    )


def sweep(
    session_factory: SessionFactory,
    publisher: Publisher,
    *,
    is_known: Callable[[str], bool] | None = None,
    known_keys: Callable[[Sequence[str]], Collection[str]] | None = None,
    republish_after: float,
    limit: int = 1000,
    clock: Callable[[], datetime] = utcnow,
    policy: PublishPolicy | None = None,
    tracer: Tracer | None = None,
) -> SweepResult:
    """One periodic relay pass: publish pending steps, re-publish lost ones.

    Pending rows due for publishing are marked dispatched in the sweep's own
    transaction (:func:`dispatch_pending`) and published as any writer's
    (:func:`publish_dispatched`). A writer's fresh rows are never pending (it
    writes them dispatched), so the sweep does not race their writer.

    A step counts as lost when it was dispatched (or, never marked dispatched,
    last started) more than ``republish_after`` seconds ago, is not done or dead, and the
    queue holds no job for its idempotency key (Redis lost it); the
    steps are read again after that check, so one that finished meanwhile is
    not taken for lost. The database is the source of truth; the re-published
    job carries the same idempotency key. Work per pass is bounded: at most
    ``limit`` rows per category and ``2 * limit`` publish calls.

    Args:
        session_factory: makes the sessions of the units of work.
        publisher: the queue adapter.
        is_known: ``is_known(idempotency_key) -> bool``: does the queue really
            hold a job (ready, delayed, active or dead-lettered) for that key.
            Asked once per checked step; give ``known_keys`` instead to ask once
            per sweep.
        known_keys: ``known_keys(idempotency_keys) -> keys``: the same question
            for every checked step at once (``QueuePublisher.known_keys``); the
            keys it returns are held by the queue. Used when given.
        republish_after: seconds since dispatch before a step is checked.
        limit: most rows handled per category in one pass.
        clock: current time (timezone-aware).
        policy: attempts and backoff of refused rows (default :class:`PublishPolicy`).
        tracer: records each pass that publishes something as a ``relay sweep`` root
            span linked to every row's trace context; None records nothing.

    Returns:
        A ``SweepResult`` with the counts.

    Raises:
        ValueError: neither ``is_known`` nor ``known_keys`` given.
        PublisherUnavailable: the queue cannot be reached (the pending rows not
            published are put back to ``pending`` first).
        Exception: whatever ``is_known`` / ``known_keys`` raises.
    """
    held_by_queue = known_keys or _one_by_one(is_known)
    policy = policy or PublishPolicy()
    result = SweepResult()
    with UnitOfWork(session_factory) as uow:
        claimed = dispatch_pending(uow.session, clock(), limit=limit)
        uow.commit()
    first = _publish(session_factory, publisher, claimed, clock, policy, tracer, "relay sweep")
    result.published = first.published
    result.refused, result.unpublishable = first.refused, first.unpublishable
    now = clock()
    cutoff = now - timedelta(seconds=republish_after)
    # A row dispatched under the old publish-then-mark protocol by a writer that
    # died before marking it has no dispatch time; a worker that ran it since and
    # failed made it ``failed``: its attempt's start time dates it instead.
    sent_at = func.coalesce(WorkflowStep.dispatched_at, WorkflowStep.started_at)
    with UnitOfWork(session_factory) as uow:
        stale_ids = list(
            uow.session.scalars(
                select(WorkflowStep.id)
                .where(
                    WorkflowStep.status.in_((StepStatus.DISPATCHED, StepStatus.FAILED)),
                    sent_at < cutoff,
                    _due(now),
                )
                .order_by(sent_at)
                .limit(limit)
            )
        )
    stale, unreadable = _load_messages(session_factory, stale_ids) if stale_ids else ([], {})
    if unreadable:
        result.refused += len(unreadable)
        result.unpublishable += _charge_refusals(session_factory, unreadable, now, policy)
    result.checked = len(stale)
    held = held_by_queue([m.idempotency_key for _, m in stale]) if stale else ()
    unknown = [(step_id, m) for step_id, m in stale if m.idempotency_key not in held]
    if not unknown:
        return result
    # A job that finished between the read above and its check is unknown to the
    # queue too, but it committed first (acks follow commits): read again, and
    # keep only the steps that are still open.
    with UnitOfWork(session_factory) as uow:
        still_open = set(
            uow.session.scalars(
                select(WorkflowStep.id).where(
                    dialect_of(uow.session).among(
                        WorkflowStep.id, [step_id for step_id, _ in unknown]
                    ),
                    WorkflowStep.status.in_((StepStatus.DISPATCHED, StepStatus.FAILED)),
                )
            )
        )
    lost = [(step_id, m) for step_id, m in unknown if step_id in still_open]
    if not lost:
        return result
    with relay_pass(tracer, "relay sweep", [m for _, m in lost], republish=True):
        outcome = publish_isolated(publisher, lost)
    if outcome.published:
        with UnitOfWork(session_factory) as uow:
            uow.session.execute(
                update(WorkflowStep)
                .where(
                    _not_held(
                        uow.session,
                        outcome.published,
                        WorkflowStep.status.in_((StepStatus.DISPATCHED, StepStatus.FAILED)),
                    )
                )
                .values(dispatched_at=now),
                execution_options={"synchronize_session": False},
            )
            uow.commit()
    given_up = _charge_refusals(session_factory, outcome.refused, now, policy)
    result.refused += len(outcome.refused)
    result.unpublishable += given_up
    published = set(outcome.published)
    result.republished = len(published)
    result.republished_keys = [m.idempotency_key for step_id, m in lost if step_id in published]
    if outcome.unavailable is not None:
        raise outcome.unavailable
    return result


def _one_by_one(
    is_known: Callable[[str], bool] | None,
) -> Callable[[Sequence[str]], Collection[str]]:
    if is_known is None:
        raise ValueError("sweep needs is_known or known_keys")
    return lambda keys: {key for key in keys if is_known(key)}


def _not_held(session: Session, ids: Sequence[int], *criteria: Any) -> Any:
    """Rows ``ids`` meeting ``criteria``, leaving out on PostgreSQL those another
    transaction holds locked (``FOR UPDATE SKIP LOCKED``, in id order).

    The relay's marking updates must never wait for a row lock: a completing step
    batch holds its step rows while it waits for other rows, and the relay holding
    some of those while waiting for the batch's was a deadlock, broken by the server
    after ``deadlock_timeout`` (1 s) with every worker behind it stalled. A row
    skipped here is being completed (it is not pending any more afterwards) or
    stays as it was, which the sweep handles as for any crash before marking.
    """
    return dialect_of(session).not_locked(WorkflowStep.id, ids, *criteria)


def _due(now: datetime) -> Any:
    return or_(WorkflowStep.next_publish_at.is_(None), WorkflowStep.next_publish_at <= now)


#: what a row's message is built from (:func:`message_for`)
_MESSAGE_COLUMNS = (
    WorkflowStep.id,
    WorkflowStep.workflow_id,
    WorkflowStep.step,
    WorkflowStep.queue,
    WorkflowStep.task,
    WorkflowStep.payload,
    WorkflowStep.priority,
    WorkflowStep.fairness_key,
    WorkflowStep.traceparent,
    WorkflowStep.tracestate,
)


def _load_messages(
    session_factory: SessionFactory, ids: Sequence[int]
) -> tuple[list[tuple[int, StepMessage]], dict[int, str]]:
    """The messages of rows ``ids``; a row that cannot be read is refused alone.

    Returns:
        ``(messages, refused)``: ``(row id, message)`` pairs in id order, and row
        id -> reason for rows whose payload does not decode.
    """
    try:
        with UnitOfWork(session_factory) as uow:
            rows = uow.session.execute(  # plain rows: no ORM objects to build and track
                select(*_MESSAGE_COLUMNS)
                .where(dialect_of(uow.session).among(WorkflowStep.id, ids))
                .order_by(WorkflowStep.id)
            ).all()
            return [(row.id, message_for(row)) for row in rows], {}
    except Exception:  # noqa: BLE001 - some row does not decode: read them one by one
        pass
    messages: list[tuple[int, StepMessage]] = []
    refused: dict[int, str] = {}
    for row_id in ids:
        try:
            with UnitOfWork(session_factory) as uow:
                row = uow.session.get(WorkflowStep, row_id)
                if row is not None:
                    messages.append((row_id, message_for(row)))
        except Exception as exc:  # noqa: BLE001 - this row's payload is unreadable
            refused[row_id] = f"payload cannot be read: {describe(exc)}"
    return messages, refused


def _charge_refusals(
    session_factory: SessionFactory, refused: dict[int, str], now: datetime, policy: PublishPolicy
) -> int:
    """Charge each refused row one attempt; give up the rows out of attempts.

    Returns:
        Rows that became ``unpublishable`` (their workflows are now blocked).
    """
    if not refused:
        return 0

    def once() -> int:
        given_up = 0
        with UnitOfWork(session_factory) as uow:
            rows = uow.session.scalars(
                select(WorkflowStep)
                .options(defer(WorkflowStep.payload))  # it may be what does not decode
                .where(
                    dialect_of(uow.session).among(WorkflowStep.id, refused),
                    WorkflowStep.status.in_(_OPEN),
                )
            ).all()
            for row in rows:
                reason = refused[row.id]
                row.publish_attempts = (row.publish_attempts or 0) + 1
                row.publish_error = reason
                if row.publish_attempts < policy.max_attempts:
                    row.next_publish_at = now + timedelta(
                        seconds=policy.delay(row.publish_attempts)
                    )
                    continue
                given_up += 1
                row.status = StepStatus.UNPUBLISHABLE
                row.next_publish_at = None
                workflow = uow.session.get_one(Workflow, row.workflow_id)
                workflow.status = WorkflowStatus.BLOCKED
                workflow.blocked_step = row.step
                workflow.blocked_reason = f"{BLOCKED_PREFIX}{reason}"
                workflow.updated_at = now
            uow.commit()
        return given_up

    return retry_on_conflict(once)
