"""Fencing numbers never repeat, also when Redis loses its last writes (ADR 0022).

A fetch issues ``max(seq + 1, queue ms * 1000)`` per lease, and
``Queue.raise_fencing_floor`` lifts the sequence to a number the application has seen.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import redis

from reliable_queue import EnqueueRequest, Queue, QueueDataError, QueueLimitError, QueueSettings
from reliable_queue.execution import fencing_number
from reliable_queue.limits import MAX_FENCING_FLOOR

SETTINGS = QueueSettings(lease_seconds=60)


def aof_tail(redis_dir: Path) -> Path:
    """The append-only file Redis appends to: Redis 7's manifest names it, 6.2 has one."""
    folder = redis_dir / "appendonlydir"
    if folder.is_dir():
        manifest = next(folder.glob("*.manifest")).read_text().splitlines()
        name = [line.split()[1] for line in manifest if line.split()[-1] == "i"][-1]
        return folder / name
    return redis_dir / "appendonly.aof"


def lease_some(queue: Queue, n: int = 20) -> list[int]:
    """Enqueue, lease and ack ``n`` jobs; their fencing numbers."""
    queue.enqueue_many([EnqueueRequest("t", {}) for _ in range(n)])
    jobs = queue.fetch(n).jobs
    queue.ack([j.lease for j in jobs])
    return [fencing_number(j.token) for j in jobs]


def test_tokens_after_an_aof_rollback_are_above_every_token_before_the_crash(
    everysec_redis, key_prefix
):
    # seen: after the AOF rolled back ~1 s (a host crash with appendfsync everysec),
    # 40-80 fencing numbers were handed out a second time
    server = everysec_redis
    before: list[int] = []
    sizes: list[tuple[float, int]] = []
    with redis.Redis.from_url(server.url) as client:
        queue = Queue(client, "jobs", prefix=key_prefix, settings=SETTINGS)
        start = time.monotonic()
        while time.monotonic() - start < 1.6:
            before += lease_some(queue)
            sizes.append((time.monotonic(), aof_tail(server.redis_dir).stat().st_size))
            time.sleep(0.01)
    killed_at = time.monotonic()
    server.kill()
    # the writes of the last second never reached the disk: cut them off
    kept = max(size for at, size in sizes if at <= killed_at - 1.0)
    tail = aof_tail(server.redis_dir)
    assert kept < tail.stat().st_size
    os.truncate(tail, kept)
    server.ensure_running()

    with redis.Redis.from_url(server.url) as client:
        queue = Queue(client, "jobs", prefix=key_prefix, settings=SETTINGS)
        assert int(client.get(queue.keys.key("seq"))) < max(before)  # the sequence went back
        after = [n for _ in range(5) for n in lease_some(queue)]

    assert not set(after) & set(before)
    assert min(after) > max(before)
    assert after == sorted(after) and len(set(after)) == len(after)


def test_a_fencing_floor_lifts_every_later_token_above_it(make_queue):
    queue = make_queue()
    first = lease_some(queue, 1)[0]
    floor = first + 10**12  # a number from the database, far above the queue's
    assert queue.raise_fencing_floor(floor) == floor
    assert queue.raise_fencing_floor(5) == floor  # a lower floor changes nothing
    after = lease_some(queue, 3)
    assert floor < after[0] < after[1] < after[2]
    assert queue.raise_fencing_floor(MAX_FENCING_FLOOR) == MAX_FENCING_FLOOR
    assert lease_some(queue, 1)[0] == MAX_FENCING_FLOOR + 1


@pytest.mark.parametrize("floor", [-1, MAX_FENCING_FLOOR + 1, 1.5, True, "7", None])
def test_a_fencing_floor_out_of_range_is_refused_and_nothing_is_sent(make_queue, floor):
    queue = make_queue()
    with pytest.raises(QueueLimitError, match="fencing floor"):
        queue.raise_fencing_floor(floor)
    assert queue.client.exists(queue.keys.key("seq")) == 0


@pytest.mark.parametrize("planted", ["list", "text", "huge"])
def test_a_fencing_floor_over_a_corrupt_sequence_is_refused_with_nothing_written(
    make_queue, planted
):
    queue = make_queue()
    key = queue.keys.key("seq")
    if planted == "list":
        queue.client.rpush(key, "1")
    else:
        queue.client.set(key, "soon" if planted == "text" else str(2**60))
    before = queue.client.dump(key)
    with pytest.raises(QueueDataError, match="seq"):
        queue.raise_fencing_floor(10)
    with pytest.raises(QueueDataError, match="seq"):
        queue.fetch(1)  # a fetch refuses the same sequence, before any write
    assert queue.client.dump(key) == before
