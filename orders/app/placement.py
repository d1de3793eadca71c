"""Place orders through the transactional outbox.

Each batch is one transaction: the orders, their lines, their workflow rows
and one step row per step commit together or not at all, the first steps
already ``dispatched``. After the commit the batch's first steps are published
(``workflows.relay.publish_dispatched``, docs/adr/0028); if the queue cannot be
reached or refuses a step, the step goes back to ``pending`` and the relay sweep
publishes it later, and if the process dies first the sweep re-publishes it
after ``republish_after``: placing never fails because of publishing, it
reports the steps whose publishing was deferred.

A batch whose database connection drops is retried with bounded backoff
(:class:`Reconnect`), and never placed twice: before a retry the database is
asked whether the failed attempt committed (``orders.app.commit_outcome``).
The caller's :class:`PlaceResult` holds every committed order whatever
happens, so a command can always say how many it placed.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from opentelemetry.trace import Tracer
from sqlalchemy.orm import Session

from orders.app.commit_outcome import Attempt, Outcome, Store, store_of
from orders.app.order_traces import OrderSpans
from orders.domain.errors import OrdersError, UnknownSource
from orders.domain.models import Order, OrderLine, OrderStatus
from orders.domain.steps import ORDER_GRAPH, STEPS, order_workflow
from orders.sources.drafts import RANDOM, TPCH, OrderDraft, next_tpch_drafts, random_drafts
from reliable_queue.trace_context import TraceContext
from workflows.columns import utcnow
from workflows.isolation import describe
from workflows.messages import DispatchedStep
from workflows.models import Workflow, WorkflowStep
from workflows.outbox import add_workflows
from workflows.relay import Publisher, PublishPolicy, publish_dispatched
from workflows.sql import dialect_of, dialect_of_factory
from workflows.uow import SessionFactory, UnitOfWork

log = logging.getLogger("orders.placement")

_ORDERS = Order.__table__
_LINES = OrderLine.__table__
#: the tables placement fills in bulk, analyzed after their first load (ADR 0020)
_ANALYZED = (_ORDERS, _LINES, Workflow.__table__, WorkflowStep.__table__)
#: steps of an order that wait for no other: published at placement
_FIRST_STEPS = sum(1 for step in STEPS if not ORDER_GRAPH.after.get(step))


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
        reconnects: batches run again after their database connection dropped.
        uncertain: ids of the orders of a batch whose commit the database could not
            confirm or deny (an interrupt or failure during its COMMIT); not in
            ``orders``.
    """

    orders: list[PlacedOrder] = field(default_factory=list)
    published: int = 0
    deferred: int = 0
    publish_error: str | None = None
    reconnects: int = 0
    uncertain: list[int] = field(default_factory=list)

    @property
    def order_ids(self) -> list[int]:
        """Ids of the placed orders, in placement order."""
        return [placed.order_id for placed in self.orders]


@dataclass(frozen=True)
class Reconnect:
    """How a batch whose database connection dropped is tried again.

    Attributes:
        attempts: runs of one batch at most (the first included), >= 1.
        base_seconds / max_seconds: backoff before the n-th retry: a random share of
            ``min(max_seconds, base_seconds * 2**n)`` (full jitter), seconds. The
            defaults give up after about 15 s of a database that does not answer.

    Raises:
        ValueError: ``attempts`` below 1, or the delays out of order or negative.
    """

    attempts: int = 6
    base_seconds: float = 0.5
    max_seconds: float = 8.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or not 0 <= self.base_seconds <= self.max_seconds:
            raise ValueError("Reconnect needs attempts >= 1 and 0 <= base_seconds <= max_seconds")

    def delay(self, retry: int, rng: random.Random) -> float:
        """Seconds to wait before retry number ``retry`` (0-based)."""
        return rng.uniform(0, min(self.max_seconds, self.base_seconds * 2**retry))


class PlacementUncertain(OrdersError):
    """A batch's transaction may or may not have committed and the database cannot
    say (it stayed unreachable, or no longer knows the transaction).

    Attributes:
        order_ids: the ids the batch's orders have if it committed.
    """

    def __init__(self, order_ids: Sequence[int], why: str) -> None:
        self.order_ids = list(order_ids)
        span = f"{self.order_ids[0]}..{self.order_ids[-1]}" if self.order_ids else "-"
        super().__init__(
            f"the database did not say whether {len(self.order_ids)} order(s) (ids {span}) "
            f"committed ({why}); `orders status ID` shows whether they exist"
        )


