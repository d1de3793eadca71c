"""The order workflow's steps and their queue names, task names and payloads."""

from __future__ import annotations

from orders.domain.models import OrderStatus
from workflows.dependencies import StepGraph
from workflows.outbox import StepSpec, WorkflowSpec

WORKFLOW_KIND = "order"
"""``workflows.kind`` of an order's workflow; its ``subject_id`` is the order id."""

STOCK = "stock"
NOTIFICATION = "notification"
POINTS = "points"
LOGISTICS = "logistics"
STEPS: tuple[str, ...] = (STOCK, NOTIFICATION, POINTS, LOGISTICS)
"""Every forward step of an order, in display order; each step has a queue of the same name."""

RETURN_STOCK = "return_stock"
REVERSE_POINTS = "reverse_points"
CANCEL_SHIPMENT = "cancel_shipment"
COMPENSATION_STEPS: tuple[str, ...] = (RETURN_STOCK, REVERSE_POINTS, CANCEL_SHIPMENT)
"""The compensating steps, in display order; written only when an order is cancelled."""

ALL_STEPS: tuple[str, ...] = STEPS + COMPENSATION_STEPS
"""Every step a worker may serve (forward, then compensating); one queue each."""

OUT_OF_STOCK_OUTCOME = OrderStatus.OUT_OF_STOCK
"""The stock step's outcome when a part is short: a business outcome, not a failure
of the step, but the order cannot be fulfilled (see ``orders.domain.effects``); named
after the order status it leads to."""

ORDER_GRAPH = StepGraph(
    after={NOTIFICATION: (STOCK,), POINTS: (STOCK,), LOGISTICS: (STOCK,)},
    halting=frozenset({OUT_OF_STOCK_OUTCOME}),
    compensations={STOCK: RETURN_STOCK, POINTS: REVERSE_POINTS, LOGISTICS: CANCEL_SHIPMENT},
)
"""Stock first: notification, points and logistics are published only after the
stock step deducted the order's parts; an out-of-stock order skips all three, so
it never receives a confirmation, points or a shipment (docs/adr, "stock first").
A cancelled order's finished steps are undone by their compensations (a sent
confirmation cannot be unsent: the cancellation notice follows it instead)."""


def task_name(step: str) -> str:
    """Return the task name of a step, e.g. ``orders.stock``."""
    return f"orders.{step}"


def queue_name(step: str) -> str:
    """Return the queue a step's jobs go to: the step name itself."""
    return step


TASKS: tuple[str, ...] = tuple(task_name(step) for step in ALL_STEPS)
"""Every task name orderflow registers, in the order of :data:`ALL_STEPS`; jobs of any
other name (a foreign producer's) are dead-lettered as ``unknown_task``."""


def route(step: str) -> tuple[str, str]:
    """Return (queue, task name) of a step's messages (``workflows.compensation.Route``)."""
    return queue_name(step), task_name(step)


def order_workflow(order_id: int) -> WorkflowSpec:
    """Return the workflow to create for a newly placed order.

    Each step's payload is ``{"order_id": ..}``; the outbox adds
    ``workflow_id`` and ``step``. The steps after stock start ``waiting``.
    """
    return WorkflowSpec(
        kind=WORKFLOW_KIND,
        subject_id=order_id,
        steps=[
            StepSpec(
                name=step,
                queue=queue_name(step),
                task=task_name(step),
                payload={"order_id": order_id},
                after=ORDER_GRAPH.after.get(step, ()),
            )
            for step in STEPS
        ],
    )
