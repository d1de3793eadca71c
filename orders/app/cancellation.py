"""``orders cancel`` and the dashboard's cancel action: one unit of work, then a publish.

The cancellation (order status, cancellation notice, skipped steps and the
compensating step rows) commits in one transaction, retried when it loses a
race; the compensating steps are then published at once, and the relay sweep
publishes them if that publish fails (they are ordinary outbox rows).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from orders.domain.cancellation import CancelResult, cancel_order
from workflows.columns import utcnow
from workflows.conflicts import retry_on_conflict
from workflows.messages import Publisher
from workflows.relay import PublishPolicy, publish_steps
from workflows.uow import SessionFactory, UnitOfWork

log = logging.getLogger("orders.cancel")


def cancel(
    session_factory: SessionFactory,
    publisher: Publisher,
    order_id: int,
    *,
    clock: Callable[[], datetime] = utcnow,
    policy: PublishPolicy | None = None,
) -> CancelResult:
    """Cancel an order and publish its compensating steps.

    Args:
        session_factory: makes the session of the unit of work.
        publisher: the queue adapter the compensating steps go through.
        order_id: the order to cancel.
        clock: current time (timezone-aware).
        policy: publish attempts and backoff of refused rows.

    Returns:
        The :class:`~orders.domain.cancellation.CancelResult` (``already`` when the
        order was cancelled before; repeating a cancellation is harmless).

    Raises:
        OrderNotFound: no such order; nothing written.
        OrderNotCancellable: the order completed or ended out of stock; nothing written.
        ConcurrencyConflict: the database stayed busy (nothing written; try again).
    """

    def once() -> CancelResult:
        with UnitOfWork(session_factory) as uow:
            result = cancel_order(uow.session, order_id, clock())
            uow.commit()
            return result

    result = retry_on_conflict(once)
    if result.added:
        try:
            publish_steps(
                session_factory, publisher, list(result.added), clock=clock, policy=policy
            )
        except Exception as exc:  # the rows stay pending: the relay sweep publishes them
            log.warning("compensations of order %d left to the sweep: %s", order_id, exc)
    return result
