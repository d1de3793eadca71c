"""The registry of an isolated step child (``ORDERS_STEP_ISOLATION=process``).

A worker with process isolation runs each handler call of its lanes in a child
process (``reliable_queue.isolation``); the child calls :func:`registry`, which
builds the application afresh from the ``ORDERS_*`` environment it inherited: its
own engine (bound to the lease, one connection), Redis client, counters, metrics and
commit-time fault hook. The worker's middleware (namespace guard, metrics timing,
injected faults) stays in the worker.
"""

from __future__ import annotations

import logging
import os

from orders.app.bootstrap import build_worker_app
from orders.app.settings import Settings
from orders.observability.logs import configure_logging
from orders.observability.multiproc import ENV as METRICS_ENV
from orders.observability.tracing import tracer_provider
from orders.observability.worker_setup import worker_observability
from orders.worker.counters import Counters
from orders.worker.faults import FaultMiddleware, FaultSource, FaultStore
from orders.worker.journal import AttemptJournal
from orders.worker.runner import injected_recorder, step_hooks
from orders.worker.tasks import build_registry
from reliable_queue import TaskRegistry


def registry() -> TaskRegistry:
    """The step tasks, wired to this child's own application (zero arguments: the
    worker names it, the child calls it).

    Logs go to stderr in the worker's format at the worker's level; metrics are
    recorded in the data dir's folder when the worker records them (it hands the
    folder down in ``PROMETHEUS_MULTIPROC_DIR``).

    Raises:
        pydantic.ValidationError: the environment's settings are invalid.
        SchemaNotMigrated: a configured database needs ``orders db upgrade``.
    """
    level = logging.getLevelName(logging.getLogger().getEffectiveLevel())
    configure_logging(level if isinstance(level, str) else "INFO")
    settings = Settings()
    # one call at a time: one connection, lease-bound; the worker checked the schema
    app = build_worker_app(
        settings,
        lanes=1,
        schema_checked=True,
        tracer_provider=tracer_provider(settings.resolved_data_dir()),
    )
    counters = Counters(app.redis, settings.queue_prefix)
    journal = (
        None if settings.chaos_journal_dir is None else AttemptJournal(settings.chaos_journal_dir)
    )
    obs = worker_observability(app, record=METRICS_ENV in os.environ)
    faults = FaultMiddleware(
        FaultSource(FaultStore(app.redis, settings.queue_prefix)),
        on_injected=injected_recorder(counters, journal),
    )
    on_results, on_refused = step_hooks(app, counters, obs)
    return build_registry(
        app.session_factory,
        settings,
        on_results=on_results,
        on_refused=on_refused,
        before_commit=faults.in_transaction,
    )
