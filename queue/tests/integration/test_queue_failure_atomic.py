"""Failure-atomic, bounded scripts: a call either applies whole or not at all.

Redis keeps the writes a script made before an error, so each script validates
before its first write and never unpacks more than Lua allows. Each test here is an
observed loss: it failed (jobs in no structure, or a raw error) before the fix.
"""

import math
import threading
import time

import pytest
import redis
from queue_helpers import places, running_worker, wait_until

from reliable_queue import (
    EnqueueRequest,
    PayloadValidationError,
    Queue,
    QueueDataError,
    QueueSettings,
    TaskRegistry,
    stats,
)
from reliable_queue.limits import MAX_FETCH, SCRIPT_BATCH


def enqueue_n(queue, n):
    ids = []
    for start in range(0, n, 1000):
        part = [EnqueueRequest("t", {"i": i}) for i in range(start, min(start + 1000, n))]
        ids += queue.enqueue_many(part)
    return ids


def test_fetch_of_4000_leases_all_of_them_and_ack_and_extend_serve_4000(make_queue):
    """Case 1: fetch(4000) popped the ids, then failed; 4,000 jobs sat in no structure."""
    queue = make_queue(settings=QueueSettings(lease_seconds=60))
    ids = enqueue_n(queue, 4000)

    fetched = queue.fetch(4000)

    assert sorted(j.job_id for j in fetched.jobs) == sorted(ids)
    s = stats(queue)
    assert (s.ready, s.active) == (0, 4000)
    leases = [j.lease for j in fetched.jobs]
    assert queue.extend(leases, 120) == []
    result = queue.ack(leases)
    assert sorted(result.acked) == sorted(ids) and result.refused == []
    s = stats(queue)
    assert (s.active, s.done) == (0, 4000)


def test_a_worker_with_batch_size_4500_runs_every_job(redis_client, key_prefix):
    """Case 1: Worker(batch_size=4500) lost all 4,500 jobs."""
    registry = TaskRegistry()
    seen = set()
    registry.task("t")(lambda p, c: seen.add(c.job_id))
    settings = QueueSettings(lease_seconds=30, max_block_seconds=0.2)
    queue = Queue(redis_client, "big", prefix=key_prefix, settings=settings)
    ids = enqueue_n(queue, 4500)
    with running_worker(
        redis_client, ["big"], registry, prefix=key_prefix, settings=settings, batch_size=4500
    ):
        wait_until(lambda: stats(queue).counters["succeeded"] == 4500, timeout=60)
    assert seen == set(ids)
    assert stats(queue).ready == stats(queue).active == 0


def test_fetch_counts_beyond_the_documented_limit_are_refused_up_front(make_queue):
    queue = make_queue()
    with pytest.raises(ValueError, match=str(MAX_FETCH)):
        queue.fetch(MAX_FETCH + 1)


def test_a_wrong_type_idempotency_key_mid_batch_enqueues_nothing(make_queue):
    """Case 2: job 1's record and key were written, then the script failed on job 2's
    key (a list); job 1 was an orphan that a retry skipped as a duplicate."""
    queue = make_queue()
    queue.client.rpush(queue.keys.idempotency_key("k2"), "x")
    batch = [EnqueueRequest("t", {"i": i}, f"k{i + 1}") for i in range(3)]

    with pytest.raises(QueueDataError, match="k2"):
        queue.enqueue_many(batch)

    assert queue.client.hlen(queue.keys.key("jobs")) == 0
    assert queue.client.exists(queue.keys.idempotency_key("k1")) == 0
    queue.client.delete(queue.keys.idempotency_key("k2"))
    ids = queue.enqueue_many(batch)
    assert [places(queue, i) for i in ids] == [["ready"]] * 3
    assert stats(queue).counters["enqueued"] == 3


