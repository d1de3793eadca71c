"""Tunable limits of a queue. The application maps its own settings onto these."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from .limits import (
    MAX_ATTEMPTS,
    MAX_DELAY_SECONDS,
    MAX_DLQ_SIZE,
    MAX_LEASE_SECONDS,
    MAX_PAYLOAD_BYTES,
    MAX_THROTTLES,
)


class QueueSettings(BaseModel):
    """Per-queue limits and windows. All durations are in seconds.

    Every number has an upper bound (see :mod:`reliable_queue.limits` and the table in
    docs/reliability.md): a value past it is refused when the settings are built.

    Attributes:
        lease_seconds: how long a fetched job stays leased without a heartbeat.
        default_max_attempts: total runs of a job when neither the enqueue nor its
            task policy says otherwise (0 and 1 both mean "no retry").
        job_retention_seconds: how long a finished job's record is kept for
            ``explain`` (0 deletes it at ack). Counters are kept regardless.
        idempotency_window_seconds: how long an idempotency key maps to its first job.
        max_payload_bytes: size limit of the encoded job record, checked at enqueue.
        dlq_max_size: dead-letter entries kept per queue; the oldest beyond are dropped
            (and counted in ``dlq_dropped``).
        dlq_max_age_seconds: dead-letter entries older than this are dropped (counted).
        reap_limit: expired leases reclaimed per fetch call (at most 500, one script
            call's batch); a fetch that hits the limit reports it and the worker reaps
            again at once, so reaping never falls behind.
        max_block_seconds: longest an idle worker blocks on Redis before re-checking
            (delayed jobs and lease expiries shorten it).
        wake_tokens: cap of the wake-up list idle workers block on (at most 1,000).
        traceback_max_chars: stored traceback text is cut to this length.
        min_replicas: replicas that must acknowledge every enqueue / ack / nack / dead
            / redrive (Redis WAIT on the same connection) before it counts as done;
            0 (default) waits for none. Below it the call raises
            :class:`~reliable_queue.errors.ReplicationTimeoutError`.
        replica_timeout_seconds: longest WAIT for those replicas.
        maintenance_interval_seconds: how often each worker trims the DLQ (age and
            size bounds) and finished records (retention) in bounded steps, so a
            quiet queue is trimmed too; 0 turns it off.
        audit_interval_seconds: how often each worker runs the audit with repair
            (:func:`reliable_queue.audit`); 0 turns it off.
        default_time_limit_seconds: longest one run of a job may take when its task's
            policy sets no ``time_limit``; 0 (default) means no limit. Past it the
            worker fails the attempt as ``timed_out`` (see ``Worker``).
        max_throttles: how often one attempt of a job may be put off by its handler's
            :class:`~reliable_queue.errors.Throttled` without being charged (ADR 0034);
            the next one ends the attempt as an ordinary failure. 0: every throttle is
            an ordinary failure.
    """

    model_config = ConfigDict(frozen=True, allow_inf_nan=False)

    lease_seconds: float = Field(30.0, gt=0, le=MAX_LEASE_SECONDS)
    default_max_attempts: int = Field(5, ge=0, le=MAX_ATTEMPTS)
    job_retention_seconds: float = Field(3600.0, ge=0, le=MAX_DELAY_SECONDS)
    idempotency_window_seconds: float = Field(86400.0, gt=0, le=MAX_DELAY_SECONDS)
    max_payload_bytes: int = Field(256 * 1024, gt=0, le=MAX_PAYLOAD_BYTES)
    dlq_max_size: int = Field(100_000, gt=0, le=MAX_DLQ_SIZE)
    dlq_max_age_seconds: float = Field(7 * 86400.0, gt=0, le=MAX_DELAY_SECONDS)
    reap_limit: int = Field(500, gt=0, le=500)
    max_block_seconds: float = Field(2.0, gt=0, le=3600)
    wake_tokens: int = Field(16, gt=0, le=1000)
    traceback_max_chars: int = Field(4000, ge=0, le=1_000_000)
    min_replicas: int = Field(0, ge=0, le=100)
    replica_timeout_seconds: float = Field(1.0, gt=0, le=3600)
    maintenance_interval_seconds: float = Field(60.0, ge=0, le=MAX_LEASE_SECONDS)
    audit_interval_seconds: float = Field(600.0, ge=0, le=MAX_LEASE_SECONDS)
    default_time_limit_seconds: float = Field(0.0, ge=0, le=MAX_LEASE_SECONDS)
    max_throttles: int = Field(20, ge=0, le=MAX_THROTTLES)
