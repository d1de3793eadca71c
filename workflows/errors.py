"""Error tree of the workflows package (root: ``WorkflowError``).

``retryable`` tells a queue adapter what to do: a retryable error is a nack
with backoff; a non-retryable one goes straight to the dead-letter queue.
"""

from __future__ import annotations


class WorkflowError(Exception):
    """Root of every error raised by ``workflows``."""

    retryable: bool = False


class ConcurrencyConflict(WorkflowError):
    """A unit of work kept losing to concurrent writers; retry the job later."""

    retryable = True


class StepNotFound(WorkflowError):
    """No step row for (workflow id, step): the message does not match the database."""

    retryable = False


class StepNotReady(WorkflowError):
    """A step was delivered while it still waits for its prerequisites; retry it later.

    The relay never publishes a waiting step, so this means a stale or forged
    message: nothing is applied, and the queue's retry finds the step released
    (or skipped, then absorbed without an effect).
    """

    retryable = True


class SubjectMismatch(WorkflowError):
    """A message names a subject that is not its workflow's subject."""

    retryable = False


class PublisherUnavailable(WorkflowError):
    """The queue cannot be reached: no row is to blame, every row stays pending.

    A queue adapter raises it (``raise ... from`` the transport error) so the
    relay tells an outage, which it leaves to the next sweep, from a refusal of
    particular rows, which it isolates and charges to those rows.
    """

    retryable = True


class RowsNotRetryable(WorkflowError):
    """``orders outbox retry`` was given step ids that are not unpublishable rows.

    Nothing was changed. Attributes:
        reasons: step id -> why it cannot be retried (``no such step record``,
            ``already published``, ...), in the order the ids were given.
    """

    retryable = False

    def __init__(self, reasons: dict[int, str]) -> None:
        self.reasons = reasons
        listed = "; ".join(f"{step_id}: {why}" for step_id, why in reasons.items())
        super().__init__(
            "not retried (only unpublishable rows, and dead rows whose dead letter is gone, "
            f"are): {listed}"
        )
