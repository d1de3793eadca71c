"""The dashboard's pages and actions through Starlette's test client, on real Redis and a
real database: every page renders, bad parameters are 4xx with a message, and every
action is refused without the token, without a session's CSRF token, or cross-site."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from publishing import publish_now
from sqlalchemy import Engine, select
from starlette.testclient import TestClient

from orders.app.bootstrap import App, build
from orders.app.cancellation import cancel
from orders.app.placement import place_orders
from orders.app.settings import Settings
from orders.domain.handlers import StepRequest, handle_step, mark_step_dead
from orders.domain.steps import LOGISTICS, STEPS
from orders.sources.drafts import OrderDraft
from orders.web.app import create_app
from orders.web.settings import WebSettings
from reliable_queue import QueueSettings, TaskRegistry, Worker, explain
from reliable_queue.presence import WorkerState
from reliable_queue.presence_publisher import PresencePublisher
from workflows.models import StepStatus, WorkflowStep
from workflows.relay import publish_dispatched
from workflows.uow import UnitOfWork

TOKEN = "correct horse battery staple"
LOCAL = ("127.0.0.1", 50000)


@dataclass
class World:
    """What the seeded system holds."""

    app: App
    done_order: int
    blocked_order: int
    waiting_order: int
    dead_job: str
    ready_job: str


@pytest.fixture
def world(
    engine: Engine,
    redis_client: redis.Redis,
    key_prefix: str,
    tmp_path: Path,
    catalog: dict,
    make_draft: Callable[..., OrderDraft],
) -> Iterator[World]:
    """Three orders: one completed, one blocked with its logistics job dead-lettered,
    one waiting with its jobs ready."""
    settings = Settings(data_dir=tmp_path / "data", queue_prefix=key_prefix)
    app = build(settings, redis_override=redis_client, engine_override=engine)
    with UnitOfWork(app.session_factory) as uow:
        placed = place_orders(uow.session, [make_draft() for _ in range(3)])
        uow.commit()
    step_ids = [step_id for order in placed for step_id in order.step_ids]
    publish_now(app.session_factory, app.publisher, step_ids)
    done, blocked, waiting = placed
    for step in STEPS:
        handle_step(app.session_factory, StepRequest(done.workflow_id, done.order_id, step))
    # stock first: the blocked order's logistics job is published once its stock is done
    stocked = handle_step(
        app.session_factory, StepRequest(blocked.workflow_id, blocked.order_id, "stock")
    )
    publish_dispatched(app.session_factory, app.publisher, stocked.released_steps)
    logistics = app.queues[LOGISTICS]
    fetched = logistics.fetch(3, worker_id="test-worker").jobs
    dead_key = f"{blocked.workflow_id}:{LOGISTICS}"
    dead_job = next(j for j in fetched if j.job_id == logistics.pending_job_for(dead_key))
    logistics.dead(dead_job.lease, "error", error="PermanentError: boom")
    logistics.release([j.lease for j in fetched if j is not dead_job])
    mark_step_dead(
        app.session_factory, blocked.workflow_id, LOGISTICS, "error", error="boom", attempts=1
    )
    ready_job = app.queues["stock"].pending_job_for(f"{waiting.workflow_id}:stock")
    assert ready_job is not None
    yield World(app, done.order_id, blocked.order_id, waiting.order_id, dead_job.job_id, ready_job)


def client_for(app: App, tmp_path: Path, token: str | None = TOKEN, **kwargs) -> TestClient:
    web = create_app(
        app,
        WebSettings(token=token, sample_seconds=0.2),
        multiproc=tmp_path / "metrics",
    )
    kwargs.setdefault("base_url", "http://127.0.0.1:8080")
    return TestClient(web, client=kwargs.pop("client", LOCAL), **kwargs)


@pytest.fixture
def client(world: World, tmp_path: Path) -> Iterator[TestClient]:
    with client_for(world.app, tmp_path) as c:
        yield c


def sign_in(client: TestClient) -> str:
    """Sign in; return the CSRF token the DLQ page's forms carry."""
    reply = client.post("/login", data={"token": TOKEN, "next": "/dlq"}, follow_redirects=False)
    assert reply.status_code == 303 and reply.headers["location"] == "/dlq"
    cookie = reply.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    page = client.get("/dlq")
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
    assert match, page.text
    return match.group(1)


def dlq_size(world: World) -> int:
    return world.app.queues[LOGISTICS].dead_letters.size()


# ------------------------------------------------------------------- pages


