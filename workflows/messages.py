"""The step message, the dispatched row it is built from, and the Publisher protocol."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from reliable_queue.trace_context import TraceContext


@dataclass(frozen=True)
class StepMessage:
    """One queue message for one step.

    Attributes:
        queue: queue name (the step name).
        task: task name, for example ``orders.stock``.
        payload: JSON-able body; holds ``workflow_id`` and ``step``.
        idempotency_key: ``f"{workflow_id}:{step}"``.
        priority: the queue priority of the job (the queue's range; lower runs sooner),
            or None for the queue's default.
        fairness_key: the job's fairness key (jobs of different keys are served in
            turn), or None for none.
        trace_context: the workflow's trace context from its row (None: none); the
            job is created in it (docs/adr/0036).
    """

    queue: str
    task: str
    payload: dict[str, Any]
    idempotency_key: str
    priority: int | None = None
    fairness_key: str | None = None
    trace_context: TraceContext | None = None


class DispatchedStep(NamedTuple):
    """A step row its writer marked ``dispatched`` in its own commit, with what its
    queue message is built from (``workflows.relay.publish_dispatched``, docs/adr/0028).

    Attributes:
        row_id: the step row's id.
        workflow_id: its workflow's id.
        step: the step name.
        queue: the queue name of its message.
        task: the task name of its message.
        payload: the message body: the mapping the writer wrote, or the JSON text
            as stored when read back by a statement (not decoded yet: it may not
            decode; the relay then refuses this row alone).
        priority / fairness_key: as the row holds them (None: the queue's default).
        traceparent / tracestate: the row's W3C trace context as stored (None: none;
            text that is no valid context is published without one).
    """

    row_id: int
    workflow_id: int
    step: str
    queue: str
    task: str
    payload: str | Mapping[str, Any]
    priority: int | None = None
    fairness_key: str | None = None
    traceparent: str | None = None
    tracestate: str | None = None

    @property
    def trace_context(self) -> TraceContext | None:
        """The row's trace context, or None (absent or not valid W3C)."""
        return TraceContext.parse(self.traceparent, self.tracestate)


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
