"""The dashboard's search page, its bulk actions (dry run first) and the audit page, signed
in with named tokens whose roles decide what they may do."""

from __future__ import annotations

import re

from api_world import ApiWorld
from starlette.testclient import TestClient

from orders.domain.models import Order


def sign_in_as(client: TestClient, authorization: str) -> str:
    """Sign in with a bearer header's token; return the search page's CSRF token."""
    token = authorization.removeprefix("Bearer ")
    reply = client.post("/login", data={"token": token, "next": "/search"}, follow_redirects=False)
    assert reply.status_code == 303, reply.text
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', client.get("/search").text)
    assert match
    return match.group(1)


def place(world: ApiWorld, customer: int) -> int:
    body = {"customer_id": customer, "lines": [{"part_id": 10, "quantity": 1}]}
    reply = world.client.post("/api/v1/orders", json=body, headers=world.as_role("placer"))
    assert reply.status_code == 201
    return int(reply.json()["id"])


def test_search_then_cancel_with_a_dry_run_leaves_one_audit_row_each(api_world: ApiWorld) -> None:
    mine, other = place(api_world, 2), place(api_world, 3)
    client = api_world.client
    found = client.get("/search?status=placed&customer_id=2")
    assert found.status_code == 200
    assert f'href="/orders/{mine}"' in found.text and f'href="/orders/{other}"' not in found.text
    csrf = sign_in_as(client, api_world.as_role("operator")["Authorization"])
    form = {"customer_id": "2", "csrf": csrf}
    dry = client.post("/search/cancel", data=form)  # no dry_run field: only lists
    assert dry.status_code == 200 and "Would cancel" in dry.text
    done = client.post("/search/cancel", data={**form, "dry_run": "0"})
    assert done.status_code == 200 and "Did cancel" in done.text
    with api_world.app.session_factory() as session:
        assert session.get(Order, mine).status == "cancelled"
        assert session.get(Order, other).status == "placed"
    audit = client.get("/audit").text
    assert audit.count("<td>operator</td><td>web</td><td>cancel</td>") == 2
    assert "signed in as operator" in audit


def test_a_viewer_signed_in_may_read_but_not_act(api_world: ApiWorld) -> None:
    order = place(api_world, 2)
    client = api_world.client
    csrf = sign_in_as(client, api_world.as_role("viewer")["Authorization"])
    refused = client.post(f"/orders/{order}/cancel", data={"csrf": csrf})
    assert refused.status_code == 403 and "may not" in refused.text
    assert client.post("/search/cancel", data={"csrf": csrf, "dry_run": "0"}).status_code == 403
    with api_world.app.session_factory() as session:
        assert session.get(Order, order).status == "placed"


def test_a_bad_search_filter_is_a_400_naming_it(api_world: ApiWorld) -> None:
    reply = api_world.client.get("/search?step_state=sleeping")
    assert reply.status_code == 400 and "step_state" in reply.text
