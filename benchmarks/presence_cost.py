"""What the workers' presence costs (ADR 0043): a drain with it on and off, one publish,
one reading of the workers view.

Drains: one worker process drains ``n`` no-op jobs with the presence publisher on, then
off, interleaved ``repeat`` times on one throwaway Redis (default 30 s lease: a publish
every 5 s); median, min and max jobs/s of each. Then, on the same server, a publish of a
worker's state (4 queues, 8 lanes, 2 busy: the state built and the script sent) and a
reading of the view with ``workers`` workers registered, interleaved call by call; median,
min and max µs.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from typing import Any

from reliable_queue import TaskRegistry, Worker, workers
from reliable_queue.presence_publisher import PresencePublisher

from .measure import start_process, stop_process, time_drain
from .peers import orderflow as of
from .queue_alone import fill
from .run_peers import worker_env
from .server import RedisServer

QUEUES = ("stock", "notification", "points", "logistics")


def _drain(server: RedisServer, n: int, batch: int, presence: bool, timeout: float) -> float:
    server.flush()
    fill(server, n)
    argv = of.worker_argv(1, batch) + ([] if presence else ["--no-presence"])
    client = server.client()
    proc = start_process(argv, worker_env(server))
    try:
        result = time_drain(lambda: of.remaining(client), n, timeout=timeout)
    finally:
        stop_process(proc)
        client.close()
    return result.rate


def drains(n: int, batch: int, repeat: int, timeout: float) -> dict[str, Any]:
    """jobs/s with the presence on and off, ``repeat`` interleaved runs each."""
    rates: dict[str, list[float]] = {"presence on": [], "presence off": []}
    loads = [os.getloadavg()[0]]
    with RedisServer() as server:
        for _ in range(repeat):
            for name in rates:
                rates[name].append(_drain(server, n, batch, name == "presence on", timeout))
                loads.append(os.getloadavg()[0])
    return {"rates": rates, "load": (min(loads), max(loads))}


def calls(count: int, registered: int) -> dict[str, list[float]]:
    """Seconds per publish and per reading of the view, interleaved."""
    with RedisServer() as server:
        client = server.client()
        registry = TaskRegistry()
        worker = Worker(client, list(QUEUES), registry, prefix="bench", concurrency=2)
        publisher = worker.presence
        assert isinstance(publisher, PresencePublisher)
        for n in range(registered - 1):  # the others: copies of this one's state
            PresencePublisher(
                client, "bench", f"other:{n}", worker._presence_state, 5.0, threading.Event()
            ).publish()
        out: dict[str, list[float]] = {"publish (state + script)": [], "workers() reading": []}
        for _ in range(count):
            began = time.perf_counter()
            publisher.publish()
            out["publish (state + script)"].append(time.perf_counter() - began)
            began = time.perf_counter()
            workers(client, "bench", limit=min(registered, 50))
            out["workers() reading"].append(time.perf_counter() - began)
        client.close()
    return out


def _spread(samples: list[float], scale: float, unit: str) -> str:
    values = [s * scale for s in samples]
    return (
        f"median {statistics.median(values):9.1f}  min {min(values):9.1f}  "
        f"max {max(values):9.1f} {unit}"
    )


def main(n: int, batch: int, repeat: int, count: int, registered: int, timeout: float) -> None:
    """Print both tables."""
    result = drains(n, batch, repeat, timeout)
    low, high = result["load"]
    print(
        f"drain of {n:,} no-op jobs, 1 process, batch {batch}, {repeat} interleaved runs "
        f"each (load average {low:.1f} to {high:.1f}):"
    )
    for name, rates in result["rates"].items():
        print(f"  {name:14s} {_spread(rates, 1.0, 'jobs/s')}")
    print(f"cost per call, {registered} workers registered, {count:,} calls each (interleaved):")
    for name, samples in calls(count, registered).items():
        print(f"  {name:26s} {_spread(samples, 1e6, 'µs')}")
