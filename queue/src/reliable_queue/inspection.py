"""Read-only views of a queue: counters and depths, and everything about one job."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import redis

from . import clock, codec, stored
from .audit_flow import BAND
from .cluster import UNAVAILABLE, snapshot
from .codec import check_text
from .errors import QueueConnectionError, QueueDataError
from .key_types import KEY_TYPES, checked
from .limits import MAX_PRIORITY, MIN_PRIORITY
from .pausing import PauseState, parse_state
from .places import key_is_trusted
from .priorities import DEFAULT_PRIORITY, parse_flow_value, parse_key_cap
from .rate_limits import RateLimit
from .rate_limits import parse_state as parse_limit_state
from .raw_ids import id_member, id_text

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
    "rate_limited",
    "throttled",
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
            (``done`` = finished records still inside the retention window; ``ready``
            counts both waiting structures: the plain list and the jobs with a
            priority or a fairness key, ADR 0033).
        counters: every counter in :data:`COUNTERS` (0 when never bumped), plus
            ``dead:<reason>`` entries.
        audit: findings of the last complete audit (gauges, see
            :func:`reliable_queue.audit`): ``orphans`` (left unrepaired), ``doubles``,
            ``no_record``; empty when no audit has run.
        clock: the queue clock's stored fields (ms, not counters; ADR 0022):
            ``last_ms`` (the last queue time written) and ``offset_ms`` (how far the
            queue clock ran ahead of Redis TIME then); empty when never written.
        corrupt: structures whose key holds a value of the wrong type, kind -> a note
            naming the key and both types (their depth is then shown as 0); empty
            when every key is sound.
        paused: who paused the queue, why and since when (ADR 0031); None when it
            is not paused (or its key holds another type: then ``corrupt`` says so).
        rate_limit: the queue's rate limit (ADR 0032); None when it has none (or its
            key holds another type: then ``corrupt`` says so).
        key_cap: the per-key cap (ADR 0033); None when none is set (or it does not read).
        prioritized: of ``ready``, the jobs with a priority or a fairness key (the
            waiting sorted set).
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
    corrupt: dict[str, str] = field(default_factory=dict)
    paused: PauseState | None = None
    rate_limit: RateLimit | None = None
    key_cap: int | None = None
    prioritized: int = 0

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
            "corrupt": dict(self.corrupt),
            "paused": self.paused.as_dict() if self.paused else None,
            "rate_limit": self.rate_limit.as_dict() if self.rate_limit else None,
            "key_cap": self.key_cap,
            "prioritized": self.prioritized,
        }


def stats(queue: Queue) -> QueueStats:
    """Counters, depths and pause state of ``queue`` in one round trip (a MULTI snapshot).

    On Redis Cluster the MULTI runs on the master owning the queue's slot (every
    key of a queue shares it); a view of all queues asks each queue in turn. A key
    of the wrong type is reported in ``corrupt`` (its depth 0), a stats field that
    is not an integer counter is left out: the rest is still read.

    Raises:
        QueueConnectionError: Redis unreachable.
    """
    k = queue.keys
    kinds = (
        "ready",
        "delayed",
        "active",
        "dead",
        "done",
        "stats",
        "paused",
        "limit",
        "waiting",
        "keycap",
        "flow",
        "tags",
        "running",
    )

    def fill(pipe: redis.client.Pipeline) -> None:
        pipe.llen(k.key("ready"))
        for kind in ("delayed", "active", "dead", "done"):
            pipe.zcard(k.key(kind))
        pipe.hgetall(k.key("stats"))
        pipe.hgetall(k.paused)
        pipe.hgetall(k.limit)
        pipe.zcard(k.key("waiting"))
        pipe.get(k.key("keycap"))
        pipe.hlen(k.key("flow"))  # (read for its type only)
        pipe.hlen(k.key("tags"))
        pipe.zcard(k.key("running"))

    try:
        replies = snapshot(queue.client, k.key("ready"), fill, raise_on_error=False)
    except UNAVAILABLE as exc:
        raise QueueConnectionError(str(exc)) from exc
    corrupt: dict[str, str] = {}
    values: dict[str, Any] = {}
    for kind, reply in zip(kinds, replies, strict=True):
        value, problem = checked(queue.client, reply, k.key(kind), KEY_TYPES[kind])
        if problem:
            corrupt[kind] = problem
        values[kind] = value
    counters = dict.fromkeys(COUNTERS, 0)
    audit: dict[str, int] = {}
    times: dict[str, int] = {}
    for a, b in (values["stats"] or {}).items():
        try:
            name, value = a.decode("utf-8") if isinstance(a, bytes) else str(a), int(b)
        except ValueError:  # a foreign or hand-edited field (not UTF-8, not a number)
            continue
        if name.startswith("flow:"):
            continue  # flow-control state (ADR 0033), not a counter
        if name.startswith("audit:"):
            audit[name[6:]] = value
        elif name.startswith("clock:"):
            times[name[6:]] = value  # times in ms, never counted
        else:
            counters[name] = value
    depth = {kind: int(values[kind] or 0) for kind in kinds[:5]}
    prioritized = int(values["waiting"] or 0)
    depth["ready"] += prioritized
    return QueueStats(
        queue.name,
        key_cap=parse_key_cap(values["keycap"]),
        prioritized=prioritized,
        counters=counters,
        audit=audit,
        clock=times,
        corrupt=corrupt,
        paused=parse_state(values["paused"]),
        rate_limit=parse_limit_state(values["limit"]),
        **depth,
    )


WAITING_PER_BAND = 20
"""Members of each priority band of the ``waiting`` set read by
:func:`oldest_waiting_seconds` (the first by their fair-queueing tag)."""


def oldest_waiting_seconds(queue: Queue) -> float:
    """Seconds the longest-waiting job of ``queue`` has waited to start, without a scan.

    Reads the heads of the structures that hold waiting jobs: the job next in line
    (the ``ready`` list's tail, which the next fetch pops) and, in the ``waiting`` set of
    jobs with a priority or a fairness key (ADR 0033), the first
    :data:`WAITING_PER_BAND` members of each band 0..9 by score (the next ones that band
    serves) count from their enqueue time (their record's ``enqueued_at``, on the
    producer's wall clock, compared with ``queue.clock``); the first due delayed job a
    fetch has not promoted yet counts from its due time (on the queue clock, ADR 0022).
    Bound per call: one transaction of 13 reads (10 ``ZRANGEBYSCORE ... LIMIT 0 20``),
    then one ``HMGET`` of at most 201 records. Within a band, customers take turns, so
    an older job of a customer further back in its band's turn than the first 20 is
    not seen: the figure is then a lower bound. A job back in line after a retry or a
    reap counts from its first enqueue, so the figure can overstate a wait while such a
    job is next. A new waiting structure adds its head here.

    Args:
        queue: the queue.

    Returns:
        Seconds (>= 0.0); 0.0 when no job waits, or when the heads cannot be read (a
        key of the wrong type, a record that does not decode).

    Raises:
        QueueConnectionError: Redis unreachable.
    """
    k = queue.keys

    def fill(pipe: redis.client.Pipeline) -> None:
        pipe.lindex(k.key("ready"), -1)
        pipe.zrange(k.key("delayed"), 0, 0, withscores=True)
        pipe.time()
        pipe.hmget(k.key("stats"), [clock.LAST_FIELD, clock.OFFSET_FIELD])
        for band in range(MIN_PRIORITY, MAX_PRIORITY + 1):
            low, high = band * BAND, (band + 1) * BAND
            pipe.zrangebyscore(k.key("waiting"), low, f"({high}", start=0, num=WAITING_PER_BAND)

    try:
        head, due, now, fields, *bands = snapshot(
            queue.client, k.key("ready"), fill, raise_on_error=False
        )
        ids = [head] if isinstance(head, bytes | str) else []
        ids += [m for members in bands if isinstance(members, list) for m in members]
        records: list[Any] = queue.client.hmget(k.key("jobs"), ids) if ids else []  # type: ignore[assignment]
    except UNAVAILABLE as exc:
        raise QueueConnectionError(str(exc)) from exc
    except redis.ResponseError:  # the jobs hash holds another type: nothing readable
        records = []
    ages = [0.0]
    if isinstance(due, list) and due and not isinstance(now, Exception):
        if isinstance(fields, Exception):  # stats of another type: no offset to read
            fields = [None, None]
        queue_ms, _ = clock.queue_time_ms(
            int(now[0]) * 1000 + int(now[1]) // 1000, *(clock.field(f) for f in fields)
        )
        ages.append((queue_ms - float(due[0][1])) / 1000.0)
    wall = queue.clock()
    for record in records:
        if record is None:
            continue
        try:
            ages.append(wall - codec.decode_record(record).enqueued_at_ms / 1000.0)
        except codec.RecordDecodeError:
            pass
    return max(ages)


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
        priority: 0..9, lower runs sooner (ADR 0033); the default (5) for a job
            enqueued without one.
        fairness_key: the key it was enqueued with, or None.
        dead_at / dead_reason: for a dead-lettered job.
        finished_at: for a done job.
        last_failure: the stored failure blob (reason, error, traceback, at), or None
            when absent or not a JSON object.
        malformed: what could not be read as expected, name -> text shown as it is:
            a stored field (``info``, ``attempts``, ``lease``) -> its raw text, or a
            queue structure whose key holds the wrong type (``jobs``, ``ready``, ...)
            -> a note naming the key.
        id_unreadable: the stored id is not UTF-8 text; ``job_id`` is its ``hex:``
            form (:mod:`reliable_queue.raw_ids`), which every id argument accepts.
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
    id_unreadable: bool = False
    priority: int = DEFAULT_PRIORITY
    fairness_key: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON output."""
        return dict(self.__dict__)


def explain(queue: Queue, job_id: str) -> JobExplanation | None:
    """Everything about ``job_id`` in one round trip, or None if Redis has no trace of it
    (and no key it reads is unreadable: then the notes are returned, state ``unknown``).

    Args:
        queue: the job's queue.
        job_id: the id as stored, or the ``hex:`` form of one that is not UTF-8.

    A structure whose key holds the wrong type counts as not holding the job and is
    named in ``malformed``; a stored value that does not read as expected is shown raw.

    Raises:
        InvalidTextError: ``job_id`` holds a lone surrogate.
        QueueConnectionError: Redis unreachable.
    """
    k = queue.keys
    member = id_member(job_id)
    hashes = ("jobs", "attempts", "leases", "info", "flow")
    sets = ("active", "delayed", "dead", "done", "waiting")

    def fill(pipe: redis.client.Pipeline) -> None:
        for kind in hashes:
            pipe.hget(k.key(kind), member)
        for kind in sets:
            pipe.zscore(k.key(kind), member)
        pipe.time()
        pipe.hmget(k.key("stats"), [clock.LAST_FIELD, clock.OFFSET_FIELD])

    try:
        replies = snapshot(queue.client, k.key("jobs"), fill, raise_on_error=False)
    except UNAVAILABLE as exc:
        raise QueueConnectionError(str(exc)) from exc
    malformed: dict[str, str] = {}
    read: dict[str, Any] = {}
    for kind, reply in zip(hashes + sets, replies[: len(hashes) + len(sets)], strict=True):
        read[kind], problem = checked(queue.client, reply, k.key(kind), KEY_TYPES[kind])
        if problem:
            malformed[kind] = problem
    rec, att, lease, info, flow = (read[kind] for kind in hashes)
    active, delayed, dead, done, waiting = (read[kind] for kind in sets)
    if rec is None and dead is None and active is None and not malformed:
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
    if state == "ready" and waiting is None:
        state = _ready_or_unknown(queue, member, malformed)
    priority, fairness_key = parse_flow_value(flow) or (DEFAULT_PRIORITY, None)
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
    token = None
    if lease is not None:
        try:
            token = lease.decode("utf-8") if isinstance(lease, bytes) else str(lease)
        except UnicodeDecodeError:
            malformed["lease"] = stored.raw_text(lease)
    for name, raw in (("info", bad_info), ("attempts", bad_attempts)):
        if raw:
            malformed[name] = raw
    now, fields = replies[len(hashes) + len(sets) :]
    if isinstance(now, Exception):  # TIME cannot fail; keep the view going if it did
        raise QueueConnectionError(str(now))
    if isinstance(fields, Exception):  # stats of another type: no offset to read
        fields = [None, None]
    queue_ms, offset_ms = clock.queue_time_ms(
        int(now[0]) * 1000 + int(now[1]) // 1000, *(clock.field(f) for f in fields)
    )
    return JobExplanation(
        job_id=id_text(member),
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
        id_unreadable=isinstance(member, bytes),
        priority=priority,
        fairness_key=fairness_key,
    )


def _ready_or_unknown(queue: Queue, member: bytes | str, malformed: dict[str, str]) -> str:
    """``ready`` when the ready list holds ``member``, else ``unknown`` (a record without
    a place); a ready key of the wrong type is noted in ``malformed``."""
    key = queue.keys.key("ready")
    try:
        found = queue.client.lpos(key, member)
    except redis.ResponseError as exc:
        if str(exc).startswith("WRONGTYPE"):
            _, malformed["ready"] = checked(queue.client, exc, key, "list")
            return "unknown"
        return "ready"  # LPOS needs Redis >= 6.0.6: trust the record
    except UNAVAILABLE as exc:
        raise QueueConnectionError(str(exc)) from exc
    return "unknown" if found is None else "ready"


def ids_in(queue: Queue, kind: str, start: int = 0, stop: int = -1) -> tuple[list[str], str | None]:
    """Job ids in one structure of ``queue``, by rank, and a note when its key is unreadable.

    Args:
        queue: the queue.
        kind: ``ready``, ``delayed``, ``active``, ``dead`` or ``done``; or ``waiting``
            (the waiting jobs with a priority or a fairness key, next served first,
            ADR 0033: with the ready list, what ``stats`` counts as ready).
        start / stop: ranks as Redis takes them (``LRANGE`` / ``ZRANGE``, inclusive,
            negative from the end).

    Returns:
        ``(ids, note)``: the ids as text (a non-UTF-8 id in its ``hex:`` form), and
        None, or ``([], note)`` when the key holds another type.

    Raises:
        QueueConnectionError: Redis unreachable.
        ValueError: ``kind`` is not one of those structures.
    """
    if kind not in ("ready", "delayed", "active", "dead", "done", "waiting"):
        raise ValueError(f"no structure {kind!r}; ready, delayed, active, dead, done or waiting")
    key = queue.keys.key(kind)
    try:
        if kind == "ready":
            raw = queue.client.lrange(key, start, stop)
        else:
            raw = queue.client.zrange(key, start, stop)
    except redis.ResponseError as exc:
        _, problem = checked(queue.client, exc, key, KEY_TYPES[kind])
        return [], problem
    except UNAVAILABLE as exc:
        raise QueueConnectionError(str(exc)) from exc
    return [id_text(x) for x in raw], None


@dataclass(frozen=True)
class KeyedJob:
    """What one idempotency key maps to, as a read-only view shows it.

    Attributes:
        job_id: the job the key maps to (a non-UTF-8 id in its ``hex:`` form), or None
            when the key is absent or unreadable.
        place: where that job is (one of ``Queue.PLACES``), or None when there is no
            job or its place could not be read.
        problem: a note naming the key or structure that could not be read, else None.
    """

    job_id: str | None
    place: str | None
    problem: str | None = None

    @property
    def pending(self) -> str | None:
        """The job id when the queue trusts the key (:func:`~reliable_queue.places.key_is_trusted`:
        the job is ready, delayed, active or dead), else None."""
        return self.job_id if key_is_trusted(self.place) else None


def idempotency_jobs(queue: Queue, keys: Sequence[str]) -> list[KeyedJob]:
    """The job each idempotency key maps to and where it is, key by key.

    What :meth:`Queue.pending_jobs_for` reads, for views: a key holding a value of
    the wrong type is named in its own entry's ``problem`` and the other keys are
    still answered; a structure of the wrong type leaves ``place`` unknown, with a note.
    Two round trips whatever the number of keys.

    Args:
        queue: the queue.
        keys: the callers' idempotency keys (not Redis key names).

    Returns:
        One :class:`KeyedJob` per key, in order.

    Raises:
        InvalidTextError: a key holds a lone surrogate.
        QueueConnectionError: Redis unreachable.
    """
    if not keys:
        return []
    names = [queue.keys.idempotency_key(check_text("idempotency key", key)) for key in keys]
    try:
        pipe = queue.client.pipeline(transaction=False)
        for name in names:
            pipe.get(name)
        replies = pipe.execute(raise_on_error=False)
    except UNAVAILABLE as exc:
        raise QueueConnectionError(str(exc)) from exc
    read = [checked(queue.client, r, n, "string") for r, n in zip(replies, names, strict=True)]
    found = [(i, id_text(value)) for i, (value, _) in enumerate(read) if value is not None]
    places: list[str | None] = [None] * len(found)
    located: str | None = None
    try:
        places = list(queue.locate_many([job_id for _, job_id in found]))
    except QueueDataError as exc:
        located = str(exc)
    out = [KeyedJob(None, None, problem) for _, problem in read]
    for (i, job_id), place in zip(found, places, strict=True):
        out[i] = KeyedJob(job_id, place, located)
    return out
