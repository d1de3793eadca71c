"""Completion tracker: apply a step's effect and record its completion atomically.

There is one path: :func:`run_steps` takes the deliveries of ONE step that a
worker fetched together, and a single delivery is a batch of one. Completion is
set membership: each step row says done on its own (unique per workflow and
step), never a counter. In one transaction and a handful of set-based
statements, whatever the batch size:

1. Concurrent writers are fenced: the dialect's lock plan says when the
   workflow rows are locked relative to the effect (``workflows.sql.LockPlan``;
   ADR 0014, ADR 0027).
2. Each delivery is classified: unknown step or subject (its own error, the
   others go on), already done or skipped, or a second copy inside this batch
   (a duplicate absorbed, no effect), still waiting for its prerequisites (its
   own retryable error), fenced out (its fencing token is not above the highest
   the row has seen: its own retryable error, ADR 0023), or claimed.
3. The step's effect runs once for every claim and returns, per step row, an
   outcome word or that claim's own error (the effect applied nothing of it).
4. The claimed step rows are marked done; waiting steps whose prerequisites
   are now decided are released or skipped; workflows whose rows are all done
   or skipped are marked done with their finish time; blocked workflows with no
   dead step left resume. The marking compares and advances the rows' fencing
   tokens, and the commit runs inside the attempt guards of the applied runs:
   a guard that refuses fails its run alone, the others commit without it.

Any other error fails the whole batch (nothing is committed); conflicts rerun
it a few times, and the caller may then run the deliveries one at a time (each
a batch of one) so that one bad delivery cannot sink its batch-mates.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import (
    BigInteger,
    Integer,
    String,
    bindparam,
    case,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import StaleDataError
from sqlalchemy.types import TypeEngine

from workflows.columns import utcnow
from workflows.conflicts import retry_on_conflict
from workflows.dependencies import NO_DEPENDENCIES, StepGraph, release_waiting
from workflows.errors import FencedOut, StepNotFound, StepNotReady, SubjectMismatch
from workflows.messages import DispatchedStep
from workflows.models import StepStatus, Workflow, WorkflowStatus, WorkflowStep
from workflows.sql import Dialect, LockPlan, dialect_of, per_dialect
from workflows.uow import SessionFactory, UnitOfWork

_ERROR_LIMIT = 4000


@dataclass(frozen=True)
class StepRun:
    """One delivery of one step message.

    Attributes:
        workflow_id: the workflow's id (from the payload).
        step: the step name.
        subject_id: the subject the payload names; checked against the workflow
            when given.
        attempt: 1-based delivery attempt from the queue.
        job_id: the queue's job id.
        fencing_token: the queue's monotonic lease fencing token; a run carrying one
            commits only if it is above the highest the step row has seen (None:
            not fenced, e.g. a direct caller).
        hold: the attempt's guard (``JobContext.hold_lease``): the commit runs
            inside it, and a guard that refuses on entry (raises) fails this run
            alone (None: not guarded).
    """

    workflow_id: int
    step: str
    subject_id: int | None = None
    attempt: int = 1
    job_id: str | None = None
    fencing_token: int | None = None
    hold: Callable[[], AbstractContextManager[Any]] | None = field(
        default=None, compare=False, repr=False
    )


@dataclass(frozen=True)
class StepResult:
    """What the tracker did with one delivery.

    Attributes:
        outcome: the step's outcome word (for a duplicate, the first run's).
        duplicate: True when the step was already done or skipped, or the
            delivery was a second copy inside its batch: no effect was applied
            (a redelivery absorbed).
        workflow_done: True when this commit completed the workflow.
        conflicts: units of work rerun because of concurrent writers.
        released: ids of step rows this commit released (their prerequisites
            succeeded): moved from ``waiting`` to ``dispatched``, to be published
            right after the commit.
        released_steps: the same rows with their message columns, for that
            publish (``workflows.relay.publish_dispatched``).
        workflow_seconds: when this commit completed the workflow, seconds from the
            workflow's creation to its finish time (None otherwise), e.g. for an
            order's placement-to-completion time without reading the row back.
    """

    workflow_id: int
    step: str
    outcome: str
    duplicate: bool
    workflow_done: bool
    conflicts: int = 0
    released: tuple[int, ...] = ()
    released_steps: tuple[DispatchedStep, ...] = ()
    workflow_seconds: float | None = None


@dataclass(frozen=True)
class Claim:
    """A delivery the batch runs: its run, its step row and its workflow's subject."""

    run: StepRun
    step_row_id: int
    subject_id: int


