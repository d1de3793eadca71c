"""A queue key holding a value of the wrong type never breaks a read-only view.

A foreign writer or a bug can leave a list where a hash belongs (``RPUSH
'orderflow:{stock}:idem:1:stock' x`` once made ``orders status 1`` exit 1 with a raw
WRONGTYPE error and the order's page answer 503). Each key of a queue gets such a value
in turn, and every read-only view (the library's stats, explain, locate and DLQ
reads; ``orders status``, ``status ID``, ``dlq list/show``, ``explain``, ``watch``;
every dashboard page) must answer without a traceback or a 5xx, name the key where it
says anything, and still show the rest.
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
from reliable_queue import QueueError, explain, find_job, stats

#: Every key of a queue and the type it holds (an idempotency key: ``idem``).
KEY_TYPES = {"ready": "list", "delayed": "zset", "active": "zset", "jobs": "hash",
             "attempts": "hash", "leases": "hash", "dead": "zset", "info": "hash",
             "done": "zset", "stats": "hash", "seq": "string", "wake": "list",
             "paused": "hash", "limit": "hash", "waiting": "zset", "flow": "hash",
             "tags": "hash", "running": "zset", "keycap": "string",
             "idem": "string"}  # fmt: skip
KINDS = sorted(KEY_TYPES)


def test_the_kinds_are_every_key_of_a_queue() -> None:
    from reliable_queue.keys import FLOW_KEYS, KEY_ORDER

    assert set(KEY_TYPES) == {*KEY_ORDER, *FLOW_KEYS, "idem"}


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
    try:
        yield world
    finally:
        world.app.close()


def plant(world: World, kind: str) -> tuple[str, str]:
    """Replace the key of ``kind`` of the stock and points queues by a value of another
    type (the stock step's idempotency key for ``idem``); return the stock key's name."""
    names = []
    for name in (STOCK, "points"):
        keys = world.app.queues[name].keys
        if kind == "idem":
            key = keys.idempotency_key(f"{world.workflow_id}:{name}")
        else:
            key = keys.key(kind)
        world.app.redis.delete(key)
        if KEY_TYPES[kind] == "list":
            world.app.redis.set(key, "x")
        else:
            world.app.redis.rpush(key, "x")
        names.append(key)
    return names[0], names[1]


def library_views(world: World) -> None:
    """Every library read on both queues: a result, or a QueueError naming the problem."""
    for name, job in ((STOCK, world.ready_job), ("points", world.dead_job)):
        queue, key = world.app.queues[name], f"{world.workflow_id}:{name}"
        stats(queue)  # always answers: a wrong-type key is in .corrupt
        explain(queue, job)  # always answers: a wrong-type key is in .malformed
        calls: list[Callable[[], object]] = [
            lambda q=queue, j=job: q.locate(j),
            lambda q=queue: list(q.dead_letters.iter()),
            lambda q=queue: q.dead_letters.size(),
            lambda q=queue, j=job: q.dead_letters.show(j),
            lambda q=queue, k=key: q.pending_job_for(k),
            lambda q=queue, j=job: find_job([q], j),
            lambda q=queue: q.ids_in("ready"),
        ]
        for call in calls:
            try:
                call()
            except QueueError as exc:  # the library's own error, naming the key
                assert "holds a" in str(exc) or "no job id" in str(exc), exc


@pytest.mark.parametrize("kind", KINDS)
def test_a_wrong_type_key_never_breaks_a_library_view(world: World, kind: str) -> None:
    plant(world, kind)

    library_views(world)  # no redis.ResponseError, no UnicodeDecodeError

    counts = stats(world.app.queues[STOCK])
    if kind in ("ready", "delayed", "active", "dead", "done", "stats", "paused"):
        assert set(counts.corrupt) == {kind} and "expected a" in counts.corrupt[kind]


@pytest.mark.parametrize("kind", KINDS)
def test_a_wrong_type_key_never_breaks_a_cli_view(world: World, kind: str) -> None:
    stock_key, _ = plant(world, kind)

    for args in (
        ["status"],
        ["status", "--json"],
        ["status", str(world.order_id)],
        ["status", str(world.order_id), "--json"],
        ["dlq", "list"],
    ):
        result = orders(world, *args)
        assert result.exit_code == 0, (args, result.output)
        no_traceback(result)
    for args in (
        ["dlq", "show", world.dead_job],
        ["explain", world.ready_job],
        ["explain", world.dead_job],
        ["watch", "--once"],
    ):
        result = orders(world, *args)
        assert result.exit_code in (0, 1), (args, result.output)
        no_traceback(result)
        if result.exit_code == 1:  # a view that could not answer says which key, in a line
            assert "holds a" in result.output and len(result.output.splitlines()) <= 3
    if kind in ("idem", "ready", "stats", "dead", "paused"):
        shown = (
            orders(world, "status")
            if kind != "idem"
            else orders(world, "status", str(world.order_id))
        )
        assert stock_key in " ".join(shown.output.split()), shown.output


def test_the_reported_case_an_idempotency_key_pushed_as_a_list(world: World) -> None:
    stock_key, _ = plant(world, "idem")

    result = orders(world, "status", str(world.order_id))

    assert result.exit_code == 0, result.output
    text = " ".join(no_traceback(result).split())
    assert f"stock: its job id is unreadable: key {stock_key} holds a list" in text
    as_json = json.loads(orders(world, "status", str(world.order_id), "--json").stdout)
    assert [s["job_id"] for s in as_json["steps"] if s["step"] == STOCK] == [None]
    assert STOCK in as_json["unreadable"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_wrong_type_key_never_makes_a_dashboard_page_fail(
    world: World, kind: str, tmp_path: Path
) -> None:
    stock_key, _ = plant(world, kind)
    composite = ["/", "/partials/overview", "/queues/stock", "/queues/points", "/dlq",
                 "/dlq?queue=points", "/orders", f"/orders/{world.order_id}",
                 "/metrics"]  # fmt: skip
    single = [f"/queues/stock/jobs/{world.ready_job}", f"/queues/points/jobs/{world.dead_job}",
              f"/dlq/points/{world.dead_job}"]  # fmt: skip

    with client_for(world, tmp_path) as client:
        for path in composite:
            page = client.get(path)
            assert page.status_code == 200, (kind, path, page.text[-1500:])
        for path in single:
            page = client.get(path)
            assert page.status_code < 500, (kind, path, page.text[-1500:])
        if kind == "idem":
            assert "its job id is unreadable" in client.get(f"/orders/{world.order_id}").text
        if kind in ("ready", "delayed", "active", "dead", "done", "stats", "paused"):
            assert f"key {stock_key} holds a" in client.get("/queues/stock").text
            assert f"key {stock_key} holds a" in client.get("/").text


@pytest.mark.parametrize("kind", ["dead", "jobs", "info", "attempts"])
def test_reconcile_goes_on_past_a_queue_whose_dlq_keys_are_unreadable(
    world: World, kind: str
) -> None:
    plant(world, kind)

    assert reconcile_dead_letters(world.app) == 0  # stock's and points' letters not read
