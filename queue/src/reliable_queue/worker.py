"""The worker: lanes that fetch, run and settle jobs, plus heartbeat and shutdown.

Each lane is a thread bound to one queue. It sends the settlements (acks,
retries, dead letters) of its last batch and the fetch of the next batch in
one pipelined round trip, runs the batch, and repeats; when the queue is
empty it blocks on Redis (BLPOP on the queue's wake list) until woken or until
the next delayed job / lease expiry is due. Nothing here polls.
"""

from __future__ import annotations

import gc
import logging
import os
import random
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import redis

from .attempts import GuardPolicy
from .audit import audit
from .codec import RecordDecodeError, decode_fields
from .errors import IsolatedChildError, QueueConnectionError, ReplicationTimeoutError
from .execution import (
    Dead,
    Middleware,
    Outcome,
    Prepared,
    Retry,
    Succeeded,
    Throttle,
    outcome_of,
    prepare,
    run_batch,
    run_prepared,
)
from .gate import LaneGate, Ticket
from .heartbeat import Heartbeat, Held, LaneRun, LeaseBook
from .job import FetchResult, Lease, RawJob
from .limits import MAX_FETCH
from .middleware import BatchMiddleware
from .policy import should_retry, time_limit_of
from .presence import COUNTS, LaneState, WorkerState, publish_every
from .presence_publisher import PresencePublisher
from .queue import Queue
from .registry import TaskRegistry
from .replies import split as _split
from .scripts import Call
from .settings import QueueSettings
from .shutdown import StopRequest, StopSignals

if TYPE_CHECKING:  # process isolation is imported by the workers that use it
    from .isolation import Killed, Lost

log = logging.getLogger("reliable_queue.worker")


@dataclass
class WorkerHooks:
    """Fault-injection points (tests and chaos runs); each may kill the process.

    Attributes:
        after_fetch: called with the leased jobs right after a fetch returned.
        before_settle: called with the settlement calls right before they are sent
            (after the handlers' effects, before the acks).
        on_outcome: called with each job and its outcome (Succeeded / Retry / Dead /
            Throttle)
            before it is settled, e.g. to record a failure in the application's
            database. An exception here is logged and does not change the outcome.
        on_attempt_lost: called with ``(queue name, lease, reason)`` each time this
            process takes an attempt's lease from it before the attempt entered its
            guarded block: its time limit passed (``timed_out``), its lane was
            abandoned with it (``abandoned``), or an extend was refused
            (``lease_lost``). That attempt then commits nothing (its guard is
            sealed, ADR 0023). Called from the heartbeat thread; an exception is
            logged.
        on_settled: called with ``(queue name, script, leases, refused job ids)`` for
            each settlement call of a lane (``ack``, ``nack``, ``dead``, ``release``,
            ``throttle``) once its reply came back: the leases it named, and the ids
            among them whose token was stale (refused). A throttle past its attempt's
            budget is told as what it became (``nack``: retried, or ``dead``). An
            exception is logged.
    """

    after_fetch: Callable[[list[RawJob]], None] | None = None
    before_settle: Callable[[list[Call]], None] | None = None
    on_outcome: Callable[[RawJob, Outcome], None] | None = None
    on_attempt_lost: Callable[[str, Lease, str], None] | None = None
    on_settled: Callable[[str, str, list[Lease], list[str]], None] | None = None


@dataclass
class WorkerCounters:
    """What this worker process did (local, for logs and reports)."""

    counts: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, name: str, n: int = 1) -> None:
        """Bump counter ``name`` by ``n``."""
        with self.lock:
            self.counts[name] += n


@dataclass(frozen=True)
class LaneView:
    """One lane of a worker process as :meth:`Worker.lanes` sees it.

    Attributes:
        queue: the queue it serves.
        alive: its thread has not ended (a lane opened a moment ago, whose thread is
            about to start, counts as alive).
        abandoned: a run of its batch overstayed its time limit and a fresh lane took
            its place; its thread may still be stuck in the handler.
        progress_at: when it last began a turn of its loop (monotonic seconds); an
            idle lane turns at least every ``max_block_seconds``.
        busy_since: when it began running its current batch (monotonic seconds), or
            None between batches.
        job_id: the first job of that batch (None between batches).
        task: that job's task (None between batches, or when its record does not decode).
        jobs: jobs in that batch (0 between batches).
    """

    queue: str
    alive: bool
    abandoned: bool
    progress_at: float
    busy_since: float | None
    job_id: str | None = None
    task: str | None = None
    jobs: int = 0


def _batch_head(batch: list[RawJob] | None) -> tuple[str | None, str | None, int]:
    """``(first job id, its task, jobs)`` of a lane's batch; ``(None, None, 0)`` for none."""
    if not batch:
        return None, None, 0
    try:
        task: str | None = decode_fields(batch[0].record)[0]
    except RecordDecodeError:
        task = None
    return batch[0].job_id, task, len(batch)


def _ended(thread: threading.Thread) -> bool:
    """The thread ran and returned (a lane opened but not started yet has not ended)."""
    return thread.ident is not None and not thread.is_alive()


#: the result of a run the lane settled itself (an isolated call it stopped)
_SETTLED = object()


