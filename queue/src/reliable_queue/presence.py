"""What each worker process is doing, as it publishes it: the state's format and its reading.

A :class:`~reliable_queue.Worker` publishes its state (host, pid, queues, lanes busy /
idle / abandoned with the batch each busy lane runs, counts, and why it stopped) every
:func:`publish_every` seconds by one script call (``lua/presence.lua``, keys
:class:`~reliable_queue.keys.WorkerKeys`; the thread is ``reliable_queue.presence_publisher``).
:func:`workers` reads the states back, newest first: a worker not heard of for
:data:`GONE_AFTER_PERIODS` publish periods (one heartbeat interval, at most
2 x :data:`MAX_PUBLISH_EVERY` s) is gone, and its last state is kept for
:data:`GONE_KEPT_SECONDS`. Every field read is untrusted: checked and bounded here, escaped
by the views. See [ADR 0043](../../../../docs/adr/0043-workers-publish-their-state.md).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from .cluster import UNAVAILABLE, RedisClient, snapshot
from .errors import QueueConnectionError, QueueLimitError
from .key_types import checked
from .keys import WorkerKeys
from .limits import MAX_LANES_PUBLISHED, MAX_WORKER_STATE_BYTES, MAX_WORKERS_SHOWN
from .raw_ids import id_text

#: Publish periods without a word after which a worker counts as gone.
GONE_AFTER_PERIODS = 2

#: Longest period between two publishes, seconds (a long lease's heartbeat is slower).
MAX_PUBLISH_EVERY = 5.0

#: Shortest period between two publishes, seconds (the heartbeat's own floor).
MIN_PUBLISH_EVERY = 0.05

#: How long a gone or stopped worker's last state is kept, seconds.
GONE_KEPT_SECONDS = 3600.0

#: Longest text kept of one field read back (host, queue, task, job id, exit reason).
MAX_TEXT_CHARS = 200

#: Counters a state carries (the worker's own, since it started).
COUNTS = ("succeeded", "retried", "dead", "timed_out", "reaped", "stale_refused")

#: What a lane is doing: running a batch, waiting for work, or abandoned at a time limit
#: (a fresh lane took its place; its thread is still in the handler).
LANE_STATES = ("busy", "idle", "abandoned")

#: A worker's own word on itself; a reader adds ``gone`` (not heard of in time).
STATES = ("running", "stopping", "stopped")


def publish_every(heartbeat_seconds: float) -> float:
    """The publish period of a worker whose heartbeat beats every ``heartbeat_seconds``:
    half of it, within [:data:`MIN_PUBLISH_EVERY`, :data:`MAX_PUBLISH_EVERY`] seconds, so
    a worker that died reads as gone within one heartbeat interval (two periods)."""
    return min(max(heartbeat_seconds / 2.0, MIN_PUBLISH_EVERY), MAX_PUBLISH_EVERY)


@dataclass(frozen=True)
class LaneState:
    """One lane as a worker publishes it.

    Attributes:
        queue: the queue it serves.
        state: one of :data:`LANE_STATES`.
        busy_seconds: how long its batch had run when published (None: idle).
        job_id: the first job of that batch (None: idle).
        task: that job's task (None: idle, or its record did not decode).
        jobs: jobs in that batch (0: idle).
    """

    queue: str
    state: str
    busy_seconds: float | None = None
    job_id: str | None = None
    task: str | None = None
    jobs: int = 0


@dataclass(frozen=True)
class WorkerState:
    """What one worker process publishes about itself.

    Attributes:
        host / pid: where it runs.
        queues: the queues it serves.
        concurrency: lanes per queue.
        batch_size: jobs leased per fetch per lane.
        up_seconds: seconds since it started serving.
        every: seconds between its publishes.
        state: one of :data:`STATES`.
        exit_reason: why it stops or stopped (None while running).
        counts: its counters (:data:`COUNTS`), since it started.
        lanes: every lane (cut to :data:`MAX_LANES_PUBLISHED` when encoded; the
            counts of busy, idle and abandoned lanes cover them all).
    """

    host: str
    pid: int
    queues: Sequence[str]
    concurrency: int
    batch_size: int
    up_seconds: float
    every: float
    state: str
    exit_reason: str | None
    counts: Mapping[str, int]
    lanes: Sequence[LaneState]

    def encode(self) -> str:
        """The JSON text :func:`decode` reads (at most :data:`MAX_WORKER_STATE_BYTES`
        bytes: job ids and texts are cut first, then lanes are left out)."""
        tally = {s: sum(1 for lane in self.lanes if lane.state == s) for s in LANE_STATES}
        record = {
            "v": 1,
            "host": self.host[:MAX_TEXT_CHARS],
            "pid": self.pid,
            "queues": [q[:MAX_TEXT_CHARS] for q in self.queues[:MAX_LANES_PUBLISHED]],
            "concurrency": self.concurrency,
            "batch_size": self.batch_size,
            "up": round(self.up_seconds, 3),
            "every": self.every,
            "state": self.state,
            "exit": None if self.exit_reason is None else self.exit_reason[:MAX_TEXT_CHARS],
            "counts": {k: int(v) for k, v in self.counts.items() if k in COUNTS},
            **tally,
            "lanes": [_lane_record(lane) for lane in self.lanes[:MAX_LANES_PUBLISHED]],
        }
        text = json.dumps(record, separators=(",", ":"))
        while len(text.encode()) > MAX_WORKER_STATE_BYTES and record["lanes"]:
            record["lanes"] = record["lanes"][: len(record["lanes"]) // 2]
            text = json.dumps(record, separators=(",", ":"))
        return text


def _lane_record(lane: LaneState) -> dict[str, Any]:
    out: dict[str, Any] = {"queue": lane.queue[:MAX_TEXT_CHARS], "state": lane.state}
    if lane.busy_seconds is not None:
        out.update(
            busy=round(lane.busy_seconds, 3),
            job=None if lane.job_id is None else lane.job_id[:MAX_TEXT_CHARS],
            task=None if lane.task is None else lane.task[:MAX_TEXT_CHARS],
            jobs=lane.jobs,
        )
    return out


@dataclass(frozen=True)
class LaneInfo:
    """One lane of a worker, as read back.

    Attributes:
        queue: the queue it serves.
        state: one of :data:`LANE_STATES`.
        since: when its batch began, epoch seconds on the Redis clock (None: idle).
        running_seconds: how long that batch had run at the reading (None: idle; for a
            gone worker, as of its last publish).
        job_id / task / jobs: the batch's first job, its task, and its size.
    """

    queue: str
    state: str
    since: float | None = None
    running_seconds: float | None = None
    job_id: str | None = None
    task: str | None = None
    jobs: int = 0

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON output (times: epoch seconds, ms precision)."""
        out = dict(vars(self))
        for name in ("since", "running_seconds"):
            if out[name] is not None:
                out[name] = round(out[name], 3)
        return out


