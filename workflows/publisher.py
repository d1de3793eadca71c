"""The relay's Publisher on top of reliable_queue: one enqueue round trip per queue."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

from reliable_queue import EnqueueRequest, Queue
from workflows.relay import StepMessage


class QueuePublisher:
    """Publishes step messages with their idempotency keys.

    Stale keys are replaced (``replace_stale_keys``): when a key still maps to a
    job Redis no longer holds (lost in a crash, or purged), the step is enqueued
    again instead of being swallowed as a duplicate. The handlers are idempotent,
    so an extra delivery is absorbed.

    Args:
        queue_for: returns the :class:`~reliable_queue.Queue` of a queue name.
        queue_of_key: maps an idempotency key ``<workflow id>:<step>`` to its queue
            name (default: the step name is the queue name).
    """

    def __init__(
        self,
        queue_for: Callable[[str], Queue],
        queue_of_key: Callable[[str], str] = lambda key: key.rsplit(":", 1)[1],
    ) -> None:
        self.queue_for = queue_for
        self.queue_of_key = queue_of_key

    def publish(self, messages: Sequence[StepMessage]) -> None:
        """Enqueue ``messages``, one batch per queue.

        Raises:
            reliable_queue.QueueError: Redis unreachable or a message refused; the
                relay then leaves the steps pending for the sweep.
        """
        by_queue: dict[str, list[StepMessage]] = defaultdict(list)
        for message in messages:
            by_queue[message.queue].append(message)
        for name, batch in by_queue.items():
            self.queue_for(name).enqueue_many(
                [
                    EnqueueRequest(m.task, m.payload, idempotency_key=m.idempotency_key)
                    for m in batch
                ],
                replace_stale_keys=True,
            )

    def is_known(self, idempotency_key: str) -> bool:
        """Does Redis hold the unfinished job of this step (ready, delayed, active, dead)?

        Raises:
            reliable_queue.QueueConnectionError: Redis unreachable.
        """
        queue = self.queue_for(self.queue_of_key(idempotency_key))
        return queue.pending_job_for(idempotency_key) is not None
