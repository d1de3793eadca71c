"""TPC-H input: generated with tpchgen-cli, loaded once, consumed as a stream."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import func, select

from orders.app.invariants import check_invariants, check_stock_conservation
from orders.app.placement import place
from orders.domain.handlers import StepRequest, handle_step, handle_steps
from orders.domain.models import Inventory, Order, OrderLine, OrderStatus, StreamCursor
from orders.domain.steps import STEPS, STOCK
from orders.sources.drafts import TPCH
from orders.sources.scarcity import Scarcity, make_scarce
from orders.sources.tpch import load_tpch
from workflows.tracker import StepRun
from workflows.uow import UnitOfWork


@pytest.fixture
def loaded(session_factory, tmp_path):
    started = time.perf_counter()
    result = load_tpch(session_factory, tmp_path / "data", 0.01)
    return result, time.perf_counter() - started


def test_scale_001_loads_15000_orders_and_60175_lines_then_reloading_is_a_noop(
    session_factory, tmp_path, loaded
):
    first, seconds = loaded
    assert first.loaded
    assert (first.customers, first.products, first.orders, first.lines) == (
        1500,
        2000,
        15000,
        60175,
    )
    assert seconds < 20, f"loading TPC-H 0.01 took {seconds:.1f} s"
    with session_factory() as session:
        stock = session.execute(
            select(func.count(), func.sum(Inventory.on_hand), func.min(Inventory.on_hand))
        ).one()
    assert stock[0] == 2000
    assert stock[2] > 0
    second = load_tpch(session_factory, tmp_path / "elsewhere", 0.01)
    assert not second.loaded
    assert (second.orders, second.lines) == (15000, 60175)
    assert not (tmp_path / "elsewhere").exists()  # not even generated again


def test_place_takes_the_next_orders_of_the_stream(session_factory, loaded):
    first = place(session_factory, 3, source=TPCH)
    second = place(session_factory, 2, source=TPCH)
    with session_factory() as session:
        keys = session.scalars(select(Order.source_key).order_by(Order.id)).all()
        cursor = session.get(StreamCursor, TPCH)
        lines = session.scalar(
            select(func.count())
            .select_from(OrderLine)
            .where(OrderLine.order_id == first.order_ids[0])
        )
        first_order = session.get(Order, first.order_ids[0])
    assert keys == [1, 2, 3, 4, 5]  # the first TPC-H order keys
    assert cursor.position == 5
    assert lines == 6  # TPC-H order 1 has six lines
    assert str(first_order.total_price) == "172799.49"
    assert len(second.orders) == 2


def test_tpch_orders_flow_through_every_step_with_invariants_holding(session_factory, loaded):
    result = place(session_factory, 20, source=TPCH)
    for order in result.orders:
        for step in STEPS:
            handle_step(session_factory, StepRequest(order.workflow_id, order.order_id, step))
    with session_factory() as session:
        assert check_invariants(session) == []
        assert set(session.scalars(select(Order.status))) == {"completed"}


def test_scarcity_makes_about_the_share_of_the_coming_orders_run_out_of_stock(
    session_factory, loaded
):
    with UnitOfWork(session_factory) as uow:
        scarce = make_scarce(uow.session, 400, 0.05)
        uow.commit()
    assert scarce.coming == 400
    assert 20 <= scarce.orders_short <= 30 and scarce.parts
    with session_factory() as session:
        assert check_stock_conservation(session) == []  # initial lowered with on hand
    placed = place(session_factory, 400, source=TPCH)
    runs = [StepRun(p.workflow_id, STOCK, p.order_id) for p in placed.orders]
    for start in range(0, len(runs), 100):
        handle_steps(session_factory, runs[start : start + 100])
    with session_factory() as session:
        short = session.scalar(select(func.count()).where(Order.status == OrderStatus.OUT_OF_STOCK))
        assert check_stock_conservation(session) == []
    assert short == scarce.orders_short


def test_scarcity_of_zero_changes_nothing(session_factory, loaded):
    with session_factory() as session:
        before = session.scalar(select(func.sum(Inventory.on_hand)))
        assert make_scarce(session, 400, 0.0) == Scarcity((), 0, 0)
        session.commit()
        assert session.scalar(select(func.sum(Inventory.on_hand))) == before
