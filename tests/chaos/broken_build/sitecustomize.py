"""Deliberately broken builds, for ``test_broken_build_is_caught.py`` only.

Python imports a module named ``sitecustomize`` at startup from its path; that
test puts this folder on ``PYTHONPATH`` of the chaos run, so the run and every
worker process it starts load it. With ``ORDERFLOW_TEST_BROKEN_BUILD=stock_twice``
it removes two of the stock step's three guards against applying a
redelivered effect twice (the test drops the third, the unique index on
``stock_deductions``):

1. the completion tracker's "step already done" check: a done stock step
   reads as still open, so a redelivery runs the effect again;
2. the effect's own check for the order's existing deductions.

With ``ORDERFLOW_TEST_BROKEN_BUILD=return_twice`` the compensation of the
stock step is sabotaged instead: ``return_stock`` puts every part back twice
(its ``stock_returns`` rows still say the right quantity), as a compensation
that undoes more than was done would.

Nothing outside that test imports this file, and it does nothing without the
variable.
"""

from __future__ import annotations

import os

if os.environ.get("ORDERFLOW_TEST_BROKEN_BUILD") == "stock_twice":
    from sqlalchemy import func, select

    from orders.domain import effects
    from orders.domain.models import Inventory, OrderLine, OrderStatus, StockDeduction
    from workflows import tracker
    from workflows.models import StepStatus

    _load_step = tracker.load_step

    def _forgetful_load_step(session, workflow_id, step):  # type: ignore[no-untyped-def]
        workflow, row = _load_step(session, workflow_id, step)
        if step == "stock" and row.status == StepStatus.DONE:
            row.status = StepStatus.DISPATCHED
        return workflow, row

    def _deduct_every_time(session, order, now):  # type: ignore[no-untyped-def]
        needed = session.execute(
            select(OrderLine.part_id, func.sum(OrderLine.quantity))
            .where(OrderLine.order_id == order.id)
            .group_by(OrderLine.part_id)
            .order_by(OrderLine.part_id)
        ).all()
        stock = {part: session.get(Inventory, part) for part, _ in needed}
        if any(stock[p] is None or stock[p].on_hand < q for p, q in needed):
            order.status = OrderStatus.OUT_OF_STOCK
            return effects.OUT_OF_STOCK
        for part, quantity in needed:
            stock[part].on_hand -= quantity
            session.add(
                StockDeduction(order_id=order.id, part_id=part, quantity=quantity, created_at=now)
            )
        return effects.DEDUCTED

    tracker.load_step = _forgetful_load_step
    effects.EFFECTS["stock"] = _deduct_every_time

if os.environ.get("ORDERFLOW_TEST_BROKEN_BUILD") == "return_twice":
    from orders.domain import compensations
    from orders.domain.models import Inventory, StockDeduction

    _return_stock = compensations.return_stock

    def _return_twice(session, order, now):  # type: ignore[no-untyped-def]
        outcome = _return_stock(session, order, now)
        if outcome == compensations.RETURNED:
            for deduction in session.query(StockDeduction).filter_by(order_id=order.id):
                session.get(Inventory, deduction.part_id).on_hand += deduction.quantity
        return outcome

    compensations.COMPENSATING_EFFECTS["return_stock"] = _return_twice
