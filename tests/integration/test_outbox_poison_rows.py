"""One bad outbox row cannot hold back the others (real Redis, real database)."""

from __future__ import annotations

import json
import random
import subprocess
from datetime import timedelta

import pytest
from sqlalchemy import select, update

from orders.app.placement import place
from orders.domain.steps import STEPS, STOCK
from orders.sources.drafts import RANDOM
from reliable_queue import EnqueueRequest, Queue
from workflows.columns import utcnow
from workflows.errors import PublisherUnavailable
from workflows.membership import READY, where_is
from workflows.models import StepStatus, Workflow, WorkflowStatus, WorkflowStep
from workflows.publisher import QueuePublisher
from workflows.relay import PublishPolicy, sweep


@pytest.fixture
def queues(redis_client, key_prefix) -> dict[str, Queue]:
    return {step: Queue(redis_client, step, prefix=key_prefix) for step in STEPS}


@pytest.fixture
def real_publisher(queues) -> QueuePublisher:
    return QueuePublisher(queues.__getitem__)


class Clock:
    def __init__(self) -> None:
        self.now = utcnow()

    def __call__(self):
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def statuses(session_factory) -> dict[str, list[str]]:
    with session_factory() as session:
        rows = session.execute(select(WorkflowStep.step, WorkflowStep.status)).all()
    out: dict[str, list[str]] = {}
    for step, status in rows:
        out.setdefault(status, []).append(step)
    return out


def test_a_wrong_type_idempotency_key_defers_only_its_row_and_leaves_no_orphan_job(
    session_factory, catalog, queues, real_publisher, redis_client
):
    stock = queues["stock"]
    redis_client.rpush(stock.keys.idempotency_key("1:stock"), "not a job id")  # workflow 1
    clock = Clock()
    placed = place(
        session_factory,
        3,
        source=RANDOM,
        rng=random.Random(1),
        publisher=real_publisher,
        clock=clock,
    )
    # stock first: only the stock steps are published at placement, the rest waits
    assert (len(placed.orders), placed.published, placed.deferred) == (3, 2, 1)
    states = statuses(session_factory)
    assert states[StepStatus.PENDING] == ["stock"] and len(states[StepStatus.DISPATCHED]) == 2
    assert len(states[StepStatus.WAITING]) == 9
    with session_factory() as session:
        bad = session.scalars(
            select(WorkflowStep).where(WorkflowStep.status == StepStatus.PENDING)
        ).one()
    assert bad.workflow_id == 1 and bad.publish_attempts == 1
    assert "WRONGTYPE" in (bad.publish_error or "")
    # the two good stock jobs are queued; no record sits in no structure
    ids = stock.ids_in("waiting")  # keyed by customer: the waiting set (ADR 0033)
    assert len(ids) == 2 and redis_client.hlen(stock.keys.key("jobs")) == 2
    assert where_is(stock, ids) == [READY, READY]

    # while its backoff runs the row is not tried again (the sweep stays cheap)
    again = sweep(
        session_factory,
        real_publisher,
        is_known=real_publisher.is_known,
        republish_after=30,
        clock=clock,
    )
    assert (again.published, again.refused) == (0, 0)

    redis_client.delete(stock.keys.idempotency_key("1:stock"))
    clock.advance(1.5)
    healed = sweep(
        session_factory,
        real_publisher,
        is_known=real_publisher.is_known,
        republish_after=30,
        clock=clock,
    )
    assert healed.published == 1
    assert StepStatus.PENDING not in statuses(session_factory)
    assert len(stock.ids_in("waiting")) == 3