def test_overview_shows_orders_queues_and_the_newest_dead_letter(
    client: TestClient, world: World
) -> None:
    page = client.get("/")
    assert page.status_code == 200
    assert re.search(r'id="orders-placed">\s*3<', page.text)
    assert re.search(r'id="orders-completed">\s*1<', page.text)
    assert re.search(r'id="orders-blocked">\s*1<', page.text)
    assert 'id="queue-logistics"' in page.text and "<svg" in page.text
    assert world.dead_job[:12] in page.text
    partial = client.get("/partials/overview")
    assert partial.status_code == 200 and "<html" not in partial.text
    assert 'id="orders-placed"' in partial.text


def test_queue_page_lists_jobs_by_state_and_explains_one(client: TestClient, world: World) -> None:
    page = client.get("/queues/stock")
    assert page.status_code == 200 and world.ready_job in page.text
    lookup = client.get(f"/queues/stock/jobs?id={world.ready_job}", follow_redirects=False)
    assert lookup.status_code == 303
    job = client.get(lookup.headers["location"])
    assert job.status_code == 200
    assert 'id="job-state">ready<' in job.text and f"/orders/{world.waiting_order}" in job.text
    dead = client.get(f"/queues/logistics/jobs/{world.dead_job}")
    assert 'id="job-state">dead<' in dead.text and "PermanentError: boom" in dead.text


def test_a_job_whose_failure_record_is_not_an_object_still_renders(
    client: TestClient, world: World
) -> None:
    stock = world.app.queues["stock"]
    stock.client.hset(stock.keys.key("info"), world.ready_job, '"written by hand"')
    page = client.get(f"/queues/stock/jobs/{world.ready_job}")
    assert page.status_code == 200 and "written by hand" in page.text


@pytest.mark.parametrize(
    ("field", "stored"),
    [("info", "[1,2]"), ("info", '"a string"'), ("info", "{not json"), ("attempts", "many")],
)
def test_a_malformed_dead_letter_is_shown_raw_on_every_page(
    client: TestClient, world: World, field: str, stored: str
) -> None:
    logistics = world.app.queues[LOGISTICS]
    logistics.client.hset(logistics.keys.key(field), world.dead_job, stored)
    for path in (
        "/",
        "/dlq",
        f"/dlq/logistics/{world.dead_job}",
        f"/queues/logistics/jobs/{world.dead_job}",
        f"/orders/{world.blocked_order}",
    ):
        page = client.get(path)
        assert page.status_code == 200, (path, page.text[:300])
    entry = client.get(f"/dlq/logistics/{world.dead_job}").text
    explained = client.get(f"/queues/logistics/jobs/{world.dead_job}").text
    shown = stored.replace('"', "&#34;")
    assert shown in entry and shown in explained


def test_order_page_shows_each_step_with_attempts_errors_and_times(
    client: TestClient, world: World
) -> None:
    done = client.get(f"/orders/{world.done_order}")
    assert done.status_code == 200
    assert 'id="order-status">completed<' in done.text
    for step in STEPS:
        assert f'id="step-{step}"' in done.text
    blocked = client.get(f"/orders/{world.blocked_order}")
    assert 'id="order-status">blocked<' in blocked.text
    assert "blocked on <b>logistics</b>" in blocked.text
    assert f"/dlq/logistics/{world.dead_job}" in blocked.text
    listing = client.get("/orders")
    assert listing.status_code == 200 and f"/orders/{world.waiting_order}" in listing.text
    jump = client.get(f"/orders?id={world.done_order}", follow_redirects=False)
    assert jump.status_code == 303 and jump.headers["location"] == f"/orders/{world.done_order}"


def test_dlq_page_filters_and_shows_one_entry(client: TestClient, world: World) -> None:
    page = client.get("/dlq?queue=logistics&task=orders.logistics&reason=error&limit=5")
    assert page.status_code == 200 and f'id="dl-{world.dead_job}"' in page.text
    other = client.get("/dlq?reason=worker_lost")
    assert other.status_code == 200 and 'id="dlq-empty"' in other.text
    entry = client.get(f"/dlq/logistics/{world.dead_job}")
    assert entry.status_code == 200
    assert "PermanentError: boom" in entry.text and f"/orders/{world.blocked_order}" in entry.text


def test_metrics_endpoint_serves_queue_and_order_gauges(client: TestClient) -> None:
    reply = client.get("/metrics")
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/plain")
    text = reply.text
    assert (
        'orderflow_queue_jobs{queue="logistics",state="dead",task="orders.logistics"} 1.0' in text
    )
    assert 'orderflow_orders{status="blocked"} 1.0' in text
    assert "orderflow_redis_up 1.0" in text and "orderflow_database_up 1.0" in text


