"""A worker process for one or more steps: queue worker + fault injection + sweep."""

from __future__ import annotations

import logging
import os
import random
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from orders.app.bootstrap import App
from orders.app.eviction import check_key_eviction
from orders.domain.errors import OrdersError
from orders.domain.steps import queue_name
from orders.observability.liveness import StallBounds, Verdict, worker_liveness
from orders.observability.worker_setup import WorkerObservability, worker_observability
from orders.worker import defaults
from orders.worker.binding import NamespaceGuard
from orders.worker.counters import Counters
from orders.worker.faults import FaultMiddleware, FaultSource, FaultStore
from orders.worker.journal import AttemptJournal
from orders.worker.relay_loop import SweepLoop
from orders.worker.tasks import OnRefused, OnResults, build_registry, outcome_recorder
from reliable_queue import JobContext, Worker, WorkerHooks
from workflows.messages import DispatchedStep
from workflows.relay import publish_dispatched
from workflows.tracker import StepResult

if TYPE_CHECKING:  # attempt spans are imported by a worker whose tracing is on
    from reliable_queue import AttemptTracing

log = logging.getLogger("orders.worker")


#: the registry factory of an isolated step child (``ORDERS_STEP_ISOLATION=process``)
ISOLATED_REGISTRY = "orders.worker.isolated:registry"


def injected_recorder(
    counters: Counters, journal: AttemptJournal | None
) -> Callable[[str, str], None]:
    """The fault middleware's ``on_injected(step, kind)`` hook: the Redis counter
    ``injected:<kind>:<step>`` and, when the attempt journal is on, its ``inj`` line
    (which outlives a Redis that loses the counter's write). Never raises: a journal
    that cannot be written is logged."""

    def record(step: str, kind: str) -> None:
        counters.add(f"injected:{kind}:{step}")
        if journal is not None:
            try:
                journal.injected(step, kind)
            except OSError as exc:
                log.warning("attempt journal not written: %s", exc)

    return record


def step_hooks(
    app: App, counters: Counters, obs: WorkerObservability
) -> tuple[OnResults, OnRefused]:
    """The step handlers' ``on_results`` and ``on_refused`` hooks of one process (the
    worker's, or an isolated child's): counters, metrics, released steps published,
    the fencing floor raised past a token the database has seen."""

    def on_results(step: str, results: list[StepResult]) -> None:
        """Once per handler call: one publish, one counters write, one metrics pass."""
        released = [row for result in results for row in result.released_steps]
        if released:  # first: marked dispatched by the commit, nobody else publishes them
            release(released)
        duplicates = sum(1 for result in results if result.duplicate)
        counters.add_many(
            {f"duplicate:{step}": duplicates, f"applied:{step}": len(results) - duplicates}
        )
        obs.on_results(step, results)

    def on_refused(step: str, reason: str, error: Exception) -> None:
        """A delivery's commit was refused (ADR 0023): count it here and in /metrics.

        A ``FencedOut`` with a ``seen_token`` names a fencing token the database has
        seen that the queue may hand out again (Redis lost data): the queue's fencing
        floor is raised past it (``Queue.raise_fencing_floor``), so the retry's token
        is above it.
        """
        counters.add(f"fenced:{reason}:{step}")
        obs.on_refused(step, reason)
        seen = getattr(error, "seen_token", None)
        if seen is not None:  # never hand out a number the database has seen again
            try:
                app.queue(queue_name(step)).raise_fencing_floor(seen)
            except Exception as exc:  # the refusal stands; the next one tries again
                log.warning("raising the fencing floor of %s failed: %s", step, exc)

    def release(rows: Sequence[DispatchedStep]) -> None:
        """Publish the steps a finished step released, at once (the sweep is the backstop)."""
        try:
            publish_dispatched(
                app.session_factory,
                app.publisher,
                rows,
                policy=app.publish_policy,
                tracer=app.tracer("workflows.relay"),
            )
        except Exception as exc:  # back to pending, or still dispatched: the sweep's
            log.warning("released steps left to the sweep: %s", type(exc).__name__)

    return on_results, on_refused


