"""The dashboard's queue page shows a pause (who, why, since) and pauses / resumes the
queue with a token-protected action: refused without a session's CSRF token or
cross-site, like the DLQ actions (ADR 0031)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from sqlalchemy import Engine
from starlette.testclient import TestClient

from orders.app.bootstrap import App, build
from orders.app.settings import Settings
from orders.web.app import create_app
from orders.web.settings import WebSettings
from reliable_queue.pausing import MAX_REASON_CHARS

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
    reply = client.post("/login", data={"token": TOKEN, "next": "/queues/points"})
    assert reply.status_code == 200, reply.text
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', client.get("/queues/points").text)
    assert found
    return found.group(1)


def test_pause_and_resume_from_the_queue_page(client: TestClient, app: App) -> None:
    queue = app.queues["points"]
    assert 'id="pause-form"' not in client.get("/queues/points").text  # signed out
    csrf = sign_in(client)

    hostile = "carrier down \x1b[2J<script>x</script>"
    paused = client.post(
        "/queues/points/pause", data={"csrf": csrf, "reason": hostile}, follow_redirects=False
    )
    assert paused.status_code == 303 and paused.headers["location"] == "/queues/points"
    state = queue.paused()
    assert state is not None and state.reason == hostile and state.by == "dashboard"
    page = client.get("/queues/points").text
    assert 'id="paused"' in page and "carrier down" in page and 'id="resume-form"' in page
    assert "\x1b" not in page and "<script>x" not in page and "\\x1b[2J" in page

    resumed = client.post("/queues/points/resume", data={"csrf": csrf}, follow_redirects=False)
    assert resumed.status_code == 303 and queue.paused() is None
    assert 'id="paused"' not in client.get("/queues/points").text


def test_pause_actions_are_refused_without_csrf_cross_site_or_too_long(
    client: TestClient, app: App
) -> None:
    queue = app.queues["points"]
    assert client.post("/queues/points/pause", data={}).status_code == 401  # not signed in
    csrf = sign_in(client)
    assert client.post("/queues/points/pause", data={"reason": "x"}).status_code == 403
    assert client.post("/queues/points/pause", data={"csrf": "0" * 64}).status_code == 403
    cross = client.post(
        "/queues/points/pause", data={"csrf": csrf}, headers={"Origin": "http://evil.example"}
    )
    assert cross.status_code == 403
    long = client.post(
        "/queues/points/pause", data={"csrf": csrf, "reason": "x" * (MAX_REASON_CHARS + 1)}
    )
    assert long.status_code == 400
    assert client.post("/queues/nosuch/pause", data={"csrf": csrf}).status_code == 404
    assert queue.paused() is None
    queue.pause(reason="by the CLI")
    assert client.post("/queues/points/resume", data={"csrf": "0" * 64}).status_code == 403
    assert queue.paused() is not None
