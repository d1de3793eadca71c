"""Fencing numbers never repeat, also when Redis loses its last writes (ADR 0022).

A fetch issues ``max(seq + 1, queue ms * 1000)`` per lease, and
``Queue.raise_fencing_floor`` lifts the sequence to a number the application has seen.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import redis

from reliable_queue import EnqueueRequest, Queue, QueueSettings
from reliable_queue.execution import fencing_number

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