@pytest.mark.parametrize(
    ("url", "status", "message"),
    [
        ("/orders/abc", 400, "order id must be an integer"),
        ("/orders/0", 400, "between 1 and"),
        ("/orders/99999999", 404, "no order 99999999"),
        ("/orders?id=x1", 400, "order id must be an integer"),
        ("/queues/shipping", 404, "no queue"),
        ("/queues/stock?limit=0", 400, "limit must be between 1 and 500"),
        ("/queues/stock?limit=lots", 400, "limit must be an integer"),
        ("/queues/stock/jobs?id=", 400, "job id is missing"),
        ("/queues/stock/jobs?id=a%20b", 400, "malformed"),
        ("/queues/stock/jobs/nosuchjob", 404, "no trace of job"),
        ("/dlq?queue=shipping", 400, "unknown queue"),
        ("/dlq?task=orders.ship", 400, "unknown task"),
        ("/dlq?reason=bored", 400, "unknown reason"),
        ("/dlq?limit=-3", 400, "limit must be between"),
        ("/dlq/logistics/nosuchjob", 404, "not in the dead-letter queue"),
        ("/dlq/shipping/x", 404, "no queue"),
        ("/nowhere", 404, "Not Found"),
    ],
)
def test_bad_parameters_are_a_4xx_with_a_message(
    client: TestClient, url: str, status: int, message: str
) -> None:
    reply = client.get(url)
    assert reply.status_code == status
    assert message in reply.text


def test_a_failing_backing_service_is_a_503_not_a_500(
    engine: Engine, key_prefix: str, tmp_path: Path
) -> None:
    dead_redis = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)
    settings = Settings(data_dir=tmp_path / "data", queue_prefix=key_prefix)
    app = build(settings, redis_override=dead_redis, engine_override=engine)
    with client_for(app, tmp_path) as c:
        for url in ("/queues/stock", "/dlq"):
            reply = c.get(url)
            assert reply.status_code == 503 and "a backing service failed" in reply.text
        assert c.get("/").status_code == 200  # the overview says what it cannot read
        assert "cannot read Redis" in c.get("/").text


def test_readyz_touches_redis_and_the_database_and_probes_are_open(
    world: World, tmp_path: Path
) -> None:
    with client_for(world.app, tmp_path, client=("10.1.2.3", 50000)) as remote:
        ready = remote.get("/readyz")  # a kubelet is not on loopback and does not sign in
        assert ready.status_code == 200, ready.text
        assert ready.text.splitlines() == [
            "ok redis",
            "ok database",
            "ok namespace",
            "ok eviction",
            "ok",
        ]
        assert remote.get("/livez").status_code == 200
        assert remote.get("/metrics").status_code == 401  # the figures stay guarded


def test_readyz_fails_on_a_dead_redis_or_database_and_livez_stays_up(
    engine: Engine, redis_client: redis.Redis, key_prefix: str, tmp_path: Path
) -> None:
    from sqlalchemy import create_engine

    dead_redis = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)
    settings = Settings(data_dir=tmp_path / "data", queue_prefix=key_prefix)
    no_redis = build(settings, redis_override=dead_redis, engine_override=engine)
    with client_for(no_redis, tmp_path) as c:
        reply = c.get("/readyz")
        assert reply.status_code == 503
        assert "fail redis: ConnectionError" in reply.text and "ok database" in reply.text
        assert "skip namespace" in reply.text and reply.text.endswith("fail\n")
        assert c.get("/livez").status_code == c.get("/healthz").status_code == 200
    gone = create_engine(f"sqlite:///{tmp_path / 'no' / 'such' / 'dir.db'}")
    no_database = build(settings, redis_override=redis_client, engine_override=gone)
    try:
        with client_for(no_database, tmp_path) as c:
            reply = c.get("/readyz")
            assert reply.status_code == 503
            assert "ok redis" in reply.text and "fail database: OperationalError" in reply.text
            assert c.get("/livez").status_code == 200
    finally:
        gone.dispose()


def test_readyz_fails_when_the_namespace_belongs_to_another_database(
    world: World, tmp_path: Path
) -> None:
    from orders.app.namespace import claim_key

    app = world.app
    app.redis.set(claim_key(app.settings.queue_prefix), '{"id": "another", "url": "x"}')
    with client_for(app, tmp_path) as c:
        reply = c.get("/readyz")
    assert reply.status_code == 503
    assert "fail namespace: bound to another database" in reply.text


# ----------------------------------------------------------------- actions


def test_actions_are_refused_when_no_token_is_configured(world: World, tmp_path: Path) -> None:
    with client_for(world.app, tmp_path, token=None) as c:
        for url in ("/dlq/redrive", "/dlq/purge"):
            reply = c.post(url, data={"ids": world.dead_job, "scope": "selected"})
            assert reply.status_code == 403 and "actions are disabled" in reply.text
        reply = c.post(url, data={"ids": world.dead_job}, headers={"Authorization": "Bearer x"})
        assert reply.status_code == 403
        login = c.post("/login", data={"token": ""})
        assert login.status_code == 403 and "ORDERS_WEB_TOKEN" in login.text
        assert "read-only" in c.get("/dlq").text
    assert dlq_size(world) == 1


