"""The queue on a real 3-master, 3-replica Redis Cluster (the session's ``redis_cluster``).

A representative subset of the single-server suite: enqueue / idempotency, fetch,
ack, retry, lease expiry and reaping, the DLQ and redrive, explain and stats, and a
worker draining queues that live on different masters. Replica-acknowledged writes
(``min_replicas``) are tested here too, on the cluster and on a single server.
"""

from __future__ import annotations

import time

import pytest
from queue_helpers import FAST, running_worker, wait_until
from redis.crc import key_slot

from reliable_queue import (
    PermanentError,
    Queue,
    QueueSettings,
    ReplicationTimeoutError,
    TaskRegistry,
    explain,
    stats,
)


@pytest.fixture
def cq(cluster_client, key_prefix):
    """Factory of queues on the cluster under this test's prefix."""

    def make(name: str = "jobs", settings: QueueSettings = FAST) -> Queue:
        return Queue(cluster_client, name, prefix=key_prefix, settings=settings)

    return make


def test_enqueue_fetch_ack_with_idempotency_on_cluster(cq):
    queue = cq()
    first = queue.enqueue("t", {"n": 1}, idempotency_key="order-1")
    assert queue.enqueue("t", {"n": 1}, idempotency_key="order-1") == first
    other = queue.enqueue("t", {"n": 2})

    got = queue.fetch(5)
    assert [j.job_id for j in got.jobs] == [first, other]
    result = queue.ack([j.lease for j in got.jobs])

    assert result.acked == [first, other] and result.refused == []
    snap = stats(queue)
    assert (snap.ready, snap.active, snap.done) == (0, 0, 2)
    assert snap.counters["duplicates"] == 1 and snap.counters["succeeded"] == 2
    assert explain(queue, first).state == "done"


def test_retry_and_reaped_lease_on_cluster(cq):
    queue = cq(settings=QueueSettings(lease_seconds=0.3, max_block_seconds=0.2))
    job_id = queue.enqueue("t", {})
    lease = queue.fetch(1).jobs[0].lease
    assert queue.nack(lease, delay=0.2, error="try later")
    assert explain(queue, job_id).state == "delayed"

    again = wait_until(lambda: queue.fetch(1).jobs, timeout=5)
    assert again[0].attempt == 2
    time.sleep(0.4)  # let the lease expire without an ack
    third = wait_until(lambda: queue.fetch(1).jobs, timeout=5)

    assert third[0].attempt == 2  # a first loss of the worker is not charged
    assert queue.ack([again[0].lease]).refused == [job_id]  # the stale token is fenced off
    assert stats(queue).counters["reaped"] == 1


def test_dead_letter_show_redrive_and_purge_on_cluster(cq):
    queue = cq()
    ids = [queue.enqueue("t", {"n": n}) for n in range(3)]
    for job in queue.fetch(3).jobs:
        assert queue.dead(job.lease, "error", error=f"bad {job.job_id}")

    letters = queue.dead_letters.list()
    assert sorted(d.job_id for d in letters) == sorted(ids)  # same ms: any order
    assert queue.dead_letters.show(ids[0]).error == f"bad {ids[0]}"
    assert queue.dead_letters.redrive(ids=ids[:2]).redriven == ids[:2]
    assert queue.dead_letters.purge() == 1

    snap = stats(queue)
    assert (snap.ready, snap.dead) == (2, 0)
    assert snap.counters["redriven"] == 2 and snap.counters["purged"] == 1


