"""orderflow's benchmark worker: ``python -m benchmarks.peers.orderflow_app [options]``."""

from __future__ import annotations

import argparse
import logging
from typing import Any

import redis

from reliable_queue import JobContext, QueueSettings, TaskRegistry, Worker

from .base import redis_url
from .stamp import record

QUEUE = "bench"
PREFIX = "bench"

registry = TaskRegistry()


@registry.task("noop")
def noop(payload: Any, ctx: JobContext) -> None:
    """Does nothing."""


@registry.task("stamp")
def stamp(payload: Any, ctx: JobContext) -> None:
    """Records enqueue-to-start latency (``payload["ts"]`` is epoch seconds)."""
    record(payload["ts"])


def main(argv: list[str] | None = None) -> None:
    """Parse options and run one worker process until SIGTERM."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--concurrency", type=int, default=1, help="lanes (threads)")
    parser.add_argument("--batch-size", type=int, default=10, help="jobs per fetch")
    parser.add_argument("--queue", default=QUEUE)
    parser.add_argument(
        "--no-presence", action="store_true", help="publish no state for the workers view"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    client = redis.Redis.from_url(redis_url(), socket_timeout=30)
    worker = Worker(
        client,
        [args.queue],
        registry,
        prefix=PREFIX,
        concurrency=args.concurrency,
        batch_size=args.batch_size,
        settings=QueueSettings(),
        grace_seconds=2.0,
        presence=not args.no_presence,
    )
    worker.run()


if __name__ == "__main__":
    main()