def test_actions_without_the_token_or_a_session_are_refused(
    client: TestClient, world: World
) -> None:
    form = {"ids": world.dead_job, "scope": "selected", "dry_run": "0"}
    assert client.post("/dlq/redrive", data=form).status_code == 401
    wrong = client.post("/dlq/redrive", data=form, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert client.post("/dlq/purge", data={**form, "confirm": "yes"}).status_code == 401
    bad_login = client.post("/login", data={"token": "guess"})
    assert bad_login.status_code == 401 and 'id="login-failed"' in bad_login.text
    client.cookies.set("orders_session", f"{int(time.time())}.abc.{'0' * 64}")
    forged = client.post("/dlq/redrive", data=form)
    assert forged.status_code == 401
    assert dlq_size(world) == 1


def test_csrf_missing_wrong_or_cross_site_is_refused(client: TestClient, world: World) -> None:
    csrf = sign_in(client)
    form = {"ids": world.dead_job, "scope": "selected", "dry_run": "0"}
    missing = client.post("/dlq/redrive", data=form)
    assert missing.status_code == 403 and "CSRF" in missing.text
    wrong = client.post("/dlq/redrive", data={**form, "csrf": "0" * 64})
    assert wrong.status_code == 403
    cross = client.post(
        "/dlq/redrive", data={**form, "csrf": csrf}, headers={"Origin": "http://evil.example"}
    )
    assert cross.status_code == 403 and "cross-site" in cross.text
    sibling = client.post(
        "/dlq/purge",
        data={**form, "csrf": csrf, "confirm": "yes"},
        headers={"Sec-Fetch-Site": "cross-site"},
    )
    assert sibling.status_code == 403
    login_cross = client.post(
        "/login", data={"token": TOKEN}, headers={"Origin": "http://evil.example"}
    )
    assert login_cross.status_code == 403
    assert dlq_size(world) == 1


def test_origin_null_is_accepted_only_with_a_same_origin_fetch_site(
    client: TestClient, world: World
) -> None:
    """Pages say Referrer-Policy: no-referrer, so a browser's own same-origin form
    post carries ``Origin: null``; only its Sec-Fetch-Site tells it from a sandbox."""
    null_alone = client.post("/login", data={"token": TOKEN}, headers={"Origin": "null"})
    assert null_alone.status_code == 403 and "cross-site" in null_alone.text
    browser_login = client.post(
        "/login",
        data={"token": TOKEN, "next": "/dlq"},
        headers={"Origin": "null", "Sec-Fetch-Site": "same-origin"},
        follow_redirects=False,
    )
    assert browser_login.status_code == 303 and browser_login.headers["location"] == "/dlq"
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', client.get("/dlq").text)
    assert found
    csrf = found.group(1)
    form = {"ids": world.dead_job, "scope": "selected", "csrf": csrf, "dry_run": "1"}
    sandboxed = client.post("/dlq/redrive", data=form, headers={"Origin": "null"})
    assert sandboxed.status_code == 403
    same_site = client.post(
        "/dlq/redrive", data=form, headers={"Origin": "null", "Sec-Fetch-Site": "same-origin"}
    )
    assert same_site.status_code == 200 and "Would redrive <b>1</b>" in same_site.text
    assert dlq_size(world) == 1


def test_redrive_dry_run_changes_nothing_then_redrive_replays_the_job(
    client: TestClient, world: World
) -> None:
    csrf = sign_in(client)
    form = {"ids": world.dead_job, "scope": "selected", "csrf": csrf}
    dry = client.post(
        "/dlq/redrive", data={**form, "dry_run": "1"}, headers={"Origin": "http://127.0.0.1:8080"}
    )
    assert dry.status_code == 200
    assert "Would redrive <b>1</b>" in dry.text and world.dead_job in dry.text
    assert dlq_size(world) == 1
    real = client.post("/dlq/redrive", data={**form, "dry_run": "0"})
    assert real.status_code == 200 and "Redrove <b>1</b>" in real.text
    assert dlq_size(world) == 0
    assert client.get(f"/queues/logistics/jobs/{world.dead_job}").text.count(
        'id="job-state">ready<'
    )


def test_redrive_by_filter_with_the_bearer_token(client: TestClient, world: World) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    dry = client.post(
        "/dlq/redrive",
        data={"scope": "matching", "queue": "logistics", "reason": "error", "dry_run": "1"},
        headers=auth,
    )
    assert dry.status_code == 200 and world.dead_job in dry.text
    none = client.post(
        "/dlq/redrive", data={"scope": "matching", "reason": "worker_lost"}, headers=auth
    )
    assert none.status_code == 200 and "Redrove <b>0</b>" in none.text
    assert dlq_size(world) == 1


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"scope": "selected"}, "select at least one"),
        ({"scope": "everything"}, "unknown scope"),
        ({"scope": "matching", "queue": "shipping"}, "unknown queue"),
        ({"scope": "matching", "dry_run": "maybe"}, "dry_run must be 1 or 0"),
    ],
)
def test_bad_action_parameters_are_a_400(
    client: TestClient, world: World, form: dict, message: str
) -> None:
    reply = client.post("/dlq/redrive", data=form, headers={"Authorization": f"Bearer {TOKEN}"})
    assert reply.status_code == 400 and message in reply.text
    assert dlq_size(world) == 1


