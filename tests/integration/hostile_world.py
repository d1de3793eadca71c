"""A small seeded system, and the views a reader of Redis data goes through, for the tests
that plant hostile values in the queue's keys (an id that is not UTF-8, a key of the
wrong type) and require every view to show them and go on.

Nothing here fakes Redis or the database: the world is real orders on real queues, the
CLI runs in this process (``CliRunner``, its own app built from the environment) and the
dashboard through Starlette's test client.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis
from publishing import publish_now
from sqlalchemy import Engine
from starlette.testclient import TestClient
from typer.testing import CliRunner, Result

from orders.app.bootstrap import App, build
from orders.app.placement import place_orders
from orders.app.settings import Settings
from orders.cli.main import app as cli
from orders.domain.steps import STOCK
from orders.sources.drafts import OrderDraft
from orders.web.app import create_app
from orders.web.settings import WebSettings
from workflows.uow import UnitOfWork

TOKEN = "correct horse battery staple"


@dataclass
class World:
    """One placed order whose stock job waits in Redis, and one points dead letter.

    Attributes:
        app: the application, on the test's Redis and database.
        env: the environment a CLI command of this world runs with.
        order_id / workflow_id: the order (its stock step not run: found by its key).
        ready_job: the order's stock job (ready).
        dead_job: a dead letter on the points queue.
    """

    app: App
    env: dict[str, str]
    order_id: int
    workflow_id: int
    ready_job: str
    dead_job: str


def make_world(
    engine: Engine,
    redis_client: redis.Redis,
    redis_url: str,
    database_url: str,
    key_prefix: str,
    tmp_path: Path,
    make_draft: Callable[..., OrderDraft],
) -> World:
    """Seed the world (the caller closes ``world.app``)."""
    settings = Settings(data_dir=tmp_path / "data", queue_prefix=key_prefix)
    app = build(settings, redis_override=redis_client, engine_override=engine)
    with UnitOfWork(app.session_factory) as uow:
        (order,) = place_orders(uow.session, [make_draft()])
        uow.commit()
    publish_now(app.session_factory, app.publisher, list(order.step_ids))
    ready_job = app.queues[STOCK].pending_job_for(f"{order.workflow_id}:{STOCK}")
    assert ready_job is not None
    points = app.queues["points"]
    dead_job = points.enqueue("orders.points", {"order_id": 999})
    held = points.fetch(1).jobs[0]
    assert held.job_id == dead_job and points.dead(held.lease, "error", error="boom")
    env = {
        "ORDERS_DATA_DIR": str(tmp_path / "data"),
        "ORDERS_REDIS_URL": redis_url,
        "ORDERS_DATABASE_URL": database_url,
        "ORDERS_QUEUE_PREFIX": key_prefix,
        "COLUMNS": "200",
    }
    return World(app, env, order.order_id, order.workflow_id, ready_job, dead_job)


def orders(world: World, *args: str) -> Result:
    """Run ``orders ARGS`` in this process with the world's environment."""
    return CliRunner().invoke(cli, list(args), env=world.env)


def client_for(world: World, tmp_path: Path) -> TestClient:
    """The dashboard of ``world`` (enter it with ``with``)."""
    web = create_app(
        world.app, WebSettings(token=TOKEN, sample_seconds=0.2), multiproc=tmp_path / "metrics"
    )
    return TestClient(web, base_url="http://127.0.0.1:8080", client=("127.0.0.1", 50000))


def no_traceback(result: Result) -> str:
    """The command's output, after checking that no exception escaped or was printed."""
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert "Traceback" not in result.output, result.output
    return result.output