def test_an_undecodable_payload_is_given_up_after_its_attempts_and_blocks_its_workflow(
    session_factory, catalog, real_publisher
):
    placed = place(session_factory, 3, source=RANDOM, rng=random.Random(2))
    poisoned = placed.orders[1].step_ids[0]
    with session_factory() as session:
        session.execute(
            update(WorkflowStep).where(WorkflowStep.id == poisoned).values(payload="not a dict")
        )
        session.commit()
    clock = Clock()
    policy = PublishPolicy(max_attempts=2, backoff_base_seconds=1.0)

    def run():
        return sweep(
            session_factory,
            real_publisher,
            is_known=real_publisher.is_known,
            republish_after=30,
            clock=clock,
            policy=policy,
        )

    first = run()
    assert (first.published, first.refused, first.unpublishable) == (2, 1, 0)  # stock steps
    clock.advance(1.5)
    second = run()
    assert (second.published, second.refused, second.unpublishable) == (0, 1, 1)
    with session_factory() as session:
        row = session.get(WorkflowStep, poisoned)
        workflow = session.get(Workflow, row.workflow_id)
    assert row.status == StepStatus.UNPUBLISHABLE and row.publish_attempts == 2
    assert "payload cannot be read" in row.publish_error
    assert workflow.status == WorkflowStatus.BLOCKED
    assert workflow.blocked_step == row.step
    assert workflow.blocked_reason.startswith("unpublishable: payload cannot be read")
    clock.advance(3600)
    assert run().refused == 0  # terminal: never tried again on its own


class RefusingPublisher:
    """The queue refuses every message (as Redis does a key of the wrong type)."""

    def publish(self, messages) -> None:
        raise ValueError("WRONGTYPE Operation against a key holding the wrong kind of value")


def test_outbox_cli_lists_an_unpublishable_row_and_retry_resumes_it(
    session_factory, catalog, cli_env, database_url, key_prefix
):
    from cli_processes import run_orders

    placed = place(session_factory, 1, source=RANDOM, rng=random.Random(3))
    swept = sweep(
        session_factory,
        RefusingPublisher(),
        is_known=lambda _key: True,
        republish_after=30,
        policy=PublishPolicy(max_attempts=1),
    )
    assert swept.unpublishable == 1  # the stock step; the others wait for it
    stock_step = placed.orders[0].step_ids[0]
    env = dict(cli_env, ORDERS_DATABASE_URL=database_url, ORDERS_QUEUE_PREFIX=key_prefix)

    rows = json.loads(run_orders(["outbox", "list", "--json"], env))
    assert [r["step_id"] for r in rows] == [stock_step]
    assert {r["status"] for r in rows} == {StepStatus.UNPUBLISHABLE}
    assert all(r["error"].startswith("ValueError: WRONGTYPE") for r in rows)
    assert "1 step record(s) unpublishable" in run_orders(["status"], env)
    with session_factory() as session:
        assert session.scalars(select(Workflow.status)).one() == WorkflowStatus.BLOCKED

    retried = json.loads(run_orders(["outbox", "retry", "--all", "--json"], env))
    assert retried["retried"] == [stock_step]
    with session_factory() as session:
        assert set(session.scalars(select(WorkflowStep.status))) == {
            StepStatus.PENDING,
            StepStatus.WAITING,
        }
        assert session.scalars(select(Workflow.status)).one() == WorkflowStatus.RUNNING


def test_outbox_retry_of_ids_not_given_up_says_why_and_changes_nothing(
    session_factory, catalog, cli_env, database_url, key_prefix
):
    from cli_processes import orders_command

    placed = place(session_factory, 1, source=RANDOM, rng=random.Random(3))
    swept = sweep(
        session_factory,
        RefusingPublisher(),
        is_known=lambda _key: True,
        republish_after=30,
        policy=PublishPolicy(max_attempts=1),
    )
    assert swept.unpublishable == 1  # the stock step; the others wait for it
    stock, notification = placed.orders[0].step_ids[:2]
    missing = 10**9
    env = dict(cli_env, ORDERS_DATABASE_URL=database_url, ORDERS_QUEUE_PREFIX=key_prefix)

    def retry(*ids: int) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*orders_command(), "outbox", "retry", *map(str, ids)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def status_of(step_id: int) -> str:
        with session_factory() as session:
            return session.get(WorkflowStep, step_id).status

    proc = retry(stock, notification, missing)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"{notification}: waiting for the steps it depends on" in proc.stderr
    assert f"{missing}: no such step record" in proc.stderr
    assert "nothing was changed" in proc.stderr and "0 row(s)" not in proc.stdout
    assert status_of(stock) == StepStatus.UNPUBLISHABLE  # all or nothing

    done = retry(stock)
    assert done.returncode == 0, done.stderr
    assert "1 row(s) pending again" in done.stdout
    again = retry(stock)
    assert again.returncode == 1
    assert f"{stock}: pending: not given up" in again.stderr
    assert status_of(stock) == StepStatus.PENDING


