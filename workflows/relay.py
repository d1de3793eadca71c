"""Outbox relay: publish step rows to the queue and mark them dispatched.

Publishing happens before marking, so a crash in between publishes the step
again later; the queue's idempotency key ``<workflow id>:<step>`` absorbs the
duplicate. Marking only touches rows still pending, so a step that a fast
worker already finished keeps its state (only its dispatch time is recorded).

Rows are published independently: a batch the queue refuses is split until
the refused rows stand alone (``workflows.isolation``), and only those rows are
charged an attempt and held back by a backoff; after ``max_attempts`` refusals
a row becomes ``unpublishable`` and its workflow blocked, with the reason. A
queue that cannot be reached charges no row: everything stays pending.

Steps a finished step released are the exception to publish-then-mark: the
commit that releases them marks them dispatched, and its worker publishes
them right after (:func:`publish_released`, docs/adr/0017); a crash in
between is caught by the sweep's check of dispatched steps.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Row, Select, case, func, or_, select, update
from sqlalchemy.orm import Session, defer

from workflows.columns import utcnow
from workflows.conflicts import retry_on_conflict
from workflows.dependencies import Released
from workflows.isolation import IsolatedPublish, describe, publish_isolated
from workflows.messages import Publisher, StepMessage
from workflows.models import StepStatus, Workflow, WorkflowStatus, WorkflowStep, idempotency_key
from workflows.sql import dialect_of
from workflows.uow import SessionFactory, UnitOfWork

__all__ = [
    "PublishPolicy",
    "Publisher",
    "StepMessage",
    "SweepResult",
    "message_for",
    "publish_pending",
    "publish_released",
    "publish_steps",
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
        published: pending steps published (never published before, or a
            crash came between commit and publish).
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
    ``workflow_id``, ``step``, ``queue``, ``task`` and ``payload``)."""
    return StepMessage(
        queue=step.queue,
        task=step.task,
        payload=dict(step.payload),
        idempotency_key=idempotency_key(step.workflow_id, step.step),
    )


def publish_steps(
    session_factory: SessionFactory,
    publisher: Publisher,
    step_ids: Sequence[int],
    *,
    clock: Callable[[], datetime] = utcnow,
    policy: PublishPolicy | None = None,
    known: Mapping[int, StepMessage] | None = None,
) -> int:
    """Publish the given step rows that are still pending; mark them dispatched.

    Call right after the transaction that wrote the steps has committed. Rows
    the queue refuses are charged an attempt and left to the sweep.

    Args:
        session_factory: makes the sessions of the units of work.
        publisher: the queue adapter.
        step_ids: ids returned by ``workflows.outbox.add_workflows``.
        clock: current time (timezone-aware).
        policy: attempts and backoff of refused rows (default :class:`PublishPolicy`).
        known: row id -> message for rows whose message the caller already
            holds (``workflows.outbox.initial_messages``); those rows are not
            read back. Which rows are still pending is read either way.

    Returns:
        Number of steps published.

    Raises:
        PublisherUnavailable: the queue cannot be reached; the rows not yet
            published stay pending for the sweep.
    """
    published = 0
    for start in range(0, len(step_ids), _CHUNK):
        chunk = step_ids[start : start + _CHUNK]
        published += _publish_where(
            session_factory,
            publisher,
            lambda s, now, chunk=chunk: _pending(
                s, now, dialect_of(s).among(WorkflowStep.id, chunk), writer=True
            ),
            clock,
            policy or PublishPolicy(),
            known,
        ).published
    return published


