"""Bounded trims, run by workers on a timer: a quiet queue is trimmed too (case 3)."""

import time

from queue_helpers import redis_now, running_worker, wait_until

from reliable_queue import EnqueueRequest, Queue, QueueSettings, TaskRegistry, stats
from reliable_queue.limits import TRIM_STEP


def plant_dead_letters(queue, n, at_ms):
    pipe = queue.client.pipeline(transaction=False)
    for i in range(n):
        job_id = f"d{i:06d}"
        pipe.hset(queue.keys.key("jobs"), job_id, b'{"t":"t","p":{},"e":0,"m":1}')
        pipe.zadd(queue.keys.key("dead"), {job_id: at_ms + i})
    pipe.execute()


def test_lowering_the_dlq_bound_trims_in_bounded_steps(make_queue):
    """Case 3: the next dead letter's trim ran one script over the whole excess."""
    now_ms = int(redis_now(make_queue().client) * 1000)
    queue = make_queue(settings=QueueSettings(dlq_max_size=100))
    plant_dead_letters(queue, 3 * TRIM_STEP, now_ms)

    assert queue.maintain(max_steps=1) == (TRIM_STEP, 0)  # one step: at most TRIM_STEP
    dead, _ = queue.maintain()

    assert dead == 2 * TRIM_STEP - 100
    assert stats(queue).dead == 100
    assert queue.client.hlen(queue.keys.key("jobs")) == 100  # records went with them
    assert stats(queue).counters["dlq_dropped"] == 3 * TRIM_STEP - 100


def test_a_dead_letter_trims_no_more_than_one_step(make_queue):
    now_ms = int(redis_now(make_queue().client) * 1000)
    queue = make_queue(settings=QueueSettings(dlq_max_size=10))
    plant_dead_letters(queue, 2 * TRIM_STEP, now_ms - 10_000)
    queue.enqueue("t", {})

    queue.dead(queue.fetch(1).jobs[0].lease, "error")

    assert stats(queue).dead == 2 * TRIM_STEP + 1 - TRIM_STEP


def test_a_worker_trims_a_quiet_queue_on_its_timer(redis_client, key_prefix):
    """Case 3: old dead letters and finished records were kept until new work came."""
    settings = QueueSettings(
        dlq_max_age_seconds=1.0,
        job_retention_seconds=1.0,
        maintenance_interval_seconds=0.2,
        audit_interval_seconds=0,
        max_block_seconds=0.2,
    )
    queue = Queue(redis_client, "quiet", prefix=key_prefix, settings=settings)
    now_ms = int(redis_now(redis_client) * 1000)
    plant_dead_letters(queue, 30, now_ms - 60_000)
    queue.enqueue_many([EnqueueRequest("t", {"i": i}) for i in range(5)])
    queue.ack([j.lease for j in queue.fetch(5).jobs])
    time.sleep(1.1)  # the finished records pass the retention window; nothing new comes
    registry = TaskRegistry()
    registry.task("t")(lambda p, c: None)

    with running_worker(redis_client, ["quiet"], registry, prefix=key_prefix, settings=settings):
        wait_until(lambda: stats(queue).dead == 0 and stats(queue).done == 0, timeout=5)

    assert queue.client.hlen(queue.keys.key("jobs")) == 0


def test_a_worker_repairs_an_orphan_on_its_audit_timer(redis_client, key_prefix):
    settings = QueueSettings(
        audit_interval_seconds=0.2, maintenance_interval_seconds=0, max_block_seconds=0.2
    )
    queue = Queue(redis_client, "lost", prefix=key_prefix, settings=settings)
    job_id = queue.enqueue("t", {})
    redis_client.delete(queue.keys.key("ready"))  # the record stays, in no structure
    ran = []
    registry = TaskRegistry()
    registry.task("t")(lambda p, c: ran.append(c.job_id))

    with running_worker(redis_client, ["lost"], registry, prefix=key_prefix, settings=settings):
        wait_until(lambda: ran == [job_id], timeout=5)

    assert stats(queue).counters["orphans_repaired"] == 1
