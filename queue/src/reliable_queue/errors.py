"""The error tree of reliable_queue: one root, translated at the boundary.

Infrastructure errors from redis-py are re-raised as :class:`QueueConnectionError`
with ``raise ... from`` so callers never need to import redis to handle them.
"""

from __future__ import annotations

import math


class QueueError(Exception):
    """Root of every error this package raises."""


class QueueConnectionError(QueueError):
    """Redis could not be reached or dropped the connection mid-command."""


class ReplicationTimeoutError(QueueError):
    """Fewer replicas than ``QueueSettings.min_replicas`` acknowledged a write in time.

    The write itself happened on the master (an enqueue returned no id, but the job
    may exist): a failover before the replicas catch up may lose it. Re-sending an
    enqueue with the same idempotency key is safe. Not a :class:`QueueConnectionError`:
    Redis answered, only the durability level was not reached.

    Attributes:
        acked: replicas that acknowledged (the smallest WAIT reply of the round trip).
        wanted: replicas required.
        replies: the round trip's replies (the scripts did run).
    """

    def __init__(self, acked: int, wanted: int, replies: list[object] | None = None) -> None:
        super().__init__(
            f"only {acked} of {wanted} required replica(s) acknowledged the write in time"
        )
        self.acked = acked
        self.wanted = wanted
        self.replies = replies or []


class QueueDataError(QueueError):
    """A queue key holds data of the wrong type or shape (a foreign writer, a manual edit).

    Raised when a script refused to run: it validates every key it would touch before
    its first write, so nothing of the call was applied. The message names the key.
    """


class QueueLimitError(QueueError, ValueError):
    """A request exceeds a documented limit (see :mod:`reliable_queue.limits`): a number
    argument past its bound, or not a number of the kind the argument takes. Raised
    before anything is sent to Redis."""


class InvalidTextError(QueueError, ValueError):
    """A text argument cannot be stored as UTF-8 (it holds a lone surrogate such as
    ``"\\ud800"``, which Python strings allow and UTF-8 cannot encode). The message names
    the argument and the position. Raised before anything is sent to Redis.

    Attributes:
        argument: what the text was given as (``idempotency key``, ``task name``, ...).
        position: index of the first unencodable character.
    """

    def __init__(self, argument: str, value: str, position: int) -> None:
        near = value[max(0, position - 20) : position + 20]
        shown = near.encode("ascii", "backslashreplace").decode("ascii")
        super().__init__(
            f"{argument} is not valid text: character {position} is a lone surrogate "
            f'(near "{shown}"); UTF-8 cannot encode it'
        )
        self.argument = argument
        self.position = position


class InvalidTraceContextError(QueueError, ValueError):
    """A trace context given to the queue is not W3C Trace Context (a traceparent that is
    not ``00-<32 hex>-<16 hex>-<2 hex>``, or a tracestate that is too long or not
    printable ASCII). Raised before anything is sent to Redis; the message says which."""


class ScriptUnavailableError(QueueError):
    """Redis kept answering NOSCRIPT after the bounded number of re-sends.

    Attributes:
        replies: one entry per call of the round trip: the reply of a call that ran,
            None for one that did not (it may be sent again).
    """

    def __init__(self, message: str, replies: list[object] | None = None) -> None:
        super().__init__(message)
        self.replies = replies or []


class PartialRoundTripError(QueueConnectionError):
    """A pipelined round trip gave up part-way (the cluster kept redirecting).

    Some calls ran: their replies are kept so the caller acts on them instead of
    sending them again.

    Attributes:
        replies: one entry per call: the reply of a call that ran, None for one that
            did not run (safe to send again).
    """

    def __init__(self, message: str, replies: list[object]) -> None:
        super().__init__(message)
        self.replies = replies


class PayloadTooLargeError(QueueError):
    """The encoded job record is larger than ``QueueSettings.max_payload_bytes``."""


class PayloadValidationError(QueueError):
    """The payload does not satisfy the task's pydantic model (raised at enqueue)."""


class UnknownTaskError(QueueError):
    """A task name is not registered in the :class:`~reliable_queue.TaskRegistry` in use."""


class StaleLeaseError(QueueError):
    """An ack / nack / extend presented a lease token that is no longer current.

    The job's lease expired and it was reaped (and possibly handed to another
    worker), or the job finished. The caller must not assume its outcome was
    recorded.
    """


