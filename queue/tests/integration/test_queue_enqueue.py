"""Enqueue: single and batched, delays, idempotency keys, limits and payload contracts."""

import time

import pytest
from pydantic import BaseModel
from queue_helpers import command_calls, places, redis_now

from reliable_queue import (
    EnqueueRequest,
    PayloadTooLargeError,
    PayloadValidationError,
    Queue,
    QueueSettings,
    RetryPolicy,
    TaskRegistry,
    UnknownTaskError,
    stats,
)


class Deduct(BaseModel):
    order_id: int
    sku: str


def test_enqueue_returns_an_id_and_the_job_is_ready(make_queue):
    queue = make_queue()

    job_id = queue.enqueue("stock.deduct", {"order_id": 1})

    assert places(queue, job_id) == ["ready"]
    assert stats(queue).counters["enqueued"] == 1
    (job,) = queue.fetch(5).jobs
    assert job.job_id == job_id and job.attempt == 1


def test_jobs_are_fetched_in_enqueue_order(make_queue):
    queue = make_queue()
    ids = queue.enqueue_many([EnqueueRequest("t", {"i": i}) for i in range(5)])

    fetched = [j.job_id for j in queue.fetch(5).jobs]

    assert fetched == ids


def test_enqueue_many_stores_a_batch_in_one_round_trip(private_client, key_prefix):
    queue = Queue(private_client, "jobs", prefix=key_prefix)
    queue.enqueue("warm", {})  # loads the script and registers the queue name
    private_client.config_resetstat()

    ids = queue.enqueue_many([EnqueueRequest("t", {"i": i}) for i in range(200)])

    calls = command_calls(private_client)
    # commandstats also counts the commands a script issues; the client sent one EVALSHA
    assert calls.pop("evalsha") == 1
    assert calls.pop("hsetnx") == 200
    # llen / zcard / hmget: the script validates the keys it writes (a read of each key's
    # own type; an idempotency key by its GET) and counters before its first write
    checks = {"llen", "zcard", "hlen", "type", "hmget"}
    assert set(calls) <= {"time", "lpush", "ltrim", "hincrby", "config", "info", *checks}
    assert len(set(ids)) == 200
    assert stats(queue).ready == 201


def test_a_single_enqueue_makes_only_the_calls_it_needs(private_client, key_prefix):
    """Each redis.call costs thousands of instructions: a job due now, with no key, is
    checked by the reads and the first write it makes anyway (no TIME, no TYPE, no
    trim of the wake list, no check of delayed)."""
    queue = Queue(private_client, "jobs", prefix=key_prefix)
    queue.enqueue("warm", {})
    private_client.config_resetstat()

    job_id = queue.enqueue("t", {})

    calls = command_calls(private_client)
    # ready and wake read (LLEN), the counters read (HMGET), the record (HSETNX, the
    # first write), the line and a wake token (LPUSH each), the counter (HINCRBY)
    assert calls == {"evalsha": 1, "llen": 2, "hmget": 1, "hsetnx": 1, "lpush": 2,
                     "hincrby": 1}  # fmt: skip
    assert places(queue, job_id) == ["ready"]


def test_wake_tokens_stay_within_their_cap_and_duplicates_add_none(make_queue):
    queue = make_queue(settings=QueueSettings(wake_tokens=4))
    wake = queue.keys.key("wake")

    queue.enqueue_many([EnqueueRequest("t", {"i": i}) for i in range(3)])
    assert queue.client.llen(wake) == 3
    queue.enqueue_many([EnqueueRequest("t", {"i": i}) for i in range(3)])
    assert queue.client.llen(wake) == 4
    queue.client.rpop(wake, 3)  # three idle workers took a token each
    queue.enqueue("t", {}, idempotency_key="once")
    assert queue.client.llen(wake) == 2
    queue.enqueue("t", {}, idempotency_key="once")  # a duplicate wakes no one
    assert queue.client.llen(wake) == 2
    queue.enqueue("t", {}, delay=3600)  # a delayed job wakes a worker to wait for it
    assert queue.client.llen(wake) == 3


