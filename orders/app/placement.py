"""Place orders through the transactional outbox.

Each batch is one transaction: the orders, their lines, their workflow rows
and one step row per step commit together or not at all. After the commit
the relay publishes the batch's steps; if the process dies first, or the
queue cannot be reached or refuses a step, the steps stay in the outbox and
the relay sweep publishes them later: placing never fails because of
publishing, it reports the steps whose publishing was deferred.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.orm import Session

from orders.domain.errors import UnknownSource
from orders.domain.models import Order, OrderLine, OrderStatus
from orders.domain.steps import order_workflow
from orders.sources.drafts import RANDOM, TPCH, OrderDraft, next_tpch_drafts, random_drafts
from workflows.bulk import insert_rows
from workflows.columns import utcnow
from workflows.isolation import describe
from workflows.messages import StepMessage
from workflows.models import Workflow, WorkflowStep
from workflows.outbox import add_workflows, initial_messages
from workflows.planner_stats import analyze_never_analyzed
from workflows.relay import Publisher, PublishPolicy, publish_steps
from workflows.uow import SessionFactory, UnitOfWork

_ORDERS = Order.__table__
_LINES = OrderLine.__table__
#: the tables placement fills in bulk, analyzed after their first load (ADR 0020)
_ANALYZED = (_ORDERS, _LINES, Workflow.__table__, WorkflowStep.__table__)


@dataclass(frozen=True)
class PlacedOrder:
    """Ids written for one placed order."""

    order_id: int
    workflow_id: int
    step_ids: tuple[int, ...]


@dataclass
class PlaceResult:
    """What ``place`` did.

    Attributes:
        orders: the orders placed (committed), in placement order.
        published: steps published right after their commit (the first steps:
            steps that wait for others are published when released).
        deferred: first steps left in the outbox for the sweep (queue
            unreachable, or the queue refused them; see ``orders outbox list``).
        publish_error: the first publishing error met, one line; None if none.
    """

    orders: list[PlacedOrder] = field(default_factory=list)
    published: int = 0
    deferred: int = 0
    publish_error: str | None = None

    @property
    def order_ids(self) -> list[int]:
        """Ids of the placed orders, in placement order."""
        return [placed.order_id for placed in self.orders]


def place_orders(
    session: Session, drafts: Sequence[OrderDraft], *, now: datetime | None = None
) -> list[PlacedOrder]:
    """Write orders, lines, workflows and step rows in the caller's transaction.

    Nothing is committed or published here; the caller commits, then hands
    the step ids to ``workflows.relay.publish_steps``.

    Args:
        session: the caller's session, inside its transaction.
        drafts: orders to write.
        now: placement time (timezone-aware); default the current UTC time.

    Returns:
        One ``PlacedOrder`` per draft, in the same order.

    Raises:
        sqlalchemy.exc.IntegrityError: a draft names an unknown customer or part.
    """
    return write_orders(session, drafts, now=now)[0]


def write_orders(
    session: Session, drafts: Sequence[OrderDraft], *, now: datetime | None = None
) -> tuple[list[PlacedOrder], dict[int, StepMessage]]:
    """``place_orders``, also returning the queue messages of the steps to publish first.

    Returns:
        ``(placed, first)``: one ``PlacedOrder`` per draft, and step row id ->
        message for the steps without prerequisites, to hand to
        ``workflows.relay.publish_steps(..., known=first)`` after the commit.

    Raises:
        sqlalchemy.exc.IntegrityError: a draft names an unknown customer or part.
    """
    if not drafts:
        return [], {}
    now = now or utcnow()
    # Core multi-row INSERT ... RETURNING on the tables (COPY on PostgreSQL,
    # ``workflows.bulk``): the ORM's bulk insert spent about as long on per-row
    # bookkeeping as the database on the rows.
    order_ids = insert_rows(
        session,
        _ORDERS,
        [
            {
                "customer_id": draft.customer_id,
                "total_price": draft.total_price,
                "order_date": draft.order_date,
                "status": OrderStatus.PLACED,
                "source": draft.source,
                "source_key": draft.source_key,
                "placed_at": now,
            }
            for draft in drafts
        ],
    )
    insert_rows(
        session,
        _LINES,
        [
            {
                "order_id": order_id,
                "line_number": line.line_number,
                "part_id": line.part_id,
                "quantity": line.quantity,
                "extended_price": line.extended_price,
                "discount": line.discount,
                "ship_mode": line.ship_mode,
            }
            for draft, order_id in zip(drafts, order_ids, strict=True)
            for line in draft.lines
        ],
        ids=False,
    )
    specs = [order_workflow(order_id) for order_id in order_ids]
    created = add_workflows(session, specs, now=now)
    placed = [PlacedOrder(c.subject_id, c.workflow_id, c.step_ids) for c in created]
    return placed, initial_messages(specs, created)


def place(
    session_factory: SessionFactory,
    count: int,
    *,
    source: str = TPCH,
    rng: random.Random | None = None,
    batch_size: int = 500,
    publisher: Publisher | None = None,
    clock: Callable[[], datetime] = utcnow,
    on_batch: Callable[[list[PlacedOrder]], None] | None = None,
    policy: PublishPolicy | None = None,
) -> PlaceResult:
    """Place the next ``count`` orders of a source, batch by batch, and publish their steps.

    Each batch of up to ``batch_size`` orders is one transaction (every order
    with its steps is atomic); its steps are published right after it
    commits when a ``publisher`` is given, else left pending for the relay.

    Args:
        session_factory: makes the session of each unit of work.
        count: orders to place (>= 0).
        source: ``tpch`` (the next orders of the stream) or ``random``.
        rng: random source for ``random`` orders; default unseeded.
        batch_size: orders per transaction (>= 1).
        publisher: queue adapter; None leaves steps pending for the sweep.
        clock: current time (timezone-aware).
        on_batch: called after each committed (and published) batch, e.g. to
            advance a progress bar.
        policy: attempts and backoff of rows the queue refuses (default
            ``workflows.relay.PublishPolicy()``).

    Returns:
        A ``PlaceResult`` with the placed orders and the number of steps
        published.

    Raises:
        UnknownSource: ``source`` is not ``tpch`` or ``random``.
        StreamNotLoaded: the TPC-H stream or the catalog is not loaded.

    Publishing errors are never raised: they are counted in ``deferred`` and
    described in ``publish_error``; after the queue is found unreachable the
    later batches are not tried (their steps are deferred at once).
    """
    if source not in (TPCH, RANDOM):
        raise UnknownSource(f"unknown order source {source!r}; use 'tpch' or 'random'")
    rng = rng or random.Random()
    result = PlaceResult()
    remaining = count
    first_batch = True
    while remaining > 0:
        size = min(batch_size, remaining)
        with UnitOfWork(session_factory) as uow:
            if source == TPCH:
                drafts = next_tpch_drafts(uow.session, size)
            else:
                drafts = random_drafts(uow.session, size, rng)
            placed, first = write_orders(uow.session, drafts, now=clock())
            uow.commit()
        if first_batch:
            # a first bulk load into never-analyzed tables (PostgreSQL): give the
            # planner their statistics before the step workers plan on guesses
            analyze_never_analyzed(session_factory, _ANALYZED)
            first_batch = False
        result.orders.extend(placed)
        remaining -= size
        # the first steps; those that wait are published when a finished step releases them
        step_ids = list(first)
        published = 0
        if publisher is not None:
            try:
                published = publish_steps(
                    session_factory, publisher, step_ids, clock=clock, policy=policy, known=first
                )
            except Exception as exc:  # the orders are committed: publishing is deferred
                publisher = None
                result.publish_error = result.publish_error or describe(exc)
        result.published += published
        result.deferred += len(step_ids) - published
        if on_batch is not None:
            on_batch(placed)
    return result