def _signal_name(signum: int) -> str:
    """``SIGTERM`` for 15; ``signal 64`` for a number with no name."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


#: What a throttle call became past its attempt's budget, by its reply (throttle.lua).
THROTTLE_BECAME = {2: "nack", 3: "dead"}


def throttle_hold(calls: Sequence[Call], bound: float) -> float:
    """Seconds a lane waits after a batch whose every run was throttled (ADR 0034): the
    shortest delay its downstream asked for, at most ``bound``; 0 when any run was not
    throttled (or there was none)."""
    if not calls or any(call.script != "throttle" for call in calls):
        return 0.0
    return min(min(int(call.args[2]) for call in calls) / 1000.0, bound)


def default_worker_id() -> str:
    """``<host>:<pid>:<4 random hex>``; unique per process start."""
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(2).hex()}"


class Worker:
    """Runs registered handlers for jobs of one or more queues.

    Args:
        client: redis-py client (``decode_responses=False``; ``socket_timeout``
            above ``settings.max_block_seconds``).
        queues: queue names to serve.
        registry: task handlers.
        prefix: key namespace (as given to :class:`Queue`).
        concurrency: lanes (threads) per queue.
        batch_size: jobs leased per fetch per lane.
        settings: queue limits; ``lease_seconds`` is the lease length.
        grace_seconds: on SIGTERM/SIGINT, how long in-flight jobs may finish before
            the rest are handed back.
        middleware: wrappers around each handler call, outermost first; with batch
            tasks in the registry each must be a
            :class:`~reliable_queue.middleware.BatchMiddleware` (it then sees every
            job of a batch, as it sees a single job).
        hooks: fault-injection points.
        rng: jitter source for retry backoff.
        worker_id: shown as lease owner (default :func:`default_worker_id`).
        clock: monotonic seconds, for run time limits and for telling a forwarded
            copy of a stop signal from a second one (default ``time.monotonic``).
        isolated_registry: ``"package.module:function"``, a zero-argument factory
            returning the :class:`TaskRegistry` an isolated child runs handlers from
            (needed when a task has ``isolation="process"``; the child calls it, so
            engines and clients are built there).
        presence: publish this process's state for the workers view
            (``reliable_queue.presence``): one script call every half heartbeat
            interval (at most every 5 s), and a last one, saying why, when it stops.

    Time limits: a run of a task with a time limit (its ``RetryPolicy.time_limit``,
    else ``settings.default_time_limit_seconds``) that is still going at the first
    heartbeat past the limit fails with reason ``timed_out``: it is retried with
    backoff, or dead-lettered as ``timed_out`` at max attempts, and its lease is no
    longer extended. A Python thread cannot be killed, so its lane is abandoned: a
    fresh lane takes its place at once, the jobs its batch had finished are settled
    at once (ack, retry or dead letter, as their lane would have), those it had not
    started are handed back, and the old thread exits when the handler returns (its
    late result is ignored). So a hung run is released within its limit plus
    one heartbeat interval (a third of the lease). A batch task's jobs share one
    handler call, so when that call times out the job that hung is not known: the
    whole batch is handed back uncharged and each of its jobs is leased alone next;
    only a run that times out alone counts as an attempt (ADR 0005).

    Suspects: a job that may have killed its process (lost with it, or timed out)
    runs alone in the process, so that only it is charged if the process dies again
    (ADR 0021). The lanes share one gate (:mod:`reliable_queue.gate`): each holds it
    shared while it fetches and runs a batch, whose fetch leases no suspect; a lane
    told a suspect waits takes it exclusively once the other lanes' batches have
    run, fetches the suspect alone, runs it, and settles it before the others go on.
    A lane abandoned at its time limit gives up its hold: its stuck thread no longer
    counts as running. One worker per process is what the gate assumes.

    Process isolation: a task with ``isolation="process"`` runs each handler call in a
    child process of its lane (``reliable_queue.isolation``), which the lane itself
    kills at the run's time limit (not while ``ctx.hold_lease()`` is held in the child,
    for at most one lease): the lane is free at once and the run is settled as
    ``timed_out`` by the rules above. A child that dies otherwise is an ordinary
    failure of a lone run; a batch call whose child died is handed back uncharged,
    each job run alone next. The worker's middleware runs in the lane, around the call.

    Raises:
        ValueError: ``concurrency`` or ``batch_size`` out of range, or no queue; a task
            with process isolation and no usable ``isolated_registry``.
        TypeError: a plain middleware with batch tasks in the registry (it could not
            see their jobs one by one).
    """

    def __init__(
        self,
        client: redis.Redis,
        queues: Sequence[str],
        registry: TaskRegistry,
        *,
        prefix: str = "rq",
        concurrency: int = 1,
        batch_size: int = 10,
        settings: QueueSettings | None = None,
        grace_seconds: float = 10.0,
        middleware: Sequence[Middleware] = (),
        hooks: WorkerHooks | None = None,
        rng: random.Random | None = None,
        worker_id: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        isolated_registry: str | None = None,
        presence: bool = True,
    ) -> None:
        if concurrency < 1 or not 1 <= batch_size <= MAX_FETCH:
            raise ValueError(f"concurrency must be >= 1 and batch_size 1..{MAX_FETCH}")
        if not queues:
            raise ValueError("a worker needs at least one queue")
        self.settings = settings or QueueSettings()
        self.queues = [
            Queue(client, q, prefix=prefix, settings=self.settings, registry=registry)
            for q in queues
        ]
        self.registry = registry
        self.concurrency = concurrency
        self.batch_size = batch_size
        self.grace_seconds = grace_seconds
        self.middleware = list(middleware)
        if any(d.batch for d in registry) and not all(
            isinstance(m, BatchMiddleware) for m in self.middleware
        ):
            raise TypeError("a worker serving batch tasks takes only BatchMiddleware middleware")
        self._isolated = frozenset(d.name for d in registry if d.isolation == "process")
        if self._isolated and isolated_registry is None:
            raise ValueError(
                f"task(s) {', '.join(sorted(self._isolated))} run in a child process: "
                "give the worker isolated_registry='package.module:function'"
            )
        if isolated_registry is not None:
            from .isolation import load_factory

            load_factory(isolated_registry)  # fails here, not in every child
        self.isolated_registry = isolated_registry
        self.hooks = hooks or WorkerHooks()
        self.rng = rng or random.Random()
        self.worker_id = worker_id or default_worker_id()
        self.counters = WorkerCounters()
        self._guards = GuardPolicy(self.settings.lease_seconds, clock)
        self.book = LeaseBook(self._guards, self._attempt_lost)  # attempt guards
        self.gate = LaneGate()
        self.stopping = threading.Event()
        self._halt = threading.Event()  # ends the heartbeat
        lease = self.settings.lease_seconds
        self.clock = clock
        self.heartbeat = Heartbeat(
            self.book, lease, max(lease / 3.0, 0.05), self._halt, on_beat=self._check_time_limits
        )
        self._lanes: list[threading.Thread] = []
        self._lane_runs: dict[threading.Thread, LaneRun] = {}
        self._lanes_lock = threading.Lock()
        self._lane_seq = 0
        self._stop_signals = StopSignals(clock=clock)
        self._started_at: float | None = None
        self.stop_reason: str | None = None
        """Why the worker stops (a signal, a caller's reason), once it does."""
        self.presence = (
            PresencePublisher(
                client,
                prefix,
                self.worker_id,
                self._presence_state,
                publish_every(self.heartbeat.interval),
                self._halt,
            )
            if presence
            else None
        )

    def _attempt_lost(self, held: Held, reason: str) -> None:
        hook = self.hooks.on_attempt_lost
        if hook is not None:
            try:
                hook(held.queue.name, held.lease, reason)
            except Exception:
                log.exception("on_attempt_lost hook failed for job %s", held.lease.job_id)

    # ----------------------------------------------------------------- control
    def start(self) -> None:
        """Start the heartbeat, the upkeep thread, the lanes and the presence publisher
        (non-blocking)."""
        self._started_at = self.clock()
        self.heartbeat.start()
        if self.settings.maintenance_interval_seconds or self.settings.audit_interval_seconds:
            threading.Thread(target=self._upkeep, name="upkeep", daemon=True).start()
        for queue in self.queues:
            for _ in range(self.concurrency):
                self._open_lane(queue)
        if self.presence is not None:
            self.presence.start()
        log.info("worker %s serving %s", self.worker_id, ", ".join(q.name for q in self.queues))

    def _open_lane(self, queue: Queue) -> None:
        run = LaneRun(queue, progress_at=self.clock())
        with self._lanes_lock:
            for old in [t for t in self._lanes if not t.is_alive() and t in self._lane_runs]:
                if self._lane_runs[old].abandoned.is_set():  # an abandoned lane that ended
                    self._lanes.remove(old)
                    del self._lane_runs[old]
            name = f"lane-{queue.name}-{self._lane_seq}"
            self._lane_seq += 1
            thread = threading.Thread(target=self._lane, args=(queue, run), name=name, daemon=True)
            self._lanes.append(thread)
            self._lane_runs[thread] = run
        thread.start()

    def _live_lanes(self) -> list[threading.Thread]:
        """Lane threads that are not abandoned (an abandoned one may never return)."""
        with self._lanes_lock:
            return [t for t in self._lanes if not self._lane_runs[t].abandoned.is_set()]

    def lanes(self) -> list[LaneView]:
        """What each lane of this process is doing now (for health probes and metrics).

        Returns:
            One :class:`LaneView` per lane opened: the serving ones, each abandoned one
            whose thread is still stuck in a handler, and those that ended (``alive``
            False: the worker is stopping, or the lane died). Times are on the
            worker's monotonic clock (``clock``), seconds.
        """
        with self._lanes_lock:
            runs = list(self._lane_runs.items())
        views = []
        for thread, run in runs:
            if _ended(thread) and run.abandoned.is_set():
                continue
            busy_since = run.busy_since
            job_id, task, jobs = _batch_head(run.batch if busy_since is not None else None)
            views.append(
                LaneView(
                    queue=run.queue.name,
                    alive=not _ended(thread),
                    abandoned=run.abandoned.is_set(),
                    progress_at=run.progress_at,
                    busy_since=busy_since,
                    job_id=job_id,
                    task=task,
                    jobs=jobs,
                )
            )
        return views

    def _presence_state(self, state: str | None = None) -> WorkerState:
        """This process's state for the workers view (``reliable_queue.presence``).

        Args:
            state: ``stopped`` for the last one; None: ``running``, or ``stopping``
                once a stop was asked for.
        """
        now = self.clock()
        lanes = []
        for view in self.lanes():
            if not view.alive:
                continue
            kind = "abandoned" if view.abandoned else "idle" if view.busy_since is None else "busy"
            busy = None if view.busy_since is None else max(now - view.busy_since, 0.0)
            lanes.append(LaneState(view.queue, kind, busy, view.job_id, view.task, view.jobs))
        with self.counters.lock:
            counts = {k: self.counters.counts[k] for k in COUNTS if k in self.counters.counts}
        host, pid = socket.gethostname(), os.getpid()
        return WorkerState(
            host=host,
            pid=pid,
            queues=[q.name for q in self.queues],
            concurrency=self.concurrency,
            batch_size=self.batch_size,
            up_seconds=0.0 if self._started_at is None else now - self._started_at,
            every=self.presence.every if self.presence is not None else 0.0,
            state=state or ("stopping" if self.stopping.is_set() else "running"),
            exit_reason=self.stop_reason,
            counts=counts,
            lanes=lanes,
        )

    def request_stop(self, reason: str = "stop requested") -> None:
        """Stop fetching; in-flight jobs finish, unstarted ones are handed back.

        Args:
            reason: why, as the worker's last log line and its published state say it
                (the first reason given is kept).
        """
        if self.stop_reason is None:
            self.stop_reason = reason
        self.stopping.set()
        self.gate.close()  # a lane waiting for its turn goes on to stop

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the lanes; after ``timeout`` s hand back what is still held.

        Returns:
            True if every lane finished in time.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        for lane in self._live_lanes():
            lane.join(None if deadline is None else max(deadline - time.monotonic(), 0))
        clean = not any(lane.is_alive() for lane in self._live_lanes())
        if not clean:
            self._hand_back()
        self._halt.set()
        if self.presence is not None:
            self.presence.last(self._presence_state("stopped"))
        return clean

    def run(self, install_signals: bool = True, freeze_gc: bool = True) -> None:
        """Serve until SIGTERM/SIGINT (or :meth:`request_stop`), then shut down gracefully.

        A first signal stops fetching and waits up to ``grace_seconds`` for in-flight
        jobs; a second signal exits the process at once (leases then expire and are
        reaped by other workers). The same signal again within
        ``reliable_queue.shutdown.REPEAT_WINDOW_SECONDS`` of the first is not a second
        request: it is a copy forwarded by ``uv run`` or a supervisor.

        Args:
            install_signals: handle SIGTERM and SIGINT as above (main thread only).
            freeze_gc: before serving, collect garbage once and move every object
                alive then (modules, the registry, clients) out of the cyclic
                collector's reach (``gc.freeze()``). The per-job values a lane makes
                start collections, and each full one traversed the whole start-up
                heap: a fifth of the worker's instructions per job in a drain. Objects
                frozen are still freed by reference counting; only a cycle among them
                that becomes garbage later is never collected. Like the signal
                handlers, this acts on the whole process: pass False when the process
                is not the worker's own.
        """
        if freeze_gc:
            gc.collect()
            gc.freeze()
        if install_signals:
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
        self.start()
        while not self.stopping.wait(0.5):
            if not any(lane.is_alive() for lane in self._live_lanes()):
                self.stop_reason = self.stop_reason or "every lane ended"
                break
        clean = self.join(self.grace_seconds)
        reason = self.stop_reason or "stop requested"
        log.info(
            "worker %s stopped (%s)%s: %s",
            self.worker_id,
            reason,
            "" if clean else f"; in-flight jobs handed back after {self.grace_seconds:g} s",
            dict(self.counters.counts),
            extra={"exit_reason": reason},
        )

    def _on_signal(self, signum: int, frame: Any) -> None:
        request = self._stop_signals.receive(signum)
        name = _signal_name(signum)
        if request is StopRequest.REPEAT:
            log.debug("%s again at once: a forwarded copy, still draining", name)
            return
        if request is StopRequest.EXIT:
            log.warning(
                "worker %s: second signal (%s), exiting now; held leases will expire and be reaped",
                self.worker_id,
                name,
                extra={"exit_reason": f"second signal {name}"},
            )
            os._exit(128 + signum)
        log.info("%s: finishing in-flight jobs (grace %.1fs)", name, self.grace_seconds)
        self.request_stop(f"signal {name}")

    def _hand_back(self) -> None:
        held = self.book.take_all()
        for queue in {h.queue.name: h.queue for h in held}.values():
            mine = [h for h in held if h.queue is queue]
            unstarted = [h.lease for h in mine if not h.started]
            try:
                n = queue.release(unstarted)
                for h in mine:
                    if h.started:
                        queue.nack(h.lease, error="worker shut down before the job finished")
                log.info(
                    "handed back %d unstarted and %d started jobs of %s",
                    n,
                    len(mine) - len(unstarted),
                    queue.name,
                )
            except (QueueConnectionError, redis.RedisError) as exc:
                log.warning("hand-back failed (%s); leases will expire and be reaped", exc)

    def _upkeep(self) -> None:
        """Bounded trims and the audit, on their intervals, until the worker halts.

        First runs come after half to one interval (random), so the workers of one
        fleet do not all start at once; each step is bounded, and every failure is
        logged only.
        """
        s = self.settings
        now = time.monotonic()
        due = {
            "maintain": now + self.rng.uniform(0.5, 1.0) * s.maintenance_interval_seconds,
            "audit": now + self.rng.uniform(0.5, 1.0) * s.audit_interval_seconds,
        }
        every = {"maintain": s.maintenance_interval_seconds, "audit": s.audit_interval_seconds}
        while True:
            active = {k: t for k, t in due.items() if every[k] > 0}
            wait = max(min(active.values()) - time.monotonic(), 0.0)
            if self._halt.wait(wait):
                return
            for kind, at in active.items():
                if time.monotonic() < at:
                    continue
                due[kind] = time.monotonic() + every[kind]
                for queue in self.queues:
                    try:
                        self._upkeep_once(kind, queue)
                    except Exception as exc:
                        log.warning("queue %s: %s failed: %s", queue.name, kind, exc)

    def _upkeep_once(self, kind: str, queue: Queue) -> None:
        if kind == "maintain":
            dead, done = queue.maintain()
            if dead or done:
                log.info(
                    "queue %s: dropped %d dead letters and %d finished records",
                    queue.name,
                    dead,
                    done,
                )
            return
        report = audit(queue, repair=True)
        self.counters.add("audits")
        if not report.clean:
            log.warning(
                "queue %s: audit found %d orphan(s) (%d put back on ready), %d double(s),"
                " %d member(s) without a record",
                queue.name,
                report.orphans,
                report.repaired,
                report.doubles,
                report.no_record,
            )

    # ------------------------------------------------------------------- lanes
    def _lane(self, queue: Queue, run: LaneRun) -> None:
        """A lane never dies of a bug in a hook or the library: it logs and goes on.

        Jobs it held when the error struck keep their leases until they expire
        and are reaped, so nothing is lost.
        """
        while True:
            try:
                self._lane_loop(queue, run)
                break
            except Exception:
                self.gate.leave(run.ticket)  # a failed lane holds up no other lane
                log.exception("lane of queue %s failed; restarting it in 1 s", queue.name)
                if self.stopping.wait(1.0):
                    break
        if run.child is not None:  # (a thread that dies takes its child along: PDEATHSIG)
            run.child.close()

    def _lane_loop(self, queue: Queue, run: LaneRun) -> None:
        pending: list[Call] = []
        backoff = 0.05
        lease = self.settings.lease_seconds
        # the fetch's calls are the same every time (immutable): built once per lane. A
        # batch runs beside the other lanes of the process, so it leases no suspect; a
        # suspect waiting at the head is fetched alone, under the gate's exclusive hold
        fetch = queue.fetch_calls(self.batch_size, lease, self.worker_id, alone=False)
        fetch_alone = [queue.fetch_call(1, lease, self.worker_id, alone=True)]
        alone = False  # the last fetch found a suspect waiting: the next one runs alone
        gate, ticket = self.gate, run.ticket
        while True:
            run.progress_at = self.clock()  # read by lanes(): liveness probes
            if self.stopping.is_set() or run.abandoned.is_set():
                parts = []
            else:
                parts = fetch_alone if alone else fetch
            # a split fetch sends its later calls only after a full first call
            fetches = parts[:1]
            # the gate is held from sending a fetch until its batch has run, and kept
            # from one batch to the next while no lane waits to run alone
            if not fetches or alone:
                gate.leave(ticket)  # stopping, or about to wait for the exclusive hold
            if fetches and not ticket.holds and (alone or not gate.try_shared(ticket)):
                pending = self._wait_at_gate(queue, ticket, pending, exclusive=alone)
                if not ticket.holds:
                    continue  # the gate closed: the worker is stopping
            calls = pending + fetches
            if not calls:
                return
            if pending and self.hooks.before_settle:
                self.hooks.before_settle(pending)
            sent = self.clock()  # the leases fetched now end one lease after this, or later
            replies = self._lane_round_trip(queue, calls, ticket, backoff)
            if replies is None:  # Redis unavailable: the settlements are kept for the retry
                backoff = min(backoff * 2, 5.0)
                continue
            backoff = 0.05
            settled = len(calls) - len(fetches)
            pending = self._check_settled(queue, pending, replies[:settled])
            if not fetches:
                if not pending:
                    return
                continue
            fetched = self._fetched(queue, replies[settled:])
            if not fetched:
                gate.leave(ticket)
                self.stopping.wait(backoff)
                continue
            result = queue.parse_fetches(fetched)
            if queue.fetch_needs_rest(parts, result):
                result = self._fetch_rest(queue, parts[1:], result)
            if result.reaped:
                self.counters.add("reaped", result.reaped)
            if not result.jobs:
                gate.leave(ticket)
                alone = result.suspect_waiting and not alone
                if alone or result.reap_more or pending:
                    continue
                if result.paused:
                    # jobs wait but the queue is paused: the wake-up list would wake this
                    # lane at every enqueue, so it sleeps its usual bound instead and
                    # fetches again (the fetch reaps and promotes meanwhile, ADR 0031)
                    self.stopping.wait(self.settings.max_block_seconds)
                    continue
                if result.rate_limited:
                    # the rate limit allows none now: sleep until its window reopens (or
                    # a delayed job is due, or the usual bound), not on the wake-up list,
                    # which every enqueue would wake (ADR 0032)
                    self.counters.add("rate_limited", 1)
                    wait = result.wait_seconds or self.settings.max_block_seconds
                    self.stopping.wait(min(wait, self.settings.max_block_seconds))
                    continue
                self._wait_for_work(queue, result.wait_seconds, backoff)
                continue
            calls = self._run_batch(queue, result.jobs, run, sent)
            hold = throttle_hold(calls, self.settings.max_block_seconds)
            pending = self._after_batch(queue, pending + calls, ticket, alone=alone)
            alone = False
            if hold:
                # every run of the batch was throttled by its downstream: settle now and
                # wait what it asked (at most the usual bound) before fetching again
                pending = self._send_settlements(queue, pending)
                gate.leave(ticket)
                self.stopping.wait(hold)
            if run.abandoned.is_set():
                # a run overstayed its time limit and a fresh lane took over: settle
                # what finished (once; a refused ack is harmless) and stop
                gate.leave(ticket)
                log.warning("lane %s: abandoned after a time limit; exiting", queue.name)
                self._settle_once(queue, pending)
                return

    def _after_batch(
        self, queue: Queue, pending: list[Call], ticket: Ticket, *, alone: bool
    ) -> list[Call]:
        """Settle or keep a batch's settlements; return those the lane keeps.

        A batch run alone is settled before the exclusive hold ends (nothing else ran
        meanwhile); the gate is left then, and also when a lane waits to run alone
        (``gate.waiting``, read unlocked: a hint).
        """
        if alone:
            pending = self._send_settlements(queue, pending)
            self.gate.leave(ticket)
        elif self.gate.waiting:
            self.gate.leave(ticket)
        return pending

    def _lane_round_trip(
        self, queue: Queue, calls: list[Call], ticket: Ticket, backoff: float
    ) -> list[Any] | None:
        """Send a lane's settlements and fetch in one round trip; their replies, in order.

        ``partial``: a call that ran keeps its reply even if another one failed or the
        round trip gave up on re-sends; a call that did not run is None. A replication
        timeout is counted and its replies are used (the scripts ran on the master;
        only the replica acknowledgement is missing), rather than re-sent.

        Returns:
            The replies; None when Redis is unreachable or refusing for now (READONLY
            after a failover, OOM, ...): the lane's gate hold is then left and the lane
            has slept ``backoff`` seconds, to try again (a lane never dies of Redis
            trouble).
        """
        try:
            return queue.scripts.run_many(calls, partial=True)
        except ReplicationTimeoutError as exc:
            log.warning("queue %s: %s", queue.name, exc)
            self.counters.add("replication_timeouts")
            return exc.replies
        except (QueueConnectionError, redis.RedisError) as exc:
            self.gate.leave(ticket)
            log.warning(
                "queue %s: Redis unavailable (%s); retrying in %.2fs", queue.name, exc, backoff
            )
            self.stopping.wait(backoff) if not self.stopping.is_set() else time.sleep(backoff)
            return None

    @staticmethod
    def _fetched(queue: Queue, replies: list[Any]) -> list[Any]:
        """The fetch calls' replies that hold a fetch (a failed call is logged, skipped)."""
        fetched = []
        for reply in replies:
            if isinstance(reply, Exception):
                log.warning("queue %s: fetch failed: %s", queue.name, reply)
            elif reply is not None:
                fetched.append(reply)
        return fetched

    def _wait_for_work(self, queue: Queue, wait_seconds: float | None, backoff: float) -> None:
        """Block until work may be due: ``wait_seconds`` (None: none due), at most
        ``max_block_seconds``; a failed wait is logged and followed by ``backoff`` s."""
        limit = self.settings.max_block_seconds
        wait = limit if wait_seconds is None else min(wait_seconds, limit)
        try:
            queue.wait_for_work(wait)
        except (QueueConnectionError, redis.RedisError) as exc:
            log.warning("queue %s: blocking wait failed (%s)", queue.name, exc)
            self.stopping.wait(backoff)

    @staticmethod
    def _settle_once(queue: Queue, pending: list[Call]) -> None:
        """Send the settlements of an abandoned lane once; on failure their leases expire
        and are reaped."""
        if pending:
            try:
                queue.scripts.run_many(pending, partial=True)
            except (QueueConnectionError, redis.RedisError, ReplicationTimeoutError):
                pass  # their leases expire and are reaped

    def _wait_at_gate(
        self, queue: Queue, ticket: Ticket, pending: list[Call], *, exclusive: bool
    ) -> list[Call]:
        """Wait for the process's gate before a fetch: the exclusive hold, or a shared
        one once no lane runs or waits to run alone (``ticket.holds`` stays NONE if the
        gate closed meanwhile).

        First sends the settlements the lane keeps: the heartbeat no longer extends
        their leases. Returns the settlements still to send.
        """
        if pending:
            pending = self._send_settlements(queue, pending)
        if exclusive:
            self.gate.exclusive(ticket)
        else:
            self.gate.shared(ticket)
        return pending

    def _send_settlements(self, queue: Queue, calls: list[Call]) -> list[Call]:
        """Send settlements in a round trip of their own; return those to send again."""
        if not calls:
            return calls
        if self.hooks.before_settle:
            self.hooks.before_settle(calls)
        try:
            replies = queue.scripts.run_many(calls, partial=True)
        except ReplicationTimeoutError as exc:
            log.warning("queue %s: %s", queue.name, exc)
            self.counters.add("replication_timeouts")
            replies = exc.replies
        except (QueueConnectionError, redis.RedisError) as exc:
            log.warning("queue %s: settling failed (%s); sent again later", queue.name, exc)
            return calls
        return self._check_settled(queue, calls, replies)

    def _fetch_rest(self, queue: Queue, calls: list[Call], first: FetchResult) -> FetchResult:
        """Send the later calls of a split fetch; on trouble keep what the first leased.

        A later call that ran but whose reply was lost leaves its jobs active: their
        leases expire and they are reaped.
        """
        try:
            replies = queue.scripts.run_many(calls, partial=True)
        except ReplicationTimeoutError as exc:
            replies = list(exc.replies or [])
        except (QueueConnectionError, redis.RedisError) as exc:
            log.warning("queue %s: rest of a split fetch failed: %s", queue.name, exc)
            return first
        ok = [r for r in replies if r is not None and not isinstance(r, Exception)]
        rest = [queue.parse_fetch(r) for r in ok]
        return queue.merge_fetches([first, *rest])

    def _run_batch(
        self, queue: Queue, jobs: list[RawJob], run: LaneRun, sent: float | None = None
    ) -> list[Call]:
        entries = self.book.add(queue, [j.lease for j in jobs], run, sent)
        run.batch = jobs  # before busy_since: a reader that sees busy sees its jobs
        run.busy_since = self.clock()
        try:
            return self._run_held(queue, jobs, entries, run)
        except BaseException:
            # an unexpected error: its jobs are left to expire and be reaped, so the
            # heartbeat must stop extending them (a finished batch left the book when
            # its lane claimed it, LeaseBook.close)
            self.book.drop([j.lease for j in jobs])
            raise
        finally:
            run.busy_since = None
            run.batch = None

    def _deadline(self, item: Prepared, limits: dict[str, float | None]) -> float | None:
        """Monotonic seconds ``item``'s run must end by if it starts now (None: no limit).

        ``limits`` caches each task's limit for one batch (the batch's jobs share few
        tasks, so the policy is looked up once per task, not once per job).
        """
        name = item.definition.name
        if name in limits:
            limit = limits[name]
        else:
            limit = time_limit_of(item.definition.retry, self.settings.default_time_limit_seconds)
            limits[name] = limit
        return None if limit is None else self.clock() + limit

    def _run_held(
        self, queue: Queue, jobs: list[RawJob], entries: list[Held], run: LaneRun
    ) -> list[Call]:
        """Run a fetched batch; ``entries`` are its lease-book entries, one per job.

        Each run's outcome is kept on its entry (:meth:`Held.finish`). When the batch
        has run, the lane closes it (:meth:`LeaseBook.close`) and settles it; if a run
        overstayed its time limit meanwhile, the time-limit check has taken the batch
        and settled it itself (:meth:`_check_time_limits`), and the lane settles
        nothing.
        """
        if self.hooks.after_fetch:
            self.hooks.after_fetch(jobs)
        outcomes: list[tuple[RawJob, Outcome]] = []  # also kept on each job's entry
        batched: dict[str, list[tuple[Prepared, Held]]] = {}
        limits: dict[str, float | None] = {}
        abandoned, stopping = run.abandoned, self.stopping
        registry, middleware, rng = self.registry, self.middleware, self.rng
        isolated = self._isolated
        for job, entry in zip(jobs, entries, strict=True):
            if abandoned.is_set():
                break  # the rest of the batch was handed back by the time-limit check
            if stopping.is_set():
                continue  # not run: handed back below
            item = prepare(job, registry, entry.guard)
            if isinstance(item, Prepared):
                if item.definition.batch:
                    batched.setdefault(item.definition.name, []).append((item, entry))
                    continue
                if isolated and item.definition.name in isolated:
                    outcomes.extend(self._run_isolated(run, [(item, entry)], limits))
                    continue
                entry.start(self._deadline(item, limits), item)
                result = (job, run_prepared(item, middleware=middleware, rng=rng))
            else:
                entry.start()
                result = (job, item)
            entry.finish(result)
            outcomes.append(result)
        for pairs in batched.values():
            if abandoned.is_set():
                break
            if stopping.is_set():
                continue
            if isolated and pairs[0][0].definition.name in isolated:
                outcomes.extend(self._run_isolated(run, pairs, limits))
                continue
            items = [i for i, _ in pairs]
            deadline = self._deadline(items[0], limits)
            for i, entry in pairs:
                entry.start(deadline, i)
            results = run_batch(items, rng, middleware=middleware)
            for (i, entry), outcome in zip(pairs, results, strict=True):
                result = (i.job, outcome)
                entry.finish(result)
                outcomes.append(result)
        if not self.book.close(run, entries):
            log.warning(
                "lane %s: its batch was settled by the time-limit check; late results ignored",
                queue.name,
            )
            return []
        calls = self._settlements(queue, outcomes)
        if len(outcomes) < len(entries):  # not run: stopping, or the batch was cut short
            released = [e.lease for e in entries if e.result is None]  # (or settled here)
            if released:
                calls.extend(queue.release_calls(released))
                self.counters.add("released", len(released))
        return calls

    def _run_isolated(
        self, run: LaneRun, pairs: list[tuple[Prepared, Held]], limits: dict[str, float | None]
    ) -> list[tuple[RawJob, Outcome]]:
        """Run one call of an isolated task in the lane's child; the outcomes to settle.

        The child is made ready before the run's deadline is set (its start-up is not
        the run's time). The lane enforces the limit itself (it kills the child); the
        heartbeat's check sees a later deadline, one hold bound and two beats on, as a
        backstop for a lane stuck in the worker's own middleware. A call the lane
        stopped is settled here (:meth:`_settle_stopped`), except a lone run whose
        child died: that is an ordinary failure, settled with the others.
        """
        from .isolation import ChildProcess, Killed, run_isolated

        if run.child is None:
            run.child = ChildProcess(
                str(self.isolated_registry), self._guards, label=run.queue.name
            )
        child: ChildProcess = run.child
        items = [item for item, _ in pairs]
        try:
            child.ready()
        except IsolatedChildError as exc:  # no child to run it: an ordinary failure
            log.error("%s", exc)
            failed = []
            for item, entry in pairs:
                entry.start(None, item)
                result = (item.job, outcome_of(item, exc, "", self.rng))
                entry.finish(result)
                failed.append(result)
            return failed
        deadline = self._deadline(items[0], limits)
        backstop = None
        if deadline is not None:
            backstop = deadline + self._guards.hold_limit + 2 * self.heartbeat.interval
        for item, entry in pairs:
            entry.start(backstop, item)
        report = run_isolated(child, items, deadline, self.rng, self.middleware)
        stopped = report.stopped
        settled_here: set[int] = set()
        if stopped is not None and (isinstance(stopped, Killed) or len(report.ran) > 1):
            settled_here = set(report.ran)
        results = []
        for n, ((item, entry), outcome) in enumerate(zip(pairs, report.outcomes, strict=True)):
            if n in settled_here:
                entry.finish(_SETTLED)
                continue
            result = (item.job, outcome)
            entry.finish(result)
            results.append(result)
        if stopped is not None:
            if settled_here:
                self._settle_stopped(run, [pairs[n][1] for n in sorted(settled_here)], stopped)
            if not self.stopping.is_set():
                try:
                    child.spawn()  # boots while the lane settles and fetches
                except IsolatedChildError as exc:
                    log.error("%s", exc)  # the next call tries again
        return results

    def _settle_stopped(self, run: LaneRun, group: list[Held], stopped: Killed | Lost) -> None:
        """Settle an isolated call the lane stopped, by the time-limit rules.

        Killed at the limit: a lone run is timed out (charged, :meth:`_time_out`), a
        batch call handed back uncharged (:meth:`_split_timed_out`). Killed a lease
        past its limit after every guarded block completed (their effects are in): handed
        back uncharged, as ``timed_out``. A batch call whose child died: handed back
        uncharged as lost with their worker (``lease_expired``), each job run alone
        next, so that only a job that kills its child alone is charged. Nothing is
        settled when the time-limit check took the lane's batch first.
        """
        from .isolation import Lost

        if not self.book.take(run, group):
            return
        queue = group[0].queue
        if isinstance(stopped, Lost):
            self.counters.add("isolated_lost")
            error = (
                f"IsolatedChildError: {stopped.error}; a batch call of {len(group)} jobs, "
                "not counted as an attempt, each job runs alone next"
            )
            self._release_failed(queue, group, "lease_expired", error)
            return
        self.counters.add("isolated_killed")
        if not stopped.kept:
            if len(group) == 1:
                self._time_out(group[0])
            else:
                self._split_timed_out(group)
            return
        error = (
            "TimeLimitExceeded: the isolated run went on a lease past its time limit after "
            "its guarded block completed; killed, not counted as an attempt"
        )
        self.counters.add("timed_out")
        self._release_failed(queue, group, "timed_out", error)

    def _release_failed(self, queue: Queue, group: list[Held], reason: str, error: str) -> None:
        """Hand ``group`` back uncharged, with ``reason`` and ``error`` as each job's last
        failure (a suspect then: leased alone next)."""
        info = queue.failure_info(reason, error, "")
        try:
            queue.scripts.run_many(queue.release_calls([h.lease for h in group], info=info))
        except (QueueConnectionError, redis.RedisError) as exc:
            log.warning("handing back a stopped isolated call failed (%s); leases expire", exc)

    def _check_time_limits(self) -> None:
        """Fail runs past their time limit and free their lanes (heartbeat thread)."""
        overdue, mates = self.book.take_overdue(self.clock())
        if not overdue:
            return
        lanes = {id(h.lane): h.lane for h in overdue if h.lane is not None}
        for lane in lanes.values():
            lane.abandoned.set()
            self.gate.leave(lane.ticket)  # its stuck thread no longer counts (ADR 0021)
            self.counters.add("lanes_abandoned")
            if not self.stopping.is_set():
                self._open_lane(lane.queue)
        by_lane: dict[int, list[Held]] = {}
        for held in overdue:
            by_lane.setdefault(id(held.lane), []).append(held)
        for group in by_lane.values():
            if len(group) == 1 or group[0].lane is None:
                for held in group:
                    self._time_out(held)
            else:  # one handler call ran them all: the one that hung is not known
                self._split_timed_out(group)
        self._settle_mates(mates)

    def _settle_mates(self, mates: list[Held]) -> None:
        """Settle the finished batch-mates of a timed-out run now; hand back the rest.

        Their lane is stuck in the hung run and will not settle them (its late
        settlement skips what was claimed here, LeaseBook.close), and they are no
        longer heartbeated: a finished job left waiting would lose its lease and run
        again. Each is settled once, through the lane's own settlement code (and the
        ``on_outcome`` hook). A settlement that cannot reach Redis is logged: its
        lease expires and the job is reaped, as after a crash.
        """
        for queue in {h.queue.name: h.queue for h in mates}.values():
            mine = [h for h in mates if h.queue is queue]
            finished = [h.result for h in mine if h.result is not None]
            unstarted = [h.lease for h in mine if h.result is None and not h.started]
            calls = self._settlements(queue, finished) + queue.release_calls(unstarted)
            if not calls:
                continue
            try:
                replies = queue.scripts.run_many(calls, partial=True)
            except ReplicationTimeoutError as exc:
                replies = list(exc.replies or [])
            except (QueueConnectionError, redis.RedisError) as exc:
                log.warning("settling after a time limit failed (%s); leases will expire", exc)
                continue
            if len(replies) == len(calls):
                self._check_settled(queue, calls, replies)

    def _time_out(self, held: Held) -> None:
        item = held.context
        queue = held.queue
        if not isinstance(item, Prepared):
            return  # not a job run by this worker: its lease expires and is reaped
        limit = time_limit_of(item.definition.retry, self.settings.default_time_limit_seconds)
        error = f"TimeLimitExceeded: the run took longer than its limit of {limit} s"
        outcome: Outcome
        if should_retry(item.job.attempt, item.max_attempts):
            delay = item.definition.retry.backoff(item.job.attempt, self.rng)
            outcome = Retry(held.lease, delay, error, "")
        else:
            outcome = Dead(held.lease, "timed_out", error, "")
        self.counters.add("timed_out")
        log.warning(
            "job %s timed out (attempt %d, limit %s s)",
            item.job.job_id,
            item.job.attempt,
            limit,
            extra={"job_id": item.job.job_id, "queue": queue.name, "attempt": item.job.attempt},
        )
        if self.hooks.on_outcome is not None:
            try:
                self.hooks.on_outcome(item.job, outcome)
            except Exception:
                log.exception("on_outcome hook failed for job %s", item.job.job_id)
        try:
            if isinstance(outcome, Retry):
                info = queue.failure_info("timed_out", error, "")
                queue.scripts.run_many([queue.nack_call(held.lease, outcome.delay, info)])
            else:
                info = queue.failure_info("timed_out", error, "")
                queue.scripts.run_many([queue.dead_call(held.lease, "timed_out", info)])
            queue.client.hincrby(queue.keys.key("stats"), "timed_out", 1)
        except (QueueConnectionError, redis.RedisError) as exc:
            log.warning(
                "settling timed-out job %s failed (%s); its lease expires", held.lease.job_id, exc
            )

    def _split_timed_out(self, group: list[Held]) -> None:
        """Hand back a batch whose shared handler call ran past its limit, uncharged.

        The jobs of one batch call share one run, so a time-out cannot tell the job
        that hung from its batch-mates. As with a batch lost with its worker (ADR
        0002), none is charged: each goes back to the head of the line with its
        delivery not counted and its failure recorded as ``timed_out``, which makes
        it a suspect that fetch leases alone. Only a run that times out alone counts
        as an attempt (:meth:`_time_out`). Their late results are ignored. The shared
        call counts once in the ``timed_out`` counters (it is one run that timed out).
        """
        queue = group[0].queue
        items = [h.context for h in group if isinstance(h.context, Prepared)]
        limit = (
            time_limit_of(items[0].definition.retry, self.settings.default_time_limit_seconds)
            if items
            else None
        )
        error = (
            f"TimeLimitExceeded: a batch of {len(group)} jobs sharing one handler call ran "
            f"past its limit of {limit} s; not counted as an attempt, each job runs alone next"
        )
        self.counters.add("timed_out")  # one run (the shared call) timed out
        self.counters.add("timeout_splits")
        log.warning(
            "batch of %d jobs on %s timed out (limit %s s); each runs alone next",
            len(group),
            queue.name,
            limit,
            extra={"queue": queue.name},
        )
        info = queue.failure_info("timed_out", error, "")
        try:
            queue.scripts.run_many(queue.release_calls([h.lease for h in group], info=info))
            queue.client.hincrby(queue.keys.key("stats"), "timed_out", 1)
        except (QueueConnectionError, redis.RedisError) as exc:
            log.warning("splitting a timed-out batch failed (%s); its leases expire", exc)

    def _settlements(self, queue: Queue, outcomes: list[tuple[RawJob, Outcome]]) -> list[Call]:
        acks = []
        calls: list[Call] = []
        succeeded = 0
        for job, outcome in outcomes:
            if isinstance(outcome, Succeeded):
                succeeded += 1  # counted once per batch below
            else:
                self._log_outcome(job, outcome)
            if self.hooks.on_outcome is not None:
                try:
                    self.hooks.on_outcome(job, outcome)
                except Exception:
                    log.exception("on_outcome hook failed for job %s", job.job_id)
            if isinstance(outcome, Succeeded):
                acks.append(outcome.lease)
            elif isinstance(outcome, Retry):
                info = queue.failure_info("retry", outcome.error, outcome.traceback)
                calls.append(queue.nack_call(outcome.lease, outcome.delay, info))
            elif isinstance(outcome, Throttle):
                calls.append(self._throttle_call(queue, outcome))
            else:
                info = queue.failure_info(outcome.reason, outcome.error, outcome.traceback)
                calls.append(queue.dead_call(outcome.lease, outcome.reason, info))
        if succeeded:
            self.counters.add("succeeded", succeeded)
        if acks:
            calls[:0] = queue.ack_calls(acks)
        return calls

    @staticmethod
    def _throttle_call(queue: Queue, outcome: Throttle) -> Call:
        """The settlement of a throttled run (ADR 0034): its fallback is the ordinary
        failure's outcome, taken past the attempt's throttle budget."""
        fallback = outcome.fallback
        delay = fallback.delay if isinstance(fallback, Retry) else None
        why = "retry" if delay is not None else fallback.reason  # type: ignore[union-attr]
        return queue.throttle_call(
            outcome.lease,
            outcome.delay,
            queue.failure_info("throttled", outcome.error, ""),
            delay,
            queue.failure_info(why, outcome.error, fallback.traceback),
        )

    def _log_outcome(self, job: RawJob, outcome: Outcome) -> None:
        if isinstance(outcome, Succeeded):
            self.counters.add("succeeded")
            return
        extra = {"job_id": job.job_id, "queue": job.queue, "attempt": job.attempt}
        if isinstance(outcome, Throttle):
            self.counters.add("throttled")
            log.info(
                "job %s throttled (attempt %d), held back %.2fs: %s",
                job.job_id,
                job.attempt,
                outcome.delay,
                outcome.error,
                extra=extra,
            )
            return
        if isinstance(outcome, Retry):
            self.counters.add("retried")
            log.info(
                "job %s failed (attempt %d), retry in %.2fs: %s",
                job.job_id,
                job.attempt,
                outcome.delay,
                outcome.error,
                extra=extra,
            )
        elif isinstance(outcome, Dead):
            self.counters.add("dead")
            log.warning(
                "job %s dead-lettered (%s): %s",
                job.job_id,
                outcome.reason,
                outcome.error,
                extra=extra,
            )

    def _tell_settled(
        self, queue: Queue, call: Call, refused: list[str], script: str | None = None
    ) -> None:
        """Hand one settled call to the ``on_settled`` hook (an exception is logged);
        ``script`` names what the call became when not ``call.script``."""
        hook = self.hooks.on_settled
        if hook is None:
            return
        try:
            hook(queue.name, script or call.script, queue.settled_leases(call), refused)
        except Exception:
            log.exception("on_settled hook failed for a %s call", call.script)

    def _check_settled(self, queue: Queue, calls: list[Call], replies: list[Any]) -> list[Call]:
        """Count and log refused settlements; return the calls that did not run.

        A call whose reply is None did not run (the round trip gave up on re-sends)
        and is sent again with the next round trip. A call that failed (a queue key
        of the wrong type) is logged and dropped: its jobs' leases expire and are
        reaped, so nothing is lost.
        """
        again: list[Call] = []
        told = self.hooks.on_settled
        for call, reply in zip(calls, replies, strict=True):
            if reply is None:
                again.append(call)
                continue
            if isinstance(reply, Exception):
                log.error("queue %s: %s failed: %s", queue.name, call.script, reply)
                self.counters.add("settle_errors")
                continue
            became = None
            if call.script == "ack":
                if reply and reply[-1] in (b"|", "|"):
                    if told is not None:  # nothing refused: '|' ends the reply
                        self._tell_settled(queue, call, [])
                    continue
                _, refused = _split(reply)
                stale = len(refused)
            elif call.script in ("nack", "dead", "throttle"):
                stale = 0 if int(reply) else 1
                refused = [str(call.args[0])] if stale else []
                if call.script == "throttle":  # 2 / 3: past its budget, retried / dead
                    became = THROTTLE_BECAME.get(int(reply))
            else:
                if told is not None:
                    self._tell_settled(queue, call, [])
                continue
            if told is not None:
                self._tell_settled(queue, call, refused, became)
            if stale:
                self.counters.add("stale_refused", stale)
                for job_id in refused:
                    log.warning(
                        "stale lease: %s of job %s refused (lease expired, job handed out again)",
                        call.script,
                        job_id,
                        extra={"job_id": job_id, "queue": queue.name},
                    )
        return again
