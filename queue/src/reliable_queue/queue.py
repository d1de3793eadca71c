"""The queue client: every state change of a job is one Lua script."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import redis
from pydantic import BaseModel

from . import codec
from .cluster import UNAVAILABLE
from .dlq import DeadLetters
from .errors import PayloadTooLargeError, QueueConnectionError, QueueError
from .ids import new_job_id
from .job import AckResult, EnqueueRequest, FetchResult, Lease, RawJob
from .keys import QueueKeys
from .registry import TaskRegistry
from .replies import ms as _ms
from .replies import split as _split
from .replies import text as _text
from .scripts import Call, ScriptRunner
from .settings import QueueSettings

#: Answers of :meth:`Queue.locate`.
PLACES = ("ready", "delayed", "active", "dead", "done", "nowhere", "unknown")
#: Places of a job that has not finished (ready to run, waiting, running, dead-lettered).
PENDING_PLACES = frozenset({"ready", "delayed", "active", "dead"})

DEAD_REASONS = ("error", "retries_exhausted", "worker_lost", "invalid_payload", "unknown_task")


class Queue:
    """One named queue on one Redis server or cluster.

    Args:
        client: redis-py client (``Redis`` or ``RedisCluster``) with
            ``decode_responses=False``; give it a ``socket_timeout`` longer than
            ``settings.max_block_seconds`` so a dropped connection is noticed.
        name: queue name; it becomes the Redis Cluster hash tag of all its keys.
        prefix: key namespace shared by the queues of one application.
        settings: limits and windows (defaults: :class:`QueueSettings`).
        registry: when given, payloads of registered tasks are validated at enqueue
            and unknown task names are refused.
        clock: wall clock in epoch seconds (only stamps ``enqueued_at``; every
            deadline uses the Redis server clock).

    Raises:
        ValueError: bad name/prefix, or a client that decodes responses.
    """

    def __init__(
        self,
        client: redis.Redis,
        name: str,
        *,
        prefix: str = "rq",
        settings: QueueSettings | None = None,
        registry: TaskRegistry | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
        if (
            kwargs.get("decode_responses")
            or getattr(client, "get_encoder", None)
            and getattr(client.get_encoder(), "decode_responses", False)
        ):
            raise ValueError("reliable_queue needs a redis client with decode_responses=False")
        self.client = client
        self.name = name
        self.keys = QueueKeys(prefix, name)
        self.settings = settings or QueueSettings()
        self.registry = registry
        self.clock = clock
        self.scripts = ScriptRunner(
            client,
            min_replicas=self.settings.min_replicas,
            replica_timeout_ms=max(_ms(self.settings.replica_timeout_seconds), 1),
        )
        self._keys = self.keys.script_keys()
        self._registered = False

    # ------------------------------------------------------------------ enqueue
    def enqueue(
        self,
        task: str,
        payload: dict[str, Any] | BaseModel,
        *,
        idempotency_key: str | None = None,
        delay: float = 0.0,
        run_at: float | None = None,
        max_attempts: int | None = None,
    ) -> str:
        """Enqueue one job; see :meth:`enqueue_many` for arguments and errors.

        Returns:
            The new job's id, or the first job's id for a duplicate idempotency key.
        """
        request = EnqueueRequest(task, payload, idempotency_key, delay, run_at, max_attempts)
        return self.enqueue_many([request])[0]

    def enqueue_many(
        self, requests: Sequence[EnqueueRequest], *, replace_stale_keys: bool = False
    ) -> list[str]:
        """Enqueue a batch of jobs in one round trip, atomically.

        Args:
            requests: the jobs. Delays are seconds from now on the Redis server clock;
                ``run_at`` is absolute epoch seconds.
            replace_stale_keys: when an idempotency key maps to a job whose record is
                gone (Redis lost it, or it finished and its record expired), enqueue a
                new job instead of returning the old id. The outbox sweep uses this to
                re-publish steps Redis lost.

        Returns:
            Job ids in request order; a duplicate gets the first job's id.

        Raises:
            UnknownTaskError / PayloadValidationError: with a registry, a bad task or payload
                (nothing of the batch is enqueued).
            PayloadTooLargeError: a record exceeds ``max_payload_bytes`` (nothing enqueued).
            TypeError: a payload that JSON cannot represent.
            QueueConnectionError: Redis unreachable; the batch may or may not be stored
                (re-sending the same requests with idempotency keys is safe).
            ReplicationTimeoutError: with ``settings.min_replicas``, the batch is stored
                on the master but too few replicas acknowledged it in time (a failover
                could lose it; re-sending with idempotency keys is safe).
        """
        if not requests:
            return []
        now = self.clock()
        keys = list(self._keys)
        args: list[Any] = [
            len(requests),
            _ms(self.settings.idempotency_window_seconds),
            self.settings.wake_tokens,
        ]
        limit = self.settings.max_payload_bytes
        for req in requests:
            payload: Any = req.payload
            if self.registry is not None:
                payload = self.registry.payload_for_enqueue(req.task, payload)
                policy_max = self.registry.get(req.task).retry.max_attempts
            else:
                policy_max = None
                if isinstance(payload, BaseModel):
                    payload = payload.model_dump(mode="json")
            max_attempts = req.max_attempts
            if max_attempts is None:
                max_attempts = (
                    policy_max if policy_max is not None else self.settings.default_max_attempts
                )
            if max_attempts < 0:
                raise ValueError("max_attempts must be >= 0")
            record = codec.encode_record(
                req.task, payload, int(now * 1000), max_attempts, req.idempotency_key
            )
            if len(record) > limit:
                raise PayloadTooLargeError(
                    f"job record for task {req.task!r} is {len(record)} bytes; limit {limit}"
                )
            index = 0
            if req.idempotency_key is not None:
                keys.append(self.keys.idempotency_key(req.idempotency_key))
                index = len(keys) - 12
                if replace_stale_keys:
                    index = -index
            run_at_ms = _ms(req.run_at) if req.run_at is not None else 0
            args.extend((new_job_id(now), record, _ms(req.delay), run_at_ms, index))
        self._register_name()
        reply = self.scripts.run("enqueue", keys, args)
        return [_text(x) for x in reply]

    def _register_name(self) -> None:
        if not self._registered:
            try:
                self.client.sadd(self.keys.registry, self.name)
            except UNAVAILABLE as exc:
                raise QueueConnectionError(str(exc)) from exc
            self._registered = True

    # -------------------------------------------------------------------- fetch
    def fetch_call(self, count: int, lease_seconds: float, worker_id: str) -> Call:
        """The script call behind :meth:`fetch`, for pipelining with settlements."""
        s = self.settings
        return Call(
            "fetch",
            self._keys,
            (
                count,
                _ms(lease_seconds),
                worker_id,
                s.reap_limit,
                s.default_max_attempts,
                s.dlq_max_size,
                _ms(s.dlq_max_age_seconds),
            ),
        )

    def parse_fetch(self, reply: Sequence[Any]) -> FetchResult:
        """Turn a fetch script reply into a :class:`FetchResult`."""
        wait_ms, reaped, more = int(reply[0]), int(reply[1]), bool(int(reply[2]))
        name, items = self.name, iter(reply[3:])
        # replies are bytes (the client may not decode); ids and tokens are ASCII
        jobs = [
            RawJob(name, job_id.decode(), token.decode(), int(attempt), record)
            for job_id, token, attempt, record in zip(items, items, items, items, strict=True)
        ]
        wait = None if jobs or wait_ms < 0 else wait_ms / 1000.0
        return FetchResult(jobs, wait, reaped, more)

    def fetch(
        self, count: int = 1, *, lease_seconds: float | None = None, worker_id: str = "-"
    ) -> FetchResult:
        """Lease up to ``count`` ready jobs (after reaping and promoting due jobs).

        Args:
            count: most jobs to lease, >= 1.
            lease_seconds: lease length (default ``settings.lease_seconds``).
            worker_id: recorded in each lease token (shown by ``explain``).

        Raises:
            QueueConnectionError: Redis unreachable (no job was leased, or a leased one
                will be reaped when its lease expires).
        """
        call = self.fetch_call(count, lease_seconds or self.settings.lease_seconds, worker_id)
        return self.parse_fetch(self._run(call))

    def wait_for_work(self, timeout: float) -> bool:
        """Block on the wake-up list up to ``timeout`` seconds (no polling).

        Returns:
            True if woken by an enqueue / retry / redrive, False on timeout.

        Raises:
            QueueConnectionError: Redis unreachable.
        """
        timeout = max(timeout, 0.001)
        try:
            return self.client.blpop([self.keys.key("wake")], timeout=timeout) is not None
        except UNAVAILABLE as exc:
            raise QueueConnectionError(f"blocking wait failed: {exc}") from exc

    # ------------------------------------------------------------- settlements
    def ack_call(self, leases: Sequence[Lease]) -> Call:
        """The script call behind :meth:`ack`."""
        args: list[Any] = [_ms(self.settings.job_retention_seconds), len(leases)]
        for lease in leases:
            args.extend((lease.job_id, lease.token))
        return Call("ack", self._keys, args)

    def ack(self, leases: Sequence[Lease]) -> AckResult:
        """Record success of leased jobs; stale lease tokens are refused and counted.

        Raises:
            QueueConnectionError: Redis unreachable (the acks may not be recorded;
                sending them again is safe).
            ReplicationTimeoutError: with ``settings.min_replicas``, recorded on the
                master but not acknowledged by enough replicas in time.
        """
        if not leases:
            return AckResult([], [])
        return AckResult(*_split(self._run(self.ack_call(leases))))

    def nack_call(self, lease: Lease, delay: float, info: dict[str, Any]) -> Call:
        """The script call behind :meth:`nack`."""
        return Call(
            "nack",
            self._keys,
            (lease.job_id, lease.token, _ms(delay), codec.dumps(info), self.settings.wake_tokens),
        )

    def nack(
        self, lease: Lease, *, delay: float = 0.0, error: str = "", traceback: str = ""
    ) -> bool:
        """A leased job failed; run it again after ``delay`` seconds.

        Returns:
            True if recorded, False if the lease token was stale (refused, counted).
        """
        info = self.failure_info("retry", error, traceback)
        return bool(self._run(self.nack_call(lease, delay, info)))

    def dead_call(self, lease: Lease, reason: str, info: dict[str, Any]) -> Call:
        """The script call behind :meth:`dead`."""
        s = self.settings
        return Call(
            "dead",
            self._keys,
            (
                lease.job_id,
                lease.token,
                reason,
                codec.dumps(info),
                s.dlq_max_size,
                _ms(s.dlq_max_age_seconds),
            ),
        )

    def dead(self, lease: Lease, reason: str, *, error: str = "", traceback: str = "") -> bool:
        """Move a leased job to the dead-letter queue.

        Args:
            reason: one of :data:`DEAD_REASONS`.

        Returns:
            True if recorded, False if the lease token was stale.

        Raises:
            ValueError: an unknown reason.
        """
        if reason not in DEAD_REASONS:
            raise ValueError(
                f"unknown dead-letter reason {reason!r}; expected one of {DEAD_REASONS}"
            )
        info = self.failure_info(reason, error, traceback)
        return bool(self._run(self.dead_call(lease, reason, info)))

    def failure_info(self, reason: str, error: str, traceback: str) -> dict[str, Any]:
        """The JSON blob stored with a failure; the traceback cut to its last chars."""
        limit = self.settings.traceback_max_chars
        if len(traceback) > limit:
            traceback = "...\n" + traceback[-limit:] if limit else ""
        return {"reason": reason, "error": error[:2000], "traceback": traceback, "at": self.clock()}

    def extend(self, leases: Sequence[Lease], lease_seconds: float | None = None) -> list[str]:
        """Heartbeat: push the lease deadline of held jobs to now + ``lease_seconds``.

        Returns:
            Ids whose token was stale (the lease was lost; counted as ``stale_extends``).
        """
        if not leases:
            return []
        args: list[Any] = [_ms(lease_seconds or self.settings.lease_seconds), len(leases)]
        for lease in leases:
            args.extend((lease.job_id, lease.token))
        return [_text(x) for x in self.scripts.run("extend", self._keys, args)]

    def release_call(self, leases: Sequence[Lease]) -> Call:
        """The script call behind :meth:`release`."""
        args: list[Any] = [self.settings.wake_tokens, len(leases)]
        for lease in leases:
            args.extend((lease.job_id, lease.token))
        return Call("release", self._keys, args)

    def release(self, leases: Sequence[Lease]) -> int:
        """Hand leased, unrun jobs back to the head of the queue (graceful shutdown).

        Returns:
            How many were handed back (stale leases are skipped).
        """
        if not leases:
            return 0
        return int(self._run(self.release_call(leases)))

    def reap(self) -> int:
        """Reclaim every expired lease now (normally fetch does this). Returns the count."""
        total = 0
        while True:
            call = self.fetch_call(0, self.settings.lease_seconds, "reaper")
            reply = self.parse_fetch(self._run(call))
            total += reply.reaped
            if not reply.reap_more:
                return total

    def _run(self, call: Call) -> Any:
        return self.scripts.run(call.script, call.keys, call.args)

    def locate(self, job_id: str) -> str:
        """Where a job really is: membership in the structures, not record existence.

        One read-only script, so the answer is one consistent snapshot. Checking
        ``ready`` is an LPOS, linear in the length of the ready list.

        Args:
            job_id: the job's id.

        Returns:
            One of :data:`PLACES`: ``"ready"``, ``"delayed"``, ``"active"``,
            ``"dead"`` or ``"done"`` when a structure holds the id (the first of
            active, ready, delayed, dead, done); ``"nowhere"`` when the record
            exists but no structure holds the id (an orphan: nothing will ever run
            it until the audit repairs it); ``"unknown"`` when there is neither.

        Raises:
            QueueConnectionError: Redis unreachable.
        """
        place, has_record = self.scripts.run("locate", self._keys, [job_id])
        place = _text(place)
        if place:
            return place
        return "nowhere" if int(has_record) else "unknown"

    def pending_job_for(self, idempotency_key: str) -> str | None:
        """The id of the unfinished job an idempotency key maps to, if Redis has one.

        "Has one" means the job is a member of ``ready``, ``delayed``, ``active`` or
        ``dead`` (see :meth:`locate`), not merely that its record or key exists.

        Returns:
            The job id when the key exists and its job is still ready, delayed,
            active or dead-lettered; None when the key expired, or its job finished,
            or it sits in no structure (an orphan), or is gone (Redis lost it).

        Raises:
            QueueConnectionError: Redis unreachable.
        """
        try:
            raw = self.client.get(self.keys.idempotency_key(idempotency_key))
        except UNAVAILABLE as exc:
            raise QueueConnectionError(str(exc)) from exc
        if raw is None:
            return None
        job_id = _text(raw)
        return job_id if self.locate(job_id) in PENDING_PLACES else None

    def replay(self, job_ids: Sequence[str]) -> tuple[list[str], list[str]]:
        """Put finished jobs back on the queue to run again (fault injection).

        Reproduces what an AOF replay after a Redis crash can do: jobs that had
        already been acked run once more. Chaos runs and tests use it to force
        duplicate deliveries and show that the handlers absorb them. Each job
        starts again at attempt 1 and goes to the tail of ``ready``; it keeps
        its id, record and idempotency key.

        Args:
            job_ids: ids of jobs in the ``done`` set (finished, record still kept).

        Returns:
            ``(replayed, skipped)``: ids put back on ``ready``, and ids that were
            not finished or whose record has expired.

        Raises:
            QueueConnectionError: Redis unreachable (some may have been replayed).
        """
        if not job_ids:
            return [], []
        reply = self.scripts.run("replay", self._keys, [self.settings.wake_tokens, *job_ids])
        return _split(reply)

    # ---------------------------------------------------------- dead letters
    @property
    def dead_letters(self) -> DeadLetters:
        """The :class:`~reliable_queue.dlq.DeadLetters` view of this queue."""
        return DeadLetters(self)

    def ids_in(self, kind: str, start: int = 0, stop: int = -1) -> list[str]:
        """Job ids in one structure (``ready``, ``delayed``, ``active``, ``dead``, ``done``)."""
        key = self.keys.key(kind)
        try:
            if kind == "ready":
                raw = self.client.lrange(key, start, stop)
            else:
                raw = self.client.zrange(key, start, stop)
        except UNAVAILABLE as exc:
            raise QueueConnectionError(str(exc)) from exc
        return [_text(x) for x in raw]


__all__ = ["DEAD_REASONS", "PENDING_PLACES", "PLACES", "Queue", "QueueError"]
