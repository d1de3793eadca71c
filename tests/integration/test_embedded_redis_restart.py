"""The embedded Redis of a data dir is restarted by whoever finds it dead, workers included."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from cli_processes import app_for, start_orders, stop, wait_until
from publishing import publish_now
from sqlalchemy import func, select

from orders.app.placement import place_orders
from orders.domain.models import Order, OrderStatus
from orders.domain.steps import queue_name
from orders.sources.drafts import OrderDraft
from reliable_queue import Queue, stats
from reliable_queue.embedded import EmbeddedRedis
from workflows.uow import UnitOfWork

pytestmark = pytest.mark.chaos  # SIGKILLs a real redis-server

RESTARTED = "was found dead: restarted it"


def servers_of(redis_dir: Path) -> list[int]:
    """Pids of the redis-server processes working in ``redis_dir`` (``--dir`` is their cwd)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (
                b"redis-server" in (entry / "cmdline").read_bytes()
                and Path(os.readlink(entry / "cwd")) == redis_dir
            ):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def test_workers_restart_a_killed_embedded_redis_once_and_go_on_with_every_job(
    cli_env: dict[str, str],
    database_url: str,
    catalog: dict[int, int],
    make_draft: Callable[..., OrderDraft],
    tmp_path: Path,
) -> None:
    """Regression: after a SIGKILL of the data dir's redis-server the workers logged
    "Connection refused" every 5 s until someone ran another command."""
    env = {k: v for k, v in cli_env.items() if k not in ("ORDERS_REDIS_URL", "ORDERS_QUEUE_PREFIX")}
    env["ORDERS_DATABASE_URL"] = database_url
    server = EmbeddedRedis(env["ORDERS_DATA_DIR"])
    server.ensure_running()
    logs = [tmp_path / f"notification-{i}.log" for i in range(2)]
    # two processes that find the server dead at once, and stock jobs nobody serves yet
    workers = [
        start_orders(["worker", "notification", "--concurrency", "2", "--no-metrics"], env, log)
        for log in logs
    ]
    finisher = None
    try:
        for log in logs:
            wait_until(lambda log=log: "serving" in log.read_text(), 60, "a worker to serve")
        app = app_for(env, migrate=False)
        try:
            with UnitOfWork(app.session_factory) as uow:
                placed = place_orders(uow.session, [make_draft() for _ in range(20)])
                uow.commit()
            step_ids = [step for order in placed for step in order.step_ids]
            assert publish_now(app.session_factory, app.publisher, step_ids) == 20
        finally:
            app.close()
        killed = server.kill()
        assert killed is not None

        wait_until(
            lambda: server.is_running() and server.pid != killed, 30, "a worker to restart Redis"
        )
        assert servers_of(server.redis_dir) == [server.pid]
        wait_until(
            lambda: sum(log.read_text().count(RESTARTED) for log in logs) >= 1, 10, "the log line"
        )
        assert sum(log.read_text().count(RESTARTED) for log in logs) == 1
        with redis.Redis(unix_socket_path=str(server.socket_path)) as plain:
            stock = stats(Queue(plain, queue_name("stock"), prefix="orderflow"))
            assert stock.ready == 20  # replayed from the append-only file

        # the notification workers reconnected: they run the notifications stock releases
        finisher = start_orders(
            ["worker", "stock", "points", "logistics", "--no-metrics"], env, tmp_path / "rest.log"
        )
        check = app_for(env, migrate=False)
        try:

            def completed() -> int:
                with check.session_factory() as session:
                    return int(
                        session.scalar(
                            select(func.count()).where(Order.status == OrderStatus.COMPLETED)
                        )
                        or 0
                    )

            wait_until(lambda: completed() == 20, 60, "every order to complete")
        finally:
            check.engine.dispose()
    finally:
        codes = [stop(worker) for worker in [*workers, *([finisher] if finisher else [])]]
    assert codes == [0] * len(codes), [log.read_text()[-2000:] for log in logs]