@pytest.mark.parametrize(
    "kind", ["ready", "delayed", "jobs", "stats", "wake", "counter", "idempotency"]
)
def test_a_wrong_type_key_refuses_a_single_enqueue_with_nothing_written(make_queue, kind):
    """Enqueue checks each key it writes by a read, or by its first write under pcall."""
    queue = make_queue()
    queue.enqueue("t", {}, idempotency_key="before")
    queue.enqueue("t", {}, delay=3600)  # every structure exists: each can be set aside
    client, keys = queue.client, queue.keys
    names = ("ready", "delayed", "jobs", "stats", "wake")
    before = {k: client.dump(keys.key(k)) for k in names}
    if kind == "counter":
        client.hset(keys.key("stats"), "enqueued", "many")
    elif kind == "idempotency":
        client.rpush(keys.idempotency_key("k"), "x")
    else:  # the structure set aside, a wrong-type key in its place
        client.rename(keys.key(kind), keys.key("aside"))
        client.set(keys.key(kind), "planted")

    with pytest.raises(
        QueueDataError, match={"counter": "enqueued", "idempotency": "idem"}.get(kind, kind)
    ):
        queue.enqueue("t", {}, idempotency_key="k", delay=3600 if kind == "delayed" else 0)

    if kind == "counter":
        client.hset(keys.key("stats"), "enqueued", "2")
    elif kind != "idempotency":
        client.delete(keys.key(kind))
        client.rename(keys.key("aside"), keys.key(kind))
    assert {k: client.dump(keys.key(k)) for k in names} == before
    if kind != "idempotency":
        assert client.exists(keys.idempotency_key("k")) == 0


@pytest.mark.parametrize("kind", ["done", "info", "stats"])
def test_a_wrong_type_structure_refuses_the_call_before_any_write(make_queue, kind):
    # an ack writes info only when it deletes the record (retention 0, or a trim)
    queue = make_queue(settings=QueueSettings(job_retention_seconds=0) if kind == "info" else None)
    (job_id,) = queue.enqueue_many([EnqueueRequest("t", {})])
    job = queue.fetch(1).jobs[0]
    queue.client.delete(queue.keys.key(kind))
    queue.client.set(queue.keys.key(kind), "planted")

    with pytest.raises(QueueDataError, match=kind):
        queue.ack([job.lease])

    # the ack changed nothing: the job is still active under its lease
    assert queue.client.zscore(queue.keys.key("active"), job_id) is not None
    assert queue.client.hget(queue.keys.key("leases"), job_id) == job.token.encode()


def test_enqueue_many_larger_than_one_script_is_split_and_complete(make_queue):
    queue = make_queue()
    ids = queue.enqueue_many(
        [EnqueueRequest("t", {"i": i}, f"k{i % (SCRIPT_BATCH + 10)}") for i in range(2500)]
    )
    assert len(ids) == 2500
    assert len(set(ids)) == SCRIPT_BATCH + 10  # duplicates across scripts still dedup
    assert stats(queue).ready == SCRIPT_BATCH + 10


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_floats_are_refused_at_enqueue(make_queue, bad):
    """Case 4: NaN / Infinity were stored silently as null."""
    queue = make_queue()
    with pytest.raises(PayloadValidationError, match=r"payload\['x'\]\[1\].*NaN or infinite"):
        queue.enqueue("t", {"x": [1.0, bad]})
    assert stats(queue).ready == 0
    queue.enqueue("t", {"x": None, "y": 1.5})  # a real null and finite floats still pass


def test_an_undecodable_id_is_isolated_and_its_batch_mates_run(redis_client, key_prefix):
    """Case 5: one id that is not UTF-8 sent its five good batch-mates to the DLQ unrun."""
    registry = TaskRegistry()
    ran = []
    registry.task("t")(lambda p, c: ran.append(c.job_id))
    settings = QueueSettings(lease_seconds=30, max_block_seconds=0.2)
    queue = Queue(redis_client, "hostile", prefix=key_prefix, settings=settings)
    good = [queue.enqueue("t", {"i": i}) for i in range(3)]
    bad_id = b"\xff\xfe-foreign"
    redis_client.hset(queue.keys.key("jobs"), bad_id, b'{"t":"t","p":{},"e":0,"m":1}')
    redis_client.lpush(queue.keys.key("ready"), bad_id)
    bad_record = queue.enqueue("t", {"i": 9})
    redis_client.hset(queue.keys.key("jobs"), bad_record, b'{"t":"t","p":"\xc3\x28"}')
    good += [queue.enqueue("t", {"i": i}) for i in range(3, 5)]

    with running_worker(
        redis_client, ["hostile"], registry, prefix=key_prefix, settings=settings, batch_size=10
    ):
        wait_until(lambda: stats(queue).counters["succeeded"] == 5)
        wait_until(lambda: stats(queue).dead == 2)

    assert sorted(ran) == sorted(good)
    assert stats(queue).counters["dead:invalid_record"] == 2
    assert redis_client.zscore(queue.keys.key("dead"), bad_id) is not None
    assert places(queue, bad_record) == ["dead"]