@dataclass(frozen=True)
class WorkerInfo:
    """One worker process as the workers view shows it.

    Attributes:
        worker_id: its id (``<host>:<pid>:<4 hex>`` for a worker of this library).
        host / pid / queues / concurrency / batch_size: as it published them.
        started_at: when it started serving, epoch seconds (Redis clock).
        last_heartbeat: its last publish of its state, epoch seconds (Redis clock).
        heartbeat_age: seconds from that publish to the reading.
        every: seconds between its publishes.
        state: ``running``, ``stopping``, ``stopped`` (it said so) or ``gone`` (no
            word for :data:`GONE_AFTER_PERIODS` periods: killed, frozen, or cut off
            from Redis); a gone worker's other fields are its last known state.
        exit_reason: why it stopped (None: it did not say).
        busy / idle / abandoned: its lanes in each state.
        lanes: the lanes it listed (at most :data:`MAX_LANES_PUBLISHED`).
        counts: its counters since it started (:data:`COUNTS`).
    """

    worker_id: str
    host: str
    pid: int | None
    queues: tuple[str, ...]
    concurrency: int
    batch_size: int
    started_at: float
    last_heartbeat: float
    heartbeat_age: float
    every: float
    state: str
    exit_reason: str | None
    busy: int
    idle: int
    abandoned: int
    lanes: tuple[LaneInfo, ...] = ()
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def alive(self) -> bool:
        """It is serving or draining, and was heard of in time."""
        return self.state in ("running", "stopping")

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON output (times: epoch seconds)."""
        return {
            "worker_id": self.worker_id,
            "host": self.host,
            "pid": self.pid,
            "queues": list(self.queues),
            "concurrency": self.concurrency,
            "batch_size": self.batch_size,
            "started_at": self.started_at,
            "last_heartbeat": self.last_heartbeat,
            "heartbeat_age": round(self.heartbeat_age, 3),
            "every": self.every,
            "state": self.state,
            "exit_reason": self.exit_reason,
            "lanes_busy": self.busy,
            "lanes_idle": self.idle,
            "lanes_abandoned": self.abandoned,
            "lanes": [lane.as_dict() for lane in self.lanes],
            "counts": dict(self.counts),
        }


@dataclass(frozen=True)
class WorkersView:
    """One reading of the presence keys.

    Attributes:
        workers: the most recently heard of first (at most the limit asked for).
        total: workers the keys remember (alive, stopped and gone).
        at: the reading's time, epoch seconds (Redis clock).
        notes: what could not be read (a key of another type, a state that does not
            decode), one line each; untrusted text.
    """

    workers: tuple[WorkerInfo, ...] = ()
    total: int = 0
    at: float = 0.0
    notes: tuple[str, ...] = ()

    @property
    def alive(self) -> int:
        """Workers shown that are serving or draining."""
        return sum(1 for w in self.workers if w.alive)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON output."""
        return {
            "alive": self.alive,
            "shown": len(self.workers),
            "total": self.total,
            "at": self.at,
            "workers": [w.as_dict() for w in self.workers],
            "notes": list(self.notes),
        }