class StepRow(NamedTuple):
    """One step row as the tracker reads it, and its workflow's version."""

    row_id: int
    subject_id: int
    status: str
    outcome: str | None
    version: int
    fencing_token: int | None


Effect = Callable[[Session, list[Claim], datetime], Mapping[int, str | Exception]]
"""Applies one step's effect for every claim (in the tracker's transaction, at the
given time) and returns step row id -> outcome word (<= 50 chars), or the claim's own
error when nothing of it was applied; one entry per claim."""

OnWorkflowsDone = Callable[[Session, list[int]], None]
"""Called in the same transaction with the subject ids of workflows this batch completed."""

BeforeCommit = Callable[[list[Claim]], None]
"""Called inside the unit of work with the claims it applied, after its writes and right
before the commit, its locks held (a fault-injection point: a hang there)."""


class _Refused(Exception):
    """Some runs' attempt guards refused the commit: run positions -> their errors."""

    def __init__(self, errors: dict[int, Exception]) -> None:
        super().__init__(f"{len(errors)} attempt(s) no longer hold their lease")
        self.errors = errors


# The statements of the hot path, built once per dialect (workflows.sql): building a
# statement (and its cache key) costs more than running it on a batch of one.
_WF = Workflow.__table__
_WS = WorkflowStep.__table__
_LOCK = per_dialect(
    lambda d: (
        update(_WF)
        .where(*d.lock_in_order(_WF.c.id, "ids"))
        .values(version=_WF.c.version + 1, updated_at=bindparam("now"))
    )
)
_FENCE = (
    update(_WF)
    .where(_WF.c.id == bindparam("wf"), _WF.c.version == bindparam("v"))
    .values(version=_WF.c.version + 1, updated_at=bindparam("now"))
)
_STEP_ROWS = per_dialect(
    lambda d: (
        select(
            _WS.c.workflow_id,
            _WS.c.id,
            _WF.c.subject_id,
            _WS.c.status,
            _WS.c.outcome,
            _WF.c.version,
            _WS.c.fencing_token,
        )
        .join(_WF, _WF.c.id == _WS.c.workflow_id)
        .where(
            d.one_of(_WS.c.workflow_id, "ids"),
            _WS.c.step == bindparam("step"),
            *d.one_of_again(_WF.c.id, "ids"),
        )
    )
)
_CLAIMED_COLUMNS: dict[str, TypeEngine[Any]] = {
    "row_id": Integer(),
    "outcome": String(),
    "attempt": Integer(),
    "job_id": String(),
    "fencing": BigInteger(),
}
"""The columns of the claimed rows the marking binds as one parameter (per column)."""


def _mark_done_statement(d: Dialect) -> Any:
    """Every claim of the batch marked in one statement, the claims bound as rows.

    The fencing token is compared and advanced in this one statement: a row that
    saw the claim's token or a later one since it was read is not marked. Where
    the marking rechecks (``Dialect.marking_rechecks``), a row a concurrent writer
    finished, skipped or (a cancellation) called off since the batch read it is
    not marked either, and the ids marked are returned: the unit of work reruns
    when one is missing (see :func:`_mark_done`).
    """
    claimed = d.rows("claims", _CLAIMED_COLUMNS)
    statement = (
        update(_WS)
        .where(
            _WS.c.id == claimed.c.row_id,
            # the ids as a list too: the primary key's index is then the plan whatever
            # the planner guesses of the table's size (a hash join scans it all)
            *d.one_of_again(_WS.c.id, d.column_of_rows("claims", "row_id")),
            *(
                (_WS.c.status.not_in((*StepStatus.FINAL, StepStatus.WAITING)),)
                if d.marking_rechecks
                else ()
            ),
            or_(
                claimed.c.fencing.is_(None),
                _WS.c.fencing_token.is_(None),
                _WS.c.fencing_token < claimed.c.fencing,
            ),
        )
        .values(
            status=StepStatus.DONE,
            outcome=claimed.c.outcome,
            attempts=d.greatest(_WS.c.attempts, claimed.c.attempt),
            job_id=func.coalesce(claimed.c.job_id, _WS.c.job_id),
            fencing_token=func.coalesce(claimed.c.fencing, _WS.c.fencing_token),
            started_at=bindparam("started", type_=_WS.c.started_at.type),
            finished_at=bindparam("now", type_=_WS.c.finished_at.type),
        )
    )
    return statement.returning(_WS.c.id) if d.marking_rechecks else statement


