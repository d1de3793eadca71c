"""The step effects' set-based statements: a batch's inventory rows written in one
statement (PostgreSQL: ``UPDATE ... FROM unnest``) stay under their version check,
and a batch's rows inserted in one statement stay all or nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from sqlalchemy import event, select, update
from sqlalchemy.exc import DBAPIError, IntegrityError, StatementError
from sqlalchemy.orm.exc import StaleDataError

from orders.app.invariants import check_stock_conservation
from orders.app.placement import PlacedOrder, place_orders
from orders.domain import effects
from orders.domain.effects import CONFIRMATION, read_inventory, write_inventory
from orders.domain.handlers import handle_steps
from orders.domain.models import Inventory, Notification, Shipment, StockDeduction
from orders.domain.steps import STOCK
from workflows.sql import dialect_of
from workflows.tracker import StepResult, StepRun
from workflows.uow import UnitOfWork


def insert_rows(session, model, columns, **constants) -> list[int]:
    """The effects' batch insert: one statement, the rows bound as one parameter."""
    return dialect_of(session).insert_rows(session, model.__table__, columns, constants=constants)


NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def inventory(session_factory, parts) -> dict[int, tuple[int, int]]:
    with session_factory() as session:
        rows = session.execute(
            select(Inventory.part_id, Inventory.on_hand, Inventory.version).where(
                Inventory.part_id.in_(parts)
            )
        )
        return {part: (on_hand, version) for part, on_hand, version in rows}


def test_a_moved_version_fails_the_whole_inventory_write(session_factory, catalog):
    """One stale row among several: the write raises the conflict, and after the
    rollback no row changed, not even those whose version still matched."""
    with session_factory() as session:
        stale = read_inventory(session, [10, 11, 12])
        session.rollback()
    with session_factory() as session:  # a concurrent writer commits first
        session.execute(
            update(Inventory)
            .where(Inventory.part_id == 11)
            .values(on_hand=Inventory.on_hand - 1, version=Inventory.version + 1)
        )
        session.commit()
    after_race = inventory(session_factory, [10, 11, 12])
    before = {part: values[0] for part, values in stale.items()}
    for values in stale.values():
        values[0] -= 5
    with session_factory() as session:
        with pytest.raises(StaleDataError, match=r"\(2/3\)"):
            write_inventory(session, stale, before)
        session.rollback()
    assert inventory(session_factory, [10, 11, 12]) == after_race


def test_an_inventory_write_changes_each_row_once_under_its_version(session_factory, catalog):
    with session_factory() as session:
        stock = read_inventory(session, [10, 11, 12, 14])
        before = {part: values[0] for part, values in stock.items()}
        stock[10][0] -= 3
        stock[11][0] += 2
        stock[12][0] -= 100
        write_inventory(session, stock, before)  # 14 unchanged: not written
        session.commit()
    assert inventory(session_factory, [10, 11, 12, 14]) == {
        10: (97, 2),
        11: (102, 2),
        12: (0, 2),
        14: (100, 1),
    }


def place(session_factory, drafts) -> list[PlacedOrder]:
    with UnitOfWork(session_factory) as uow:
        placed = place_orders(uow.session, drafts)
        uow.commit()
    return placed


def test_a_batch_losing_the_inventory_race_reruns_and_takes_stock_once(
    session_factory, catalog, make_draft, monkeypatch
):
    """The first unit of work's inventory write finds a version moved (what a
    concurrent writer causes between read and write): it rolls back whole and
    reruns; every order's stock is taken once, and a short order still gets its
    own outcome beside its batch-mates."""
    orders = place(
        session_factory,
        [
            make_draft([(10, 2, "AIR"), (11, 3, "MAIL")]),
            make_draft([(13, 9, "AIR")]),  # part 13 has 5 units: short
            make_draft([(10, 1, "AIR"), (12, 4, "RAIL")]),
        ],
    )
    writes = []
    real_write = effects.write_inventory

    def racing_write(session, stock, before):
        writes.append(1)
        if len(writes) == 1:  # the first unit of work read a version that moved
            stock[10][1] -= 1
        real_write(session, stock, before)

    monkeypatch.setattr(effects, "write_inventory", racing_write)
    results = handle_steps(
        session_factory, [StepRun(p.workflow_id, STOCK, p.order_id) for p in orders]
    )
    assert len(writes) == 2
    assert all(isinstance(r, StepResult) for r in results)
    assert [r.outcome for r in results] == ["deducted", "out_of_stock", "deducted"]
    assert [r.conflicts for r in results] == [1, 1, 1]
    assert inventory(session_factory, [10, 11, 12, 13]) == {
        10: (97, 2),
        11: (97, 2),
        12: (96, 2),
        13: (5, 1),
    }
    with session_factory() as session:
        rows = session.execute(
            select(StockDeduction.order_id, StockDeduction.part_id, StockDeduction.quantity)
        ).all()
    assert sorted(rows) == sorted(
        [
            (orders[0].order_id, 10, 2),
            (orders[0].order_id, 11, 3),
            (orders[2].order_id, 10, 1),
            (orders[2].order_id, 12, 4),
        ]
    )
    with session_factory() as session:
        assert check_stock_conservation(session) == []


