"""Outbox relay: every writer marks its rows dispatched in its commit, then publishes them
once (ADR 0028); the sweep publishes rows put back to pending and re-publishes lost ones."""

from __future__ import annotations

import random
import threading
from datetime import timedelta

import pytest
from publishing import publish_now
from sqlalchemy import event, select, update

from orders.app.placement import place
from orders.domain.handlers import StepRequest, handle_step
from orders.domain.models import Inventory
from orders.domain.steps import STOCK
from orders.sources.drafts import RANDOM
from workflows.columns import utcnow
from workflows.errors import PublisherUnavailable
from workflows.models import StepStatus, WorkflowStep
from workflows.relay import dispatch_pending, message_for, publish_dispatched, sweep
from workflows.tracker import StepRun, record_step_failure
from workflows.uow import UnitOfWork


def step_states(session_factory) -> dict[str, int]:
    with session_factory() as session:
        states = session.scalars(select(WorkflowStep.status)).all()
    return {state: states.count(state) for state in set(states)}


def never_known(_key: str) -> bool:
    return False


def stock_steps_run(session_factory, publisher, orders) -> int:
    """Run the stock step of each placed order as a worker does: publish what it released."""
    return sum(
        publish_dispatched(
            session_factory,
            publisher,
            handle_step(
                session_factory, StepRequest(order.workflow_id, order.order_id, STOCK)
            ).released_steps,
        )
        for order in orders
    )


def plenty_of_stock(session_factory) -> None:
    """Enough of every part that no random order runs out (its later steps are released)."""
    with session_factory() as session:
        session.execute(update(Inventory).values(on_hand=10**6, initial_on_hand=10**6))
        session.commit()


def test_steps_written_pending_are_published_by_the_sweep(session_factory, catalog, publisher):
    # Placement with no queue at hand writes its first steps pending, for the sweep.
    place(session_factory, 3, source=RANDOM, rng=random.Random(3))
    # stock first: the three steps after it wait and are never published yet
    assert step_states(session_factory) == {StepStatus.PENDING: 3, StepStatus.WAITING: 9}
    result = sweep(session_factory, publisher, is_known=never_known, republish_after=30)
    assert result.published == 3
    assert result.republished == 0
    assert len(set(publisher.keys())) == 3
    assert step_states(session_factory) == {StepStatus.DISPATCHED: 3, StepStatus.WAITING: 9}
    again = sweep(session_factory, publisher, is_known=never_known, republish_after=30)
    assert (again.published, again.republished) == (0, 0)
    assert len(publisher.keys()) == 3


def test_publish_after_commit_sends_each_step_once(session_factory, catalog, publisher):
    result = place(session_factory, 2, source=RANDOM, rng=random.Random(4))
    step_ids = [s for order in result.orders for s in order.step_ids]
    assert publish_now(session_factory, publisher, step_ids) == 2  # the others wait
    assert publish_now(session_factory, publisher, step_ids) == 0  # dispatched already
    swept = sweep(session_factory, publisher, is_known=lambda _key: True, republish_after=30)
    assert (swept.published, swept.republished) == (0, 0)
    released = [
        s
        for order in result.orders
        for s in handle_step(
            session_factory, StepRequest(order.workflow_id, order.order_id, STOCK)
        ).released_steps
    ]
    assert publish_dispatched(session_factory, publisher, released) == 6
    keys = publisher.keys()
    assert sorted(keys) == sorted(
        f"{order.workflow_id}:{step}"
        for order in result.orders
        for step in ("stock", "notification", "points", "logistics")
    )
    message = publisher.messages[0]
    assert message.queue == "stock" and message.task == "orders.stock"
    assert message.payload == {
        "workflow_id": result.orders[0].workflow_id,
        "order_id": result.orders[0].order_id,
        "step": "stock",
    }


