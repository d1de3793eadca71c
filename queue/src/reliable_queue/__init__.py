"""reliable_queue: an at-least-once Redis task queue.

Every state change of a job is one Lua script (atomic); leases are fenced by
tokens; expired leases are reaped; failures retry with exponential backoff and
full jitter; bad jobs go to a dead-letter queue with their reason.
"""

from .audit import AuditReport, audit
from .dlq import DeadLetter, DeadLetters, RedriveReport
from .errors import (
    AttemptLost,
    InvalidTextError,
    PartialRoundTripError,
    PayloadTooLargeError,
    PayloadValidationError,
    PermanentError,
    QueueConnectionError,
    QueueDataError,
    QueueError,
    QueueLimitError,
    ReplicationTimeoutError,
    ScriptUnavailableError,
    StaleLeaseError,
    Throttled,
    UnknownTaskError,
)
from .inspection import JobExplanation, QueueStats, explain, stats
from .job import AckResult, EnqueueRequest, FetchResult, JobContext, Lease, RawJob
from .lookup import (
    AmbiguousJobIdError,
    JobIdLookupError,
    JobIdNotFoundError,
    JobIdTooShortError,
    find_job,
)
from .pausing import PauseState
from .policy import RetryPolicy
from .queue import DEAD_REASONS, Queue
from .registry import TaskDefinition, TaskRegistry
from .settings import QueueSettings
from .worker import Worker, WorkerHooks

__all__ = [
    "DEAD_REASONS",
    "AckResult",
    "AmbiguousJobIdError",
    "AttemptLost",
    "AuditReport",
    "DeadLetter",
    "DeadLetters",
    "EnqueueRequest",
    "FetchResult",
    "InvalidTextError",
    "JobContext",
    "JobExplanation",
    "JobIdLookupError",
    "JobIdNotFoundError",
    "JobIdTooShortError",
    "Lease",
    "PartialRoundTripError",
    "PayloadTooLargeError",
    "PayloadValidationError",
    "PauseState",
    "PermanentError",
    "Queue",
    "QueueConnectionError",
    "QueueDataError",
    "QueueError",
    "QueueLimitError",
    "QueueSettings",
    "QueueStats",
    "RawJob",
    "RedriveReport",
    "ReplicationTimeoutError",
    "ScriptUnavailableError",
    "RetryPolicy",
    "StaleLeaseError",
    "TaskDefinition",
    "TaskRegistry",
    "Throttled",
    "UnknownTaskError",
    "Worker",
    "WorkerHooks",
    "audit",
    "explain",
    "find_job",
    "stats",
]
