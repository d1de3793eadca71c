"""What the harness needs to know about a library, and the paced-load helpers."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Protocol

import redis

URL_ENV = "BENCH_REDIS_URL"
LATENCY_KEY = "bench:latency"


def redis_url() -> str:
    """The benchmark server's URL, as the harness exported it for the worker apps."""
    return os.environ[URL_ENV]


def script(name: str) -> str:
    """Path of a console script installed beside this interpreter."""
    return str(Path(sys.executable).parent / name)


class Producer(Protocol):
    """Enqueues jobs through one library's client API."""

    def enqueue(self, n: int) -> None:
        """Enqueue ``n`` no-op jobs, one API call per job."""

    def enqueue_bulk(self, n: int) -> None:
        """Enqueue ``n`` no-op jobs with the library's bulk API (if it has one)."""

    def paced(self, rate: float, seconds: float) -> int:
        """Enqueue stamped jobs at ``rate`` jobs/s for ``seconds`` s; returns how many."""

    def close(self) -> None:
        """Release connections."""


@dataclass(frozen=True)
class Peer:
    """One library under test.

    Attributes:
        name: library name as shown.
        dist: distribution whose version is reported.
        mode: the delivery guarantee it runs with, in full.
        guarantee: the same in a few words, for the table.
        worker: ``worker(tuned) -> (argv, description)``; the argv runs one worker process.
        remaining: jobs queued or in flight, read from Redis.
        producer: builds a :class:`Producer` for a Redis URL.
        bulk: name of the bulk enqueue API, or "" when there is none.
    """

    name: str
    dist: str
    mode: str
    guarantee: str
    worker: Callable[[bool], tuple[list[str], str]]
    remaining: Callable[[redis.Redis], int]
    producer: Callable[[str], Producer]
    bulk: str = ""
    notes: list[str] = field(default_factory=list)

    def version(self) -> str:
        """Installed version of the library."""
        return metadata.version(self.dist)


def pace(rate: float, seconds: float, send: Callable[[float], object]) -> int:
    """Call ``send(epoch seconds)`` on a fixed schedule of ``rate`` calls/s for ``seconds`` s.

    The schedule does not drift: a late call is followed by the next one at once.

    Returns:
        Calls made.
    """
    n = int(rate * seconds)
    start = time.perf_counter()
    for i in range(n):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        send(time.time())
    return n


async def apace(rate: float, seconds: float, send: Callable[[float], Awaitable[object]]) -> int:
    """:func:`pace` for coroutine ``send``."""
    n = int(rate * seconds)
    start = time.perf_counter()
    for i in range(n):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        await send(time.time())
    return n


class AsyncProducer:
    """Runs an async library's client on one event loop for the whole run."""

    def __init__(self) -> None:
        self.runner = asyncio.Runner()

    def run(self, coro: Awaitable[object]) -> object:
        """Run a coroutine to completion on this producer's loop."""
        return self.runner.run(coro)  # type: ignore[arg-type]

    def close(self) -> None:
        """Close the loop."""
        self.runner.close()