def test_delayed_job_is_promoted_and_runs_once_due(make_queue):
    # fault 3: delayed jobs went to a set that nothing promoted
    queue = make_queue()
    job_id = queue.enqueue("t", {}, delay=0.4)

    assert places(queue, job_id) == ["delayed"]
    early = queue.fetch(1)
    assert early.jobs == [] and 0.2 < early.wait_seconds <= 0.4

    time.sleep(0.45)
    (job,) = queue.fetch(1).jobs
    assert job.job_id == job_id


def test_run_at_schedules_on_the_redis_clock_and_wins_over_delay(make_queue, redis_client):
    queue = make_queue()
    due = redis_now(redis_client) + 0.4

    job_id = queue.enqueue("t", {}, run_at=due, delay=60)

    explained = queue_explain(queue, job_id)
    assert explained.state == "delayed"
    assert explained.next_run_at == pytest.approx(due, abs=0.002)
    time.sleep(0.45)
    assert [j.job_id for j in queue.fetch(1).jobs] == [job_id]


def test_run_at_in_the_past_is_ready_at_once(make_queue, redis_client):
    queue = make_queue()

    job_id = queue.enqueue("t", {}, run_at=redis_now(redis_client) - 60)

    assert places(queue, job_id) == ["ready"]


def test_duplicate_idempotency_key_returns_the_first_job_id(make_queue):
    queue = make_queue()
    first = queue.enqueue("t", {"n": 1}, idempotency_key="wf-1:stock")

    again = queue.enqueue("t", {"n": 2}, idempotency_key="wf-1:stock")
    in_batch = queue.enqueue_many(
        [EnqueueRequest("t", {}, idempotency_key="wf-2:stock")] * 3
        + [EnqueueRequest("t", {}, idempotency_key="wf-1:stock")]
    )

    assert again == first
    assert in_batch[0] == in_batch[1] == in_batch[2] != first
    assert in_batch[3] == first
    s = stats(queue)
    assert (s.ready, s.counters["enqueued"], s.counters["duplicates"]) == (2, 2, 4)


def test_idempotency_key_expires_after_its_window(make_queue):
    queue = make_queue(settings=QueueSettings(idempotency_window_seconds=0.3))
    first = queue.enqueue("t", {}, idempotency_key="k")

    time.sleep(0.35)

    assert queue.enqueue("t", {}, idempotency_key="k") != first


def test_failed_enqueue_does_not_reserve_its_idempotency_key(make_queue, redis_client, key_prefix):
    # fault 4: the key was reserved in a separate call before the enqueue, so an enqueue
    # that failed blocked every later one for the whole window and the job was lost
    queue = make_queue(settings=QueueSettings(max_payload_bytes=200))
    batch = [
        EnqueueRequest("t", {"small": 1}, idempotency_key="wf-1:a"),
        EnqueueRequest("t", {"big": "x" * 500}, idempotency_key="wf-1:b"),
    ]

    with pytest.raises(PayloadTooLargeError):
        queue.enqueue_many(batch)

    assert list(redis_client.scan_iter(match=f"*{key_prefix}*:idem:*")) == []
    assert stats(queue).counters["enqueued"] == 0 and stats(queue).ready == 0
    retried = queue.enqueue_many([batch[0], EnqueueRequest("t", {}, idempotency_key="wf-1:b")])
    assert stats(queue).ready == 2 and len(set(retried)) == 2


def test_invalid_payload_in_a_batch_enqueues_nothing_and_leaves_no_key(
    make_queue, redis_client, key_prefix
):
    registry = TaskRegistry()
    registry.task("stock.deduct", model=Deduct)(lambda p, c: None)
    queue = make_queue(registry=registry)

    with pytest.raises(PayloadValidationError):
        queue.enqueue_many(
            [
                EnqueueRequest("stock.deduct", {"order_id": 1, "sku": "a"}, idempotency_key="x"),
                EnqueueRequest("stock.deduct", {"order_id": "one"}, idempotency_key="y"),
            ]
        )

    assert stats(queue).ready == 0
    assert list(redis_client.scan_iter(match=f"*{key_prefix}*:idem:*")) == []


