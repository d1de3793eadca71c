"""Read-only views of a queue: counters and depths, and everything about one job."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import redis

from . import clock, codec, stored
from .cluster import UNAVAILABLE, snapshot
from .errors import QueueConnectionError
from .replies import text as _text

if TYPE_CHECKING:
    from .queue import Queue

COUNTERS = (
    "enqueued",
    "duplicates",
    "succeeded",
    "retried",
    "dead",
    "reaped",
    "stale_refused",
    "stale_extends",
    "released",
    "redriven",
    "replayed",
    "purged",
    "dlq_dropped",
    "orphaned",
    "orphans_repaired",
    "timed_out",
)


@dataclass(frozen=True)
class QueueStats:
    """Counters (since the queue was created) and current depths of one queue.

    Attributes:
        queue: queue name.
        ready / delayed / active / dead / done: jobs in each structure now
            (``done`` = finished records still inside the retention window).
        counters: every counter in :data:`COUNTERS` (0 when never bumped), plus
            ``dead:<reason>`` entries.
        audit: findings of the last complete audit (gauges, see
            :func:`reliable_queue.audit`): ``orphans`` (left unrepaired), ``doubles``,
            ``no_record``; empty when no audit has run.
        clock: the queue clock's stored fields (ms, not counters; ADR 0022):
            ``last_ms`` (the last queue time written) and ``offset_ms`` (how far the
            queue clock ran ahead of Redis TIME then); empty when never written.
    """

    queue: str
    ready: int
    delayed: int
    active: int
    dead: int
    done: int
    counters: dict[str, int] = field(default_factory=dict)
    audit: dict[str, int] = field(default_factory=dict)
    clock: dict[str, int] = field(default_factory=dict)

    @property
    def orphans(self) -> int:
        """Orphans the last audit found and left unrepaired (0 when none or no audit)."""
        return self.audit.get("orphans", 0)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON output."""
        return {
            "queue": self.queue,
            "ready": self.ready,
            "delayed": self.delayed,
            "active": self.active,
            "dead": self.dead,
            "done": self.done,
            "counters": dict(self.counters),
            "audit": dict(self.audit),
            "clock": dict(self.clock),
        }


def stats(queue: Queue) -> QueueStats:
    """Counters and depths of ``queue`` in one round trip (a MULTI snapshot).

    On Redis Cluster the MULTI runs on the master owning the queue's slot (every
    key of a queue shares it); a view of all queues asks each queue in turn.

    Raises:
        QueueConnectionError: Redis unreachable.
    """
    k = queue.keys

    def fill(pipe: redis.client.Pipeline) -> None:
        pipe.llen(k.key("ready"))
        for kind in ("delayed", "active", "dead", "done"):
            pipe.zcard(k.key(kind))
        pipe.hgetall(k.key("stats"))

    try:
        ready, delayed, active, dead, done, raw = snapshot(queue.client, k.key("ready"), fill)
    except UNAVAILABLE as exc:
        raise QueueConnectionError(str(exc)) from exc
    counters = dict.fromkeys(COUNTERS, 0)
    audit: dict[str, int] = {}
    times: dict[str, int] = {}
    for a, b in raw.items():
        name = _text(a)
        try:
            value = int(b)
        except ValueError:
            continue  # a foreign or hand-edited field: not a counter
        if name.startswith("audit:"):
            audit[name[6:]] = value
        elif name.startswith("clock:"):
            times[name[6:]] = value  # times in ms, never counted
        else:
            counters[name] = value
    return QueueStats(queue.name, ready, delayed, active, dead, done, counters, audit, times)


