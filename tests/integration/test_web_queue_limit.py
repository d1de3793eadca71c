"""The dashboard's queue page shows a step's rate limit and sets, changes and clears it
with a token-protected action: refused without a session's CSRF token, cross-site, or
for a limit that does not parse, changing nothing (ADR 0032)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from sqlalchemy import Engine
from starlette.testclient import TestClient

from orders.app.audit import recent_actions
from orders.app.bootstrap import App, build
from orders.app.settings import Settings
from orders.web.app import create_app
from orders.web.settings import WebSettings
from reliable_queue.rate_limits import RateLimit

TOKEN = "correct horse battery staple"


@pytest.fixture
def app(
    engine: Engine, redis_client: redis.Redis, key_prefix: str, tmp_path: Path
) -> Iterator[App]:
    settings = Settings(data_dir=tmp_path / "data", queue_prefix=key_prefix)
    built = build(settings, redis_override=redis_client, engine_override=engine)
    try:
        yield built
    finally:
        built.close()


@pytest.fixture
def client(app: App, tmp_path: Path) -> Iterator[TestClient]:
    web = create_app(app, WebSettings(token=TOKEN, sample_seconds=0.2), multiproc=tmp_path / "m")
    with TestClient(web, base_url="http://127.0.0.1:8080", client=("127.0.0.1", 50000)) as c:
        yield c


def sign_in(client: TestClient) -> str:
    """Sign in; return the CSRF token the queue page's forms carry."""
    reply = client.post("/login", data={"token": TOKEN, "next": "/queues/notification"})
    assert reply.status_code == 200, reply.text
    page = client.get("/queues/notification").text
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found
    return found.group(1)


def test_set_change_and_clear_a_limit_from_the_queue_page(client: TestClient, app: App) -> None:
    queue = app.queues["notification"]
    page = client.get("/queues/notification").text
    assert "No rate limit" in page and 'id="limit-form"' not in page  # signed out
    csrf = sign_in(client)

    set_ = client.post(
        "/queues/notification/limit", data={"csrf": csrf, "limit": "200/s"}, follow_redirects=False
    )
    assert set_.status_code == 303 and set_.headers["location"] == "/queues/notification"
    assert queue.rate_limit() == RateLimit(200, 1000)
    page = client.get("/queues/notification").text
    assert "200/s" in page and 'id="clear-limit"' in page

    client.post("/queues/notification/limit", data={"csrf": csrf, "limit": "1/2s"})
    assert queue.rate_limit() == RateLimit(1, 2000)

    cleared = client.post(
        "/queues/notification/limit", data={"csrf": csrf, "clear": "1"}, follow_redirects=False
    )
    assert cleared.status_code == 303 and queue.rate_limit() is None
    assert "No rate limit" in client.get("/queues/notification").text


@pytest.mark.parametrize("spec", ["0/s", "-1/s", "nan/s", "abc", "", "1/x"])
def test_a_bad_limit_from_the_page_is_refused_and_changes_nothing(
    client: TestClient, app: App, spec: str
) -> None:
    queue = app.queues["notification"]
    queue.set_limit(5, 1)
    csrf = sign_in(client)
    reply = client.post("/queues/notification/limit", data={"csrf": csrf, "limit": spec})
    assert reply.status_code == 400
    assert queue.rate_limit() == RateLimit(5, 1000)


def test_limit_actions_are_refused_without_csrf_or_cross_site(client: TestClient, app: App) -> None:
    queue = app.queues["notification"]
    assert client.post("/queues/notification/limit", data={"limit": "1/s"}).status_code == 401
    csrf = sign_in(client)
    assert client.post("/queues/notification/limit", data={"limit": "1/s"}).status_code == 403
    bad = client.post("/queues/notification/limit", data={"csrf": "0" * 64, "clear": "1"})
    assert bad.status_code == 403
    cross = client.post(
        "/queues/notification/limit",
        data={"csrf": csrf, "limit": "1/s"},
        headers={"Origin": "http://evil.example"},
    )
    assert cross.status_code == 403
    assert client.post("/queues/nosuch/limit", data={"csrf": csrf}).status_code == 404
    assert queue.rate_limit() is None


def test_set_and_clear_a_per_customer_cap_from_the_queue_page(client: TestClient, app: App) -> None:
    queue = app.queues["notification"]
    assert "No per-customer cap" in client.get("/queues/notification").text
    csrf = sign_in(client)
    for bad in ("0", "-1", "x", "", "1000000"):
        reply = client.post("/queues/notification/cap", data={"csrf": csrf, "cap": bad})
        assert reply.status_code == 400, bad
    assert queue.key_cap() is None
    assert client.post("/queues/notification/cap", data={"cap": "2"}).status_code == 403
    done = client.post(
        "/queues/notification/cap", data={"csrf": csrf, "cap": "2"}, follow_redirects=False
    )
    assert done.status_code == 303 and queue.key_cap() == 2
    assert 'id="clear-cap"' in client.get("/queues/notification").text
    client.post("/queues/notification/cap", data={"csrf": csrf, "clear": "1"})
    assert queue.key_cap() is None


def test_limit_and_cap_actions_from_the_page_each_leave_one_audit_row(
    client: TestClient, app: App
) -> None:
    csrf = sign_in(client)
    for form in (
        {"limit": "200/s"},
        {"clear": "1"},
    ):
        reply = client.post("/queues/notification/limit", data={"csrf": csrf, **form})
        assert reply.status_code == 200, reply.text
    for form in ({"cap": "2"}, {"clear": "1"}):
        reply = client.post("/queues/notification/cap", data={"csrf": csrf, **form})
        assert reply.status_code == 200, reply.text
    # refused or bad input writes no row
    assert client.post("/queues/notification/cap", data={"cap": "3"}).status_code == 403
    assert (
        client.post("/queues/notification/limit", data={"csrf": csrf, "limit": "0/s"}).status_code
        == 400
    )
    with app.session_factory() as session:
        rows = list(reversed(recent_actions(session)))
    assert [(r.action, r.source, r.target, r.count) for r in rows] == [
        ("limit", "web", {"step": "notification", "limit": "200/s"}, 1),
        ("limit", "web", {"step": "notification", "limit": None}, 1),
        ("cap", "web", {"step": "notification", "cap": 2}, 1),
        ("cap", "web", {"step": "notification", "cap": None}, 1),
    ]
