"""``orders status`` (text and ``--json``) and ``orders watch`` list the worker processes:
steps served, lanes busy / idle / abandoned, the batch a busy lane runs and since when,
and a worker gone silent with its last state; text from Redis is shown escaped."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator

import pytest
from cli_processes import app_for, orders_command, wait_until

from orders.app.bootstrap import App
from reliable_queue import QueueSettings, TaskRegistry, Worker, workers
from reliable_queue.presence import WorkerState
from reliable_queue.presence_publisher import PresencePublisher

pytestmark = pytest.mark.slow

GHOST = "ghost\x1b[2J"


def orders(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [*orders_command(), *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture
def busy_worker(cli_env: dict[str, str], key_prefix: str) -> Iterator[tuple[dict, App, Worker]]:
    """A worker (threads of this process) whose stock lane runs a job until the test ends,
    and a foreign worker that published once (an ESC in its id) and went silent."""
    env = dict(cli_env, ORDERS_QUEUE_PREFIX=key_prefix, COLUMNS="120")
    app = app_for(env)
    release = threading.Event()
    registry = TaskRegistry()
    registry.task("orders.stock")(lambda payload, ctx: release.wait(60))
    app.queues["stock"].enqueue("orders.stock", {"workflow_id": 1, "order_id": 1, "step": "stock"})
    silent = WorkerState(
        host="box", pid=7, queues=["points"], concurrency=1, batch_size=1,
        up_seconds=5.0, every=0.05, state="running", exit_reason=None, counts={}, lanes=[],
    )  # fmt: skip
    PresencePublisher(
        app.redis, key_prefix, GHOST, lambda: silent, 0.05, threading.Event()
    ).publish()
    worker = Worker(
        app.redis,
        ["stock"],
        registry,
        prefix=key_prefix,
        settings=QueueSettings(lease_seconds=30.0, max_block_seconds=0.2),
    )
    worker.start()
    try:
        wait_until(lambda: workers(app.redis, key_prefix).workers[0].busy == 1, 15, "a busy lane")
        yield env, app, worker
    finally:
        release.set()
        worker.request_stop()
        worker.join(10)
        app.close()


def test_status_and_watch_list_each_worker_and_what_its_busy_lane_runs(
    busy_worker: tuple[dict, App, Worker],
) -> None:
    env, app, worker = busy_worker
    (job_id,) = [
        lane.job_id for lane in workers(app.redis, app.settings.queue_prefix).workers[0].lanes
    ]

    shown = json.loads(orders(env, "status", "--json"))["workers"]
    by_id = {w["worker_id"]: w for w in shown["workers"]}
    mine = by_id[worker.worker_id]
    assert (mine["state"], mine["queues"], mine["lanes_busy"]) == ("running", ["stock"], 1)
    (lane,) = mine["lanes"]
    assert (lane["job_id"], lane["task"], lane["jobs"]) == (job_id, "orders.stock", 1)
    assert lane["since"] <= mine["last_heartbeat"] and lane["running_seconds"] >= 0
    assert by_id[GHOST]["state"] == "gone" and by_id[GHOST]["host"] == "box"
    assert shown["alive"] == 1 and shown["total"] == 2

    text = orders(env, "status")
    assert "workers (1 running, 1 gone)" in text
    assert worker.worker_id in text and "busy lanes" in text and job_id[:14] in text
    words = " ".join(text.split())  # the caption wraps
    assert "orders.stock" in text and "gone = no word for one heartbeat interval" in words
    assert "ghost\\x1b[2J" in text and "\x1b" not in text  # escaped, never sent raw
    watched = orders(env, "watch", "--once", "--interval", "0.2")
    assert "workers (1 running, 1 gone)" in watched and job_id[:14] in watched
