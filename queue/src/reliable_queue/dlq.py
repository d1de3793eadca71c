"""The dead-letter queue of one queue: list, show, redrive, purge."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import redis

from . import codec, limits, stored
from .cluster import UNAVAILABLE, snapshot
from .errors import QueueConnectionError, QueueDataError
from .key_types import checked
from .raw_ids import id_member, id_text, leasable, unreadable

if TYPE_CHECKING:
    from .queue import Queue

_PAGE = 500
#: The hashes a dead letter's fields come from, in the order they are read.
_FIELDS = ("jobs", "info", "attempts")


@dataclass(frozen=True)
class DeadLetter:
    """One dead-lettered job.

    Attributes:
        job_id / queue: identity.
        dead_at: when it was dead-lettered, epoch seconds (Redis clock).
        reason: one of :data:`~reliable_queue.queue.DEAD_REASONS` (``error``,
            ``retries_exhausted``, ``worker_lost``, ``timed_out``, ...), or ``?`` when
            its failure info is gone.
        task / payload: from the record; None (and ``record_missing``) when the record
            is gone or unreadable (``raw_record`` then holds the bytes as text).
        attempts: deliveries made.
        error / traceback: the last failure.
        malformed: what could not be read as expected, name -> text shown as it is:
            a stored field (``info``: failure info that is not a JSON object,
            ``attempts``: not an integer) -> its raw text, or a hash whose key holds
            another type (``jobs``, ``info``, ``attempts``) -> a note naming the key.
        id_unreadable: the stored id is not UTF-8 text: ``job_id`` is its ``hex:`` form
            (:mod:`reliable_queue.raw_ids`), which :meth:`DeadLetters.show`,
            :meth:`~DeadLetters.purge` and :meth:`~DeadLetters.redrive` accept.
    """

    job_id: str
    queue: str
    dead_at: float
    reason: str
    task: str | None
    payload: Any
    attempts: int
    error: str
    traceback: str
    record_missing: bool = False
    raw_record: str | None = None
    malformed: dict[str, str] = field(default_factory=dict)
    id_unreadable: bool = False

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON output."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class RedriveReport:
    """Outcome of a redrive.

    Attributes:
        redriven: ids replayed (or, in a dry run, that would be).
        skipped: ids not replayed: record gone (the entry is then removed) or no
            longer dead.
        dry_run: nothing was changed.
        unrunnable: ids left in the DLQ because no worker could lease them (not UTF-8
            text, or longer than ``MAX_ID_BYTES``): a fetch would dead-letter them again
            at once as ``invalid_record``. Purge them by id.
    """

    redriven: list[str]
    skipped: list[str]
    dry_run: bool
    unrunnable: list[str] = field(default_factory=list)


class DeadLetters:
    """Dead-letter operations on one :class:`~reliable_queue.Queue`."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue

    def size(self) -> int:
        """Entries in the DLQ now.

        Raises:
            QueueDataError: the DLQ's key holds a value of another type (the note names it).
            QueueConnectionError: Redis unreachable.
        """
        key = self.queue.keys.key("dead")
        try:
            return int(self.queue.client.zcard(key))
        except redis.ResponseError as exc:
            raise QueueDataError(_problem(self.queue, exc, key, "zset")) from None
        except UNAVAILABLE as exc:
            raise QueueConnectionError(str(exc)) from exc

    def newest(self, limit: int) -> list[tuple[float, str]]:
        """The ``limit`` most recently dead-lettered ids, newest first, without the entries.

        One ZRANGE of the DLQ's top ``limit`` scores; :meth:`show` reads an entry.

        Args:
            limit: most ids to return (``<= 0``: none, and no round trip).

        Returns:
            ``(dead-lettered at, job id)`` pairs: epoch seconds on the queue clock, and
            the id as text (a non-UTF-8 id in its ``hex:`` form).

        Raises:
            QueueDataError: the DLQ's key holds a value of another type (the note names it).
            QueueConnectionError: Redis unreachable.
        """
        if limit <= 0:
            return []
        key = self.queue.keys.key("dead")
        try:
            top = self.queue.client.zrange(key, -limit, -1, withscores=True)
        except redis.ResponseError as exc:
            raise QueueDataError(_problem(self.queue, exc, key, "zset")) from None
        except UNAVAILABLE as exc:
            raise QueueConnectionError(str(exc)) from exc
        return [(float(score) / 1000.0, id_text(member)) for member, score in reversed(top)]

    def iter(
        self, *, task: str | None = None, reason: str | None = None, limit: int | None = None
    ) -> Iterator[DeadLetter]:
        """Dead letters, oldest first, filtered by task and/or reason.

        An entry whose id is not UTF-8 text comes with its ``hex:`` form as ``job_id``
        (``id_unreadable``), one whose record or failure info does not read is shown
        raw (``raw_record``, ``malformed``): one bad entry never stops the listing.

        Args:
            task: keep only this task name.
            reason: keep only this reason.
            limit: stop after this many matches (``0..`` any number; None: no limit).

        Raises:
            QueueDataError: the DLQ's key holds a value of another type (nothing to list).
            QueueLimitError: ``limit`` is negative or not a whole number.
            QueueConnectionError: Redis unreachable.
        """
        if limit is not None:
            limits.integer("limit", limit, low=0, high=2**63 - 1)
            if limit == 0:
                return
        seen = 0
        start = 0
        q, k = self.queue, self.queue.keys
        while True:
            try:
                page = q.client.zrange(k.key("dead"), start, start + _PAGE - 1, withscores=True)
                if not page:
                    return
                members = [m for m, _ in page]
                pipe = q.client.pipeline(transaction=False)
                for kind in _FIELDS:
                    pipe.hmget(k.key(kind), members)
                replies = pipe.execute(raise_on_error=False)
            except redis.ResponseError as exc:
                raise QueueDataError(_problem(q, exc, k.key("dead"), "zset")) from None
            except UNAVAILABLE as exc:
                raise QueueConnectionError(str(exc)) from exc
            columns, notes = _columns(q, replies, len(members))
            recs, infos, atts = columns
            for member, (_, score), rec, info, att in zip(
                members, page, recs, infos, atts, strict=True
            ):
                letter = self._letter(member, score, rec, info, att, notes)
                if task is not None and letter.task != task:
                    continue
                if reason is not None and letter.reason != reason:
                    continue
                yield letter
                seen += 1
                if limit is not None and seen >= limit:
                    return
            start += _PAGE

    def list(self, **filters: Any) -> list[DeadLetter]:
        """:meth:`iter` as a list (same filters)."""
        return list(self.iter(**filters))

    def show(self, job_id: str) -> DeadLetter | None:
        """One dead letter by id, or None if it is not in the DLQ.

        Args:
            job_id: the id as stored, or the ``hex:`` form of one that is not UTF-8.

        Raises:
            InvalidTextError: ``job_id`` holds a lone surrogate.
            QueueDataError: the DLQ's key holds a value of another type.
            QueueConnectionError: Redis unreachable.
        """
        q, k = self.queue, self.queue.keys
        member = id_member(job_id)

        def fill(pipe: redis.client.Pipeline) -> None:
            pipe.zscore(k.key("dead"), member)
            for kind in _FIELDS:
                pipe.hget(k.key(kind), member)

        try:
            score, *replies = snapshot(q.client, k.key("dead"), fill, raise_on_error=False)
        except UNAVAILABLE as exc:
            raise QueueConnectionError(str(exc)) from exc
        if isinstance(score, redis.ResponseError):
            raise QueueDataError(_problem(q, score, k.key("dead"), "zset"))
        if score is None:
            return None
        lists = [r if isinstance(r, redis.ResponseError) else [r] for r in replies]
        ((rec,), (info,), (att,)), notes = _columns(q, lists, 1)
        return self._letter(member, score, rec, info, att, notes)

    def _letter(
        self,
        member: bytes | str,
        score: float,
        rec: Any,
        info: Any,
        att: Any,
        notes: dict[str, str] | None = None,
    ) -> DeadLetter:
        decoded, bad_info = stored.failure_info(info)
        failure = decoded or {}
        count, bad_attempts = stored.attempts(att)
        malformed = dict(notes or {})
        for name, raw in (("info", bad_info), ("attempts", bad_attempts)):
            if raw:
                malformed[name] = raw
        task = payload = raw = None
        missing = rec is None and "jobs" not in malformed
        if rec is not None:
            try:
                r = codec.decode_record(rec)
                task, payload = r.task, r.payload
            except codec.RecordDecodeError:
                raw = stored.raw_text(rec)
        job_id = id_text(member)
        return DeadLetter(
            job_id=job_id,
            queue=self.queue.name,
            dead_at=score / 1000.0,
            reason=str(failure.get("reason", "?")),
            task=task,
            payload=payload,
            attempts=count,
            error=str(failure.get("error", "")) if bad_info is None else bad_info,
            traceback=str(failure.get("traceback", "")),
            record_missing=missing,
            raw_record=raw,
            malformed=malformed,
            id_unreadable=unreadable(job_id),
        )

    def redrive(
        self,
        *,
        ids: list[str] | None = None,
        task: str | None = None,
        reason: str | None = None,
        dry_run: bool = False,
        rate: float | None = None,
        batch: int = 100,
        sleep: Callable[[float], None] = time.sleep,
    ) -> RedriveReport:
        """Replay dead letters: by ids, or all matching the task / reason filters.

        Args:
            ids: exact job ids (filters are then ignored); a non-UTF-8 id in its
                ``hex:`` form.
            task / reason: filters when ``ids`` is None (both None: everything).
            dry_run: report what would be replayed, change nothing.
            rate: at most this many jobs per second, ``(0, MAX_REDRIVE_RATE]`` (None: no
                limit).
            batch: jobs per script call, ``1..SCRIPT_BATCH``.
            sleep: injected for tests of the rate limit.

        Returns:
            A :class:`RedriveReport`; entries whose record is gone are skipped (and
            removed); entries no worker could lease are left, listed as ``unrunnable``.

        Raises:
            QueueLimitError: ``rate`` or ``batch`` past its bound (nothing redriven).
            InvalidTextError: an id holds a lone surrogate (nothing redriven).
            QueueDataError: a queue key holds another type (nothing of that call redriven).
            QueueConnectionError: Redis unreachable.
        """
        if rate is not None:
            rate = limits.number("rate", rate, low=0, high=limits.MAX_REDRIVE_RATE, low_open=True)
        limits.integer("batch", batch, low=1, high=limits.SCRIPT_BATCH)
        if ids is None:
            ids = [d.job_id for d in self.iter(task=task, reason=reason)]
        members = [id_member(job_id) for job_id in ids]
        runnable = [(t, m) for t, m in zip(ids, members, strict=True) if leasable(t)]
        unrunnable = [t for t in ids if not leasable(t)]
        if dry_run:
            return RedriveReport([t for t, _ in runnable], [], True, unrunnable)
        done: list[str] = []
        skipped: list[str] = []
        step = max(1, min(batch, int(rate) if rate else batch))
        for i in range(0, len(runnable), step):
            chunk = [m for _, m in runnable[i : i + step]]
            started = time.monotonic()
            reply = self.queue.scripts.run(
                "redrive", self.queue.keys.flow_keys(), [self.queue.settings.wake_tokens, *chunk]
            )
            texts = [id_text(x) for x in reply]
            cut = texts.index("|")
            done.extend(texts[:cut])
            skipped.extend(texts[cut + 1 :])
            if rate:
                remaining = len(chunk) / rate - (time.monotonic() - started)
                if remaining > 0 and i + step < len(runnable):
                    sleep(remaining)
        return RedriveReport(done, skipped, False, unrunnable)

    def purge(
        self, *, ids: list[str] | None = None, task: str | None = None, reason: str | None = None
    ) -> int:
        """Delete dead letters for good: by ids, or all matching the filters.

        Args:
            ids: exact job ids (filters are then ignored); a non-UTF-8 id in its
                ``hex:`` form, which is how such an entry is purged.
            task / reason: filters when ``ids`` is None (both None: everything).

        Returns:
            Entries removed.

        Raises:
            InvalidTextError: an id holds a lone surrogate (nothing purged).
            QueueDataError: a queue key holds another type (nothing of that call purged).
            QueueConnectionError: Redis unreachable.
        """
        if ids is None:
            ids = [d.job_id for d in self.iter(task=task, reason=reason)]
        members = [id_member(job_id) for job_id in ids]
        removed = 0
        for i in range(0, len(members), _PAGE):
            removed += int(
                self.queue.scripts.run("purge", self.queue.keys.flow_keys(), members[i : i + _PAGE])
            )
        return removed


def _columns(queue: Queue, replies: list[Any], n: int) -> tuple[list[list[Any]], dict[str, str]]:
    """The HMGET replies of the :data:`_FIELDS` hashes, each a list of ``n`` values; a
    hash whose key holds another type reads as ``n`` Nones, with a note naming it."""
    columns: list[list[Any]] = []
    notes: dict[str, str] = {}
    for kind, reply in zip(_FIELDS, replies, strict=True):
        value, problem = checked(queue.client, reply, queue.keys.key(kind), "hash")
        if problem:
            notes[kind] = problem
        columns.append(value if value is not None else [None] * n)
    return columns, notes


def _problem(queue: Queue, exc: redis.ResponseError, key: str, want: str) -> str:
    """The note for a read of ``key`` that failed with ``exc`` (re-raised unless WRONGTYPE)."""
    _, problem = checked(queue.client, exc, key, want)
    return problem or str(exc)
