"""Deliberately broken builds, for ``test_broken_build_is_caught.py`` only.

Python imports a module named ``sitecustomize`` at startup from its path; that
test puts this folder on ``PYTHONPATH`` of the chaos run, so the run and every
worker process it starts load it. With ``ORDERFLOW_TEST_BROKEN_BUILD=stock_twice``
it removes three of the stock step's four guards against applying a
redelivered effect twice (the test drops the fourth, the unique index on
``stock_deductions``):

1. the completion tracker's "step already done" check (``tracker.step_rows``,
   on the one delivery path, whatever the batch size): a done stock step reads
   as still open, so a redelivery runs the effect again;
2. the effect's own check for the order's existing deductions;
3. on PostgreSQL, the marking's check that a claimed step row is still open
   (``tracker._mark_done``): a plain row-by-row marking without it is used instead.

With ``ORDERFLOW_TEST_BROKEN_BUILD=return_twice`` the compensation of the
stock step is sabotaged instead: ``return_stock`` puts every part back twice
(its ``stock_returns`` rows still say the right quantity), as a compensation
that undoes more than was done would.

With ``ORDERFLOW_TEST_BROKEN_BUILD=unfenced`` the database is no longer fenced by
the lease (ADR 0023): the attempt guard lets every block run (also that of an
attempt its worker timed out), the tracker's read-time token check passes every
run, and recording a failure no longer advances the step row's token. A run that
hung past its time limit then wakes in its abandoned thread and commits.

Nothing outside that test imports this file, and it does nothing without the
variable.
"""

from __future__ import annotations

import os

if os.environ.get("ORDERFLOW_TEST_BROKEN_BUILD") == "stock_twice":
    from collections import defaultdict

    from sqlalchemy import bindparam, func, insert, select, update

    from orders.domain import effects
    from orders.domain.models import Order, OrderLine, OrderStatus, StockDeduction
    from workflows import tracker
    from workflows.models import StepStatus, WorkflowStep

    _step_rows = tracker.step_rows

    def _forgetful_step_rows(session, workflow_ids, step):  # type: ignore[no-untyped-def]
        rows = _step_rows(session, workflow_ids, step)
        if step != "stock":
            return rows
        return {
            wf: row._replace(status=StepStatus.DISPATCHED) if row.status == StepStatus.DONE else row
            for wf, row in rows.items()
        }

    def _deduct_every_time(session, deliveries, now):  # type: ignore[no-untyped-def]
        needed = defaultdict(list)
        for oid, part, qty in session.execute(
            select(OrderLine.order_id, OrderLine.part_id, func.sum(OrderLine.quantity))
            .where(OrderLine.order_id.in_([d.order_id for d in deliveries]))
            .group_by(OrderLine.order_id, OrderLine.part_id)
        ):
            needed[oid].append((part, int(qty)))
        stock = effects.read_inventory(session, {p for ls in needed.values() for p, _ in ls})
        before = {part: values[0] for part, values in stock.items()}
        out, rows, short = {}, [], []
        for d in deliveries:
            lines = needed[d.order_id]
            if any(p not in stock or stock[p][0] < q for p, q in lines):
                out[d.step_row_id] = effects.OUT_OF_STOCK
                short.append(d.order_id)
                continue
            for part, qty in lines:
                stock[part][0] -= qty
                rows.append(
                    {"order_id": d.order_id, "part_id": part, "quantity": qty, "created_at": now}
                )
            out[d.step_row_id] = effects.DEDUCTED
        effects.write_inventory(session, stock, before)
        if rows:
            session.execute(insert(StockDeduction), rows)
        if short:
            session.execute(
                update(Order).where(Order.id.in_(short)).values(status=OrderStatus.OUT_OF_STOCK)
            )
        return out

    _mark_done = tracker._mark_done

    def _unchecked_mark_done(session, dialect, claims, outcomes, started, now):  # type: ignore[no-untyped-def]
        if not dialect.marking_rechecks:  # SQLite's marking has no such check
            return _mark_done(session, dialect, claims, outcomes, started, now)
        steps = WorkflowStep.__table__  # Core: an executemany, not the ORM's bulk update
        session.execute(
            update(steps)
            .where(steps.c.id == bindparam("row_id"))
            .values(
                status=StepStatus.DONE,
                outcome=bindparam("outcome"),
                started_at=bindparam("started"),
                finished_at=bindparam("now"),
            ),
            [
                {
                    "row_id": c.step_row_id,
                    "outcome": str(outcomes[c.step_row_id])[:50],
                    "started": started,
                    "now": now,
                }
                for c in claims
            ],
        )
        return None

    tracker.step_rows = _forgetful_step_rows
    tracker._mark_done = _unchecked_mark_done
    effects.EFFECTS["stock"] = _deduct_every_time

if os.environ.get("ORDERFLOW_TEST_BROKEN_BUILD") == "return_twice":
    from sqlalchemy import select, update

    from orders.domain import compensations
    from orders.domain.models import Inventory, StockDeduction

    _return_stock = compensations.return_stock

    def _return_twice(session, deliveries, now):  # type: ignore[no-untyped-def]
        out = _return_stock(session, deliveries, now)
        again = [d.order_id for d in deliveries if out[d.step_row_id] == compensations.RETURNED]
        for part, qty in session.execute(
            select(StockDeduction.part_id, StockDeduction.quantity).where(
                StockDeduction.order_id.in_(again)
            )
        ).all():
            session.execute(
                update(Inventory)
                .where(Inventory.part_id == part)
                .values(on_hand=Inventory.on_hand + qty, version=Inventory.version + 1)
            )
        return out

    compensations.COMPENSATING_EFFECTS["return_stock"] = _return_twice


if os.environ.get("ORDERFLOW_TEST_BROKEN_BUILD") == "unfenced":
    from reliable_queue import attempts
    from workflows import tracker as _tracker

    def _always_enter(self):  # type: ignore[no-untyped-def]
        self._lock.acquire()
        if self._depth == 0:
            self._held_since = self._policy.clock()
        self._depth += 1
        return self

    attempts.AttemptGuard.__enter__ = _always_enter  # type: ignore[method-assign]
    _tracker._fenced_out = lambda run, row: None
    _tracker._advanced_token = lambda token: {}