@dataclass(frozen=True)
class JobExplanation:
    """Everything known about one job.

    Attributes:
        job_id / queue: identity.
        state: ``ready``, ``delayed``, ``active``, ``dead``, ``done``, or ``unknown``
            (a record without a place: only seen mid-way through a manual edit).
        task / payload / max_attempts / idempotency_key / enqueued_at: from the record
            (None when the record is unreadable; ``record_error`` then says why).
        attempts: deliveries so far.
        lease_owner / lease_token / lease_deadline: for an active job (deadline in
            epoch seconds on the queue clock, like every time here).
        next_run_at: for a delayed job (a retry backoff or a scheduled job), epoch s.
        dead_at / dead_reason: for a dead-lettered job.
        finished_at: for a done job.
        last_failure: the stored failure blob (reason, error, traceback, at), or None
            when absent or not a JSON object.
        malformed: stored fields that could not be read as expected (``info``,
            ``attempts``), name -> raw stored text, shown as it is.
        queue_time: the queue clock at this read, epoch seconds: Redis TIME plus
            ``clock_offset`` (ADR 0022); ``lease_deadline - queue_time`` is the time the
            lease has left, whatever the host's clock did.
        clock_offset: seconds the queue clock runs ahead of Redis TIME (0.0 unless the
            host's clock stepped back; it shrinks back to 0 at a bounded rate).
    """

    job_id: str
    queue: str
    state: str
    task: str | None
    payload: Any
    max_attempts: int | None
    idempotency_key: str | None
    enqueued_at: float | None
    attempts: int
    lease_owner: str | None
    lease_token: str | None
    lease_deadline: float | None
    next_run_at: float | None
    dead_at: float | None
    dead_reason: str | None
    finished_at: float | None
    last_failure: dict[str, Any] | None
    record_error: str | None = None
    malformed: dict[str, str] = field(default_factory=dict)
    queue_time: float | None = None
    clock_offset: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON output."""
        return dict(self.__dict__)


def explain(queue: Queue, job_id: str) -> JobExplanation | None:
    """Everything about ``job_id`` in one round trip, or None if Redis has no trace of it.

    Raises:
        QueueConnectionError: Redis unreachable.
    """
    k = queue.keys

    def fill(pipe: redis.client.Pipeline) -> None:
        for kind in ("jobs", "attempts", "leases", "info"):
            pipe.hget(k.key(kind), job_id)
        for kind in ("active", "delayed", "dead", "done"):
            pipe.zscore(k.key(kind), job_id)
        pipe.time()
        pipe.hmget(k.key("stats"), [clock.LAST_FIELD, clock.OFFSET_FIELD])

    try:
        rec, att, lease, info, active, delayed, dead, done, now, fields = snapshot(
            queue.client, k.key("jobs"), fill
        )
    except UNAVAILABLE as exc:
        raise QueueConnectionError(str(exc)) from exc
    if rec is None and dead is None and active is None:
        return None
    state = (
        "active"
        if active is not None
        else "delayed"
        if delayed is not None
        else "dead"
        if dead is not None
        else "done"
        if done is not None
        else "ready"
        if rec is not None
        else "unknown"
    )
    if state == "ready":
        try:
            if queue.client.lpos(k.key("ready"), job_id) is None:
                state = "unknown"
        except redis.ResponseError:  # LPOS needs Redis >= 6.0.6
            pass
        except UNAVAILABLE as exc:
            raise QueueConnectionError(str(exc)) from exc
    task = payload = max_attempts = key = enqueued = error = None
    if rec is not None:
        try:
            r = codec.decode_record(rec)
            task, payload, max_attempts, key = r.task, r.payload, r.max_attempts, r.idempotency_key
            enqueued = r.enqueued_at_ms / 1000.0
        except codec.RecordDecodeError as exc:
            error = str(exc)
    failure, bad_info = stored.failure_info(info)
    count, bad_attempts = stored.attempts(att)
    malformed = {name: raw for name, raw in (("info", bad_info), ("attempts", bad_attempts)) if raw}
    token = _text(lease) if lease is not None else None
    queue_ms, offset_ms = clock.queue_time_ms(
        int(now[0]) * 1000 + int(now[1]) // 1000, *(clock.field(f) for f in fields)
    )
    return JobExplanation(
        job_id=job_id,
        queue=queue.name,
        state=state,
        task=task,
        payload=payload,
        max_attempts=max_attempts,
        idempotency_key=key,
        enqueued_at=enqueued,
        attempts=count,
        lease_owner=token.split(":", 1)[1] if token and ":" in token else None,
        lease_token=token,
        lease_deadline=active / 1000.0 if active is not None else None,
        next_run_at=delayed / 1000.0 if delayed is not None else None,
        dead_at=dead / 1000.0 if dead is not None else None,
        dead_reason=(failure or {}).get("reason") if dead is not None else None,
        finished_at=done / 1000.0 if done is not None else None,
        last_failure=failure,
        record_error=error,
        malformed=malformed,
        queue_time=queue_ms / 1000.0,
        clock_offset=offset_ms / 1000.0,
    )
