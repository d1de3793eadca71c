"""The queue clock (ADR 0022): a step of the Redis host's clock moves no deadline.

The stepped tests run a real redis-server under libfaketime (``stepped_redis``) and
step its wall clock while the queue uses it; the others use the test's Redis.
"""

from __future__ import annotations

import time

import pytest
import redis
from queue_helpers import FAST, running_worker, wait_until

from reliable_queue import (
    EnqueueRequest,
    Lease,
    Queue,
    QueueDataError,
    QueueSettings,
    TaskRegistry,
    explain,
    stats,
)
from reliable_queue.clock import LAST_FIELD, OFFSET_FIELD

HOUR = 3600.0
#: What a step back may add to a wait: the last queue time written may be up to a
#: second old, the clock runs at 9/10 while the offset slews back, one blocking wait
#: that spanned the step ends at its timeout + 1 s margin; plus scheduling slack.
BOUND = 3.0


def test_a_job_delayed_2s_runs_2s_later_when_the_redis_clock_steps_back_an_hour(
    stepped_redis, key_prefix
):
    # seen: the job due 2 s later became due 3,582 s later; a worker blocked on the
    # wake list while the clock stepped back stayed blocked (Redis ends a BLPOP by its
    # wall clock). The client has no socket timeout: the queue bounds its waits itself.
    client = redis.Redis.from_url(stepped_redis.url)
    ran: list[float] = []
    registry = TaskRegistry()
    registry.task("t")(lambda payload, ctx: ran.append(time.monotonic()))
    queue = Queue(client, "jobs", prefix=key_prefix, settings=FAST)
    try:
        with running_worker(client, ["jobs"], registry, prefix=key_prefix, settings=FAST):
            time.sleep(0.3)  # the worker is idle, blocked on the wake list
            start = time.monotonic()
            queue.enqueue("t", {}, delay=2.0)
            time.sleep(0.2)  # woken by the enqueue, the worker blocks again until due
            stepped_redis.step(-HOUR)
            wait_until(lambda: ran, timeout=2.0 + BOUND + 3.0)
    finally:
        client.close()
    took = ran[0] - start
    assert 1.9 <= took <= 2.0 + BOUND, took


def test_explain_measures_a_lease_on_the_queue_clock_after_a_step_back(stepped_redis, key_prefix):
    client = redis.Redis.from_url(stepped_redis.url)
    queue = Queue(client, "jobs", prefix=key_prefix, settings=QueueSettings(lease_seconds=30))
    try:
        queue.enqueue("t", {})
        job = queue.fetch(1).jobs[0]
        stepped_redis.step(-HOUR)
        seen = explain(queue, job.job_id)  # before any script saw the step
        queue.fetch(1)  # a script absorbs the step into the offset
        after = explain(queue, job.job_id)
    finally:
        client.close()
    for info in (seen, after):
        assert 29.0 <= info.lease_deadline - info.queue_time <= 30.0
        assert info.clock_offset == pytest.approx(HOUR, abs=5.0)
    assert stats(queue).clock["offset_ms"] == pytest.approx(HOUR * 1000, abs=5000)


def test_a_step_forward_ends_leases_early_and_the_stale_acks_are_refused(stepped_redis, key_prefix):
    # stepping forward was harmless and stays so: the leases end early, the jobs are
    # leased again with higher fencing tokens, the first holders' acks are refused,
    # and every job finishes once
    client = redis.Redis.from_url(stepped_redis.url)
    queue = Queue(client, "jobs", prefix=key_prefix, settings=QueueSettings(lease_seconds=60))
    try:
        ids = queue.enqueue_many([EnqueueRequest("t", {"i": i}) for i in range(5)])
        first = queue.fetch(5, worker_id="a").jobs
        stepped_redis.step(+HOUR)
        second = []
        for _ in range(10):  # reaped as a lost batch: each is leased alone once
            second += queue.fetch(5, worker_id="b").jobs
        assert sorted(j.job_id for j in second) == sorted(ids)
        tokens = {j.job_id: j.token for j in first}
        assert all(int(j.token.split(":")[0]) > int(tokens[j.job_id].split(":")[0]) for j in second)

        assert queue.ack([Lease(j.job_id, j.token) for j in first]).refused == ids
        assert sorted(queue.ack([j.lease for j in second]).acked) == sorted(ids)
    finally:
        client.close()
    s = stats(queue)
    assert (s.done, s.active, s.ready, s.dead) == (5, 0, 0, 0)
    assert (s.counters["succeeded"], s.counters["stale_refused"]) == (5, 5)


def test_the_queue_clock_is_written_about_once_a_second_not_at_every_call(make_queue):
    queue = make_queue()
    client, key = queue.client, queue.keys.key("stats")
    queue.fetch(1)  # the first call that reads the clock writes it
    first = int(client.hget(key, LAST_FIELD))
    calls, start = 0, time.monotonic()
    while time.monotonic() - start < 0.5:
        queue.fetch(1)
        calls += 1
    assert calls >= 20 and int(client.hget(key, LAST_FIELD)) == first
    time.sleep(1.0)
    queue.fetch(1)
    assert int(client.hget(key, LAST_FIELD)) >= first + 1000
    assert stats(queue).clock == {"last_ms": int(client.hget(key, LAST_FIELD)), "offset_ms": 0}
    assert not any(name.startswith("clock") for name in stats(queue).counters)


def _refusing(queue: Queue, kind: str):
    """A call of the script that reads the clock and refuses the wrong-type ``kind``."""
    lease = Lease("some-job", "1:w")
    return {
        "delayed": lambda: queue.enqueue("t", {}, delay=60),
        "active": lambda: queue.fetch(1),
        "leases": lambda: queue.ack([lease]),
        "info": lambda: queue.nack(lease),
        "dead": lambda: queue.dead(lease, "error"),
        "done": lambda: queue.maintain(),
    }[kind]


@pytest.mark.parametrize("kind", ["delayed", "active", "leases", "info", "dead", "done"])
def test_a_refused_script_writes_no_clock_field(make_queue, kind):
    """The clock is written after a script's checks, never as a write before them."""
    queue = make_queue()
    queue.enqueue("t", {})
    queue.fetch(1)
    client, keys = queue.client, queue.keys
    client.hdel(keys.key("stats"), LAST_FIELD, OFFSET_FIELD)  # a write is due now
    if client.exists(keys.key(kind)):
        client.rename(keys.key(kind), keys.key("aside"))
    client.sadd(keys.key(kind), "planted")
    with pytest.raises(QueueDataError, match=kind):
        _refusing(queue, kind)()
    assert client.hmget(keys.key("stats"), [LAST_FIELD, OFFSET_FIELD]) == [None, None]
    client.delete(keys.key(kind))


@pytest.mark.parametrize("value", [b"soon", b"-5", b"9" * 20, b""])
def test_an_unreadable_clock_field_counts_as_unset_and_is_written_again(make_queue, value):
    queue = make_queue()
    key = queue.keys.key("stats")
    queue.client.hset(key, mapping={LAST_FIELD: value, OFFSET_FIELD: value})
    before = time.time() * 1000
    queue.enqueue("t", {})
    assert len(queue.fetch(1).jobs) == 1
    last, offset = queue.client.hmget(key, [LAST_FIELD, OFFSET_FIELD])
    assert int(offset) == 0 and int(last) >= before - 1000