def test_purge_asks_for_confirmation_first(client: TestClient, world: World) -> None:
    points = world.app.queues["points"]
    loose = points.enqueue("orders.points", {"order_id": 999})  # blocks no order
    fetched = points.fetch(10).jobs
    assert points.dead(next(j for j in fetched if j.job_id == loose).lease, "error", error="x")
    points.release([j.lease for j in fetched if j.job_id != loose])
    csrf = sign_in(client)
    ask = client.post("/dlq/purge", data={"scope": "selected", "ids": loose, "csrf": csrf})
    assert ask.status_code == 200 and 'id="purge-question"' in ask.text
    assert loose in ask.text and 'name="confirm" value="yes"' in ask.text
    assert points.dead_letters.size() == 1
    bad = client.post("/dlq/purge", data={"ids": loose, "csrf": csrf, "confirm": "sure"})
    assert bad.status_code == 400 and points.dead_letters.size() == 1
    done = client.post(
        "/dlq/purge", data={"scope": "selected", "ids": loose, "csrf": csrf, "confirm": "yes"}
    )
    assert done.status_code == 200 and "Deleted <b>1</b>" in done.text
    assert points.dead_letters.size() == 0 and dlq_size(world) == 1


def test_purge_never_deletes_a_letter_whose_step_blocks_an_order(
    client: TestClient, world: World
) -> None:
    csrf = sign_in(client)
    ask = client.post("/dlq/purge", data={"scope": "matching", "csrf": csrf})
    assert ask.status_code == 200 and 'id="purge-blocking"' in ask.text
    assert f"order {world.blocked_order}" in ask.text and "nothing to purge" in ask.text
    with world.app.session_factory() as session:  # every way out is named, with the step row
        step_id = session.scalar(
            select(WorkflowStep.id).where(
                WorkflowStep.step == LOGISTICS, WorkflowStep.status == StepStatus.DEAD
            )
        )
    text = " ".join(ask.text.split())
    assert f"{LOGISTICS} (step {step_id})" in text
    for way in ("Redrive it", "orders cancel ORDER_ID", "orders outbox retry STEP_ID", "--all"):
        assert way in text
    assert 'name="confirm" value="yes"' not in ask.text
    forced = client.post(
        "/dlq/purge",
        data={"scope": "selected", "ids": world.dead_job, "csrf": csrf, "confirm": "yes"},
    )
    assert forced.status_code == 200 and "Deleted <b>0</b>" in forced.text
    assert 'id="purge-blocking"' in forced.text
    assert dlq_size(world) == 1


def test_sign_out_ends_the_session(client: TestClient, world: World) -> None:
    csrf = sign_in(client)
    out = client.post("/logout", data={"csrf": csrf}, follow_redirects=False)
    assert out.status_code == 303
    form = {"ids": world.dead_job, "scope": "selected", "csrf": csrf}
    assert client.post("/dlq/redrive", data=form).status_code == 401


def test_clients_off_this_machine_must_sign_in_even_to_read(world: World, tmp_path: Path) -> None:
    with client_for(world.app, tmp_path, client=("192.0.2.10", 40000)) as c:
        page = c.get("/dlq", follow_redirects=False)
        assert page.status_code == 303 and page.headers["location"] == "/login?next=/dlq"
        assert c.get("/metrics").status_code == 401
        assert c.get("/login").status_code == 200
        reader = c.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert reader.status_code == 200
        c.post("/login", data={"token": TOKEN})
        assert c.get("/dlq").status_code == 200


# ------------------------------------------------------------------- cancel an order


def test_cancel_needs_the_token_and_the_csrf_token(client: TestClient, world: World) -> None:
    url = f"/orders/{world.waiting_order}/cancel"
    assert client.post(url, data={}).status_code == 401
    sign_in(client)
    assert client.post(url, data={"csrf": "0" * 64}).status_code == 403
    assert 'id="order-status">placed<' in client.get(f"/orders/{world.waiting_order}").text


