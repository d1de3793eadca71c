"""Fuzzing the dashboard: random paths, query strings, headers and bodies, signed in or
not, against real Redis and a real database holding a malformed dead letter, never get
a 5xx. The example budget is small by default (CI); a longer run:

    FUZZ_EXAMPLES=3000 uv run pytest tests/integration/test_web_fuzz.py -q
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine
from starlette.testclient import TestClient

from orders.app.bootstrap import App, build
from orders.app.settings import Settings
from orders.web.app import create_app
from orders.web.security import COOKIE, SignInThrottle
from orders.web.settings import WebSettings
from reliable_queue import EnqueueRequest

TOKEN = "correct horse battery staple"
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "60"))

TEMPLATES = [
    "/",
    "/partials/overview",
    "/queues/{}",
    "/queues/{}/jobs",
    "/queues/{}/jobs/{}",
    "/orders",
    "/orders/{}",
    "/dlq",
    "/dlq/{}/{}",
    "/dlq/redrive",
    "/dlq/purge",
    "/login",
    "/logout",
    "/metrics",
    "/healthz",
    "/livez",
    "/readyz",
    "/static/{}",
]
PARAMS = ["queue", "task", "reason", "limit", "id", "ids", "next", "token", "csrf", "scope",
          "confirm", "dry_run", "state", "page", "x"]  # fmt: skip
# printable ASCII: what an HTTP client can put in a header
header_text = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=60)
any_text = st.text(max_size=40)
known = st.sampled_from(
    ["stock", "logistics", "error", "orders.stock", "1", "-1", "0", "99999999999999999999",
     "../../etc/passwd", "%00", "<script>", "selected", "matching", "yes", "1e9", ""]
)  # fmt: skip
segment = st.one_of(known, any_text.filter(lambda s: "/" not in s))


@st.composite
def paths(draw: st.DrawFn) -> str:
    if draw(st.booleans()):
        template = draw(st.sampled_from(TEMPLATES))
        filled = template.format(*(draw(segment) for _ in range(template.count("{}"))))
        return quote(filled, safe="/")
    return "/" + quote(draw(any_text), safe="/%?&=.")


params = st.dictionaries(st.one_of(st.sampled_from(PARAMS), any_text), st.one_of(known, any_text),
                         max_size=5)  # fmt: skip
headers = st.fixed_dictionaries(
    {},
    optional={
        "Host": st.sampled_from(["127.0.0.1:8080", "localhost", "evil.example", "[::1]", ""]),
        "Origin": st.one_of(st.just("http://127.0.0.1:8080"), header_text),
        "Sec-Fetch-Site": st.sampled_from(["same-origin", "cross-site", "none", "x"]),
        "Authorization": st.one_of(st.just(f"Bearer {TOKEN}"), header_text),
        "Content-Type": st.sampled_from(
            [
                "application/x-www-form-urlencoded",
                "multipart/form-data; boundary=x",
                "multipart/form-data",
                "text/plain",
                "application/json",
            ]
        ),  # fmt: skip
        "Cookie": st.one_of(header_text.map(lambda v: f"{COOKIE}={v}"), header_text),
        "Content-Length": st.sampled_from(["0", "5", "nan", "-1", "99999999"]),
    },
)
bodies = st.one_of(st.none(), st.binary(max_size=300), params)


@pytest.fixture
def client(
    engine: Engine, redis_client: redis.Redis, key_prefix: str, tmp_path: Path
) -> Iterator[TestClient]:
    app: App = build(
        Settings(data_dir=tmp_path / "data", queue_prefix=key_prefix),
        redis_override=redis_client,
        engine_override=engine,
    )
    stock = app.queues["stock"]
    (job_id,) = stock.enqueue_many([EnqueueRequest("orders.stock", {"order_id": 1})])
    (job,) = stock.fetch(1).jobs
    stock.dead(job.lease, "error", error="boom")
    stock.client.hset(stock.keys.key("info"), job_id, "[1,2]")
    stock.client.hset(stock.keys.key("attempts"), job_id, "many")
    web = create_app(
        app,
        WebSettings(token=TOKEN),
        multiproc=tmp_path / "metrics",
        sample=False,
        throttle=SignInThrottle(10**9, 60),  # the fuzzer may fail sign-in many times
    )
    with TestClient(web, base_url="http://127.0.0.1:8080", client=("127.0.0.1", 5)) as c:
        yield c


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    method=st.sampled_from(["GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS"]),
    path=paths(),
    query=params,
    sent_headers=headers,
    body=bodies,
    signed_in=st.booleans(),
)
def test_no_request_makes_the_dashboard_fail(
    client: TestClient,
    method: str,
    path: str,
    query: dict[str, str],
    sent_headers: dict[str, str],
    body: bytes | dict[str, str] | None,
    signed_in: bool,
) -> None:
    client.cookies.clear()
    if signed_in:
        client.post("/login", data={"token": TOKEN})
        match = re.search(r'name="csrf" value="([0-9a-f]+)"', client.get("/dlq").text)
        if match and isinstance(body, dict):
            body = {**body, "csrf": match.group(1)}
    if "Content-Length" in sent_headers and body is not None:
        del sent_headers["Content-Length"]  # a client computes it for a body it sends
    kwargs: dict = {"params": query, "headers": sent_headers, "follow_redirects": False}
    if isinstance(body, dict):
        kwargs["data"] = body
    elif body is not None:
        kwargs["content"] = body
    reply = client.request(method, path, **kwargs)
    assert reply.status_code < 500, (method, path, reply.status_code, reply.text[:500])