_MARK_DONE = per_dialect(_mark_done_statement)
_STEP_COUNTS = per_dialect(
    lambda d: (
        select(
            _WF.c.id,
            _WF.c.status,
            func.sum(case((_WS.c.status.not_in(StepStatus.FINAL), 1), else_=0)),
            func.sum(case((_WS.c.status == StepStatus.DEAD, 1), else_=0)),
            _WF.c.created_at,
        )
        .join(_WS, _WS.c.workflow_id == _WF.c.id)
        .where(
            d.one_of(_WF.c.id, "ids"),
            # the planner may not derive "workflow_id = ANY(:ids)" from the join: without
            # it the step rows are found by hashing the whole table (ADR 0020)
            *d.one_of_again(_WS.c.workflow_id, "ids"),
        )
        .group_by(_WF.c.id, _WF.c.status, _WF.c.created_at)
    )
)
_MARK_WORKFLOWS_DONE = per_dialect(
    lambda d: (
        update(_WF)
        .where(d.one_of(_WF.c.id, "ids"))
        .values(
            status=WorkflowStatus.DONE,
            finished_at=bindparam("now"),
            blocked_step=None,
            blocked_reason=None,
        )
    )
)
_RESUME = per_dialect(
    lambda d: (
        update(_WF)
        .where(d.one_of(_WF.c.id, "ids"))
        .values(status=WorkflowStatus.RUNNING, blocked_step=None, blocked_reason=None)
    )
)


def lock_workflows(session: Session, workflow_ids: Sequence[int], now: datetime) -> None:
    """Lock the workflow rows in id order and bump their version (the sibling fence).

    Args:
        session: the caller's unit of work (nothing committed).
        workflow_ids: the workflows (unknown ids are ignored).
        now: written as their ``updated_at``.
    """
    ids = sorted(set(workflow_ids))
    session.execute(_LOCK[dialect_of(session)], {"ids": ids, "now": now})


def fence_workflows(session: Session, versions: Mapping[int, int], now: datetime) -> None:
    """Bump the version of workflow rows that must still have the version read (optimistic).

    Args:
        session: the caller's unit of work (nothing committed).
        versions: workflow id -> version read by :func:`step_rows`.
        now: written as their ``updated_at``.

    Raises:
        StaleDataError: a workflow row changed since it was read (the tracker
            reruns the unit of work).
    """
    result = session.execute(
        _FENCE, [{"wf": wf, "v": v, "now": now} for wf, v in sorted(versions.items())]
    )
    if result.rowcount not in (-1, len(versions)):
        raise StaleDataError(f"workflows changed since read ({result.rowcount}/{len(versions)})")


def step_rows(session: Session, workflow_ids: Sequence[int], step: str) -> dict[int, StepRow]:
    """Read the ``step`` rows of some workflows, by workflow id (workflows without one: absent).

    After :func:`lock_workflows` the rows cannot change under the caller; else
    :func:`fence_workflows` checks the versions read here as the caller's first
    write, or the marking of the claimed rows checks that they are still
    claimable (:func:`_mark_done`; ``Dialect.marking_rechecks``).
    """
    return {
        row[0]: StepRow(*row[1:])
        for row in session.execute(
            _STEP_ROWS[dialect_of(session)], {"ids": list(workflow_ids), "step": step}
        ).all()
    }


def load_step(session: Session, workflow_id: int, step: str) -> tuple[Workflow, WorkflowStep]:
    """Load a workflow row and one of its step rows (ORM objects).

    Raises:
        StepNotFound: no such workflow or step.
    """
    row = session.execute(
        select(Workflow, WorkflowStep)
        .join(WorkflowStep, WorkflowStep.workflow_id == Workflow.id)
        .where(Workflow.id == workflow_id, WorkflowStep.step == step)
    ).one_or_none()
    if row is None:
        raise StepNotFound(f"workflow {workflow_id} has no step {step!r}")
    return row[0], row[1]


