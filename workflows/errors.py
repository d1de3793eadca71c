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


class FencedOut(WorkflowError):
    """A delivery's fencing token is not above the highest its step row has seen.

    A later attempt of the step already reached the database (it committed, failed
    or was dead-lettered with a higher token, or this very attempt's failure was
    recorded), so this one is refused: nothing of it is applied (ADR 0023).
    Retryable: a current delivery gets a new, higher token.

    Attributes:
        token: the delivery's fencing token.
        row_token: the highest token the step row has seen.
        seen_token: ``row_token`` when it is above ``token``, else None. The database
            then knows a token the queue may hand out again (after Redis lost data
            the counter can go back); a caller can raise the queue's floor past it.
    """

    retryable = True
    reason = "fenced_out"
    """The refusal's reason, beside an attempt guard's (a bounded metric label)."""

    def __init__(self, message: str, *, token: int, row_token: int) -> None:
        super().__init__(message)
        self.token = token
        self.row_token = row_token
        self.seen_token = row_token if row_token > token else None


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