def test_steps_whose_ready_list_was_deleted_are_published_again_by_the_sweep(
    session_factory, catalog, queues, real_publisher, redis_client
):
    """What ``maxmemory-policy allkeys-lru`` does to a queue: the ready list is evicted."""
    clock = Clock()
    placed = place(
        session_factory,
        20,
        source=RANDOM,
        rng=random.Random(5),
        publisher=real_publisher,
        clock=clock,
    )
    assert placed.published == 20  # the stock steps; the others wait for them
    stock = queues["stock"]
    records = redis_client.hlen(stock.keys.key("jobs"))
    # the records stay, in no structure (keyed steps wait in the waiting set, ADR 0033)
    redis_client.delete(stock.keys.key("ready"), stock.keys.key("waiting"))
    assert records == 20 and stock.ids_in("ready") == stock.ids_in("waiting") == []
    assert not real_publisher.is_known("1:stock")

    clock.advance(31)
    result = sweep(
        session_factory,
        real_publisher,
        is_known=real_publisher.is_known,
        republish_after=30,
        clock=clock,
    )
    assert result.republished == 20
    assert {key.rsplit(":", 1)[1] for key in result.republished_keys} == {"stock"}
    ready = stock.ids_in("waiting")
    assert len(ready) == 20 and set(where_is(stock, ready)) == {READY}
    again = sweep(
        session_factory,
        real_publisher,
        is_known=real_publisher.is_known,
        republish_after=30,
        clock=clock,
    )
    assert again.republished == 0


def test_known_keys_asks_each_queue_once_and_trusts_only_queued_jobs(
    queues, real_publisher, redis_client
):
    stock, points = queues["stock"], queues["points"]
    stock.enqueue_many([EnqueueRequest("orders.stock", {}, f"{i}:stock") for i in (1, 2, 3)])
    points.enqueue_many([EnqueueRequest("orders.points", {}, "1:points")])
    stock.ack([stock.fetch(1).jobs[0].lease])  # 1:stock finished
    orphan = redis_client.get(stock.keys.idempotency_key("2:stock")).decode()
    redis_client.lrem(stock.keys.key("ready"), 0, orphan)  # 2:stock's job in no structure

    keys = ["1:stock", "2:stock", "3:stock", "1:points", "4:points"]
    assert real_publisher.known_keys(keys) == {"3:stock", "1:points"}
    assert {k for k in keys if real_publisher.is_known(k)} == {"3:stock", "1:points"}
    assert real_publisher.known_keys([]) == set()