def run_steps(
    session_factory: SessionFactory,
    runs: Sequence[StepRun],
    effect: Effect,
    *,
    on_workflows_done: OnWorkflowsDone | None = None,
    graph: StepGraph = NO_DEPENDENCIES,
    clock: Callable[[], datetime] = utcnow,
    conflict_attempts: int = 6,
    before_commit: BeforeCommit | None = None,
) -> list[StepResult | Exception]:
    """Run deliveries of one step (one or many) in one unit of work.

    Fencing (ADR 0023): a run that carries a fencing token claims its step only if
    the token is above the highest the step row has seen, compared and advanced by
    the marking itself; a run at or below it is :class:`FencedOut`. The commit runs
    inside the attempt guards of the runs it applies (``StepRun.hold``); a guard
    that refuses rolls the unit of work back, and it runs again without that run,
    whose result is the guard's error.

    Args:
        session_factory: makes the session of each unit of work.
        runs: deliveries, all of the same step; one is a batch of one.
        effect: the step's set-based effect (see :data:`Effect`).
        on_workflows_done: extra work in the same transaction when workflows
            complete (for example setting the orders' status).
        graph: the workflows' step dependencies; waiting steps are released or
            skipped in the same transaction (default: none).
        clock: current time (timezone-aware).
        conflict_attempts: units of work tried while losing races.
        before_commit: see :data:`BeforeCommit` (None: nothing).

    Returns:
        Per run, in order: a :class:`StepResult` (``duplicate=True`` for an
        absorbed redelivery, a skipped step or a second copy in the batch), or
        the run's own error: :class:`StepNotFound`, :class:`SubjectMismatch`
        (not retryable), :class:`StepNotReady`, :class:`FencedOut` (retryable;
        nothing applied), the error its guard raised (nothing of it applied), or
        the error the effect gave that claim.

    Raises:
        ValueError: runs of different steps.
        ConcurrencyConflict: still conflicting after ``conflict_attempts``
            (retryable).
        Exception: whatever else ``effect`` or the database raises; nothing is
            committed.
    """
    if not runs:
        return []
    steps = {r.step for r in runs}
    if len(steps) != 1:
        raise ValueError(f"a batch holds one step, not {sorted(steps)}")
    conflicts = 0

    def count_conflict(_exc: BaseException) -> None:
        nonlocal conflicts
        conflicts += 1

    def once(live: list[StepRun]) -> list[StepResult | Exception]:
        return retry_on_conflict(
            lambda: _once(
                session_factory,
                live,
                effect,
                on_workflows_done,
                graph,
                clock,
                conflicts,
                before_commit,
            ),
            attempts=conflict_attempts,
            on_conflict=count_conflict,
        )

    results: list[StepResult | Exception | None] = [None] * len(runs)
    live = list(range(len(runs)))
    while live:  # each pass that a guard refuses leaves out at least one run
        try:
            done = once([runs[i] for i in live])
        except _Refused as refused:
            for pos, error in refused.errors.items():
                results[live[pos]] = error
            live = [i for pos, i in enumerate(live) if pos not in refused.errors]
            continue
        for i, result in zip(live, done, strict=True):
            results[i] = result
        break
    out = [r for r in results if r is not None]
    if len(out) != len(runs):
        raise RuntimeError("the tracker left a run without a result")
    return out


def _classify(
    runs: list[StepRun], rows: dict[int, StepRow], conflicts: int
) -> tuple[list[StepResult | Exception | None], list[Claim], dict[int, int]]:
    """Per run: its final result, or None when claimed (or a copy of a claim in this batch).

    Returns:
        (results, claims, workflow id -> index of its claim in ``runs``).
    """
    results: list[StepResult | Exception | None] = []
    claims: list[Claim] = []
    claimed: dict[int, int] = {}
    for run in runs:
        row = rows.get(run.workflow_id)
        if row is None:
            results.append(StepNotFound(f"workflow {run.workflow_id} has no step {run.step!r}"))
        elif run.subject_id is not None and run.subject_id != row.subject_id:
            results.append(
                SubjectMismatch(
                    f"workflow {run.workflow_id} is about {row.subject_id}, not {run.subject_id}"
                )
            )
        elif row.status in StepStatus.FINAL:
            results.append(
                StepResult(run.workflow_id, run.step, row.outcome or "", True, False, conflicts)
            )
        elif row.status == StepStatus.WAITING:
            results.append(
                StepNotReady(
                    f"workflow {run.workflow_id} step {run.step!r} waits for its prerequisites"
                )
            )
        elif (fenced := _fenced_out(run, row)) is not None:
            results.append(fenced)
        elif run.workflow_id in claimed:
            results.append(None)  # a second copy in this batch: a duplicate of the claim
        else:
            claimed[run.workflow_id] = len(results)
            claims.append(Claim(run, row.row_id, row.subject_id))
            results.append(None)
    return results, claims, claimed


