"""reliable_queue: an at-least-once Redis task queue.

Every state change of a job is one Lua script (atomic); leases are fenced by
tokens; expired leases are reaped; failures retry with exponential backoff and
full jitter; bad jobs go to a dead-letter queue with their reason.
"""

from .attempt_tracing import AttemptTracing
from .audit import AuditReport, audit
from .dlq import DeadLetter, DeadLetters, RedriveReport
from .errors import (
    AttemptLost,
    InvalidTextError,
    InvalidTraceContextError,
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
from .inspection import JobExplanation, QueueStats, explain, oldest_waiting_seconds, stats
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
from .presence import LaneInfo, WorkerInfo, WorkersView, workers
from .queue import DEAD_REASONS, Queue
from .registry import TaskDefinition, TaskRegistry
from .settings import QueueSettings
from .trace_context import TraceContext
from .worker import Worker, WorkerHooks

__all__ = [
    "DEAD_REASONS",
    "AckResult",
    "AmbiguousJobIdError",
    "AttemptLost",
    "AttemptTracing",
    "AuditReport",
    "DeadLetter",
    "DeadLetters",
    "EnqueueRequest",
    "FetchResult",
    "InvalidTextError",
    "InvalidTraceContextError",
    "JobContext",
    "JobExplanation",
    "JobIdLookupError",
    "JobIdNotFoundError",
    "JobIdTooShortError",
    "LaneInfo",
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
    "TraceContext",
    "Throttled",
    "UnknownTaskError",
    "Worker",
    "WorkerHooks",
    "WorkerInfo",
    "WorkersView",
    "audit",
    "explain",
    "oldest_waiting_seconds",
    "find_job",
    "stats",
    "workers",
]
