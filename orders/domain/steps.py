"""The order workflow's steps and their queue names, task names, payloads, and the
priority and fairness key their jobs carry (docs/adr/0033)."""

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


NOT_SPECIFIED = "4-NOT SPECIFIED"
"""The TPC-H order priority of an order that names none (random orders)."""

STEP_PRIORITY: dict[str, int] = {
    "1-URGENT": 1,
    "2-HIGH": 3,
    "3-MEDIUM": 5,
    NOT_SPECIFIED: 5,
    "5-LOW": 7,
}
"""TPC-H order priority (O_ORDERPRIORITY) -> the queue priority of the order's steps
(0..9, lower runs sooner; 5 is the queue's default), so an urgent order's steps
overtake a backlog of low ones."""


def step_priority(order_priority: str | None) -> int | None:
    """The queue priority of an order's steps; None (the queue's default) for a priority
    TPC-H does not name."""
    return STEP_PRIORITY.get(order_priority or "")


def fairness_key(customer_id: int) -> str:
    """The fairness key of a customer's step jobs: within one priority the queue serves
    customers in turn, so one customer's backlog cannot hold the others back."""
    return f"customer-{customer_id}"


def order_workflow(
    order_id: int,
    *,
    priority: str | None = None,
    customer_id: int | None = None,
    queue_priority: int | None = None,
) -> WorkflowSpec:
    """Return the workflow to create for a newly placed order.

    Each step's payload is ``{"order_id": ..}``; the outbox adds
    ``workflow_id`` and ``step``. The steps after stock start ``waiting``. Their
    jobs carry ``queue_priority`` (0..9, lower runs sooner: the API's ``priority``)
    when given, else the priority mapped from the order's TPC-H ``priority``
    (:data:`STEP_PRIORITY`), and the customer's fairness key.
    """
    return WorkflowSpec(
        kind=WORKFLOW_KIND,
        subject_id=order_id,
        priority=step_priority(priority) if queue_priority is None else queue_priority,
        fairness_key=None if customer_id is None else fairness_key(customer_id),
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