def test_queue_down_puts_placed_steps_back_to_pending_for_the_next_sweep(
    session_factory, catalog, publisher
):
    publisher.fail = PublisherUnavailable("queue down")
    placed = place(session_factory, 2, source=RANDOM, rng=random.Random(5), publisher=publisher)
    assert (len(placed.orders), placed.published, placed.deferred) == (2, 0, 2)
    assert placed.publish_error == "PublisherUnavailable: queue down"
    assert step_states(session_factory) == {
        StepStatus.PENDING: 2,
        StepStatus.WAITING: 6,
    }  # the orders themselves committed
    with session_factory() as session:  # an outage is charged to no row
        assert set(session.scalars(select(WorkflowStep.publish_attempts))) == {0}
    publisher.fail = None
    assert (
        sweep(session_factory, publisher, is_known=never_known, republish_after=30).published == 2
    )


def test_a_step_a_fast_worker_finishes_during_its_publish_keeps_its_state(
    session_factory, catalog, publisher
):
    """Nothing marks a row after its publish: a step done before the publish returns
    stays done."""
    plenty_of_stock(session_factory)
    ran = []

    class FastWorkerPublisher:
        def publish(self, messages):
            publisher.publish(messages)
            for m in messages:
                ran.append(
                    handle_step(
                        session_factory,
                        StepRequest(m.payload["workflow_id"], m.payload["order_id"], STOCK),
                    )
                )

    result = place(
        session_factory, 1, source=RANDOM, rng=random.Random(6), publisher=FastWorkerPublisher()
    )
    assert result.published == 1 and len(ran) == 1
    with session_factory() as session:
        rows = {r.step: r for r in session.scalars(select(WorkflowStep))}
    assert rows[STOCK].status == StepStatus.DONE
    assert rows[STOCK].dispatched_at is not None
    assert {rows[s].status for s in ("notification", "points", "logistics")} == {
        StepStatus.DISPATCHED  # released by the stock step's commit
    }


def test_sweep_republishes_only_old_unfinished_steps_the_queue_lost(
    session_factory, catalog, publisher
):
    plenty_of_stock(session_factory)
    result = place(session_factory, 2, source=RANDOM, rng=random.Random(7), publisher=publisher)
    first, second = result.orders
    assert stock_steps_run(session_factory, publisher, result.orders) == 6
    long_ago = utcnow() - timedelta(minutes=5)
    with session_factory() as session:
        session.execute(update(WorkflowStep).values(dispatched_at=long_ago))
        session.commit()
    known = {f"{second.workflow_id}:{step}" for step in ("notification", "points")}
    publisher.messages.clear()

    result = sweep(session_factory, publisher, is_known=known.__contains__, republish_after=30)

    assert result.checked == 6  # 8 steps, two done
    assert sorted(result.republished_keys) == sorted(
        [f"{first.workflow_id}:{s}" for s in ("notification", "points", "logistics")]
        + [f"{second.workflow_id}:logistics"]
    )
    assert sorted(publisher.keys()) == sorted(result.republished_keys)
    # Re-published steps wait another full period before being checked again.
    publisher.messages.clear()
    again = sweep(session_factory, publisher, is_known=never_known, republish_after=30)
    assert again.checked == 2 and again.republished == 2  # the known ones, still old


def test_sweep_asks_the_queue_once_for_all_the_steps_it_checks(session_factory, catalog, publisher):
    """The dispatched-step check is one batched question per sweep, not one per step."""
    plenty_of_stock(session_factory)
    result = place(session_factory, 2, source=RANDOM, rng=random.Random(7), publisher=publisher)
    assert stock_steps_run(session_factory, publisher, result.orders) == 6
    with session_factory() as session:
        session.execute(update(WorkflowStep).values(dispatched_at=utcnow() - timedelta(minutes=5)))
        session.commit()
    held = {f"{result.orders[1].workflow_id}:{step}" for step in ("notification", "points")}
    asked: list[list[str]] = []

    def known_keys(keys):
        asked.append(list(keys))
        return held & set(keys)

    swept = sweep(session_factory, publisher, known_keys=known_keys, republish_after=30)

    assert len(asked) == 1 and len(asked[0]) == 6  # 8 steps, two done
    assert swept.checked == 6 and swept.republished == 4
    assert not held & set(swept.republished_keys)


def test_sweep_needs_a_way_to_ask_the_queue(session_factory):
    with pytest.raises(ValueError, match="is_known or known_keys"):
        sweep(session_factory, None, republish_after=30)


