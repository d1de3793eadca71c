"""Every key a script writes is derived from the queue's ``{name}`` hash tag (one slot)."""

import time

from redis.crc import key_slot

from reliable_queue import EnqueueRequest, Queue, QueueSettings


def keys_of(client, prefix):
    return sorted(k.decode() for k in client.scan_iter(match=f"{prefix}*", count=1000))


def test_every_key_any_script_touches_carries_the_queue_hash_tag(redis_client, key_prefix):
    settings = QueueSettings(dlq_max_size=1, job_retention_seconds=0.05)
    queue = Queue(redis_client, "orders-x", prefix=key_prefix, settings=settings)
    run = {
        "enqueue": lambda: queue.enqueue_many(
            [
                EnqueueRequest("t", {}, idempotency_key="wf:1"),
                EnqueueRequest("t", {}, delay=0.05),
                *[EnqueueRequest("t", {}) for _ in range(14)],
            ]
        ),
        "fetch": lambda: queue.fetch(6, lease_seconds=0.05),
        "extend": lambda: queue.extend([j.lease for j in queue.fetch(1).jobs], 0.05),
        "ack": lambda: queue.ack([j.lease for j in queue.fetch(1).jobs]),
        "nack": lambda: queue.nack(queue.fetch(1).jobs[0].lease, delay=0.01),
        "dead": lambda: [queue.dead(j.lease, "error") for j in queue.fetch(2).jobs],
        "release": lambda: queue.release([j.lease for j in queue.fetch(1).jobs]),
        "reap": lambda: (time.sleep(0.06), queue.reap()),
        "redrive": lambda: queue.dead_letters.redrive(),
        "purge": lambda: (
            [queue.dead(j.lease, "error") for j in queue.fetch(1).jobs],
            queue.dead_letters.purge(),
        ),
    }
    before = set(keys_of(redis_client, key_prefix))
    seen: set[str] = set()

    for name, step in run.items():
        step()
        for key in keys_of(redis_client, key_prefix):
            if key == queue.keys.registry:
                continue  # the name registry is written outside scripts, by design
            assert "{orders-x}" in key, f"{name} touched {key}"
            seen.add(key)

    kinds = {k.split("}:", 1)[1].split(":")[0] for k in seen}
    assert {"ready", "jobs", "attempts", "leases", "dead", "done", "stats", "seq"} <= kinds
    assert "idem" in kinds and "wake" in kinds
    assert len({key_slot(k.encode()) for k in seen}) == 1
    assert not before - {queue.keys.registry}
