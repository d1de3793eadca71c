"""Transactional outbox: write workflow and step rows inside the caller's transaction.

The caller writes its own records (for example an order and its lines) and
then calls ``add_workflows`` in the same session before committing, so the
business records and the step messages commit or vanish together. The relay
publishes the step rows afterwards.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from workflows.columns import utcnow
from workflows.messages import StepMessage
from workflows.models import (
    StepStatus,
    Workflow,
    WorkflowStatus,
    WorkflowStep,
    idempotency_key,
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
    """One workflow to create: its kind, subject and steps."""

    kind: str
    subject_id: int
    steps: Sequence[StepSpec]


@dataclass(frozen=True)
class CreatedWorkflow:
    """Ids of a workflow written by ``add_workflows`` and of its step rows."""

    workflow_id: int
    subject_id: int
    step_ids: tuple[int, ...]


def add_workflows(
    session: Session, specs: Sequence[WorkflowSpec], *, now: datetime | None = None
) -> list[CreatedWorkflow]:
    """Insert workflow rows and their step rows in the session's transaction.

    A step row starts ``pending`` (the relay publishes it), or ``waiting`` when
    its spec names prerequisites in ``after``.

    Uses a few multi-row INSERT statements whatever the number of workflows;
    nothing is committed here.

    Args:
        session: the caller's session, inside its transaction.
        specs: workflows to create; each subject at most once per kind.
        now: creation time (timezone-aware); default the current UTC time.

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
    step_ids = dialect.insert_rows(
        session,
        _STEPS,
        {
            "workflow_id": [workflow_id for workflow_id, _ in steps],
            "step": [step.name for _, step in steps],
            "queue": [step.queue for _, step in steps],
            "task": [step.task for _, step in steps],
            "payload": [
                {**step.payload, "workflow_id": workflow_id, "step": step.name}
                for workflow_id, step in steps
            ],
            "status": [
                StepStatus.WAITING if step.after else StepStatus.PENDING for _, step in steps
            ],
            "attempts": [0] * len(steps),
            "created_at": [now] * len(steps),
        },
        load=True,
        ids=True,
    )
    created: list[CreatedWorkflow] = []
    position = 0
    for spec, workflow_id in zip(specs, workflow_ids, strict=True):
        count = len(spec.steps)
        created.append(
            CreatedWorkflow(
                workflow_id, spec.subject_id, tuple(step_ids[position : position + count])
            )
        )
        position += count
    return created


def initial_messages(
    specs: Sequence[WorkflowSpec], created: Sequence[CreatedWorkflow]
) -> dict[int, StepMessage]:
    """The queue messages of the step rows ``add_workflows`` wrote as ``pending``.

    The same messages the relay would read back from those rows, built from the
    specs instead, so publishing right after the commit needs no second read.

    Args:
        specs: the specs given to ``add_workflows``.
        created: what it returned for them (same order).

    Returns:
        Step row id -> message, for every step without prerequisites (the
        ``waiting`` rows are left out: they are published when released).
    """
    messages: dict[int, StepMessage] = {}
    for spec, made in zip(specs, created, strict=True):
        for step, step_id in zip(spec.steps, made.step_ids, strict=True):
            if step.after:
                continue
            messages[step_id] = StepMessage(
                queue=step.queue,
                task=step.task,
                payload={**step.payload, "workflow_id": made.workflow_id, "step": step.name},
                idempotency_key=idempotency_key(made.workflow_id, step.name),
            )
    return messages