def test_recently_dispatched_steps_are_not_checked(session_factory, catalog, publisher):
    place(session_factory, 2, source=RANDOM, rng=random.Random(8), publisher=publisher)
    result = sweep(session_factory, publisher, is_known=never_known, republish_after=30)
    assert (result.checked, result.republished) == (0, 0)


def test_sweep_does_not_republish_a_step_that_finished_while_it_was_checking(
    session_factory, catalog, publisher
):
    # The sweep reads the open steps, then asks the queue about each. A job that
    # finishes in between is done in the database before its ack reaches Redis, so
    # the queue no longer knows it: that is no loss, and nothing may be published.
    plenty_of_stock(session_factory)
    result = place(session_factory, 1, source=RANDOM, rng=random.Random(9), publisher=publisher)
    (order,) = result.orders
    assert stock_steps_run(session_factory, publisher, result.orders) == 3
    with session_factory() as session:
        session.execute(update(WorkflowStep).values(dispatched_at=utcnow() - timedelta(minutes=5)))
        session.commit()
    publisher.messages.clear()

    def finishes_meanwhile(key: str) -> bool:
        workflow_id, step = key.split(":")
        handle_step(session_factory, StepRequest(int(workflow_id), order.order_id, step))
        return False  # acked by now: Redis holds no unfinished job for it

    swept = sweep(session_factory, publisher, is_known=finishes_meanwhile, republish_after=30)

    assert swept.checked == 3  # stock is done
    assert (swept.republished, swept.republished_keys) == (0, [])
    assert publisher.messages == []


def test_a_failed_step_its_writer_never_marked_is_republished_when_the_queue_lost_it(
    session_factory, catalog, publisher
):
    """A row from before ADR 0028: a writer published it but died before marking it
    dispatched; a worker then ran it and failed (the row says failed, no dispatch
    time). The sweep's pending pass does not take it (not pending), so the lost-step
    check must take it up when Redis loses the retry, or the order never settles."""
    result = place(session_factory, 1, source=RANDOM, rng=random.Random(9))
    order = result.orders[0]
    with session_factory() as session:
        row = session.scalars(
            select(WorkflowStep).where(
                WorkflowStep.workflow_id == order.workflow_id, WorkflowStep.step == STOCK
            )
        ).one()
        publisher.publish([message_for(row)])  # published; the writer dies before marking
    started = utcnow()
    record_step_failure(
        session_factory, StepRun(order.workflow_id, STOCK, job_id="j1"), "boom",
        clock=lambda: started,
    )  # fmt: skip
    publisher.messages.clear()

    def sweep_at(seconds: float):
        return sweep(
            session_factory,
            publisher,
            is_known=never_known,  # Redis lost the retry
            republish_after=30,
            clock=lambda: started + timedelta(seconds=seconds),
        )

    assert sweep_at(1).republished == 0  # a recent failure: its retry is not checked yet
    swept = sweep_at(31)
    assert swept.republished_keys == [f"{order.workflow_id}:{STOCK}"]
    assert publisher.keys() == swept.republished_keys


def test_the_sweep_never_waits_for_a_row_a_worker_holds(
    session_factory, catalog, publisher, engine
):
    """Regression: the relay's UPDATE waited for row locks that a completing step
    batch held, while that batch waited for the relay's rows: PostgreSQL broke the
    deadlock after deadlock_timeout (1 s), a stall of every worker behind it. The
    sweep's marking of pending rows skips a locked row."""
    if engine.dialect.name != "postgresql":
        pytest.skip("row locks: SQLite has one writer and no row locks")
    result = place(session_factory, 2, source=RANDOM, rng=random.Random(11))  # pending
    held, free = (order.step_ids[0] for order in result.orders)  # the two stock rows
    worker = engine.connect()
    worker.execute(  # a step batch completing ``held``, not committed yet
        update(WorkflowStep).where(WorkflowStep.id == held).values(outcome="running")
    )
    outcome: list[int] = []
    relay = threading.Thread(
        target=lambda: outcome.append(
            sweep(session_factory, publisher, is_known=never_known, republish_after=30).published
        )
    )
    try:
        relay.start()
        relay.join(5)
        assert not relay.is_alive(), "the relay waited for the worker's row lock"
    finally:
        worker.rollback()
        worker.close()
        relay.join(10)
    assert outcome == [1]
    with session_factory() as session:
        rows = {r.id: r for r in session.scalars(select(WorkflowStep))}
    assert rows[free].status == StepStatus.DISPATCHED and rows[free].dispatched_at is not None
    # the held row was skipped, not lost: still pending, the next sweep publishes it
    assert rows[held].status == StepStatus.PENDING and rows[held].dispatched_at is None
    assert (
        sweep(session_factory, publisher, is_known=never_known, republish_after=30).published == 1
    )


