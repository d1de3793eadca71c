"""A real worker process's /livez and /readyz: a Redis outage flips readiness, never
liveness; a lane stuck past its time limit flips liveness until it returns."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from cli_processes import app_for, free_port, start_orders, stop, wait_for_http, wait_until
from test_metrics_scrape import Scrape

from orders.app.pacing import place_paced
from orders.sources.tpch import load_tpch
from orders.worker.faults import FaultConfig, FaultStore
from reliable_queue.embedded import EmbeddedRedis


def probe(url: str) -> tuple[int, str]:
    """GET ``url``: its status and body (a 503 is an answer, not an error)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read().decode()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_redis_outage_makes_a_worker_unready_but_never_dead(
    cli_env: dict[str, str], key_prefix: str, embedded_redis: EmbeddedRedis, tmp_path: Path
) -> None:
    env = dict(cli_env, ORDERS_REDIS_URL=embedded_redis.url, ORDERS_QUEUE_PREFIX=key_prefix)
    app = app_for(env)
    app.bind_namespace()  # the database migrated (on first use) and the namespace bound
    app.close()
    port = free_port()
    log = tmp_path / "worker.log"
    worker = start_orders(
        ["worker", "--all", "--concurrency", "1", "--metrics-port", str(port)], env, log
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(f"{base}/livez", worker, log)
        wait_until(lambda: probe(f"{base}/readyz")[0] == 200, 20, "the worker to be ready")
        status, body = probe(f"{base}/readyz")
        assert body.splitlines() == [
            "ok redis",
            "ok database",
            "ok namespace",
            "ok eviction",
            "ok",
        ]
        wait_until(  # the lanes open one by one
            lambda: probe(f"{base}/livez") == (200, "7 lane(s) serving\nok\n"),
            10,
            "the 7 lanes to start",
        )
        wait_until(
            lambda: Scrape(probe(f"{base}/metrics")[1]).total("orderflow_worker_lanes") == 7,
            10,
            "the worker's gauges",
        )
        scrape = Scrape(probe(f"{base}/metrics")[1])
        assert scrape.value("orderflow_worker_processes") == 1
        assert scrape.value("orderflow_worker_lanes", queue="stock", task="orders.stock") == 1
        assert scrape.value("orderflow_worker_lanes_busy", queue="stock") == 0
        assert scrape.value("orderflow_job_oldest_running_seconds", queue="stock") == 0
        assert scrape.value("orderflow_queue_oldest_waiting_seconds", queue="stock") == 0
        assert 10e6 < scrape.value("orderflow_worker_resident_memory_bytes", slot="slot0") < 2e9

        embedded_redis.stop(timeout=10.0)
        wait_until(lambda: probe(f"{base}/readyz")[0] == 503, 10, "readiness to fail")
        status, body = probe(f"{base}/readyz")
        assert "fail redis: ConnectionError" in body and "ok database" in body
        for _ in range(6):  # lanes retry Redis with a backoff up to 5 s: they still turn
            assert probe(f"{base}/livez")[0] == 200
            time.sleep(1.0)

        embedded_redis.ensure_running()
        wait_until(lambda: probe(f"{base}/readyz")[0] == 200, 15, "readiness to come back")
        assert probe(f"{base}/livez")[0] == 200
    finally:
        embedded_redis.ensure_running()  # the worker's graceful exit settles with Redis
        code = stop(worker)
    assert code == 0, log.read_text()[-3000:]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_lane_stuck_past_its_time_limit_fails_liveness_until_it_returns(
    cli_env: dict[str, str], key_prefix: str, tmp_path: Path
) -> None:
    # heartbeat every 0.5 s; a batch running past 1 s + 1 heartbeat makes the process dead
    env = dict(
        cli_env,
        ORDERS_QUEUE_PREFIX=key_prefix,
        ORDERS_LEASE_SECONDS="1.5",
        ORDERS_STEP_TIME_LIMIT_SECONDS="1",
        ORDERS_LIVENESS_HEARTBEATS="1",
    )
    app = app_for(env)
    load_tpch(app.session_factory, app.settings.resolved_data_dir(), scale=0.001)
    faults = FaultStore(app.redis, key_prefix)
    # a long hang: on a loaded machine each probe below may come seconds late
    faults.set("stock", FaultConfig(hang_rate=1.0, hang_ms=8000))
    port = free_port()
    log = tmp_path / "worker.log"
    worker = start_orders(
        ["worker", "stock", "--concurrency", "1", "--metrics-port", str(port)], env, log
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(f"{base}/livez", worker, log)
        place_paced(app, 1, source="random")
        wait_until(  # a late heartbeat may fail it first for another reason: wait for this one
            lambda: "abandoned lane of stock has run one batch for" in probe(f"{base}/livez")[1],
            30,
            "liveness to fail on the abandoned lane",
        )
        faults.clear()  # the retry runs; the stuck thread returns when its hang ends
        status, body = probe(f"{base}/livez")
        assert status == 503 and "abandoned lane of stock has run one batch for" in body, body
        assert "1 lane(s) serving" in body  # a fresh lane took its place
        wait_until(  # the gauges are sampled once a second
            lambda: (
                Scrape(probe(f"{base}/metrics")[1]).total(
                    "orderflow_worker_lanes_abandoned", queue="stock"
                )
                == 1
            ),
            10,
            "the abandoned lane's gauge",
        )
        scrape = Scrape(probe(f"{base}/metrics")[1])
        assert scrape.value("orderflow_job_oldest_running_seconds", queue="stock") >= 1
        assert probe(f"{base}/readyz")[0] == 200  # a stuck lane is no service outage
        wait_until(lambda: probe(f"{base}/livez")[0] == 200, 30, "liveness to come back")
    finally:
        faults.clear()
        code = stop(worker)
        app.close()
    assert code == 0, log.read_text()[-3000:]
