"""Finding orders and step jobs by what an operator knows: one filter, answered by SQL.

:class:`SearchFilter` is the one filter of ``orders search``, the dashboard's search
box, ``GET /api/v1/orders`` and ``GET /api/v1/jobs`` and the bulk actions. Results
come newest first in pages: a page's ``next_cursor`` (the last id it holds) asks for
the next one. Every filter but the error text is an indexed comparison (orders by
status, customer and placement time; step rows by step and state); the error text is a
case-insensitive substring of the step's last error, checked on the rows the other
filters leave. Reasoning: docs/adr/0041-search-answers-from-the-database.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator
from sqlalchemy import and_, select
from sqlalchemy.orm import Session

from orders.domain.access import ApiOrder
from orders.domain.models import Order, OrderStatus
from orders.domain.steps import ALL_STEPS, WORKFLOW_KIND
from orders.domain.text import DatabaseInput
from workflows.models import DEAD_OUTCOMES, StepStatus, Workflow, WorkflowStatus, WorkflowStep

BLOCKED = "blocked"
"""Pseudo order status: the order's workflow is blocked by a dead step (wins over placed)."""
ORDER_STATES = (*OrderStatus.ALL, BLOCKED)
MAX_PAGE = 500
"""Largest page (rows)."""
MAX_ID = 2**31 - 1
"""Largest id a filter or cursor takes: orders, customers, parts, step rows and audit rows
have INTEGER ids (32-bit signed on PostgreSQL; a larger number is refused as bad input,
not sent to the database)."""

OrderState = Literal["placed", "completed", "out_of_stock", "cancelled", "blocked"]
StepName = Literal[ALL_STEPS]  # type: ignore[valid-type]
StepState = Literal[StepStatus.ALL]  # type: ignore[valid-type]
DlqReason = Literal[DEAD_OUTCOMES]  # type: ignore[valid-type]
"""The reasons a dead letter carries: those ``orders dlq list --reason`` takes."""


class SearchFilter(DatabaseInput):
    """What to find; every field is optional and they all must hold (AND).

    Attributes:
        status: the order's status, or ``blocked`` (a dead step blocks it).
        customer_id: the order's customer.
        step / step_state: an order with a step of that name / in that state (a job:
            that step / state).
        dlq_reason: a step dead-lettered for that reason, one of the queue's dead-letter
            reasons (:data:`DlqReason`: ``error``, ``retries_exhausted``, ``timed_out``,
            ...); another is refused, its message naming them.
        error: text found in the step's last error (case-insensitive).
        placed_after / placed_before: the order's placement time, ISO 8601 (UTC when
            no zone is given); after is inclusive, before exclusive.

    Text holding a NUL character is refused in every field
    (:class:`~orders.domain.text.DatabaseInput`): the database cannot take it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: OrderState | None = None
    customer_id: int | None = Field(default=None, ge=1, le=MAX_ID)
    step: StepName | None = None
    step_state: StepState | None = None
    dlq_reason: DlqReason | None = None
    error: str | None = Field(default=None, min_length=1, max_length=200)
    placed_after: datetime | None = None
    placed_before: datetime | None = None

    @field_validator("placed_after", "placed_before")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value

    def given(self) -> dict[str, Any]:
        """The fields set (JSON-able), for links, the audit log and ``--json``."""
        return self.model_dump(mode="json", exclude_none=True)

    def about_steps(self) -> bool:
        """Whether a step-row filter is set (step, state, DLQ reason, error)."""
        return any(v is not None for v in (self.step, self.step_state, self.dlq_reason, self.error))


@dataclass(frozen=True)
class OrderHit:
    """One order found (``status`` shows ``blocked`` over ``placed``)."""

    order_id: int
    status: str
    customer_id: int
    placed_at: datetime
    completed_at: datetime | None
    blocked_step: str | None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (times as ISO 8601)."""
        return _jsonable(asdict(self))


