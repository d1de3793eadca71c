"""The one search filter answered by SQL, on SQLite and PostgreSQL: every filter, their
combination, the keyset pages, and the bulk actions' dry runs on what it finds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.orm import Session, sessionmaker

from orders.app.audit import Actor
from orders.app.bulk import cancel_matching
from orders.app.cancellation import cancel
from orders.app.placement import place_orders
from orders.domain.handlers import StepRequest, handle_step, mark_step_dead
from orders.domain.search import SearchFilter, search_jobs, search_orders
from orders.domain.steps import STEPS
from orders.sources.drafts import OrderDraft
from workflows.uow import UnitOfWork

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@dataclass
class Orders:
    completed: int
    blocked: int
    cancelled: int
    placed: list[int]


@pytest.fixture
def orders(
    session_factory: sessionmaker[Session],
    catalog: dict[int, int],
    make_draft: Callable[..., OrderDraft],
    publisher,
) -> Orders:
    """Seven orders an hour apart: completed (customer 1), blocked on logistics with a
    TimeoutError (customer 2), cancelled (customer 3), four placed (customer 1)."""
    placed = []
    for n, customer in enumerate((1, 2, 3, 1, 1, 1, 1)):
        with UnitOfWork(session_factory) as uow:
            placed += place_orders(
                uow.session, [make_draft(customer_id=customer)], now=T0 + timedelta(hours=n)
            )
            uow.commit()
    done, blocked, cancelled = placed[:3]
    for step in STEPS:
        handle_step(session_factory, StepRequest(done.workflow_id, done.order_id, step))
    handle_step(session_factory, StepRequest(blocked.workflow_id, blocked.order_id, "stock"))
    mark_step_dead(
        session_factory,
        blocked.workflow_id,
        "logistics",
        "error",
        error="TimeoutError: carrier API did not answer",
        attempts=5,
    )
    cancel(session_factory, publisher, cancelled.order_id)
    return Orders(
        done.order_id, blocked.order_id, cancelled.order_id, [p.order_id for p in placed[3:]]
    )


def ids(session_factory: sessionmaker[Session], **given: object) -> list[int]:
    with session_factory() as session:
        return [h.order_id for h in search_orders(session, SearchFilter(**given)).items]


def test_every_filter_finds_what_it_says(
    session_factory: sessionmaker[Session], orders: Orders
) -> None:
    newest_first = sorted(orders.placed, reverse=True)
    assert ids(session_factory, status="placed") == newest_first
    assert ids(session_factory, status="blocked") == [orders.blocked]
    assert ids(session_factory, status="completed") == [orders.completed]
    assert ids(session_factory, status="cancelled") == [orders.cancelled]
    assert ids(session_factory, customer_id=2) == [orders.blocked]
    assert ids(session_factory, step="logistics", step_state="dead") == [orders.blocked]
    assert ids(session_factory, dlq_reason="error") == [orders.blocked]
    assert ids(session_factory, dlq_reason="timed_out") == []
    assert ids(session_factory, error="timeouterror") == [orders.blocked]  # any case
    assert ids(session_factory, error="100%_") == []  # LIKE wildcards are literal
    window = {"placed_after": T0 + timedelta(hours=1), "placed_before": T0 + timedelta(hours=3)}
    assert ids(session_factory, **window) == [orders.cancelled, orders.blocked]
    both = ids(session_factory, customer_id=1, status="completed", step_state="done")
    assert both == [orders.completed]


def test_jobs_are_step_rows_filtered_by_step_and_order(
    session_factory: sessionmaker[Session], orders: Orders
) -> None:
    with session_factory() as session:
        dead = search_jobs(session, SearchFilter(step_state="dead")).items
        skipped = search_jobs(session, SearchFilter(customer_id=3, step_state="skipped")).items
    assert [(j.order_id, j.step, j.outcome) for j in dead] == [
        (orders.blocked, "logistics", "error")
    ]
    assert {j.step for j in skipped} == set(STEPS)


def test_pages_follow_the_cursor_without_gaps_or_repeats(
    session_factory: sessionmaker[Session], orders: Orders
) -> None:
    seen: list[int] = []
    cursor = None
    with session_factory() as session:
        for _ in range(10):
            page = search_orders(session, SearchFilter(), limit=3, cursor=cursor)
            seen += [h.order_id for h in page.items]
            cursor = page.next_cursor
            if cursor is None:
                break
    assert seen == sorted(seen, reverse=True) and len(seen) == len(set(seen)) == 7


def test_a_bulk_cancel_dry_run_lists_then_the_action_cancels_only_cancellable_orders(
    session_factory: sessionmaker[Session], orders: Orders, publisher
) -> None:
    who = Actor("ops", "api", "r1")
    everything = SearchFilter(customer_id=1)
    dry = cancel_matching(session_factory, lambda: publisher, everything, actor=who, dry_run=True)
    assert sorted(map(int, dry.ids)) == sorted(orders.placed)  # not the completed one
    assert ids(session_factory, status="cancelled") == [orders.cancelled]  # nothing changed
    done = cancel_matching(session_factory, lambda: publisher, everything, actor=who, dry_run=False)
    assert sorted(map(int, done.ids)) == sorted(orders.placed)
    assert sorted(ids(session_factory, status="cancelled")) == sorted(
        [orders.cancelled, *orders.placed]
    )
