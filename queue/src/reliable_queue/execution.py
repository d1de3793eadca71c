"""Run one fetched job through its handler and decide its outcome (no Redis here).

Decoding, task lookup and payload validation failures are outcomes, not
exceptions: a bad job goes to the dead-letter queue with its reason and the
worker loop carries on.
"""

from __future__ import annotations

import logging
import random
import traceback as tb
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from .attempts import ALWAYS, Guard
from .codec import RecordDecodeError, decode_fields
from .errors import AttemptLost, IsolatedError, PermanentError, Throttled, UnknownTaskError
from .job import JobContext, Lease, RawJob, frozen_fast_init, make_context, slots_factory
from .middleware import call_batch
from .policy import should_retry
from .registry import TaskDefinition, TaskRegistry

log = logging.getLogger("reliable_queue.worker")

#: ``middleware(ctx, payload, call_next) -> result``; call ``call_next()`` to go on.
Middleware = Callable[[JobContext, Any, Callable[[], Any]], Any]


@frozen_fast_init
@dataclass(frozen=True, slots=True)
class Succeeded:
    """The handler returned normally."""

    lease: Lease


@frozen_fast_init
@dataclass(frozen=True, slots=True)
class Retry:
    """The handler raised an ordinary exception and may run again after ``delay`` s."""

    lease: Lease
    delay: float
    error: str
    traceback: str


@frozen_fast_init
@dataclass(frozen=True, slots=True)
class Dead:
    """The job goes to the dead-letter queue with ``reason``."""

    lease: Lease
    reason: str
    error: str
    traceback: str


@frozen_fast_init
@dataclass(frozen=True, slots=True)
class Throttle:
    """The handler raised :class:`~reliable_queue.errors.Throttled`: hold the job back
    ``delay`` s, then first in its band, uncharged; past the attempt's throttle budget
    it is ``fallback`` instead, the ordinary failure's outcome (ADR 0034)."""

    lease: Lease
    delay: float
    error: str
    fallback: Retry | Dead


Outcome = Succeeded | Retry | Dead | Throttle
_succeeded = slots_factory(Succeeded)  # per job: made fast


def fencing_number(token: str) -> int:
    """The monotonic sequence number at the start of a lease token (0 if absent)."""
    head = token.partition(":")[0]
    return int(head) if head.isdigit() else 0


@dataclass(slots=True)
class Prepared:
    """A decoded, validated job ready for its handler (the worker's own per-job record,
    built once per delivery and never changed; not frozen, which makes it cheaper to
    build)."""

    job: RawJob
    definition: TaskDefinition
    payload: Any
    ctx: JobContext
    max_attempts: int


def prepare(job: RawJob, registry: TaskRegistry, guard: Guard = ALWAYS) -> Prepared | Dead:
    """Decode the record, find the task and validate the payload.

    ``guard`` becomes the context's attempt guard (``JobContext.hold_lease``); the
    worker passes each delivery's own, anything else gets one that always allows.

    Returns:
        :class:`Prepared`, or a :class:`Dead` outcome (``invalid_record`` for a
        record that is not UTF-8, ``invalid_payload`` for one that is not a valid
        record or whose payload does not validate, ``unknown_task``) — a bad job never
        raises out of here and never affects its batch-mates.
    """
    try:
        task, raw_payload, enqueued_at_ms, max_attempts, key = decode_fields(job.record)
    except RecordDecodeError as exc:
        return Dead(job.lease, _undecodable_reason(job.record), str(exc), "")
    try:
        definition = registry.get(task)
    except UnknownTaskError as exc:
        return Dead(job.lease, "unknown_task", str(exc), "")
    try:
        payload = definition.validate(raw_payload)
    except ValidationError as exc:
        return Dead(job.lease, "invalid_payload", f"payload for {task!r} is invalid: {exc}", "")
    token = job.token
    ctx = make_context(
        job.job_id,
        job.queue,
        task,
        job.attempt,
        max_attempts,
        token,
        fencing_number(token),
        enqueued_at_ms / 1000.0,
        key,
        guard,
    )
    return Prepared(job, definition, payload, ctx, max_attempts)


def _undecodable_reason(raw: bytes | str) -> str:
    """``invalid_record`` for bytes that are not UTF-8 at all, else ``invalid_payload``."""
    if isinstance(raw, bytes):
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            return "invalid_record"
    return "invalid_payload"