def build_worker(
    app: App,
    steps: Sequence[str],
    *,
    concurrency: int = 1,
    batch_size: int = defaults.BATCH_SIZE,
    grace_seconds: float = 10.0,
    observability: WorkerObservability | None = None,
    fault_rng: random.Random | None = None,
    guard: NamespaceGuard | None = None,
    isolation: str | None = None,
    tracing: AttemptTracing | None = None,
) -> Worker:
    """A :class:`~reliable_queue.Worker` serving the queues of ``steps``.

    Injected faults (``orders.worker.faults``) are applied around each handler; applied
    effects, absorbed duplicates and injected faults are counted in the shared
    counters (``orders.worker.counters``). Steps that a finished step released
    (``workflows.dependencies``) are published right after its commit.

    Args:
        app: the application, built for a worker process of ``concurrency *
            len(steps)`` lanes (``orders.app.bootstrap.build_worker_app``: its pool
            and its lease-bound transactions; another app works, with the engine
            it was built with).
        steps: step names (each is its own queue).
        concurrency: lanes (threads) per step.
        batch_size: jobs leased per fetch per lane. Each fetched batch of a step is
            handled in one database transaction (``orders.domain.handlers.handle_steps``;
            one job is a batch of one); 1 keeps slow jobs from holding others.
        grace_seconds: graceful-shutdown budget, seconds.
        observability: log context and metrics (default: log context only).
        fault_rng: randomness of the injected faults (seed it in tests; default unseeded).
        guard: keeps the worker to its database's jobs (``orders.worker.binding``): the
            outermost middleware, and jobs it hands back are not recorded as failures.
        isolation: where the step handlers run, ``thread`` or ``process`` (None: the
            ``step_isolation`` setting). With ``process`` each lane runs its handler
            calls in a child process that builds its own application from the
            environment (``orders.worker.isolated``) and is killed at the step's time
            limit (``reliable_queue.isolation``).
        tracing: a span per attempt (:func:`attempt_tracing`): the outermost
            middleware, its hooks after the worker's own; a delivery absorbed as a
            duplicate says so on its span. None: no span.

    Metrics, the log context and injected faults are worker middleware: they see
    every job, one at a time or in a batch (in the worker, also with ``process``:
    the units of work, and their commit hooks, run in the child).
    """
    counters = Counters(app.redis, app.settings.queue_prefix)
    journal = None
    if app.settings.chaos_journal_dir is not None:
        journal = AttemptJournal(app.settings.chaos_journal_dir)
    faults = FaultMiddleware(
        FaultSource(FaultStore(app.redis, app.settings.queue_prefix)),
        rng=fault_rng,
        on_injected=injected_recorder(counters, journal),
        # a slow injected run stops its heartbeat, so its lease can really expire
        stall=lambda ctx: ctx.guard.let_expire(),
    )
    obs = observability or WorkerObservability()
    on_results, on_refused = step_hooks(app, counters, obs)
    isolation = isolation or app.settings.step_isolation
    registry = build_registry(
        app.session_factory,
        app.settings,
        on_results=on_results,
        on_refused=on_refused,
        before_commit=faults.in_transaction,
        isolation=isolation,
        on_absorbed=None if tracing is None else _absorbed(tracing),
    )
    record = outcome_recorder(app.session_factory)
    if guard is not None:
        record = guard.unless_handed_back(record)
    hooks = WorkerHooks()
    if journal is not None:
        hooks.after_fetch, hooks.on_attempt_lost = journal.leased, journal.attempt_lost
        record = journal.recording(record)
    hooks.on_outcome = obs.on_outcome(record)
    middleware = [*([guard] if guard else []), *obs.middleware(), faults]
    if tracing is not None:
        middleware.insert(0, tracing.middleware)
        hooks = tracing.hooks(hooks)
    worker = Worker(
        app.redis,
        [queue_name(s) for s in steps],
        registry,
        prefix=app.settings.queue_prefix,
        concurrency=concurrency,
        batch_size=batch_size,
        settings=app.queue_settings,
        grace_seconds=grace_seconds,
        middleware=middleware,
        hooks=hooks,
        isolated_registry=ISOLATED_REGISTRY if isolation == "process" else None,
    )
    return worker


def liveness_probe(worker: Worker, app: App) -> Callable[[], Verdict]:
    """The ``/livez`` probe of a worker process (``orders.observability.liveness``): its
    lanes and heartbeat against the step time limit and ``liveness_heartbeats``."""
    bounds = StallBounds(
        heartbeat_seconds=worker.heartbeat.interval,
        time_limit_seconds=app.settings.step_time_limit_seconds,
        max_block_seconds=worker.settings.max_block_seconds,
        heartbeats=app.settings.liveness_heartbeats,
    )

    def probe() -> Verdict:
        return worker_liveness(
            worker.lanes(),
            heartbeat_alive=worker.heartbeat.is_alive(),
            stopping=worker.stopping.is_set(),
            now=worker.clock(),
            bounds=bounds,
        )

    return probe