def test_cancel_from_the_order_page_shows_the_compensation_beside_the_steps(
    client: TestClient, world: World
) -> None:
    csrf = sign_in(client)
    page = client.get(f"/orders/{world.blocked_order}")
    assert 'id="cancel-order"' in page.text
    reply = client.post(
        f"/orders/{world.blocked_order}/cancel", data={"csrf": csrf}, follow_redirects=False
    )
    assert reply.status_code == 303
    assert reply.headers["location"] == f"/orders/{world.blocked_order}"
    page = client.get(f"/orders/{world.blocked_order}")
    assert 'id="order-status">cancelled<' in page.text
    assert 'id="step-return_stock"' in page.text and "↩ return_stock" in page.text
    assert re.search(r"<td>return_stock</td><td>stock</td>", page.text)
    assert re.search(r"<td>logistics</td><td>-</td><td><span class=\"status skipped\"", page.text)
    assert 'id="cancel-order"' not in page.text
    again = client.post(
        f"/orders/{world.blocked_order}/cancel", data={"csrf": csrf}, follow_redirects=False
    )
    assert again.status_code == 303


def test_cancel_too_late_or_unknown_is_refused_with_a_message(
    client: TestClient, world: World
) -> None:
    csrf = sign_in(client)
    late = client.post(f"/orders/{world.done_order}/cancel", data={"csrf": csrf})
    assert late.status_code == 409
    assert "too late to cancel" in late.text
    assert client.post("/orders/999999/cancel", data={"csrf": csrf}).status_code == 404
    assert client.post("/orders/abc/cancel", data={"csrf": csrf}).status_code == 400
    assert 'id="order-status">completed<' in client.get(f"/orders/{world.done_order}").text


# ------------------------------------------------------------ hostile text

HOSTILE = "[red]evil[/red]\x1b[31mRED\x07<script>\u202egnp"


def hostile_dead_letter(world: World) -> str:
    """A dead letter on points from a foreign producer: hostile task, error and order id."""
    queue = world.app.queues["points"]
    job_id = queue.enqueue(HOSTILE, {"order_id": "[red]1[/red]\x1b[2J", "note": HOSTILE})
    leased = queue.fetch(10, worker_id="test-worker").jobs
    mine = next(j for j in leased if j.job_id == job_id)
    assert queue.dead(mine.lease, "error", error=f"PermanentError: {HOSTILE}")
    queue.release([j.lease for j in leased if j is not mine])
    return job_id


def test_hostile_job_text_is_shown_escaped_on_every_page(client: TestClient, world: World) -> None:
    job_id = hostile_dead_letter(world)
    for url in (
        "/",
        "/partials/overview",
        "/dlq",
        f"/dlq/points/{job_id}",
        f"/queues/points/jobs/{job_id}",
    ):
        page = client.get(url)
        assert page.status_code == 200, url
        for raw in ("\x1b", "\x07", "\u202e", "<script>"):
            assert raw not in page.text, (url, raw)
        assert "\\x1b" in page.text, url
        assert 'href="/orders/[red]' not in page.text and "/orders/%5B" not in page.text, url
    shown = client.get(f"/dlq/points/{job_id}").text
    assert "[red]1[/red]\\x1b[2J" in shown  # the order id is shown as text, not linked
    assert "&lt;script&gt;\\u202egnp" in shown
    assert f'href="/orders/{world.done_order}"' in client.get("/").text  # real ids still link


# ------------------------------------------------------------ foreign job ids

FOREIGN_ID = "bad\x1b[31m0009escid"


def foreign_dead_letter(world: World, job_id: str = FOREIGN_ID) -> str:
    """A job a foreign producer pushed straight into Redis under ``job_id``, dead-lettered
    as ``invalid_payload`` by a worker (its record does not parse)."""
    stock = world.app.queues["stock"]
    stock.client.hset(stock.keys.key("jobs"), job_id, "not a job record")
    stock.client.rpush(stock.keys.key("ready"), job_id)
    leased = stock.fetch(10, worker_id="test-worker").jobs
    mine = next(j for j in leased if j.job_id == job_id)
    assert stock.dead(mine.lease, "invalid_payload", error="the record does not parse")
    stock.release([j.lease for j in leased if j is not mine])
    return job_id


def test_a_dead_letter_with_a_foreign_id_links_and_selects_by_its_real_id(
    client: TestClient, world: World
) -> None:
    foreign_dead_letter(world)
    sign_in(client)
    listing = client.get("/dlq?queue=stock").text
    assert "\x1b" not in listing and "bad\\x1b[31m0009escid" in listing  # shown escaped
    assert 'href="/dlq/stock/bad%1B%5B31m0009escid"' in listing
    assert 'value="bad&#x1b;[31m0009escid"' in listing  # a browser submits the real id
    entry = client.get("/dlq/stock/bad%1B%5B31m0009escid")
    assert entry.status_code == 200, entry.text
    assert "\x1b" not in entry.text and "invalid_payload" in entry.text
    assert 'name="ids" value="bad&#x1b;[31m0009escid"' in entry.text
    assert 'href="/queues/stock/jobs/bad%1B%5B31m0009escid"' in entry.text
    explained = client.get("/queues/stock/jobs/bad%1B%5B31m0009escid")
    assert explained.status_code == 200 and 'id="job-state">dead<' in explained.text


