"""Instructions redis-server spends per enqueue (callgrind), single and bulk.

Starts a private redis-server under ``valgrind --tool=callgrind`` (persistence off),
warms the scripts up, then counts instructions (Ir) over N calls of each kind,
zeroing the counters before and dumping them after each kind:

- ``ping``: N ``PING`` (the cost of a round trip alone);
- ``evalsha``: N ``EVALSHA`` of ``return 1`` with the queue's 12 keys;
- ``enqueue``: N ``Queue.enqueue`` (one EVALSHA of enqueue.lua each);
- ``enqueue_key``: N ``Queue.enqueue`` each with a new idempotency key;
- ``enqueue_delay``: N ``Queue.enqueue`` each with a delay of an hour;
- ``enqueue_many``: N jobs as ``Queue.enqueue_many`` batches of 100;
- ``enqueue_flow`` / ``enqueue_many_flow``: the same two with a priority and one of
  1,000 fairness keys per job (ADR 0033; left out for a checkout without them).

Instruction counts are stable under machine load, wall-clock is not. Standalone (no
imports from this package), so it also measures an older checkout: run it with that
checkout's interpreter. Usage::

    python benchmarks/enqueue_instructions.py [N]

Prints one line per kind: total Ir per call (per job for ``enqueue_many``).
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
    for _ in range(200):
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


def main(n: int = 2000) -> None:
    """Measure and print Ir per call for each kind (see the module docstring)."""
    out_dir = tempfile.mkdtemp(prefix="enqueue-ir-")
    port = _port()
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_dir}/cg.%p",
         shutil.which("redis-server") or "redis-server", "--port", str(port),
         "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--hz", "1",
         "--dir", out_dir],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=120)
        for _ in range(600):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.1)
        queue = Queue(client, "irq")
        keys = list(queue.keys.script_keys())
        one = client.script_load("return 1")
        for i in range(200):  # warm-up: scripts cached, allocator and tables grown
            queue.enqueue("t", {"i": i})
            client.evalsha(one, len(keys), *keys)
        req = [EnqueueRequest("t", {"i": 1}) for _ in range(100)]
        queue.enqueue_many(req)
        kinds = {
            "ping": (lambda: [client.ping() for _ in range(n)], n),
            "evalsha": (lambda: [client.evalsha(one, len(keys), *keys) for _ in range(n)], n),
            "enqueue": (lambda: [queue.enqueue("t", {"i": i}) for i in range(n)], n),
            "enqueue_key": (
                lambda: [queue.enqueue("t", {}, idempotency_key=f"k{i}") for i in range(n)],
                n,
            ),
            "enqueue_delay": (lambda: [queue.enqueue("t", {}, delay=3600) for _ in range(n)], n),
            "enqueue_many": (lambda: [queue.enqueue_many(req) for _ in range(n // 100)], n),
        }
        if "fairness_key" in EnqueueRequest.__dataclass_fields__:
            flow = [
                EnqueueRequest("t", {"i": 1}, priority=(1, 3, 5, 7)[i % 4], fairness_key=f"c{i}")
                for i in range(1000)
            ]
            kinds["enqueue_flow"] = (
                lambda: [queue.enqueue_many([flow[i % 1000]]) for i in range(n)],
                n,
            )
            kinds["enqueue_many_flow"] = (
                lambda: [queue.enqueue_many(flow[i % 10 * 100 :][:100]) for i in range(n // 100)],
                n,
            )
        for name, (work, calls) in kinds.items():
            subprocess.run(["callgrind_control", "-z", str(server.pid)], check=True,
                           capture_output=True)  # fmt: skip
            work()
            print(f"{name:13s} {_totals(server.pid, out_dir) / calls:10.0f} Ir per call")
    finally:
        server.terminate()
        server.wait(30)
        shutil.rmtree(out_dir, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
    os._exit(0)
