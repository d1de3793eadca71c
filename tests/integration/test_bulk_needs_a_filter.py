"""A bulk action with an empty filter acts on everything, so it must be asked for as such:
`orders search --cancel` with no filter cancelled every order in flight, with no question.

The CLI wants `--all`, the API `"all": true`, the dashboard's form `all=1` (the dry run's
page sends it when its filter was empty). Refused, nothing is cancelled or redriven and no
audit row is written; a dry run with an empty filter still lists.
"""

from __future__ import annotations

import re

import pytest
from api_world import ApiWorld
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner, Result

from orders.app.placement import place_orders
from orders.cli.main import app
from orders.domain.access import OperatorAction
from orders.domain.models import Order
from workflows.uow import UnitOfWork


def statuses(session_factory) -> dict[int, str]:
    with session_factory() as session:
        return dict(session.execute(select(Order.id, Order.status)).all())


def audit_rows(session_factory) -> int:
    with session_factory() as session:
        return int(session.scalar(select(func.count()).select_from(OperatorAction)) or 0)


def place(world: ApiWorld, customer: int) -> int:
    body = {"customer_id": customer, "lines": [{"part_id": 10, "quantity": 1}]}
    reply = world.client.post("/api/v1/orders", json=body, headers=world.as_role("placer"))
    assert reply.status_code == 201
    return int(reply.json()["id"])


@pytest.mark.parametrize("action", ["cancel", "redrive"])
def test_the_api_refuses_an_unfiltered_action_without_all(api_world: ApiWorld, action: str) -> None:
    orders = [place(api_world, 1), place(api_world, 2)]
    factory = api_world.app.session_factory
    before = audit_rows(factory)
    refused = api_world.client.post(
        f"/api/v1/actions/{action}",
        json={"filter": {}, "dry_run": False},
        headers=api_world.as_role("operator"),
    )
    assert refused.status_code == 422, refused.text
    problem = refused.json()
    assert problem["field"] == "filter" and "all" in problem["detail"]
    assert statuses(factory) == dict.fromkeys(orders, "placed")
    assert audit_rows(factory) == before

    listed = api_world.client.post(
        f"/api/v1/actions/{action}", json={"filter": {}}, headers=api_world.as_role("operator")
    )
    assert listed.status_code == 200 and listed.json()["dry_run"] is True


def test_the_api_cancels_everything_when_asked_with_all(api_world: ApiWorld) -> None:
    orders = [place(api_world, 1), place(api_world, 2)]
    done = api_world.client.post(
        "/api/v1/actions/cancel",
        json={"filter": {}, "dry_run": False, "all": True},
        headers=api_world.as_role("operator"),
    )
    assert done.status_code == 200, done.text
    assert sorted(map(int, done.json()["ids"])) == sorted(orders)
    assert statuses(api_world.app.session_factory) == dict.fromkeys(orders, "cancelled")


def test_the_dashboard_refuses_an_unfiltered_action_and_acts_on_what_its_dry_run_listed(
    api_world: ApiWorld,
) -> None:
    """The dry run's "cancel these now" sent the filter back, so an order placed between
    the dry run and the click was cancelled too (and with an empty filter, every order in
    flight): it now sends the ids it listed, and the action takes those only."""
    orders = [place(api_world, 1), place(api_world, 2)]
    client = api_world.client
    token = api_world.as_role("operator")["Authorization"].removeprefix("Bearer ")
    assert client.post("/login", data={"token": token, "next": "/search"}).status_code == 200
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', client.get("/search").text)
    assert match
    csrf = match.group(1)

    refused = client.post("/search/cancel", data={"csrf": csrf, "dry_run": "0"})
    assert refused.status_code == 400 and "empty filter" in refused.text
    assert statuses(api_world.app.session_factory) == dict.fromkeys(orders, "placed")

    dry = client.post("/search/cancel", data={"csrf": csrf})
    assert dry.status_code == 200
    form = re.search(r'<form method="post" action="/search/cancel".*?</form>', dry.text, re.S)
    assert form
    fields = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', form.group(0))
    assert sorted(int(v) for k, v in fields if k == "ids") == sorted(orders)
    later = place(api_world, 3)  # placed after the dry run: not among "these"
    sent: dict[str, list[str]] = {}
    for name, value in fields:
        sent.setdefault(name, []).append(value)
    done = client.post("/search/cancel", data=sent)
    assert done.status_code == 200 and "Did cancel" in done.text
    assert statuses(api_world.app.session_factory) == {
        **dict.fromkeys(orders, "cancelled"),
        later: "placed",
    }


