"""The order workflow's steps and their queue names, task names and payloads."""

from __future__ import annotations

from workflows.outbox import StepSpec, WorkflowSpec

WORKFLOW_KIND = "order"
"""``workflows.kind`` of an order's workflow; its ``subject_id`` is the order id."""

STOCK = "stock"
NOTIFICATION = "notification"
POINTS = "points"
LOGISTICS = "logistics"
STEPS: tuple[str, ...] = (STOCK, NOTIFICATION, POINTS, LOGISTICS)
"""Every step of an order, in display order; each step has a queue of the same name."""


def task_name(step: str) -> str:
    """Return the task name of a step, e.g. ``orders.stock``."""
    return f"orders.{step}"


def queue_name(step: str) -> str:
    """Return the queue a step's jobs go to: the step name itself."""
    return step


def order_workflow(order_id: int) -> WorkflowSpec:
    """Return the workflow to create for a newly placed order.

    Each step's payload is ``{"order_id": ..}``; the outbox adds
    ``workflow_id`` and ``step``.
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
            )
            for step in STEPS
        ],
    )
