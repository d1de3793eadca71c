"""Instructions redis-server spends per drained job (callgrind): fetch + ack.

Starts a private redis-server under ``valgrind --tool=callgrind`` (persistence off),
fills a queue, warms the scripts up, then counts instructions (Ir) over the drain of
N jobs the way a worker lane sends them: each round trip acks the previous batch and
fetches the next one (one pipelined write). Counters are zeroed before and dumped
after the drain. Instruction counts are stable under machine load, wall-clock is
not. Standalone (imports only ``reliable_queue``), so it also measures an older
checkout: run it with that checkout's interpreter. Usage::

    python benchmarks/drain_instructions.py [N] [BATCH] [KEYS]

With KEYS > 0 every job carries a priority (1, 3, 5 or 7, as orders map TPC-H's, with
5 twice as likely) and one of KEYS fairness keys in turn: the cost of priorities and
fairness keys in use (ADR 0033; a checkout without them refuses the argument).

Prints Ir per job for the drain, and for the same drain with the ack of each batch
in a round trip of its own. With ``KEEP_CALLGRIND=1`` the callgrind output is kept
and its folder printed (for ``callgrind_annotate``).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import redis

from reliable_queue import EnqueueRequest, Queue


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _totals(pid: int, out_dir: str) -> int:
    """Dump callgrind's counters of ``pid`` and return the Ir since the last zeroing."""
    before = set(glob.glob(f"{out_dir}/cg.*"))
    subprocess.run(["callgrind_control", "-d", str(pid)], check=True, capture_output=True)
    for _ in range(400):
        new = set(glob.glob(f"{out_dir}/cg.*")) - before
        if new:
            path = new.pop()
            time.sleep(0.2)
            with open(path, encoding="utf-8") as f:
                for line in f:
                    if line.startswith(("totals:", "summary:")):
                        return int(line.split()[1])
        time.sleep(0.05)
    raise RuntimeError("callgrind dump not found")


def _binary() -> str:
    """``$BENCH_REDIS_SERVER``, else the system's redis-server (as the benchmarks run)."""
    for candidate in (os.environ.get("BENCH_REDIS_SERVER"), "/usr/bin/redis-server"):
        if candidate and os.path.exists(candidate):
            return candidate
    return shutil.which("redis-server") or "redis-server"


def _fill(queue: Queue, n: int, keys: int = 0) -> None:
    if not keys:
        for start in range(0, n, 1000):
            queue.enqueue_many([EnqueueRequest("noop", {})] * min(1000, n - start))
        return
    priorities = (1, 3, 5, 5, 7)
    jobs = [
        EnqueueRequest("noop", {}, priority=priorities[i % 5], fairness_key=f"c{i % keys}")
        for i in range(n)
    ]
    for start in range(0, n, 1000):
        queue.enqueue_many(jobs[start : start + 1000])


def main(n: int = 20000, batch: int = 100, keys: int = 0) -> None:
    """Measure and print Ir per drained job (see the module docstring)."""
    out_dir = tempfile.mkdtemp(prefix="drain-ir-")
    port = _port()
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_dir}/cg.%p",
         _binary(), "--port", str(port),
         "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--hz", "1",
         "--dir", out_dir],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=300)
        for _ in range(600):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.1)
        queue = Queue(client, "irq")
        lease = queue.settings.lease_seconds
        fetch = queue.fetch_calls(batch, lease, "w")[0]
        # warm-up: scripts cached, allocator and tables grown, done holds records
        _fill(queue, 2000, keys)
        while True:
            jobs = queue.parse_fetch(queue.scripts.run_many([fetch])[0]).jobs
            if not jobs:
                break
            queue.ack([j.lease for j in jobs])
        _fill(queue, 3 * n, keys)

        def drain(fetches: bool, acks: bool) -> int:
            done, pending = 0, []
            while done < n:
                calls = (queue.ack_calls(pending) if acks else []) + [fetch]
                replies = queue.scripts.run_many(calls)
                jobs = queue.parse_fetch(replies[-1]).jobs
                if not acks:
                    queue.ack([j.lease for j in jobs])
                pending = [j.lease for j in jobs]
                done += len(jobs)
            if acks and pending:
                queue.scripts.run_many(queue.ack_calls(pending))
            return done

        results = {}
        for name, f, a in (("drain", True, True), ("fetch+ack", True, False)):
            subprocess.run(["callgrind_control", "-z", str(server.pid)], check=True,
                           capture_output=True)  # fmt: skip
            jobs = drain(f, a)
            results[name] = _totals(server.pid, out_dir) / jobs
        print(f"drain (ack k-1 + fetch k per round trip) {results['drain']:8.0f} Ir per job")
        print(f"fetch and ack in separate round trips    {results['fetch+ack']:8.0f} Ir per job")
    finally:
        server.terminate()
        server.wait(30)
        if not os.environ.get("KEEP_CALLGRIND"):
            shutil.rmtree(out_dir, ignore_errors=True)
        else:
            print(out_dir)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:4]))
    os._exit(0)