@dataclass(frozen=True)
class JobHit:
    """One step job found: its step row (the database's account of the job)."""

    step_id: int
    order_id: int
    workflow_id: int
    step: str
    queue: str
    status: str
    outcome: str | None
    attempts: int
    last_error: str | None
    job_id: str | None
    dispatched_at: datetime | None
    finished_at: datetime | None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (times as ISO 8601)."""
        return _jsonable(asdict(self))


@dataclass(frozen=True)
class Page:
    """One page of hits, newest first; ``next_cursor`` is None on the last page."""

    items: list[Any]
    next_cursor: int | None


def _jsonable(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in values.items()}


def _step_conditions(f: SearchFilter) -> list[Any]:
    out: list[Any] = []
    if f.step is not None:
        out.append(WorkflowStep.step == f.step)
    if f.step_state is not None:
        out.append(WorkflowStep.status == f.step_state)
    if f.dlq_reason is not None:
        out += [WorkflowStep.status == StepStatus.DEAD, WorkflowStep.outcome == f.dlq_reason]
    if f.error is not None:
        out.append(WorkflowStep.last_error.icontains(f.error, autoescape=True))
    return out


def _order_conditions(f: SearchFilter) -> list[Any]:
    out: list[Any] = []
    if f.status == BLOCKED:
        out.append(Workflow.status == WorkflowStatus.BLOCKED)
    elif f.status is not None:
        out.append(Order.status == f.status)
        if f.status == OrderStatus.PLACED:
            out.append(Workflow.status != WorkflowStatus.BLOCKED)
    if f.customer_id is not None:
        out.append(Order.customer_id == f.customer_id)
    if f.placed_after is not None:
        out.append(Order.placed_at >= f.placed_after)
    if f.placed_before is not None:
        out.append(Order.placed_at < f.placed_before)
    return out


def _joined(query: Any) -> Any:
    return query.join(
        Workflow, and_(Workflow.kind == WORKFLOW_KIND, Workflow.subject_id == Order.id)
    )


def search_orders(
    session: Session,
    f: SearchFilter,
    *,
    limit: int = 50,
    cursor: int | None = None,
    placed_by: str | None = None,
) -> Page:
    """Orders matching ``f``, newest first.

    Args:
        session: a session (only read).
        f: the filter.
        limit: rows per page, 1..:data:`MAX_PAGE`.
        cursor: only orders with a smaller id (a page's ``next_cursor``).
        placed_by: only orders placed over HTTP by this token (a placer's view).

    Returns:
        A :class:`Page` of :class:`OrderHit`.
    """
    query = _joined(
        select(
            Order.id,
            Order.status,
            Order.customer_id,
            Order.placed_at,
            Workflow.status,
            Workflow.finished_at,
            Workflow.blocked_step,
        )
    ).where(*_order_conditions(f))
    if f.about_steps():
        query = query.where(
            select(WorkflowStep.id)
            .where(WorkflowStep.workflow_id == Workflow.id, *_step_conditions(f))
            .exists()
        )
    if placed_by is not None:
        query = query.join(ApiOrder, ApiOrder.order_id == Order.id).where(
            ApiOrder.placed_by == placed_by
        )
    if cursor is not None:
        query = query.where(Order.id < cursor)
    rows = session.execute(query.order_by(Order.id.desc()).limit(limit + 1)).all()
    hits = [
        OrderHit(
            oid,
            BLOCKED if wstatus == WorkflowStatus.BLOCKED else status,
            customer,
            placed,
            finished,
            blocked,
        )
        for oid, status, customer, placed, wstatus, finished, blocked in rows[:limit]
    ]
    more = len(rows) > limit
    return Page(hits, hits[-1].order_id if more and hits else None)


def search_jobs(
    session: Session, f: SearchFilter, *, limit: int = 50, cursor: int | None = None
) -> Page:
    """Step jobs (step rows) matching ``f``, newest first; order filters apply to the
    step's order.

    Args:
        session: a session (only read).
        f: the filter.
        limit: rows per page, 1..:data:`MAX_PAGE`.
        cursor: only step rows with a smaller id (a page's ``next_cursor``).

    Returns:
        A :class:`Page` of :class:`JobHit`.
    """
    query = (
        _joined(
            select(
                WorkflowStep.id,
                Order.id,
                Workflow.id,
                WorkflowStep.step,
                WorkflowStep.queue,
                WorkflowStep.status,
                WorkflowStep.outcome,
                WorkflowStep.attempts,
                WorkflowStep.last_error,
                WorkflowStep.job_id,
                WorkflowStep.dispatched_at,
                WorkflowStep.finished_at,
            ).select_from(Order)
        )
        .join(WorkflowStep, WorkflowStep.workflow_id == Workflow.id)
        .where(*_order_conditions(f), *_step_conditions(f))
    )
    if cursor is not None:
        query = query.where(WorkflowStep.id < cursor)
    rows = session.execute(query.order_by(WorkflowStep.id.desc()).limit(limit + 1)).all()
    hits = [JobHit(*row) for row in rows[:limit]]
    more = len(rows) > limit
    return Page(hits, hits[-1].step_id if more and hits else None)
