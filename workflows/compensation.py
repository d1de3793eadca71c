"""Compensations: undo what a workflow did, step by step, with ordinary queue jobs.

A workflow definition may name, per step, the step that undoes its effect
(``StepGraph.compensations``). When the workflow is called off (for example an
order cancelled by its customer), :func:`compensate_workflow` runs in the
caller's unit of work and, in one transaction:

- every forward step that has not finished (waiting, pending, dispatched,
  failed, dead, unpublishable) becomes ``skipped`` — final, it never runs; a
  delivery still in the queue is absorbed like a duplicate;
- every forward step that finished with a non-halting outcome and has a
  compensation gets ONE compensating step row (``pending``, or ``dispatched``
  for the caller to publish after its commit; ``compensates`` = the forward
  step), unique per (workflow, step) like any step row, so calling off twice
  adds nothing;
- the workflow row is touched (its version column makes a forward step
  finishing at the same moment conflict: one of the two reruns and sees the
  other), and is done at once when nothing is left to run.

The compensating rows are then published like any outbox row
(``workflows.relay.publish_dispatched``, docs/adr/0028):
at-least-once, idempotency key ``<workflow id>:<step>``, retried with backoff,
dead-lettered with a reason (the workflow shows blocked), and completed by the
completion tracker — a compensation is a step like any other. Its handler must
be idempotent on its own (unique rows, version columns).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, select, update
from sqlalchemy.orm import Session

from workflows.dependencies import StepGraph
from workflows.errors import StepNotFound
from workflows.messages import DispatchedStep
from workflows.models import StepStatus, Workflow, WorkflowStatus, WorkflowStep

Route = Callable[[str], tuple[str, str]]
"""Compensating step name -> (queue, task name) of its message."""

_WF = Workflow.__table__
# a write that changes nothing: the version stays, so a second cancel changes nothing
_HOLD = update(_WF).where(_WF.c.id == bindparam("wf")).values(version=_WF.c.version)


def hold_workflow(session: Session, workflow_id: int) -> bool:
    """Lock one workflow row until the caller's transaction ends, changing nothing.

    Call it before reading anything that depends on the workflow's progress
    (for example its subject's status) and then deciding to call it off. The
    lock is a write: on PostgreSQL a row lock (like ``FOR UPDATE``); on SQLite,
    where ``FOR UPDATE`` does nothing and the reads before a transaction's
    first write run outside it, the database's write lock, so what is read
    after it is current and no step completion commits before the caller does.

    Args:
        session: the caller's unit of work (nothing committed).
        workflow_id: the workflow's id.

    Returns:
        True when the row exists (and is now held).
    """
    return session.execute(_HOLD, {"wf": workflow_id}).rowcount == 1


@dataclass(frozen=True)
class Compensation:
    """What :func:`compensate_workflow` did.

    Attributes:
        workflow_id: the workflow called off.
        added: ids of the compensating step rows written now.
        compensations: names of every compensating step of the workflow
            (written now or earlier).
        skipped: forward steps moved to ``skipped`` now.
        workflow_done: True when nothing is left to run (the workflow is done).
        dispatched: the rows written now as ``dispatched`` (``dispatch=True``),
            with their message columns, for ``workflows.relay.publish_dispatched``
            after the commit; empty otherwise.
    """

    workflow_id: int
    added: tuple[int, ...]
    compensations: tuple[str, ...]
    skipped: tuple[str, ...]
    workflow_done: bool
    dispatched: tuple[DispatchedStep, ...] = ()


def compensate_workflow(
    session: Session,
    graph: StepGraph,
    workflow_id: int,
    *,
    reason: str,
    route: Route,
    now: datetime,
    dispatch: bool = False,
) -> Compensation:
    """Call off a workflow: skip its unfinished steps, add compensations for finished ones.

    Runs inside the caller's unit of work and commits nothing. Calling it again
    for the same workflow adds nothing (compensations are unique per step). The
    workflow row is read first (PostgreSQL: locked ``FOR UPDATE``) and written
    under its version column, so a step completing during this call makes the
    flush conflict. Whatever the caller read before this call (for example its
    subject's status) is fenced only if it called :func:`hold_workflow` first:
    on SQLite ``FOR UPDATE`` does nothing.

    Args:
        session: the caller's session.
        graph: the workflow's definition (``compensations``, ``halting``).
        workflow_id: the workflow to call off.
        reason: short word written into skipped steps' outcome (``skipped: <reason>``).
        route: compensating step name -> (queue, task name).
        now: time written as the skipped steps' finish time (timezone-aware),
            and as the compensating rows' dispatch time with ``dispatch``.
        dispatch: write the compensating rows ``dispatched`` (the caller publishes
            them after its commit); False writes them ``pending`` for the relay sweep.

    Returns:
        A :class:`Compensation`.

    Raises:
        StepNotFound: no such workflow.
        sqlalchemy.orm.exc.StaleDataError: a concurrent writer touched the
            workflow row first (retry the whole unit of work).
    """
    workflow = session.get(Workflow, workflow_id, with_for_update=True, populate_existing=True)
    if workflow is None:
        raise StepNotFound(f"no workflow {workflow_id}")
    rows = session.scalars(
        select(WorkflowStep)
        .where(WorkflowStep.workflow_id == workflow_id)
        .order_by(WorkflowStep.id)
    ).all()
    existing = {row.step for row in rows}
    skipped: list[str] = []
    new_rows: list[WorkflowStep] = []
    for row in rows:
        if row.compensates is not None:
            continue
        if row.status not in StepStatus.FINAL:
            row.status = StepStatus.SKIPPED
            row.outcome = f"skipped: {reason}"[:50]
            row.finished_at = now
            skipped.append(row.step)
            continue
        undo = graph.compensations.get(row.step)
        if (
            row.status != StepStatus.DONE
            or row.outcome in graph.halting
            or undo is None
            or undo in existing
        ):
            continue
        queue, task = route(undo)
        new_rows.append(
            WorkflowStep(
                workflow_id=workflow_id,
                step=undo,
                queue=queue,
                task=task,
                payload={**row.payload, "workflow_id": workflow_id, "step": undo},
                status=StepStatus.DISPATCHED if dispatch else StepStatus.PENDING,
                dispatched_at=now if dispatch else None,
                attempts=0,
                created_at=now,
                publish_attempts=0,
                compensates=row.step,
                priority=row.priority,
                fairness_key=row.fairness_key,
                # a compensation belongs to its workflow's trace (docs/adr/0036)
                traceparent=row.traceparent,
                tracestate=row.tracestate,
            )
        )
        existing.add(undo)
    session.add_all(new_rows)
    statuses = [r.status for r in rows] + [StepStatus.PENDING for _ in new_rows]
    if StepStatus.DEAD not in statuses:
        workflow.blocked_step = None
        workflow.blocked_reason = None
        if all(s in StepStatus.FINAL for s in statuses):
            if workflow.status != WorkflowStatus.DONE:
                workflow.finished_at = now
            workflow.status = WorkflowStatus.DONE
        else:
            workflow.status = WorkflowStatus.RUNNING
    workflow.updated_at = now  # the version bump that fences concurrent step completions
    session.flush()
    compensations = tuple(r.step for r in rows if r.compensates is not None) + tuple(
        r.step for r in new_rows
    )
    return Compensation(
        workflow_id,
        tuple(r.id for r in new_rows),
        compensations,
        tuple(skipped),
        workflow.status == WorkflowStatus.DONE,
        tuple(
            DispatchedStep(
                r.id,
                workflow_id,
                r.step,
                r.queue,
                r.task,
                r.payload,
                r.priority,
                r.fairness_key,
                r.traceparent,
                r.tracestate,
            )
            for r in new_rows
            if dispatch
        ),
    )