def _fenced_out(run: StepRun, row: StepRow) -> FencedOut | None:
    """The run's error when the row saw its fencing token or a later one, else None."""
    token, seen = run.fencing_token, row.fencing_token
    if token is None or seen is None or seen < token:
        return None
    return FencedOut(
        f"workflow {run.workflow_id} step {run.step!r}: fencing token {token} is not above "
        f"{seen}, the highest the step has seen (a later attempt holds it)",
        token=token,
        row_token=seen,
    )


def _commit_held(uow: UnitOfWork, holds: list[tuple[int, Callable[[], Any]]]) -> None:
    """Commit inside every guard of ``holds`` (run position, hold), or refuse.

    Raises:
        _Refused: one or more guards refused on entry (nothing committed; the guards
            that were entered are left as if their block had failed).
    """
    refused: dict[int, Exception] = {}
    with ExitStack() as stack:
        for pos, hold in holds:
            try:
                stack.enter_context(hold())
            except Exception as exc:  # the attempt lost its lease: this run alone fails
                refused[pos] = exc
        if refused:
            raise _Refused(refused)
        uow.commit()


def _once(
    session_factory: SessionFactory,
    runs: list[StepRun],
    effect: Effect,
    on_done: OnWorkflowsDone | None,
    graph: StepGraph,
    clock: Callable[[], datetime],
    conflicts: int,
    before_commit: BeforeCommit | None = None,
) -> list[StepResult | Exception]:
    started = clock()
    step = runs[0].step
    wf_ids = sorted({r.workflow_id for r in runs})
    with UnitOfWork(session_factory) as uow:
        session = uow.session
        dialect = dialect_of(session)
        # when the workflow rows are locked relative to the effect (ADR 0014, ADR 0027)
        plan = dialect.lock_plan(len(wf_ids), conflicts)
        if plan is LockPlan.LOCK_BEFORE_READING:
            lock_workflows(session, wf_ids, started)
        rows = step_rows(session, wf_ids, step)
        results, claims, claimed = _classify(runs, rows, conflicts)
        if claims and plan is LockPlan.FENCE_BEFORE_EFFECT:
            # the first write, before the effect: on SQLite it takes the write lock, so
            # the effect reads current rows, and a lost race is a version conflict
            claimed_versions = {c.run.workflow_id: rows[c.run.workflow_id].version for c in claims}
            fence_workflows(session, claimed_versions, started)
        outcomes = dict(effect(session, claims, started)) if claims else {}
        missing = [c.step_row_id for c in claims if c.step_row_id not in outcomes]
        if missing:
            raise RuntimeError(f"the {step!r} effect gave no outcome for step rows {missing}")
        applied = [c for c in claims if not isinstance(outcomes[c.step_row_id], Exception)]
        now = clock()
        released: dict[int, tuple[DispatchedStep, ...]] = {}
        done_ids: dict[int, datetime] = {}
        if applied:
            applied_wf_ids = [c.run.workflow_id for c in applied]
            if plan is LockPlan.LOCK_BEFORE_MARKING:
                # siblings finishing at the same time wait here for each other's
                # commit, so whichever commits last sees every step done; the time
                # is read again once the lock is held, so a workflow's finish time
                # is never before one of its steps' (the last to lock writes both)
                lock_workflows(session, applied_wf_ids, now)
                now = clock()
            _mark_done(session, dialect, applied, outcomes, started, now)
            if graph.releases(step):  # a step nothing waits for decides no waiting step
                released = release_waiting(session, graph, applied_wf_ids, now)
            done_ids = _complete_workflows(session, applied_wf_ids, now)
        if done_ids and on_done is not None:
            on_done(session, sorted(rows[wf].subject_id for wf in done_ids))
        if before_commit is not None and applied:
            before_commit(applied)
        holds = [
            (claimed[c.run.workflow_id], c.run.hold) for c in applied if c.run.hold is not None
        ]
        if holds:
            _commit_held(uow, holds)
        else:
            uow.commit()
    out: list[StepResult | Exception] = []
    for i, (run, result) in enumerate(zip(runs, results, strict=True)):
        if result is not None:
            out.append(result)
            continue
        outcome = outcomes[rows[run.workflow_id].row_id]
        if isinstance(outcome, Exception):
            out.append(outcome)
        elif claimed[run.workflow_id] == i:
            created = done_ids.get(run.workflow_id)
            out.append(
                StepResult(
                    run.workflow_id,
                    step,
                    outcome,
                    False,
                    created is not None,
                    conflicts,
                    tuple(r.row_id for r in released.get(run.workflow_id, ())),
                    released.get(run.workflow_id, ()),
                    None if created is None else max((now - created).total_seconds(), 0.0),
                )
            )
        else:  # a second copy of a claimed delivery in the same batch
            out.append(StepResult(run.workflow_id, step, outcome, True, False, conflicts))
    return out


