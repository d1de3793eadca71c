"""``orders queue pause`` / ``resume``: the verbs, their bad usage (exit 2), and the
paused state in ``status``, ``watch``, the audit and the metrics (ADR 0031)."""

from __future__ import annotations

import json

import pytest
import redis as redis_lib
from typer.testing import CliRunner, Result

from orders.cli.main import app
from orders.domain.steps import ALL_STEPS
from reliable_queue import Queue
from reliable_queue.pausing import MAX_REASON_CHARS


def orders(env: dict[str, str], *args: str) -> Result:
    """The CLI in this process (faster than a subprocess once the services run)."""
    return CliRunner().invoke(app, list(args), env=env)


@pytest.fixture
def env(cli_env: dict[str, str], key_prefix: str, redis_url: str) -> dict[str, str]:
    # the tests' Redis, this test's key prefix: no embedded server to start
    url = cli_env.get("ORDERS_REDIS_URL") or redis_url
    env = dict(cli_env, ORDERS_QUEUE_PREFIX=key_prefix, ORDERS_REDIS_URL=url)
    upgraded = orders(env, "db", "upgrade")
    assert upgraded.exit_code == 0, upgraded.output
    return env


def queue(env: dict[str, str], client: redis_lib.Redis, step: str) -> Queue:
    return Queue(client, step, prefix=env["ORDERS_QUEUE_PREFIX"])


def test_pause_and_resume_one_step_and_every_step(env: dict[str, str]) -> None:
    with redis_lib.Redis.from_url(env["ORDERS_REDIS_URL"]) as client:
        paused = orders(env, "queue", "pause", "points", "--reason", "provider down")
        assert paused.exit_code == 0, paused.output
        assert "paused points" in paused.stdout
        state = queue(env, client, "points").paused()
        assert state is not None and state.reason == "provider down" and "@" in state.by
        assert all(queue(env, client, s).paused() is None for s in ALL_STEPS if s != "points")

        status = orders(env, "status")
        assert status.exit_code == 0, status.output
        shown = " ".join(status.stdout.split())
        assert "queue points is paused since" in shown and "provider down" in shown
        as_json = json.loads(orders(env, "status", "--json").stdout)
        assert as_json["queues"]["points"]["paused"]["reason"] == "provider down"
        assert as_json["queues"]["stock"]["paused"] is None
        watched = orders(env, "watch", "--once", "--interval", "0.2")
        assert watched.exit_code == 0, watched.output
        assert "paused: points since" in " ".join(watched.stdout.split())

        resumed = orders(env, "queue", "resume", "points")
        assert resumed.exit_code == 0 and "resumed points" in resumed.stdout
        assert queue(env, client, "points").paused() is None
        assert "paused" not in orders(env, "status").stdout
        again = orders(env, "queue", "resume", "points")
        assert again.exit_code == 0 and "points was not paused" in again.stdout

        every = orders(env, "queue", "pause", "--all")
        assert every.exit_code == 0, every.output
        assert all(queue(env, client, s).paused() is not None for s in ALL_STEPS)
        assert orders(env, "queue", "resume", "--all").exit_code == 0
        assert all(queue(env, client, s).paused() is None for s in ALL_STEPS)


@pytest.mark.parametrize(
    "args",
    [
        ["pause"],  # neither STEP nor --all
        ["pause", "points", "--all"],  # both
        ["pause", "nosuchstep"],
        ["pause", "points", "--reason", "x" * (MAX_REASON_CHARS + 1)],
        ["pause", "points", "--reason", "\ud800"],
        ["resume"],
        ["resume", "points", "--all"],
        ["resume", "nosuchstep"],
    ],
)
def test_bad_usage_exits_2_and_changes_nothing(env: dict[str, str], args: list[str]) -> None:
    result = orders(env, "queue", *args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    with redis_lib.Redis.from_url(env["ORDERS_REDIS_URL"]) as client:
        assert all(queue(env, client, s).paused() is None for s in ALL_STEPS)


def test_an_untrusted_reason_reaches_the_terminal_escaped(env: dict[str, str]) -> None:
    hostile = "\x1b[2J\x1b]0;owned\x07\u202eevil"
    assert orders(env, "queue", "pause", "stock", "--reason", hostile).exit_code == 0
    with redis_lib.Redis.from_url(env["ORDERS_REDIS_URL"]) as client:
        # a foreign writer's by: longer than any pause may set, with control bytes
        client.hset(queue(env, client, "stock").keys.paused, "by", "\x1b[31m" + "b" * 5000)
        for args in (["status"], ["watch", "--once", "--interval", "0.2"]):
            result = orders(env, *args)
            assert result.exit_code == 0, result.output
            assert "\x1b" not in result.stdout and "\x07" not in result.stdout, args
            assert "\u202e" not in result.stdout
            assert "\\x1b[2J" in result.stdout.replace("\n", "")
            assert "b" * 201 not in result.stdout.replace("\n", "")


def test_audit_reports_a_wrong_type_paused_key_and_resume_removes_it(
    env: dict[str, str],
) -> None:
    with redis_lib.Redis.from_url(env["ORDERS_REDIS_URL"]) as client:
        key = queue(env, client, "logistics").keys.paused
        client.rpush(key, "x")
        found = orders(env, "queue", "audit", "--step", "logistics")
        assert found.exit_code == 1, found.output
        assert f"key {key} holds a list" in " ".join(found.stdout.split())
        as_json = json.loads(orders(env, "queue", "audit", "--step", "logistics", "--json").stdout)
        assert as_json[0]["problems"]
        status = orders(env, "status")
        assert status.exit_code == 0 and key in " ".join(status.output.split())

        assert orders(env, "queue", "resume", "logistics").exit_code == 0
        assert client.exists(key) == 0
        assert orders(env, "queue", "audit", "--step", "logistics").exit_code == 0


def test_the_paused_gauge(env: dict[str, str]) -> None:
    from orders.app.bootstrap import build
    from orders.app.settings import Settings
    from orders.domain.steps import task_name
    from orders.observability.collectors import queue_families
    from reliable_queue import stats

    assert orders(env, "queue", "pause", "notification").exit_code == 0
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            if name.startswith("ORDERS_"):
                mp.setenv(name, value)
        built = build(Settings())
        try:
            readings = [stats(q) for q in built.queues.values()]
        finally:
            built.close()
    family = next(
        f for f in queue_families(readings, task_name) if f.name == "orderflow_queue_paused"
    )
    values = {s.labels["queue"]: s.value for s in family.samples}
    assert values["notification"] == 1 and values["stock"] == 0
