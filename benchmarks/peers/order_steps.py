"""The order workflow's steps as the peer libraries' tasks run them: the domain's own effects.

Contract: :func:`run_step` applies one step (``orders.domain.effects.EFFECTS``: the same
idempotent SQL orderflow's handlers run) to one order in one unit of work, rerun on a
lost race as orderflow's tracker reruns it (``workflows.conflicts.retry_on_conflict``);
:func:`complete` marks an order completed (``effects.complete_orders``). Each process
opens its own engine on ``BENCH_DATABASE_URL`` with orderflow's connection settings
(``orders.app.db.make_engine``: SQLite writers take turns, ADR 0018). Each committed run
is counted per ``<step>:<order id>`` in memory and added to the Redis hash ``RUNS_KEY``
every ``FLUSH_SECONDS`` by a thread of the process, off the task's path
(``benchmarks.e2e_counts`` reads them). What a peer adds is only its way of chaining
the steps (``celery_workflow``, ``dramatiq_workflow``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter

import redis
from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session, sessionmaker

from orders.app.db import make_engine, make_session_factory, worker_pool_size
from orders.domain.effects import EFFECTS, Delivery, complete_orders
from orders.domain.models import Order
from workflows.columns import utcnow
from workflows.conflicts import retry_on_conflict
from workflows.uow import UnitOfWork

from ..e2e_counts import run_field
from .base import redis_url as bench_redis_url

log = logging.getLogger("benchmarks.peers")

DATABASE_ENV = "BENCH_DATABASE_URL"
"""The database every peer worker process uses (a SQLAlchemy URL)."""
THREADS_ENV = "BENCH_WORKER_THREADS"
"""Threads per worker process (sizes each process's connection pool); default 1."""
READY_KEY = "bench:e2e:ready"
"""Incremented (INCR) by each peer worker once it is ready to take work."""
RUNS_KEY = "bench:e2e:runs"
"""Hash ``<step>:<order id>`` -> committed runs of that step for that order."""
FLUSH_SECONDS = 0.2
"""How often a worker process adds its counted runs to ``RUNS_KEY`` (seconds)."""

_ORDER = Order.__table__
_ONE_ORDER = select(_ORDER.c.customer_id, _ORDER.c.total_price, _ORDER.c.status).where(
    _ORDER.c.id == bindparam("id")
)
"""The order's own columns a step's effect reads (``Delivery``), as orderflow's handler
reads them."""

_lock = threading.Lock()
_factories: dict[int, sessionmaker[Session]] = {}
_runs: Counter[str] = Counter()
_flushing: set[int] = set()
"""Process ids whose flushing thread runs (a forked child starts its own)."""


def session_factory() -> sessionmaker[Session]:
    """This process's session factory, its engine opened on first use (after a fork).

    Raises:
        KeyError: ``BENCH_DATABASE_URL`` is not set.
    """
    pid = os.getpid()
    with _lock:
        factory = _factories.get(pid)
        if factory is None:
            lanes = int(os.environ.get(THREADS_ENV, "1"))
            engine = make_engine(os.environ[DATABASE_ENV], pool_size=worker_pool_size(lanes))
            factory = _factories[pid] = make_session_factory(engine)
        return factory


def run_step(step: str, order_id: int) -> str:
    """Apply one step's effect to one order and commit it (one unit of work); the
    committed run is counted (:func:`count_run`).

    Args:
        step: ``stock``, ``notification``, ``points`` or ``logistics``.
        order_id: the order.

    Returns:
        The effect's outcome word (``deducted``, ``out_of_stock``, ``sent``,
        ``already_sent``, ``credited``, ...).

    Raises:
        KeyError: an unknown step.
        sqlalchemy.exc.NoResultFound: no such order.
        workflows.errors.ConcurrencyConflict: kept losing races (the task is retried).
    """
    effect = EFFECTS[step]
    factory = session_factory()

    def work() -> str:
        with UnitOfWork(factory) as uow:
            customer_id, total_price, status = uow.session.execute(
                _ONE_ORDER, {"id": order_id}
            ).one()
            delivery = Delivery(order_id, order_id, customer_id, total_price, status)
            outcome = effect(uow.session, [delivery], utcnow())[order_id]
            uow.commit()
            return outcome

    outcome = retry_on_conflict(work)
    count_run(step, order_id)
    return outcome


def count_run(step: str, order_id: int) -> None:
    """Count one committed run of ``step`` for ``order_id``; starts this process's
    flushing thread on its first run."""
    with _lock:
        _runs[run_field(step, order_id)] += 1
        if os.getpid() in _flushing:
            return
        _flushing.add(os.getpid())
    threading.Thread(target=_flush_forever, name="bench-run-counts", daemon=True).start()


def flush_runs(client: redis.Redis) -> int:
    """Add the runs counted since the last flush to ``RUNS_KEY`` in one round trip.

    Returns:
        Fields written; on a Redis error none, and the runs are kept for the next flush.
    """
    with _lock:
        pending = dict(_runs)
        _runs.clear()
    if not pending:
        return 0
    try:
        pipe = client.pipeline(transaction=False)
        for field, runs in pending.items():
            pipe.hincrby(RUNS_KEY, field, runs)
        pipe.execute()
    except redis.RedisError as exc:
        log.warning("run counts kept for the next flush: %s", exc)
        with _lock:
            _runs.update(pending)
        return 0
    return len(pending)


def _flush_forever() -> None:
    client = redis.Redis.from_url(bench_redis_url())
    while True:
        time.sleep(FLUSH_SECONDS)
        flush_runs(client)


def complete(order_id: int) -> None:
    """Mark the order completed (a placed order only; other statuses stay).

    Raises:
        workflows.errors.ConcurrencyConflict: kept losing races (the task is retried).
    """
    factory = session_factory()

    def work() -> None:
        with UnitOfWork(factory) as uow:
            complete_orders(uow.session, [order_id])
            uow.commit()

    retry_on_conflict(work)


def mark_ready(redis_url: str) -> None:
    """Say this worker is ready: ``INCR bench:e2e:ready`` on the benchmark's Redis."""
    client = redis.Redis.from_url(redis_url)
    try:
        client.incr(READY_KEY)
    finally:
        client.close()
