"""Each role of a token, allowed and refused, route by route; a placer reads only its own
orders; no token, a revoked token, or a spent rate are refused without writing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from api_world import ENV_TOKEN, ApiWorld
from sqlalchemy import func, select
from starlette.testclient import TestClient

from orders.app.tokens import Caller, revoke_token
from orders.domain.access import OperatorAction, Role
from orders.domain.models import Order
from orders.web.api.auth import TokenLookup
from orders.web.app import create_app
from orders.web.settings import WebSettings
from workflows.uow import UnitOfWork

ORDER = {"customer_id": 1, "lines": [{"part_id": 10, "quantity": 1}]}
DRY = {"filter": {}, "dry_run": True}
ROUTES = {
    # (method, path, body): roles allowed (the others get 403)
    ("POST", "/api/v1/orders", "order"): {Role.PLACER, Role.ADMIN},
    ("GET", "/api/v1/orders/{id}", None): set(Role.ALL),
    ("GET", "/api/v1/orders", None): set(Role.ALL),
    ("GET", "/api/v1/jobs", None): {Role.VIEWER, Role.OPERATOR, Role.ADMIN},
    ("POST", "/api/v1/orders/{id}/cancel", None): {Role.OPERATOR, Role.ADMIN},
    ("POST", "/api/v1/actions/cancel", "dry"): {Role.OPERATOR, Role.ADMIN},
    ("POST", "/api/v1/actions/redrive", "dry"): {Role.OPERATOR, Role.ADMIN},
    ("GET", "/api/v1/audit", None): {Role.VIEWER, Role.OPERATOR, Role.ADMIN},
}


def call(world: ApiWorld, route: tuple[str, str, str | None], order_id: int, headers: dict):
    method, path, body = route
    json = {"order": ORDER, "dry": DRY, None: None}[body]
    return world.client.request(method, path.format(id=order_id), json=json, headers=headers)


@pytest.mark.parametrize("route", list(ROUTES), ids=[f"{m} {p}" for m, p, _ in ROUTES])
def test_each_role_is_allowed_or_refused_as_the_table_says(
    api_world: ApiWorld, route: tuple[str, str, str | None]
) -> None:
    order_id = call(api_world, list(ROUTES)[0], 0, api_world.as_role("placer")).json()["id"]
    for role in Role.ALL:
        reply = call(api_world, route, order_id, api_world.as_role(role))
        if role in ROUTES[route]:
            assert reply.status_code < 400, (role, reply.text)
        else:
            assert reply.status_code == 403, (role, reply.status_code)
            assert reply.json()["field"] == "Authorization"
    assert call(api_world, route, order_id, {}).status_code == 401
    assert call(api_world, route, order_id, {"Authorization": "Bearer of_nope"}).status_code == 401
    assert call(api_world, route, order_id, api_world.as_role("env")).status_code < 400


def test_a_placer_reads_only_its_own_orders(api_world: ApiWorld) -> None:
    mine = api_world.client.post("/api/v1/orders", json=ORDER, headers=api_world.as_role("placer"))
    theirs = api_world.client.post("/api/v1/orders", json=ORDER, headers=api_world.as_role("other"))
    me = api_world.as_role("placer")
    assert api_world.client.get(mine.headers["location"], headers=me).status_code == 200
    hidden = api_world.client.get(theirs.headers["location"], headers=me)
    assert hidden.status_code == 404  # not 403: another shop's order ids are not confirmed
    listed = api_world.client.get("/api/v1/orders", headers=me).json()["items"]
    assert [o["id"] for o in listed] == [mine.json()["id"]]
    everyone = api_world.client.get("/api/v1/orders", headers=api_world.as_role("viewer"))
    assert len(everyone.json()["items"]) == 2


def test_a_revoked_token_is_refused(api_world: ApiWorld, tmp_path: Path) -> None:
    with UnitOfWork(api_world.app.session_factory) as uow:
        revoke_token(uow.session, Role.PLACER)
        uow.commit()
    web = create_app(
        api_world.app, WebSettings(token=ENV_TOKEN), multiproc=tmp_path / "m2", sample=False
    )
    with TestClient(web, base_url="http://127.0.0.1:8080") as client:
        reply = client.post("/api/v1/orders", json=ORDER, headers=api_world.as_role("placer"))
    assert reply.status_code == 401
    with api_world.app.session_factory() as session:
        assert session.scalar(select(func.count()).select_from(Order)) == 0


def test_past_its_rate_a_token_gets_429_with_retry_after(
    api_world: ApiWorld, tmp_path: Path
) -> None:
    settings = WebSettings(token=ENV_TOKEN, api_rate_per_second=0.01, api_burst=2)
    web = create_app(api_world.app, settings, multiproc=tmp_path / "m3", sample=False)
    viewer = api_world.as_role("viewer")
    with TestClient(web, base_url="http://127.0.0.1:8080") as client:
        replies = [client.get("/api/v1/orders", headers=viewer) for _ in range(3)]
        other = client.get("/api/v1/orders", headers=api_world.as_role("operator"))
    assert [r.status_code for r in replies] == [200, 200, 429]
    assert int(replies[2].headers["retry-after"]) >= 1
    assert replies[2].headers["content-type"] == "application/problem+json"
    assert other.status_code == 200  # per token


def test_api_cancel_and_bulk_actions_leave_audit_rows_with_the_request_id(
    api_world: ApiWorld,
) -> None:
    order = api_world.client.post("/api/v1/orders", json=ORDER, headers=api_world.as_role("placer"))
    operator = {**api_world.as_role("operator"), "X-Request-ID": "req-42"}
    api_world.client.post(f"{order.headers['location']}/cancel", headers=operator)
    api_world.client.post("/api/v1/actions/redrive", json=DRY, headers=operator)
    with api_world.app.session_factory() as session:
        rows = session.scalars(select(OperatorAction).order_by(OperatorAction.id)).all()
    assert [(r.actor, r.source, r.action, r.dry_run, r.request_id) for r in rows] == [
        ("operator", "api", "cancel", False, "req-42"),
        ("operator", "api", "redrive", True, "req-42"),
    ]
    assert "of_" not in " ".join(r.target + r.result for r in rows)  # no token text


def test_a_revoked_token_is_refused_within_the_lookups_ttl(api_world: ApiWorld) -> None:
    """A token found is remembered for ``ttl`` seconds (one database read per token a
    second, not per request): a revocation takes effect within that bound."""
    now = [100.0]
    lookup = TokenLookup(api_world.app.session_factory, None, ttl=1.0, clock=lambda: now[0])
    text = api_world.as_role("placer")["Authorization"].removeprefix("Bearer ")
    assert lookup(text) == Caller(Role.PLACER, Role.PLACER)
    with UnitOfWork(api_world.app.session_factory) as uow:
        revoke_token(uow.session, Role.PLACER)
        uow.commit()
    now[0] += 0.99
    assert lookup(text) is not None  # remembered: within the bound
    now[0] += 0.02
    assert lookup(text) is None  # past the ttl: read again, revoked


def test_the_lookup_tells_what_it_remembers_without_reading_the_database(
    api_world: ApiWorld,
) -> None:
    """The API checks a remembered token on its event loop and reads an unknown one in
    a thread: ``remembered`` says which, and never reads the database itself."""
    now = [100.0]
    reads = [0]

    def counted_sessions() -> Any:
        reads[0] += 1
        return api_world.app.session_factory()

    lookup = TokenLookup(counted_sessions, None, ttl=1.0, clock=lambda: now[0])
    text = api_world.as_role("placer")["Authorization"].removeprefix("Bearer ")
    assert lookup.remembered(text) == (False, None)  # only the database can say
    assert lookup(text) == Caller(Role.PLACER, Role.PLACER)
    assert lookup.remembered(text) == (True, Caller(Role.PLACER, Role.PLACER))
    assert lookup("of_nothing") is None
    assert lookup.remembered("of_nothing") == (True, None)  # a refusal is remembered too
    now[0] += 1.01
    assert lookup.remembered(text) == (False, None)
    assert reads[0] == 2
