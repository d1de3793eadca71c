"""Completion tracker for a batch of deliveries of ONE step, in one transaction.

The same guarantees as :func:`workflows.tracker.run_step`, with a handful of
set-based statements per batch instead of a dozen per delivery:

1. The batch's workflow rows are locked and their version bumped first, in id
   order (PostgreSQL: ``SELECT ... ORDER BY id FOR UPDATE``; SQLite: the first
   statement is the write, which takes the database's write lock). A sibling
   step finishing at the same time waits for this commit, then sees its rows —
   so whichever commit finds every step done marks the workflow done.
2. Each delivery is classified: unknown step or subject (its own error, the
   others go on), already done or a second copy inside this batch (a duplicate
   absorbed, no effect), or to be run.
3. The step's effect runs once for all claimed deliveries (set-based), returning
   an outcome per step row.
4. Step rows are marked done; workflows whose rows are now all done are marked
   done with their finish time; blocked workflows with no dead step resume.

Any database error fails the whole batch (nothing is committed); conflicts are
retried a few times, and the caller may fall back to one delivery at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, bindparam, case, func, select, update
from sqlalchemy.orm import Session

from workflows.columns import utcnow
from workflows.conflicts import retry_on_conflict
from workflows.dependencies import NO_DEPENDENCIES, StepGraph, release_waiting
from workflows.errors import StepNotFound, StepNotReady, SubjectMismatch
from workflows.models import StepStatus, Workflow, WorkflowStatus, WorkflowStep
from workflows.tracker import StepResult, StepRun
from workflows.uow import SessionFactory, UnitOfWork


@dataclass(frozen=True)
class Claim:
    """A delivery this batch runs: its run, its step row and its workflow's subject."""

    run: StepRun
    step_row_id: int
    subject_id: int


BatchEffect = Callable[[Session, list[Claim], datetime], dict[int, str]]
"""Applies one step's effect for every claim; returns step row id -> outcome word."""

OnWorkflowsDone = Callable[[Session, list[int]], None]
"""Called in the same transaction with the subject ids of workflows this batch completed."""


def lock_workflows(session: Session, workflow_ids: Sequence[int], now: datetime) -> None:
    """Lock the workflow rows in id order and bump their version (the sibling fence)."""
    ids = sorted(set(workflow_ids))
    if session.get_bind().dialect.name == "postgresql":
        session.execute(
            select(Workflow.id).where(Workflow.id.in_(ids)).order_by(Workflow.id).with_for_update()
        )
    session.execute(
        update(Workflow)
        .where(Workflow.id.in_(ids))
        .values(version=Workflow.version + 1, updated_at=now),
        execution_options={"synchronize_session": False},
    )


def run_steps(
    session_factory: SessionFactory,
    runs: Sequence[StepRun],
    effect: BatchEffect,
    *,
    on_workflows_done: OnWorkflowsDone | None = None,
    graph: StepGraph = NO_DEPENDENCIES,
    clock: Callable[[], datetime] = utcnow,
    conflict_attempts: int = 6,
) -> list[StepResult | Exception]:
    """Run a batch of deliveries of one step; one result (or error) per run, in order.

    Args:
        session_factory: makes the session of the unit of work.
        runs: deliveries, all of the same step.
        effect: the step's set-based effect.
        on_workflows_done: extra work when workflows complete (e.g. order status).
        graph: the workflows' step dependencies; waiting steps are released or
            skipped in the same transaction (default: none).
        clock: current time (timezone-aware).
        conflict_attempts: whole-batch tries on a concurrency conflict.

    Returns:
        Per run: a :class:`StepResult` (``duplicate=True`` for an absorbed
        redelivery, or a skipped step), or the run's own error
        (:class:`StepNotFound`, :class:`SubjectMismatch`, :class:`StepNotReady`).

    Raises:
        ValueError: runs of different steps.
        ConcurrencyConflict: still conflicting after ``conflict_attempts``.
        Exception: whatever ``effect`` or the database raises; nothing committed.
    """
    if not runs:
        return []
    steps = {r.step for r in runs}
    if len(steps) != 1:
        raise ValueError(f"a batch holds one step, not {sorted(steps)}")
    return retry_on_conflict(
        lambda: _once(session_factory, list(runs), effect, on_workflows_done, graph, clock),
        attempts=conflict_attempts,
    )


