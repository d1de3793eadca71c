"""Longest run of each queue script with 100k entries in each of done, dead and ready.

Reads the server's SLOWLOG (threshold 0: every command is logged, then the longest
EVALSHA / EVAL per script is kept), so the numbers are Redis's own execution time,
not the client's round trip. The target: no queue script over 50 ms, including the
bounded upkeep after a DLQ bound is lowered under a full DLQ.
"""

from __future__ import annotations

import time
from typing import Any

from reliable_queue import EnqueueRequest, Queue, QueueSettings, audit
from reliable_queue.scripts import script_source

from .server import RedisServer

LIMIT_MS = 50.0


def _fill(queue: Queue, n: int) -> None:
    """n ready, n done, n dead entries (records included), written directly."""
    client, k = queue.client, queue.keys
    record = b'{"t":"t","p":{"i":1},"e":0,"m":5}'
    now_ms = int(time.time() * 1000)
    for start in range(0, n, 5000):
        pipe = client.pipeline(transaction=False)
        ids = range(start, min(start + 5000, n))
        for kind in ("r", "f", "d"):
            pipe.hset(k.key("jobs"), mapping={f"{kind}{i:07d}": record for i in ids})
        pipe.lpush(k.key("ready"), *[f"r{i:07d}" for i in ids])
        pipe.zadd(k.key("done"), {f"f{i:07d}": now_ms for i in ids})
        pipe.zadd(k.key("dead"), {f"d{i:07d}": now_ms - 1000 for i in ids})
        pipe.execute()


def run(n: int = 100_000) -> dict[str, float]:
    """Fill a throwaway server, run every script, return the longest ms per script."""
    server = RedisServer().start()
    try:
        client = server.client()
        queue = Queue(client, "lat", settings=QueueSettings(lease_seconds=60))
        _fill(queue, n)
        names = {queue.scripts.sha(s): s for s in _SCRIPTS}
        for s in _SCRIPTS:  # cached up front: every run below is an EVALSHA that runs
            client.script_load(script_source(s))
        client.config_set("slowlog-log-slower-than", 0)
        client.config_set("slowlog-max-len", 100_000)
        client.slowlog_reset()
        _exercise(queue, n)
        longest: dict[str, float] = {}
        for entry in client.slowlog_get(100_000):
            raw = entry["command"]
            cmd: list[Any] = raw.split(b" ", 2) if isinstance(raw, bytes) else []
            if len(cmd) < 2 or cmd[0].upper() not in (b"EVALSHA", b"EVAL"):
                continue
            name = names.get(cmd[1].decode(errors="replace"), "eval")
            longest[name] = max(longest.get(name, 0.0), entry["duration"] / 1000.0)
        client.close()
        return longest
    finally:
        server.stop()


_SCRIPTS = (
    "enqueue", "fetch", "ack", "nack", "dead", "extend", "release", "redrive", "purge",
    "replay", "maintain", "locate", "audit_scan", "audit_confirm",
)  # fmt: skip


def _exercise(queue: Queue, n: int) -> None:
    queue.enqueue_many([EnqueueRequest("t", {"i": i}) for i in range(1000)])
    jobs = queue.fetch(1000).jobs
    leases = [j.lease for j in jobs]
    queue.extend(leases)
    queue.ack(leases[:500])
    for lease in leases[500:510]:
        queue.nack(lease, delay=1)
    for lease in leases[510:520]:
        queue.dead(lease, "error")
    queue.release(leases[520:])
    queue.dead_letters.redrive(ids=[f"d{i:07d}" for i in range(100)])
    queue.dead_letters.purge(ids=[f"d{i:07d}" for i in range(100, 200)])
    queue.replay([f"f{i:07d}" for i in range(100)])
    queue.locate(f"f{0:07d}")  # a finished id: LPOS walks all of ready before done
    audit(queue, step=200, max_steps=50)
    # lower the bounds under the full DLQ and done set: bounded upkeep steps
    low = Queue(
        queue.client,
        "lat",
        settings=QueueSettings(dlq_max_size=1000, job_retention_seconds=0.001),
    )
    low.maintain(max_steps=10)
    jobs = low.fetch(1).jobs
    if jobs:
        low.dead(jobs[0].lease, "error")  # a dead letter's own trim: one bounded step


def main(n: int = 100_000) -> bool:
    """Print the table; True when every script stayed under :data:`LIMIT_MS`."""
    longest = run(n)
    ok = True
    print(f"longest run per script, {n:,} entries in each of ready, done, dead (SLOWLOG):")
    for name in sorted(longest):
        flag = "" if longest[name] <= LIMIT_MS else "  OVER LIMIT"
        ok = ok and not flag
        print(f"  {name:14s} {longest[name]:8.2f} ms{flag}")
    return ok
