"""The request and response bodies of ``/api/v1``: the OpenAPI document is generated
from these models, and every answer is validated against it by the property tests
(docs/adr/0039-the-front-door-tokens-and-idempotency.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from orders.domain.search import MAX_ID, SearchFilter
from reliable_queue.limits import MAX_PRIORITY, MIN_PRIORITY

MAX_LINES = 50
"""Most lines one order may have (TPC-H orders have 1-7)."""
MAX_QUANTITY = 10_000
"""Most units of one part on one line."""


class LineIn(BaseModel):
    """One line of an order: a part and how many (JSON integers only: strict)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    part_id: int = Field(ge=1, le=MAX_ID, description="The part (TPC-H PART key).")
    quantity: int = Field(ge=1, le=MAX_QUANTITY, description="Units, 1..10000.")


class OrderIn(BaseModel):
    """The body of ``POST /api/v1/orders``.

    Strict: a number is a JSON integer, never ``"3"``, ``true`` or ``1e3`` (a shop's
    bug should be a 422 naming the field, not an order for customer 1000).
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    customer_id: int = Field(ge=1, le=MAX_ID, description="The customer (TPC-H CUSTOMER key).")
    lines: list[LineIn] = Field(
        min_length=1, max_length=MAX_LINES, description="1..50 lines, one per part."
    )
    priority: int | None = Field(
        default=None,
        ge=MIN_PRIORITY,
        le=MAX_PRIORITY,
        description="The queue priority of the order's steps: 0 (runs first) .. 9 (last);"
        " absent: 5, the queue's default. Within one priority, customers take turns.",
    )

    @field_validator("lines")
    @classmethod
    def _one_line_per_part(cls, lines: list[LineIn]) -> list[LineIn]:
        seen: set[int] = set()
        for line in lines:
            if line.part_id in seen:
                raise ValueError(f"part {line.part_id} is on two lines: one line per part")
            seen.add(line.part_id)
        return lines


class StepOut(BaseModel):
    """One step of an order (as ``orders status ID --json`` shows it)."""

    step: str
    status: str
    outcome: str | None
    attempts: int
    last_error: str | None
    job_id: str | None
    created_at: datetime
    dispatched_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    compensates: str | None


class OrderOut(BaseModel):
    """An order with its workflow and steps."""

    id: int = Field(description="The order's id.")
    status: str = Field(description="placed, completed, out_of_stock or cancelled.")
    source: str
    customer_id: int
    total_price: str = Field(description="Decimal, as text.")
    placed_at: datetime
    workflow_id: int | None = Field(description="The order's workflow (its steps' record).")
    workflow_status: str | None = Field(description="running, done or blocked.")
    blocked_step: str | None
    blocked_reason: str | None
    completed_at: datetime | None
    steps: list[StepOut]
    unreadable: dict[str, str] = Field(
        default_factory=dict, description="Steps whose job id Redis could not give, and why."
    )


class OrderHitOut(BaseModel):
    """One order found by a search (``status`` shows ``blocked`` over ``placed``)."""

    id: int
    status: str
    customer_id: int
    placed_at: datetime
    completed_at: datetime | None
    blocked_step: str | None


class JobHitOut(BaseModel):
    """One step job found by a search: its step row."""

    step_id: int
    order_id: int
    step: str
    queue: str
    status: str
    outcome: str | None
    attempts: int
    last_error: str | None
    job_id: str | None
    dispatched_at: datetime | None
    finished_at: datetime | None


class OrderPage(BaseModel):
    """A page of orders, newest first; pass ``next_cursor`` as ``cursor`` for the next."""

    items: list[OrderHitOut]
    next_cursor: int | None


class JobPage(BaseModel):
    """A page of step jobs, newest first."""

    items: list[JobHitOut]
    next_cursor: int | None


class CancelOut(BaseModel):
    """What ``POST /api/v1/orders/{id}/cancel`` did."""

    id: int
    status: str = Field(description="cancelled")
    already_cancelled: bool
    compensations: list[str]
    skipped: list[str]
    deferred_steps: int


class BulkIn(BaseModel):
    """A bulk action: the search filter and whether only to list."""

    model_config = ConfigDict(extra="forbid")

    filter: SearchFilter = Field(default_factory=SearchFilter)
    dry_run: bool = True
    all: bool = Field(
        default=False,
        description="With an empty filter and dry_run false: act on every order in flight "
        "(cancel) or every dead job (redrive). Without it that is refused (422).",
    )


class BulkOut(BaseModel):
    """What a bulk action did (or would do)."""

    action: str
    dry_run: bool
    count: int
    ids: list[str]
    skipped: list[str]
    more: bool
    deferred_steps: int


class AuditOut(BaseModel):
    """One operator action."""

    id: int
    at: datetime
    actor: str
    source: str
    action: str
    target: Any
    dry_run: bool
    count: int
    result: str
    request_id: str | None


class AuditPage(BaseModel):
    """Operator actions, newest first."""

    items: list[AuditOut]
    next_cursor: int | None


class FieldProblem(BaseModel):
    """One field a request got wrong."""

    field: str = Field(description="Where: a JSON path (lines.0.quantity), a header or a query.")
    message: str


class Problem(BaseModel):
    """An RFC 9457 problem (``application/problem+json``)."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    instance: str | None = None
    field: str | None = Field(default=None, description="The first field at fault.")
    errors: list[FieldProblem] = Field(default_factory=list)
