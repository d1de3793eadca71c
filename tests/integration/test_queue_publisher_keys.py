"""QueuePublisher against real Redis: the queue decides which idempotency hits it trusts.

The publisher drops untrusted keys through ``Queue.drop_untrusted_keys`` and asks
``Queue.pending_jobs_for``; it sends no Redis command of its own (ADR 0029).
"""

from __future__ import annotations

import pytest

from reliable_queue import Queue
from workflows.messages import StepMessage
from workflows.publisher import QueuePublisher


@pytest.fixture
def queues(redis_client, key_prefix) -> dict[str, Queue]:
    return {name: Queue(redis_client, name, prefix=key_prefix) for name in ("stock", "points")}


def message(workflow_id: int, step: str) -> StepMessage:
    return StepMessage(
        step, f"orders.{step}", {"workflow_id": workflow_id, "step": step}, f"{workflow_id}:{step}"
    )


def test_a_pending_hit_is_a_duplicate_and_a_stranded_or_finished_one_is_enqueued_again(queues):
    publisher = QueuePublisher(queues.__getitem__)
    stock, points = queues["stock"], queues["points"]
    publisher.publish([message(1, "stock"), message(2, "stock"), message(1, "points")])
    assert stock.size_of("ready") == 2 and points.size_of("ready") == 1
    (done,) = points.fetch(1).jobs
    points.ack([done.lease])  # 1:points finished
    stock.evict_key_for_chaos("ready")  # 1:stock and 2:stock stranded (nowhere)
    assert publisher.known_keys(["1:stock", "2:stock", "1:points"]) == set()

    publisher.publish([message(1, "stock"), message(1, "points")])

    assert stock.size_of("ready") == 1 and points.size_of("ready") == 1
    assert publisher.known_keys(["1:stock", "2:stock", "1:points"]) == {"1:stock", "1:points"}
    # a trusted hit stays a duplicate: nothing new is enqueued
    publisher.publish([message(1, "stock"), message(1, "points")])
    assert stock.size_of("ready") == 1 and points.size_of("ready") == 1
    assert stock.pending_jobs_for(["1:stock"]) == [stock.ids_in("ready")[0]]
