"""The database is fenced by the lease: a step's unit of work commits a claim only if its
fencing token is above the highest the step row has seen, and only inside the attempt
guards of the runs it applies (ADR 0023)."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.orm.exc import StaleDataError

from orders.app.placement import PlacedOrder, place_orders
from orders.domain.handlers import handle_steps, mark_step_dead
from orders.domain.models import StockDeduction
from orders.domain.steps import STOCK
from reliable_queue import AttemptLost
from reliable_queue.attempts import GuardPolicy
from workflows import tracker
from workflows.errors import FencedOut
from workflows.models import StepStatus, WorkflowStep
from workflows.sql import POSTGRESQL, dialect_of
from workflows.tracker import Claim, StepResult, StepRun, record_step_failure
from workflows.uow import UnitOfWork


def place_many(session_factory, drafts) -> list[PlacedOrder]:
    with UnitOfWork(session_factory) as uow:
        placed = place_orders(uow.session, drafts)
        uow.commit()
    return placed


def run(placed: PlacedOrder, token: int | None, hold=None, attempt: int = 1) -> StepRun:
    return StepRun(
        placed.workflow_id, STOCK, placed.order_id, attempt, f"job-{placed.order_id}", token, hold
    )


def step_row(session_factory, placed: PlacedOrder) -> WorkflowStep:
    with session_factory() as session:
        return session.scalars(
            select(WorkflowStep).where(
                WorkflowStep.workflow_id == placed.workflow_id, WorkflowStep.step == STOCK
            )
        ).one()


def set_token(session_factory, placed: PlacedOrder, token: int, status=StepStatus.FAILED):
    with session_factory() as session:
        session.execute(
            update(WorkflowStep)
            .where(WorkflowStep.workflow_id == placed.workflow_id, WorkflowStep.step == STOCK)
            .values(fencing_token=token, status=status)
        )
        session.commit()


def deductions(session_factory, placed: PlacedOrder) -> int:
    with session_factory() as session:
        return session.scalar(
            select(func.count())
            .select_from(StockDeduction)
            .where(StockDeduction.order_id == placed.order_id)
        )


def test_a_run_whose_token_the_row_has_seen_is_fenced_out_and_its_batch_mates_commit(
    session_factory, catalog, make_draft
):
    a, b, c = place_many(session_factory, [make_draft() for _ in range(3)])
    set_token(session_factory, b, 50)  # b's attempt 50 failed and was recorded
    results = handle_steps(session_factory, [run(a, 10), run(b, 50), run(c, 51)])

    assert isinstance(results[0], StepResult) and isinstance(results[2], StepResult)
    assert isinstance(results[1], FencedOut) and results[1].retryable
    assert (results[1].token, results[1].row_token, results[1].seen_token) == (50, 50, None)
    assert [deductions(session_factory, p) for p in (a, b, c)] == [3, 0, 3]
    assert step_row(session_factory, b).status == StepStatus.FAILED  # nothing of it applied
    assert [step_row(session_factory, p).fencing_token for p in (a, c)] == [10, 51]


def test_a_row_that_saw_a_later_token_names_it_for_the_queue_floor(
    session_factory, catalog, make_draft
):
    """A row not final whose token is above the run's: the database has seen a token the
    queue may hand out again (Redis lost its counter), and the error says which."""
    [placed] = place_many(session_factory, [make_draft()])
    set_token(session_factory, placed, 90, status=StepStatus.DISPATCHED)
    [result] = handle_steps(session_factory, [run(placed, 42)])
    assert isinstance(result, FencedOut) and result.seen_token == 90
    [result] = handle_steps(session_factory, [run(placed, 91)])  # a later delivery commits
    assert isinstance(result, StepResult) and not result.duplicate
    assert step_row(session_factory, placed).fencing_token == 91


def test_a_finished_step_is_a_duplicate_whatever_the_token(session_factory, catalog, make_draft):
    [placed] = place_many(session_factory, [make_draft()])
    handle_steps(session_factory, [run(placed, 70)])
    [late] = handle_steps(session_factory, [run(placed, 60)])
    assert isinstance(late, StepResult) and late.duplicate  # acked, no second effect
    assert deductions(session_factory, placed) == 3


def test_recorded_failures_and_dead_letters_advance_the_token_so_their_late_commit_is_fenced(
    session_factory, catalog, make_draft
):
    first, second = place_many(session_factory, [make_draft(), make_draft()])
    assert record_step_failure(session_factory, run(first, 30), "TimeLimitExceeded")
    assert record_step_failure(session_factory, run(first, 20), "an older report")
    assert step_row(session_factory, first).fencing_token == 30  # the highest stays
    assert mark_step_dead(session_factory, second.workflow_id, STOCK, "timed_out", fencing_token=40)
    assert step_row(session_factory, second).fencing_token == 40

    late = handle_steps(session_factory, [run(first, 30), run(second, 40)])
    assert all(isinstance(r, FencedOut) for r in late)
    assert deductions(session_factory, first) == deductions(session_factory, second) == 0
    assert step_row(session_factory, second).status == StepStatus.DEAD
    # a direct caller carries no token and is not fenced
    [direct] = handle_steps(session_factory, [run(second, None)])
    assert isinstance(direct, StepResult) and not direct.duplicate


def test_the_marking_compares_the_token_itself_and_its_row_count_is_checked(
    session_factory, catalog, make_draft
):
    """The compare and the advance are one statement on both databases: a row whose
    token moved to the claim's or later after the read is not marked, and the unit of
    work is told (it rolls back and reruns)."""
    [placed] = place_many(session_factory, [make_draft()])
    row = step_row(session_factory, placed)
    with UnitOfWork(session_factory) as uow:
        session = uow.session
        session.execute(
            update(WorkflowStep).where(WorkflowStep.id == row.id).values(fencing_token=8)
        )
        claim = Claim(run(placed, 8), row.id, placed.order_id)
        with pytest.raises(StaleDataError):
            tracker._mark_done(
                session,
                dialect_of(session),
                [claim],
                {row.id: "deducted"},
                row.created_at,
                row.created_at,
            )
    assert step_row(session_factory, placed).status != StepStatus.DONE


def test_a_concurrent_failure_record_after_the_read_fences_the_claim(
    session_factory, catalog, make_draft
):
    """PostgreSQL runs the effect before any lock: a failure of a later attempt recorded
    meanwhile (a higher token) makes the marking refuse, and the rerun is fenced out."""
    with session_factory() as session:
        if dialect_of(session) is not POSTGRESQL:
            pytest.skip("SQLite takes its write lock before the effect: nothing can interleave")
    [placed] = place_many(session_factory, [make_draft()])
    from orders.domain import effects

    stock = effects.EFFECTS[STOCK]
    calls = []

    def racing(session, deliveries, now):
        calls.append(1)
        if len(calls) == 1:  # a later attempt fails and is recorded, committed elsewhere
            record_step_failure(session_factory, run(placed, 12, attempt=2), "later")
        return stock(session, deliveries, now)

    effects.EFFECTS[STOCK] = racing
    try:
        [result] = handle_steps(session_factory, [run(placed, 11)])
    finally:
        effects.EFFECTS[STOCK] = stock
    assert isinstance(result, FencedOut) and result.seen_token == 12
    assert deductions(session_factory, placed) == 0
    assert step_row(session_factory, placed).fencing_token == 12


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_commit_runs_inside_the_attempt_guards_and_a_lost_one_fails_alone(
    session_factory, catalog, make_draft
):
    a, b, c = place_many(session_factory, [make_draft() for _ in range(3)])
    policy = GuardPolicy(30.0, Clock())
    guards = [policy.guard(sent_at=0.0) for _ in range(3)]
    assert guards[1].revoke("timed_out", 0.0)  # b's attempt was timed out meanwhile
    runs = [run(p, 5, hold=lambda g=g: g) for p, g in zip((a, b, c), guards, strict=True)]

    results = handle_steps(session_factory, runs)

    assert isinstance(results[1], AttemptLost) and results[1].reason == "timed_out"
    assert isinstance(results[0], StepResult) and isinstance(results[2], StepResult)
    assert [deductions(session_factory, p) for p in (a, b, c)] == [3, 0, 3]
    assert [g.kept for g in guards] == [True, False, True]  # committed inside a and c's
    assert step_row(session_factory, b).status != StepStatus.DONE