def test_inserted_rows_are_all_or_nothing(session_factory, catalog, make_draft):
    """A batch whose rows break a unique guard inserts none of them."""
    orders = place(session_factory, [make_draft(), make_draft()])
    ids = [p.order_id for p in orders]
    with session_factory() as session:
        insert_rows(
            session,
            Notification,
            {"order_id": ids[1:], "customer_id": [1]},
            kind=CONFIRMATION,
            created_at=NOW,
        )
        session.commit()
    with session_factory() as session:
        with pytest.raises(IntegrityError):
            insert_rows(
                session,
                Notification,
                {"order_id": ids, "customer_id": [1, 1]},
                kind=CONFIRMATION,
                created_at=NOW,
            )
        session.rollback()
        assert list(session.scalars(select(Notification.order_id))) == ids[1:]
        assert insert_rows(session, Notification, {"order_id": [], "customer_id": []}) == []
        with pytest.raises(ValueError, match="different lengths"):
            insert_rows(session, Notification, {"order_id": ids, "customer_id": [1]})


def test_an_inserted_text_too_long_for_its_column_is_never_cut_short(
    session_factory, catalog, make_draft
):
    """PostgreSQL refuses it (as a plain insert does); SQLite, which has no length
    limit, keeps it whole. Either way no shorter text is stored."""
    [order] = place(session_factory, [make_draft()])
    mode = "PIGEON POST"  # 11 characters; shipments.ship_mode is 10
    with session_factory() as session:
        try:
            insert_rows(
                session,
                Shipment,
                {"order_id": [order.order_id], "ship_mode": [mode], "status": ["scheduled"]},
                created_at=NOW,
            )
            session.commit()
        except DBAPIError:
            session.rollback()
        assert list(session.scalars(select(Shipment.ship_mode))) in ([], [mode])


def test_inserted_rows_keep_their_values_and_types(session_factory, catalog, make_draft):
    """The rows travel as one parameter (arrays on PostgreSQL, JSON on SQLite): each
    value comes back as written, numbers as numbers, the constants on every row."""
    orders = place(session_factory, [make_draft(), make_draft()])
    ids = [p.order_id for p in orders]
    with session_factory() as session:
        insert_rows(
            session,
            StockDeduction,
            {"order_id": [ids[0], ids[0], ids[1]], "part_id": [10, 11, 10], "quantity": [2, 1, 7]},
            created_at=NOW,
        )
        session.commit()
        rows = session.execute(
            select(
                StockDeduction.order_id,
                StockDeduction.part_id,
                StockDeduction.quantity,
                StockDeduction.created_at,
            ).order_by(StockDeduction.id)
        ).all()
    assert [tuple(r[:3]) for r in rows] == [(ids[0], 10, 2), (ids[0], 11, 1), (ids[1], 10, 7)]
    assert all(type(r[2]) is int for r in rows)
    assert {r[3] for r in rows} == {NOW}


