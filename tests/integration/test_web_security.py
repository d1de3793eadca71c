"""The dashboard against browser-borne and local attacks: security headers on every
route, a Host allow-list (DNS rebinding), body limits before parsing, a minimum
token length, throttled sign-in, sessions revoked at sign-out, no caching."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from sqlalchemy import Engine
from starlette.routing import Mount, Route
from starlette.testclient import TestClient
from typer.testing import CliRunner

from orders.app.bootstrap import App, build
from orders.app.settings import Settings
from orders.cli.main import app as cli
from orders.web.app import create_app
from orders.web.protect import CSP, Protect, allowed_hosts
from orders.web.security import COOKIE, SignInThrottle, WeakToken
from orders.web.settings import WebSettings

TOKEN = "correct horse battery staple"
BASE = "http://127.0.0.1:8080"
LOCAL = ("127.0.0.1", 50000)


class FakeClock:
    """Monotonic seconds that move only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def orders_app(
    engine: Engine, redis_client: redis.Redis, key_prefix: str, tmp_path: Path
) -> Iterator[App]:
    settings = Settings(data_dir=tmp_path / "data", queue_prefix=key_prefix)
    yield build(settings, redis_override=redis_client, engine_override=engine)


def make_client(
    orders_app: App, tmp_path: Path, *, throttle: SignInThrottle | None = None, **settings
) -> TestClient:
    web = create_app(
        orders_app,
        WebSettings(token=TOKEN, sample_seconds=0.2, **settings),
        multiproc=tmp_path / "metrics",
        sample=False,
        throttle=throttle,
    )
    return TestClient(web, base_url=BASE, client=LOCAL)


@pytest.fixture
def client(orders_app: App, tmp_path: Path) -> Iterator[TestClient]:
    with make_client(orders_app, tmp_path) as c:
        yield c


def sign_in(client: TestClient) -> str:
    reply = client.post("/login", data={"token": TOKEN, "next": "/dlq"}, follow_redirects=False)
    assert reply.status_code == 303, reply.text
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', client.get("/dlq").text)
    assert match
    return match.group(1)


def every_route(client: TestClient) -> list[tuple[str, str]]:
    """(method, path) of every route of the app, path parameters filled in."""
    fill = {"queue": "stock", "job_id": "nosuchjob", "order_id": "1"}
    out = []
    for route in client.app.routes:  # type: ignore[attr-defined]
        if isinstance(route, Mount):
            out.append(("GET", "/static/style.css"))
            continue
        assert isinstance(route, Route)
        path = re.sub(r"{(\w+)(:\w+)?}", lambda m: fill[m[1]], route.path)
        out.extend((method, path) for method in sorted(route.methods or ()) if method != "HEAD")
    return out


def assert_security_headers(reply, path: str) -> None:
    headers = reply.headers
    assert headers["content-security-policy"] == CSP, path
    assert "frame-ancestors 'none'" in CSP and "'unsafe-inline'" not in CSP
    assert headers["x-frame-options"] == "DENY", path
    assert headers["x-content-type-options"] == "nosniff", path
    assert headers["referrer-policy"] == "no-referrer", path
    if not path.startswith("/static/"):
        assert headers["cache-control"] == "no-store", path


def test_every_route_sends_the_security_headers_signed_in_or_not(client: TestClient) -> None:
    routes = every_route(client)
    assert len(routes) >= 15
    for signed_in in (False, True):
        csrf = sign_in(client) if signed_in else ""
        for method, path in routes:
            reply = client.request(method, path, data={"csrf": csrf}, follow_redirects=False)
            assert reply.status_code < 500, (method, path, reply.status_code)
            assert_security_headers(reply, path)
    for reply in (
        client.get("/no/such/page"),
        client.get("/", headers={"Host": "attacker.example"}),
        client.post("/login", content=b"x" * 10_000),
    ):
        assert reply.status_code in (400, 404, 413)
        assert_security_headers(reply, "/")


def test_pages_carry_no_inline_script_or_style(client: TestClient) -> None:
    sign_in(client)
    for method, path in every_route(client):
        if method != "GET" or path.startswith("/static/") or path == "/metrics":
            continue
        html = client.get(path).text
        assert not re.search(r"<script(?![^>]*\bsrc=)", html), path
        assert not re.search(r"\sstyle=|\son[a-z]+=|<style", html), path


@pytest.mark.parametrize(
    "host", ["attacker.example", "attacker.example:8080", "127.0.0.1.nip.io", "", "[::2]"]
)
def test_an_unknown_host_header_is_refused(client: TestClient, host: str) -> None:
    reply = client.get("/dlq", headers={"Host": host})
    assert reply.status_code == 400
    assert client.post("/login", data={"token": TOKEN}, headers={"Host": host}).status_code == 400


@pytest.mark.parametrize("host", ["127.0.0.1:8080", "localhost", "LOCALHOST:1", "[::1]:8080"])
def test_loopback_host_names_are_allowed(client: TestClient, host: str) -> None:
    assert client.get("/dlq", headers={"Host": host}).status_code == 200


