"""Injected failures per step, stored in Redis so running workers pick them up.

``orders inject STEP --fail-rate P [--permanent] [--crash-rate P] [--delay-ms D]``
(and ``orders chaos``, which also plants a poison job and a hung run) writes a
:class:`FaultConfig` into one Redis hash; every worker re-reads it at most once
per second (:class:`FaultSource`) and applies it around each handler call
(:class:`FaultMiddleware`). The decision itself
(:func:`decide`) is pure, with the randomness injected.
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from pydantic import BaseModel, ConfigDict, Field

from orders.observability.logs import signal_self_last
from reliable_queue import JobContext, PermanentError
from reliable_queue.middleware import BatchMiddleware, CallNext, Items, Results, call_rest

log = logging.getLogger("orders.worker")


class InjectedFailure(RuntimeError):
    """A transient failure injected by ``orders inject`` (retried like any other)."""


class FaultConfig(BaseModel):
    """Faults for one step.

    Attributes:
        fail_rate: probability (0..1) that a run raises before its effect.
        permanent: injected failures are permanent (straight to the DLQ) when True.
        crash_rate: probability (0..1) that the worker process SIGKILLs itself right
            after the effect committed, before the ack (the redelivery must be absorbed).
        delay_ms: sleep before the handler, milliseconds (a slow handler; past the
            lease it shows lease expiry and stale acks).
        crash_once: kill the process once (the first run that sees this config, per
            step, across all workers) after the effect, before the ack.
        slow_rate: probability (0..1) that a run stalls for ``slow_ms`` before the
            handler with its lease no longer extended, as if the process hung in a
            blocking call: a stall longer than the lease lets the lease expire, the
            job is reaped and delivered again while the stalled run goes on; that
            run's effect is then absorbed as a duplicate and its ack refused.
        slow_ms: length of such a stall, milliseconds.
        poison_key: the idempotency key (prefix) of poison jobs: every run of one SIGKILLs
            its process before the handler, as a native crash or an OOM kill would
            (None: off). The queue must charge it alone and dead-letter it as
            ``worker_lost``, never its batch-mates.
        hang_rate: probability (0..1) that a run hangs ``hang_ms`` before the handler
            with its lease still extended, as a call blocked on a lock would: only
            the task's time limit ends it (the attempt fails as ``timed_out``).
        hang_ms: length of such a hang, milliseconds.
        hang_in_tx_ms: the first unit of work of the step (across every worker,
            like ``crash_once``) hangs this long inside its transaction, after its
            writes and right before its commit, holding its locks (SQLite's write
            lock, PostgreSQL's row locks), as a process frozen there would; the pid
            of the process is kept (:meth:`FaultStore.hung_in_tx`). 0: off.
        freeze_in_tx_rate: probability (0..1) that a unit of work of the step stops
            its whole process (SIGSTOP to itself) inside its transaction, after its
            writes and right before its commit, as a GC pause, a VM stall or a
            debugger would; ``orders chaos`` thaws it (SIGCONT) later. Only a run
            under a supervisor that sends SIGCONT should use it.
    """

    model_config = ConfigDict(frozen=True)

    fail_rate: float = Field(0.0, ge=0.0, le=1.0)
    permanent: bool = False
    crash_rate: float = Field(0.0, ge=0.0, le=1.0)
    delay_ms: int = Field(0, ge=0)
    crash_once: bool = False
    slow_rate: float = Field(0.0, ge=0.0, le=1.0)
    slow_ms: int = Field(0, ge=0)
    poison_key: str | None = None
    hang_rate: float = Field(0.0, ge=0.0, le=1.0)
    hang_ms: int = Field(0, ge=0)
    hang_in_tx_ms: int = Field(0, ge=0)
    freeze_in_tx_rate: float = Field(0.0, ge=0.0, le=1.0)

    @property
    def active(self) -> bool:
        """True if this config injects anything."""
        slow = self.slow_rate and self.slow_ms
        return bool(
            self.fail_rate
            or self.crash_rate
            or self.delay_ms
            or self.crash_once
            or slow
            or self.poison_key
            or (self.hang_rate and self.hang_ms)
            or self.hang_in_tx_ms
            or self.freeze_in_tx_rate
        )


@dataclass(frozen=True)
class Decision:
    """What to do to one run: stall or sleep first, fail before the effect, crash after it.

    Attributes:
        delay_seconds: sleep before the handler (lease kept alive), seconds.
        fail / permanent: raise before the effect; permanent goes to the DLQ.
        crash_after: SIGKILL the process after the effect, before the ack.
        slow_seconds: stall before the handler with the lease left to expire, seconds.
        hang_seconds: hang before the handler with the lease kept alive, seconds.
    """

    delay_seconds: float = 0.0
    fail: bool = False
    permanent: bool = False
    crash_after: bool = False
    slow_seconds: float = 0.0
    hang_seconds: float = 0.0


def decide(config: FaultConfig | None, rng: random.Random) -> Decision:
    """Roll the dice for one run under ``config`` (pure: the randomness is injected)."""
    if config is None or not config.active:
        return Decision()
    fail = rng.random() < config.fail_rate
    crash = (not fail) and rng.random() < config.crash_rate
    slow = bool(config.slow_rate and config.slow_ms) and rng.random() < config.slow_rate
    hang = bool(config.hang_rate and config.hang_ms) and rng.random() < config.hang_rate
    return Decision(
        config.delay_ms / 1000.0,
        fail,
        fail and config.permanent,
        crash,
        config.slow_ms / 1000.0 if slow else 0.0,
        config.hang_ms / 1000.0 if hang else 0.0,
    )


def faults_key(prefix: str) -> str:
    """The Redis hash holding step -> FaultConfig JSON."""
    return f"{prefix}:inject"


class FaultStore:
    """Reads and writes fault configs in Redis.

    Args:
        client: redis client.
        prefix: the application's queue prefix.
    """

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.client = client
        self.key = faults_key(prefix)

    def set(self, step: str, config: FaultConfig) -> None:
        """Store ``config`` for ``step`` (a config that injects nothing clears it)."""
        if config.active:
            self.client.hset(self.key, step, config.model_dump_json())
        else:
            self.client.hdel(self.key, step)

    def clear(self) -> None:
        """Remove every injected fault."""
        self.client.delete(self.key)

    def all(self) -> dict[str, FaultConfig]:
        """Every step's config."""
        raw = self.client.hgetall(self.key)
        out = {}
        for step, value in raw.items():
            name = step.decode() if isinstance(step, bytes) else step
            out[name] = FaultConfig.model_validate_json(value)
        return out

    def claim_crash_once(self, step: str) -> bool:
        """Atomically turn off ``crash_once`` for ``step``; True for the one caller that did."""
        return bool(self.client.hsetnx(f"{self.key}:crashed", step, "1"))

    def claim_hang_in_tx(self, step: str) -> bool:
        """Atomically take ``hang_in_tx_ms`` of ``step`` for this process (its pid is
        kept); True for the one caller that did."""
        return bool(self.client.hsetnx(f"{self.key}:hung_in_tx", step, str(os.getpid())))

    def hung_in_tx(self, step: str) -> int | None:
        """The pid of the process whose unit of work of ``step`` hangs (or hung), or None."""
        pid: Any = self.client.hget(f"{self.key}:hung_in_tx", step)
        return None if pid is None else int(pid)


class FaultSource:
    """A cached view of the fault configs, refreshed at most every ``ttl`` seconds."""

    def __init__(
        self, store: FaultStore, ttl: float = 1.0, clock: Callable[[], float] = time.monotonic
    ):
        self.store = store
        self.ttl = ttl
        self.clock = clock
        self._lock = threading.Lock()
        self._cache: dict[str, FaultConfig] = {}
        self._at = float("-inf")

    def get(self, step: str) -> FaultConfig | None:
        """The current config of ``step`` (None if none); a Redis error keeps the cache."""
        now = self.clock()
        if now - self._at >= self.ttl:
            with self._lock:
                if now - self._at >= self.ttl:
                    try:
                        self._cache = self.store.all()
                    except (redis.RedisError, ValueError):
                        pass
                    self._at = now
        return self._cache.get(step)


class FaultMiddleware(BatchMiddleware):
    """Worker middleware applying injected faults around each job's handler run.

    Args:
        source: where configs come from.
        step_of: maps a job context to its step name (default: the queue name).
        rng: randomness (inject a seeded one in tests).
        kill: how the process dies (default SIGKILL to itself, once every log line is
            out: ``orders.observability.logs.signal_self_last``). The line saying why
            is logged first, whatever ``kill`` does.
        freeze: how the process stops itself (default SIGSTOP to itself, the same way;
            it goes on when something sends it SIGCONT).
        stall: called with the job's context when a slow run starts; it must stop the
            lease of that job from being extended (the worker runner drops the job
            from the heartbeat's lease book). Default: nothing.
        on_injected: called with ``(step, kind)`` for every fault applied, kind one
            of ``fail``, ``slow``, ``crash`` (for counting; must not raise).
    """

    def __init__(
        self,
        source: FaultSource,
        *,
        step_of: Callable[[JobContext], str] = lambda ctx: ctx.queue,
        rng: random.Random | None = None,
        kill: Callable[[], None] | None = None,
        freeze: Callable[[], None] | None = None,
        stall: Callable[[JobContext], None] = lambda ctx: None,
        on_injected: Callable[[str, str], None] = lambda step, kind: None,
    ) -> None:
        self.source = source
        self.step_of = step_of
        self.rng = rng or random.Random()
        self.kill = kill or (lambda: signal_self_last(signal.SIGKILL))
        self.freeze = freeze or (lambda: signal_self_last(signal.SIGSTOP))
        self.stall = stall
        self.on_injected = on_injected

    def around(self, items: Items, call_next: CallNext) -> Results:
        """Apply the faults to each job: alone, or in a batch (one handler call).

        Each job gets its own roll of the dice. A job failed before its effect is
        left out of the handler call and fails alone; the crashes decided for jobs
        that succeeded come after the call (their effects committed), before the acks.
        """
        errors: Results = [None] * len(items)
        decided: list[tuple[int, JobContext, Decision, FaultConfig | None]] = []
        for i, (_, ctx) in enumerate(items):
            try:
                decided.append((i, ctx, *self.before(ctx)))
            except Exception as exc:  # an injected failure: this job only
                errors[i] = exc
        call_rest(items, errors, call_next)
        for i, ctx, decision, config in decided:
            if errors[i] is None:
                self.after(ctx, decision, config)
        return errors

    def before(self, ctx: JobContext) -> tuple[Decision, FaultConfig | None]:
        """Roll the dice for one run and apply what comes before the effect.

        Kills the process for a poison job (before its effect); sleeps for a hung
        (lease kept), slow or delayed run; raises for an injected failure.

        Returns:
            The decision and the config it came from, for :meth:`after`.

        Raises:
            InjectedFailure: a transient injected failure.
            PermanentError: a permanent injected failure.
        """
        step = self.step_of(ctx)
        config = self.source.get(step)
        key = ctx.idempotency_key or ""
        if config is not None and config.poison_key and key.startswith(config.poison_key):
            self.on_injected(step, "poison")
            log.warning(
                "injected poison job on step %s (idempotency key %s): this process kills "
                "itself (SIGKILL) before the handler, as a native crash would",
                step,
                key,
                extra={"exit_reason": "injected poison job"},
            )
            self.kill()
        decision = decide(config, self.rng)
        if decision.hang_seconds:
            self.on_injected(step, "hang")
            time.sleep(decision.hang_seconds)
        if decision.slow_seconds:
            self.on_injected(step, "slow")
            self.stall(ctx)
            time.sleep(decision.slow_seconds)
        if decision.delay_seconds:
            time.sleep(decision.delay_seconds)
        if decision.fail:
            self.on_injected(step, "fail")
            message = f"injected failure on step {step} (attempt {ctx.attempt})"
            raise PermanentError(message) if decision.permanent else InjectedFailure(message)
        return decision, config

    def in_transaction(self, step: str) -> None:
        """Inside a unit of work of ``step``, right before its commit: hang or freeze
        the process if configured.

        Only the first unit of work anywhere that sees ``hang_in_tx_ms`` hangs; each
        one freezes with probability ``freeze_in_tx_rate``.
        """
        config = self.source.get(step)
        if config is None:
            return
        if config.freeze_in_tx_rate and self.rng.random() < config.freeze_in_tx_rate:
            self.on_injected(step, "freeze_in_tx")
            log.warning(
                "injected freeze on step %s (freeze rate %g): this process stops itself "
                "(SIGSTOP) inside its transaction until it gets SIGCONT",
                step,
                config.freeze_in_tx_rate,
            )
            self.freeze()
        if config.hang_in_tx_ms and self.source.store.claim_hang_in_tx(step):
            self.on_injected(step, "hang_in_tx")
            time.sleep(config.hang_in_tx_ms / 1000.0)

    def after(self, ctx: JobContext, decision: Decision, config: FaultConfig | None) -> None:
        """After the effect committed, before the ack: crash the process if decided."""
        step = self.step_of(ctx)
        crash_once = (
            config is not None and config.crash_once and self.source.store.claim_crash_once(step)
        )
        if decision.crash_after or crash_once:
            self.on_injected(step, "crash")
            rate = config.crash_rate if config is not None else 0.0
            rule = "crash once" if crash_once else f"crash rate {rate:g}"
            log.warning(
                "injected crash on step %s (%s, orders inject): this process kills itself "
                "(SIGKILL) after the effect committed, before the ack; the job is delivered "
                "again and the redelivery absorbed",
                step,
                rule,
                extra={"exit_reason": "injected crash"},
            )
            self.kill()


def describe(configs: dict[str, FaultConfig]) -> dict[str, dict[str, Any]]:
    """JSON-ready view of configs for ``orders status``."""
    return {step: json.loads(c.model_dump_json()) for step, c in configs.items()}


__all__ = [
    "Decision",
    "FaultConfig",
    "FaultMiddleware",
    "FaultSource",
    "FaultStore",
    "InjectedFailure",
    "decide",
    "describe",
]
