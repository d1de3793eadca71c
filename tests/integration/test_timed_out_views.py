"""A run a real worker failed as ``timed_out`` shows in every view: ``orders explain``,
``orders status``, the dashboard's job page, queue page and overview, and /metrics."""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cli_processes import app_for, orders_command
from starlette.testclient import TestClient

from orders.app.bootstrap import App
from orders.web.app import create_app
from orders.web.settings import WebSettings
from reliable_queue import (
    JobContext,
    QueueSettings,
    RetryPolicy,
    TaskRegistry,
    Worker,
    explain,
    stats,
)

LIMIT = 0.3  # seconds: the hung run's time limit


def wait_for(check: Callable[[], object], timeout: float = 10.0) -> object:
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)
    return result


@pytest.fixture
def env(cli_env: dict[str, str], key_prefix: str) -> dict[str, str]:
    env = dict(cli_env, ORDERS_QUEUE_PREFIX=key_prefix, COLUMNS="120")
    app_for(env, migrate=True).close()
    return env


def hang_once(env: dict[str, str], key_prefix: str, max_attempts: int) -> tuple[App, str]:
    """A stock job run by a real worker that hung past its time limit once: retried (the
    retry waits a minute) or, at its last attempt, dead-lettered. The caller closes the app.
    """
    app = app_for(env)
    unblock = threading.Event()
    registry = TaskRegistry()
    policy = RetryPolicy(max_attempts=max_attempts, base_delay=60.0, jitter=False, time_limit=LIMIT)

    @registry.task("orders.stock", retry=policy)
    def hang(payload: dict, ctx: JobContext) -> None:
        unblock.wait(30)

    queue = app.queues["stock"]
    payload = {"workflow_id": 1, "order_id": 1, "step": "stock"}
    job_id = queue.enqueue("orders.stock", payload, max_attempts=max_attempts)
    worker = Worker(
        app.redis,
        [queue.name],
        registry,
        prefix=key_prefix,
        settings=QueueSettings(lease_seconds=0.9, max_block_seconds=0.2),
    )
    worker.start()
    try:
        wait_for(lambda: stats(queue).counters.get("timed_out", 0) == 1)
        worker.request_stop()
    finally:
        unblock.set()
        worker.join(5)
    return app, job_id


@pytest.fixture
def timed_out(env: dict[str, str], key_prefix: str) -> Iterator[tuple[App, str]]:
    """A stock job whose first run hung past its time limit (the retry waits a minute)."""
    app, job_id = hang_once(env, key_prefix, max_attempts=3)
    try:
        yield app, job_id
    finally:
        app.close()


@pytest.fixture
def dead_timed_out(env: dict[str, str], key_prefix: str) -> Iterator[tuple[App, str]]:
    """A stock job whose only attempt hung past its time limit: dead-lettered as
    ``timed_out``."""
    app, job_id = hang_once(env, key_prefix, max_attempts=1)
    try:
        wait_for(lambda: app.queues["stock"].dead_letters.show(job_id) is not None)
        yield app, job_id
    finally:
        app.close()


def test_explain_and_status_show_a_timed_out_attempt(
    env: dict[str, str], timed_out: tuple[App, str]
) -> None:
    app, job_id = timed_out
    info = explain(app.queues["stock"], job_id)
    assert (info.state, info.attempts, info.last_failure["reason"]) == ("delayed", 1, "timed_out")

    shown = subprocess.run(
        [*orders_command(), "explain", job_id], env=env, capture_output=True, text=True, timeout=120
    )
    assert shown.returncode == 0, shown.stderr
    assert "timed_out" in shown.stdout and "TimeLimitExceeded" in shown.stdout
    status = subprocess.run(
        [*orders_command(), "status"], env=env, capture_output=True, text=True, timeout=120
    )
    assert status.returncode == 0, status.stderr
    assert "(timed_out): stock 1" in status.stdout


def test_the_dashboard_shows_a_timed_out_attempt(
    timed_out: tuple[App, str], tmp_path: Path
) -> None:
    app, job_id = timed_out
    web = create_app(app, WebSettings(token=None, sample_seconds=0.2), multiproc=tmp_path / "m")
    with TestClient(web, base_url="http://127.0.0.1:8080", client=("127.0.0.1", 50000)) as client:
        job = client.get(f"/queues/stock/jobs/{job_id}")
        assert job.status_code == 200
        assert 'id="failure-reason">timed_out<' in job.text
        assert "ran past its time limit" in job.text
        queue_page = client.get("/queues/stock").text
        assert re.search(r"<td>timed_out</td><td class=\"n\">1</td>", queue_page)

        def overview() -> bool:
            page = client.get("/partials/overview").text
            return bool(re.search(r'id="timed-out-stock">1<', page))

        wait_for(overview)
        metrics = client.get("/metrics").text
        line = r'orderflow_jobs_timed_out_total\{queue="stock",task="orders.stock"\} 1\.0'
        assert re.search(line, metrics), metrics


def test_timed_out_is_a_dead_letter_reason_every_filter_takes(
    env: dict[str, str], dead_timed_out: tuple[App, str], tmp_path: Path
) -> None:
    """Regression: the worker dead-letters a run that timed out at its last attempt as
    ``timed_out``, but the list of reasons lacked it: ``orders dlq list --reason
    timed_out`` exited 2, the dashboard's DLQ filter answered 400 and /metrics counted
    the letter under ``unknown``."""
    app, job_id = dead_timed_out
    assert app.queues["stock"].dead_letters.show(job_id).reason == "timed_out"
    listed = subprocess.run(
        [*orders_command(), "dlq", "list", "--reason", "timed_out", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    assert [letter["job_id"] for letter in json.loads(listed.stdout)] == [job_id]
    web = create_app(app, WebSettings(token=None, sample_seconds=0.2), multiproc=tmp_path / "m")
    with TestClient(web, base_url="http://127.0.0.1:8080", client=("127.0.0.1", 50000)) as client:
        page = client.get("/dlq", params={"reason": "timed_out"})
        assert page.status_code == 200, page.text
        assert job_id[:8] in page.text
        metrics = client.get("/metrics").text
        line = (
            r'orderflow_jobs_dead_lettered_total\{queue="stock",reason="timed_out",'
            r'task="orders.stock"\} 1\.0'
        )
        assert re.search(line, metrics), metrics
