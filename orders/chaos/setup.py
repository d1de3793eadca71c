"""Options of a chaos run, and the services it runs on.

:func:`prepare` gives the run its own embedded Redis (AOF on, with the chosen
``appendfsync``) and SQLite file in the data dir, unless ``ORDERS_REDIS_URL`` /
``ORDERS_DATABASE_URL`` name others; migrates the database, loads TPC-H, resets
the shared counters and writes the handler faults. Every worker process gets
the same explicit URLs (:func:`worker_env`), so only the chaos driver ever
starts the embedded server: a restart after a crash cannot race a worker.
On an external Redis without ``ORDERS_QUEUE_PREFIX`` the run's keys get a
prefix of their own (``chaos-<hex>``), left in place afterwards.
"""

from __future__ import annotations

import logging
import secrets
import shutil
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from orders.app.bootstrap import App, build
from orders.app.settings import Settings
from orders.chaos.poison import POISON_KEY
from orders.domain.steps import (
    ALL_STEPS,
    CANCEL_SHIPMENT,
    LOGISTICS,
    NOTIFICATION,
    POINTS,
    RETURN_STOCK,
    REVERSE_POINTS,
    STOCK,
)
from orders.worker import defaults
from orders.worker.counters import Counters
from orders.worker.faults import FaultConfig, FaultStore
from reliable_queue.embedded import EmbeddedRedis
from reliable_queue.errors import QueueLimitError
from reliable_queue.rate_limits import RateLimit, parse_spec

log = logging.getLogger("orders.chaos")

APPENDFSYNC = ("everysec", "always")