def publish_released(
    session_factory: SessionFactory,
    publisher: Publisher,
    released: Sequence[Released],
    *,
    clock: Callable[[], datetime] = utcnow,
    policy: PublishPolicy | None = None,
) -> int:
    """Publish the step rows the caller's own commit just released.

    The worker's fast path after a finished step (``StepResult.released_steps``):
    ``workflows.dependencies.release_waiting`` marked the rows dispatched in
    that commit, with their message columns, so a publish that goes through
    costs no database work at all: nothing is read back and no transaction
    marks them. Call it right after that commit. No other writer publishes
    these rows: the sweep's pending pass never sees them, and its check of
    dispatched steps only takes a row ``republish_after`` seconds after its
    dispatch, when the queue does not hold it (a crash before this publish).

    Rows the queue refuses (or whose payload does not decode) go back to
    ``pending`` and are charged an attempt, as in :func:`publish_steps`; when
    the queue cannot be reached, the rows not published go back to ``pending``
    uncharged, for the sweep (docs/adr/0017).

    Args:
        session_factory: makes the sessions of the units of work (used only
            when some row is refused or the queue is unreachable).
        publisher: the queue adapter.
        released: the rows (``workflows.dependencies.release_waiting``).
        clock: current time (timezone-aware).
        policy: attempts and backoff of refused rows (default :class:`PublishPolicy`).

    Returns:
        Number of steps published.

    Raises:
        PublisherUnavailable: the queue cannot be reached (after the rows not
            published were put back to ``pending``).
        SQLAlchemyError: putting a refused or unpublished row back failed; it
            stays dispatched, and the sweep re-publishes it after ``republish_after``.
    """
    policy = policy or PublishPolicy()
    published = 0
    for start in range(0, len(released), _CHUNK):
        steps: list[tuple[int, StepMessage]] = []
        unreadable: dict[int, str] = {}
        for row in sorted(released[start : start + _CHUNK]):
            try:
                steps.append((row.row_id, _released_message(row)))
            except Exception as exc:  # noqa: BLE001 - this row's payload is unreadable
                unreadable[row.row_id] = f"payload cannot be read: {describe(exc)}"
        outcome = publish_isolated(publisher, steps) if steps else IsolatedPublish()
        outcome.refused.update(unreadable)
        published += len(outcome.published)
        if outcome.unavailable is None:
            back = list(outcome.refused)
        else:  # this chunk's rows not published, and every later chunk's
            sent = set(outcome.published)
            back = [r.row_id for r in released[start:] if r.row_id not in sent]
        if back:
            _undispatch(session_factory, back)
        _charge_refusals(session_factory, outcome.refused, clock(), policy)
        if outcome.unavailable is not None:
            raise outcome.unavailable
    return published


def _undispatch(session_factory: SessionFactory, ids: Sequence[int]) -> None:
    """Put released rows that were not published back to ``pending`` (no dispatch time)."""
    with UnitOfWork(session_factory) as uow:
        uow.session.execute(
            update(WorkflowStep)
            .where(_not_held(uow.session, ids, WorkflowStep.status == StepStatus.DISPATCHED))
            .values(status=StepStatus.PENDING, dispatched_at=None),
            execution_options={"synchronize_session": False},
        )
        uow.commit()


def _released_message(row: Released) -> StepMessage:
    """The queue message of a released row; raises when its payload is not a JSON object."""
    payload = json.loads(row.payload)
    if not isinstance(payload, dict):
        raise TypeError(f"payload is a JSON {type(payload).__name__}, not an object")
    return StepMessage(
        queue=row.queue,
        task=row.task,
        payload=payload,
        idempotency_key=idempotency_key(row.workflow_id, row.step),
    )


