"""The relay's Publisher on top of reliable_queue: one enqueue round trip per queue."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

from reliable_queue import EnqueueRequest, Queue
from reliable_queue.cluster import UNAVAILABLE
from reliable_queue.errors import QueueConnectionError, ReplicationTimeoutError
from workflows.errors import PublisherUnavailable
from workflows.messages import StepMessage


def _request(message: StepMessage) -> EnqueueRequest:
    """The enqueue of one message: its trace context, and its priority and fairness key
    when it has them (a priority or key the queue refuses is a refusal of this message).
    Built in one go: a ``dataclasses.replace`` of a first request cost as much again. A
    message without a priority leaves the request's own default."""
    priority = {} if message.priority is None else {"priority": message.priority}
    return EnqueueRequest(
        message.task,
        message.payload,
        idempotency_key=message.idempotency_key,
        fairness_key=message.fairness_key,
        trace_context=message.trace_context,
        **priority,
    )


class QueuePublisher:
    """Publishes step messages with their idempotency keys.

    An idempotency hit is trusted only when its job is really in the queue
    (ready, delayed, active or dead-lettered): the queue decides, in
    :func:`reliable_queue.places.key_is_trusted`. A key whose job is gone,
    finished or stranded in no structure (a script that failed half-way, an
    evicted list) is dropped (:meth:`reliable_queue.Queue.drop_untrusted_keys`)
    and the step enqueued again: the database says the step is open, and the
    database is the source of truth. The handlers are idempotent, so an extra
    delivery is absorbed.

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
            PublisherUnavailable: Redis unreachable (or too few replicas answered);
                the relay leaves the steps pending for the sweep.
            reliable_queue.QueueError / redis.ResponseError: the queue refused a
                message (bad payload, a key of the wrong type); the relay isolates it.
        """
        by_queue: dict[str, list[StepMessage]] = defaultdict(list)
        for message in messages:
            by_queue[message.queue].append(message)
        try:
            for name, batch in by_queue.items():
                queue = self.queue_for(name)
                queue.drop_untrusted_keys([m.idempotency_key for m in batch])
                queue.enqueue_many([_request(m) for m in batch], replace_stale_keys=True)
        except (QueueConnectionError, ReplicationTimeoutError, *UNAVAILABLE) as exc:
            raise PublisherUnavailable(f"queue unreachable: {exc}") from exc

    def is_known(self, idempotency_key: str) -> bool:
        """Does the queue really hold the unfinished job of this step?

        True only when the key maps to a job that is ready, delayed, active or
        dead-lettered; a record in no structure does not count.

        Raises:
            QueueConnectionError: Redis unreachable.
        """
        return bool(self.known_keys([idempotency_key]))

    def known_keys(self, idempotency_keys: Sequence[str]) -> set[str]:
        """The keys among ``idempotency_keys`` whose step the queue really holds.

        :meth:`is_known` for many keys: per queue, one pipelined GET of the keys
        and one round trip of ``locate`` scripts
        (:meth:`reliable_queue.Queue.pending_jobs_for`), not two round trips a key.

        Returns:
            The keys that map to a job that is ready, delayed, active or
            dead-lettered.

        Raises:
            QueueConnectionError: Redis unreachable.
        """
        by_queue: dict[str, list[str]] = defaultdict(list)
        for key in idempotency_keys:
            by_queue[self.queue_of_key(key)].append(key)
        known: set[str] = set()
        for name, keys in by_queue.items():
            jobs = self.queue_for(name).pending_jobs_for(keys)
            known.update(key for key, job in zip(keys, jobs, strict=True) if job is not None)
        return known
