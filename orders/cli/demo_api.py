"""``orders demo --via-api``: the demo's orders placed over HTTP, as a shop's checkout does.

The demo serves the application (``orders.web.app``) on a free loopback port in a
thread, creates a placer token for the run, takes the orders of its source (the
TPC-H stream's next ones, or random ones) and posts each to ``POST /api/v1/orders``
with its own ``Idempotency-Key``; one in ten is posted twice with the same key, as a
client that timed out would, and must get the same order back. Eight client threads
post at once (paced to ``--rate`` when given).
"""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from orders.app.bootstrap import App
from orders.app.tokens import create_token
from orders.demo.driver import DemoOptions
from orders.domain.errors import OrdersError
from orders.sources.drafts import TPCH, OrderDraft, next_tpch_drafts, random_drafts
from workflows.uow import UnitOfWork

CLIENTS = 8
"""Requests in flight at once."""
RETRY_SHARE = 0.1
"""Share of the orders posted a second time with the same key."""


class ApiRefused(OrdersError):
    """The API answered an order with something other than 201 (the message says what)."""


def body_of(draft: OrderDraft) -> dict[str, Any]:
    """The API body of a draft: its customer and one line per part (quantities of a part
    named on two lines added up; the API takes one line per part)."""
    quantities: dict[int, int] = {}
    for line in draft.lines:
        quantities[line.part_id] = quantities.get(line.part_id, 0) + line.quantity
    return {
        "customer_id": draft.customer_id,
        "lines": [{"part_id": p, "quantity": q} for p, q in quantities.items()],
    }


def _drafts(app: App, options: DemoOptions) -> list[OrderDraft]:
    with UnitOfWork(app.session_factory) as uow:
        if options.source == TPCH:
            drafts = next_tpch_drafts(uow.session, options.orders)
        else:
            drafts = random_drafts(uow.session, options.orders, random.Random(options.seed))
        uow.commit()  # the stream's cursor moves on, as after `orders place`
    return drafts


class _Server:
    """``orders web``'s application on a free loopback port, served by a thread."""

    def __init__(self, app: App) -> None:
        import uvicorn

        from orders.cli.web import bind_listening
        from orders.web.app import create_app
        from orders.web.settings import WebSettings

        settings = WebSettings(api_rate_per_second=1_000_000, api_burst=1_000_000)
        self.sock = bind_listening("127.0.0.1", 0)
        self.port = self.sock.getsockname()[1]
        config = uvicorn.Config(
            create_app(app, settings, sample=False), log_config=None, log_level="warning"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def __enter__(self) -> _Server:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


def _post(port: int, token: str, body: dict[str, Any], key: str) -> int:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/v1/orders",
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Idempotency-Key": key,
        },
    )
    for _ in range(50):
        try:
            with urllib.request.urlopen(request, timeout=60) as reply:  # noqa: S310 - loopback
                return int(json.loads(reply.read())["id"])
        except urllib.error.HTTPError as exc:
            if exc.code not in (409, 429, 503):  # in flight, rate, a service: try again
                raise ApiRefused(f"POST /api/v1/orders: {exc.code} {exc.read()[:300]!r}") from exc
            time.sleep(0.05)
    raise ApiRefused("POST /api/v1/orders: still refused after 50 tries")


def place_via_api(app: App, options: DemoOptions, on_placed: Callable[[int], None]) -> list[int]:
    """Place the demo's orders over HTTP; return their ids in placement order.

    Raises:
        ApiRefused: an order was refused, or a retry with its key got another order.
    """
    drafts = _drafts(app, options)
    with UnitOfWork(app.session_factory) as uow:
        token = create_token(uow.session, f"demo-{uuid.uuid4().hex[:12]}", "placer")
        uow.commit()
    rng = random.Random(options.seed)
    retried = {i for i in range(len(drafts)) if rng.random() < RETRY_SHARE}
    ids: list[int] = [0] * len(drafts)
    done = [0]
    lock = threading.Lock()
    started = time.monotonic()

    def one(i: int) -> None:
        if options.rate:  # start no sooner than the rate allows
            time.sleep(max(0.0, started + i / options.rate - time.monotonic()))
        key, body = uuid.uuid4().hex, body_of(drafts[i])
        ids[i] = _post(server.port, token, body, key)
        if i in retried and _post(server.port, token, body, key) != ids[i]:
            raise ApiRefused(f"a retry with key {key} got another order than {ids[i]}")
        with lock:
            done[0] += 1
            on_placed(done[0])

    with _Server(app) as server, ThreadPoolExecutor(CLIENTS) as pool:
        for future in [pool.submit(one, i) for i in range(len(drafts))]:
            future.result()
    return ids
