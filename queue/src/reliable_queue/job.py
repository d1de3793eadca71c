"""Value types that cross the queue API: requests, fetched jobs, leases, contexts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel


@dataclass(frozen=True, slots=True)
class EnqueueRequest:
    """One job to enqueue.

    Attributes:
        task: registered task name.
        payload: a JSON-serialisable dict or a pydantic model instance.
        idempotency_key: a duplicate enqueue within the window returns the first job's id.
        delay: seconds from now (Redis server clock) before the job may run.
        run_at: absolute epoch seconds before which the job may not run (wins over delay).
        max_attempts: total runs allowed; None takes the task policy or queue default.
    """

    task: str
    payload: dict[str, Any] | BaseModel
    idempotency_key: str | None = None
    delay: float = 0.0
    run_at: float | None = None
    max_attempts: int | None = None


@dataclass(frozen=True, slots=True)
class Lease:
    """Proof that a worker holds a job: its id and the lease token of this delivery."""

    job_id: str
    token: str


@dataclass(frozen=True, slots=True)
class RawJob:
    """A fetched job before decoding: what the fetch script returned.

    Attributes:
        queue: queue name.
        job_id: job id.
        token: lease token of this delivery, ``"<seq>:<worker id>"``.
        attempt: 1-based number of this delivery.
        record: the stored record bytes (may be garbage if a foreign producer wrote it).
        lease: the lease to present on ack / nack / extend (derived from ``job_id`` and
            ``token``; built once, since the worker reads it several times per job).
    """

    queue: str
    job_id: str
    token: str
    attempt: int
    record: bytes
    lease: Lease = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "lease", Lease(self.job_id, self.token))


@dataclass(frozen=True, slots=True)
class JobContext:
    """What a handler may know about the job it runs.

    Attributes:
        job_id: job id.
        queue: queue name.
        task: task name.
        attempt: 1-based delivery number.
        max_attempts: total runs allowed.
        lease_token: the opaque lease token of this delivery.
        fencing_token: the monotonic number inside the lease token; larger means a
            later delivery, so an application can refuse a write from an older one.
        enqueued_at: producer wall-clock time of the enqueue, epoch seconds.
        idempotency_key: the key given at enqueue, or None.
    """

    job_id: str
    queue: str
    task: str
    attempt: int
    max_attempts: int
    lease_token: str
    fencing_token: int
    enqueued_at: float
    idempotency_key: str | None


@dataclass(frozen=True, slots=True)
class FetchResult:
    """Result of one fetch call.

    Attributes:
        jobs: leased jobs, at most the count asked for.
        wait_seconds: when ``jobs`` is empty, seconds until the next delayed job is due
            or the next lease expires (None if neither exists).
        reaped: expired leases reclaimed by this call.
        reap_more: True if reaping hit ``reap_limit`` and more expired leases remain.
    """

    jobs: list[RawJob]
    wait_seconds: float | None
    reaped: int
    reap_more: bool


@dataclass(frozen=True, slots=True)
class AckResult:
    """Which acks were recorded and which were refused as stale."""

    acked: list[str]
    refused: list[str]
