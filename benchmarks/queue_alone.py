"""orderflow's queue alone: worker scaling, queue depth, and AOF durability."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from .harness import summarize
from .measure import start_process, stop_process, time_drain, timed
from .peers import orderflow as of
from .run_peers import environment, worker_env
from .server import RedisServer

log = logging.getLogger("benchmarks")


def fill(server: RedisServer, n: int, queue: str = of.QUEUE) -> float:
    """Bulk-enqueue ``n`` no-op jobs; returns seconds taken."""
    producer = of.Producer(server.url, queue)
    try:
        return timed(lambda: producer.enqueue_bulk(n))
    finally:
        producer.close()


def drain(
    server: RedisServer,
    n: int,
    processes: int,
    batch_size: int,
    concurrency: int,
    timeout: float,
) -> dict[str, Any]:
    """Time ``processes`` worker processes draining ``n`` queued jobs."""
    client = server.client()
    argv = of.worker_argv(concurrency, batch_size)
    procs = [start_process(argv, worker_env(server)) for _ in range(processes)]
    try:
        result = time_drain(
            lambda: of.remaining(client),
            n,
            timeout=timeout,
            alive=lambda: all(p.poll() is None for p in procs),
        )
    finally:
        for p in procs:
            stop_process(p)
        client.close()
    return {
        "drain_rate": round(result.rate, 1),
        "drained": result.jobs,
        "drain_complete": result.complete,
    }


def scaling(
    n: int,
    processes: Sequence[int],
    batches: Sequence[int],
    concurrency: int,
    timeout: float,
    repeat: int = 1,
) -> list[dict[str, Any]]:
    """Drain rate (jobs/s) for each count of worker processes and batch size: the median of
    ``repeat`` runs with min and max (every run's rate in ``drain_rate_runs``)."""
    rows = []
    with RedisServer() as server:
        env = environment(server)
        for procs in processes:
            for batch in batches:
                runs = []
                for _ in range(repeat):
                    server.flush()
                    fill(server, n)
                    load_before = os.getloadavg()[0]
                    one = drain(server, n, procs, batch, concurrency, timeout)
                    one["loadavg_1m_before"] = round(load_before, 2)
                    one["loadavg_1m_after"] = round(os.getloadavg()[0], 2)
                    runs.append(one)
                row = summarize(runs, ["drain_rate", "drained", "drain_complete"], digits=1)
                log.info("%d process(es), batch %d: %.0f jobs/s", procs, batch, row["drain_rate"])
                rows.append(
                    {
                        "kind": "scaling",
                        "library": "orderflow",
                        "version": _version(),
                        "variant": f"{procs}p-b{batch}-c{concurrency}",
                        "mode": of.MODE,
                        "n": n,
                        "enqueue_rate": None,
                        "processes": procs,
                        "batch_size": batch,
                        "concurrency": concurrency,
                        **row,
                        **env,
                    }
                )
    return rows


def depth_probe(
    server: RedisServer,
    client: Any,
    waiting: int,
    probe: int,
    batch_size: int,
    concurrency: int,
    timeout: float,
) -> dict[str, Any]:
    """One probe with ``waiting`` jobs queued: enqueue ``probe`` jobs singly and ``probe`` in
    bulk, then time one worker taking the oldest ``2 * probe`` jobs (the depth stays put).

    Returns:
        Per-job times in µs and rates in jobs/s, with the load average around the probe.
    """
    load_before = os.getloadavg()[0]
    producer = of.Producer(server.url)
    try:
        single = timed(partial(producer.enqueue, probe))
        bulk = timed(partial(producer.enqueue_bulk, probe))
    finally:
        producer.close()
    proc = start_process(of.worker_argv(concurrency, batch_size), worker_env(server))
    try:  # time the first `2 * probe` jobs taken off the waiting line
        drained = time_drain(lambda: of.remaining(client) - waiting, 2 * probe, timeout=timeout)
    finally:
        stop_process(proc)
    return {
        "enqueue_us_per_job": round(single / probe * 1e6, 2),
        "bulk_enqueue_us_per_job": round(bulk / probe * 1e6, 2),
        "drain_us_per_job": round(1e6 / drained.rate, 2) if drained.rate else None,
        "enqueue_rate": round(probe / single, 1),
        "bulk_enqueue_rate": round(probe / bulk, 1),
        "drain_rate": round(drained.rate, 1),
        "drain_complete": drained.complete,
        "loadavg_1m_before": round(load_before, 2),
        "loadavg_1m_after": round(os.getloadavg()[0], 2),
    }


DEPTH_FIELDS = (
    "enqueue_us_per_job",
    "bulk_enqueue_us_per_job",
    "drain_us_per_job",
    "enqueue_rate",
    "bulk_enqueue_rate",
    "drain_rate",
    "drain_complete",
)
"""The measured figures of a depth probe (each summarised as median, min and max)."""


def depth(
    waiting: Sequence[int],
    probe: int,
    batch_size: int,
    concurrency: int,
    timeout: float,
    repeat: int = 3,
) -> list[dict[str, Any]]:
    """Per-job enqueue and drain time (µs) and Redis memory per job with jobs waiting.

    For each depth: ``repeat`` probes (:func:`depth_probe`), summarised as the median
    with min, max and every probe (``benchmarks.harness.summarize``). Memory per
    waiting job is measured from a queue that already holds one job (the scripts
    loaded, the queue's own keys made), so the fixed part is not spread over the jobs.
    """
    rows = []
    with RedisServer() as server:
        env = environment(server)
        client = server.client()
        for count in waiting:
            server.flush()
            time.sleep(0.2)
            fill(server, 1)
            before = server.used_memory()
            fill(server, count - 1)
            per_job_bytes = (server.used_memory() - before) / max(count - 1, 1)
            probes = [
                depth_probe(server, client, count, probe, batch_size, concurrency, timeout)
                for _ in range(repeat)
            ]
            row = {
                "kind": "depth",
                "library": "orderflow",
                "version": _version(),
                "variant": f"{count}-waiting",
                "mode": of.MODE,
                "n": 2 * probe,
                "waiting": count,
                "total": count + 2 * probe,
                "redis_bytes_per_waiting_job": round(per_job_bytes, 1),
                **summarize(probes, DEPTH_FIELDS, digits=2),
                **env,
            }
            log.info(
                "%d waiting: enqueue %.1f us, bulk %.2f us, drain %s us per job (medians of "
                "%d), %.0f B/job",
                count,
                row["enqueue_us_per_job"],
                row["bulk_enqueue_us_per_job"],
                row["drain_us_per_job"],
                repeat,
                per_job_bytes,
            )
            rows.append(row)
        client.close()
    return rows


def redis_benchmark_lpush(
    server: RedisServer, requests: int, pipeline: int, clients: int = 50
) -> float:
    """``redis-benchmark -t lpush`` against the server: requests/s."""
    out = subprocess.run(
        [
            _redis_benchmark(server),
            "-h",
            "127.0.0.1",
            "-p",
            str(server.port),
            "-t",
            "lpush",
            "-n",
            str(requests),
            "-P",
            str(pipeline),
            "-c",
            str(clients),
            "-q",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    found = re.findall(r"LPUSH[^:]*:\s*([\d.]+) requests per second", out.replace("\r", "\n"))
    return float(found[-1]) if found else float("nan")


def durability(
    n: int, batch_size: int, concurrency: int, timeout: float, lpush_requests: int
) -> list[dict[str, Any]]:
    """orderflow enqueue/drain and redis-benchmark LPUSH with AOF off / everysec / always."""
    rows = []
    for policy in (None, "everysec", "always"):
        with RedisServer(appendfsync=policy) as server:
            env = environment(server)
            label = f"aof {policy}" if policy else "no persistence"
            producer = of.Producer(server.url)
            single = timed(partial(producer.enqueue, n))
            producer.close()
            drained_single = drain(server, n, 1, batch_size, concurrency, timeout)
            bulk = fill(server, n)
            drained = drain(server, n, 1, batch_size, concurrency, timeout)
            lpush = redis_benchmark_lpush(server, lpush_requests, 1)
            lpush_p = redis_benchmark_lpush(server, lpush_requests * 4, 16)
            # one client, no pipeline: what a single producer calling enqueue() waits for
            lpush_c1 = redis_benchmark_lpush(server, max(lpush_requests // 40, 1000), 1, 1)
            row = {
                "kind": "durability",
                "library": "orderflow",
                "version": _version(),
                "variant": label,
                "mode": of.MODE,
                "n": n,
                "appendfsync": policy or "off",
                "enqueue_rate": round(n / single, 1),
                "bulk_enqueue_rate": round(n / bulk, 1),
                "drain_rate": drained["drain_rate"],
                "drain_rate_after_single_enqueue": drained_single["drain_rate"],
                "redis_benchmark_lpush_rps": lpush,
                "redis_benchmark_lpush_p16_rps": lpush_p,
                "redis_benchmark_lpush_c1_rps": lpush_c1,
                **env,
            }
            log.info(
                "%s: enqueue %.0f, bulk %.0f, drain %.0f jobs/s; LPUSH %.0f, -P16 %.0f/s",
                label,
                row["enqueue_rate"],
                row["bulk_enqueue_rate"],
                row["drain_rate"],
                lpush,
                lpush_p,
            )
            rows.append(row)
    return rows


def _redis_benchmark(server: RedisServer) -> str:
    beside = Path(server.binary).with_name("redis-benchmark")
    return str(beside) if beside.exists() else "redis-benchmark"


def _version() -> str:
    from importlib import metadata

    return metadata.version("reliable-queue")
