"""The dead-letter queue of one queue: list, show, redrive, purge."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import redis

from . import codec, stored
from .cluster import UNAVAILABLE, snapshot
from .errors import QueueConnectionError
from .replies import split as _split
from .replies import text as _text

if TYPE_CHECKING:
    from .queue import Queue

_PAGE = 500


@dataclass(frozen=True)
class DeadLetter:
    """One dead-lettered job.

    Attributes:
        job_id / queue: identity.
        dead_at: when it was dead-lettered, epoch seconds (Redis clock).
        reason: ``error``, ``retries_exhausted``, ``worker_lost``, ``invalid_payload``,
            ``unknown_task`` (or ``?`` when its failure info is gone).
        task / payload: from the record; None (and ``record_missing``) when the record
            is gone or unreadable (``raw_record`` then holds the bytes as text).
        attempts: deliveries made.
        error / traceback: the last failure.
        malformed: stored fields that could not be read as expected (``info``:
            failure info that is not a JSON object, ``attempts``: not an integer),
            name -> raw stored text, shown as it is.
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

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON output."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class RedriveReport:
    """Outcome of a redrive: ids replayed, ids skipped (record gone / not dead)."""

    redriven: list[str]
    skipped: list[str]
    dry_run: bool


class DeadLetters:
    """Dead-letter operations on one :class:`~reliable_queue.Queue`."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue

    def size(self) -> int:
        """Entries in the DLQ now."""
        try:
            return int(self.queue.client.zcard(self.queue.keys.key("dead")))
        except UNAVAILABLE as exc:
            raise QueueConnectionError(str(exc)) from exc

    def iter(
        self, *, task: str | None = None, reason: str | None = None, limit: int | None = None
    ) -> Iterator[DeadLetter]:
        """Dead letters, oldest first, filtered by task and/or reason.

        Args:
            task: keep only this task name.
            reason: keep only this reason.
            limit: stop after this many matches.
        """
        seen = 0
        start = 0
        k = self.queue.keys
        while True:
            try:
                page = self.queue.client.zrange(
                    k.key("dead"), start, start + _PAGE - 1, withscores=True
                )
                if not page:
                    return
                ids = [_text(m) for m, _ in page]
                pipe = self.queue.client.pipeline(transaction=False)
                pipe.hmget(k.key("jobs"), ids)
                pipe.hmget(k.key("info"), ids)
                pipe.hmget(k.key("attempts"), ids)
                recs, infos, atts = pipe.execute()
            except UNAVAILABLE as exc:
                raise QueueConnectionError(str(exc)) from exc
            for job_id, (_, score), rec, info, att in zip(
                ids, page, recs, infos, atts, strict=True
            ):
                letter = self._letter(job_id, score, rec, info, att)
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
        """One dead letter by id, or None if it is not in the DLQ."""
        k = self.queue.keys

        def fill(pipe: redis.client.Pipeline) -> None:
            pipe.zscore(k.key("dead"), job_id)
            pipe.hget(k.key("jobs"), job_id)
            pipe.hget(k.key("info"), job_id)
            pipe.hget(k.key("attempts"), job_id)

        try:
            score, rec, info, att = snapshot(self.queue.client, k.key("dead"), fill)
        except UNAVAILABLE as exc:
            raise QueueConnectionError(str(exc)) from exc
        if score is None:
            return None
        return self._letter(job_id, score, rec, info, att)

    def _letter(self, job_id: str, score: float, rec: Any, info: Any, att: Any) -> DeadLetter:
        decoded, bad_info = stored.failure_info(info)
        failure = decoded or {}
        count, bad_attempts = stored.attempts(att)
        malformed = {
            name: raw for name, raw in (("info", bad_info), ("attempts", bad_attempts)) if raw
        }
        task = payload = raw = None
        missing = rec is None
        if rec is not None:
            try:
                r = codec.decode_record(rec)
                task, payload = r.task, r.payload
            except codec.RecordDecodeError:
                raw = rec.decode("utf-8", "replace") if isinstance(rec, bytes) else str(rec)
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
            ids: exact job ids (filters are then ignored).
            task / reason: filters when ``ids`` is None (both None: everything).
            dry_run: report what would be replayed, change nothing.
            rate: at most this many jobs per second (None: no limit).
            batch: jobs per script call.
            sleep: injected for tests of the rate limit.

        Returns:
            A :class:`RedriveReport`; entries whose record is gone are skipped (and removed).
        """
        if ids is None:
            ids = [d.job_id for d in self.iter(task=task, reason=reason)]
        if dry_run:
            return RedriveReport(list(ids), [], True)
        done: list[str] = []
        skipped: list[str] = []
        step = max(1, min(batch, int(rate) if rate else batch))
        for i in range(0, len(ids), step):
            chunk = ids[i : i + step]
            started = time.monotonic()
            reply = self.queue.scripts.run(
                "redrive", self.queue.keys.script_keys(), [self.queue.settings.wake_tokens, *chunk]
            )
            a, b = _split(reply)
            done.extend(a)
            skipped.extend(b)
            if rate:
                remaining = len(chunk) / rate - (time.monotonic() - started)
                if remaining > 0 and i + step < len(ids):
                    sleep(remaining)
        return RedriveReport(done, skipped, False)

    def purge(
        self, *, ids: list[str] | None = None, task: str | None = None, reason: str | None = None
    ) -> int:
        """Delete dead letters for good: by ids, or all matching the filters.

        Returns:
            Entries removed.
        """
        if ids is None:
            ids = [d.job_id for d in self.iter(task=task, reason=reason)]
        removed = 0
        for i in range(0, len(ids), _PAGE):
            removed += int(
                self.queue.scripts.run("purge", self.queue.keys.script_keys(), ids[i : i + _PAGE])
            )
        return removed
