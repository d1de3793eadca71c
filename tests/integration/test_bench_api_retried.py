"""The benchmark's retried share against a real ``orders web``: every order abandoned
after a client-side timeout and sent again with its key is placed exactly once."""

from __future__ import annotations

import os
from pathlib import Path

from cli_processes import free_port, start_orders, stop, wait_for_http
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from benchmarks.api_retrier import run_retried
from orders.app.tokens import create_token
from orders.domain.access import ApiOrder
from workflows.uow import UnitOfWork


def test_abandoned_then_retried_orders_are_placed_once(
    redis_url: str,
    key_prefix: str,
    database_url: str,
    session_factory: sessionmaker[Session],
    catalog: dict[int, int],
    tmp_path: Path,
) -> None:
    with UnitOfWork(session_factory) as uow:
        token = create_token(uow.session, "shop", "placer")
        uow.commit()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORDERS_")}
    env |= {
        "ORDERS_DATA_DIR": str(tmp_path / "data"),
        "ORDERS_DATABASE_URL": database_url,
        "ORDERS_REDIS_URL": redis_url,
        "ORDERS_QUEUE_PREFIX": key_prefix,
        "ORDERS_WEB_API_RATE_PER_SECOND": "100000",
        "ORDERS_WEB_API_BURST": "100000",
    }
    port, log = free_port(), tmp_path / "web.log"
    web = start_orders(["web", "--port", str(port)], env, log)
    try:
        wait_for_http(f"http://127.0.0.1:{port}/healthz", web, log, timeout=60)
        seen = run_retried(port, token, 20, 1.5, customer_ids=[1, 2, 3], part_ids=[10, 11, 12, 14])
    finally:
        stop(web)

    assert seen.abandoned >= 10
    assert (seen.failures, seen.gave_up, seen.conflicting) == (0, 0, [])
    assert len(seen.acknowledged) == seen.abandoned
    assert seen.requests >= 2 * seen.abandoned  # each sent at least twice
    with session_factory() as session:
        rows = session.execute(
            select(ApiOrder.idempotency_key, ApiOrder.order_id).where(
                ApiOrder.idempotency_key.like("retried-%")
            )
        ).all()
    # one order per key, and it is the one each key's 201 named
    assert len(rows) == len(seen.acknowledged)
    assert dict(rows) == seen.acknowledged
    assert len(rows) == len({order for _, order in rows})
