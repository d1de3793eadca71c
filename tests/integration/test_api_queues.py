"""``/api/v1/queues``: flow control over HTTP as the CLI verbs do it — pause with who and
why, resume, a rate limit and a per-customer cap set and cleared — read by every role
that reads, changed by an operator only, each change leaving one audit row; bad input
is a problem naming its field and changes nothing."""

from __future__ import annotations

import pytest
from api_world import ApiWorld
from sqlalchemy import select

from orders.domain.access import OperatorAction, Role
from reliable_queue.rate_limits import RateLimit

OPERATORS = {Role.OPERATOR, Role.ADMIN}
ROUTES = [
    # (method, path, body, roles allowed): the others get 403
    ("GET", "/api/v1/queues", None, {Role.VIEWER, Role.OPERATOR, Role.ADMIN}),
    ("POST", "/api/v1/queues/points/pause", {"reason": "provider down"}, OPERATORS),
    ("POST", "/api/v1/queues/points/resume", None, OPERATORS),
    ("POST", "/api/v1/queues/points/limit", {"limit": "5/s"}, OPERATORS),
    ("POST", "/api/v1/queues/points/cap", {"cap": 2}, OPERATORS),
]


def audit_rows(world: ApiWorld) -> list[tuple]:
    with world.app.session_factory() as session:
        rows = session.scalars(select(OperatorAction).order_by(OperatorAction.id)).all()
        return [(r.actor, r.source, r.action, r.target, r.count, r.request_id) for r in rows]


@pytest.mark.parametrize("route", ROUTES, ids=[f"{r[0]} {r[1]}" for r in ROUTES])
def test_viewers_read_operators_act_placers_are_refused(api_world: ApiWorld, route) -> None:
    method, path, body, allowed = route
    for role in Role.ALL:
        reply = api_world.client.request(method, path, json=body, headers=api_world.as_role(role))
        if role in allowed:
            assert reply.status_code == 200, (role, reply.text)
        else:
            assert reply.status_code == 403, (role, reply.status_code)
            assert reply.json()["field"] == "Authorization"
    assert api_world.client.request(method, path, json=body).status_code == 401
    if method == "POST":  # one row per allowed call, none for a refusal
        assert [r[0] for r in audit_rows(api_world)] == ["operator", "admin"]


def test_pause_resume_limit_and_cap_through_the_api(api_world: ApiWorld) -> None:
    queue = api_world.app.queues["notification"]
    operator = {**api_world.as_role("operator"), "X-Request-ID": "req-7"}
    client = api_world.client

    paused = client.post(
        "/api/v1/queues/notification/pause", json={"reason": "mail relay down"}, headers=operator
    )
    assert paused.status_code == 200, paused.text
    state = paused.json()["queue"]
    assert paused.json()["changed"] is True
    assert state["paused"]["by"] == "operator" and state["paused"]["reason"] == "mail relay down"
    assert state["paused"]["since"] is not None
    assert queue.paused() is not None

    limited = client.post(
        "/api/v1/queues/notification/limit", json={"limit": "1/2s"}, headers=operator
    )
    assert limited.status_code == 200, limited.text
    assert limited.json()["queue"]["limit"] == {"n": 1, "per_seconds": 2.0, "text": "1/2s"}
    assert queue.rate_limit() == RateLimit(1, 2000)
    capped = client.post("/api/v1/queues/notification/cap", json={"cap": 3}, headers=operator)
    assert capped.status_code == 200 and capped.json()["queue"]["cap"] == 3

    listed = client.get("/api/v1/queues", headers=api_world.as_role("viewer"))
    assert listed.status_code == 200
    by_name = {q["name"]: q for q in listed.json()["items"]}
    assert by_name["notification"]["paused"]["reason"] == "mail relay down"
    assert by_name["notification"]["limit"]["text"] == "1/2s"
    assert by_name["notification"]["cap"] == 3
    assert by_name["stock"]["paused"] is None and by_name["stock"]["limit"] is None
    assert set(by_name["stock"]["depth"]) == {"ready", "delayed", "active", "dead"}

    for path, body in (("limit", {"clear": True}), ("cap", {"clear": True})):
        reply = client.post(f"/api/v1/queues/notification/{path}", json=body, headers=operator)
        assert reply.status_code == 200 and reply.json()["changed"] is True
    resumed = client.post("/api/v1/queues/notification/resume", headers=operator)
    assert resumed.json()["changed"] is True and resumed.json()["queue"]["paused"] is None
    again = client.post("/api/v1/queues/notification/resume", headers=operator)
    assert again.status_code == 200 and again.json()["changed"] is False
    assert queue.rate_limit() is None and queue.key_cap() is None

    assert audit_rows(api_world) == [
        ("operator", "api", a, t, c, "req-7")
        for a, t, c in [
            ("pause", '{"reason": "mail relay down", "steps": ["notification"]}', 1),
            ("limit", '{"limit": "1/2s", "step": "notification"}', 1),
            ("cap", '{"cap": 3, "step": "notification"}', 1),
            ("limit", '{"limit": null, "step": "notification"}', 1),
            ("cap", '{"cap": null, "step": "notification"}', 1),
            ("resume", '{"steps": ["notification"]}', 1),
            ("resume", '{"steps": ["notification"]}', 0),
        ]
    ]


def test_a_pause_without_a_body_has_no_reason(api_world: ApiWorld) -> None:
    reply = api_world.client.post(
        "/api/v1/queues/stock/pause", headers=api_world.as_role("operator")
    )
    assert reply.status_code == 200, reply.text
    assert reply.json()["queue"]["paused"]["reason"] == ""


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("nosuch/pause", None, "step"),
        ("points/limit", {"limit": "0/s"}, "limit"),
        ("points/limit", {"limit": "abc"}, "limit"),
        ("points/limit", {"limit": "nan/s"}, "limit"),
        ("points/limit", {}, "body"),
        ("points/limit", {"limit": "5/s", "clear": True}, "body"),
        ("points/cap", {"cap": 0}, "cap"),
        ("points/cap", {"cap": 100001}, "cap"),
        ("points/cap", {"cap": "2"}, "cap"),
        ("points/cap", {}, "body"),
        ("points/pause", {"reason": "x" * 1000}, "reason"),
        ("points/pause", {"why": "x"}, "why"),
    ],
)
def test_bad_input_is_a_problem_naming_its_field_and_changes_nothing(
    api_world: ApiWorld, path: str, body, field: str
) -> None:
    reply = api_world.client.post(
        f"/api/v1/queues/{path}", json=body, headers=api_world.as_role("operator")
    )
    assert reply.status_code in (404, 422), reply.text
    assert reply.json()["field"] == field
    queue = api_world.app.queues["points"]
    assert queue.paused() is None and queue.rate_limit() is None and queue.key_cap() is None
    assert audit_rows(api_world) == []


def test_the_openapi_document_carries_the_queue_models(api_world: ApiWorld) -> None:
    document = api_world.client.get("/api/v1/openapi.json").json()
    for path in ("/api/v1/queues", "/api/v1/queues/{step}/pause", "/api/v1/queues/{step}/cap"):
        assert path in document["paths"]
    assert {"LimitIn", "CapIn", "PauseIn", "QueueOut", "QueuesOut"} <= set(
        document["components"]["schemas"]
    )
