"""The queue client: every state change of a job is one Lua script."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import redis
from opentelemetry.trace import Tracer
from pydantic import BaseModel

from . import codec, limits
from .cluster import UNAVAILABLE, is_redirect, node_client, refresh
from .errors import (
    InvalidTraceContextError,
    PayloadTooLargeError,
    PayloadValidationError,
    QueueConnectionError,
    QueueDataError,
    QueueError,
    QueueLimitError,
)
from .ids import new_job_id
from .job import AckResult, EnqueueRequest, FetchResult, Lease, make_raw_job
from .key_types import KEY_TYPES, checked, note, wrong_type
from .keys import QueueKeys
from .limits import (
    DEFAULT_PRIORITY,
    MAX_ATTEMPTS,
    MAX_DELAY_SECONDS,
    MAX_FENCING_FLOOR,
    MAX_FETCH,
    MAX_KEY_CAP,
    MAX_LEASE_SECONDS,
    MAX_RUN_AT,
    SCRIPT_BATCH,
    chunks,
)
from .pausing import MAX_BY_CHARS, MAX_REASON_CHARS, PauseState, bounded_text, parse_state
from .places import PENDING_PLACES, PLACES, key_is_trusted
from .priorities import check_fairness_key, check_priority, flow_value, parse_key_cap
from .rate_limits import RateLimit, make_limit
from .rate_limits import parse_state as parse_limit_state
from .raw_ids import id_member, id_text
from .registry import TaskRegistry
from .replies import ms as _ms
from .replies import split as _split
from .replies import text as _text
from .scripts import Call, ScriptRunner
from .settings import QueueSettings
from .trace_context import TraceContext
from .tracing import ProducerSpans

if TYPE_CHECKING:  # the DLQ view and the inspection reads are imported on first use
    from .dlq import DeadLetters

#: Most ids one ``locate`` script call checks (:meth:`Queue.locate_many` sends more in
#: one round trip, this many per call): each id may cost an LPOS walk of ``ready``, so
#: the bound keeps one call from holding Redis for long.
LOCATE_BATCH = 100
#: Seconds a blocking wait may outlast its timeout before the client gives up on it:
#: Redis times a BLPOP out by its wall clock, which a step back of the host's clock
#: holds for as long as the step (ADR 0022).
BLOCK_MARGIN_SECONDS = 1.0

DEAD_REASONS = (
    "error",
    "retries_exhausted",
    "worker_lost",
    "timed_out",  # the last attempt ran past its time limit (the worker's own settle)
    "invalid_payload",
    "invalid_record",
    "unknown_task",
)


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
            deadline uses the queue clock: Redis TIME plus the queue's offset, which
            keeps it from stepping back, ADR 0022).
        tracer: an OpenTelemetry tracer: each enqueued job gets a producer span whose
            context its record stores (:mod:`reliable_queue.tracing`, ADR 0036). None
            (the default) records no span; a request's ``trace_context`` is stored as
            it is.

    Raises:
        ValueError: bad name/prefix, or a client that decodes responses.
        InvalidTextError: (a ``ValueError``) a name or prefix UTF-8 cannot encode.
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
        tracer: Tracer | None = None,
    ) -> None:
        kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
        if (
            kwargs.get("decode_responses")
            or getattr(client, "get_encoder", None)
            and getattr(client.get_encoder(), "decode_responses", False)
        ):
            raise ValueError("reliable_queue needs a redis client with decode_responses=False")
        codec.check_text("queue name", name)
        codec.check_text("key prefix", prefix)
        self.client = client
        self.name = name
        self.keys = QueueKeys(prefix, name)
        self.settings = settings or QueueSettings()
        self.registry = registry
        self.clock = clock
        self.tracer = tracer
        self.scripts = ScriptRunner(
            client,
            min_replicas=self.settings.min_replicas,
            replica_timeout_ms=max(_ms(self.settings.replica_timeout_seconds), 1),
        )
        self._keys = self.keys.script_keys()  # extend and raise_fencing_floor
        self._flow_keys = self.keys.flow_keys()  # every script that moves a job
        self._ack_keys = self._flow_keys[:14]  # ack: running and flow (a key costs a call)
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
        priority: int = DEFAULT_PRIORITY,
        fairness_key: str | None = None,
        trace_context: TraceContext | None = None,
    ) -> str:
        """Enqueue one job; see :meth:`enqueue_many` for arguments and errors, and
        :class:`~reliable_queue.job.EnqueueRequest` for ``priority`` (0..9, lower runs
        sooner, default 5) and ``fairness_key`` (ADR 0033).

        Returns:
            The new job's id, or the first job's id for a duplicate idempotency key.
        """
        request = EnqueueRequest(
            task,
            payload,
            idempotency_key,
            delay,
            run_at,
            max_attempts,
            priority,
            fairness_key,
            trace_context,
        )
        return self.enqueue_many([request])[0]

    def enqueue_many(
        self, requests: Sequence[EnqueueRequest], *, replace_stale_keys: bool = False
    ) -> list[str]:
        """Enqueue a batch of jobs; up to :data:`~reliable_queue.limits.SCRIPT_BATCH` atomically.

        The whole batch is validated and encoded before anything is sent. A batch of
        at most ``SCRIPT_BATCH`` jobs is one script: all of it is enqueued or none. A
        larger batch is sent as several such scripts in order; if one of them fails,
        the earlier ones stay enqueued (re-sending with idempotency keys is safe).

        Args:
            requests: the jobs. Delays are seconds from now on the queue clock (the
                Redis server clock unless it stepped back, ADR 0022); ``run_at`` is
                absolute epoch seconds on the same clock.
            replace_stale_keys: when an idempotency key maps to a job whose record is
                gone (Redis lost it, or it finished and its record expired), enqueue a
                new job instead of returning the old id. The outbox sweep uses this to
                re-publish steps Redis lost.

        Returns:
            Job ids in request order; a duplicate gets the first job's id.

        Raises:
            UnknownTaskError / PayloadValidationError: with a registry, a bad task or payload;
                also, with or without one, a payload JSON cannot represent (a NaN or
                infinite float, an object of no JSON type, an integer past 64 bits, a
                string with a lone surrogate); nothing of the batch is enqueued.
            InvalidTextError: a task name or idempotency key UTF-8 cannot encode (a lone
                surrogate); nothing of the batch is enqueued.
            InvalidTraceContextError: a ``trace_context`` that is not a
                :class:`~reliable_queue.trace_context.TraceContext`; nothing enqueued.
            QueueLimitError: a number past its bound (:mod:`reliable_queue.limits`):
                ``delay`` outside ``0..MAX_DELAY_SECONDS`` (ten years), ``run_at``
                outside ``0..min(MAX_RUN_AT, now + MAX_DELAY_SECONDS)``, ``max_attempts``
                outside ``0..MAX_ATTEMPTS``, NaN, infinite or not a number; a
                ``priority`` that is not an int 0..9; a ``fairness_key`` that is not
                text of 1..128 UTF-8 bytes without NUL; nothing of the batch is enqueued.
            QueueDataError: an idempotency key (or a queue key) holds a value of the wrong
                type in Redis; nothing of that script's jobs was enqueued.
            PayloadTooLargeError: a record exceeds ``max_payload_bytes`` (nothing enqueued).
            QueueConnectionError: Redis unreachable; the batch may or may not be stored
                (re-sending the same requests with idempotency keys is safe).
            ReplicationTimeoutError: with ``settings.min_replicas``, the batch is stored
                on the master but too few replicas acknowledged it in time (a failover
                could lose it; re-sending with idempotency keys is safe).
        """
        if not requests:
            return []
        now = self.clock()
        if self.tracer is None:
            return self._enqueue(requests, now, None, replace_stale_keys)
        spans = ProducerSpans.start(self.tracer, self.name, requests, now)
        try:
            return self._enqueue(spans.requests, now, spans, replace_stale_keys)
        except BaseException as exc:
            spans.failed(exc)
            raise

    def _enqueue(
        self,
        requests: Sequence[EnqueueRequest],
        now: float,
        spans: ProducerSpans | None,
        replace_stale_keys: bool,
    ) -> list[str]:
        """:meth:`enqueue_many` after its producer spans (if any) started: the job ids
        are the spans' (``spans.ids``), and each script's jobs end their spans."""
        # validate and encode the whole batch before anything is sent
        jobs = [self._encoded(req, now) for req in requests]
        self._register_name()
        window = max(_ms(self.settings.idempotency_window_seconds), 1)
        out: list[str] = []
        ids = iter(spans.ids) if spans is not None else None
        # one script serves SCRIPT_BATCH jobs; a larger batch is several calls, each atomic
        for part in chunks(jobs):
            # the flow keys (and a sixth value per job) only when a job has a flow value
            flowing = any(job[4] is not None for job in part)
            keys = list(self._flow_keys if flowing else self._keys)
            base = len(keys)
            args: list[Any] = [len(part), window, self.settings.wake_tokens, base - 12]
            for record, delay_ms, run_at_ms, ikey, flow in part:
                index = 0
                if ikey is not None:
                    keys.append(self.keys.idempotency_key(ikey))
                    index = len(keys) - base
                    if replace_stale_keys:
                        index = -index
                job_id = new_job_id(now) if ids is None else next(ids)
                args.extend((job_id, record, delay_ms, run_at_ms, index))
                if flowing:
                    args.append(flow or b"0")
            reply = self.scripts.run("enqueue", keys, args)
            stored = [_text(x) for x in reply]
            if spans is not None:
                spans.sent(stored)
            out.extend(stored)
        return out

    def _encoded(
        self, req: EnqueueRequest, now: float
    ) -> tuple[bytes, int, int, str | None, str | None]:
        """One request checked and encoded: ``(record, delay ms, run_at ms, idempotency key,
        flow value or None)``.

        Every text is checked to encode as UTF-8 and every number against its bound
        (:mod:`reliable_queue.limits`) here, before anything of the batch is sent.
        """
        codec.check_text("task name", req.task)
        if req.idempotency_key is not None:
            codec.check_text("idempotency key", req.idempotency_key)
        flow = None
        if req.priority != DEFAULT_PRIORITY or req.fairness_key is not None:
            flow = flow_value(check_priority(req.priority), check_fairness_key(req.fairness_key))
        elif type(req.priority) is not int:  # 5.0 or True compare equal to 5
            check_priority(req.priority)
        delay = limits.number("delay", req.delay, low=0, high=MAX_DELAY_SECONDS)
        run_at_ms = 0
        if req.run_at is not None:
            latest = min(MAX_RUN_AT, now + MAX_DELAY_SECONDS)
            run_at = limits.number("run_at", req.run_at, low=0, high=latest)
            run_at_ms = max(_ms(run_at), 1)  # 0 would mean "no run_at" to the script
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
        limits.integer("max_attempts", max_attempts, low=0, high=MAX_ATTEMPTS)
        context = req.trace_context
        if context is not None and not isinstance(context, TraceContext):
            raise InvalidTraceContextError(
                f"task {req.task!r}: trace_context must be a TraceContext, not "
                f"{type(context).__name__}"
            )
        try:
            record = codec.encode_record(
                req.task, payload, int(now * 1000), max_attempts, req.idempotency_key, context
            )
        except TypeError as exc:  # orjson: a type JSON has no form for, bad text, a huge int
            found = codec.unencodable_path(payload)
            why = (
                f"{found[0]} is not valid text: character {found[2]} is a lone surrogate"
                if found
                else str(exc)
            )
            raise PayloadValidationError(f"task {req.task!r}: {why}") from None
        # orjson writes NaN / Infinity as null: look for them only when a null is there
        if b"null" in record:
            where = codec.non_finite_path(payload)
            if where is not None:
                raise PayloadValidationError(
                    f"task {req.task!r}: {where} is NaN or infinite; JSON cannot carry"
                    " non-finite numbers (send null or a string instead)"
                )
        limit = self.settings.max_payload_bytes
        if len(record) > limit:
            raise PayloadTooLargeError(
                f"job record for task {req.task!r} is {len(record)} bytes; limit {limit}"
            )
        return record, _ms(delay), run_at_ms, req.idempotency_key, flow

    def _register_name(self) -> None:
        if not self._registered:
            try:
                self.client.sadd(self.keys.registry, self.name)
            except UNAVAILABLE as exc:
                raise QueueConnectionError(str(exc)) from exc
            self._registered = True

    # -------------------------------------------------------------------- fetch
    def fetch_call(
        self,
        count: int,
        lease_seconds: float,
        worker_id: str,
        *,
        reap: bool = True,
        alone: bool = True,
    ) -> Call:
        """The script call behind :meth:`fetch`, for pipelining with settlements.

        Args:
            reap: reclaim expired leases first (False for the later calls of a split
                fetch: they must not reap the short leases the first call gave out).
            alone: the caller promises to run nothing else in its process while it
                runs what this call leases, so a suspect at the head of the line is
                leased (as the call's one job) and charged if lost. False: no suspect
                is leased; when one at the head leaves the call empty, its result says
                ``suspect_waiting`` (ADR 0021).

        Raises:
            QueueLimitError: ``count`` outside ``0..SCRIPT_BATCH`` (use :meth:`fetch_calls`),
                or ``lease_seconds`` outside ``(0, MAX_LEASE_SECONDS]``.
        """
        if not 0 <= count <= SCRIPT_BATCH:
            raise QueueLimitError(f"one fetch call leases 0..{SCRIPT_BATCH} jobs, not {count}")
        limits.number("lease_seconds", lease_seconds, low=0, high=MAX_LEASE_SECONDS, low_open=True)
        s = self.settings
        return Call(
            "fetch",
            self._flow_keys,
            (
                count,
                _ms(lease_seconds),
                worker_id,
                s.reap_limit if reap else 0,
                s.default_max_attempts,
                s.dlq_max_size,
                _ms(s.dlq_max_age_seconds),
                b"1" if alone else b"0",  # bytes: sent as they are, not formatted
            ),
        )

    def fetch_calls(
        self, count: int, lease_seconds: float, worker_id: str, *, alone: bool = True
    ) -> list[Call]:
        """The script calls that lease up to ``count`` jobs (``ceil(count / SCRIPT_BATCH)``).

        Send the first call alone and the others only if it came back full
        (:meth:`fetch_needs_rest`): a first call that leased a suspect (a job lost
        with its worker) leased it alone, and the later calls never lease one.
        ``alone`` is the first call's, as in :meth:`fetch_call`.

        Raises:
            QueueLimitError: ``count`` outside ``1..MAX_FETCH``.
        """
        if not 1 <= count <= MAX_FETCH:
            raise QueueLimitError(f"fetch count must be 1..{MAX_FETCH}, not {count}")
        sizes = [min(SCRIPT_BATCH, count - i) for i in range(0, count, SCRIPT_BATCH)]
        return [
            self.fetch_call(n, lease_seconds, worker_id, reap=i == 0, alone=alone and i == 0)
            for i, n in enumerate(sizes)
        ]

    @staticmethod
    def fetch_needs_rest(calls: Sequence[Call], first: FetchResult) -> bool:
        """Whether the later calls of a split fetch should be sent after ``first``.

        Args:
            calls: the fetch's calls, from :meth:`fetch_calls`.
            first: the parsed reply of ``calls[0]``.

        Returns:
            True when there are later calls and the first one leased its full count;
            a short first call means the line ran out or stopped at a suspect.
        """
        return len(calls) > 1 and len(first.jobs) == int(calls[0].args[0])

    def parse_fetch(self, reply: Sequence[Any]) -> FetchResult:
        """Turn a fetch script reply into a :class:`FetchResult`.

        The script leases only ids that are valid UTF-8 (others are dead-lettered as
        ``invalid_record``); records stay bytes and are decoded per job later.
        """
        wait_ms, reaped, more = int(reply[0]), int(reply[1]), bool(int(reply[2]))
        name, items, make = self.name, iter(reply[4:]), make_raw_job
        if len(reply) > 4 and type(reply[4]) is bytes:  # the usual bytes replies
            jobs = [
                make(name, job_id.decode(), token.decode(), int(attempt), record)
                for job_id, token, attempt, record in zip(items, items, items, items, strict=True)
            ]
        else:
            jobs = [
                make(name, _text(job_id), _text(token), int(attempt), record)
                for job_id, token, attempt, record in zip(items, items, items, items, strict=True)
            ]
        wait = None if jobs or wait_ms < 0 else wait_ms / 1000.0
        held = int(reply[3])
        return FetchResult(
            jobs,
            wait,
            reaped,
            more,
            not jobs and held == 1,
            held == 2,
            not jobs and held == 3,
            not jobs and held == 4,
        )

    def parse_fetches(self, replies: Sequence[Sequence[Any]]) -> FetchResult:
        """Merge the replies of :meth:`fetch_calls` into one :class:`FetchResult`."""
        if len(replies) == 1:
            return self.parse_fetch(replies[0])
        return self.merge_fetches([self.parse_fetch(r) for r in replies])

    @staticmethod
    def merge_fetches(parts: Sequence[FetchResult]) -> FetchResult:
        """One :class:`FetchResult` from the parsed parts of a split fetch, in order."""
        jobs = [j for p in parts for j in p.jobs]
        waits = [p.wait_seconds for p in parts if p.wait_seconds is not None]
        wait = None if jobs or not waits else min(waits)
        return FetchResult(
            jobs,
            wait,
            sum(p.reaped for p in parts),
            any(p.reap_more for p in parts),
            not jobs and any(p.suspect_waiting for p in parts),
            not jobs and any(p.paused for p in parts),
            not jobs and any(p.rate_limited for p in parts),
            not jobs and any(p.capped for p in parts),
        )

    def fetch(
        self,
        count: int = 1,
        *,
        lease_seconds: float | None = None,
        worker_id: str = "-",
        alone: bool = True,
    ) -> FetchResult:
        """Lease up to ``count`` ready jobs (after reaping and promoting due jobs).

        Args:
            count: most jobs to lease, ``1..MAX_FETCH`` (10,000); more than
                ``SCRIPT_BATCH`` (500) are leased by several script calls, each
                atomic: the first, then the rest in one more round trip if the first
                came back full (a suspect is leased alone, ADR 0002).
            lease_seconds: lease length (default ``settings.lease_seconds``).
            worker_id: recorded in each lease token (shown by ``explain``).
            alone: the caller runs nothing else in its process while it runs these
                jobs (the default, for a process that fetches in one place): a suspect
                at the head is leased, as the fetch's one job. False leases no suspect
                and reports one at the head as ``suspect_waiting`` (ADR 0021).

        Raises:
            QueueLimitError: ``count`` outside ``1..MAX_FETCH``.
            QueueConnectionError: Redis unreachable (no job was leased, or a leased one
                will be reaped when its lease expires).
        """
        lease = lease_seconds or self.settings.lease_seconds
        calls = self.fetch_calls(count, lease, worker_id, alone=alone)
        first = self.parse_fetch(self._run(calls[0]))
        if not self.fetch_needs_rest(calls, first):
            return first
        rest = [self.parse_fetch(r) for r in self.scripts.run_many(calls[1:])]
        return self.merge_fetches([first, *rest])

    def wait_for_work(self, timeout: float) -> bool:
        """Block on the wake-up list up to ``timeout`` seconds (no polling).

        Redis ends a BLPOP by its wall clock, so a step back of the host's clock would
        hold it as long as the step: past ``timeout`` + :data:`BLOCK_MARGIN_SECONDS`
        (on this process's monotonic clock) the wait is dropped with its connection,
        whatever the socket timeout, and counts as a timeout.

        Returns:
            True if woken by an enqueue / retry / redrive, False on timeout.

        Raises:
            QueueConnectionError: Redis unreachable.
        """
        timeout = max(timeout, 0.001)
        key = self.keys.key("wake")
        client = node_client(self.client, key)
        pool = client.connection_pool
        try:
            try:
                conn = pool.get_connection()
            except TypeError:  # redis-py before 5.3 takes a command name
                conn = pool.get_connection("BLPOP")
        except UNAVAILABLE as exc:
            raise QueueConnectionError(f"blocking wait failed: {exc}") from exc
        try:
            conn.send_command("BLPOP", key, timeout)
            if not conn.can_read(timeout + BLOCK_MARGIN_SECONDS):
                conn.disconnect()  # held past its timeout: the server's clock stepped back
                return False
            return conn.read_response() is not None
        except UNAVAILABLE as exc:
            conn.disconnect()
            raise QueueConnectionError(f"blocking wait failed: {exc}") from exc
        except redis.ResponseError as exc:
            if not is_redirect(exc):
                raise
            refresh(self.client)  # the slot moved: the next fetch finds its new owner
            return False
        except BaseException:
            conn.disconnect()
            raise
        finally:
            pool.release(conn)

    # ------------------------------------------------------------ flow control
    def pause(self, reason: str | None = None, by: str | None = None) -> PauseState:
        """Pause the queue: from the moment this returns, no fetch leases a job of it.

        The fetch script reads the paused flag atomically with its pop, so a worker that
        was already blocked waiting on the queue may wake but gets nothing. Jobs leased
        before run on and settle (ack, nack, dead) as usual; due delayed jobs are still
        promoted to ``ready``, where they wait; enqueue goes on. Idle workers of a paused
        queue sleep up to ``settings.max_block_seconds`` between fetches (ADR 0031).
        Pausing a paused queue keeps its ``since`` and replaces ``by`` and ``reason``.

        Args:
            reason: why, shown by the views (at most
                :data:`~reliable_queue.pausing.MAX_REASON_CHARS` characters; None: "").
            by: who (at most :data:`~reliable_queue.pausing.MAX_BY_CHARS`; None: "").

        Returns:
            The :class:`~reliable_queue.pausing.PauseState` now in force, with its
            ``fence``: the last fencing number issued before the pause took effect, so
            a lease numbered above it was made while the queue was paused (exact where
            ``since``, in ms, cannot order a lease of the same millisecond).

        Raises:
            QueueLimitError: ``reason`` or ``by`` not text, or too long (nothing sent).
            InvalidTextError: a text UTF-8 cannot encode (nothing sent).
            QueueDataError: the paused key (or stats) holds another type (nothing changed;
                :meth:`resume` removes a paused key of any type).
            QueueConnectionError: Redis unreachable (the pause may or may not be set).
        """
        why = bounded_text("reason", reason, MAX_REASON_CHARS)
        who = bounded_text("by", by, MAX_BY_CHARS)
        self._register_name()
        _, since, fence = self.scripts.run("pause", self._flow_keys, ["pause", who, why, 0])
        return PauseState(int(since) / 1000.0, who, why, fence=int(fence))

    def resume(self) -> bool:
        """Resume a paused queue: the next fetch leases again, and idle workers are woken.

        Returns:
            True when the queue was paused (a paused key of another type, a foreign
            writer's, is removed too), False when it was not.

        Raises:
            QueueDataError: ``ready`` or ``wake`` holds another type (nothing changed).
            QueueConnectionError: Redis unreachable (the resume may or may not be done).
        """
        args = ["resume", "", "", self.settings.wake_tokens]
        was, _ = self.scripts.run("pause", self._flow_keys, args)
        return bool(int(was))

    def set_limit(self, n: int, per_seconds: float) -> bool:
        """Limit the queue to ``n`` leases per ``per_seconds``, across every worker (ADR 0032).

        Decided by the fetch script with its pop, on the queue clock: a fetch leases at
        most what the window in force still allows. The limit applies from the next
        fetch: setting (or changing) it opens a new window then.

        Args:
            n: most jobs leased per window (int >= 1).
            per_seconds: the window in seconds (finite, 0.001 s .. 1e6 s).

        Returns:
            True when a limit was set before (it is replaced), False otherwise.

        Raises:
            QueueLimitError: a bad ``n`` or interval (nothing sent).
            QueueDataError: the limit key holds another type (nothing changed;
                :meth:`clear_limit` removes it).
            QueueConnectionError: Redis unreachable (the limit may or may not be set).
        """
        limit = make_limit(n, per_seconds)
        self._register_name()
        args = ["limit", str(limit.n), str(limit.per_ms), 0]
        was, _ = self.scripts.run("pause", self._flow_keys, args)
        return bool(int(was))

    def clear_limit(self) -> bool:
        """Remove the queue's rate limit (a limit key of any type).

        Returns:
            True when there was one, False otherwise.

        Raises:
            QueueConnectionError: Redis unreachable (it may or may not be removed).
        """
        was, _ = self.scripts.run("pause", self._flow_keys, ["unlimit", "", "", 0])
        return bool(int(was))

    def set_key_cap(self, cap: int) -> bool:
        """Let at most ``cap`` jobs of one fairness key be leased at once, across every
        worker (ADR 0033).

        Decided by the fetch script with its pop, from the next fetch: a job whose key
        holds ``cap`` leases is passed over (it stays waiting, first of its key). The
        count is the membership of a running set, so a lease that expires and is reaped
        gives its slot back; jobs leased before a cap was set hold no slot.

        Args:
            cap: an int in ``1..MAX_KEY_CAP``.

        Returns:
            True when a cap was set before (it is replaced), False otherwise.

        Raises:
            QueueLimitError: a bad ``cap`` (nothing sent).
            QueueDataError: the keycap key holds another type (nothing changed;
                :meth:`clear_key_cap` removes it).
            QueueConnectionError: Redis unreachable (the cap may or may not be set).
        """
        limits.integer("key cap", cap, low=1, high=MAX_KEY_CAP)
        self._register_name()
        was, _ = self.scripts.run("pause", self._flow_keys, ["cap", str(cap), "", 0])
        return bool(int(was))

    def clear_key_cap(self) -> bool:
        """Remove the per-key cap (a keycap key of any type); leased jobs keep their slots
        until they settle.

        Returns:
            True when there was one, False otherwise.

        Raises:
            QueueConnectionError: Redis unreachable (it may or may not be removed).
        """
        was, _ = self.scripts.run("pause", self._flow_keys, ["uncap", "", "", 0])
        return bool(int(was))

    def key_cap(self) -> int | None:
        """The per-key cap; None when none is set (or it does not read as one).

        Raises:
            QueueDataError: the keycap key holds another type than a string.
            QueueConnectionError: Redis unreachable.
        """
        key = self.keys.key("keycap")
        try:
            raw = self.client.get(key)
        except redis.ResponseError as exc:
            if str(exc).startswith("WRONGTYPE"):
                raise QueueDataError(note(self.client, key, KEY_TYPES["keycap"])) from exc
            raise
        except UNAVAILABLE as exc:
            raise QueueConnectionError(str(exc)) from exc
        return parse_key_cap(raw)

    def rate_limit(self) -> RateLimit | None:
        """The queue's rate limit; None when it has none (or it cannot be read).

        Raises:
            QueueDataError: the limit key holds another type than a hash.
            QueueConnectionError: Redis unreachable.
        """
        return parse_limit_state(self._flow_hash(self.keys.limit, "limit"))

    def paused(self) -> PauseState | None:
        """Who paused the queue, why and since when; None when it is not paused.

        Raises:
            QueueDataError: the paused key holds another type than a hash (fetch then
                refuses to lease; :meth:`resume` removes it).
            QueueConnectionError: Redis unreachable.
        """
        return parse_state(self._flow_hash(self.keys.paused, "paused"))

    def _flow_hash(self, key: str, kind: str) -> dict[Any, Any]:
        """HGETALL of a flow-control key (``kind``: its name in ``KEY_TYPES``).

        Raises:
            QueueDataError: the key holds another type than a hash.
            QueueConnectionError: Redis unreachable.
        """
        try:
            return self.client.hgetall(key)  # type: ignore[return-value]
        except redis.ResponseError as exc:
            if str(exc).startswith("WRONGTYPE"):
                raise QueueDataError(note(self.client, key, KEY_TYPES[kind])) from exc
            raise
        except UNAVAILABLE as exc:
            raise QueueConnectionError(str(exc)) from exc

    # ------------------------------------------------------------- settlements
    def ack_call(self, leases: Sequence[Lease]) -> Call:
        """The script call behind :meth:`ack` (at most ``SCRIPT_BATCH`` leases).

        Raises:
            QueueLimitError: more than ``SCRIPT_BATCH`` leases (use :meth:`ack_calls`).
        """
        _check_batch(leases)
        args: list[Any] = [_ms(self.settings.job_retention_seconds), len(leases)]
        for lease in leases:
            args.extend((lease.job_id, lease.token))
        return Call("ack", self._ack_keys, args)

    def ack_calls(self, leases: Sequence[Lease]) -> list[Call]:
        """The script calls that ack ``leases``, ``SCRIPT_BATCH`` per call."""
        return [self.ack_call(part) for part in chunks(list(leases)) if part]

    def ack(self, leases: Sequence[Lease]) -> AckResult:
        """Record success of leased jobs; stale lease tokens are refused and counted.

        More than ``SCRIPT_BATCH`` leases are acked by several script calls in one
        round trip, each atomic.

        Raises:
            QueueConnectionError: Redis unreachable (the acks may not be recorded;
                sending them again is safe).
            ReplicationTimeoutError: with ``settings.min_replicas``, recorded on the
                master but not acknowledged by enough replicas in time.
        """
        if not leases:
            return AckResult([], [])
        calls = self.ack_calls(leases)
        replies = [self._run(calls[0])] if len(calls) == 1 else self.scripts.run_many(calls)
        acked: list[str] = []
        refused: list[str] = []
        for reply in replies:
            a, r = _split(reply)
            acked.extend(a)
            refused.extend(r)
        return AckResult(acked, refused)

    def nack_call(self, lease: Lease, delay: float, info: dict[str, Any]) -> Call:
        """The script call behind :meth:`nack`.

        Raises:
            QueueLimitError: ``delay`` outside ``0..MAX_DELAY_SECONDS``.
        """
        limits.number("delay", delay, low=0, high=MAX_DELAY_SECONDS)
        return Call(
            "nack",
            self._flow_keys,
            (lease.job_id, lease.token, _ms(delay), codec.dumps(info), self.settings.wake_tokens),
        )

    def nack(
        self,
        lease: Lease,
        *,
        delay: float = 0.0,
        error: str = "",
        traceback: str = "",
        reason: str = "retry",
    ) -> bool:
        """A leased job failed; run it again after ``delay`` seconds.

        Args:
            reason: stored as the failure's reason (``retry``, or ``timed_out``).

        Returns:
            True if recorded, False if the lease token was stale (refused, counted).
        """
        info = self.failure_info(reason, error, traceback)
        return bool(self._run(self.nack_call(lease, delay, info)))

    def throttle_call(
        self,
        lease: Lease,
        delay: float,
        info: dict[str, Any],
        fallback_delay: float | None,
        fallback_info: dict[str, Any],
    ) -> Call:
        """The script call that settles a throttled run (ADR 0034).

        Args:
            lease: the run's lease.
            delay: seconds to hold the job back, ``0..MAX_DELAY_SECONDS``; then it goes
                first in its band, its delivery not counted as an attempt.
            info: the failure info kept for the throttle (a :meth:`failure_info` dict;
                the script adds this attempt's ``throttles`` count).
            fallback_delay: past ``settings.max_throttles`` for this attempt, the run is
                an ordinary failure: retried after this many seconds, or (None)
                dead-lettered as ``retries_exhausted``.
            fallback_info: the failure info recorded then.

        Raises:
            QueueLimitError: a delay outside ``0..MAX_DELAY_SECONDS``.
        """
        limits.number("delay", delay, low=0, high=MAX_DELAY_SECONDS)
        back = -1
        if fallback_delay is not None:
            back = _ms(limits.number("delay", fallback_delay, low=0, high=MAX_DELAY_SECONDS))
        s = self.settings
        return Call(
            "throttle",
            self._flow_keys,
            (
                lease.job_id,
                lease.token,
                _ms(delay),
                s.max_throttles,
                codec.dumps(info),
                back,
                codec.dumps(fallback_info),
                s.wake_tokens,
                s.dlq_max_size,
                _ms(s.dlq_max_age_seconds),
            ),
        )

    def throttle(
        self,
        lease: Lease,
        delay: float,
        *,
        error: str = "",
        fallback_delay: float | None = 0.0,
    ) -> str | None:
        """A leased job's run was throttled by a downstream: hold it back ``delay`` s, then
        serve it first in its band, with no attempt charged (ADR 0034).

        Args:
            lease: the run's lease.
            delay: seconds, ``0..MAX_DELAY_SECONDS``.
            error: what the downstream said (kept as the job's last failure).
            fallback_delay: what the run becomes past ``settings.max_throttles`` free
                throttles in this attempt: a retry after this many seconds, or (None) a
                dead letter (``retries_exhausted``).

        Returns:
            ``"throttled"``, ``"retried"`` or ``"dead"`` (past the budget); None when the
            lease token was stale (refused, counted).

        Raises:
            QueueLimitError: a delay outside its bound.
        """
        info = self.failure_info("throttled", error, "")
        fallback = self.failure_info(
            "retry" if fallback_delay is not None else "retries_exhausted",
            f"throttled more than {self.settings.max_throttles} times in one attempt: {error}",
            "",
        )
        code = int(self._run(self.throttle_call(lease, delay, info, fallback_delay, fallback)))
        return {1: "throttled", 2: "retried", 3: "dead"}.get(code)

    def dead_call(self, lease: Lease, reason: str, info: dict[str, Any]) -> Call:
        """The script call behind :meth:`dead`."""
        s = self.settings
        return Call(
            "dead",
            self._flow_keys,
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

        Raises:
            QueueLimitError: ``lease_seconds`` outside ``(0, MAX_LEASE_SECONDS]``.
        """
        if not leases:
            return []
        seconds = lease_seconds or self.settings.lease_seconds
        limits.number("lease_seconds", seconds, low=0, high=MAX_LEASE_SECONDS, low_open=True)
        lease_ms = _ms(seconds)
        refused: list[str] = []
        # a process's heartbeat may hold thousands of leases: SCRIPT_BATCH per call
        for part in chunks(list(leases)):
            args: list[Any] = [lease_ms, len(part)]
            for lease in part:
                args.extend((lease.job_id, lease.token))
            refused.extend(_text(x) for x in self.scripts.run("extend", self._keys, args))
        return refused

    def release_call(self, leases: Sequence[Lease], info: dict[str, Any] | None = None) -> Call:
        """The script call behind :meth:`release` (at most ``SCRIPT_BATCH`` leases).

        Args:
            leases: the jobs to hand back, unrun and uncharged.
            info: when given, recorded as each handed-back job's last failure (a
                ``failure_info`` dict; reason ``timed_out`` makes the job a suspect that
                fetch leases alone). None leaves their failure info as it was.

        Raises:
            QueueLimitError: more than ``SCRIPT_BATCH`` leases (use :meth:`release_calls`).
        """
        _check_batch(leases)
        args: list[Any] = [self.settings.wake_tokens, len(leases)]
        for lease in leases:
            args.extend((lease.job_id, lease.token))
        if info is not None:
            args.append(codec.dumps(info))
        return Call("release", self._flow_keys, args)

    def release_calls(
        self, leases: Sequence[Lease], info: dict[str, Any] | None = None
    ) -> list[Call]:
        """The script calls that release ``leases``, ``SCRIPT_BATCH`` per call (``info``
        as in :meth:`release_call`)."""
        return [self.release_call(part, info) for part in chunks(list(leases)) if part]

    @staticmethod
    def settled_leases(call: Call) -> list[Lease]:
        """The leases a settlement call (``ack``, ``nack``, ``dead``, ``throttle``,
        ``release``) names.

        Returns:
            The leases in the call's order; ``[]`` for a call of another script.
        """
        args = call.args
        if call.script in ("nack", "dead", "throttle"):
            return [Lease(_text(args[0]), _text(args[1]))]
        if call.script in ("ack", "release"):
            n = int(args[1])
            return [Lease(_text(args[2 + 2 * i]), _text(args[3 + 2 * i])) for i in range(n)]
        return []

    def release(self, leases: Sequence[Lease], info: dict[str, Any] | None = None) -> int:
        """Hand leased, unrun jobs back to the head of the queue (graceful shutdown).

        Args:
            leases: the jobs to hand back; their deliveries are not counted.
            info: recorded as each job's last failure, as in :meth:`release_call`.

        Returns:
            How many were handed back (stale leases are skipped).
        """
        if not leases:
            return 0
        return sum(int(self._run(call)) for call in self.release_calls(leases, info))

    def raise_fencing_floor(self, floor: int) -> int:
        """Make every later fencing token of this queue higher than ``floor``.

        Fencing numbers come from the queue clock and stay above the ones issued before
        Redis lost writes (ADR 0022); an application that still sees a token at or below
        one it already recorded (Redis restored from an old backup, or its clock set
        back across a crash) re-seeds the sequence from its own highest number here.
        One atomic script on the queue's slot (works on Redis Cluster).

        Args:
            floor: the highest fencing number the application has seen, an int in
                ``0..MAX_FENCING_FLOOR`` (2**52).

        Returns:
            The sequence now, ``max(sequence, floor)`` (int): the next lease gets a
            higher number.

        Raises:
            QueueLimitError: ``floor`` is not an int in that range (nothing sent).
            QueueDataError: the sequence key holds something other than such a number
                (nothing was changed).
            QueueConnectionError: Redis unreachable.
        """
        if type(floor) is not int or not 0 <= floor <= MAX_FENCING_FLOOR:
            raise QueueLimitError(
                f"a fencing floor is an int 0..{MAX_FENCING_FLOOR}, not {floor!r}"
            )
        return int(self.scripts.run("raise_fencing_floor", self._keys, [str(floor)]))

    def maintain(self, max_steps: int = 20) -> tuple[int, int]:
        """Upkeep in bounded steps: trim the DLQ by age and size, finished records by age.

        Each step is one script dropping at most ``TRIM_STEP`` (500) entries of each
        kind, so no call blocks Redis for long even when a bound was just lowered
        under a large DLQ; steps repeat while a full step was dropped, up to
        ``max_steps``. Workers run this periodically, so a quiet queue is trimmed
        too (not only when a new dead letter or ack arrives).

        Returns:
            ``(dead letters dropped, finished records dropped)``.

        Raises:
            QueueConnectionError: Redis unreachable.
            QueueDataError: a queue key holds the wrong type (nothing was changed).
        """
        s = self.settings
        args = (s.dlq_max_size, _ms(s.dlq_max_age_seconds), _ms(s.job_retention_seconds))
        dead = done = 0
        for _ in range(max_steps):
            a, b, step = (int(x) for x in self.scripts.run("maintain", self._flow_keys, args))
            dead, done = dead + a, done + b
            if a < step and b < step:
                break
        return dead, done

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
        ``ready`` is an LPOS from the oldest end, linear in how far from that end
        the job waits (at worst the length of the ready list).

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
        return self.locate_many([job_id])[0]

    def locate_many(self, job_ids: Sequence[str]) -> list[str]:
        """:meth:`locate` for many jobs in one pipelined round trip.

        Ids go :data:`LOCATE_BATCH` to a script call, so one call holds Redis for
        at most that many LPOS walks of ``ready``; each call is one consistent
        snapshot of its ids.

        Args:
            job_ids: the jobs' ids (any number, duplicates allowed); a non-UTF-8 id in
                its ``hex:`` form (:mod:`reliable_queue.raw_ids`).

        Returns:
            One of :data:`PLACES` per id, in order.

        Raises:
            InvalidTextError: an id holds a lone surrogate.
            QueueDataError: a structure's key holds a value of the wrong type.
            QueueConnectionError: Redis unreachable.
        """
        if not job_ids:
            return []
        ids = [id_member(job_id) for job_id in job_ids]
        calls = [Call("locate", self._flow_keys, part) for part in chunks(ids, LOCATE_BATCH)]
        if len(calls) == 1:
            replies = [self._run(calls[0])]
        else:
            replies = self.scripts.run_many(calls)
        out: list[str] = []
        for reply in replies:
            for i in range(0, len(reply), 2):
                place = _text(reply[i])
                out.append(place or ("nowhere" if int(reply[i + 1]) else "unknown"))
        return out

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
        return self.pending_jobs_for([idempotency_key])[0]

    def pending_jobs_for(self, idempotency_keys: Sequence[str]) -> list[str | None]:
        """:meth:`pending_job_for` for many keys: two round trips whatever their number.

        One pipelined GET of every key, then :meth:`locate_many` of the jobs found;
        a job counts when :func:`~reliable_queue.places.key_is_trusted` trusts its key.

        Args:
            idempotency_keys: the callers' keys (not the Redis key names).

        Returns:
            Per key, in order: the id of its unfinished job, or None.

        Raises:
            InvalidTextError: a key holds a lone surrogate.
            QueueDataError: a key holds a value of the wrong type (a foreign writer);
                :func:`reliable_queue.inspection.idempotency_jobs` reads each key on its
                own and names the unreadable ones instead.
            QueueConnectionError: Redis unreachable.
        """
        return [
            job_id if key_is_trusted(place) else None
            for job_id, place in self._jobs_of_keys(idempotency_keys)
        ]

    def drop_untrusted_keys(self, idempotency_keys: Sequence[str]) -> list[str]:
        """Delete each idempotency key whose job the queue no longer really holds.

        A key is kept while :func:`~reliable_queue.places.key_is_trusted` trusts it
        (its job is ready, delayed, active or dead-lettered). A key whose job finished,
        sits in no structure (a script that failed half-way, an evicted list) or is
        gone is deleted, so the next enqueue with it makes a new job instead of
        answering with the old id. Each deletion is a compare-and-delete (WATCH /
        MULTI on the key's own node): a key that changed meanwhile (another enqueue
        replaced it) is left alone. Reads are :meth:`pending_jobs_for`'s two round
        trips; each deletion is one more.

        Args:
            idempotency_keys: the callers' keys (not the Redis key names); absent
                keys are passed over.

        Returns:
            The keys deleted (callers' form, in the order given).

        Raises:
            InvalidTextError: a key holds a lone surrogate (nothing deleted).
            QueueDataError: a key holds a value of the wrong type, or a structure's
                key does (nothing deleted).
            QueueConnectionError: Redis unreachable (some keys may be deleted; the
                call may be repeated).
        """
        found = self._jobs_of_keys(idempotency_keys)
        dropped: list[str] = []
        for key, (job_id, place) in zip(idempotency_keys, found, strict=True):
            if job_id is not None and not key_is_trusted(place):
                if self._forget_key_if(key, job_id):
                    dropped.append(key)
        return dropped

    def _jobs_of_keys(self, idempotency_keys: Sequence[str]) -> list[tuple[str | None, str | None]]:
        """Per key: ``(job id, place)`` of the job it maps to, or ``(None, None)``."""
        if not idempotency_keys:
            return []
        names = [
            self.keys.idempotency_key(codec.check_text("idempotency key", key))
            for key in idempotency_keys
        ]
        try:
            if len(names) == 1:
                raw = [self.client.get(names[0])]
            else:
                pipe = self.client.pipeline(transaction=False)
                for name in names:
                    pipe.get(name)
                raw = pipe.execute()
        except redis.ResponseError as exc:
            if not wrong_type(exc):
                raise
            problem = f"an idempotency key holds a value of the wrong type: {exc}"
            raise QueueDataError(problem) from exc
        except UNAVAILABLE as exc:
            raise QueueConnectionError(str(exc)) from exc
        found = [(i, id_text(r)) for i, r in enumerate(raw) if r is not None]
        out: list[tuple[str | None, str | None]] = [(None, None)] * len(raw)
        places = self.locate_many([job_id for _, job_id in found])
        for (i, job_id), place in zip(found, places, strict=True):
            out[i] = (job_id, place)
        return out

    def _forget_key_if(self, idempotency_key: str, job_id: str) -> bool:
        """Delete an idempotency key while it still maps to ``job_id``; True when deleted."""
        key = self.keys.idempotency_key(idempotency_key)
        member = id_member(job_id)
        want = member if isinstance(member, bytes) else member.encode("utf-8")
        try:
            with node_client(self.client, key).pipeline(transaction=True) as pipe:
                pipe.watch(key)
                if pipe.get(key) != want:
                    return False
                pipe.multi()
                pipe.delete(key)
                pipe.execute()
                return True
        except redis.WatchError:
            return False
        except UNAVAILABLE as exc:
            raise QueueConnectionError(str(exc)) from exc

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
        replayed: list[str] = []
        skipped: list[str] = []
        for part in chunks(list(job_ids)):
            reply = self.scripts.run("replay", self._flow_keys, [self.settings.wake_tokens, *part])
            a, b = _split(reply)
            replayed.extend(a)
            skipped.extend(b)
        return replayed, skipped

    # ---------------------------------------------------------- dead letters
    @property
    def dead_letters(self) -> DeadLetters:
        """The :class:`~reliable_queue.dlq.DeadLetters` view of this queue."""
        from .dlq import DeadLetters

        return DeadLetters(self)

    def ids_in(self, kind: str, start: int = 0, stop: int = -1) -> list[str]:
        """Job ids in one structure (``ready``, ``delayed``, ``active``, ``dead``, ``done``);
        a non-UTF-8 id in its ``hex:`` form (see :func:`reliable_queue.inspection.ids_in`).

        Raises:
            QueueDataError: the structure's key holds a value of the wrong type.
            QueueConnectionError: Redis unreachable.
        """
        from . import inspection

        ids, problem = inspection.ids_in(self, kind, start, stop)
        if problem:
            raise QueueDataError(problem)
        return ids

    def size_of(self, kind: str) -> int:
        """Entries in one of the queue's structures now: one LLEN, ZCARD or HLEN.

        Args:
            kind: ``ready``, ``wake`` (lists), ``delayed``, ``active``, ``dead``,
                ``done`` (sorted sets), ``jobs``, ``attempts``, ``leases``, ``info`` or
                ``stats`` (hashes), as :data:`~reliable_queue.keys.KEY_ORDER` names them.

        Returns:
            The count (0 when the key does not exist).

        Raises:
            ValueError: ``kind`` is not one of those structures.
            QueueDataError: the key holds a value of another type (the note names it).
            QueueConnectionError: Redis unreachable.
        """
        command = _SIZE_COMMANDS.get(KEY_TYPES.get(kind, ""))
        if command is None:
            raise ValueError(f"no structure {kind!r} with a size")
        key = self.keys.key(kind)
        try:
            return int(getattr(self.client, command)(key))
        except redis.ResponseError as exc:
            _, problem = checked(self.client, exc, key, KEY_TYPES[kind])
            raise QueueDataError(problem or str(exc)) from None
        except UNAVAILABLE as exc:
            raise QueueConnectionError(str(exc)) from exc

    def lease_tokens(self) -> list[str]:
        """The lease token of every job leased now (``"<seq>:<worker id>"``), in no order.

        One HVALS of the ``leases`` hash: linear in the leases held, for operators and
        fault injection (which worker process holds work), not for a hot path.

        Returns:
            The tokens as text (bytes that are not UTF-8 replaced).

        Raises:
            QueueDataError: the ``leases`` key holds a value of another type.
            QueueConnectionError: Redis unreachable.
        """
        key = self.keys.key("leases")
        try:
            raw = self.client.hvals(key)
        except redis.ResponseError as exc:
            _, problem = checked(self.client, exc, key, "hash")
            raise QueueDataError(problem or str(exc)) from None
        except UNAVAILABLE as exc:
            raise QueueConnectionError(str(exc)) from exc
        return [t.decode("utf-8", "replace") if isinstance(t, bytes) else str(t) for t in raw]

    def evict_key_for_chaos(self, kind: str = "ready") -> int:
        """Fault injection: delete one structure's key, as an evicting Redis would.

        Reproduces ``maxmemory-policy allkeys-lru`` dropping a whole key: the jobs that
        were on it keep their records and idempotency keys but sit in no structure
        (:meth:`locate` says ``nowhere``) until the audit repairs them or a publisher
        drops their keys and enqueues again. For chaos runs and tests only: it breaks
        the queue's closed state machine on purpose. Two commands, not one script (a
        job added in between is stranded too, and not counted).

        Args:
            kind: the structure, as in :meth:`size_of` (``ready`` by default).

        Returns:
            Entries the key held just before it was deleted.

        Raises:
            ValueError: ``kind`` is not a structure with a size.
            QueueDataError: the key holds a value of another type (nothing deleted).
            QueueConnectionError: Redis unreachable.
        """
        held = self.size_of(kind)
        try:
            self.client.delete(self.keys.key(kind))
        except UNAVAILABLE as exc:
            raise QueueConnectionError(str(exc)) from exc
        return held


#: The command that counts a structure of each Redis type (:meth:`Queue.size_of`).
_SIZE_COMMANDS = {"list": "llen", "zset": "zcard", "hash": "hlen"}


def _check_batch(leases: Sequence[Lease]) -> None:
    if len(leases) > SCRIPT_BATCH:
        raise QueueLimitError(
            f"one script call takes at most {SCRIPT_BATCH} leases, not {len(leases)}"
        )


__all__ = ["DEAD_REASONS", "LOCATE_BATCH", "PENDING_PLACES", "PLACES", "Queue", "QueueError"]
