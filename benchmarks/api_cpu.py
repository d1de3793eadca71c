"""CPU per placement through the HTTP API, in one process, by CPU time.

``python -m benchmarks.api_cpu [--orders N] [--database sqlite|postgresql]
[--profile TOP]`` builds a fresh database with a small catalog (100 customers,
200 parts), a Redis of its own, and ``orders web``'s ASGI application, then sends
N ``POST /api/v1/orders`` (each a new ``Idempotency-Key``, 1-4 lines) straight into
the ASGI application, one at a time (what Starlette sends to its thread pool runs
inline, so cProfile sees it; the placements are written on the group commit's writer
thread, profiled on its own), and prints the process's CPU milliseconds per placement
(after 50 warm-up placements). No worker runs, no HTTP
server or client: it is what the application spends per order (routing, validation,
auth, the transaction, the publish, the response), so two checkouts compare on a
loaded machine by CPU time where a wall clock cannot. On PostgreSQL the server's
CPU is not counted; on SQLite the database runs in the process and is.
``--profile TOP`` prints cProfile's TOP functions by own time and by cumulative time,
timed by each thread's CPU clock (the event loop's thread and the writer's, merged).
``--clients N`` sends N at once (group commit; the profile then leaves out the sync
dependencies and routes Starlette's thread pool runs).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import json
import pstats
import random
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio.to_thread

from orders.app.bootstrap import build
from orders.app.group_commit import GroupCommit
from orders.app.settings import Settings
from orders.app.tokens import create_token
from orders.sources.catalog import load_catalog
from orders.web.app import create_app
from orders.web.settings import WebSettings
from workflows.uow import UnitOfWork

from .e2e import drop_pg_database, fresh_pg_database
from .server import RedisServer

CUSTOMERS = 100
PARTS = 200
WARM_UP = 50


def _catalog(app: object) -> None:
    load_catalog(
        app.session_factory,  # type: ignore[attr-defined]
        range(1, CUSTOMERS + 1),
        dict.fromkeys(range(1, PARTS + 1), 10**6),
    )


def _bodies(n: int, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = rng.sample(range(1, PARTS + 1), rng.randint(1, 4))
        lines = [{"part_id": p, "quantity": rng.randint(1, 5)} for p in parts]
        out.append(json.dumps({"customer_id": rng.randint(1, CUSTOMERS), "lines": lines}).encode())
    return out


@contextlib.contextmanager
def _profiled_writer(profiles: list[cProfile.Profile]) -> Iterator[None]:
    """Profile each run of the group commit's writer thread (by that thread's CPU time)
    into a new profile added to ``profiles``."""
    drain = GroupCommit._drain

    def profiled(self: GroupCommit[Any, Any]) -> None:
        profile = cProfile.Profile(time.thread_time)
        profiles.append(profile)
        profile.runcall(drain, self)

    GroupCommit._drain = profiled  # type: ignore[method-assign]
    try:
        yield
    finally:
        GroupCommit._drain = drain  # type: ignore[method-assign]


@contextlib.contextmanager
def _inline_threads() -> Iterator[None]:
    """Run what Starlette sends to its thread pool on the calling thread instead."""

    async def inline(func: Callable[..., Any], *args: Any, **_: Any) -> Any:
        return func(*args)

    saved = anyio.to_thread.run_sync
    anyio.to_thread.run_sync = inline  # type: ignore[assignment]
    try:
        yield
    finally:
        anyio.to_thread.run_sync = saved


async def _post(app: Any, headers: list[tuple[bytes, bytes]], key: str, body: bytes) -> None:
    """One ``POST /api/v1/orders`` into the ASGI ``app``; raises unless it answers 201."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/v1/orders",
        "raw_path": b"/api/v1/orders",
        "query_string": b"",
        "root_path": "",
        "headers": [
            *headers,
            (b"idempotency-key", key.encode()),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
    }
    sent = [False]
    replies: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if sent[0]:
            return {"type": "http.disconnect"}
        sent[0] = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        replies.append(message)

    await app(scope, receive, send)
    status = replies[0].get("status")
    if status != 201:
        text = b"".join(m.get("body", b"") for m in replies[1:])
        raise RuntimeError(f"{status}: {text[:300]!r}")


