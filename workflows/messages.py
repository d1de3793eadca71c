"""The step message and the Publisher protocol the relay publishes through."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class StepMessage:
    """One queue message for one step.

    Attributes:
        queue: queue name (the step name).
        task: task name, for example ``orders.stock``.
        payload: JSON-able body; holds ``workflow_id`` and ``step``.
        idempotency_key: ``f"{workflow_id}:{step}"``.
    """

    queue: str
    task: str
    payload: dict[str, Any]
    idempotency_key: str


class Publisher(Protocol):
    """Sends step messages to the queue (adapter: ``workflows.publisher``)."""

    def publish(self, messages: Sequence[StepMessage]) -> None:
        """Enqueue every message, deduplicated by idempotency key.

        Raises:
            workflows.errors.PublisherUnavailable: the queue cannot be reached;
                nothing is charged to the rows, the sweep tries again.
            Exception: any other error is a refusal of (some of) these messages;
                the relay splits the batch to find the rows to blame.
        """
        ...
