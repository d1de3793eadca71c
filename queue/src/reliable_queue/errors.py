"""The error tree of reliable_queue: one root, translated at the boundary.

Infrastructure errors from redis-py are re-raised as :class:`QueueConnectionError`
with ``raise ... from`` so callers never need to import redis to handle them.
"""

from __future__ import annotations


class QueueError(Exception):
    """Root of every error this package raises."""


class QueueConnectionError(QueueError):
    """Redis could not be reached or dropped the connection mid-command."""


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


class PermanentError(Exception):
    """Raise from a handler for a failure that a retry cannot fix.

    The job goes to the dead-letter queue at once with reason ``error``.
    Deliberately not a :class:`QueueError`: handlers raise it, the queue does not.
    """