def test_stale_idempotency_key_is_replaced_only_when_asked(make_queue):
    queue = make_queue()
    first = queue.enqueue("t", {}, idempotency_key="wf-9:points")
    queue.client.hdel(queue.keys.key("jobs"), first)  # Redis lost the job's record

    kept = queue.enqueue("t", {}, idempotency_key="wf-9:points")
    (replaced,) = queue.enqueue_many(
        [EnqueueRequest("t", {}, idempotency_key="wf-9:points")], replace_stale_keys=True
    )

    assert kept == first
    assert replaced != first
    assert queue.enqueue("t", {}, idempotency_key="wf-9:points") == replaced


def test_payload_over_the_size_limit_is_refused_at_enqueue(make_queue):
    queue = make_queue(settings=QueueSettings(max_payload_bytes=1024))
    queue.enqueue("t", {"blob": "x" * 900})

    with pytest.raises(PayloadTooLargeError):
        queue.enqueue("t", {"blob": "x" * 1100})

    assert stats(queue).ready == 1


def test_payload_is_validated_at_enqueue_with_the_error_at_once(make_queue):
    registry = TaskRegistry()
    registry.task("stock.deduct", model=Deduct)(lambda p, c: None)
    queue = make_queue(registry=registry)

    with pytest.raises(PayloadValidationError, match="sku"):
        queue.enqueue("stock.deduct", {"order_id": 1})
    with pytest.raises(UnknownTaskError):
        queue.enqueue("stock.deduct.v2", {"order_id": 1, "sku": "a"})
    job_id = queue.enqueue("stock.deduct", Deduct(order_id=1, sku="a"))

    assert queue_explain(queue, job_id).payload == {"order_id": 1, "sku": "a"}
    assert stats(queue).ready == 1


def test_non_json_payload_is_refused_never_pickled(make_queue):
    queue = make_queue()

    with pytest.raises(PayloadValidationError, match="not JSON serializable"):
        queue.enqueue("t", {"when": object()})
    assert stats(queue).ready == 0


@pytest.mark.parametrize(
    ("enqueued", "policy", "default", "stored"),
    [
        (0, 5, 5, 0),  # fault 7: an explicit 0 was replaced by the default (falsy check)
        (None, 0, 5, 0),
        (None, None, 4, 4),
        (3, 7, 5, 3),
        (None, 2, 5, 2),
    ],
)
def test_max_attempts_comes_from_the_enqueue_then_the_policy_then_the_queue_default(
    make_queue, enqueued, policy, default, stored
):
    registry = TaskRegistry()
    registry.task("t", retry=RetryPolicy(max_attempts=policy))(lambda p, c: None)
    queue = make_queue(registry=registry, settings=QueueSettings(default_max_attempts=default))

    job_id = queue.enqueue("t", {}, max_attempts=enqueued)

    assert queue_explain(queue, job_id).max_attempts == stored


def test_negative_max_attempts_is_refused(make_queue):
    with pytest.raises(ValueError):
        make_queue().enqueue("t", {}, max_attempts=-1)


def test_queue_refuses_a_client_that_decodes_responses(redis_url):
    import redis

    with redis.Redis.from_url(redis_url, decode_responses=True) as client:
        with pytest.raises(ValueError):
            Queue(client, "jobs")


def queue_explain(queue, job_id):
    from reliable_queue import explain

    return explain(queue, job_id)


def test_overdue_delayed_jobs_run_in_due_order_behind_earlier_due_waiting_jobs(make_queue):
    queue = make_queue()
    waiting = queue.enqueue("t", {"n": "waiting"})
    due = [queue.enqueue("t", {"n": i}, delay=0.05 + i * 0.01) for i in range(5)]
    time.sleep(0.15)  # all five are overdue; no fetch has promoted them yet

    fetched = [j.job_id for j in queue.fetch(6).jobs]

    assert fetched == [waiting, *due]  # first in, first out by due time