def place_orders(
    session: Session, drafts: Sequence[OrderDraft], *, now: datetime | None = None
) -> list[PlacedOrder]:
    """Write orders, lines, workflows and step rows in the caller's transaction.

    Nothing is committed or published here; the step rows are ``pending`` (or
    ``waiting``), for the relay sweep (:func:`write_orders` writes the first
    steps dispatched, for a publish right after the commit).

    Args:
        session: the caller's session, inside its transaction.
        drafts: orders to write.
        now: placement time (timezone-aware); default the current UTC time.

    Returns:
        One ``PlacedOrder`` per draft, in the same order.

    Raises:
        sqlalchemy.exc.IntegrityError: a draft names an unknown customer or part.
    """
    return write_orders(session, drafts, now=now, dispatch=False)[0]


def write_orders(
    session: Session,
    drafts: Sequence[OrderDraft],
    *,
    now: datetime | None = None,
    dispatch: bool = True,
    traces: Sequence[TraceContext | None] | None = None,
) -> tuple[list[PlacedOrder], list[DispatchedStep]]:
    """``place_orders``, with the first steps written ``dispatched`` (``dispatch``).

    Args:
        session: the caller's session, inside its transaction.
        drafts: orders to write.
        now: placement time (timezone-aware); default the current UTC time.
        dispatch: write the steps without prerequisites ``dispatched`` (the caller
            publishes them after its commit); False writes them ``pending``.
        traces: each draft's trace context (``orders.app.order_traces.OrderSpans``),
            written on its order's step rows; None: none.

    Returns:
        ``(placed, first)``: one ``PlacedOrder`` per draft, and the step rows
        written dispatched, with their message columns, to hand to
        ``workflows.relay.publish_dispatched`` after the commit (empty without
        ``dispatch``).

    Raises:
        sqlalchemy.exc.IntegrityError: a draft names an unknown customer or part.
    """
    if not drafts:
        return [], []
    now = now or utcnow()
    order_ids = insert_orders(session, drafts, now=now)
    specs = [
        order_workflow(
            order_id,
            priority=draft.priority,
            customer_id=draft.customer_id,
            queue_priority=draft.queue_priority,
        )
        for draft, order_id in zip(drafts, order_ids, strict=True)
    ]
    if traces is not None and any(traces):
        specs = [
            dataclasses.replace(spec, trace_context=context)
            for spec, context in zip(specs, traces, strict=True)
        ]
    created = add_workflows(session, specs, now=now, dispatch=dispatch)
    placed = [PlacedOrder(c.subject_id, c.workflow_id, c.step_ids) for c in created]
    return placed, [row for c in created for row in c.dispatched]


