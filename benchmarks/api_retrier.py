"""Orders sent, abandoned after a client-side timeout, and sent again with the same key.

The share of ``python -m benchmarks api --client wrk``'s load that checks the
``Idempotency-Key`` rules under load (wrk sends the rest, each order once): each
simulated shop sends an order on a fresh connection, hangs up after ``give_up_ms``
(the server may or may not have placed it), then sends it again with the same key and
body on its kept-alive connection until a 201 comes back (a 409 while the first is in
flight waits 50 ms and tries again, at most 40 tries). The figures say which keys were
acknowledged with which order id, and any key answered with two different ids.
"""

from __future__ import annotations

import http.client
import json
import random
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

TRIES = 40
IN_FLIGHT_PAUSE_SECONDS = 0.05


@dataclass
class Retried:
    """What the shops saw.

    Attributes:
        acknowledged: key -> the order id of its 201.
        conflicting: keys answered with two different order ids (must stay empty).
        abandoned: first tries abandoned after the timeout.
        gave_up: keys never acknowledged within ``TRIES`` tries.
        failures: replies other than 201 and 409 (each ends its key's tries).
        requests: requests sent, abandoned first tries included.
        seconds_to_201: per acknowledged key, seconds from its first send to its 201.
    """

    acknowledged: dict[str, int] = field(default_factory=dict)
    conflicting: list[str] = field(default_factory=list)
    abandoned: int = 0
    gave_up: int = 0
    failures: int = 0
    requests: int = 0
    seconds_to_201: list[float] = field(default_factory=list)


def order_body(rng: random.Random, customer_ids: Sequence[int], part_ids: Sequence[int]) -> bytes:
    """A random order: one of ``customer_ids`` and 1-4 distinct ``part_ids`` (fewer when
    there are fewer), quantities 1-5, as the JSON body of ``POST /api/v1/orders``."""
    chosen = rng.sample(list(part_ids), min(len(part_ids), rng.randint(1, 4)))
    lines = [{"part_id": p, "quantity": rng.randint(1, 5)} for p in chosen]
    return json.dumps({"customer_id": rng.choice(customer_ids), "lines": lines}).encode()


def run_retried(
    port: int,
    token: str,
    rate: float,
    seconds: float,
    *,
    give_up_ms: float = 2.0,
    per_shop: float = 5.0,
    customer_ids: Sequence[int] = range(1, 1501),
    part_ids: Sequence[int] = range(1, 2001),
) -> Retried:
    """Send ``rate`` orders/s for ``seconds``, each abandoned once and then retried.

    Args:
        port: the loopback port of ``orders web``.
        token: a ``placer`` token.
        rate: orders per second over all shops (> 0).
        seconds: how long new orders start, seconds (the last ones may finish later).
        give_up_ms: the client-side timeout of a first try, milliseconds.
        per_shop: orders per second of one shop (thread): shops = rate / per_shop.
        customer_ids: the customers to pick from (default: TPC-H scale 0.01's 1..1500).
        part_ids: the parts to pick from (default: TPC-H scale 0.01's 1..2000).

    Returns:
        the :class:`Retried` figures of every shop together.
    """
    shops = max(1, round(rate / per_shop))
    gap = shops / rate
    result = Retried()
    lock = threading.Lock()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    started = time.monotonic()

    def abandon(key: str, body: bytes) -> None:
        head = "".join(f"{k}: {v}\r\n" for k, v in {**headers, "Idempotency-Key": key}.items())
        raw = (
            f"POST /api/v1/orders HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{head}"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode() + body
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(raw)
            time.sleep(give_up_ms / 1000)

    def shop(seed: int) -> None:
        rng = random.Random(seed)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        due = started + rng.random() * gap
        try:
            while due < started + seconds:
                time.sleep(max(0.0, due - time.monotonic()))
                due += rng.expovariate(1 / gap)
                key, body = f"retried-{uuid.uuid4().hex}", order_body(rng, customer_ids, part_ids)
                first = time.monotonic()
                sent, outcome, order_id = 0, "gave_up", None
                try:
                    abandon(key, body)
                    sent += 1
                    for _ in range(TRIES):
                        sent += 1
                        conn.request(
                            "POST", "/api/v1/orders", body, {**headers, "Idempotency-Key": key}
                        )
                        reply = conn.getresponse()
                        content = reply.read()
                        if reply.status == 201:
                            outcome, order_id = "ok", int(json.loads(content)["id"])
                            break
                        if reply.status == 409:  # the abandoned first try is still in flight
                            time.sleep(IN_FLIGHT_PAUSE_SECONDS)
                            continue
                        outcome = "failed"
                        break
                except (OSError, http.client.HTTPException):
                    outcome = "failed"  # counted; the next order opens a new connection
                    conn.close()
                with lock:
                    result.requests += sent
                    result.abandoned += 1
                    if outcome == "ok" and order_id is not None:
                        if result.acknowledged.setdefault(key, order_id) != order_id:
                            result.conflicting.append(key)
                        result.seconds_to_201.append(time.monotonic() - first)
                    elif outcome == "failed":
                        result.failures += 1
                    else:
                        result.gave_up += 1
        finally:
            conn.close()

    threads = [
        threading.Thread(target=shop, args=(i,), name=f"shop-{i}", daemon=True)
        for i in range(shops)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds + TRIES * 30)
    return result
