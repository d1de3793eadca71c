"""Single Redis vs a local Redis Cluster, with and without replica-acknowledged writes.

    uv run python -m benchmarks.cluster [--jobs 50000] [--processes 2] [--repeat 1] [--json]

Starts its own servers from the ``redis-server`` on PATH (no AOF, no RDB, so
only the topology and WAIT differ): a master with one replica, and a
3-master / 3-replica cluster (``tests/local_cluster.py``). For each target and
``min_replicas`` in (0, 1) it measures

- enqueue rate: one producer, ``enqueue_many`` batches of 100 spread over the
  four step queues (jobs/s), and single ``enqueue`` calls (calls/s);
- drain rate: ``--processes`` worker processes (concurrency 2, batch 100, a
  no-op task) draining the four queues (jobs/s).

Figures print with the load average beside them; they are not tests.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from reliable_queue import EnqueueRequest, Queue, QueueSettings, TaskRegistry, Worker, stats
from reliable_queue.cluster import client_from_url

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from local_cluster import LocalCluster, free_ports, redis_server_binary  # noqa: E402

QUEUES = ["stock", "notification", "points", "logistics"]
PREFIX = "bench"


def settings(min_replicas: int) -> QueueSettings:
    """Queue settings of one run (WAIT timeout 1 s when replicas are required)."""
    return QueueSettings(lease_seconds=30.0, min_replicas=min_replicas, replica_timeout_seconds=1.0)


def start_pair(root: Path) -> tuple[str, list[subprocess.Popen[bytes]]]:
    """A master and one replica on loopback ports; returns (master URL, processes)."""
    server = redis_server_binary() or "redis-server"
    master, replica = free_ports(2)
    procs = []
    for port, extra in ((master, []), (replica, ["--replicaof", "127.0.0.1", str(master)])):
        folder = root / f"single-{port}"
        folder.mkdir(parents=True)
        args = [server, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder)]
        args += ["--save", "", "--appendonly", "no", *extra]
        procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL))
    url = f"redis://127.0.0.1:{master}/0"
    client = client_from_url(url)
    for _ in range(200):
        try:
            if int(client.info("replication").get("connected_slaves", 0)) >= 1:
                break
        except Exception:  # noqa: BLE001 - still starting
            pass
        time.sleep(0.05)
    client.close()
    return url, procs


def worker_main(url: str, min_replicas: int) -> None:
    """A worker process: a no-op task on the four queues until SIGTERM."""
    registry = TaskRegistry()
    registry.task("noop")(lambda payload, ctx: None)
    client = client_from_url(url, socket_timeout=15.0)
    Worker(
        client,
        QUEUES,
        registry,
        prefix=PREFIX,
        concurrency=2,
        batch_size=100,
        settings=settings(min_replicas),
    ).run()


def measure(url: str, min_replicas: int, jobs: int, processes: int) -> dict[str, Any]:
    """Enqueue and drain rates on one target with one durability level."""
    client = client_from_url(url, socket_timeout=15.0)
    queues = [Queue(client, q, prefix=PREFIX, settings=settings(min_replicas)) for q in QUEUES]
    for queue in queues:  # a clean slate: drop the previous run's keys of this queue
        for kind in ("ready", "done", "stats", "jobs", "attempts", "leases", "wake"):
            client.delete(queue.keys.key(kind))
    started = time.perf_counter()
    for i in range(0, jobs, 100):
        queues[(i // 100) % 4].enqueue_many([EnqueueRequest("noop", {"i": i})] * 100)
    bulk = jobs / (time.perf_counter() - started)
    singles = 1000
    started = time.perf_counter()
    for i in range(singles):
        queues[i % 4].enqueue("noop", {"i": i})
    single = singles / (time.perf_counter() - started)
    total = jobs + singles
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=worker_main, args=(url, min_replicas)) for _ in range(processes)]
    for w in workers:
        w.start()
    deadline = time.monotonic() + 300
    done = first = 0
    started = 0.0
    while time.monotonic() < deadline:
        done = sum(stats(q).counters["succeeded"] for q in queues)
        if done and not started:  # the clock starts once the workers are up
            started, first = time.perf_counter(), done
        if done >= total:
            break
        time.sleep(0.02)
    drain = (done - first) / max(time.perf_counter() - started, 1e-6)
    for w in workers:
        w.terminate()
        w.join(10)
    client.close()
    return {
        "enqueue_batch_jobs_per_s": round(bulk),
        "enqueue_single_calls_per_s": round(single),
        "drain_jobs_per_s": round(drain),
        "drained": done,
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    """Run every variant and print a table (or JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1, help="best of N runs per variant")
    parser.add_argument("--json", action="store_true")
    opts = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        root = Path(tmp)
        single_url, pair = start_pair(root)
        cluster = LocalCluster(root / "cluster").start()
        try:
            for name, url in (("single + 1 replica", single_url), ("cluster 3x2", cluster.url)):
                for min_replicas in (0, 1):
                    row = {"target": name, "min_replicas": min_replicas}
                    runs = [
                        measure(url, min_replicas, opts.jobs, opts.processes)
                        for _ in range(max(opts.repeat, 1))
                    ]
                    row |= {k: max(r[k] for r in runs) for k in runs[0] if k != "load_avg_1m"}
                    row["load_avg_1m"] = runs[-1]["load_avg_1m"]
                    rows.append(row)
                    if not opts.json:
                        print(row, flush=True)
        finally:
            cluster.stop()
            for proc in pair:
                proc.terminate()
                proc.wait(10)
    if opts.json:
        print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