@dataclass(frozen=True)
class ChaosOptions:
    """Knobs of a chaos run. A period or rate of 0 turns that fault off.

    Attributes:
        orders: orders to place.
        rate: orders placed per second; faults run while orders are being placed,
            so the chaos window is about ``orders / rate`` seconds.
        source: ``tpch`` or ``random``.
        workers_per_step: worker processes serving each step.
        concurrency: lanes (threads) per worker process.
        kill_every: SIGKILL a random worker every this many seconds (a replacement
            is started), seconds.
        term_every: SIGTERM a worker holding a job (graceful path), seconds.
        redis_kill_every: SIGKILL the Redis server and restart it on the same data
            dir, seconds (embedded Redis only).
        redis_down: seconds Redis stays down per crash.
        appendfsync: ``everysec`` or ``always`` for the embedded server.
        lose_window: seconds of AOF writes dropped at each Redis crash, as a power
            loss would (None: 1.0 with ``everysec``, 0 with ``always``).
        fail_rate / fail_steps: transient handler failures at this rate on these steps
            (by default notification and every compensating step).
        slow_rate / slow_ms / slow_steps: share of runs that stall ``slow_ms``
            milliseconds with their lease left to expire, on these steps.
        crash_once_step: step whose handler SIGKILLs its own process once, after
            the effect and before the ack (None: off).
        replay_every / replay_count / replay_steps: every this many seconds, put
            this many finished jobs of these steps back on their queue (compensations
            included).
        evict_every: delete one queue's ready list every this many seconds, as a
            Redis with ``maxmemory-policy allkeys-lru`` evicts a key; the sweep must
            re-publish the stranded steps.
        lease_seconds: job lease for the run (short, so lost workers are noticed fast).
        max_attempts: attempts per job before the DLQ.
        republish_after: the relay sweep re-publishes steps Redis lost after this
            many seconds.
        sweep_interval: seconds between relay sweeps.
        settle_timeout: seconds to wait for quiescence once the faults stop.
        redrive: redrive the DLQ once after quiescence, then wait again.
        seed: seed of the run's random choices (None: random).
        out_of_stock_share: share of the TPC-H orders made to run out of stock
            (``orders.sources.scarcity``), 0..1; 0 leaves the stock alone.
        batch_size: jobs leased per fetch per worker lane (``orders worker
            --batch-size``; default: its default).
        poison_step: step that gets a poison job, whose every run kills its worker
            process (``orders.chaos.poison``; None: off).
        poison_attempts: max attempts of the poison job.
        hang_step / hang_rate / hang_ms: share of the runs of this step (None: off)
            that hang ``hang_ms`` milliseconds with their lease still extended; only
            the time limit ends them.
        time_limit: the workers' step time limit (``ORDERS_STEP_TIME_LIMIT_SECONDS``),
            seconds; the hang must outlast it.
        cancel: orders cancelled in flight, spread over the chaos window (their
            finished steps are compensated under the same faults); 0: none.
        freeze_every: every this many seconds, SIGSTOP a random worker (mostly
            between transactions) for ``freeze_seconds``, then SIGCONT it; 0: off.
        freeze_seconds: how long a frozen worker stays stopped, seconds (None:
            twice the lease plus one second, so its leases expire while it is
            frozen and its jobs go to others).
        freeze_in_tx_rate / freeze_steps: share of the units of work of these steps
            that stop their own process inside the transaction, right before the
            commit, holding its locks; thawed after ``freeze_seconds`` like the
            others (if no lock waiter killed the process first: ADR 0023).
        pause_step / pause_every / pause_seconds: every ``pause_every`` seconds, pause
            this step's queue for ``pause_seconds`` (None or 0: off); no job of it may
            start while it is paused (ADR 0031).
        limit_step / limit: rate-limit this step's queue to ``limit`` (``N/s``, ``N/m``,
            ``N/Ks``) for the whole chaos window (None: off; ADR 0032).
    """

    orders: int = 1200
    rate: float = 30.0
    source: str = "tpch"
    workers_per_step: int = 2
    concurrency: int = 2
    kill_every: float = 4.0
    term_every: float = 10.0
    redis_kill_every: float = 15.0
    redis_down: float = 1.0
    appendfsync: str = "everysec"
    lose_window: float | None = None
    fail_rate: float = 0.3
    fail_steps: tuple[str, ...] = (NOTIFICATION, RETURN_STOCK, REVERSE_POINTS, CANCEL_SHIPMENT)
    slow_rate: float = 0.02
    slow_ms: int = 5000
    slow_steps: tuple[str, ...] = (POINTS,)
    crash_once_step: str | None = LOGISTICS
    replay_every: float = 2.0
    replay_count: int = 5
    replay_steps: tuple[str, ...] = ALL_STEPS
    evict_every: float = 7.0
    lease_seconds: float = 2.0
    max_attempts: int = 8
    republish_after: float = 5.0
    sweep_interval: float = 1.0
    settle_timeout: float = 120.0
    redrive: bool = True
    seed: int | None = None
    out_of_stock_share: float = 0.05
    batch_size: int = defaults.BATCH_SIZE
    poison_step: str | None = NOTIFICATION
    poison_attempts: int = 3
    hang_step: str | None = STOCK
    hang_rate: float = 0.01
    hang_ms: int = 6000
    time_limit: float = 3.0
    cancel: int = 12
    freeze_every: float = 9.0
    freeze_seconds: float | None = None
    freeze_in_tx_rate: float = 0.03
    freeze_steps: tuple[str, ...] = (STOCK,)
    pause_step: str | None = POINTS
    pause_every: float = 8.0
    pause_seconds: float = 2.0
    limit_step: str | None = NOTIFICATION
    limit: str = "3/s"

    def __post_init__(self) -> None:
        if self.appendfsync not in APPENDFSYNC:
            raise ValueError(f"appendfsync must be one of {APPENDFSYNC}")
        unknown = {
            s
            for s in (*self.fail_steps, *self.slow_steps, *self.replay_steps, *self.freeze_steps)
            if s not in ALL_STEPS
        }
        for one in (
            self.crash_once_step,
            self.poison_step,
            self.hang_step,
            self.pause_step,
            self.limit_step,
        ):
            if one is not None and one not in ALL_STEPS:
                unknown.add(one)
        if unknown:
            raise ValueError(f"unknown step(s): {', '.join(sorted(unknown))}")
        if self.orders < 1 or self.rate <= 0:
            raise ValueError("orders must be >= 1 and rate > 0")
        if not 0.0 <= self.out_of_stock_share <= 1.0:
            raise ValueError("out_of_stock_share must be within 0..1")
        if self.batch_size < 1 or self.poison_attempts < 1 or self.time_limit < 0:
            raise ValueError("batch_size and poison_attempts must be >= 1, time_limit >= 0")
        hang = self.hang_step is not None and self.hang_ms > 0 and self.hang_rate > 0
        if hang and not 0 < self.time_limit * 1000 < self.hang_ms:
            raise ValueError("a hang needs a time limit (> 0) shorter than hang_ms")
        if self.cancel < 0:
            raise ValueError("cancel must be >= 0")
        if not 0.0 <= self.freeze_in_tx_rate <= 1.0 or self.freeze_every < 0:
            raise ValueError("freeze_in_tx_rate must be within 0..1, freeze_every >= 0")
        if self.freeze_seconds is not None and self.freeze_seconds <= self.lease_seconds:
            raise ValueError("a freeze must outlast the lease (freeze_seconds > lease_seconds)")
        if self.pause_every < 0 or not 0 < self.pause_seconds < max(self.pause_every, 1e-9):
            raise ValueError("a pause lasts more than 0 s and less than pause_every")
        try:
            parse_spec(self.limit)
        except QueueLimitError as exc:
            raise ValueError(f"limit: {exc}") from None

    @property
    def rate_limit(self) -> RateLimit:
        """The limit of ``limit_step``'s queue, parsed."""
        return parse_spec(self.limit)

    @property
    def window_seconds(self) -> float:
        """Planned length of the chaos window (placement time), seconds."""
        return self.orders / self.rate

    @property
    def effective_freeze_seconds(self) -> float:
        """Seconds a frozen worker stays stopped (twice the lease plus 1 s by default)."""
        if self.freeze_seconds is not None:
            return self.freeze_seconds
        return 2 * self.lease_seconds + 1.0

    @property
    def effective_lose_window(self) -> float:
        """Seconds of AOF writes dropped per Redis crash."""
        if self.lose_window is not None:
            return self.lose_window
        return 1.0 if self.appendfsync == "everysec" else 0.0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


