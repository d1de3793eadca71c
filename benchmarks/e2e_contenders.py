"""The libraries of the end-to-end peer benchmark: how each starts its workers, says it is
ready, and places orders.

Contract: every contender runs ``processes`` worker processes started by its own CLI, each
running ``threads`` tasks at a time where the library has threads (orderflow: ``orders
worker STEP``, one per step, at the CLI's defaults; Celery: ``processes`` worker nodes,
``celery worker -n wN@%h --pool threads --concurrency T``, each its own broker consumer;
Dramatiq: ``dramatiq --processes N --threads T``) and places the same TPC-H orders in
transactions of 500 from
the benchmark's process: orderflow through its outbox (``place_paced``, what ``orders
place`` runs), the peers with the same order and line inserts (``insert_orders``)
followed by one workflow message per order.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Protocol

import redis
from sqlalchemy.orm import Session, sessionmaker

from orders.app.bootstrap import App, build
from orders.app.pacing import batch_size_for, place_paced
from orders.app.placement import insert_orders
from orders.app.settings import Settings
from orders.domain.steps import STEPS
from orders.sources.drafts import next_tpch_drafts
from orders.worker import defaults
from orders.worker.counters import Counters
from workflows.columns import utcnow
from workflows.uow import UnitOfWork

from .e2e_counts import StepRuns, from_counters, from_run_counts
from .peers.base import URL_ENV, script
from .peers.order_steps import DATABASE_ENV, READY_KEY, RUNS_KEY, THREADS_ENV

PLACE_BATCH = batch_size_for(None)
"""Orders per placement transaction: what ``orders place`` uses unpaced (500)."""
CELERY_CONCURRENCY = 8
"""Tasks at a time per Celery node unless ``--threads`` says otherwise: the better of 2
(orderflow's lanes) and 8 on two cores, 1.2-1.7x the orders/s of 2 (medians of 3
interleaved 500-order runs; three such comparisons on SQLite, one on PostgreSQL,
2026-12-06, in the commit that set it)."""
DRAMATIQ_THREADS = defaults.CONCURRENCY
"""Threads per Dramatiq process unless ``--threads`` says otherwise: orderflow's lanes (2),
the better of 2 and Dramatiq's own default 8, which gave 0.83-0.84x the orders/s of 2 on
SQLite and 1.05x on PostgreSQL (within its spread) in the same runs."""


@dataclass
class TurnContext:
    """One library's turn: its Redis, its copy of the database, where its files go.

    Attributes:
        redis_url: the benchmark's Redis server (flushed before the turn).
        database_url: this turn's copy of the template database.
        data_dir: orderflow's data dir for the turn (metrics, logs).
        client: a client of the benchmark's Redis.
        factory: sessions on the turn's database, in the benchmark's process.
        repo: the repository root (on the workers' ``PYTHONPATH``).
    """

    redis_url: str
    database_url: str
    data_dir: Path
    client: redis.Redis
    factory: sessionmaker[Session]
    repo: str


class Contender(Protocol):
    """What a turn needs of a library (``Orderflow``, ``Peer``)."""

    name: str
    mode: str

    def version(self) -> str:
        """The installed version."""

    def describe(self) -> str:
        """The worker configuration, in a few words."""

    def worker_argvs(self) -> list[list[str]]:
        """The worker processes' commands (each a process group of its own)."""

    def worker_env(self, turn: TurnContext) -> dict[str, str]:
        """Environment variables the workers need on top of ours."""

    def ready(self, turn: TurnContext) -> bool:
        """Have the workers said they are ready to take work?"""

    def place(self, turn: TurnContext, count: int) -> list[int]:
        """Place ``count`` orders and start their workflows; returns their ids."""

    def step_runs(self, turn: TurnContext) -> StepRuns:
        """The step runs the workers counted over the turn so far (Redis is flushed
        before each turn)."""

    def end_turn(self) -> None:
        """Release what the placing side holds for the turn."""


class Orderflow:
    """orderflow at its CLI defaults: ``orders worker STEP`` per step, ``orders place``."""

    name = "orderflow"
    mode = "outbox + idempotent handlers; 30 s leases, fenced acks, 5 attempts with backoff, DLQ"

    def __init__(self, processes: int) -> None:
        if processes != len(STEPS):
            raise ValueError(
                f"orderflow runs one `orders worker` per step: {len(STEPS)} processes, "
                f"not {processes}"
            )
        self.processes = processes
        self._app: App | None = None

    def version(self) -> str:
        """The application's version."""
        return metadata.version("orderflow")

    def describe(self) -> str:
        """The worker configuration, in a few words."""
        return (
            f"{len(STEPS)} x `orders worker STEP` ({defaults.CONCURRENCY} lanes, "
            f"batch {defaults.BATCH_SIZE}: the CLI's defaults)"
        )

    def worker_argvs(self) -> list[list[str]]:
        """One ``orders worker`` command per step."""
        return [[script("orders"), "worker", step] for step in STEPS]

    def worker_env(self, turn: TurnContext) -> dict[str, str]:
        """The settings the workers read (``ORDERS_*``)."""
        return {
            "ORDERS_REDIS_URL": turn.redis_url,
            "ORDERS_DATABASE_URL": turn.database_url,
            "ORDERS_DATA_DIR": str(turn.data_dir),
        }

    def ready(self, turn: TurnContext) -> bool:
        """Every lane of every worker blocks on Redis, waiting for work."""
        lanes = len(STEPS) * defaults.CONCURRENCY
        return int(turn.client.info("clients").get("blocked_clients", 0)) >= lanes

    def place(self, turn: TurnContext, count: int) -> list[int]:
        """``orders place --count COUNT``'s work: the outbox, then publishing each batch."""
        if self._app is None:
            settings = Settings(
                redis_url=turn.redis_url, database_url=turn.database_url, data_dir=turn.data_dir
            )
            self._app = build(settings)
        return place_paced(self._app, count).order_ids

    def step_runs(self, turn: TurnContext) -> StepRuns:
        """The workers' run counters (``applied:<step>``, ``duplicate:<step>``)."""
        prefix = Settings(redis_url=turn.redis_url).queue_prefix
        return from_counters(Counters(turn.client, prefix).read())

    def end_turn(self) -> None:
        """Release the placing side's connections."""
        if self._app is not None:
            self._app.close()
            self._app = None


@dataclass
class Peer:
    """A peer library running the order workflow module ``module``.

    Attributes:
        name: ``celery`` or ``dramatiq``.
        dist: the distribution whose version is reported.
        module: the workflow app (``benchmarks.peers.<name>_workflow``).
        mode: the delivery guarantee, in full.
        argvs: ``argvs(processes, threads) -> commands`` of the worker processes.
        describe_workers: ``(processes, threads) -> text``.
        ready_count: ``processes -> INCR``s of ``bench:e2e:ready`` that mean ready.
        processes / threads: worker processes, and threads per process where the
            library has them.
    """

    name: str
    dist: str
    module: str
    mode: str
    argvs: Callable[[int, int], list[list[str]]]
    describe_workers: Callable[[int, int], str]
    ready_count: Callable[[int], int]
    processes: int = len(STEPS)
    threads: int = defaults.CONCURRENCY
    _app: ModuleType | None = field(default=None, init=False)

    def version(self) -> str:
        """The installed library's version."""
        return metadata.version(self.dist)

    def describe(self) -> str:
        """The worker configuration, in a few words."""
        return self.describe_workers(self.processes, self.threads)

    def worker_argvs(self) -> list[list[str]]:
        """The library's own worker command(s)."""
        return self.argvs(self.processes, self.threads)

    def worker_env(self, turn: TurnContext) -> dict[str, str]:
        """Redis and database of the turn, threads per process, the repo on the path."""
        return {
            URL_ENV: turn.redis_url,
            DATABASE_ENV: turn.database_url,
            THREADS_ENV: str(self.threads),
            "PYTHONPATH": turn.repo,
        }

    def ready(self, turn: TurnContext) -> bool:
        """The workers said they are ready (``bench:e2e:ready``)."""
        return int(turn.client.get(READY_KEY) or 0) >= self.ready_count(self.processes)

    def place(self, turn: TurnContext, count: int) -> list[int]:
        """The same orders and lines as orderflow's, 500 per transaction, then one
        workflow message per order of the committed batch."""
        if self._app is None:
            self._app = importlib.import_module(self.module)
        start = self._app.start
        placed: list[int] = []
        while len(placed) < count:
            size = min(PLACE_BATCH, count - len(placed))
            with UnitOfWork(turn.factory) as uow:
                drafts = next_tpch_drafts(uow.session, size)
                ids = insert_orders(uow.session, drafts, now=utcnow())
                uow.commit()
            for order_id in ids:
                start(order_id)
            placed += ids
        return placed

    def step_runs(self, turn: TurnContext) -> StepRuns:
        """The tasks' committed runs per step and order (``order_steps.RUNS_KEY``)."""
        return from_run_counts(turn.client.hgetall(RUNS_KEY))

    def end_turn(self) -> None:
        """The workflow module's own housekeeping between turns (``end_turn``), if any;
        the producer's connections stay for the next turn."""
        finish = getattr(self._app, "end_turn", None)
        if finish is not None:
            finish()


def _celery_argvs(processes: int, threads: int) -> list[list[str]]:
    """One ``celery worker`` node per process, each its own broker consumer, running
    ``threads`` tasks at a time in its threads pool (docs/performance.md says why)."""
    return [
        [
            script("celery"),
            "-A",
            "benchmarks.peers.celery_workflow",
            "worker",
            "--hostname",
            f"w{index}@%h",
            "--pool",
            "threads",
            "--concurrency",
            str(threads),
            "--loglevel",
            "WARNING",
            # the nodes need no events to or from each other
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
        for index in range(processes)
    ]


def _dramatiq_argvs(processes: int, threads: int) -> list[list[str]]:
    return [
        [
            script("dramatiq"),
            "benchmarks.peers.dramatiq_workflow",
            "--processes",
            str(processes),
            "--threads",
            str(threads),
        ]
    ]


def make(name: str, processes: int, threads: int | None = None) -> Contender:
    """The contender named ``name`` with ``processes`` worker processes.

    Args:
        name: ``orderflow``, ``celery`` or ``dramatiq``.
        processes: worker processes (orderflow: one per step, so 4).
        threads: tasks at a time per process for the peers (Celery's threads pool,
            Dramatiq's worker threads); None: each peer's own (``CELERY_CONCURRENCY``,
            ``DRAMATIQ_THREADS``).

    Raises:
        ValueError: an unknown name, or orderflow with another process count.
    """
    if name == "orderflow":
        return Orderflow(processes)
    if name == "celery":
        return Peer(
            "celery",
            "celery",
            "benchmarks.peers.celery_workflow",
            "at-least-once: task_acks_late + task_reject_on_worker_lost, Redis broker and "
            "result backend, chain into a chord",
            _celery_argvs,
            lambda p, t: f"{p} x celery worker --pool threads --concurrency {t}, prefetch x64",
            lambda p: p,  # worker_ready: once per node, its pool started
            processes,
            CELERY_CONCURRENCY if threads is None else threads,
        )
    if name == "dramatiq":
        return Peer(
            "dramatiq",
            "dramatiq",
            "benchmarks.peers.dramatiq_workflow",
            "at-least-once: Redis broker acks after processing; group with a completion "
            "callback (GroupCallbacks, Redis barrier)",
            _dramatiq_argvs,
            lambda p, t: f"dramatiq --processes {p} --threads {t}",
            lambda p: p,  # after_worker_boot: once per process
            processes,
            DRAMATIQ_THREADS if threads is None else threads,
        )
    raise ValueError(f"unknown library {name!r}; use orderflow, celery or dramatiq")


CONTENDERS = ("orderflow", "celery", "dramatiq")
"""The libraries ``e2e-peers`` knows, in their first round's order."""
