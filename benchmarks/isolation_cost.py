"""What process isolation costs: a child's start-up, and the round trip of one call.

``python -m benchmarks.isolation_cost [--calls N] [--starts S] [--redis URL]`` prints:

- start-up: seconds from starting an isolated child to its ``ready``, for a factory
  that imports only ``reliable_queue`` and for the orders step factory
  (``orders.worker.isolated:registry``; a SQLite file and the given Redis URL in the
  environment, nothing migrated or connected), median of S starts each;
- per call: microseconds of one ``ChildProcess.call`` of a no-op handler, a single
  job and a batch of 50 (per job), median of N calls, beside the same handler called
  in-thread;
- drained: jobs per second of a worker (one lane) draining 2,000 no-op jobs from
  Redis, thread vs process isolation, at batch 1 and 50.

Wall-clock figures: run on a quiet machine and compare within one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import redis

from reliable_queue import EnqueueRequest, Queue, QueueSettings, TaskRegistry, Worker, explain
from reliable_queue.attempts import ALWAYS, GuardPolicy
from reliable_queue.isolation import ChildProcess
from reliable_queue.job import make_context


def noop_registry(isolation: str = "process") -> TaskRegistry:
    """``noop`` (one job) and ``noop_batch`` (a batch task), both doing nothing."""
    tasks = TaskRegistry()
    tasks.task("noop", isolation=isolation)(lambda payload, ctx: None)
    tasks.task("noop_batch", batch=True, isolation=isolation)(lambda items: [None] * len(items))
    return tasks


def median_start(factory: str, starts: int) -> float:
    """Median seconds from spawn to ready of ``starts`` children."""
    times = []
    for _ in range(starts):
        child = ChildProcess(factory, GuardPolicy(30.0))
        began = time.perf_counter()
        child.ready()
        times.append(time.perf_counter() - began)
        child.close()
    return statistics.median(times)


def per_call_us(calls: int, batch: int) -> tuple[float, float]:
    """Median µs of one child call of ``batch`` no-op jobs, and of the same in-thread."""
    child = ChildProcess("benchmarks.isolation_cost:noop_registry", GuardPolicy(30.0))
    child.ready()
    ctx = make_context("id", "q", "noop", 1, 5, "1:w", 1, 0.0, None, ALWAYS)
    pairs = [({"n": i}, ctx) for i in range(batch)]
    task = "noop" if batch == 1 else "noop_batch"
    handler = noop_registry().get(task).handler
    child_times, thread_times = [], []
    try:
        for _ in range(calls):
            began = time.perf_counter()
            child.call(task, pairs, None)
            child_times.append(time.perf_counter() - began)
            began = time.perf_counter()
            if batch == 1:
                handler({"n": 0}, ctx)  # type: ignore[call-arg]
            else:
                handler(pairs)  # type: ignore[call-arg,arg-type]
            thread_times.append(time.perf_counter() - began)
    finally:
        child.close()
    return statistics.median(child_times) * 1e6, statistics.median(thread_times) * 1e6


def drained_per_second(url: str, isolation: str, batch: int, jobs: int = 2000) -> float:
    """Jobs per second one lane drains from a fresh key space."""
    client = redis.Redis.from_url(url, socket_timeout=10)
    prefix = f"bench-iso-{os.getpid()}-{isolation}-{batch}"
    settings = QueueSettings(lease_seconds=10.0, max_block_seconds=0.2)
    tasks = noop_registry(isolation)
    task = "noop" if batch == 1 else "noop_batch"
    queue = Queue(client, "jobs", prefix=prefix, settings=settings, registry=tasks)
    factory = "benchmarks.isolation_cost:noop_registry" if isolation == "process" else None
    worker = Worker(
        client, ["jobs"], tasks, prefix=prefix, settings=settings, batch_size=batch,
        isolated_registry=factory,
    )  # fmt: skip
    worker.start()
    try:
        warm = queue.enqueue(task, {})  # the child starts outside the measurement
        while explain(queue, warm).state != "done":
            time.sleep(0.01)
        ids = queue.enqueue_many([EnqueueRequest(task, {}) for _ in range(jobs)])
        began = time.perf_counter()
        while explain(queue, ids[-1]).state != "done" or queue.client.zcard(
            queue.keys.key("active")
        ):
            time.sleep(0.005)
        return jobs / (time.perf_counter() - began)
    finally:
        worker.request_stop()
        client.lpush(queue.keys.key("wake"), "1")
        worker.join(10)
        for key in client.scan_iter(f"{prefix}:*"):
            client.delete(key)
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/15")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.update(
            ORDERS_DATA_DIR=tmp,
            ORDERS_DATABASE_URL=f"sqlite:///{tmp}/orders.db",
            ORDERS_REDIS_URL=args.redis,
        )
        for factory in (
            "benchmarks.isolation_cost:noop_registry",
            "orders.worker.isolated:registry",
        ):
            print(f"start-up  {factory:42} {median_start(factory, args.starts):6.3f} s")
    for batch in (1, 50):
        child, thread = per_call_us(args.calls, batch)
        print(
            f"per call  batch {batch:3}: child {child:8.1f} µs ({child / batch:6.1f} µs/job), "
            f"in-thread {thread:6.2f} µs"
        )
    for batch in (1, 50):
        rates = {iso: drained_per_second(args.redis, iso, batch) for iso in ("thread", "process")}
        print(
            f"drained   batch {batch:3}: thread {rates['thread']:8.0f} jobs/s, "
            f"process {rates['process']:8.0f} jobs/s"
        )


if __name__ == "__main__":
    main()