def handler_faults(options: ChaosOptions) -> dict[str, FaultConfig]:
    """The per-step fault configs the workers apply (transient, slow, crash once,
    the poison job's key, one hang)."""
    faults: dict[str, FaultConfig] = {}
    for step in ALL_STEPS:
        config = FaultConfig(
            fail_rate=options.fail_rate if step in options.fail_steps else 0.0,
            slow_rate=options.slow_rate if step in options.slow_steps else 0.0,
            slow_ms=options.slow_ms if step in options.slow_steps else 0,
            crash_once=step == options.crash_once_step,
            poison_key=POISON_KEY if step == options.poison_step else None,
            hang_rate=options.hang_rate if step == options.hang_step else 0.0,
            hang_ms=options.hang_ms if step == options.hang_step else 0,
            freeze_in_tx_rate=options.freeze_in_tx_rate if step in options.freeze_steps else 0.0,
        )
        if config.active:
            faults[step] = config
    return faults


def worker_env(
    base: Mapping[str, str],
    *,
    data_dir: Path,
    redis_url: str,
    database_url: str,
    options: ChaosOptions,
) -> dict[str, str]:
    """The environment of the run's worker processes: ``base`` plus the run's settings.

    Explicit URLs (no worker starts Redis itself), a short lease, a fast relay
    sweep that re-publishes lost steps after ``options.republish_after`` seconds,
    short retry backoffs, the run's step time limit, the attempt journal.
    """
    env = dict(base)
    env.update(
        ORDERS_DATA_DIR=str(data_dir),
        ORDERS_REDIS_URL=redis_url,
        ORDERS_DATABASE_URL=database_url,
        ORDERS_LEASE_SECONDS=str(options.lease_seconds),
        ORDERS_MAX_ATTEMPTS=str(options.max_attempts),
        ORDERS_RELAY_REPUBLISH_AFTER_SECONDS=str(options.republish_after),
        ORDERS_RELAY_SWEEP_INTERVAL_SECONDS=str(options.sweep_interval),
        ORDERS_BACKOFF_BASE_SECONDS="0.2",
        ORDERS_BACKOFF_MAX_SECONDS="3.0",
        ORDERS_STEP_TIME_LIMIT_SECONDS=str(options.time_limit),
        ORDERS_CHAOS_JOURNAL_DIR=str(journal_dir(data_dir)),
    )
    return env


