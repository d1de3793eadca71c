"""``POST /api/v1/orders`` takes a short way past FastAPI's dependency solving for a
plainly valid request (``orders.web.api.placing.PlacementRoute``): it answers every
request exactly as FastAPI's handling of the declared route does, it is taken only when
nothing but the caller can fail, and it checks and spends the caller's token once."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import fastapi.routing
import pytest
from api_world import ApiWorld
from sqlalchemy import func, select

from orders.domain.models import Order
from orders.web.api import placing

ORDER = {"customer_id": 1, "lines": [{"part_id": 10, "quantity": 2}]}
OTHER = {"customer_id": 2, "lines": [{"part_id": 11, "quantity": 1}]}
JSON = "application/json"
TIMES = ("placed_at", "created_at", "dispatched_at", "started_at", "finished_at", "completed_at")


def post(world: ApiWorld, body: Any, role: str | None = "placer", **headers: str) -> Any:
    """A placement: ``body`` as JSON text (or bytes as they are), the role's token,
    ``Content-Type: application/json`` unless given."""
    sent = {**(world.as_role(role) if role else {}), "Content-Type": JSON, **headers}
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return world.client.post("/api/v1/orders", content=content, headers=sent)


def keyed(key: str) -> dict[str, str]:
    return {"Idempotency-Key": key}


def typed(content_type: str) -> dict[str, str]:
    return {"Content-Type": content_type}


def answer(reply: Any) -> tuple[Any, ...]:
    """What must not differ between the two ways: status, the headers a client reads,
    and the body with the ids and times of the order left out."""
    try:
        body = reply.json()
    except ValueError:
        body = reply.text
    if isinstance(body, dict):
        body = {k: v for k, v in body.items() if k not in ("id", "workflow_id", *TIMES)}
        if "steps" in body:
            body["steps"] = [{k: v for k, v in s.items() if k not in TIMES} for s in body["steps"]]
        if "detail" in body:
            body["detail"] = re.sub(r"order \d+", "order N", body["detail"])
            for error in body.get("errors", []):
                error["message"] = re.sub(r"order \d+", "order N", error["message"])
    headers = {
        name: reply.headers.get(name)
        for name in ("content-type", "idempotent-replayed", "www-authenticate", "retry-after")
    }
    located = re.fullmatch(r"/api/v1/orders/\d+", reply.headers.get("location", "")) is not None
    return reply.status_code, headers, located, body


CASES: dict[str, Callable[[ApiWorld, str], list[Any]]] = {
    "a new order": lambda w, k: [post(w, ORDER)],
    "a key, its replay, its reuse": lambda w, k: [
        post(w, ORDER, **{"Idempotency-Key": k}),
        post(w, ORDER, **{"Idempotency-Key": f'"{k}"'}),
        post(w, OTHER, **{"Idempotency-Key": k}),
    ],
    "a malformed key": lambda w, k: [post(w, ORDER, **{"Idempotency-Key": "has space"})],
    "a key over the header's bound": lambda w, k: [
        post(w, ORDER, **{"Idempotency-Key": "k" * 258})
    ],
    "a charset": lambda w, k: [
        post(w, ORDER, **{"Content-Type": "application/json; charset=utf-8"})
    ],
    "upper case": lambda w, k: [post(w, ORDER, **{"Content-Type": "Application/JSON"})],
    "another JSON type": lambda w, k: [
        post(w, ORDER, **{"Content-Type": "application/vnd.x+json"})
    ],
    "plain text": lambda w, k: [post(w, ORDER, **{"Content-Type": "text/plain"})],
    "no content type": lambda w, k: [
        w.client.post("/api/v1/orders", content=json.dumps(ORDER), headers=w.as_role("placer"))
    ],
    "not JSON": lambda w, k: [post(w, b'{"customer_id": 1,')],
    "not UTF-8": lambda w, k: [post(w, b'{"customer_id": "\xff"}')],
    "an empty body": lambda w, k: [post(w, b"")],
    "JSON null": lambda w, k: [post(w, b"null")],
    "a quantity of 0": lambda w, k: [post(w, {**ORDER, "lines": [{"part_id": 10, "quantity": 0}]})],
    "a number as text": lambda w, k: [post(w, {**ORDER, "customer_id": "1"})],
    "an unknown customer": lambda w, k: [post(w, {**ORDER, "customer_id": 99})],
    "an unknown part": lambda w, k: [post(w, {**ORDER, "lines": [{"part_id": 99, "quantity": 1}]})],
    "no token": lambda w, k: [post(w, ORDER, role=None)],
    "a wrong token": lambda w, k: [post(w, ORDER, role=None, Authorization="Bearer of_nothing")],
    "another scheme": lambda w, k: [post(w, ORDER, role=None, Authorization="Basic eDp5")],
    "a viewer": lambda w, k: [post(w, ORDER, role="viewer")],
    "a viewer with a bad body": lambda w, k: [post(w, {"lines": []}, role="viewer")],
    "no token and a malformed key": lambda w, k: [
        post(w, ORDER, role=None, **{"Idempotency-Key": "has space"})
    ],
    "two keys": lambda w, k: [two_keys(w, k)],
}


def two_keys(world: ApiWorld, key: str) -> Any:
    """A placement with two ``Idempotency-Key`` headers (each well formed)."""
    headers = [
        *world.as_role("placer").items(),
        ("Content-Type", JSON),
        ("Idempotency-Key", f"{key}-1"),
        ("Idempotency-Key", f"{key}-2"),
    ]
    return world.client.post("/api/v1/orders", content=json.dumps(ORDER), headers=headers)


def test_two_idempotency_keys_are_refused_and_place_nothing(api_world: ApiWorld) -> None:
    """The first of two headers was taken as the key, silently; the same two keys
    joined in one header were 422 already."""
    with api_world.app.session_factory() as session:
        before = session.scalar(select(func.count()).select_from(Order))
    reply = two_keys(api_world, "twice")
    assert reply.status_code == 422, reply.text
    assert reply.json()["field"] == "Idempotency-Key"
    with api_world.app.session_factory() as session:
        assert session.scalar(select(func.count()).select_from(Order)) == before


@pytest.mark.parametrize("case", list(CASES))
def test_the_short_way_answers_as_fastapis_handling_of_the_declared_route(
    api_world: ApiWorld, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    with monkeypatch.context() as declared_only:
        declared_only.setattr(placing, "PLAIN_JSON", frozenset())
        declared = [answer(r) for r in CASES[case](api_world, "declared")]
    short = [answer(r) for r in CASES[case](api_world, "short")]
    assert short == declared


def test_a_plain_placement_skips_dependency_solving_and_any_other_request_does_not(
    api_world: ApiWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    solved: list[Any] = []
    real = fastapi.routing.solve_dependencies

    async def counted(**kwargs: Any) -> Any:
        solved.append(kwargs["dependant"].call)
        return await real(**kwargs)

    monkeypatch.setattr(fastapi.routing, "solve_dependencies", counted)
    assert post(api_world, ORDER, **{"Idempotency-Key": "plain"}).status_code == 201
    assert solved == []
    assert post(api_world, ORDER, **{"Content-Type": "text/plain"}).status_code == 415
    assert solved == [placing.place_order]


def test_a_placement_spends_one_request_of_its_tokens_rate(api_world: ApiWorld) -> None:
    buckets = api_world.client.app.api.state.api.auth.buckets  # type: ignore[attr-defined]
    buckets.rate, buckets.burst = 0.001, 2
    replies = [post(api_world, ORDER) for _ in range(3)]
    assert [r.status_code for r in replies] == [201, 201, 429]
    assert replies[2].headers["content-type"] == "application/problem+json"
    assert int(replies[2].headers["retry-after"]) >= 1


def test_a_wrong_token_counts_once_against_the_address_on_either_way(api_world: ApiWorld) -> None:
    throttle = api_world.client.app.api.state.api.auth.throttle  # type: ignore[attr-defined]
    throttle.max_failures = 3
    wrong = {"Authorization": "Bearer of_nothing"}
    replies = [
        post(api_world, ORDER, role=None, **wrong),  # the short way's caller check
        post(api_world, ORDER, role=None, **wrong, **{"Content-Type": "text/plain"}),
        post(api_world, ORDER, role=None, **wrong),
        post(api_world, ORDER),  # the right token, from an address now refused
    ]
    assert [r.status_code for r in replies] == [401, 401, 401, 429]
