"""The queue owns its keys: the methods the application uses instead of touching them.

``drop_untrusted_keys`` and ``pending_jobs_for`` apply the one rule
(``places.key_is_trusted``); the enqueue script's ``replace_stale_keys`` replaces
only keys that rule distrusts; ``size_of``, ``lease_tokens``,
``evict_key_for_chaos``, ``DeadLetters.newest`` and ``namespace.delete_namespace``
replace the application's own reads and writes of queue keys (ADR 0029).
"""

from __future__ import annotations

import pytest

from reliable_queue import EnqueueRequest, QueueDataError
from reliable_queue.keys import KEY_ORDER
from reliable_queue.namespace import delete_namespace
from reliable_queue.places import PENDING_PLACES, PLACES, key_is_trusted

KEY = "wf-1:stock"


def _job_at(queue, place: str, key: str = KEY) -> str:
    """Enqueue one job with idempotency key ``key`` and move it to ``place``."""
    (job_id,) = queue.enqueue_many(
        [EnqueueRequest("t", {"k": key}, key, delay=3600 if place == "delayed" else 0)]
    )
    if place in ("active", "dead", "done", "unknown"):
        (job,) = queue.fetch(1).jobs
        assert job.job_id == job_id
        if place == "dead":
            queue.dead(job.lease, "error")
        elif place in ("done", "unknown"):
            queue.ack([job.lease])
    if place == "nowhere":  # an evicted ready list: the record stays
        queue.evict_key_for_chaos("ready")
    if place == "unknown":  # Redis lost the record and its place
        queue.client.zrem(queue.keys.key("done"), job_id)
        queue.client.hdel(queue.keys.key("jobs"), job_id)
    assert queue.locate(job_id) == place
    return job_id


def test_the_rule_trusts_exactly_the_pending_places():
    assert {p for p in PLACES if key_is_trusted(p)} == PENDING_PLACES
    assert not key_is_trusted(None)


@pytest.mark.parametrize("place", PLACES)
def test_drop_untrusted_keys_keeps_a_key_only_while_its_job_is_pending(make_queue, place):
    queue = make_queue()
    job_id = _job_at(queue, place)

    dropped = queue.drop_untrusted_keys([KEY])

    if key_is_trusted(place):
        assert dropped == []
        assert queue.pending_jobs_for([KEY]) == [job_id]
        assert queue.enqueue("t", {}, idempotency_key=KEY) == job_id  # still a duplicate
    else:
        assert dropped == [KEY]
        assert queue.client.get(queue.keys.idempotency_key(KEY)) is None
        assert queue.pending_jobs_for([KEY]) == [None]
        fresh = queue.enqueue("t", {}, idempotency_key=KEY)
        assert fresh != job_id and queue.locate(fresh) == "ready"


def test_drop_untrusted_keys_answers_per_key_in_order_and_passes_absent_keys_over(make_queue):
    queue = make_queue()
    _job_at(queue, "done", "a")
    _job_at(queue, "done", "d")
    ready = _job_at(queue, "ready", "b")  # last: a fetch would lease it

    assert queue.drop_untrusted_keys(["a", "b", "c", "d"]) == ["a", "d"]
    assert queue.pending_jobs_for(["a", "b", "c", "d"]) == [None, ready, None, None]
    assert queue.drop_untrusted_keys([]) == []


def test_a_key_that_changed_meanwhile_is_not_deleted(make_queue):
    """The delete compares: a key another enqueue replaced now maps to a live job."""
    queue = make_queue()
    old = _job_at(queue, "done")
    fresh = _job_at(queue, "ready", "other")
    queue.client.set(queue.keys.idempotency_key(KEY), fresh)  # replaced after the read

    assert queue._forget_key_if(KEY, old) is False
    assert queue.client.get(queue.keys.idempotency_key(KEY)) == fresh.encode()


def test_a_wrong_type_key_is_a_data_error_and_nothing_is_deleted(make_queue):
    queue = make_queue()
    _job_at(queue, "done", "a")
    queue.client.rpush(queue.keys.idempotency_key("b"), "x")

    # one key or several (a pipelined read, whose error redis-py words "Command # 2
    # (GET ...) of pipeline caused error: WRONGTYPE ..."): the library's error, always
    with pytest.raises(QueueDataError, match="WRONGTYPE"):
        queue.drop_untrusted_keys(["b"])
    with pytest.raises(QueueDataError, match="WRONGTYPE"):
        queue.drop_untrusted_keys(["a", "b"])
    with pytest.raises(QueueDataError, match="WRONGTYPE"):
        queue.pending_jobs_for(["a", "b"])
    assert queue.client.exists(queue.keys.idempotency_key("a")) == 1