def _mark_done(
    session: Session,
    dialect: Dialect,
    claims: list[Claim],
    outcomes: dict[int, str | Exception],
    started: datetime,
    now: datetime,
) -> None:
    """Mark the claimed step rows done with their outcomes, in one statement.

    The statement compares and advances each row's fencing token: a row that saw
    its claim's token or a later one is not marked.

    Raises:
        StaleDataError: a claimed row is no longer claimable: a concurrent writer
            advanced its fencing token (a failure or dead letter recorded) or
            (where the marking rechecks, ``Dialect.marking_rechecks``) finished,
            skipped or called it off after this unit of work read it, so the unit
            of work (its effect included) must roll back and rerun; the rerun
            classifies that run at read time.
    """
    claimed = dialect.bind_rows(
        "claims",
        {
            "row_id": [c.step_row_id for c in claims],
            "outcome": [str(outcomes[c.step_row_id])[:50] for c in claims],
            "attempt": [c.run.attempt for c in claims],
            "job_id": [c.run.job_id for c in claims],
            "fencing": [c.run.fencing_token for c in claims],
        },
    )
    result = session.execute(_MARK_DONE[dialect], {**claimed, "started": started, "now": now})
    if dialect.marking_rechecks:
        marked = len(result.all())
        if marked != len(claims):
            raise StaleDataError(
                f"{len(claims) - marked} of {len(claims)} claimed step rows changed "
                "since they were read"
            )
        return
    marked = result.rowcount
    if marked not in (-1, len(claims)):
        raise StaleDataError(
            f"{len(claims) - marked} of {len(claims)} claimed step rows were fenced since "
            "they were read"
        )


def _complete_workflows(session: Session, wf_ids: list[int], now: datetime) -> dict[int, datetime]:
    """Mark done the workflows whose step rows are all done or skipped; resume unblocked ones.

    Returns:
        The workflows this call marked done: id -> creation time.
    """
    dialect = dialect_of(session)
    counts = session.execute(_STEP_COUNTS[dialect], {"ids": sorted(set(wf_ids))}).all()
    done = {
        wf: created
        for wf, status, open_, _, created in counts
        if not open_ and status != WorkflowStatus.DONE
    }
    resumable = [
        wf
        for wf, status, open_, dead_, _ in counts
        if open_ and not dead_ and status == WorkflowStatus.BLOCKED
    ]
    if done:
        session.execute(_MARK_WORKFLOWS_DONE[dialect], {"ids": sorted(done), "now": now})
    if resumable:
        session.execute(_RESUME[dialect], {"ids": resumable})
    return done