def insert_orders(session: Session, drafts: Sequence[OrderDraft], *, now: datetime) -> list[int]:
    """Write the orders and their lines, nothing else, in the caller's transaction.

    The part of :func:`write_orders` that is the orders themselves: the end-to-end
    benchmark's peer libraries place the same orders with the same statements,
    without orderflow's workflow and step rows.

    Args:
        session: the caller's session, inside its transaction.
        drafts: orders to write (at least one).
        now: placement time (timezone-aware).

    Returns:
        The new orders' ids, in draft order.

    Raises:
        sqlalchemy.exc.IntegrityError: a draft names an unknown customer or part.
    """
    # Core bulk loads on the tables (``Dialect.insert_rows``: COPY on PostgreSQL, one
    # executemany on SQLite): the ORM's bulk insert spent about as long on per-row
    # bookkeeping as the database on the rows.
    dialect = dialect_of(session)
    order_ids = dialect.insert_rows(
        session,
        _ORDERS,
        {
            "customer_id": [draft.customer_id for draft in drafts],
            "total_price": [draft.total_price for draft in drafts],
            "order_date": [draft.order_date for draft in drafts],
            "status": [OrderStatus.PLACED] * len(drafts),
            "source": [draft.source for draft in drafts],
            "source_key": [draft.source_key for draft in drafts],
            "placed_at": [now] * len(drafts),
            "priority": [draft.priority for draft in drafts],
        },
        load=True,
        ids=True,
    )
    lines = [
        (order_id, line)
        for draft, order_id in zip(drafts, order_ids, strict=True)
        for line in draft.lines
    ]
    dialect.insert_rows(
        session,
        _LINES,
        {
            "order_id": [order_id for order_id, _ in lines],
            "line_number": [line.line_number for _, line in lines],
            "part_id": [line.part_id for _, line in lines],
            "quantity": [line.quantity for _, line in lines],
            "extended_price": [line.extended_price for _, line in lines],
            "discount": [line.discount for _, line in lines],
            "ship_mode": [line.ship_mode for _, line in lines],
        },
        load=True,
    )
    return order_ids


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
    result: PlaceResult | None = None,
    reconnect: Reconnect | None = None,
    sleep: Callable[[float], None] = time.sleep,
    tracer: Tracer | None = None,
) -> PlaceResult:
    """Place the next ``count`` orders of a source, batch by batch, and publish their steps.

    Each batch of up to ``batch_size`` orders is one transaction (every order
    with its steps is atomic); with a ``publisher`` its first steps are written
    dispatched and published right after it commits, else written pending for
    the relay sweep.
    A batch whose connection drops is run again (``reconnect``) once the
    database says the failed attempt did not commit; one that did commit is
    kept as placed. The TPC-H stream's cursor moves in the batch's transaction,
    so a retry takes the same orders of the stream.

    Args:
        session_factory: makes the session of each unit of work.
        count: orders to place (>= 0).
        source: ``tpch`` (the next orders of the stream) or ``random``.
        rng: random source for ``random`` orders and the backoff's jitter.
        batch_size: orders per transaction (>= 1).
        publisher: queue adapter; None leaves steps pending for the sweep.
        clock: current time (timezone-aware).
        on_batch: called after each committed (and published) batch, e.g. to
            advance a progress bar.
        policy: attempts and backoff of rows the queue refuses (default
            ``workflows.relay.PublishPolicy()``).
        result: where to record what was placed (default: a new one); the
            caller's object holds every committed batch also when this raises.
        reconnect: retries of a batch whose connection dropped (default
            :class:`Reconnect`).
        sleep: waits the backoff (seconds; injected in tests).
        tracer: records a ``place order`` span per order, the root of the order's
            trace or a child of the caller's current span, whose context every step
            row of the order carries (``orders.app.order_traces``); None records
            nothing, and the orders carry the caller's context, if any.

    Returns:
        ``result``, with the placed orders and the number of steps published.

    Raises:
        UnknownSource: ``source`` is not ``tpch`` or ``random``.
        StreamNotLoaded: the TPC-H stream or the catalog is not loaded.
        PlacementUncertain: a batch's outcome stayed unknown (nothing retried).
        sqlalchemy.exc.DBAPIError: the connection kept dropping past
            ``reconnect.attempts``, or another database error (the failed batch
            did not commit).
        KeyboardInterrupt: as raised; the batch it interrupted is recorded in
            ``result`` if the database says it committed.

    Publishing errors are never raised: they are counted in ``deferred`` and
    described in ``publish_error``; after the queue is found unreachable the
    later batches are not tried (their steps are deferred at once).
    """
    if source not in (TPCH, RANDOM):
        raise UnknownSource(f"unknown order source {source!r}; use 'tpch' or 'random'")
    rng = rng or random.Random()
    result = result if result is not None else PlaceResult()
    reconnect = reconnect or Reconnect()
    store = store_of(session_factory)
    remaining = count
    first_batch = True
    while remaining > 0:
        size = min(batch_size, remaining)
        placed, first = _place_batch(
            session_factory,
            store,
            _Batch(size, source, publisher is not None, tracer),
            rng,
            clock,
            reconnect,
            sleep,
            result,
        )
        result.orders.extend(placed)
        remaining -= size
        if first_batch:
            # a first bulk load into never-analyzed tables (PostgreSQL): give the
            # planner their statistics before the step workers plan on guesses
            first_batch = False
            try:
                dialect_of_factory(session_factory).analyze_never_analyzed(
                    session_factory, _ANALYZED
                )
            except Exception as exc:  # statistics are an optimisation: a later run's
                if not store.dropped(exc):
                    raise
                log.warning("planner statistics left for later: %s", describe(exc))
        # the first steps; those that wait are published when a finished step releases them
        published = 0
        if publisher is not None:
            try:
                published = publish_dispatched(
                    session_factory, publisher, first, clock=clock, policy=policy, tracer=tracer
                )
            except Exception as exc:  # the orders are committed: publishing is deferred
                publisher = None  # later batches are written pending, for the sweep
                result.publish_error = result.publish_error or describe(exc)
            result.deferred += len(first) - published
        else:
            result.deferred += _FIRST_STEPS * len(placed)
        result.published += published
        if on_batch is not None:
            on_batch(placed)
    return result