def test_worker_drains_queues_on_different_masters(redis_cluster, cluster_client, key_prefix, cq):
    names = ["alpha", "beta", "gamma", "delta", "epsilon"]
    queues = {name: cq(name) for name in names}
    masters = {redis_cluster.master_of_slot(key_slot(f"{{{n}}}".encode())) for n in names}
    assert len(masters) >= 2, "the test's queues should span masters"
    registry = TaskRegistry()
    seen: list[int] = []
    registry.task("ok")(lambda payload, ctx: seen.append(payload["n"]))

    @registry.task("bad")
    def bad(payload, ctx):
        raise PermanentError("no")

    for n in range(200):
        queues[names[n % len(names)]].enqueue("ok", {"n": n})
    queues["beta"].enqueue("bad", {})
    with running_worker(
        cluster_client, names, registry, prefix=key_prefix, settings=FAST, concurrency=2
    ):
        wait_until(lambda: len(seen) == 200, timeout=30)
        wait_until(lambda: stats(queues["beta"]).dead == 1, timeout=10)

    assert sorted(seen) == list(range(200))
    assert sum(stats(q).counters["succeeded"] for q in queues.values()) == 200


def test_replica_acknowledged_writes_succeed_with_replicas(cq):
    durable = QueueSettings(lease_seconds=2.0, min_replicas=1, replica_timeout_seconds=2.0)
    queue = cq(settings=durable)
    job_id = queue.enqueue("t", {}, idempotency_key="k")
    job = queue.fetch(1).jobs[0]
    assert queue.ack([job.lease]).acked == [job_id]


def test_too_few_replicas_is_a_clear_error(redis_client, key_prefix):
    # a single server has no replica: WAIT 1 returns 0 after the timeout
    settings = QueueSettings(min_replicas=1, replica_timeout_seconds=0.1)
    queue = Queue(redis_client, "jobs", prefix=key_prefix, settings=settings)

    with pytest.raises(ReplicationTimeoutError) as caught:
        queue.enqueue("t", {}, idempotency_key="k")

    assert (caught.value.acked, caught.value.wanted) == (0, 1)
    assert "0 of 1" in str(caught.value)
    # the write reached the master: re-sending with the key returns the same job
    relaxed = Queue(redis_client, "jobs", prefix=key_prefix)
    assert relaxed.enqueue("t", {}, idempotency_key="k") == caught.value.replies[0][0].decode()


def test_a_fencing_floor_on_cluster_lifts_the_next_tokens(cq):
    queue = cq()
    floor = 4 * 10**15  # above the queue clock (ms * 1000) until the year 2096
    assert queue.raise_fencing_floor(floor) == floor
    queue.enqueue("t", {})
    token = queue.fetch(1).jobs[0].token
    assert int(token.split(":")[0]) == floor + 1


def test_pause_and_resume_on_cluster(cq, cluster_client):
    queue = cq()
    job = queue.enqueue("t", {})
    assert key_slot(queue.keys.paused.encode()) == key_slot(queue.keys.key("ready").encode())

    state = queue.pause(reason="on a cluster", by="test")
    result = queue.fetch(5)
    assert result.jobs == [] and result.paused
    assert stats(queue).paused == state == queue.paused()

    assert queue.resume() is True
    assert [j.job_id for j in queue.fetch(5).jobs] == [job]


def test_priorities_fairness_keys_caps_and_throttles_on_cluster(cq):
    queue = cq(settings=QueueSettings(lease_seconds=30.0, max_block_seconds=0.2))
    low = queue.enqueue("t", {}, priority=8)
    plain = queue.enqueue("t", {})
    keyed = [queue.enqueue("t", {}, priority=2, fairness_key="c1") for _ in range(3)]
    queue.set_key_cap(2)
    got = queue.fetch(10)
    assert [j.job_id for j in got.jobs] == [*keyed[:2], plain, low]  # c1 is capped at 2
    assert queue.throttle(got.jobs[0].lease, 0) == "throttled"  # its slot comes back
    again = queue.fetch(10)
    assert [j.job_id for j in again.jobs] == [keyed[0]]  # first in its band
    assert queue.fetch(10).capped
    queue.ack([got.jobs[1].lease])
    assert [j.job_id for j in queue.fetch(10).jobs] == [keyed[2]]
    assert explain(queue, keyed[0]).priority == 2 and stats(queue).key_cap == 2
