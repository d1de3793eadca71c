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

from .codec import RecordDecodeError, decode_record
from .errors import PermanentError, UnknownTaskError
from .job import JobContext, Lease, RawJob
from .policy import should_retry
from .registry import TaskDefinition, TaskRegistry

log = logging.getLogger("reliable_queue.worker")

#: ``middleware(ctx, payload, call_next) -> result``; call ``call_next()`` to go on.
Middleware = Callable[[JobContext, Any, Callable[[], Any]], Any]


@dataclass(frozen=True, slots=True)
class Succeeded:
    """The handler returned normally."""

    lease: Lease


@dataclass(frozen=True, slots=True)
class Retry:
    """The handler raised an ordinary exception and may run again after ``delay`` s."""

    lease: Lease
    delay: float
    error: str
    traceback: str


@dataclass(frozen=True, slots=True)
class Dead:
    """The job goes to the dead-letter queue with ``reason``."""

    lease: Lease
    reason: str
    error: str
    traceback: str


Outcome = Succeeded | Retry | Dead


def fencing_number(token: str) -> int:
    """The monotonic sequence number at the start of a lease token (0 if absent)."""
    head = token.split(":", 1)[0]
    return int(head) if head.isdigit() else 0


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
    lease = job.lease
    try:
        record = decode_record(job.record)
    except RecordDecodeError as exc:
        return Dead(lease, "invalid_payload", str(exc), "")
    try:
        definition = registry.get(record.task)
    except UnknownTaskError as exc:
        return Dead(lease, "unknown_task", str(exc), "")
    try:
        payload = definition.validate(record.payload)
    except ValidationError as exc:
        return Dead(lease, "invalid_payload", f"payload for {record.task!r} is invalid: {exc}", "")
    ctx = JobContext(
        job_id=job.job_id,
        queue=job.queue,
        task=record.task,
        attempt=job.attempt,
        max_attempts=record.max_attempts,
        lease_token=job.token,
        fencing_token=fencing_number(job.token),
        enqueued_at=record.enqueued_at_ms / 1000.0,
        idempotency_key=record.idempotency_key,
    )
    try:
        _call(definition, payload, ctx, middleware)
    except PermanentError as exc:
        return Dead(lease, "error", _describe(exc), tb.format_exc())
    except Exception as exc:  # an ordinary failure: retry per policy
        if should_retry(job.attempt, record.max_attempts):
            delay = definition.retry.backoff(job.attempt, rng)
            return Retry(lease, delay, _describe(exc), tb.format_exc())
        return Dead(lease, "retries_exhausted", _describe(exc), tb.format_exc())
    return Succeeded(lease)


def _call(
    definition: TaskDefinition, payload: Any, ctx: JobContext, middleware: Sequence[Middleware]
) -> Any:
    def at(i: int) -> Any:
        if i == len(middleware):
            return definition.handler(payload, ctx)
        return middleware[i](ctx, payload, lambda: at(i + 1))

    return at(0)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