def _once(
    session_factory: SessionFactory,
    runs: list[StepRun],
    effect: BatchEffect,
    on_done: OnWorkflowsDone | None,
    graph: StepGraph,
    clock: Callable[[], datetime],
) -> list[StepResult | Exception]:
    started = clock()
    step = runs[0].step
    wf_ids = sorted({r.workflow_id for r in runs})
    with UnitOfWork(session_factory) as uow:
        session = uow.session
        lock_workflows(session, wf_ids, started)
        rows = {
            wf_id: (row_id, subject, status, outcome)
            for wf_id, row_id, subject, status, outcome in session.execute(
                select(
                    WorkflowStep.workflow_id,
                    WorkflowStep.id,
                    Workflow.subject_id,
                    WorkflowStep.status,
                    WorkflowStep.outcome,
                )
                .join(Workflow, Workflow.id == WorkflowStep.workflow_id)
                .where(WorkflowStep.workflow_id.in_(wf_ids), WorkflowStep.step == step)
            )
        }
        results: list[StepResult | Exception | None] = []
        claims: list[Claim] = []
        claimed: dict[int, int] = {}  # workflow id -> index in results of its claim
        for run in runs:
            row = rows.get(run.workflow_id)
            if row is None:
                results.append(StepNotFound(f"workflow {run.workflow_id} has no step {step!r}"))
            elif run.subject_id is not None and run.subject_id != row[1]:
                results.append(
                    SubjectMismatch(
                        f"workflow {run.workflow_id} is about {row[1]}, not {run.subject_id}"
                    )
                )
            elif row[2] in StepStatus.FINAL:
                results.append(StepResult(run.workflow_id, step, row[3] or "", True, False))
            elif row[2] == StepStatus.WAITING:
                results.append(
                    StepNotReady(
                        f"workflow {run.workflow_id} step {step!r} waits for its prerequisites"
                    )
                )
            elif run.workflow_id in claimed:
                results.append(None)  # a second copy in this batch: filled in below as a duplicate
            else:
                claimed[run.workflow_id] = len(results)
                claims.append(Claim(run, row[0], row[1]))
                results.append(None)
        outcomes = effect(session, claims, started) if claims else {}
        now = clock()
        released: dict[int, tuple[int, ...]] = {}
        if claims:
            _mark_done(session, claims, outcomes, started, now)
            released_ids = set(
                release_waiting(session, graph, [c.run.workflow_id for c in claims], now)
            )
            if released_ids:
                for wf_id, row_id in session.execute(
                    select(WorkflowStep.workflow_id, WorkflowStep.id).where(
                        WorkflowStep.id.in_(sorted(released_ids))
                    )
                ):
                    released[wf_id] = (*released.get(wf_id, ()), row_id)
        done_ids = _complete_workflows(session, wf_ids, now)
        if done_ids and on_done is not None:
            on_done(session, sorted(rows[wf][1] for wf in done_ids if wf in rows))
        uow.commit()
    out: list[StepResult | Exception] = []
    for i, (run, result) in enumerate(zip(runs, results, strict=True)):
        if result is not None:
            out.append(result)
            continue
        outcome = outcomes.get(rows[run.workflow_id][0], "")
        if claimed[run.workflow_id] == i:
            out.append(
                StepResult(
                    run.workflow_id,
                    step,
                    outcome,
                    False,
                    run.workflow_id in done_ids,
                    released=released.get(run.workflow_id, ()),
                )
            )
        else:  # a second copy of a claimed delivery in the same batch
            out.append(StepResult(run.workflow_id, step, outcome, True, False))
    return out


def _mark_done(
    session: Session,
    claims: list[Claim],
    outcomes: dict[int, str],
    started: datetime,
    now: datetime,
) -> None:
    table = WorkflowStep.__table__
    session.execute(
        update(table)
        .where(table.c.id == bindparam("row_id"))
        .values(
            status=StepStatus.DONE,
            outcome=bindparam("outcome"),
            attempts=case(
                (table.c.attempts < bindparam("attempt"), bindparam("attempt")),
                else_=table.c.attempts,
            ),
            job_id=func.coalesce(bindparam("job_id"), table.c.job_id),
            fencing_token=func.coalesce(bindparam("fencing"), table.c.fencing_token),
            started_at=started,
            finished_at=now,
        ),
        [
            {
                "row_id": c.step_row_id,
                "outcome": outcomes[c.step_row_id][:50],
                "attempt": c.run.attempt,
                "job_id": c.run.job_id,
                "fencing": c.run.fencing_token,
            }
            for c in claims
        ],
        execution_options={"synchronize_session": False},
    )


def _complete_workflows(session: Session, wf_ids: list[int], now: datetime) -> set[int]:
    """Mark done the workflows whose step rows are all done or skipped; resume unblocked ones."""
    not_done = func.sum(case((WorkflowStep.status.not_in(StepStatus.FINAL), 1), else_=0))
    dead = func.sum(case((WorkflowStep.status == StepStatus.DEAD, 1), else_=0))
    counts = session.execute(
        select(WorkflowStep.workflow_id, not_done, dead)
        .where(WorkflowStep.workflow_id.in_(wf_ids))
        .group_by(WorkflowStep.workflow_id)
    ).all()
    finished = [wf for wf, open_, _ in counts if not open_]
    resumable = [wf for wf, open_, dead_ in counts if open_ and not dead_]
    done_ids: set[int] = set()
    if finished:
        done_ids = set(
            session.scalars(
                select(Workflow.id).where(
                    Workflow.id.in_(finished), Workflow.status != WorkflowStatus.DONE
                )
            )
        )
        if done_ids:
            session.execute(
                update(Workflow)
                .where(Workflow.id.in_(done_ids))
                .values(
                    status=WorkflowStatus.DONE,
                    finished_at=now,
                    blocked_step=None,
                    blocked_reason=None,
                ),
                execution_options={"synchronize_session": False},
            )
    if resumable:
        session.execute(
            update(Workflow)
            .where(and_(Workflow.id.in_(resumable), Workflow.status == WorkflowStatus.BLOCKED))
            .values(status=WorkflowStatus.RUNNING, blocked_step=None, blocked_reason=None),
            execution_options={"synchronize_session": False},
        )
    return done_ids