def publish_pending(
    session_factory: SessionFactory,
    publisher: Publisher,
    *,
    limit: int = 1000,
    clock: Callable[[], datetime] = utcnow,
    policy: PublishPolicy | None = None,
) -> int:
    """Publish up to ``limit`` pending step rows whose backoff has passed, oldest first.

    Returns:
        Number of steps published.

    Raises:
        PublisherUnavailable: the queue cannot be reached.
    """
    return _publish_where(
        session_factory,
        publisher,
        lambda s, now: _pending(s, now, limit=limit),
        clock,
        policy or PublishPolicy(),
    ).published


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
    settle_seconds: float = 0.0,
) -> SweepResult:
    """One periodic relay pass: publish pending steps, re-publish lost ones.

    With ``settle_seconds`` above 0, a pending row the sweep sees for the first
    time is left to the process that wrote it (placement, or the worker that
    released it publishes it right after its commit): the sweep only notes it
    (``next_publish_at`` = now + ``settle_seconds``) and publishes it on a later
    pass if it is still pending then. Publishing a fresh row at once races its
    writer: when the writer's job has already finished, the sweep's copy runs
    the step a second time (absorbed, but paid for; under load a tenth of the
    step runs). The writer's own publish (:func:`publish_steps`) is not held
    back by the note.

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
        settle_seconds: how long a fresh pending row is left to its writer, seconds
            (0: publish it at once).

    Returns:
        A ``SweepResult`` with the counts.

    Raises:
        ValueError: neither ``is_known`` nor ``known_keys`` given.
        PublisherUnavailable: the queue cannot be reached (published rows are marked first).
        Exception: whatever ``is_known`` / ``known_keys`` raises.
    """
    held_by_queue = known_keys or _one_by_one(is_known)
    policy = policy or PublishPolicy()
    result = SweepResult()
    noted_only: tuple[Any, ...] = ()
    if settle_seconds > 0:
        _note_fresh(session_factory, clock(), settle_seconds, limit)
        # A row committed after the noting pass has no note yet: it is its
        # writer's for now (the next pass notes it), not due.
        noted_only = (WorkflowStep.next_publish_at.is_not(None),)
    first = _publish_where(
        session_factory,
        publisher,
        lambda s, now: _pending(s, now, *noted_only, limit=limit),
        clock,
        policy,
    )
    result.published = first.published
    result.refused, result.unpublishable = first.refused, first.unpublishable
    now = clock()
    cutoff = now - timedelta(seconds=republish_after)
    # A writer that published a row and died before marking it leaves no dispatch
    # time; a worker that ran it since and failed made it ``failed``, which the
    # pending pass no longer takes: its attempt's start time dates it instead.
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


@dataclass
class _Published:
    published: int = 0
    refused: int = 0
    unpublishable: int = 0


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


def _note_fresh(
    session_factory: SessionFactory, now: datetime, settle_seconds: float, limit: int
) -> None:
    """Give fresh pending rows (never refused, never noted) ``settle_seconds`` to their writer."""
    fresh = (
        select(WorkflowStep.id)
        .where(
            WorkflowStep.status == StepStatus.PENDING,
            WorkflowStep.next_publish_at.is_(None),
            WorkflowStep.publish_attempts == 0,
        )
        .order_by(WorkflowStep.id)
        .limit(limit)
    )
    with UnitOfWork(session_factory) as uow:
        ids = list(uow.session.scalars(fresh))
        if not ids:
            return
        uow.session.execute(
            update(WorkflowStep)
            .where(
                _not_held(
                    uow.session,
                    ids,
                    WorkflowStep.status == StepStatus.PENDING,
                    WorkflowStep.next_publish_at.is_(None),
                )
            )
            .values(next_publish_at=now + timedelta(seconds=settle_seconds)),
            execution_options={"synchronize_session": False},
        )
        uow.commit()


def _pending(
    session: Session,
    now: datetime,
    *criteria: Any,
    limit: int | None = None,
    writer: bool = False,
) -> Select[tuple[int]]:
    """The ids of pending rows due for publishing, oldest first; ``writer``: also those
    only noted by a sweep (never refused), which their writer publishes at once."""
    due = or_(_due(now), WorkflowStep.publish_attempts == 0) if writer else _due(now)
    query = (
        select(WorkflowStep.id)
        .where(WorkflowStep.status == StepStatus.PENDING, due, *criteria)
        .order_by(WorkflowStep.id)
    )
    if limit is not None:
        query = query.limit(limit)
    return query


