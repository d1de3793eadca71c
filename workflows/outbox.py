"""Transactional outbox: write workflow and step rows inside the caller's transaction.

The caller writes its own records (for example an order and its lines) and
then calls ``add_workflows`` in the same session before committing, so the
business records and the step messages commit or vanish together. With
``dispatch=True`` the rows to run first are written ``dispatched``, and the
caller publishes them right after its commit (``workflows.relay.publish_dispatched``,
docs/adr/0028); otherwise they are written ``pending`` for the relay sweep.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from reliable_queue.trace_context import TraceContext
from workflows.columns import utcnow
from workflows.messages import DispatchedStep
from workflows.models import (
    StepStatus,
    Workflow,
    WorkflowStatus,
    WorkflowStep,
)
from workflows.sql import dialect_of

_WORKFLOWS = Workflow.__table__
_STEPS = WorkflowStep.__table__


@dataclass(frozen=True)
class StepSpec:
    """One step to fan out.

    Attributes:
        name: step name, unique within the workflow.
        queue: queue the message is published to.
        task: task name the worker dispatches on.
        payload: message body; ``workflow_id`` and ``step`` are added.
        after: names of steps that must succeed before this one is published;
            non-empty makes the row start ``waiting`` (see
            ``workflows.dependencies``; the same names belong in the workflow's
            ``StepGraph``).
    """

    name: str
    queue: str
    task: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    after: tuple[str, ...] = ()


@dataclass(frozen=True)
class WorkflowSpec:
    """One workflow to create: its kind, subject and steps.

    Attributes:
        priority: the queue priority of its steps' messages (None: the queue's default).
        fairness_key: their fairness key (None: none); steps of different keys are
            served in turn.
        trace_context: the W3C trace context the workflow runs in (its order's span),
            written on every step row in the same transaction; None: none.
    """

    kind: str
    subject_id: int
    steps: Sequence[StepSpec]
    priority: int | None = None
    fairness_key: str | None = None
    trace_context: TraceContext | None = None


@dataclass(frozen=True)
class CreatedWorkflow:
    """A workflow written by ``add_workflows``.

    Attributes:
        workflow_id: the workflow row's id.
        subject_id: its subject.
        step_ids: ids of its step rows, in the spec's order.
        dispatched: the step rows written ``dispatched`` (``dispatch=True``: the
            steps without prerequisites), with their message columns, for
            ``workflows.relay.publish_dispatched`` after the commit; empty otherwise.
    """

    workflow_id: int
    subject_id: int
    step_ids: tuple[int, ...]
    dispatched: tuple[DispatchedStep, ...] = ()


def add_workflows(
    session: Session,
    specs: Sequence[WorkflowSpec],
    *,
    now: datetime | None = None,
    dispatch: bool = False,
) -> list[CreatedWorkflow]:
    """Insert workflow rows and their step rows in the session's transaction.

    A step row starts ``waiting`` when its spec names prerequisites in ``after``;
    otherwise ``dispatched`` at ``now`` with ``dispatch`` (the caller publishes it
    after its commit: ``workflows.relay.publish_dispatched`` with
    ``CreatedWorkflow.dispatched``), else ``pending`` (the relay sweep publishes it).

    Uses a few multi-row INSERT statements whatever the number of workflows;
    nothing is committed here.

    Args:
        session: the caller's session, inside its transaction.
        specs: workflows to create; each subject at most once per kind.
        now: creation time (timezone-aware); default the current UTC time.
        dispatch: write the first steps ``dispatched`` for the caller to publish.

    Returns:
        One ``CreatedWorkflow`` per spec, in the same order.

    Raises:
        sqlalchemy.exc.IntegrityError: a workflow of that kind and subject exists,
            or two steps of one spec share a name.
    """
    if not specs:
        return []
    now = now or utcnow()
    # Core bulk loads on the tables (not ORM bulk inserts): without the ORM's per-row
    # bookkeeping (about half of placement's time in a profile); COPY on PostgreSQL
    # (``Dialect.insert_rows``).
    dialect = dialect_of(session)
    workflow_ids = dialect.insert_rows(
        session,
        _WORKFLOWS,
        {
            "kind": [spec.kind for spec in specs],
            "subject_id": [spec.subject_id for spec in specs],
            "status": [WorkflowStatus.RUNNING] * len(specs),
            "created_at": [now] * len(specs),
            "updated_at": [now] * len(specs),
            "version": [1] * len(specs),
        },
        load=True,
        ids=True,
    )
    steps = [
        (workflow_id, step)
        for spec, workflow_id in zip(specs, workflow_ids, strict=True)
        for step in spec.steps
    ]
    flow = [(spec.priority, spec.fairness_key) for spec in specs for _ in spec.steps]
    contexts = [spec.trace_context for spec in specs for _ in spec.steps]
    parents = [c.traceparent if c is not None else None for c in contexts]
    states = [c.tracestate or None if c is not None else None for c in contexts]
    first = StepStatus.DISPATCHED if dispatch else StepStatus.PENDING
    payloads = [
        {**step.payload, "workflow_id": workflow_id, "step": step.name}
        for workflow_id, step in steps
    ]
    statuses = [StepStatus.WAITING if step.after else first for _, step in steps]
    step_ids = dialect.insert_rows(
        session,
        _STEPS,
        {
            "workflow_id": [workflow_id for workflow_id, _ in steps],
            "step": [step.name for _, step in steps],
            "queue": [step.queue for _, step in steps],
            "task": [step.task for _, step in steps],
            "payload": payloads,
            "status": statuses,
            "attempts": [0] * len(steps),
            "created_at": [now] * len(steps),
            "dispatched_at": [
                now if status == StepStatus.DISPATCHED else None for status in statuses
            ],
            "priority": [priority for priority, _ in flow],
            "fairness_key": [key for _, key in flow],
            # with no trace context anywhere (tracing off), no column more to load
            **({"traceparent": parents, "tracestate": states} if any(parents) else {}),
        },
        load=True,
        ids=True,
    )
    created: list[CreatedWorkflow] = []
    position = 0
    for spec, workflow_id in zip(specs, workflow_ids, strict=True):
        ids = tuple(step_ids[position : position + len(spec.steps)])
        dispatched = tuple(
            DispatchedStep(
                row_id,
                workflow_id,
                step.name,
                step.queue,
                step.task,
                payloads[position + i],
                spec.priority,
                spec.fairness_key,
                parents[position + i],
                states[position + i],
            )
            for i, (step, row_id) in enumerate(zip(spec.steps, ids, strict=True))
            if statuses[position + i] == StepStatus.DISPATCHED
        )
        created.append(CreatedWorkflow(workflow_id, spec.subject_id, ids, dispatched))
        position += len(spec.steps)
    return created