def test_enqueue_and_pipelines_survive_a_script_cache_flushed_over_and_over(
    private_client, embedded_redis, key_prefix
):
    """Case 6: with SCRIPT FLUSH in a loop, some enqueues raised a raw NoScriptError."""
    queue = Queue(private_client, "flushed", prefix=key_prefix)
    flusher = redis.Redis.from_url(embedded_redis.url)
    stop = threading.Event()

    def flush() -> None:
        while not stop.is_set():
            flusher.script_flush()

    thread = threading.Thread(target=flush, daemon=True)
    thread.start()
    try:
        ids = [queue.enqueue("t", {"i": i}) for i in range(400)]
        leased = []
        for _ in range(50):
            # a settlement and a fetch in one pipelined round trip
            calls = queue.ack_calls(leased) + queue.fetch_calls(8, 30, "w")
            replies = queue.scripts.run_many(calls)
            leased = [j.lease for j in queue.parse_fetches(replies[-1:]).jobs]
        queue.ack(leased)
    finally:
        stop.set()
        thread.join()
        flusher.close()
    s = stats(queue)
    assert len(set(ids)) == 400
    assert s.ready + s.done == 400 and s.active == 0
    assert s.done == 400 - s.ready == 400 - (400 - 50 * 8)


def test_a_split_fetch_never_reaps_the_leases_its_own_first_call_gave_out(make_queue):
    """Found by the model-based test: with a very short lease, the second script of a
    split fetch reaped the first script's leases and handed the same jobs out twice."""
    queue = make_queue()
    ids = enqueue_n(queue, SCRIPT_BATCH + 50)

    fetched = queue.fetch(SCRIPT_BATCH + 50, lease_seconds=0.001)

    got = [j.job_id for j in fetched.jobs]
    assert len(got) == len(set(got)) == len(ids)
    assert all(j.attempt == 1 for j in fetched.jobs)


def _snapshot(queue):
    """Every queue key's serialized value (None when absent)."""
    return {k: queue.client.dump(k) for k in queue.keys.script_keys()}


#: keys every fetch that leases touches (dead and stats only when it dead-letters or
#: counts something: see the test after the next)
FETCH_KEYS = ["ready", "delayed", "active", "jobs", "attempts", "leases", "info"]
ACK_KEYS = ["active", "leases", "done"]
#: keys an ack writes only when it deletes records (retention 0, or a retention trim)
ACK_DELETE_KEYS = ["jobs", "attempts", "info"]


@pytest.mark.parametrize(
    ("script", "kind", "retention"),
    [("fetch", k, 3600) for k in [*FETCH_KEYS, "seq"]]
    + [("ack", k, 3600) for k in [*ACK_KEYS, "stats"]]
    + [("ack", k, 0) for k in [*ACK_KEYS, *ACK_DELETE_KEYS, "stats"]],
)
def test_every_key_the_hot_path_touches_is_validated_before_its_first_write(
    make_queue, script, kind, retention
):
    """fetch and ack check some keys with an explicit read and others through the first
    read of them, each before the first write of the call that touches it; either way
    a key of the wrong type refuses the call with nothing written."""
    queue = make_queue(settings=QueueSettings(lease_seconds=60, job_retention_seconds=retention))
    enqueue_n(queue, 4)
    queue.enqueue("t", {}, delay=3600)
    held = queue.fetch(2).jobs
    key, aside = queue.keys.key(kind), queue.keys.key("aside")
    before = _snapshot(queue)
    if queue.client.exists(key):
        queue.client.rename(key, aside)
    queue.client.sadd(key, "planted")  # a type no queue key has
    try:
        with pytest.raises(QueueDataError, match=kind):
            if script == "fetch":
                queue.fetch(2)
            else:
                queue.ack([j.lease for j in held])
    finally:
        queue.client.delete(key)
        if queue.client.exists(aside):
            queue.client.rename(aside, key)
    assert _snapshot(queue) == before


