"""``orders dlq purge`` never silently strands an order blocked on the purged step."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_processes import app_for, start_orders, stop, wait_until
from publishing import publish_now
from sqlalchemy import select
from test_cli_bad_input import orders_command, run

from orders.app.dead_letters import stranded_orders
from orders.app.placement import place_orders
from orders.domain.handlers import StepRequest, handle_step, mark_step_dead
from orders.domain.models import Order, OrderStatus
from orders.domain.steps import LOGISTICS
from orders.sources.drafts import OrderDraft
from workflows.models import Workflow, WorkflowStatus, WorkflowStep
from workflows.relay import publish_dispatched
from workflows.uow import UnitOfWork


@dataclass
class Blocked:
    env: dict[str, str]
    order_id: int
    blocking_job: str  # the dead logistics job the order waits on
    loose_job: str  # a dead letter no order waits on


@pytest.fixture
def blocked(
    cli_env: dict[str, str],
    key_prefix: str,
    database_url: str,
    catalog: dict[int, int],
    make_draft: Callable[..., OrderDraft],
) -> Blocked:
    """One order blocked on its dead logistics job, plus a dead letter of no order."""
    env = dict(
        cli_env, ORDERS_QUEUE_PREFIX=key_prefix, ORDERS_DATABASE_URL=database_url, COLUMNS="200"
    )
    app = app_for(env, migrate=True)
    try:
        with UnitOfWork(app.session_factory) as uow:
            (order,) = place_orders(uow.session, [make_draft()])
            uow.commit()
        publish_now(app.session_factory, app.publisher, list(order.step_ids))
        stocked = handle_step(
            app.session_factory, StepRequest(order.workflow_id, order.order_id, "stock")
        )
        publish_dispatched(app.session_factory, app.publisher, stocked.released_steps)
        logistics = app.queues[LOGISTICS]
        job = logistics.fetch(1).jobs[0]
        assert logistics.dead(job.lease, "error", error="PermanentError: boom")
        mark_step_dead(
            app.session_factory, order.workflow_id, LOGISTICS, "error", error="boom", attempts=1
        )
        points = app.queues["points"]
        loose = points.enqueue("orders.points", {"order_id": 999})
        points_jobs = points.fetch(5).jobs
        loose_job = next(j for j in points_jobs if j.job_id == loose)
        assert points.dead(loose_job.lease, "invalid_payload", error="bad")
        points.release([j.lease for j in points_jobs if j is not loose_job])
        return Blocked(env, order.order_id, job.job_id, loose)
    finally:
        app.close()


def dead_ids(env: dict[str, str]) -> set[str]:
    listed = run(env, "dlq", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    return {d["job_id"] for d in json.loads(listed.stdout)}


def test_purge_of_a_letter_blocking_an_order_is_refused_with_the_way_out(
    blocked: Blocked,
) -> None:
    proc = run(blocked.env, "dlq", "purge", blocked.blocking_job)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    err = " ".join(proc.stderr.split())
    assert f"order {blocked.order_id}" in err and "nothing was purged" in err
    assert "orders dlq redrive" in err and f"orders cancel {blocked.order_id}" in err
    assert "--force" in err and "Traceback" not in err
    assert dead_ids(blocked.env) == {blocked.blocking_job, blocked.loose_job}


def test_purge_of_all_refuses_when_one_letter_blocks_an_order(blocked: Blocked) -> None:
    proc = run(blocked.env, "dlq", "purge", "--yes")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert dead_ids(blocked.env) == {blocked.blocking_job, blocked.loose_job}
    narrowed = run(blocked.env, "dlq", "purge", "--yes", "--reason", "invalid_payload")
    assert narrowed.returncode == 0, narrowed.stderr
    assert dead_ids(blocked.env) == {blocked.blocking_job}


def test_forced_purge_says_which_order_it_leaves_blocked(blocked: Blocked) -> None:
    proc = run(blocked.env, "dlq", "purge", blocked.blocking_job, "--force")
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert "purged 1 dead letter(s)" in out
    assert f"order {blocked.order_id}" in out and "orders cancel" in out
    assert dead_ids(blocked.env) == {blocked.loose_job}


def test_an_order_left_blocked_without_its_dead_letter_is_found(blocked: Blocked) -> None:
    app = app_for(blocked.env, migrate=False)
    try:
        assert stranded_orders(app.session_factory, app.queues) == []
        assert run(blocked.env, "dlq", "purge", blocked.blocking_job, "--force").returncode == 0
        assert stranded_orders(app.session_factory, app.queues) == [(blocked.order_id, LOGISTICS)]
    finally:
        app.close()


def test_purge_of_all_refuses_before_asking_for_confirmation(blocked: Blocked) -> None:
    proc = subprocess.run(
        [*orders_command(), "dlq", "purge"],
        env=blocked.env,
        input="y\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Delete every matching" not in proc.stdout
    assert f"order {blocked.order_id}" in " ".join(proc.stderr.split())
    assert dead_ids(blocked.env) == {blocked.blocking_job, blocked.loose_job}


WAY_OUT = re.compile(r"orders (?:dlq redrive [0-9a-f]+|outbox retry (?:--all|\d+)|cancel \d+)")


def ways_named(text: str) -> list[str]:
    """The commands a message names, in order, each once."""
    return list(dict.fromkeys(WAY_OUT.findall(" ".join(text.split()))))


def logistics_step_id(env: dict[str, str], order_id: int) -> int:
    app = app_for(env, migrate=False)
    try:
        with app.session_factory() as session:
            return int(
                session.scalar(
                    select(WorkflowStep.id)
                    .join(Workflow, Workflow.id == WorkflowStep.workflow_id)
                    .where(Workflow.subject_id == order_id, WorkflowStep.step == LOGISTICS)
                )
            )
    finally:
        app.close()


def take_way_out(blocked: Blocked, command: str, tmp_path: Path) -> str:
    """Run ``command`` (as named), then a worker, until the order's workflow settles;
    return the order's final status."""
    taken = run(blocked.env, *command.split()[1:])
    assert taken.returncode == 0, taken.stdout + taken.stderr
    env = dict(blocked.env, ORDERS_RELAY_SWEEP_INTERVAL_SECONDS="0.5")
    worker = start_orders(["worker", "--all", "--no-metrics"], env, tmp_path / "worker.log")
    app = app_for(blocked.env, migrate=False)
    try:

        def workflow_done() -> bool:
            with app.session_factory() as session:
                status = session.scalar(
                    select(Workflow.status).where(Workflow.subject_id == blocked.order_id)
                )
            return status == WorkflowStatus.DONE

        wait_until(workflow_done, 60, f"order {blocked.order_id} to settle after {command}")
        with app.session_factory() as session:
            return session.get(Order, blocked.order_id).status
    finally:
        app.close()
        assert stop(worker) == 0, (tmp_path / "worker.log").read_text()[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize(("way", "ends"), [(0, OrderStatus.COMPLETED), (1, "cancelled")])
def test_each_way_out_the_refusal_names_before_a_purge_ends_the_block(
    blocked: Blocked, tmp_path: Path, way: int, ends: str
) -> None:
    refused = run(blocked.env, "dlq", "purge", blocked.blocking_job)
    assert refused.returncode == 1
    step_id = logistics_step_id(blocked.env, blocked.order_id)
    assert ways_named(refused.stderr) == [
        f"orders dlq redrive {blocked.blocking_job}",
        f"orders cancel {blocked.order_id}",
        f"orders outbox retry {step_id}",  # after a forced purge (taken below)
        "orders outbox retry --all",
    ]
    assert take_way_out(blocked, ways_named(refused.stderr)[way], tmp_path) == ends


@pytest.mark.slow
@pytest.mark.parametrize(
    ("way", "ends"), [(0, OrderStatus.COMPLETED), (1, OrderStatus.COMPLETED), (2, "cancelled")]
)
def test_each_way_out_a_forced_purge_names_ends_the_block(
    blocked: Blocked, tmp_path: Path, way: int, ends: str
) -> None:
    """Regression: a forced purge said only `orders cancel` could end the blocked
    order, yet `orders outbox retry --all` ran it to completion."""
    forced = run(blocked.env, "dlq", "purge", blocked.blocking_job, "--force")
    assert forced.returncode == 0, forced.stderr
    step_id = logistics_step_id(blocked.env, blocked.order_id)
    named = ways_named(forced.stdout)
    assert named == [
        f"orders outbox retry {step_id}",
        "orders outbox retry --all",
        f"orders cancel {blocked.order_id}",
    ]
    assert take_way_out(blocked, named[way], tmp_path) == ends