#: what a row's message is built from (:func:`message_for`)
_MESSAGE_COLUMNS = (
    WorkflowStep.id,
    WorkflowStep.workflow_id,
    WorkflowStep.step,
    WorkflowStep.queue,
    WorkflowStep.task,
    WorkflowStep.payload,
)


def _read_pending(
    session_factory: SessionFactory,
    pending: Callable[[Session, datetime], Select[tuple[int]]],
    now: datetime,
    known: Mapping[int, StepMessage],
) -> tuple[list[tuple[int, StepMessage]], dict[int, str]]:
    """The pending rows to publish with their messages, in id order.

    Rows whose message the caller holds (``known``) are not read back. Otherwise
    the rows and their messages come in one read; when some payload does not
    decode, the ids are read first and the rows then one by one, so only the bad
    rows are refused.

    Returns:
        ``(messages, refused)`` as :func:`_load_messages`.
    """
    if not known:
        try:
            with UnitOfWork(session_factory) as uow:
                rows = uow.session.execute(  # plain rows: no ORM objects to build and track
                    pending(uow.session, now).with_only_columns(*_MESSAGE_COLUMNS)
                ).all()
                return [(row.id, message_for(row)) for row in rows], {}
        except Exception:  # noqa: BLE001 - some row does not decode: isolate it below
            pass
    with UnitOfWork(session_factory) as uow:
        ids = list(uow.session.scalars(pending(uow.session, now)))
    unknown = [row_id for row_id in ids if row_id not in known]
    steps, unreadable = _load_messages(session_factory, unknown) if unknown else ([], {})
    if len(unknown) < len(ids):
        steps = sorted(
            [*steps, *((row_id, known[row_id]) for row_id in ids if row_id in known)],
            key=lambda item: item[0],
        )
    return steps, unreadable


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


def _publish_where(
    session_factory: SessionFactory,
    publisher: Publisher,
    pending: Callable[[Session, datetime], Select[tuple[int]]],
    clock: Callable[[], datetime],
    policy: PublishPolicy,
    known: Mapping[int, StepMessage] | None = None,
) -> _Published:
    now = clock()
    steps, unreadable = _read_pending(session_factory, pending, now, known or {})
    return _publish_and_mark(session_factory, publisher, steps, unreadable, now, clock, policy)


def _publish_and_mark(
    session_factory: SessionFactory,
    publisher: Publisher,
    steps: list[tuple[int, StepMessage]],
    unreadable: dict[int, str],
    now: datetime,
    clock: Callable[[], datetime],
    policy: PublishPolicy,
) -> _Published:
    """Publish ``steps``, mark the published rows dispatched, charge the refused
    and ``unreadable`` rows an attempt each; raise an unreachable queue at the end."""
    if not steps and not unreadable:
        return _Published()
    outcome = publish_isolated(publisher, steps)
    outcome.refused.update(unreadable)
    _mark_dispatched(session_factory, outcome, clock)
    given_up = _charge_refusals(session_factory, outcome.refused, now, policy)
    if outcome.unavailable is not None:
        raise outcome.unavailable
    return _Published(len(outcome.published), len(outcome.refused), given_up)


def _mark_dispatched(
    session_factory: SessionFactory, outcome: IsolatedPublish, clock: Callable[[], datetime]
) -> None:
    if not outcome.published:
        return
    with UnitOfWork(session_factory) as uow:
        uow.session.execute(
            update(WorkflowStep)
            .where(_not_held(uow.session, outcome.published, WorkflowStep.dispatched_at.is_(None)))
            .values(
                # A worker may have moved the row on already: keep its state.
                status=case(
                    (WorkflowStep.status == StepStatus.PENDING, StepStatus.DISPATCHED),
                    else_=WorkflowStep.status,
                ),
                dispatched_at=clock(),
                next_publish_at=None,
            ),
            execution_options={"synchronize_session": False},
        )
        uow.commit()


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