def test_configured_and_bound_host_names_are_allowed(orders_app: App, tmp_path: Path) -> None:
    with make_client(
        orders_app, tmp_path, host="10.1.2.3", allowed_hosts="dash.example, ops.example:9000"
    ) as c:
        for host in ("dash.example", "ops.example:8080", "10.1.2.3:8080", "localhost"):
            assert c.get("/healthz", headers={"Host": host}).status_code == 200, host
        assert c.get("/healthz", headers={"Host": "other.example"}).status_code == 400
    assert "0.0.0.0" not in allowed_hosts("0.0.0.0")


def test_a_large_sign_in_body_is_refused_before_it_is_parsed(client: TestClient) -> None:
    big = {"token": "x" * 5000}
    assert client.post("/login", data=big).status_code == 413
    chunked = client.post("/login", content=iter([b"token=" + b"x" * 3000, b"x" * 3000]))
    assert chunked.status_code == 413
    assert client.post("/login", headers={"Content-Length": "nan"}).status_code == 400
    csrf = sign_in(client)
    ids = [f"job{i:030d}" for i in range(3000)]
    action = client.post("/dlq/redrive", data={"csrf": csrf, "ids": ids})
    assert action.status_code == 413


def test_the_body_limit_stops_reading_a_stream_at_the_limit() -> None:
    """An endless body: the middleware reads just past the limit, then answers 413."""
    reached_app = []
    chunks_read = 0

    async def inner(scope, receive, send):  # pragma: no cover - must not be reached
        reached_app.append(scope["path"])

    async def receive():
        nonlocal chunks_read
        chunks_read += 1
        return {"type": "http.request", "body": b"x" * 1024, "more_body": True}

    sent = []

    async def send(message):
        sent.append(message)

    protect = Protect(inner, hosts=allowed_hosts("127.0.0.1"))
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/login",
        "headers": [(b"host", b"127.0.0.1:8080")],
    }
    asyncio.run(protect(scope, receive, send))
    assert sent[0]["status"] == 413 and not reached_app
    assert chunks_read == 5  # 4 KiB allowed: the fifth KiB is one too many


def test_a_token_shorter_than_16_characters_is_refused(orders_app: App, tmp_path: Path) -> None:
    with pytest.raises(WeakToken, match="at least 16.*secrets.token_urlsafe"):
        create_app(orders_app, WebSettings(token="s3cret"), multiproc=tmp_path / "m")


def test_orders_web_refuses_to_start_with_a_short_token(cli_env: dict[str, str]) -> None:
    result = CliRunner().invoke(cli, ["web"], env={**cli_env, "ORDERS_WEB_TOKEN": "hunter2"})
    assert result.exit_code == 2
    assert "at least 16" in result.output and "token_urlsafe" in result.output
    assert "hunter2" not in result.output


def test_failed_sign_ins_are_throttled_per_client(orders_app: App, tmp_path: Path) -> None:
    clock = FakeClock()
    with make_client(orders_app, tmp_path, throttle=SignInThrottle(10, 60, clock=clock)) as c:
        for _ in range(10):
            assert c.post("/login", data={"token": "wrong" * 4}).status_code == 401
        assert c.post("/login", data={"token": TOKEN}).status_code == 429
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        assert c.post("/dlq/redrive", headers=bearer).status_code == 429
        other = TestClient(c.app, base_url=BASE, client=("127.0.0.2", 1))
        assert (
            other.post("/login", data={"token": TOKEN}, follow_redirects=False).status_code == 303
        )
        clock.now += 61
        assert c.post("/login", data={"token": TOKEN}, follow_redirects=False).status_code == 303


def test_wrong_bearer_tokens_count_as_failed_sign_ins(orders_app: App, tmp_path: Path) -> None:
    clock = FakeClock()
    with make_client(orders_app, tmp_path, throttle=SignInThrottle(3, 60, clock=clock)) as c:
        wrong = {"Authorization": "Bearer " + "x" * 20}
        for _ in range(3):
            assert c.post("/dlq/redrive", headers=wrong).status_code == 401
        assert (
            c.post("/dlq/redrive", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 429
        )


def test_the_throttle_forgets_old_failures_and_bounds_its_memory() -> None:
    clock = FakeClock()
    throttle = SignInThrottle(2, 60, clock=clock, max_clients=3)
    throttle.failed("a")
    clock.now += 30
    throttle.failed("a")
    assert throttle.blocked("a")
    clock.now += 31
    assert not throttle.blocked("a")
    for name in "bcde":
        throttle.failed(name)
    assert len(throttle._failures) == 3


def test_a_signed_out_cookie_and_its_csrf_token_no_longer_work(client: TestClient) -> None:
    csrf = sign_in(client)
    cookie = client.cookies[COOKIE]
    assert client.post("/logout", data={"csrf": csrf}, follow_redirects=False).status_code == 303
    client.cookies.set(COOKIE, cookie)
    replay = client.post("/dlq/redrive", data={"csrf": csrf, "ids": "x"})
    assert replay.status_code == 401
    assert 'name="csrf"' not in client.get("/dlq").text


def test_authenticated_pages_are_not_cached(client: TestClient) -> None:
    sign_in(client)
    for path in ("/", "/dlq", "/queues/stock", "/orders", "/metrics", "/partials/overview"):
        assert client.get(path).headers["cache-control"] == "no-store", path