def test_putting_unpublished_rows_back_never_waits_for_a_row_a_worker_holds(
    session_factory, catalog, publisher, engine
):
    """The same for the put-back after an unreachable queue: a held row is skipped
    (it stays dispatched; the sweep's check re-publishes it after ``republish_after``)."""
    if engine.dialect.name != "postgresql":
        pytest.skip("row locks: SQLite has one writer and no row locks")
    result = place(session_factory, 2, source=RANDOM, rng=random.Random(12))
    with UnitOfWork(session_factory) as uow:
        rows = dispatch_pending(uow.session, utcnow(), ids=[o.step_ids[0] for o in result.orders])
        uow.commit()
    held, free = (r.row_id for r in rows)
    worker = engine.connect()
    worker.execute(update(WorkflowStep).where(WorkflowStep.id == held).values(outcome="running"))
    publisher.fail = PublisherUnavailable("queue down")
    raised: list[BaseException] = []

    def publish() -> None:
        try:
            publish_dispatched(session_factory, publisher, rows)
        except PublisherUnavailable as exc:
            raised.append(exc)

    relay = threading.Thread(target=publish)
    try:
        relay.start()
        relay.join(5)
        assert not relay.is_alive(), "the put-back waited for the worker's row lock"
    finally:
        worker.rollback()
        worker.close()
        relay.join(10)
    assert len(raised) == 1
    with session_factory() as session:
        assert session.get(WorkflowStep, free).status == StepStatus.PENDING
        assert session.get(WorkflowStep, held).status == StepStatus.DISPATCHED


def _released_by_stock(session_factory, n: int, seed: int):
    """Place ``n`` orders, run their stock steps; the rows the stock steps released."""
    plenty_of_stock(session_factory)
    placed = place(session_factory, n, source=RANDOM, rng=random.Random(seed))
    return [
        row
        for order in placed.orders
        for row in handle_step(
            session_factory, StepRequest(order.workflow_id, order.order_id, STOCK)
        ).released_steps
    ]


def test_released_steps_come_back_with_their_messages_and_are_published_as_is(
    session_factory, catalog, publisher, engine
):
    released = _released_by_stock(session_factory, 2, seed=21)
    assert len(released) == 6
    # the stock step's commit marked them dispatched: nobody else publishes them
    assert step_states(session_factory) == {StepStatus.DONE: 2, StepStatus.DISPATCHED: 6}
    with session_factory() as session:
        rows = session.scalars(
            select(WorkflowStep).where(WorkflowStep.id.in_([r.row_id for r in released]))
        ).all()
    assert all(row.dispatched_at is not None for row in rows)
    transactions: list[object] = []

    def began(connection) -> None:
        transactions.append(connection)

    event.listen(engine, "begin", began)
    try:
        assert publish_dispatched(session_factory, publisher, released) == 6
    finally:
        event.remove(engine, "begin", began)
    assert transactions == []  # no read back, no marking
    assert {m.idempotency_key: m for m in publisher.messages} == {
        message_for(row).idempotency_key: message_for(row) for row in rows
    }
    assert len(publisher.messages) == 6
    # the sweep finds nothing to publish: its writer published it
    again = sweep(session_factory, publisher, is_known=lambda _key: True, republish_after=30)
    assert (again.published, again.republished) == (0, 0)
    assert len(publisher.messages) == 6