def measure(database: str, orders: int, top: int, clients: int = 1) -> dict[str, object]:
    """Place ``WARM_UP`` + ``orders`` orders; the CPU of the last ``orders``.

    ``clients`` > 1 sends that many requests at once (placements share transactions;
    what Starlette sends to its thread pool runs there, out of the profile).

    Returns:
        ``{"database", "orders", "cpu_ms_per_order", "wall_ms_per_order"}`` and, with
        ``top`` > 0, ``"profile"`` (cProfile's text).
    """
    data_dir = Path(tempfile.mkdtemp(prefix="bench-api-cpu-"))
    url = fresh_pg_database() if database == "postgresql" else f"sqlite:///{data_dir}/orders.db"
    try:
        with RedisServer() as server:
            app = build(
                Settings(redis_url=server.url, database_url=url, data_dir=data_dir),
                auto_migrate=True,
            )
            _catalog(app)
            with UnitOfWork(app.session_factory) as uow:
                token = create_token(uow.session, "bench-shop", "placer")
                uow.commit()
            web = create_app(
                app,
                WebSettings(api_rate_per_second=10**6, api_burst=10**6, allowed_hosts="testserver"),
                multiproc=data_dir / "metrics",
                sample=False,
            )
            bodies = _bodies(WARM_UP + orders)
            headers = [
                (b"host", b"127.0.0.1:8080"),
                (b"authorization", f"Bearer {token}".encode()),
                (b"content-type", b"application/json"),
            ]

            async def send(numbers: range) -> None:
                for i in numbers:
                    await _post(web, headers, f"k{i}", bodies[i])

            async def run(start: int, count: int) -> None:
                # ``clients`` senders at once, each its share (sync routes in the thread pool)
                await asyncio.gather(
                    *(send(range(start + c, start + count, clients)) for c in range(clients))
                )

            writer_profiles: list[cProfile.Profile] = []
            with _inline_threads() if clients == 1 else contextlib.nullcontext():
                loop = asyncio.new_event_loop()
                try:
                    loop.run_until_complete(run(0, WARM_UP))
                    profiler = cProfile.Profile(time.thread_time) if top else None
                    with _profiled_writer(writer_profiles) if top else contextlib.nullcontext():
                        cpu, wall = time.process_time(), time.perf_counter()
                        if profiler:
                            profiler.enable()
                        loop.run_until_complete(run(WARM_UP, orders))
                        if profiler:
                            profiler.disable()
                        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                finally:
                    loop.close()
            app.close()
    finally:
        if database == "postgresql":
            drop_pg_database()
    out: dict[str, object] = {
        "database": database,
        "orders": orders,
        "clients": clients,
        "cpu_ms_per_order": round(1000 * cpu / orders, 3),
        "wall_ms_per_order": round(1000 * wall / orders, 3),
    }
    if profiler:
        text = io.StringIO()
        stats = pstats.Stats(profiler, *writer_profiles, stream=text)
        stats.sort_stats("tottime").print_stats(top)
        stats.sort_stats("cumulative").print_stats(top)
        out["profile"] = text.getvalue()
    return out


def main() -> None:
    """Parse the arguments, measure, print."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.api_cpu", description=__doc__)
    parser.add_argument("--orders", type=int, default=500)
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--profile", type=int, default=0, metavar="TOP")
    parser.add_argument("--clients", type=int, default=1, help="requests at once")
    args = parser.parse_args()
    result = measure(args.database, args.orders, args.profile, args.clients)
    profile = result.pop("profile", None)
    print(json.dumps(result))
    if profile:
        print(profile)


if __name__ == "__main__":
    main()