class StateDecodeError(ValueError):
    """A published state that is not the JSON object :meth:`WorkerState.encode` writes."""


def _text(value: Any, name: str, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise StateDecodeError(f"{name} is not text")
    return value[:MAX_TEXT_CHARS]


def _number(value: Any, name: str, *, low: float = 0.0, high: float = 1e12) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise StateDecodeError(f"{name} is not a number")
    return float(min(max(value, low), high))


def _count(value: Any, name: str) -> int:
    return int(_number(value, name, high=2**53))


def _lane(raw: Any, seen: float, now: float) -> LaneInfo:
    if not isinstance(raw, dict):
        raise StateDecodeError("a lane is not an object")
    state = raw.get("state")
    if state not in LANE_STATES:
        raise StateDecodeError("a lane's state is unknown")
    queue = _text(raw.get("queue"), "a lane's queue") or ""
    if raw.get("busy") is None:
        return LaneInfo(queue, state)
    busy = _number(raw["busy"], "a lane's busy time")
    return LaneInfo(
        queue,
        state,
        since=seen - busy,
        running_seconds=busy + max(now - seen, 0.0),
        job_id=_text(raw.get("job"), "a lane's job", optional=True),
        task=_text(raw.get("task"), "a lane's task", optional=True),
        jobs=_count(raw.get("jobs", 0), "a lane's jobs"),
    )


def decode(worker_id: str, raw: bytes | str, seen_ms: float, now_ms: float) -> WorkerInfo:
    """Read one published state (pure: every field checked and bounded).

    Args:
        worker_id: the id it was published under (shown as text, ``raw_ids``).
        raw: the JSON text.
        seen_ms: its publish time, ms (Redis TIME).
        now_ms: the reading's time, ms (Redis TIME).

    Returns:
        The worker, ``gone`` when its last publish is older than
        :data:`GONE_AFTER_PERIODS` of its periods and it did not say it stopped.

    Raises:
        StateDecodeError: not a JSON object of the expected shape, or too large.
    """
    if len(raw) > MAX_WORKER_STATE_BYTES:
        raise StateDecodeError(f"{len(raw)} bytes, more than {MAX_WORKER_STATE_BYTES}")
    try:
        record = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise StateDecodeError(f"not JSON: {exc}") from None
    if not isinstance(record, dict):
        raise StateDecodeError("not a JSON object")
    seen, now = seen_ms / 1000.0, now_ms / 1000.0
    every = _number(record.get("every"), "every", low=MIN_PUBLISH_EVERY, high=3600.0)
    state = record.get("state")
    if state not in STATES:
        raise StateDecodeError("its state is unknown")
    age = max(now - seen, 0.0)
    if state != "stopped" and age > GONE_AFTER_PERIODS * every:
        state = "gone"
    queues = record.get("queues")
    lanes = record.get("lanes")
    counts = record.get("counts")
    if not isinstance(queues, list) or not isinstance(lanes, list) or not isinstance(counts, dict):
        raise StateDecodeError("queues, lanes or counts missing")
    pid = record.get("pid")
    return WorkerInfo(
        worker_id=worker_id[:MAX_TEXT_CHARS],
        host=_text(record.get("host"), "host") or "",
        pid=None if pid is None else _count(pid, "pid"),
        queues=tuple(_text(q, "a queue") or "" for q in queues[:MAX_LANES_PUBLISHED]),
        concurrency=_count(record.get("concurrency", 0), "concurrency"),
        batch_size=_count(record.get("batch_size", 0), "batch_size"),
        started_at=seen - _number(record.get("up"), "up"),
        last_heartbeat=seen,
        heartbeat_age=age,
        every=every,
        state=state,
        exit_reason=_text(record.get("exit"), "exit", optional=True),
        busy=_count(record.get("busy", 0), "busy"),
        idle=_count(record.get("idle", 0), "idle"),
        abandoned=_count(record.get("abandoned", 0), "abandoned"),
        lanes=tuple(_lane(lane, seen, now) for lane in lanes[:MAX_LANES_PUBLISHED]),
        counts={k: _count(counts[k], k) for k in COUNTS if k in counts},
    )


def workers(client: RedisClient, prefix: str, *, limit: int = 50) -> WorkersView:
    """The worker processes that published their state under ``prefix``, newest first.

    Two round trips: the newest ``limit`` ids with their publish times, their count and
    Redis TIME (one MULTI), then their states (one HMGET). A state that does not decode,
    or a key of another type, becomes a note; the rest is shown.

    Args:
        client: ``redis.Redis`` or ``RedisCluster`` (bytes replies).
        prefix: the queues' prefix.
        limit: most workers returned, 1..:data:`~reliable_queue.limits.MAX_WORKERS_SHOWN`.

    Returns:
        The reading.

    Raises:
        QueueLimitError: ``limit`` out of range.
        QueueConnectionError: Redis unreachable.
    """
    if type(limit) is not int or not 1 <= limit <= MAX_WORKERS_SHOWN:
        raise QueueLimitError(f"limit must be 1..{MAX_WORKERS_SHOWN}, not {limit!r}")
    keys = WorkerKeys(prefix)

    def fill(pipe: Any) -> None:
        pipe.zrevrange(keys.seen, 0, limit - 1, withscores=True)
        pipe.zcard(keys.seen)
        pipe.time()

    seen, total, now = snapshot(client, keys.seen, fill, raise_on_error=False)
    now_ms = int(now[0]) * 1000 + int(now[1]) // 1000
    seen, bad = checked(client, seen, keys.seen, "zset")
    if bad is not None:
        return WorkersView(at=now_ms / 1000.0, notes=(bad,))
    try:
        states = client.hmget(keys.states, [member for member, _ in seen]) if seen else []
    except UNAVAILABLE as exc:
        raise QueueConnectionError(str(exc)) from exc
    except redis.ResponseError as exc:
        states, bad = checked(client, exc, keys.states, "hash")
        return WorkersView(total=int(total), at=now_ms / 1000.0, notes=(bad or str(exc),))
    found: list[WorkerInfo] = []
    notes: list[str] = []
    for (member, score), raw in zip(seen, states, strict=True):
        worker_id = id_text(member)
        if raw is None:
            continue  # forgotten between the two round trips
        try:
            found.append(decode(worker_id, raw, float(score), now_ms))
        except StateDecodeError as exc:
            notes.append(f"worker {worker_id[:MAX_TEXT_CHARS]}: its state is unreadable ({exc})")
    return WorkersView(tuple(found), int(total), now_ms / 1000.0, tuple(notes))