def test_the_sweep_never_publishes_a_released_step_before_its_writer(
    session_factory, catalog, publisher
):
    """The writer and the sweep never both publish a released step: the sweep
    sees it only as dispatched, and checks it after ``republish_after``."""
    released = _released_by_stock(session_factory, 1, seed=25)
    for _ in range(2):
        swept = sweep(session_factory, publisher, is_known=never_known, republish_after=30)
        assert (swept.published, swept.checked) == (0, 0)
    assert publisher.messages == []
    assert publish_dispatched(session_factory, publisher, released) == 3


def test_a_released_row_whose_payload_does_not_decode_is_refused_alone(
    session_factory, catalog, publisher
):
    plenty_of_stock(session_factory)
    placed = place(session_factory, 2, source=RANDOM, rng=random.Random(22))
    poisoned = placed.orders[0].step_ids[2]  # a step the stock step releases
    with session_factory() as session:
        session.execute(
            update(WorkflowStep).where(WorkflowStep.id == poisoned).values(payload="not a dict")
        )
        session.commit()
    released = [  # the stock step's transaction does not fail on the bad payload
        row
        for order in placed.orders
        for row in handle_step(
            session_factory, StepRequest(order.workflow_id, order.order_id, STOCK)
        ).released_steps
    ]
    assert poisoned in {r.row_id for r in released}
    assert publish_dispatched(session_factory, publisher, released) == 5
    with session_factory() as session:
        row = session.get(WorkflowStep, poisoned)
    assert row.status == StepStatus.PENDING and row.publish_attempts == 1
    assert row.publish_error.startswith("payload cannot be read")
    assert row.next_publish_at is not None  # held back by its backoff, charged once
    assert f"{row.workflow_id}:{row.step}" not in publisher.keys()


def test_released_steps_stay_pending_for_the_sweep_when_the_queue_is_down(
    session_factory, catalog, publisher
):
    released = _released_by_stock(session_factory, 2, seed=23)
    publisher.fail = PublisherUnavailable("queue down")
    with pytest.raises(PublisherUnavailable):
        publish_dispatched(session_factory, publisher, released)
    assert step_states(session_factory) == {StepStatus.DONE: 2, StepStatus.PENDING: 6}
    with session_factory() as session:  # an outage is charged to no row
        assert set(session.scalars(select(WorkflowStep.publish_attempts))) == {0}
    publisher.fail = None
    swept = sweep(session_factory, publisher, is_known=never_known, republish_after=30)
    assert swept.published == 6


def test_a_released_step_a_crash_left_unpublished_is_republished_by_the_sweep(
    session_factory, catalog, publisher
):
    """The worker died between its commit and its publish: the released steps are
    dispatched but unknown to the queue; the sweep publishes them once they are old."""
    released = _released_by_stock(session_factory, 1, seed=24)  # never published
    young = sweep(session_factory, publisher, is_known=never_known, republish_after=30)
    assert (young.published, young.checked, young.republished) == (0, 0, 0)
    with session_factory() as session:
        session.execute(
            update(WorkflowStep)
            .where(WorkflowStep.id.in_([r.row_id for r in released]))
            .values(dispatched_at=utcnow() - timedelta(minutes=5))
        )
        session.commit()
    old = sweep(session_factory, publisher, is_known=never_known, republish_after=30)
    assert old.republished == 3
    assert sorted(publisher.keys()) == sorted(f"{r.workflow_id}:{r.step}" for r in released)


def test_a_sweep_with_nothing_pending_or_old_writes_nothing(
    session_factory, catalog, publisher, engine
):
    """The usual sweep only reads: on SQLite a write would take a writer's turn."""
    place(session_factory, 2, source=RANDOM, rng=random.Random(26), publisher=publisher)
    statements: list[str] = []

    def executed(conn, cursor, statement, parameters, context, executemany) -> None:
        statements.append(statement.lstrip().split(None, 1)[0].upper())

    event.listen(engine, "before_cursor_execute", executed)
    try:
        swept = sweep(session_factory, publisher, is_known=never_known, republish_after=30)
    finally:
        event.remove(engine, "before_cursor_execute", executed)
    assert (swept.published, swept.checked) == (0, 0)
    assert statements and set(statements) == {"SELECT"}