@pytest.mark.parametrize(
    ("foreign", "kind"),
    [("invalid", k) for k in ["dead", "stats", "attempts"]] + [("orphan", "stats")],
)
def test_a_fetch_that_dead_letters_or_counts_checks_those_keys_first(make_queue, foreign, kind):
    """A fetch writes dead, stats (and deletes from attempts, in the DLQ trim) only when
    it dead-letters an id that cannot be a job id or counts an id without a record; it
    checks those keys then, before its first write."""
    queue = make_queue(settings=QueueSettings(lease_seconds=60))
    enqueue_n(queue, 2)
    bad_id = b"\xff\xfe-foreign" if foreign == "invalid" else b"no-record"
    if foreign == "invalid":
        queue.client.hset(queue.keys.key("jobs"), bad_id, b'{"t":"t","p":{},"e":0,"m":1}')
    queue.client.rpush(queue.keys.key("ready"), bad_id)  # the RPOP end: fetched first
    key, aside = queue.keys.key(kind), queue.keys.key("aside")
    before = _snapshot(queue)
    if queue.client.exists(key):
        queue.client.rename(key, aside)
    queue.client.sadd(key, "planted")
    try:
        with pytest.raises(QueueDataError, match=kind):
            queue.fetch(1)
    finally:
        queue.client.delete(key)
        if queue.client.exists(aside):
            queue.client.rename(aside, key)
    assert _snapshot(queue) == before
    assert queue.fetch(3).jobs  # with the keys back, the same fetch goes ahead
    assert queue.client.lpos(queue.keys.key("ready"), bad_id) is None


@pytest.mark.parametrize("kind", ACK_DELETE_KEYS)
def test_an_ack_that_trims_old_records_checks_the_keys_the_trim_deletes_from(make_queue, kind):
    queue = make_queue(settings=QueueSettings(lease_seconds=60, job_retention_seconds=1))
    enqueue_n(queue, 2)
    first, second = queue.fetch(2).jobs
    queue.ack([first.lease])
    queue.client.zadd(queue.keys.key("done"), {first.job_id: 0})  # long past retention
    key, aside = queue.keys.key(kind), queue.keys.key("aside")
    before = _snapshot(queue)
    if queue.client.exists(key):
        queue.client.rename(key, aside)
    queue.client.sadd(key, "planted")
    try:
        with pytest.raises(QueueDataError, match=kind):
            queue.ack([second.lease])
    finally:
        queue.client.delete(key)
        if queue.client.exists(aside):
            queue.client.rename(aside, key)
    assert _snapshot(queue) == before
    assert queue.ack([second.lease]).acked == [second.job_id]  # the trim then goes ahead
    assert queue.client.zscore(queue.keys.key("done"), first.job_id) is None


@pytest.mark.parametrize("first_write", ["promote", "reap"])
def test_a_fetch_that_writes_before_its_pop_checks_ready_first(make_queue, first_write):
    """Without a due job or an expired lease, fetch's RPOP is its first write (and its
    own check of ready); with one, the promotion or the reap writes first, so ready
    must be checked before them."""
    queue = make_queue(settings=QueueSettings(lease_seconds=0.05))
    if first_write == "promote":
        queue.enqueue("t", {}, delay=0.05)
    else:
        enqueue_n(queue, 1)
        assert len(queue.fetch(1, lease_seconds=0.05).jobs) == 1
    time.sleep(0.2)  # the delay / the lease is over
    key, aside = queue.keys.key("ready"), queue.keys.key("aside")
    before = _snapshot(queue)
    if queue.client.exists(key):
        queue.client.rename(key, aside)
    queue.client.sadd(key, "planted")
    try:
        with pytest.raises(QueueDataError, match="ready"):
            queue.fetch(1)
    finally:
        queue.client.delete(key)
        if queue.client.exists(aside):
            queue.client.rename(aside, key)
    assert _snapshot(queue) == before