def test_one_unknown_id_in_a_selection_is_reported_alone_and_the_rest_is_redriven(
    client: TestClient, world: World
) -> None:
    foreign_dead_letter(world)
    csrf = sign_in(client)
    form = {"scope": "selected", "ids": [FOREIGN_ID, world.dead_job, "../etc"], "csrf": csrf}
    dry = client.post("/dlq/redrive", data={**form, "dry_run": "1"})
    assert dry.status_code == 200, dry.text
    assert "Would redrive <b>2</b>" in dry.text and "\x1b" not in dry.text
    assert 'id="not-found"' in dry.text and "../etc" in dry.text
    assert 'name="ids" value="bad&#x1b;[31m0009escid"' in dry.text
    real = client.post("/dlq/redrive", data={**form, "dry_run": "0"})
    assert real.status_code == 200 and "Redrove <b>2</b>" in real.text
    assert world.app.queues["stock"].dead_letters.size() == 0 and dlq_size(world) == 0


def test_a_dead_letter_with_a_foreign_id_can_be_purged_beside_an_unknown_id(
    client: TestClient, world: World
) -> None:
    odd = foreign_dead_letter(world, "odd/id with\nnewline")
    csrf = sign_in(client)
    form = {"scope": "selected", "ids": [odd, "nosuchjob"], "csrf": csrf}
    ask = client.post("/dlq/purge", data=form)
    assert ask.status_code == 200 and 'id="purge-question"' in ask.text
    assert 'id="not-found"' in ask.text and "nosuchjob" in ask.text
    assert 'value="odd/id with&#x0a;newline"' in ask.text
    entry = client.get("/dlq/stock/odd%2Fid%20with%0Anewline")
    assert entry.status_code == 200, entry.text
    done = client.post("/dlq/purge", data={**form, "confirm": "yes"})
    assert done.status_code == 200 and "Deleted <b>1</b>" in done.text
    assert 'id="not-found"' in done.text
    assert world.app.queues["stock"].dead_letters.size() == 0 and dlq_size(world) == 1


# ------------------------------------------------------------ job id prefixes


def test_explain_takes_a_unique_prefix_of_six_characters_like_the_cli(
    client: TestClient, world: World
) -> None:
    stock = world.app.queues["stock"]
    page = client.get(f"/queues/stock/jobs/{world.ready_job[:14]}", follow_redirects=False)
    assert page.status_code == 303
    assert page.headers["location"] == f"/queues/stock/jobs/{world.ready_job}"
    typed = client.get(f"/queues/stock/jobs?id={world.ready_job[:14]}")
    assert typed.status_code == 200 and 'id="job-state">ready<' in typed.text
    assert world.ready_job in typed.text
    letter = client.get(f"/dlq/logistics/{world.dead_job[:14]}")
    assert letter.status_code == 200 and "PermanentError: boom" in letter.text
    short = client.get(f"/queues/stock/jobs/{world.ready_job[:5]}")
    assert short.status_code == 404 and "at least 6 characters" in short.text
    twins = [stock.enqueue("orders.stock", {"order_id": 999}) for _ in range(2)]
    common = twins[0][:6]  # ids start with their creation time in ms: 6 hex digits agree
    assert twins[1].startswith(common)
    ambiguous = client.get(f"/queues/stock/jobs/{common}")
    assert ambiguous.status_code == 400 and "is ambiguous" in ambiguous.text
    for twin in twins:
        assert f'href="/queues/stock/jobs/{twin}"' in ambiguous.text


def test_an_ambiguous_prefix_lists_foreign_candidates_escaped(
    client: TestClient, world: World
) -> None:
    for suffix in ("a", "b"):
        foreign_dead_letter(world, f"{FOREIGN_ID}{suffix}")
    ambiguous = client.get("/dlq/stock/bad%1B%5B31m")
    assert ambiguous.status_code == 400 and "is ambiguous" in ambiguous.text
    assert "\x1b" not in ambiguous.text and "bad\\x1b[31m0009escida" in ambiguous.text
    assert 'href="/dlq/stock/bad%1B%5B31m0009escida"' in ambiguous.text


# ------------------------------------------------------------ large payloads