def journal_dir(data_dir: Path) -> Path:
    """Where the run's workers write their attempt journal (``orders.worker.journal``)."""
    return data_dir / "journal"


@dataclass
class ChaosServices:
    """What a chaos run runs on.

    Attributes:
        app: the driver's application (same URLs and settings as the workers).
        server: the embedded Redis the run started (None with an external Redis).
        data_dir: the run's data dir (worker logs go to ``data_dir/logs``).
        env: the worker processes' environment.
    """

    app: App
    server: EmbeddedRedis | None
    data_dir: Path
    env: dict[str, str]

    @property
    def log_dir(self) -> Path:
        """Where worker logs go."""
        return self.data_dir / "logs"

    def close(self) -> None:
        """Close connections and stop the embedded Redis the run started."""
        self.app.close()
        if self.server is not None:
            self.server.stop(timeout=10.0)


def prepare(options: ChaosOptions, base_env: Mapping[str, str], data_dir: Path) -> ChaosServices:
    """Start (or connect to) the services, migrate, load TPC-H, write the faults.

    Args:
        options: the run's options.
        base_env: environment the workers inherit (``ORDERS_REDIS_URL`` /
            ``ORDERS_DATABASE_URL`` there select external services).
        data_dir: the run's data dir (created).

    Raises:
        reliable_queue.embedded.EmbeddedRedisError: the embedded Redis did not start.
        orders.domain.errors.TpchGenerationFailed / sqlalchemy errors: loading failed.
    """
    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "logs").mkdir(exist_ok=True)
    shutil.rmtree(journal_dir(data_dir), ignore_errors=True)  # a reused dir's old run
    server = None
    base_env = dict(base_env)
    redis_url = base_env.get("ORDERS_REDIS_URL") or None
    if redis_url is None:
        server = EmbeddedRedis(data_dir, appendfsync=options.appendfsync)  # type: ignore[arg-type]
        redis_url = server.ensure_running()
    elif not base_env.get("ORDERS_QUEUE_PREFIX"):
        # A shared server: keep the run's keys apart from an application's.
        base_env["ORDERS_QUEUE_PREFIX"] = f"chaos-{secrets.token_hex(4)}"
    database_url = base_env.get("ORDERS_DATABASE_URL") or (
        Settings(data_dir=data_dir, database_url=None).resolved_database_url()
    )
    env = worker_env(
        base_env,
        data_dir=data_dir,
        redis_url=redis_url,
        database_url=database_url,
        options=options,
    )
    settings = Settings(
        data_dir=data_dir,
        redis_url=redis_url,
        database_url=database_url,
        lease_seconds=options.lease_seconds,
        max_attempts=options.max_attempts,
        relay_republish_after_seconds=options.republish_after,
        relay_sweep_interval_seconds=options.sweep_interval,
        queue_prefix=base_env.get("ORDERS_QUEUE_PREFIX") or Settings().queue_prefix,
    )
    app = build(settings, auto_migrate=True)
    if server is not None:
        _ensure_appendfsync(app, options.appendfsync)
    from orders.sources.tpch import load_tpch

    load_tpch(app.session_factory, data_dir, scale=0.01)
    store = FaultStore(app.redis, settings.queue_prefix)
    store.clear()
    app.redis.delete(f"{store.key}:crashed")
    for step, config in handler_faults(options).items():
        store.set(step, config)
    Counters(app.redis, settings.queue_prefix).clear()
    return ChaosServices(app, server, data_dir, env)


def _ensure_appendfsync(app: App, wanted: str) -> None:
    """A server already running in a reused data dir keeps its settings: set ours."""
    current = app.redis.config_get("appendfsync")
    value = next(iter(current.values()), b"")
    value = value.decode() if isinstance(value, bytes) else value
    if value != wanted:
        log.info("embedded Redis had appendfsync %s; setting %s", value, wanted)
        app.redis.config_set("appendfsync", wanted)