def test_a_per_row_value_json_cannot_carry_is_refused_not_stored(
    session_factory, catalog, make_draft
):
    """SQLite: a timestamp given per row (not as a constant) would reach the table
    as whatever text JSON made of it; it is refused and nothing is written."""
    if session_factory.kw["bind"].dialect.name == "postgresql":
        pytest.skip("PostgreSQL binds each column as a typed array")
    [order] = place(session_factory, [make_draft()])
    with session_factory() as session:
        with pytest.raises(StatementError):
            insert_rows(
                session,
                Notification,
                {"order_id": [order.order_id], "customer_id": [1], "created_at": [NOW]},
                kind=CONFIRMATION,
            )
        session.rollback()
        assert list(session.scalars(select(Notification.order_id))) == []


def statements_of(session, run) -> list[str]:
    """The SQL texts ``run()`` sends on the session's connection."""
    sent: list[str] = []

    def capture(conn, cursor, sql, parameters, context, executemany):
        sent.append(sql)

    connection = session.connection()
    event.listen(connection, "before_cursor_execute", capture)
    try:
        run()
    finally:
        event.remove(connection, "before_cursor_execute", capture)
    return sent


def test_rows_already_there_are_left_out_by_the_unique_index(session_factory, catalog, make_draft):
    """``insert_new_rows`` inserts only the keys not there yet, hands back those, and
    leaves a row that was there as it was."""
    ids = [p.order_id for p in place(session_factory, [make_draft(), make_draft()])]
    earlier = datetime(2025, 1, 1, tzinfo=UTC)
    with session_factory() as session:
        insert_rows(
            session,
            Notification,
            {"order_id": ids[:1], "customer_id": [2]},
            kind=CONFIRMATION,
            created_at=earlier,
        )
        session.commit()
    with session_factory() as session:
        new = dialect_of(session).insert_new_rows(
            session,
            Notification.__table__,
            {"order_id": ids, "customer_id": [1, 1]},
            unique=("order_id", "kind"),
            returning="order_id",
            constants={"kind": CONFIRMATION, "created_at": NOW},
        )
        session.commit()
        rows = session.execute(
            select(Notification.order_id, Notification.customer_id, Notification.created_at)
        ).all()
    assert new == ids[1:]
    assert sorted(rows) == [(ids[0], 2, earlier), (ids[1], 1, NOW)]


def test_a_row_breaking_another_constraint_fails_the_whole_insert_of_new_rows(
    session_factory, catalog, make_draft
):
    [order] = place(session_factory, [make_draft()])
    with session_factory() as session:
        with pytest.raises(IntegrityError):
            dialect_of(session).insert_new_rows(
                session,
                Notification.__table__,
                {"order_id": [order.order_id, order.order_id + 1000], "customer_id": [1, 1]},
                unique=("order_id", "kind"),
                returning="order_id",
                constants={"kind": CONFIRMATION, "created_at": NOW},
            )
        session.rollback()
        assert list(session.scalars(select(Notification.order_id))) == []


@pytest.mark.parametrize(
    ("effect", "table", "first", "again"),
    [
        (effects.send_confirmation, "notifications", "sent", "already_sent"),
        (effects.credit_points, "points_ledger", "credited", "already_credited"),
        (effects.schedule_shipment, "shipments", "scheduled", "scheduled"),
    ],
)
def test_an_effect_reads_none_of_its_rows_before_inserting_them(
    session_factory, catalog, make_draft, effect, table, first, again
):
    """Regression: each batch first read which of its orders had their row already, one
    statement more per batch, which PostgreSQL planned as a scan of the whole table for
    as long as the table was young (a prepared plan made when it was nearly empty).
    The unique index decides now, and a row that was there still comes back as such."""
    placed = place(session_factory, [make_draft(), make_draft()])
    deliveries = [
        effects.Delivery(i, p.order_id, 1, Decimal("1234.56"), "placed")
        for i, p in enumerate(placed, start=1)
    ]
    with session_factory() as session:
        assert effect(session, deliveries[:1], NOW) == {1: first}
        session.commit()
    with session_factory() as session:
        outcomes: dict[int, str] = {}
        sent = statements_of(session, lambda: outcomes.update(effect(session, deliveries, NOW)))
        session.commit()
    assert outcomes == {1: again, 2: first}
    [insert_at] = [i for i, s in enumerate(sent) if s.lstrip().startswith(f"INSERT INTO {table}")]
    assert not [s for s in sent[:insert_at] if s.lstrip().startswith("SELECT") and table in s]