class AttemptLost(QueueError):
    """An attempt no longer holds its lease: the guarded block did not run.

    Raised on entry of ``with ctx.hold_lease():`` (``reliable_queue.attempts``) when
    the attempt was timed out or abandoned, its lease was refused an extend, or the
    lease's locally known deadline is about to pass. Whatever the block would have
    written belongs to the job's next delivery. As a handler's error it is retried,
    never dead-lettered: a lost attempt does not decide its job's fate.

    Attributes:
        reason: ``timed_out``, ``abandoned``, ``lease_lost`` or ``lease_expired``.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(f"the attempt no longer holds its lease ({reason})")
        self.reason = reason


class TimeLimitExceeded(QueueError):
    """An isolated run was killed at its time limit (``reliable_queue.isolation``).

    What the worker's middleware sees as the handler call's error; the worker then
    settles the run as ``timed_out`` (a lone run is charged, a batch call handed back
    uncharged), as it does for a thread it abandons.
    """


class IsolatedChildError(QueueError):
    """The child process of an isolated task could not start, or died during a call.

    As a handler's error it is an ordinary failure of that run (retried per policy);
    a batch call whose child died is handed back uncharged, each job run alone next.

    Attributes:
        returncode: the child's exit status as ``subprocess`` gives it (negative: the
            signal that killed it), or None while it was still running or never ran.
    """

    def __init__(self, message: str, returncode: int | None = None) -> None:
        super().__init__(message)
        self.returncode = returncode


class IsolatedError(Exception):
    """An exception a handler raised in an isolated child, carried back as text.

    Deliberately not a :class:`QueueError`: it stands for the handler's own error.
    The worker records it as that error (``type_name: message``) with the child's
    traceback.

    Attributes:
        type_name: the class name of the child's exception (e.g. ``ValueError``).
        message: its ``str()``.
        traceback_text: the child's formatted traceback.
        retryable: its ``retryable`` attribute when it had a bool one, else None.
        cause_type_name: the class name of its ``__cause__``, or None.
    """

    def __init__(
        self,
        type_name: str,
        message: str,
        traceback_text: str = "",
        retryable: bool | None = None,
        cause_type_name: str | None = None,
    ) -> None:
        super().__init__(message)
        self.type_name = type_name
        self.message = message
        self.traceback_text = traceback_text
        self.retryable = retryable
        self.cause_type_name = cause_type_name


class PermanentError(Exception):
    """Raise from a handler for a failure that a retry cannot fix.

    The job goes to the dead-letter queue at once with reason ``error``.
    Deliberately not a :class:`QueueError`: handlers raise it, the queue does not.
    """


#: Longest a throttle may hold a job back, seconds: ten years (limits.MAX_DELAY_SECONDS;
#: limits imports this module, so the figure is repeated here and a test holds them equal).
MAX_THROTTLE_DELAY_SECONDS = 10 * 366 * 86400.0


class Throttled(Exception):  # noqa: N818 - named for what the handler says, like PermanentError
    """Raise from a handler when a downstream throttles it (an HTTP 429, a provider's
    quota): the job waits ``delay_seconds`` and then goes first in its band, and the
    attempt is not charged (ADR 0034).

    At most ``QueueSettings.max_throttles`` throttles per attempt are free; the next
    one is an ordinary failure of the attempt (retried with backoff, or dead-lettered
    at max attempts), which also starts the count again. Deliberately not a
    :class:`QueueError`: handlers raise it, the queue does not.

    Args:
        delay_seconds: how long to hold the job back, seconds (a finite number in
            ``0..MAX_DELAY_SECONDS``; a downstream's ``Retry-After``).
        message: what the downstream said (kept as the job's last failure).

    Raises:
        QueueLimitError: ``delay_seconds`` is not such a number.
    """

    def __init__(self, delay_seconds: float, message: str = "") -> None:
        seconds = delay_seconds
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not math.isfinite(seconds)
            or not 0 <= seconds <= MAX_THROTTLE_DELAY_SECONDS
        ):
            raise QueueLimitError(
                f"a throttle's delay is 0..{MAX_THROTTLE_DELAY_SECONDS:g} seconds,"
                f" not {delay_seconds!r}"
            )
        self.delay_seconds = float(seconds)
        super().__init__(message or f"throttled by a downstream for {self.delay_seconds:g} s")
        self.message = str(self.args[0])


class IsolatedPermanentError(IsolatedError, PermanentError):
    """An :class:`IsolatedError` whose child exception was a :class:`PermanentError`:
    dead-lettered at once, as it would be in a thread."""
