"""reliable_queue: an at-least-once Redis task queue.

Every state change of a job is one Lua script (atomic); leases are fenced by
tokens; expired leases are reaped; failures retry with exponential backoff and
full jitter; bad jobs go to a dead-letter queue with their reason.

The dead-letter view, the inspection reads and the consumer spans are imported when
one of their names is first asked for: a worker serving jobs needs none of them at
start, and every module imported is start-up CPU.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .audit import AuditReport, audit
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

if TYPE_CHECKING:
    from .attempt_tracing import AttemptTracing
    from .dlq import DeadLetter, DeadLetters, RedriveReport
    from .inspection import JobExplanation, QueueStats, explain, oldest_waiting_seconds, stats

#: Exported names imported from their module on first use: name -> module.
_ON_FIRST_USE = {
    "AttemptTracing": "attempt_tracing",
    "DeadLetter": "dlq",
    "DeadLetters": "dlq",
    "RedriveReport": "dlq",
    "JobExplanation": "inspection",
    "QueueStats": "inspection",
    "explain": "inspection",
    "oldest_waiting_seconds": "inspection",
    "stats": "inspection",
}


def __getattr__(name: str) -> Any:
    """An exported name of :data:`_ON_FIRST_USE`, imported from its module now (and kept).

    Raises:
        AttributeError: the package has no such name.
    """
    module = _ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


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
