"""Publish step rows a test wrote ``pending``, the way every writer publishes (ADR 0028).

Importable as ``publishing`` because ``tests/`` is on pytest's ``pythonpath``.
"""

from __future__ import annotations

from collections.abc import Sequence

from workflows.columns import utcnow
from workflows.messages import Publisher
from workflows.relay import PublishPolicy, dispatch_pending, publish_dispatched
from workflows.uow import SessionFactory, UnitOfWork


def publish_now(
    session_factory: SessionFactory,
    publisher: Publisher,
    step_ids: Sequence[int],
    *,
    policy: PublishPolicy | None = None,
) -> int:
    """Mark the pending rows among ``step_ids`` dispatched in one commit, then publish them.

    Rows that are not pending (``waiting``, already dispatched, held back by a
    refusal's backoff) are left alone.

    Args:
        session_factory: makes the sessions.
        publisher: the queue adapter.
        step_ids: the rows (``PlacedOrder.step_ids``, ``CancelResult.added``, ...).
        policy: attempts and backoff of refused rows.

    Returns:
        Steps published.

    Raises:
        PublisherUnavailable: the queue cannot be reached (the rows went back to pending).
    """
    with UnitOfWork(session_factory) as uow:
        rows = dispatch_pending(uow.session, utcnow(), ids=list(step_ids))
        uow.commit()
    return publish_dispatched(session_factory, publisher, rows, policy=policy)