@dataclass(frozen=True)
class _Batch:
    """One batch to place: ``size`` orders of ``source``, the first steps written
    dispatched when ``dispatch`` (a publisher is at hand), else pending; each order's
    ``place order`` span made by ``tracer`` (None: none)."""

    size: int
    source: str
    dispatch: bool
    tracer: Tracer | None = None


def _place_batch(
    session_factory: SessionFactory,
    store: Store,
    batch: _Batch,
    rng: random.Random,
    clock: Callable[[], datetime],
    reconnect: Reconnect,
    sleep: Callable[[float], None],
    result: PlaceResult,
) -> tuple[list[PlacedOrder], list[DispatchedStep]]:
    """One batch in one transaction, run again while its connection drops and the
    database says the failed attempt did not commit.

    An attempt that failed before its COMMIT was sent did not commit (the server
    rolls back a transaction whose session ends); one that failed during or after
    it is settled by asking the database (:func:`_settle`).
    """
    for run in range(reconnect.attempts):
        attempt = Attempt(placed_at=clock())
        written: tuple[list[PlacedOrder], list[DispatchedStep]] = ([], [])
        committing = False
        spans = OrderSpans([], [])
        try:
            with UnitOfWork(session_factory) as uow:
                store.mark(uow.session, attempt)
                if batch.source == TPCH:
                    drafts = next_tpch_drafts(uow.session, batch.size)
                else:
                    drafts = random_drafts(uow.session, batch.size, rng)
                spans = OrderSpans.start(batch.tracer, len(drafts), batch.source)
                written = write_orders(
                    uow.session,
                    drafts,
                    now=attempt.placed_at,
                    dispatch=batch.dispatch,
                    traces=spans.contexts,
                )
                attempt.order_ids = [p.order_id for p in written[0]]
                spans.placed(attempt.order_ids)
                committing = True
                uow.commit()
            return written
        except KeyboardInterrupt as exc:
            spans.end(exc)
            if committing:  # ask briefly: the user wants out
                brief = Reconnect(attempts=3, base_seconds=0.2, max_seconds=0.5)
                outcome = _settle(store, session_factory, attempt, brief, sleep, rng)
                if outcome is Outcome.COMMITTED:
                    result.orders.extend(written[0])
                elif outcome is not Outcome.ABORTED:
                    result.uncertain = list(attempt.order_ids)
            raise
        except Exception as exc:
            spans.end(exc)  # (a batch found committed after all keeps them saying why)
            outcome = (
                _settle(store, session_factory, attempt, reconnect, sleep, rng)
                if committing
                else Outcome.ABORTED
            )
            if outcome is Outcome.COMMITTED:  # the reply to COMMIT was lost, not the commit
                return written
            if outcome is not Outcome.ABORTED:
                result.uncertain = list(attempt.order_ids)
                raise PlacementUncertain(attempt.order_ids, describe(exc)) from exc
            if not store.dropped(exc) or run + 1 == reconnect.attempts:
                raise
            result.reconnects += 1
            pause = reconnect.delay(run, rng)
            log.warning(
                "database connection lost while placing %d order(s), nothing of them "
                "committed: trying again in %.1f s (%s)",
                batch.size,
                pause,
                describe(exc),
            )
            sleep(pause)
        finally:
            spans.end()  # after the commit (nothing if ended above)
    raise AssertionError("unreachable: the last run returns or raises")


def _settle(
    store: Store,
    session_factory: SessionFactory,
    attempt: Attempt,
    reconnect: Reconnect,
    sleep: Callable[[float], None],
    rng: random.Random,
) -> Outcome:
    """The store's answer about ``attempt``: asked up to ``reconnect.attempts`` times
    while the database is unreachable or the transaction still in progress."""
    outcome = Outcome.UNKNOWN
    for run in range(reconnect.attempts):
        try:
            outcome = store.outcome(session_factory, attempt)
        except Exception as exc:
            if not store.dropped(exc):
                return Outcome.UNKNOWN
            outcome = Outcome.UNKNOWN
        else:
            if outcome is not Outcome.IN_PROGRESS:
                return outcome
        if run + 1 < reconnect.attempts:
            sleep(reconnect.delay(run, rng))
    return outcome