@pytest.mark.parametrize("place", PLACES)
def test_replace_stale_keys_replaces_only_keys_the_rule_distrusts(make_queue, place):
    """The enqueue script's own check can never disagree with the rule: it replaces a
    key only when its job record is gone, which is ``unknown``, never a pending place."""
    queue = make_queue()
    job_id = _job_at(queue, place)

    (answer,) = queue.enqueue_many(
        [EnqueueRequest("t", {}, idempotency_key=KEY)], replace_stale_keys=True
    )

    replaced = answer != job_id
    assert replaced == (place == "unknown")
    if replaced:
        assert not key_is_trusted(place)


def test_size_of_counts_each_structure_and_refuses_a_key_that_is_none(make_queue):
    queue = make_queue()
    queue.enqueue_many([EnqueueRequest("t", {"i": i}) for i in range(3)])
    queue.enqueue("t", {}, delay=3600)
    queue.fetch(1)

    sizes = {kind: queue.size_of(kind) for kind in KEY_ORDER if kind != "seq"}
    assert sizes["ready"] == 2 and sizes["delayed"] == 1 and sizes["active"] == 1
    assert sizes["leases"] == 1 and sizes["jobs"] == 4 and sizes["dead"] == 0
    for kind in ("seq", "idem", "bogus"):
        with pytest.raises(ValueError):
            queue.size_of(kind)
    queue.client.delete(queue.keys.key("dead"))
    queue.client.set(queue.keys.key("dead"), "x")
    with pytest.raises(QueueDataError, match="dead"):
        queue.size_of("dead")


def test_lease_tokens_name_the_workers_that_hold_leases(make_queue):
    queue = make_queue()
    assert queue.lease_tokens() == []
    queue.enqueue_many([EnqueueRequest("t", {"i": i}) for i in range(3)])
    held = queue.fetch(2, worker_id="host:4242:ab").jobs

    tokens = queue.lease_tokens()

    assert sorted(tokens) == sorted(job.lease.token for job in held)
    assert all(t.endswith(":host:4242:ab") for t in tokens)


def test_evict_key_for_chaos_strands_the_jobs_of_a_structure(make_queue):
    queue = make_queue()
    ids = queue.enqueue_many([EnqueueRequest("t", {"i": i}) for i in range(3)])

    assert queue.evict_key_for_chaos("ready") == 3
    assert queue.size_of("ready") == 0
    assert queue.locate_many(ids) == ["nowhere"] * 3
    assert queue.evict_key_for_chaos("ready") == 0
    with pytest.raises(ValueError):
        queue.evict_key_for_chaos("seq")


def test_dead_letters_newest_are_the_newest_ids_newest_first(make_queue):
    queue = make_queue()
    ids = queue.enqueue_many([EnqueueRequest("t", {"i": i}) for i in range(3)])
    for job in queue.fetch(3).jobs:
        queue.dead(job.lease, "error")
    # distinct times, in enqueue order (recent ones: the DLQ trims by age)
    base = int(queue.client.zrange(queue.keys.key("dead"), 0, 0, withscores=True)[0][1])
    queue.client.zadd(queue.keys.key("dead"), {j: base + 1000 * n for n, j in enumerate(ids)})
    at = [(base + 1000 * n) / 1000.0 for n in range(3)]

    assert queue.dead_letters.newest(2) == [(at[2], ids[2]), (at[1], ids[1])]
    assert queue.dead_letters.newest(10) == [(at[2], ids[2]), (at[1], ids[1]), (at[0], ids[0])]
    assert queue.dead_letters.newest(2)[0][0] == queue.dead_letters.show(ids[2]).dead_at
    assert queue.dead_letters.newest(0) == []
    queue.client.delete(queue.keys.key("dead"))
    queue.client.set(queue.keys.key("dead"), "x")
    with pytest.raises(QueueDataError, match="dead"):
        queue.dead_letters.newest(2)


def test_delete_namespace_deletes_every_key_of_the_prefix_and_nothing_else(
    make_queue, redis_client, key_prefix
):
    queues = [make_queue("stock"), make_queue("points")]
    for queue in queues:
        queue.enqueue_many([EnqueueRequest("t", {"i": i}, f"{i}:s") for i in range(600)])
    redis_client.set(f"{key_prefix}:database", "app key")
    neighbour = f"{key_prefix}x:database"  # another prefix that starts the same
    redis_client.set(neighbour, "kept")
    try:
        ours = sum(1 for _ in redis_client.scan_iter(match=f"{key_prefix}:*", count=1000))

        assert delete_namespace(redis_client, key_prefix) == ours
        assert list(redis_client.scan_iter(match=f"{key_prefix}:*")) == []
        assert redis_client.get(neighbour) == b"kept"
        assert delete_namespace(redis_client, key_prefix) == 0
    finally:
        redis_client.delete(neighbour)