def test_a_large_payload_is_cut_on_the_dead_letter_and_job_pages_unless_full(
    client: TestClient, world: World
) -> None:
    queue = world.app.queues["points"]
    blob = "".join(f"{i:08d}" for i in range(25_000))  # 200 KB
    job_id = queue.enqueue("orders.points", {"order_id": 999, "blob": blob})
    leased = queue.fetch(10, worker_id="test-worker").jobs
    mine = next(j for j in leased if j.job_id == job_id)
    assert queue.dead(mine.lease, "error", error="PermanentError: too big")
    queue.release([j.lease for j in leased if j is not mine])
    for url in (f"/dlq/points/{job_id}", f"/queues/points/jobs/{job_id}"):
        cut = client.get(url)
        assert cut.status_code == 200 and len(cut.text) < 32 * 1024, (url, len(cut.text))
        assert 'id="payload-cut"' in cut.text and "bytes more" in cut.text, url
        assert '<a href="?full=1">show all</a>' in cut.text and "00024999" not in cut.text, url
        full = client.get(f"{url}?full=1")
        assert full.status_code == 200 and "00024999" in full.text, url
        assert 'id="payload-cut"' not in full.text, url


def test_a_cancelled_order_is_counted_and_its_page_says_cancelled_not_completed(
    client: TestClient, world: World
) -> None:
    cancel(world.app.session_factory, world.app.publisher, world.waiting_order)

    overview = client.get("/partials/overview").text
    cards = ("placed", "in-progress", "completed", "out-of-stock", "cancelled", "blocked")
    count = {}
    for card in cards:
        found = re.search(rf'id="orders-{card}">\s*(\d+)<', overview)
        assert found, card
        count[card] = int(found.group(1))
    assert count["cancelled"] == 1
    assert count["placed"] == sum(n for card, n in count.items() if card != "placed")
    page = client.get(f"/orders/{world.waiting_order}").text
    assert 'id="order-status">cancelled<' in page
    end = re.search(r'id="order-end">([^<]*)<', page)
    assert end and end.group(1).startswith("cancellation finished ")
    assert "completed" not in end.group(1)
    # stock was dispatched, then skipped by the cancellation before it ran: no run bar
    stock_row = page.split('id="step-stock"')[1].split('class="state"')[0]
    assert "skipped" in page.split('id="step-stock"')[1].split("</div>\n  </div>")[0]
    assert 'class="run' not in stock_row and 'class="wait"' in stock_row


def test_the_workers_page_shows_each_worker_its_busy_lane_and_a_gone_one_escaped(
    client: TestClient, world: World
) -> None:
    release = threading.Event()
    registry = TaskRegistry()
    registry.task("orders.stock")(lambda payload, ctx: release.wait(10))
    prefix = world.app.settings.queue_prefix
    settings = QueueSettings(lease_seconds=3.0, max_block_seconds=0.2)
    worker = Worker(world.app.redis, ["stock"], registry, prefix=prefix, settings=settings)
    foreign = WorkerState(
        host="\x1b[31mbox", pid=7, queues=["stock"], concurrency=1, batch_size=1,
        up_seconds=5.0, every=0.05, state="running", exit_reason=None, counts={}, lanes=[],
    )  # fmt: skip
    PresencePublisher(
        world.app.redis, prefix, "ghost", lambda: foreign, 0.05, threading.Event()
    ).publish()  # then silent: gone after 0.1 s
    worker.start()
    try:

        def busy() -> str:
            # on a loaded machine a publish can come late and a page catch the live
            # worker as gone for a moment: wait for a page with all three facts
            page = client.get("/partials/workers").text
            seen = ('class="status active">busy<', 'class="status running"', 'class="status gone"')
            return page if all(fact in page for fact in seen) else ""

        deadline = time.monotonic() + 30
        while not (page := busy()):
            assert time.monotonic() < deadline, "the busy lane (or the gone one) never showed"
            time.sleep(0.2)
        link = re.search(r'href="/queues/stock/jobs/([0-9a-f]+)"', page)
        assert link and explain(world.app.queues["stock"], link.group(1)).state == "active"
        whole = client.get("/workers")
        assert whole.status_code == 200 and 'class="here">Workers<' in whole.text
    finally:
        release.set()
        worker.request_stop("the test is over")
        worker.join(10)
    assert worker.worker_id in page and 'class="status running"' in page
    assert "<td>orders.stock</td>" in page  # the task of the batch's first job
    assert 'class="status gone"' in page  # the silent one, with its last state
    assert "\\x1b[31mbox" in page and "\x1b" not in page
    time.sleep(1.1)  # the view's snapshot is cached for a second
    stopped = client.get("/partials/workers").text
    assert "the test is over" in stopped and 'class="status stopped"' in stopped
    overview = client.get("/partials/overview").text
    assert re.search(r'id="workers-running">\s*0<', overview)
