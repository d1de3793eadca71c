"""``orders cancel`` and the dashboard's cancel action: one unit of work, then a publish.

The cancellation (order status, cancellation notice, skipped steps and the
compensating step rows, written ``dispatched``) commits in one transaction,
retried when it loses a race; it needs the database only. The compensating
steps are then published at once when the queue can be reached
(``workflows.relay.publish_dispatched``, docs/adr/0028); otherwise they go
back to ``pending`` and the relay sweep of a running worker publishes them.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from opentelemetry.trace import Tracer
from sqlalchemy import select
from sqlalchemy.orm import Session

from orders.domain.cancellation import CancelResult, cancel_order
from orders.domain.errors import OrderNotCancellable
from orders.domain.models import Order, OrderStatus
from orders.domain.steps import ORDER_GRAPH, WORKFLOW_KIND
from workflows.columns import utcnow
from workflows.conflicts import retry_on_conflict
from workflows.errors import PublisherUnavailable
from workflows.isolation import describe
from workflows.messages import Publisher, StepMessage
from workflows.models import StepStatus, Workflow, WorkflowStep
from workflows.relay import PublishPolicy, publish_dispatched
from workflows.uow import SessionFactory, UnitOfWork

log = logging.getLogger("orders.cancel")


@dataclass(frozen=True)
class Cancellation:
    """A committed cancellation and how its compensating steps went out.

    Attributes:
        result: what the database transaction did (``CancelResult``).
        published: compensating steps published right after the commit.
        deferred: compensating steps left pending for the relay sweep (the queue
            could not be reached or refused them).
        publish_error: why publishing was deferred, one line; None if it was not.
    """

    result: CancelResult
    published: int = 0
    deferred: int = 0
    publish_error: str | None = None


def cancel_then_publish(
    session_factory: SessionFactory,
    publisher: Callable[[], Publisher],
    order_id: int,
    *,
    clock: Callable[[], datetime] = utcnow,
    policy: PublishPolicy | None = None,
    record: Callable[[Session, CancelResult], None] | None = None,
    tracer: Tracer | None = None,
) -> Cancellation:
    """Cancel an order in the database, then publish its compensating steps if the queue
    can be reached.

    The queue is asked for only after the commit: a cancellation never waits for, or
    fails because of, Redis. The compensating rows are written dispatched and
    published through the relay (``workflows.relay.publish_dispatched``); rows it
    cannot publish (or all of them, when ``publisher`` raises) go back to pending
    and the relay sweep of a running worker publishes them.

    Args:
        session_factory: makes the session of the unit of work.
        publisher: called after the commit for the queue adapter; whatever it raises
            (Redis unreachable, the namespace bound to another database, ...) defers
            publishing.
        order_id: the order to cancel.
        clock: current time (timezone-aware).
        policy: publish attempts and backoff of refused rows.
        record: called in the cancellation's transaction, before its commit, with the
            session and the result (the audit row: ``orders.app.audit.record``).
        tracer: records the publish pass (``workflows.relay.publish_dispatched``); the
            compensating rows carry their order's trace context either way, so their
            jobs belong to the order's trace (docs/adr/0036).

    Returns:
        The :class:`Cancellation` (``result.already`` when the order was cancelled
        before; repeating a cancellation is harmless).

    Raises:
        OrderNotFound: no such order; nothing written.
        OrderNotCancellable: the order completed or ended out of stock; nothing written.
        ConcurrencyConflict: the database stayed busy (nothing written; try again).
    """

    def once() -> CancelResult:
        with UnitOfWork(session_factory) as uow:
            result = cancel_order(uow.session, order_id, clock(), dispatch=True)
            if record is not None:
                record(uow.session, result)
            uow.commit()
            return result

    result = retry_on_conflict(once)
    rows = result.dispatched
    if not rows:
        return Cancellation(result)
    queue: Publisher
    try:
        queue = publisher()
    except Exception as exc:  # the rows go back to pending through the one publish path
        queue = _Unreachable(exc)
    try:
        published = publish_dispatched(
            session_factory, queue, rows, clock=clock, policy=policy, tracer=tracer
        )
    except Exception as exc:  # back to pending (or still dispatched): the sweep's
        why = queue.cause if isinstance(queue, _Unreachable) else exc
        log.warning("compensations of order %d left to the sweep: %s", order_id, why)
        return Cancellation(result, 0, len(rows), describe(why))
    return Cancellation(result, published, len(rows) - published)


class _Unreachable:
    """A publisher standing for a queue that could not even be asked for: every
    publish raises ``PublisherUnavailable`` (the relay puts the rows back to pending)."""

    def __init__(self, cause: Exception) -> None:
        self.cause = cause

    def publish(self, messages: Sequence[StepMessage]) -> None:
        raise PublisherUnavailable(describe(self.cause)) from self.cause


def cancel(
    session_factory: SessionFactory,
    publisher: Publisher,
    order_id: int,
    *,
    clock: Callable[[], datetime] = utcnow,
    policy: PublishPolicy | None = None,
    tracer: Tracer | None = None,
) -> CancelResult:
    """Cancel an order and publish its compensating steps (:func:`cancel_then_publish`
    with a publisher in hand).

    Returns:
        The :class:`~orders.domain.cancellation.CancelResult`.

    Raises:
        OrderNotFound / OrderNotCancellable / ConcurrencyConflict: as
            :func:`cancel_then_publish`; nothing written.
    """
    return cancel_then_publish(
        session_factory, lambda: publisher, order_id, clock=clock, policy=policy, tracer=tracer
    ).result


def cancel_in_flight(
    session_factory: SessionFactory,
    publisher: Publisher,
    first_order_id: int,
    rng: random.Random,
    *,
    newest: int = 50,
    policy: PublishPolicy | None = None,
    tracer: Tracer | None = None,
) -> int | None:
    """Cancel one order still in flight, as a customer changing their mind would.

    Picks at random among the ``newest`` orders from ``first_order_id`` on that
    are still placed and already have a step with a compensation done (so the
    cancellation has something to undo), else among the newest placed ones (the
    demo and chaos runs call it while orders flow). An order that completes
    between the pick and the cancellation is too late: nothing is written and
    None is returned, like when none is in flight.

    Args:
        session_factory: makes the sessions.
        publisher: the queue adapter the compensating steps go through.
        first_order_id: only orders with this id or above (one run's orders).
        rng: chooses the order (inject a seeded one for repeatable runs).
        newest: how many of the newest placed orders to choose from.
        policy: publish attempts and backoff of refused rows.
        tracer: as for :func:`cancel_then_publish`.

    Returns:
        The cancelled order's id, or None.

    Raises:
        ConcurrencyConflict / sqlalchemy errors: the database stayed busy or failed.
    """
    with UnitOfWork(session_factory) as uow:
        candidates = _in_flight(uow.session, first_order_id, newest, started=True) or _in_flight(
            uow.session, first_order_id, newest, started=False
        )
    if not candidates:
        return None
    order_id = rng.choice(candidates)
    try:
        result = cancel(session_factory, publisher, order_id, policy=policy, tracer=tracer)
    except OrderNotCancellable:
        return None
    return None if result.already else order_id


def _in_flight(session: Session, first_order_id: int, newest: int, *, started: bool) -> list[int]:
    """Ids of the newest placed orders (with a compensable step done when ``started``)."""
    query = select(Order.id).where(Order.id >= first_order_id, Order.status == OrderStatus.PLACED)
    if started:
        query = query.where(
            select(WorkflowStep.id)
            .join(Workflow, Workflow.id == WorkflowStep.workflow_id)
            .where(
                Workflow.kind == WORKFLOW_KIND,
                Workflow.subject_id == Order.id,
                WorkflowStep.step.in_(sorted(ORDER_GRAPH.compensations)),
                WorkflowStep.status == StepStatus.DONE,
                WorkflowStep.outcome.not_in(sorted(ORDER_GRAPH.halting)),
            )
            .exists()
        )
    return list(session.scalars(query.order_by(Order.id.desc()).limit(newest)))
