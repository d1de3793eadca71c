"""Bulk actions on what a search filter finds: cancel the orders, redrive the dead jobs.

Each is one operator action with one audit row. A dry run lists what it would do
(and is audited as a dry run). A cancellation of many orders is one transaction
with its audit row (an order that completed meanwhile is left out, in a savepoint),
then its compensating steps are published; a redrive acts on the step jobs the
database says are dead, looked up in their DLQ, and its row is written right after.
At most ``most`` orders or jobs per action. An action (not a dry run) with an empty
filter, which matches every order, must say so (``everything``): a forgotten filter
must not cancel every order in flight. Reasoning:
docs/adr/0041-search-answers-from-the-database.md.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from orders.app.audit import Action, Actor, record, record_now
from orders.domain.cancellation import cancel_order
from orders.domain.errors import OrderNotCancellable
from orders.domain.search import BLOCKED, JobHit, SearchFilter, search_jobs, search_orders
from reliable_queue import Queue
from reliable_queue.inspection import idempotency_jobs
from workflows.columns import utcnow
from workflows.conflicts import retry_on_conflict
from workflows.messages import DispatchedStep, Publisher
from workflows.models import StepStatus, idempotency_key
from workflows.relay import PublishPolicy, publish_dispatched
from workflows.uow import SessionFactory, UnitOfWork

MOST = 500
"""Most orders or jobs one bulk action takes (the rest: run it again)."""


class UnfilteredAction(ValueError):
    """A bulk action (not a dry run) was asked with an empty filter and without
    ``everything``: it would act on every order or dead job. Nothing was done."""


def check_filtered(
    action: str,
    f: SearchFilter,
    *,
    dry_run: bool,
    everything: bool,
    only: Collection[object] | None = None,
) -> None:
    """Refuse an action on everything that was not asked for as such (the bulk actions
    call it first; a caller may call it before it opens anything).

    Args:
        action: ``Action.CANCEL`` or ``Action.REDRIVE``.
        f: the filter.
        dry_run: only listing (always allowed).
        everything: the caller asked for every order / dead job.
        only: the ids the action is limited to (a confirmed dry run's), or None.

    Raises:
        UnfilteredAction: ``f`` sets no field, ``dry_run`` is off and ``everything``
            is not set.
    """
    if dry_run or everything or f.given() or only is not None:
        return
    what = "order in flight" if action == Action.CANCEL else "dead step job"
    raise UnfilteredAction(
        f"an empty filter matches every {what}: give a filter, or ask for all of them "
        '(--all in the CLI, "all": true in the API)'
    )


@dataclass
class BulkResult:
    """What a bulk action did (or would do, ``dry_run``).

    Attributes:
        ids: the order ids (cancel) or job ids (redrive) acted on.
        skipped: ids found but left (an order that can no longer be cancelled; a job
            whose dead letter is gone or unrunnable).
        more: the filter matched more than ``most``; run the action again.
        deferred: compensating steps left to the sweep (cancel).
    """

    action: str
    dry_run: bool
    ids: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    more: bool = False
    deferred: int = 0

    def as_dict(self) -> dict[str, object]:
        """JSON-ready."""
        return {
            "action": self.action,
            "dry_run": self.dry_run,
            "count": len(self.ids),
            "ids": self.ids,
            "skipped": self.skipped,
            "more": self.more,
            "deferred_steps": self.deferred,
        }


def _cancellable(f: SearchFilter) -> SearchFilter | None:
    """``f`` narrowed to orders that may be cancelled (placed or blocked), or None when
    its status names none."""
    if f.status in (None, "placed", BLOCKED):
        return f
    return None


def cancel_matching(
    session_factory: SessionFactory,
    publisher: Callable[[], Publisher],
    f: SearchFilter,
    *,
    actor: Actor,
    dry_run: bool,
    everything: bool = False,
    only: Collection[int] | None = None,
    most: int = MOST,
    clock: Callable[[], datetime] = utcnow,
    policy: PublishPolicy | None = None,
) -> BulkResult:
    """Cancel every placed (or blocked) order ``f`` finds, up to ``most``.

    ``everything`` must be set to act (not a dry run) with an empty filter. ``only``
    limits the action to those order ids (the ones a dry run listed, confirmed): an
    order placed since that matches the filter is left alone.

    Raises:
        UnfilteredAction: an empty filter without ``everything`` (nothing written).
        ConcurrencyConflict: the database stayed busy (nothing written).
        sqlalchemy.exc.SQLAlchemyError: the database failed (nothing written).
    """
    check_filtered(Action.CANCEL, f, dry_run=dry_run, everything=everything, only=only)
    out = BulkResult(Action.CANCEL, dry_run)
    narrowed = _cancellable(f)
    listed = None if only is None else set(only)
    candidates: list[int] = []
    if narrowed is not None and listed != set():
        with UnitOfWork(session_factory) as uow:
            cursor = None
            while len(candidates) <= most:  # bounded: pages of the matching orders
                page = search_orders(uow.session, narrowed, limit=200, cursor=cursor)
                candidates += [
                    h.order_id
                    for h in page.items
                    if h.status in ("placed", BLOCKED) and (listed is None or h.order_id in listed)
                ]
                cursor = page.next_cursor
                if cursor is None or (listed is not None and len(candidates) == len(listed)):
                    break
    out.more = len(candidates) > most
    candidates = candidates[:most]
    target = {"filter": f.given(), "order_ids": candidates}
    if dry_run:
        out.ids = [str(i) for i in candidates]
        record_now(
            session_factory,
            actor,
            Action.CANCEL,
            target,
            count=len(candidates),
            dry_run=True,
            clock=clock,
        )
        return out

    def once() -> tuple[list[int], list[int], list[DispatchedStep]]:
        done: list[int] = []
        left: list[int] = []
        rows: list[DispatchedStep] = []
        with UnitOfWork(session_factory) as uow:
            now = clock()
            for order_id in candidates:
                try:
                    with uow.session.begin_nested():
                        result = cancel_order(uow.session, order_id, now, dispatch=True)
                except OrderNotCancellable:
                    left.append(order_id)
                    continue
                if result.already:
                    left.append(order_id)
                else:
                    done.append(order_id)
                    rows.extend(result.dispatched)
            record(
                uow.session,
                actor,
                Action.CANCEL,
                {**target, "order_ids": done},
                count=len(done),
                clock=clock,
            )
            uow.commit()
        return done, left, rows

    done, left, rows = retry_on_conflict(once)
    out.ids = [str(i) for i in done]
    out.skipped = [str(i) for i in left]
    if rows:
        try:
            published = publish_dispatched(
                session_factory, publisher(), rows, clock=clock, policy=policy
            )
        except Exception:  # committed: the sweep publishes them
            published = 0
        out.deferred = len(rows) - published
    return out


def dead_jobs(
    session_factory: SessionFactory, queues: Mapping[str, Queue], f: SearchFilter, most: int
) -> tuple[dict[str, list[str]], bool]:
    """Step name -> job ids of the dead step jobs ``f`` finds (at most ``most``), and
    whether there were more.

    A step row that recorded no job id is looked up through its idempotency key.

    Raises:
        QueueConnectionError: Redis unreachable.
    """
    if f.step_state not in (None, StepStatus.DEAD):
        return {}, False
    dead = f.model_copy(update={"step_state": StepStatus.DEAD})
    hits: list[JobHit] = []
    with UnitOfWork(session_factory) as uow:
        cursor = None
        while len(hits) <= most:
            page = search_jobs(uow.session, dead, limit=200, cursor=cursor)
            hits += page.items
            cursor = page.next_cursor
            if cursor is None:
                break
    more = len(hits) > most
    out: dict[str, list[str]] = {}
    unknown: dict[str, list[JobHit]] = {}
    for hit in hits[:most]:
        if hit.step not in queues:
            continue
        if hit.job_id:
            out.setdefault(hit.step, []).append(hit.job_id)
        else:
            unknown.setdefault(hit.step, []).append(hit)
    for step, missing in unknown.items():
        keys = [idempotency_key(h.workflow_id, h.step) for h in missing]
        for found in idempotency_jobs(queues[step], keys):
            if found.pending:
                out.setdefault(step, []).append(found.pending)
    return out, more


def redrive_matching(
    session_factory: SessionFactory,
    queues: Mapping[str, Queue],
    f: SearchFilter,
    *,
    actor: Actor,
    dry_run: bool,
    everything: bool = False,
    only: Collection[str] | None = None,
    most: int = MOST,
    clock: Callable[[], datetime] = utcnow,
) -> BulkResult:
    """Redrive the dead step jobs ``f`` finds, up to ``most``; the audit row is written
    right after the queue acted.

    ``everything`` must be set to act (not a dry run) with an empty filter. ``only``
    limits the action to those job ids (the ones a dry run listed, confirmed).

    Raises:
        UnfilteredAction: an empty filter without ``everything`` (nothing done).
        QueueConnectionError: Redis unreachable (nothing redriven, nothing recorded).
        QueueDataError: a queue key holds another type (that queue's jobs are left;
            the audit row says so).
    """
    check_filtered(Action.REDRIVE, f, dry_run=dry_run, everything=everything, only=only)
    out = BulkResult(Action.REDRIVE, dry_run)
    per_step, out.more = dead_jobs(session_factory, queues, f, most)
    if only is not None:
        listed = set(only)
        per_step = {s: [i for i in ids if i in listed] for s, ids in per_step.items()}
        per_step = {s: ids for s, ids in per_step.items() if ids}
    failed: list[str] = []
    for step, ids in per_step.items():
        try:
            report = queues[step].dead_letters.redrive(ids=ids, dry_run=dry_run)
        except Exception as exc:  # recorded, then raised
            failed.append(f"{step}: {type(exc).__name__}")
            record_now(
                session_factory,
                actor,
                Action.REDRIVE,
                {"filter": f.given(), "job_ids": out.ids},
                count=len(out.ids),
                dry_run=dry_run,
                result=f"failed: {'; '.join(failed)}",
                clock=clock,
            )
            raise
        out.ids += report.redriven
        out.skipped += [*report.skipped, *report.unrunnable]
    record_now(
        session_factory,
        actor,
        Action.REDRIVE,
        {"filter": f.given(), "job_ids": out.ids},
        count=len(out.ids),
        dry_run=dry_run,
        clock=clock,
    )
    return out