def attempt_tracing(app: App) -> AttemptTracing | None:
    """The worker's attempt spans, made by the app's tracer; None when tracing is off."""
    tracer = app.tracer("reliable_queue.worker")
    if tracer is None:
        return None
    from reliable_queue.attempt_tracing import AttemptTracing

    return AttemptTracing(tracer)


def _absorbed(tracing: AttemptTracing) -> Callable[[JobContext], None]:
    from reliable_queue.attempt_tracing import DUPLICATE

    return lambda ctx: tracing.note(ctx, DUPLICATE)


class MetricsServerError(OrdersError):
    """The /metrics server cannot listen where it was asked (port in use, no such
    address); the message names the options."""


def run_worker(
    app: App,
    steps: Sequence[str],
    *,
    concurrency: int = 1,
    batch_size: int = defaults.BATCH_SIZE,
    sweep: bool = True,
    grace_seconds: float = 10.0,
    record_metrics: bool = False,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
    isolation: str | None = None,
) -> None:
    """Serve ``steps`` until SIGTERM/SIGINT; also run the outbox sweep when ``sweep``.

    Args:
        isolation: ``thread`` or ``process`` (None: the ``step_isolation`` setting),
            see :func:`build_worker`.
        record_metrics: record Prometheus metrics in the data dir's multi-process
            folder (``orders worker`` does; see ``orders.observability``).
        metrics_port: also serve ``/metrics``, ``/livez`` and ``/readyz`` on this port
            (None: no server).
        metrics_host: address the metrics server binds.

    The process's last log line says why it ends: the worker's ``stopped (<reason>)``
    (a signal, the namespace found bound elsewhere), or ``exits: fatal error: ...``
    for an error raised here, before the command prints its own line.

    Raises:
        MetricsServerError: the metrics server cannot listen on that host and port.
        NamespaceClaimed: the Redis namespace belongs to another database: at start, or
            found later (before a batch, for a job naming no known step, or at a sweep
            interval): the worker then stopped fetching and handed back what it held.
        KeyEvictionPossible: Redis may evict keys and ``allow_key_eviction`` is off.
    """
    try:
        _serve(
            app,
            steps,
            concurrency=concurrency,
            batch_size=batch_size,
            sweep=sweep,
            grace_seconds=grace_seconds,
            record_metrics=record_metrics,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
            isolation=isolation,
        )
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        log.error(
            "worker process %d exits: fatal error: %s: %s",
            os.getpid(),
            type(exc).__name__,
            first,
            extra={"exit_reason": "fatal error"},
        )
        raise


def _serve(
    app: App,
    steps: Sequence[str],
    *,
    concurrency: int,
    batch_size: int,
    sweep: bool,
    grace_seconds: float,
    record_metrics: bool,
    metrics_port: int | None,
    metrics_host: str,
    isolation: str | None,
) -> None:
    """:func:`run_worker`'s work, whose errors it logs as the process's last words."""
    app.bind_namespace()  # never serve another database's jobs
    guard = NamespaceGuard(app)
    eviction = check_key_eviction(app.redis, allow=app.settings.allow_key_eviction)
    if eviction:
        log.error("WARNING: %s", eviction)
    obs = worker_observability(app, steps, record=record_metrics)
    tracing = attempt_tracing(app)
    worker = build_worker(
        app,
        steps,
        concurrency=concurrency,
        batch_size=batch_size,
        grace_seconds=grace_seconds,
        observability=obs,
        guard=guard,
        isolation=isolation,
        tracing=tracing,
    )
    stop = threading.Event()
    if metrics_port is not None:
        try:
            obs.serve(app, metrics_host, metrics_port, live=liveness_probe(worker, app))
        except OSError as exc:  # gaierror included: an address that is none
            raise MetricsServerError(
                f"cannot serve /metrics on {metrics_host}:{metrics_port} "
                f"(--metrics-host / --metrics-port): {exc.strerror or exc}"
            ) from exc
    obs.watch(worker.lanes, [queue_name(s) for s in steps], stop, clock=worker.clock)
    loop = SweepLoop(app, stop, may_sweep=guard.check) if sweep else None
    if loop is not None:
        loop.start()
    interval = app.settings.relay_sweep_interval_seconds
    lost = "the Redis namespace is bound to another database"
    threading.Thread(
        target=guard.watch,
        args=(lambda: worker.request_stop(lost), interval, stop),
        name="binding",
        daemon=True,
    ).start()
    try:
        worker.run()
    finally:
        stop.set()
        obs.close()
        if tracing is not None:
            tracing.close()
    if guard.lost is not None:
        raise guard.lost
