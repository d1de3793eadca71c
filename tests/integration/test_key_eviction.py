"""A Redis that may evict keys is detected at start: workers refuse it, status warns."""

from __future__ import annotations

import subprocess

import pytest
import redis
from cli_processes import orders_command

from orders.app.errors import KeyEvictionPossible
from orders.app.eviction import check_key_eviction, key_eviction_problem
from orders.app.migrate import upgrade_database


def migrated(env: dict[str, str]) -> dict[str, str]:
    """``env`` after migrating its configured database (the embedded SQLite migrates itself)."""
    if env.get("ORDERS_DATABASE_URL"):
        upgrade_database(env["ORDERS_DATABASE_URL"])
    return env


@pytest.fixture
def evicting_redis(embedded_redis):
    """A private server set to ``maxmemory-policy allkeys-lru``; yields (url, client)."""
    url = embedded_redis.ensure_running()
    client = redis.Redis.from_url(url)
    client.config_set("maxmemory-policy", "allkeys-lru")
    try:
        yield url, client
    finally:
        client.close()


def test_an_evicting_policy_is_refused_unless_allowed(evicting_redis):
    _, client = evicting_redis
    with pytest.raises(KeyEvictionPossible) as refused:
        check_key_eviction(client, allow=False)
    assert "allkeys-lru" in str(refused.value)
    assert "ORDERS_ALLOW_KEY_EVICTION" in str(refused.value)
    warning = check_key_eviction(client, allow=True)
    assert warning is not None and "noeviction" in warning
    client.config_set("maxmemory-policy", "noeviction")
    assert key_eviction_problem(client) is None
    assert check_key_eviction(client, allow=False) is None


def test_a_worker_will_not_start_on_an_evicting_redis(evicting_redis, cli_env, key_prefix):
    url, _ = evicting_redis
    env = migrated(
        dict(cli_env, ORDERS_REDIS_URL=url, ORDERS_QUEUE_PREFIX=key_prefix, COLUMNS="1000")
    )
    proc = subprocess.run(
        [*orders_command(), "worker", "stock", "--no-metrics"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert "maxmemory-policy is allkeys-lru" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_status_warns_loudly_about_an_evicting_redis(evicting_redis, cli_env, key_prefix):
    url, _ = evicting_redis
    env = migrated(
        dict(cli_env, ORDERS_REDIS_URL=url, ORDERS_QUEUE_PREFIX=key_prefix, COLUMNS="1000")
    )
    proc = subprocess.run(
        [*orders_command(), "status"], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "WARNING: Redis maxmemory-policy is allkeys-lru, not noeviction" in proc.stderr


def test_readiness_fails_on_an_evicting_redis_unless_allowed(
    evicting_redis, engine, key_prefix, tmp_path
):
    from orders.app.bootstrap import build
    from orders.app.settings import Settings
    from orders.observability.readiness import readiness

    _, client = evicting_redis
    for allow, line in ((False, "fail eviction: Redis may evict"), (True, "ok eviction")):
        settings = Settings(
            data_dir=tmp_path / "data", queue_prefix=key_prefix, allow_key_eviction=allow
        )
        app = build(settings, redis_override=client, engine_override=engine)
        verdict = readiness(app)
        assert any(shown.startswith(line) for shown in verdict.lines), verdict.lines
        assert verdict.ok is allow