def outcome_of(
    item: Prepared, error: BaseException | None, trace: str, rng: random.Random | None
) -> Outcome:
    """The outcome of a run that returned (``error`` None) or raised ``error``.

    An :class:`~reliable_queue.errors.AttemptLost` is a retry at any attempt count:
    the attempt no longer held its lease, so its failure is not the job's (its nack
    is refused when the job was handed out again).
    """
    lease = item.job.lease
    if error is None:
        return _succeeded(lease)
    if isinstance(error, IsolatedError):  # raised in a child: its own traceback tells
        trace = error.traceback_text or trace
    if isinstance(error, PermanentError):
        return Dead(lease, "error", _describe(error), trace)
    if isinstance(error, Throttled):  # uncharged within its budget, else as below
        fallback: Retry | Dead = Dead(lease, "retries_exhausted", _describe(error), trace)
        if should_retry(item.job.attempt, item.max_attempts):
            delay = item.definition.retry.backoff(item.job.attempt, rng)
            fallback = Retry(lease, delay, _describe(error), trace)
        return Throttle(lease, error.delay_seconds, _describe(error), fallback)
    if isinstance(error, AttemptLost):  # not this attempt's to decide: never dead-lettered
        return Retry(
            lease, item.definition.retry.backoff(item.job.attempt, rng), _describe(error), trace
        )
    if should_retry(item.job.attempt, item.max_attempts):
        return Retry(
            lease, item.definition.retry.backoff(item.job.attempt, rng), _describe(error), trace
        )
    return Dead(lease, "retries_exhausted", _describe(error), trace)


def execute(
    job: RawJob,
    registry: TaskRegistry,
    *,
    middleware: Sequence[Middleware] = (),
    rng: random.Random | None = None,
) -> Outcome:
    """Decode, validate and run ``job``; never raises for a handler's exception.

    Args:
        job: the fetched job.
        registry: task definitions.
        middleware: wrappers around the handler call, outermost first.
        rng: jitter source for the retry backoff.

    Returns:
        :class:`Succeeded`, :class:`Retry` or :class:`Dead`.
        ``BaseException`` subclasses that are not ``Exception`` (SystemExit,
        KeyboardInterrupt) propagate.
    """
    item = prepare(job, registry)
    if isinstance(item, Dead):
        return item
    if item.definition.batch:
        return run_batch([item], rng, middleware=middleware)[0]
    return run_prepared(item, middleware=middleware, rng=rng)


def run_prepared(
    item: Prepared, *, middleware: Sequence[Middleware] = (), rng: random.Random | None = None
) -> Outcome:
    """Run one prepared job of a single-job task through its middleware and handler."""
    try:
        _call(item.definition.handler, item.payload, item.ctx, middleware)  # type: ignore[arg-type]
    except Exception as exc:  # an ordinary failure: retry per policy (or DLQ if permanent)
        return outcome_of(item, exc, tb.format_exc(), rng)
    return _succeeded(item.job.lease)


def run_batch(
    items: Sequence[Prepared],
    rng: random.Random | None = None,
    *,
    middleware: Sequence[Middleware] = (),
) -> list[Outcome]:
    """Run prepared jobs of ONE batch task through a single handler call.

    The handler returns one entry per item (None or the item's exception). If the
    handler itself raises, every item gets that exception (and is retried per policy).
    ``middleware`` (:class:`~reliable_queue.middleware.BatchMiddleware`, outermost
    first) wraps the call and sees every job: one it fails is left out of the call.

    Raises:
        ValueError: the items are not all of one batch task.
    """
    if not items:
        return []
    definition = items[0].definition
    if not definition.batch or any(i.definition is not definition for i in items):
        raise ValueError("run_batch takes jobs of one batch task")
    return run_batch_call(definition.handler, items, rng, middleware)  # type: ignore[arg-type]


def run_batch_call(
    handler: Callable[[list[tuple[Any, JobContext]]], Sequence[BaseException | None]],
    items: Sequence[Prepared],
    rng: random.Random | None,
    middleware: Sequence[Middleware],
) -> list[Outcome]:
    """:func:`run_batch` with ``handler`` in place of the task's own (the call of an
    isolated task: it runs the batch in a child, ``reliable_queue.isolation``)."""
    try:
        results = call_batch(handler, [(i.payload, i.ctx) for i in items], middleware)
        trace = ""
        if len(results) != len(items):
            raise RuntimeError(
                f"batch handler returned {len(results)} results for {len(items)} jobs"
            )
    except Exception as exc:
        results, trace = [exc] * len(items), tb.format_exc()
    return [
        outcome_of(item, err, trace or _trace_of(err), rng)
        for item, err in zip(items, results, strict=True)
    ]


def _trace_of(error: BaseException | None) -> str:
    if error is None or error.__traceback__ is None:
        return ""
    return "".join(tb.format_exception(error))


def run_single_call(
    handler: Callable[[Any, JobContext], Any],
    item: Prepared,
    rng: random.Random | None,
    middleware: Sequence[Middleware],
) -> Outcome:
    """:func:`run_prepared` with ``handler`` in place of the task's own (see
    :func:`run_batch_call`)."""
    try:
        _call(handler, item.payload, item.ctx, middleware)
    except Exception as exc:
        return outcome_of(item, exc, tb.format_exc(), rng)
    return _succeeded(item.job.lease)


def _call(
    handler: Callable[[Any, JobContext], Any],
    payload: Any,
    ctx: JobContext,
    middleware: Sequence[Middleware],
) -> Any:
    if not middleware:
        return handler(payload, ctx)

    def at(i: int) -> Any:
        if i == len(middleware):
            return handler(payload, ctx)
        return middleware[i](ctx, payload, lambda: at(i + 1))

    return at(0)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, IsolatedError):  # the child's exception, by its own class name
        return f"{exc.type_name}: {exc.message}"
    return f"{type(exc).__name__}: {exc}"
