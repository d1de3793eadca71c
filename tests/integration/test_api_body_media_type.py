"""A request body must be sent as ``application/json``: a body of another media type is
415 naming ``Content-Type`` and changes nothing. FastAPI does not read such a body at
all, so a pause's reason sent as ``text/plain`` was silently dropped (the queue paused
without it), and a required body was refused as a missing field (422)."""

from __future__ import annotations

import json

import pytest
from api_world import ApiWorld
from sqlalchemy import func, select

from orders.domain.access import OperatorAction

ROUTES = [
    ("/api/v1/queues/points/pause", {"reason": "provider down"}),
    ("/api/v1/queues/points/limit", {"limit": "5/s"}),
    ("/api/v1/queues/points/cap", {"cap": 2}),
    ("/api/v1/actions/cancel", {"filter": {"customer_id": 1}, "dry_run": False}),
    ("/api/v1/actions/redrive", {"filter": {"customer_id": 1}, "dry_run": False}),
]


def audit_rows(world: ApiWorld) -> int:
    with world.app.session_factory() as session:
        return int(session.scalar(select(func.count()).select_from(OperatorAction)) or 0)


@pytest.mark.parametrize(("path", "body"), ROUTES, ids=[r[0] for r in ROUTES])
def test_a_body_that_is_not_json_is_a_415_and_changes_nothing(
    api_world: ApiWorld, path: str, body: dict
) -> None:
    headers = {**api_world.as_role("operator"), "Content-Type": "text/plain"}
    reply = api_world.client.post(path, content=json.dumps(body), headers=headers)
    assert reply.status_code == 415, reply.text
    assert reply.json()["field"] == "Content-Type"
    queue = api_world.app.queues["points"]
    assert queue.paused() is None and queue.rate_limit() is None and queue.key_cap() is None
    assert audit_rows(api_world) == 0


def test_a_pause_without_a_body_still_pauses(api_world: ApiWorld) -> None:
    reply = api_world.client.post(
        "/api/v1/queues/points/pause", headers=api_world.as_role("operator")
    )
    assert reply.status_code == 200, reply.text
    assert api_world.app.queues["points"].paused() is not None
