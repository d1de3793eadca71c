"""A master of a real Redis Cluster is SIGKILLed mid-run; its replica takes over.

With ``min_replicas=1`` every enqueue that returned was on a replica before it
returned, so the promoted replica has it: every acknowledged job is processed.
The worker follows the new topology (refreshing its slot table on connection
errors and MOVED replies) without a lane dying or hanging.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback

import pytest
from queue_helpers import running_worker, wait_until
from redis.crc import key_slot

from reliable_queue import (
    Queue,
    QueueConnectionError,
    QueueSettings,
    ReplicationTimeoutError,
    TaskRegistry,
    stats,
)

DURABLE = QueueSettings(
    lease_seconds=2.0, max_block_seconds=0.5, min_replicas=1, replica_timeout_seconds=1.0
)


class Producer(threading.Thread):
    """Enqueues jobs 0..total-1 in order, each with its own idempotency key; a job
    counts as acknowledged only once ``enqueue`` returned. Errors retry the same key."""

    def __init__(self, queue: Queue, total: int, deadline: float) -> None:
        super().__init__(daemon=True)
        self.queue, self.total, self.deadline = queue, total, deadline
        self.acked: list[int] = []
        self.errors: dict[str, int] = {}
        #: an error the queue should never let out (not a QueueError), with its traceback
        self.escaped: str | None = None

    def run(self) -> None:
        n = 0
        while n < self.total and time.monotonic() < self.deadline:
            try:
                self.queue.enqueue("t", {"n": n}, idempotency_key=f"job-{n}")
            except (QueueConnectionError, ReplicationTimeoutError) as exc:
                kind = type(exc).__name__
                self.errors[kind] = self.errors.get(kind, 0) + 1
                time.sleep(0.05)
                continue
            except Exception:  # noqa: BLE001 - reported by the test, not swallowed
                self.escaped = traceback.format_exc()
                return
            self.acked.append(n)
            n += 1
            time.sleep(0.005)  # a steady trickle, so the kill lands mid-run


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_master_killed_mid_run_loses_no_acknowledged_job(
    private_cluster, private_cluster_client, key_prefix, caplog
):
    caplog.set_level(logging.WARNING, logger="reliable_queue")
    client = private_cluster_client
    queue = Queue(client, "fo", prefix=key_prefix, settings=DURABLE)
    slot = key_slot(queue.keys.key("ready").encode())
    victim = private_cluster.master_of_slot(slot)
    processed: set[int] = set()
    registry = TaskRegistry()
    registry.task("t")(lambda payload, ctx: processed.add(payload["n"]))
    producer = Producer(queue, total=400, deadline=time.monotonic() + 90)

    with running_worker(
        client, ["fo"], registry, prefix=key_prefix, settings=DURABLE, concurrency=2
    ):
        producer.start()
        wait_until(lambda: len(producer.acked) >= 100, timeout=30)
        private_cluster.kill(victim)
        killed_at = len(producer.acked)
        # the replica is promoted after cluster-node-timeout (2 s) plus an election
        promoted = wait_until(lambda: _new_master(private_cluster, slot, victim), timeout=30)
        # min_replicas=1 needs a replica again: the old master comes back as one
        private_cluster.restart(victim)
        private_cluster.wait_healthy(timeout=60)
        producer.join(timeout=100)
        wait_until(lambda: set(producer.acked) <= processed, timeout=60, interval=0.1)

    assert promoted != victim
    assert producer.escaped is None, producer.escaped
    assert len(producer.acked) == 400 and killed_at < 400, producer.errors
    lost = set(producer.acked) - processed
    assert not lost, f"acknowledged jobs never processed: {sorted(lost)[:20]}"
    assert stats(queue).active == 0
    lane_deaths = [r for r in caplog.records if "lane of queue" in r.getMessage()]
    assert lane_deaths == [], lane_deaths[0].getMessage() if lane_deaths else ""


def _new_master(cluster, slot: int, old: int) -> int | None:
    try:
        port = cluster.master_of_slot(slot)
    except (LookupError, OSError):
        return None
    except Exception:  # a node mid-failover may refuse CLUSTER SLOTS
        return None
    return port if port != old else None
