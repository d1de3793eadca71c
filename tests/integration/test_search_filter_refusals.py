"""A search filter the database cannot answer is bad input, refused before any query: text
holding a NUL (PostgreSQL text cannot hold one; SQLite's LIKE ends the pattern there and
finds unrelated rows) and a DLQ reason no dead letter carries.
The CLI exits 2, the API answers 422 and the dashboard 400, each naming the field, and a
bulk action acts on nothing and leaves no audit row. On SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re

import pytest
from api_world import ApiWorld
from sqlalchemy import func, select
from typer.testing import CliRunner, Result

from orders.cli.main import app
from orders.domain.access import OperatorAction
from orders.domain.handlers import StepRequest, handle_step, mark_step_dead
from orders.domain.models import Order
from reliable_queue import DEAD_REASONS
from workflows.models import Workflow

WITH_NUL = ["\x00", "time\x00out"]
"""Error texts holding a NUL, alone and inside text a step's error does hold."""


def orders(env: dict[str, str], *args: str) -> Result:
    """The CLI in this process: a NUL cannot be passed in a real process's arguments."""
    return CliRunner().invoke(app, list(args), env=env)


@pytest.fixture
def env(cli_env_on_test_db: dict[str, str]) -> dict[str, str]:
    return cli_env_on_test_db


@pytest.fixture
def blocked(api_world: ApiWorld) -> int:
    """An order blocked on logistics dead-lettered with an error text (cancellable): what
    a filter that is ignored, rather than refused, finds and acts on."""
    body = {"customer_id": 2, "lines": [{"part_id": 10, "quantity": 1}]}
    reply = api_world.client.post("/api/v1/orders", json=body, headers=api_world.as_role("placer"))
    assert reply.status_code == 201, reply.text
    order = int(reply.json()["id"])
    factory = api_world.app.session_factory
    with factory() as session:
        workflow = session.scalar(select(Workflow.id).where(Workflow.subject_id == order))
    assert workflow is not None
    handle_step(factory, StepRequest(workflow, order, "stock"))
    assert mark_step_dead(
        factory, workflow, "logistics", "error", error="TimeoutError: no answer", attempts=5
    )
    return order


def state(world: ApiWorld, order: int) -> tuple[str, int]:
    """The order's status and how many audit rows there are."""
    with world.app.session_factory() as session:
        status = session.get(Order, order).status
        rows = session.scalar(select(func.count()).select_from(OperatorAction))
    return status, int(rows or 0)


def refused_422(reply, field: str) -> str:
    """Assert a 422 problem naming ``field``; return its detail."""
    assert reply.status_code == 422, reply.text
    problem = reply.json()
    assert problem["field"] == field, problem
    return str(problem["detail"])


@pytest.mark.parametrize("text", WITH_NUL)
def test_the_api_refuses_error_text_with_a_nul_and_acts_on_nothing(
    api_world: ApiWorld, blocked: int, text: str
) -> None:
    client, operator = api_world.client, api_world.as_role("operator")
    before = state(api_world, blocked)
    assert before[0] == "placed"
    for path in ("/api/v1/orders", "/api/v1/jobs"):
        reply = client.get(path, params={"error": text}, headers=operator)
        detail = refused_422(reply, "error")
        assert "\x00" not in reply.text and "\\u0000" not in reply.text and "NUL" in detail
    for action in ("cancel", "redrive"):
        body = {"filter": {"error": text}, "dry_run": False}
        reply = client.post(f"/api/v1/actions/{action}", json=body, headers=operator)
        refused_422(reply, "filter.error")
    assert state(api_world, blocked) == before  # not cancelled, no audit row


@pytest.mark.parametrize("text", WITH_NUL)
def test_the_cli_refuses_error_text_with_a_nul_with_exit_2(
    api_world: ApiWorld, blocked: int, env: dict[str, str], text: str
) -> None:
    before = state(api_world, blocked)
    for extra in ((), ("--jobs",), ("--cancel",), ("--redrive",)):
        result = orders(env, "search", "--error", text, *extra)
        assert result.exit_code == 2, (extra, result.output)
        assert "--error" in result.output and text not in result.output
    assert state(api_world, blocked) == before


def test_the_dashboard_refuses_a_nul_in_error_text(api_world: ApiWorld, blocked: int) -> None:
    client = api_world.client
    before = state(api_world, blocked)
    found = client.get("/search", params={"error": "\x00", "kind": "jobs"})
    assert found.status_code == 400 and "error" in found.text and "NUL" in found.text
    token = api_world.as_role("operator")["Authorization"].removeprefix("Bearer ")
    signed_in = client.post(
        "/login", data={"token": token, "next": "/search"}, follow_redirects=False
    )
    assert signed_in.status_code == 303, signed_in.text
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', client.get("/search").text)
    assert csrf
    form = {"error": "\x00", "dry_run": "0", "csrf": csrf.group(1)}
    for action in ("cancel", "redrive"):
        acted = client.post(f"/search/{action}", data=form)
        assert acted.status_code == 400 and "NUL" in acted.text
    assert state(api_world, blocked) == before


def test_an_unknown_dlq_reason_is_refused_naming_the_reasons(
    api_world: ApiWorld, blocked: int, env: dict[str, str]
) -> None:
    client, operator = api_world.client, api_world.as_role("operator")
    before = state(api_world, blocked)
    for path in ("/api/v1/orders", "/api/v1/jobs"):
        reply = client.get(path, params={"dlq_reason": "bogus"}, headers=operator)
        detail = refused_422(reply, "dlq_reason")
        assert all(reason in detail for reason in DEAD_REASONS), detail
    for action in ("cancel", "redrive"):
        body = {"filter": {"dlq_reason": "bogus"}, "dry_run": False}
        reply = client.post(f"/api/v1/actions/{action}", json=body, headers=operator)
        refused_422(reply, "filter.dlq_reason")
    page = client.get("/search", params={"dlq_reason": "bogus"})
    assert page.status_code == 400 and "dlq_reason" in page.text
    for extra in ((), ("--jobs",), ("--cancel",), ("--redrive", "--dry-run")):
        result = orders(env, "search", "--dlq-reason", "bogus", *extra)
        assert result.exit_code == 2, (extra, result.output)
        assert "--dlq-reason" in result.output
        assert all(reason in result.output for reason in DEAD_REASONS), result.output
    assert state(api_world, blocked) == before


def test_every_dlq_reason_a_dead_letter_carries_is_a_filter(
    api_world: ApiWorld, blocked: int, env: dict[str, str]
) -> None:
    operator = api_world.as_role("operator")
    for reason in DEAD_REASONS:
        reply = api_world.client.get(
            "/api/v1/orders", params={"dlq_reason": reason}, headers=operator
        )
        assert reply.status_code == 200, reply.text
        found = [item["id"] for item in reply.json()["items"]]
        assert found == ([blocked] if reason == "error" else [])
    page = api_world.client.get("/search", params={"dlq_reason": "error"})
    assert page.status_code == 200 and f'href="/orders/{blocked}"' in page.text
    assert "<option selected>error</option>" in page.text  # the form offers the reasons
    assert all(f"<option >{r}</option>" in page.text for r in DEAD_REASONS if r != "error")
    result = orders(env, "search", "--dlq-reason", "error", "--json")
    assert result.exit_code == 0, result.output
    assert [item["order_id"] for item in json.loads(result.stdout)["items"]] == [blocked]
