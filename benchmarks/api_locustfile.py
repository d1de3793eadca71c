"""The load of ``python -m benchmarks api``: shops placing orders over HTTP (locust).

Each simulated shop places orders at a constant rate (``BENCH_USER_RATE`` per second)
with a new ``Idempotency-Key`` each; ``BENCH_RETRY_SHARE`` of them are first sent on a
connection the client abandons after ``BENCH_GIVE_UP_MS`` milliseconds (a client-side
timeout: the server may or may not have placed it), then sent again with the same key
and body until a 201 comes back (a 409 while the first is in flight waits 50 ms).
At the end, ``BENCH_OUT`` gets the keys acknowledged and any key answered with two
different order ids.

Run by ``benchmarks.api`` (``python -m locust -f benchmarks/api_locustfile.py ...``).
"""

from __future__ import annotations

import json
import os
import random
import socket
import time
import uuid

import gevent
from locust import FastHttpUser, constant_throughput, events, task

TOKEN = os.environ.get("BENCH_TOKEN", "")
USER_RATE = float(os.environ.get("BENCH_USER_RATE", "5"))
RETRY_SHARE = float(os.environ.get("BENCH_RETRY_SHARE", "0.1"))
GIVE_UP_MS = float(os.environ.get("BENCH_GIVE_UP_MS", "2"))
CUSTOMERS = int(os.environ.get("BENCH_CUSTOMERS", "1500"))
PARTS = int(os.environ.get("BENCH_PARTS", "2000"))
OUT = os.environ.get("BENCH_OUT", "")

acknowledged: dict[str, int] = {}  # key -> order id of its 201
conflicting: list[str] = []  # keys answered with two different ids
abandoned = [0]
gave_up = [0]  # keys never acknowledged (every try failed)


def order_body(rng: random.Random) -> bytes:
    parts = rng.sample(range(1, PARTS + 1), rng.randint(1, 4))
    lines = [{"part_id": p, "quantity": rng.randint(1, 5)} for p in parts]
    return json.dumps({"customer_id": rng.randint(1, CUSTOMERS), "lines": lines}).encode()


class Shop(FastHttpUser):
    """One checkout placing orders at ``USER_RATE`` per second."""

    wait_time = constant_throughput(USER_RATE)

    def _headers(self, key: str) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {TOKEN}",
            "Idempotency-Key": key,
            "Content-Type": "application/json",
        }

    def _abandon(self, key: str, body: bytes) -> None:
        """Send the request on a fresh connection and hang up after ``GIVE_UP_MS``."""
        host, port = self.host.removeprefix("http://").split(":")
        head = "".join(f"{k}: {v}\r\n" for k, v in self._headers(key).items())
        raw = (
            f"POST /api/v1/orders HTTP/1.1\r\nHost: {host}:{port}\r\n{head}"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode() + body
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(raw)
            gevent.sleep(GIVE_UP_MS / 1000)
        abandoned[0] += 1

    @task
    def place(self) -> None:
        rng = random.Random()
        key, body = uuid.uuid4().hex, order_body(rng)
        if rng.random() < RETRY_SHARE:
            self._abandon(key, body)
        for _ in range(40):
            with self.client.post(
                "/api/v1/orders",
                data=body,
                headers=self._headers(key),
                name="POST /api/v1/orders",
                catch_response=True,
            ) as reply:
                if reply.status_code == 201:
                    reply.success()
                    order_id = json.loads(reply.content)["id"]
                    if acknowledged.setdefault(key, order_id) != order_id:
                        conflicting.append(key)
                    return
                if reply.status_code == 409:  # the abandoned first try is still in flight
                    reply.success()
                    gevent.sleep(0.05)
                    continue
                reply.failure(f"{reply.status_code}")
                return
        gave_up[0] += 1


@events.test_stop.add_listener
def _write_out(**_: object) -> None:
    if OUT:
        with open(OUT, "w") as f:
            json.dump(
                {
                    "acknowledged": len(acknowledged),
                    "conflicting": conflicting,
                    "abandoned": abandoned[0],
                    "gave_up": gave_up[0],
                    "written_at": time.time(),
                },
                f,
            )


@events.init.add_listener
def _fresh_clock(**_: object) -> None:
    # gevent's loop caches "now" from when it was created; the imports after that take
    # seconds here, and --run-time's timer, set from the stale "now", fired at once
    gevent.get_hub().loop.update_now()
