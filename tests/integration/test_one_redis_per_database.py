"""One Redis namespace belongs to one database; a stale idempotency hit is not trusted."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_processes import orders_command

from orders.app.bootstrap import build
from orders.app.db import make_engine
from orders.app.errors import NamespaceClaimed
from orders.app.migrate import upgrade_database
from orders.app.namespace import claim_key, rebind_namespace
from orders.app.settings import Settings
from orders.domain.steps import ALL_STEPS
from reliable_queue import Queue
from workflows.membership import DONE, READY, UNKNOWN, where_is
from workflows.messages import StepMessage
from workflows.publisher import QueuePublisher


@pytest.fixture
def other_database_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'other.db'}"
    upgrade_database(url)
    return url


def app_on(database_url: str, redis_client, key_prefix: str):
    upgrade_database(database_url)
    return build(
        Settings(database_url=database_url, queue_prefix=key_prefix),
        redis_override=redis_client,
        engine_override=make_engine(database_url),
    )


def test_a_second_database_is_refused_on_a_claimed_namespace_with_one_line_naming_both(
    database_url, other_database_url, redis_client, key_prefix
):
    first = app_on(database_url, redis_client, key_prefix)
    second = app_on(other_database_url, redis_client, key_prefix)
    try:
        assert set(first.queues) == set(ALL_STEPS)
        with pytest.raises(NamespaceClaimed) as refused:
            second.queues  # noqa: B018 - binding happens on first use
        message = str(refused.value)
        assert "\n" not in message
        assert first.database_label.id[:8] in message and second.database_label.id[:8] in message
        assert "rebind-redis" in message
        # the first database keeps working; its claim survives a restart of the app
        again = app_on(database_url, redis_client, key_prefix)
        try:
            again.bind_namespace()
        finally:
            again.engine.dispose()
    finally:
        for app in (first, second):
            app.engine.dispose()


def test_rebind_deletes_the_old_keys_and_hands_the_namespace_over(
    database_url, other_database_url, redis_client, key_prefix
):
    first = app_on(database_url, redis_client, key_prefix)
    second = app_on(other_database_url, redis_client, key_prefix)
    try:
        first.queues["stock"].enqueue("orders.stock", {"x": 1}, idempotency_key="1:stock")
        deleted = rebind_namespace(redis_client, key_prefix, second.database_label)
        assert deleted >= 3
        assert redis_client.keys(f"{key_prefix}:{{stock}}:*") == []
        second.bind_namespace()
        assert redis_client.get(claim_key(key_prefix)) is not None
        refused = app_on(database_url, redis_client, key_prefix)
        try:
            with pytest.raises(NamespaceClaimed):
                refused.bind_namespace()
        finally:
            refused.engine.dispose()
    finally:
        for app in (first, second):
            app.engine.dispose()


def message(key: str) -> StepMessage:
    return StepMessage("stock", "orders.stock", {"workflow_id": 1, "step": "stock"}, key)


def test_an_idempotency_hit_on_a_missing_or_finished_job_is_published_again(
    redis_client, key_prefix
):
    queue = Queue(redis_client, "stock", prefix=key_prefix)
    publisher = QueuePublisher(lambda _name: queue)
    publisher.publish([message("1:stock"), message("2:stock")])
    first_ids = queue.ids_in("ready")
    assert len(first_ids) == 2 and publisher.is_known("1:stock")
    # job of 1:stock finished (another database's run); job of 2:stock vanished
    fetched = queue.fetch(2, lease_seconds=30, worker_id="w")
    by_id = {j.job_id: j for j in fetched.jobs}
    done = by_id[redis_client.get(queue.keys.idempotency_key("1:stock")).decode()]
    gone = by_id[redis_client.get(queue.keys.idempotency_key("2:stock")).decode()]
    queue.ack([done.lease])
    redis_client.zrem(queue.keys.key("active"), gone.job_id)
    redis_client.hdel(queue.keys.key("jobs"), gone.job_id)
    assert where_is(queue, [done.job_id, gone.job_id]) == [DONE, UNKNOWN]
    assert not publisher.is_known("1:stock") and not publisher.is_known("2:stock")

    publisher.publish([message("1:stock"), message("2:stock")])
    fresh = queue.ids_in("ready")
    assert len(fresh) == 2 and not set(fresh) & set(first_ids)
    assert where_is(queue, fresh) == [READY, READY]
    assert publisher.is_known("1:stock") and publisher.is_known("2:stock")


def test_cli_refuses_a_second_database_with_one_line(
    cli_env, database_url, other_database_url, key_prefix
):
    import subprocess

    env = dict(cli_env, ORDERS_QUEUE_PREFIX=key_prefix, ORDERS_DATABASE_URL=database_url)
    upgrade_database(database_url)
    first = build(Settings(**_settings_from(env)))
    try:
        first.bind_namespace()
    finally:
        first.close()
    env["ORDERS_DATABASE_URL"] = other_database_url
    env["COLUMNS"] = "1000"  # the console wraps at the terminal width
    proc = subprocess.run(
        [*orders_command(), "status"], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "belongs to database" in lines[0] and "other.db" in lines[0]


def _settings_from(env: dict[str, str]) -> dict[str, object]:
    out: dict[str, object] = {
        "data_dir": Path(env["ORDERS_DATA_DIR"]),
        "database_url": env["ORDERS_DATABASE_URL"],
        "queue_prefix": env["ORDERS_QUEUE_PREFIX"],
    }
    if env.get("ORDERS_REDIS_URL"):
        out["redis_url"] = env["ORDERS_REDIS_URL"]
    return out