def test_a_dead_step_whose_dead_letter_redis_lost_is_retried_from_the_database(
    session_factory, catalog, cli_env, database_url, key_prefix, queues, real_publisher, redis_url
):
    """Regression: after Redis lost its data, a blocked order's dead step had no dead
    letter left to redrive, and ``orders outbox retry`` refused it ("its job is
    dead-lettered"): the order could only be cancelled. A step whose dead letter
    the queue still holds stays with ``orders dlq redrive``."""
    from cli_processes import orders_command

    from workflows.tracker import mark_step_dead

    kept = place(session_factory, 1, source=RANDOM, rng=random.Random(4), publisher=real_publisher)
    leased = queues[STOCK].fetch(1).jobs[0]
    assert queues[STOCK].dead(leased.lease, "retries_exhausted", error="boom")
    # the other order's dead letter is gone with Redis's data: the database alone says dead
    lost = place(session_factory, 1, source=RANDOM, rng=random.Random(5))
    for order in (*kept.orders, *lost.orders):
        assert mark_step_dead(
            session_factory, order.workflow_id, STOCK, "retries_exhausted", error="boom"
        )
    kept_step, lost_step = kept.orders[0].step_ids[0], lost.orders[0].step_ids[0]
    env = dict(
        cli_env,
        ORDERS_DATABASE_URL=database_url,
        ORDERS_QUEUE_PREFIX=key_prefix,
        ORDERS_REDIS_URL=redis_url,  # the Redis that holds the kept dead letter
    )

    def retry(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*orders_command(), "outbox", "retry", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def state() -> dict[int, tuple[str, str]]:
        with session_factory() as session:
            return {
                step.id: (step.status, session.get(Workflow, step.workflow_id).status)
                for step in session.scalars(
                    select(WorkflowStep).where(WorkflowStep.id.in_([kept_step, lost_step]))
                )
            }

    blocked = {kept_step: ("dead", "blocked"), lost_step: ("dead", "blocked")}
    assert state() == blocked
    both = retry(str(kept_step), str(lost_step))
    assert both.returncode == 1, both.stdout + both.stderr
    assert f"{kept_step}: already published; its job is dead-lettered" in both.stderr
    assert str(lost_step) + ":" not in both.stderr
    assert state() == blocked  # all or nothing

    every = retry("--all", "--json")
    assert every.returncode == 0, every.stderr
    assert json.loads(every.stdout)["retried"] == [lost_step]
    assert state() == {kept_step: ("dead", "blocked"), lost_step: ("pending", "running")}
    swept = sweep(
        session_factory, real_publisher, known_keys=real_publisher.known_keys, republish_after=30
    )
    assert swept.published == 1
    key = f"{lost.orders[0].workflow_id}:{STOCK}"
    assert real_publisher.known_keys([key]) == {key}


class UnreachablePublisher:
    """The queue cannot be reached at all."""

    def publish(self, messages) -> None:
        raise PublisherUnavailable("queue down")


def test_rows_the_sweep_cannot_publish_go_back_to_pending_charged_only_for_refusals(
    session_factory, catalog, real_publisher
):
    """The sweep marks pending rows dispatched before it publishes them (ADR 0028): a
    refusal puts the row back charged, an outage puts it back uncharged."""
    placed = place(session_factory, 1, source=RANDOM, rng=random.Random(4))
    stock_step = placed.orders[0].step_ids[0]
    clock = Clock()

    def run(publisher):
        return sweep(
            session_factory,
            publisher,
            is_known=lambda _key: False,
            republish_after=30,
            clock=clock,
            policy=PublishPolicy(max_attempts=3, backoff_base_seconds=1.0),
        )

    def row() -> WorkflowStep:
        with session_factory() as session:
            return session.get(WorkflowStep, stock_step)

    assert run(RefusingPublisher()).refused == 1
    refused = row()
    assert (refused.status, refused.dispatched_at, refused.publish_attempts) == (
        StepStatus.PENDING,
        None,
        1,
    )
    clock.advance(1.5)
    with pytest.raises(PublisherUnavailable):
        run(UnreachablePublisher())
    unreached = row()
    assert (unreached.status, unreached.dispatched_at, unreached.publish_attempts) == (
        StepStatus.PENDING,
        None,
        1,  # an outage is charged to no row
    )
    assert run(real_publisher).published == 1
    sent = row()
    assert sent.status == StepStatus.DISPATCHED and sent.dispatched_at is not None
    assert sent.next_publish_at is None
