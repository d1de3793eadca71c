"""A dead letter whose id is not UTF-8 text never breaks the DLQ tooling.

Planted as a foreign writer would (ZADD to the dead set, with and without a record),
one such id once made ``orders status`` and ``orders dlq list/redrive/purge`` exit 1
with a traceback, and failed every worker's reconcile pass. Now every view shows it by
its ``hex:`` form and goes on, a redrive leaves it with a message saying why, and it
is purged by that id.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from hostile_world import World, client_for, make_world, no_traceback, orders
from sqlalchemy import Engine

from orders.domain.steps import STOCK
from orders.sources.drafts import OrderDraft
from orders.worker.reconcile import reconcile_dead_letters
from reliable_queue import explain, find_job, stats

BARE = b"\xff\xfe-no-record"  # in the DLQ, nothing else
WITH_RECORD = b"\xc3(-with-record"  # in the DLQ with a record and failure info
BARE_HEX = "hex:" + BARE.hex()
RECORD_HEX = "hex:" + WITH_RECORD.hex()


@pytest.fixture
def world(
    engine: Engine,
    redis_client: redis.Redis,
    redis_url: str,
    database_url: str,
    key_prefix: str,
    tmp_path: Path,
    catalog: dict[int, int],
    make_draft: Callable[..., OrderDraft],
) -> Iterator[World]:
    world = make_world(
        engine, redis_client, redis_url, database_url, key_prefix, tmp_path, make_draft
    )
    keys = world.app.queues[STOCK].keys
    redis_client.zadd(keys.key("dead"), {BARE: 1_000, WITH_RECORD: 2_000})
    step = {"workflow_id": world.workflow_id, "order_id": world.order_id, "step": STOCK}
    record = json.dumps({"t": "orders.stock", "p": step})
    redis_client.hset(keys.key("jobs"), WITH_RECORD, record)
    redis_client.hset(keys.key("info"), WITH_RECORD, json.dumps({"reason": "error", "error": "x"}))
    try:
        yield world
    finally:
        world.app.close()


def dead_members(world: World) -> set[bytes]:
    return set(world.app.redis.zrange(world.app.queues[STOCK].keys.key("dead"), 0, -1))


def test_listing_shows_each_unreadable_id_in_hex_and_the_others_as_they_are(world: World) -> None:
    listed = json.loads(no_traceback(orders(world, "dlq", "list", "--json")))
    by_id = {d["job_id"]: d for d in listed}

    assert by_id[BARE_HEX]["id_unreadable"] and by_id[BARE_HEX]["record_missing"]
    assert by_id[RECORD_HEX]["task"] == "orders.stock" and by_id[RECORD_HEX]["reason"] == "error"
    assert not by_id[world.dead_job]["id_unreadable"]
    table = orders(world, "dlq", "list")
    assert table.exit_code == 0 and BARE_HEX[:14] in no_traceback(table)
    assert f"orders dlq purge {BARE_HEX}" in " ".join(table.output.split())


def test_status_show_and_explain_go_on_past_an_unreadable_id(world: World) -> None:
    overview = orders(world, "status")
    assert overview.exit_code == 0, no_traceback(overview)
    shown = orders(world, "dlq", "show", RECORD_HEX)
    assert shown.exit_code == 0 and "not UTF-8" in no_traceback(shown)
    assert orders(world, "dlq", "show", BARE_HEX[:10]).exit_code == 0  # a prefix finds it
    explained = orders(world, "explain", RECORD_HEX, "--json")
    assert json.loads(no_traceback(explained))["state"] == "dead"
    assert orders(world, "watch", "--once").exit_code == 0


def test_a_redrive_leaves_unreadable_ids_with_a_message_and_redrives_the_rest(
    world: World,
) -> None:
    dry = json.loads(no_traceback(orders(world, "dlq", "redrive", "--dry-run", "--json")))
    assert dry["would_redrive"] == [world.dead_job]
    assert sorted(dry["unrunnable"]) == sorted([BARE_HEX, RECORD_HEX])

    done = orders(world, "dlq", "redrive")

    assert done.exit_code == 0, no_traceback(done)
    assert "redrove 1 job(s)" in done.output
    assert f"left {RECORD_HEX}" in done.output and "purge it" in done.output
    assert dead_members(world) == {BARE, WITH_RECORD}
    by_id = orders(world, "dlq", "redrive", BARE_HEX)
    assert by_id.exit_code == 0 and f"left {BARE_HEX}" in no_traceback(by_id)


def test_an_unreadable_id_is_purged_by_its_hex_form_and_by_a_filter(world: World) -> None:
    one = orders(world, "dlq", "purge", BARE_HEX)
    assert one.exit_code == 0 and "purged 1" in no_traceback(one)
    assert dead_members(world) == {WITH_RECORD}

    rest = orders(world, "dlq", "purge", "--step", STOCK, "--yes")

    assert rest.exit_code == 0 and "purged 1" in no_traceback(rest)
    assert dead_members(world) == set()


def test_reconcile_passes_over_an_unreadable_id_and_marks_the_readable_ones(
    world: World,
) -> None:
    # the letter with a record names the world's stock step: that step is marked dead
    assert reconcile_dead_letters(world.app) == 1

    status = json.loads(no_traceback(orders(world, "status", str(world.order_id), "--json")))
    assert status["workflow_status"] == "blocked" and status["blocked_step"] == STOCK


def test_the_library_views_read_an_unreadable_id_by_its_hex_form(world: World) -> None:
    queue = world.app.queues[STOCK]

    assert stats(queue).dead == 2
    assert find_job([queue], RECORD_HEX[:12], dead_only=True).job_id == RECORD_HEX
    assert explain(queue, BARE_HEX).state == "dead"
    assert queue.locate(RECORD_HEX) == "dead"
    assert queue.dead_letters.show(BARE_HEX).id_unreadable
    assert set(queue.ids_in("dead")) == {BARE_HEX, RECORD_HEX}


def test_the_dashboard_lists_shows_and_acts_on_an_unreadable_id(
    world: World, tmp_path: Path
) -> None:
    with client_for(world, tmp_path) as client:
        for path in ("/", "/dlq", "/dlq?queue=stock", "/queues/stock", f"/dlq/stock/{BARE_HEX}",
                     f"/queues/stock/jobs/{RECORD_HEX}", f"/orders/{world.order_id}"):  # fmt: skip
            page = client.get(path)
            assert page.status_code == 200, (path, page.text[-2000:])
        assert BARE_HEX in client.get("/dlq").text
        assert "not UTF-8" in client.get(f"/dlq/stock/{RECORD_HEX}").text


def test_reconcile_copies_foreign_failure_info_as_a_step_row_can_hold_it(world: World) -> None:
    # a readable dead letter of the world's stock step, with a foreign writer's failure
    # info: a reason past VARCHAR(50), NUL characters (PostgreSQL text cannot hold one)
    # and attempts past 32 bits; each once failed the reconcile pass at every run
    app, keys = world.app, world.app.queues[STOCK].keys
    app.redis.delete(keys.key("dead"), keys.key("jobs"), keys.key("info"))
    foreign = b"foreign-1"
    step = {"workflow_id": world.workflow_id, "order_id": world.order_id, "step": STOCK}
    app.redis.zadd(keys.key("dead"), {foreign: 3_000})
    app.redis.hset(keys.key("jobs"), foreign, json.dumps({"t": "orders.stock", "p": step}))
    info = {"reason": "r" * 80 + "\u0000", "error": "boom\u0000 after"}
    app.redis.hset(keys.key("info"), foreign, json.dumps(info))
    app.redis.hset(keys.key("attempts"), foreign, str(2**40))

    assert reconcile_dead_letters(app) == 1

    status = json.loads(no_traceback(orders(world, "status", str(world.order_id), "--json")))
    (stock,) = [s for s in status["steps"] if s["step"] == STOCK]
    assert stock["status"] == "dead" and stock["outcome"] == "r" * 50
    assert stock["last_error"] == "boom\\x00 after" and stock["attempts"] == 2**31 - 1