def record_step_failure(
    session_factory: SessionFactory,
    run: StepRun,
    error: str,
    *,
    clock: Callable[[], datetime] = utcnow,
) -> bool:
    """Record a failed attempt (the queue will retry): attempts, last error, state.

    A step already done, skipped or dead is left as it is (a late failure report
    of a step skipped by a compensation must not reopen it), and so is a
    ``waiting`` step: its delivery was a stale or forged message that failed
    with ``StepNotReady``, and ``failed`` would make the step runnable (the next
    delivery claims it, the relay republishes it) before its prerequisites
    succeeded, and out of reach of the release or skip that decides it.

    The row's fencing token is advanced to the run's (when it carries one and
    it is higher), so that attempt's late commit is fenced out.

    Args:
        session_factory: makes the session of the unit of work.
        run: identifies the delivery that failed.
        error: short error text (truncated to 4,000 characters).
        clock: current time (timezone-aware).

    Returns:
        True when the step row was updated.

    Raises:
        ConcurrencyConflict: the database stayed busy (retryable).
    """
    now = clock()

    def once() -> bool:
        with UnitOfWork(session_factory) as uow:
            changed = uow.session.execute(
                update(WorkflowStep)
                .where(
                    WorkflowStep.workflow_id == run.workflow_id,
                    WorkflowStep.step == run.step,
                    WorkflowStep.status.not_in(
                        (StepStatus.DONE, StepStatus.DEAD, StepStatus.SKIPPED, StepStatus.WAITING)
                    ),
                )
                .values(
                    status=StepStatus.FAILED,
                    attempts=case(
                        (WorkflowStep.attempts < run.attempt, run.attempt),
                        else_=WorkflowStep.attempts,
                    ),
                    last_error=error[:_ERROR_LIMIT],
                    job_id=run.job_id or WorkflowStep.job_id,
                    started_at=now,
                    **_advanced_token(run.fencing_token),
                ),
                execution_options={"synchronize_session": False},
            ).rowcount
            uow.commit()
            return bool(changed)

    return retry_on_conflict(once)


def _advanced_token(token: int | None) -> dict[str, Any]:
    """``values()`` advancing ``fencing_token`` to ``token`` when that is higher (none: {})."""
    if token is None:
        return {}
    column = WorkflowStep.fencing_token
    return {"fencing_token": case((or_(column.is_(None), column < token), token), else_=column)}


def mark_step_dead(
    session_factory: SessionFactory,
    workflow_id: int,
    step: str,
    reason: str,
    *,
    error: str | None = None,
    attempts: int | None = None,
    fencing_token: int | None = None,
    clock: Callable[[], datetime] = utcnow,
) -> bool:
    """Record that the queue dead-lettered a step: the workflow shows as blocked.

    The step row becomes ``dead`` with ``outcome=reason`` and ``last_error``;
    the workflow row becomes ``blocked`` with ``blocked_step`` and
    ``blocked_reason``. A step already done is left done (its effect
    committed) and nothing is blocked; so is a skipped step (it never runs),
    and a ``waiting`` step: it was never published, so the dead job was a
    stale or forged message, and ``dead`` would take the step out of reach of
    the release or skip that decides it (ADR 0011).
    The workflow row is written under its version column: a step completing
    at the same moment makes this unit of work rerun and see it.

    Args:
        session_factory: makes the session of the unit of work.
        workflow_id: the workflow's id.
        step: the step name.
        reason: the dead-letter reason, for example ``retries_exhausted``.
        error: the last error text, if any.
        attempts: attempts made, if known.
        fencing_token: the dead job's last fencing token, if known: the row's is
            advanced to it (when higher), so that attempt's late commit is fenced out.
        clock: current time (timezone-aware).

    Returns:
        True when the step was marked dead; False when it was done, skipped or
        still waiting.

    Raises:
        StepNotFound: no such workflow or step.
        ConcurrencyConflict: still conflicting after a few tries (retryable).
    """

    def once() -> bool:
        with UnitOfWork(session_factory) as uow:
            workflow, row = load_step(uow.session, workflow_id, step)
            if row.status in StepStatus.FINAL or row.status == StepStatus.WAITING:
                return False
            now = clock()
            row.status = StepStatus.DEAD
            row.outcome = reason[:50]
            row.last_error = (error or reason)[:_ERROR_LIMIT]
            if attempts is not None:
                row.attempts = max(row.attempts, attempts)
            if fencing_token is not None and (
                row.fencing_token is None or row.fencing_token < fencing_token
            ):
                row.fencing_token = fencing_token
            workflow.status = WorkflowStatus.BLOCKED
            workflow.blocked_step = step
            workflow.blocked_reason = (f"{reason}: {error}" if error else reason)[:_ERROR_LIMIT]
            workflow.updated_at = now
            uow.commit()
            return True

    return retry_on_conflict(once)
