"""Small helpers shared by the queue library's tests (importable: conftest's folder is on sys.path).

Nothing here fakes Redis: helpers only wait, count and start real workers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import redis

from reliable_queue import Queue, QueueSettings, TaskRegistry, Worker

#: Short leases and blocks so the whole queue suite stays fast.
FAST = QueueSettings(lease_seconds=2.0, max_block_seconds=0.5)


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.01) -> Any:
    """Poll ``predicate`` until it returns something truthy; return it.

    Raises:
        AssertionError: the predicate stayed falsy for ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout:.1f}s")
        time.sleep(interval)


def redis_now(client: redis.Redis) -> float:
    """The Redis server clock, epoch seconds (what every deadline uses)."""
    sec, usec = client.time()
    return sec + usec / 1e6


def places(queue: Queue, job_id: str) -> list[str]:
    """Every structure of ``queue`` that holds ``job_id`` (a job must be in exactly one)."""
    found = []
    if job_id in queue.ids_in("ready"):
        found.append("ready")
    for kind in ("delayed", "active", "dead", "done"):
        if queue.client.zscore(queue.keys.key(kind), job_id) is not None:
            found.append(kind)
    return found


def command_calls(client: redis.Redis) -> dict[str, int]:
    """Calls per command since the last CONFIG RESETSTAT (INFO commandstats).

    The test's own bookkeeping (``CONFIG RESETSTAT`` itself, which Redis 7 lists as
    ``config|resetstat``, and ``INFO``) is left out.
    """
    stats = client.info("commandstats")
    calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
    return {n: c for n, c in calls.items() if not n.startswith(("config", "info"))}


@contextmanager
def running_worker(
    client: redis.Redis,
    queues: list[str],
    registry: TaskRegistry,
    *,
    prefix: str,
    settings: QueueSettings,
    **kwargs: Any,
) -> Iterator[Worker]:
    """A real :class:`Worker` serving in threads of this process until the block ends.

    At exit it stops fetching, wakes lanes blocked on Redis so they notice at once,
    and waits for them.
    """
    worker = Worker(client, queues, registry, prefix=prefix, settings=settings, **kwargs)
    worker.start()
    try:
        yield worker
    finally:
        stop_worker(worker)


def stop_worker(worker: Worker, timeout: float = 10.0) -> None:
    """Request a stop, wake blocked lanes with wake tokens, join; fail if a lane hangs."""
    worker.request_stop()
    for queue in worker.queues:
        try:
            queue.client.lpush(queue.keys.key("wake"), *["1"] * worker.concurrency)
        except redis.RedisError:
            pass  # Redis is down: lanes notice the stop after their backoff
    assert worker.join(timeout), "worker lanes did not stop"