def test_a_confirmed_dry_run_takes_whole_numbers_only(api_world: ApiWorld) -> None:
    client = api_world.client
    token = api_world.as_role("operator")["Authorization"].removeprefix("Bearer ")
    assert client.post("/login", data={"token": token, "next": "/search"}).status_code == 200
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', client.get("/search").text)
    assert match
    form = {"csrf": match.group(1), "dry_run": "0", "ids": "1 OR 1=1"}
    reply = client.post("/search/cancel", data=form)
    assert reply.status_code == 400 and "ids" in reply.text


@pytest.fixture
def env(cli_env_on_test_db: dict[str, str]) -> dict[str, str]:
    return cli_env_on_test_db


def orders(env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(app, list(args), env=env)


def test_the_cli_refuses_an_unfiltered_cancel_without_all(
    env: dict[str, str],
    session_factory: sessionmaker[Session],
    catalog: dict[int, int],
    make_draft,
) -> None:
    with UnitOfWork(session_factory) as uow:
        placed = place_orders(uow.session, [make_draft(), make_draft()])
        uow.commit()
    ids = [p.order_id for p in placed]

    for action in ("--cancel", "--redrive"):
        refused = orders(env, "search", action)
        assert refused.exit_code == 2, refused.output
        assert "no filter given" in refused.output and "--all" in refused.output
    assert statuses(session_factory) == dict.fromkeys(ids, "placed")
    assert audit_rows(session_factory) == 0

    assert orders(env, "search", "--all").exit_code == 2  # --all goes with an action
    listed = orders(env, "search", "--cancel", "--dry-run")
    assert listed.exit_code == 0 and "would cancel 2" in listed.output

    done = orders(env, "search", "--cancel", "--all")
    assert done.exit_code == 0, done.output
    assert statuses(session_factory) == dict.fromkeys(ids, "cancelled")


def test_a_redrive_limited_to_the_listed_jobs_leaves_the_others_in_the_dlq(
    api_world: ApiWorld,
) -> None:
    """The dashboard's confirmed redrive sends the job ids its dry run listed; a job
    dead-lettered since, matching the same filter, stays in the DLQ."""
    from orders.app.audit import Actor
    from orders.app.bulk import redrive_matching
    from orders.domain.access import ApiOrder
    from orders.domain.handlers import mark_step_dead
    from orders.domain.search import SearchFilter
    from workflows.models import Workflow

    app = api_world.app
    orders = [place(api_world, 1), place(api_world, 2)]
    queue = app.queues["stock"]
    leased = queue.fetch(2).jobs
    assert len(leased) == 2
    for job in leased:
        assert queue.dead(job.lease, "error", error="ValueError: boom")
    with app.session_factory() as session:
        workflows = dict(
            session.execute(
                select(Workflow.subject_id, Workflow.id).where(Workflow.subject_id.in_(orders))
            ).all()
        )
        assert session.scalar(select(func.count()).select_from(ApiOrder)) == 2
    for order_id in orders:
        mark_step_dead(
            app.session_factory, workflows[order_id], "stock", "error", error="ValueError: boom"
        )
    who = Actor("ops", "web", None)
    f = SearchFilter(step="stock")
    listed = redrive_matching(app.session_factory, app.queues, f, actor=who, dry_run=True)
    assert sorted(listed.ids) == sorted(j.job_id for j in leased)
    first = listed.ids[0]
    done = redrive_matching(
        app.session_factory, app.queues, f, actor=who, dry_run=False, only=[first]
    )
    assert done.ids == [first]
    left = {d.job_id for d in queue.dead_letters.list()}
    assert left == {j.job_id for j in leased} - {first}
